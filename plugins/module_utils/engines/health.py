# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One NodeHealthCheck pass against the cluster: read, evaluate (core/remediation/health.py), write, report.

Reads the NodeHealthCheck, every Node, the remediation objects it owns and the NodeMaintenances;
creates the remediation objects for the nodes to remediate (from the template, owned by the
NodeHealthCheck, with upstream's labels and annotations), deletes those of nodes healthy again,
marks timed-out and healthy-delayed ones, updates the status and records events. In check mode
nothing is written.

Every write is conditional on the read it was decided on: a deletion carries the uid and resourceVersion
of the remediation object as listed (DeleteOptions preconditions), the annotation merge patches (on
remediation objects and on the Node) and the status update carry the resourceVersion as read, a create
by name is create-only (a create with ``generateName`` cannot conflict). A refused write (Conflict,
UIDMismatch, the name taken) drops the rest of that evaluation's writes; everything is read again and
evaluated again (at most REEVALUATIONS times per pass, then Conflict). A deletion that meets NotFound
(someone else deleted the object) and a patch of an object gone are left out of the result.
"""

from __future__ import annotations

import contextlib
import copy
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from ..core.maintenance.scheduler import parse_requests
from ..core.node.conditions import set_condition
from ..core.node.errors import NodeopsError
from ..core.node.rfc3339 import format_time
from ..core.remediation import nodelease
from ..core.remediation.health import (
    CONFIRMED_HEALTHY_ANNOTATION,
    CONTROL_PLANE_CR_LABEL,
    HEALTHY_DELAY_ANNOTATION,
    NODE_NAME_ANNOTATION,
    STORM_COOLDOWN_STARTED,
    STORM_ENDED,
    STORM_STARTED,
    TEMPLATE_NAME_ANNOTATION,
    TIMED_OUT_ANNOTATION,
    Code,
    Evaluation,
    RemediationRequest,
    evaluate,
    remediation_node,
)
from ..k8s.client import (
    LEASES,
    NAMESPACES,
    NODE_HEALTH_CHECKS,
    NODE_MAINTENANCES,
    NODES,
    Client,
    Resource,
    is_transient,
    within_deadline,
)
from ..k8s.errors import Conflict, K8sError, MissingResourceType, NotFound
from ..k8s.lease import GuardedClient, Lease, lease_name

PART_OF_LABEL = "app.kubernetes.io/part-of"
PART_OF_VALUE = "node-healthcheck-controller"
MULTIPLE_TEMPLATES_ANNOTATION = "remediation.medik8s.io/multiple-templates-support"
NHC_API_VERSION = "remediation.medik8s.io/v1alpha1"
#: What a node Lease's replace keeps of its metadata as read.
LEASE_METADATA_KEPT = ("ownerReferences", "labels", "annotations")
#: Refused writes per pass: each one a new read of everything and a new evaluation.
REEVALUATIONS = 5
#: Seconds a pass waits for the NodeHealthCheck's Lease by default: longer than the Lease lasts after the last
#: renewal of a pass that died holding it.
LEASE_WAIT = 65.0


class Busy(Conflict):
    """Another pass holds the NodeHealthCheck's Lease: this one wrote nothing."""

    reason = "busy"


def health_lease_name(nhc_name: str) -> str:
    """The name of a NodeHealthCheck's pass Lease."""
    return lease_name("nodeops-health", nhc_name)


def lease_namespace_of(spec: Mapping[str, Any]) -> str:
    """Where a pass keeps its Lease by default: the namespace of the first remediation template (the one its
    remediation objects are created in), else ``default``."""
    refs = [spec.get("remediationTemplate") or {}]
    refs += [(step or {}).get("remediationTemplate") or {} for step in spec.get("escalatingRemediations") or []]
    for ref in refs:
        if ref.get("namespace"):
            return str(ref["namespace"])
    return "default"


class HealthInputError(NodeopsError, ValueError):
    """Input the pass cannot use (a missing NodeHealthCheck or template); the message says what to fix."""


class StaleRead(Conflict):
    """A write of the pass was refused because what it was decided on changed since it was read."""

    def __init__(self, what: str, cause: Conflict) -> None:
        super().__init__(f"{what}: {cause.msg}", cause.status, cause.body)
        self.what = what
        self.cause = cause


def node_leases(leases: Iterable[Mapping[str, Any]]) -> dict[str, nodelease.NodeLease]:
    """The node Leases (``node-<node>``) among ``leases``, by node; HealthInputError naming a field that cannot
    be read."""
    out: dict[str, nodelease.NodeLease] = {}
    for obj in leases:
        if not isinstance(obj, Mapping):
            raise HealthInputError("leases: every item must be a Lease object (a mapping).")
        if not str((obj.get("metadata") or {}).get("name") or "").startswith("node-"):
            continue
        try:
            lease = nodelease.read(obj)
        except nodelease.NodeLeaseError as err:
            raise HealthInputError(str(err)) from err
        out[lease.node] = lease
    return out


def under_maintenance(node_maintenances: Iterable[Mapping[str, Any]]) -> set[str]:
    """Names of the nodes a NodeMaintenance in progress holds."""
    return {r.node_name for r in parse_requests(node_maintenances) if r.holds_node}


def owned_by(obj: Mapping[str, Any], nhc: Mapping[str, Any]) -> bool:
    """Whether ``obj`` has an owner reference to this NodeHealthCheck (by uid, else by kind and name)."""
    meta = nhc.get("metadata") or {}
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("kind") != "NodeHealthCheck" or ref.get("name") != meta.get("name"):
            continue
        if not meta.get("uid") or not ref.get("uid") or ref.get("uid") == meta.get("uid"):
            return True
    return False


def remediation_object(
    request: RemediationRequest,
    template: Mapping[str, Any],
    nhc: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The remediation object upstream makes for ``request`` from ``template`` (a full template object)."""
    tmeta = template.get("metadata") or {}
    kind = request.template.remediation_kind
    annotations = {NODE_NAME_ANNOTATION: request.node, TEMPLATE_NAME_ANNOTATION: request.template.name}
    labels = {PART_OF_LABEL: PART_OF_VALUE}
    if request.control_plane:
        labels[CONTROL_PLANE_CR_LABEL] = ""  # upstream's value; only the key is looked at
    meta: dict[str, Any] = {"namespace": tmeta.get("namespace"), "labels": labels, "annotations": annotations}
    if (tmeta.get("annotations") or {}).get(MULTIPLE_TEMPLATES_ANNOTATION) == "true":
        meta["generateName"] = f"{request.node}-"
    else:
        meta["name"] = request.node
    if nhc is not None:
        nmeta = nhc.get("metadata") or {}
        meta["ownerReferences"] = [
            {
                "apiVersion": nhc.get("apiVersion", NHC_API_VERSION),
                "kind": "NodeHealthCheck",
                "name": nmeta.get("name"),
                "uid": nmeta.get("uid"),
                "controller": False,
                "blockOwnerDeletion": False,
            }
        ]
    spec = ((template.get("spec") or {}).get("template") or {}).get("spec") or {}
    return {"apiVersion": template.get("apiVersion"), "kind": kind, "metadata": meta, "spec": dict(spec)}


#: the status fields about the nodes, which only a check that is neither disabled nor paused writes
NODE_FIELDS = ("observedNodes", "healthyNodes", "unhealthyNodes", "inFlightRemediations")


def build_status(
    old: Mapping[str, Any],
    evaluation: Evaluation,
    remediations: Sequence[Mapping[str, Any]],
    now: float,
    disabled_reason: str | None = None,
    disabled_message: str = "",
) -> dict[str, Any]:
    """The NodeHealthCheck status after ``evaluation`` (``remediations``: its objects after the writes).

    ``lastUpdateTime`` and condition transition times change only when something else changed.
    """
    stamp = format_time(now)
    by_node: dict[str, list[Mapping[str, Any]]] = {}
    for rem in remediations:
        by_node.setdefault(remediation_node(rem), []).append(rem)
    old_unhealthy = {u.get("name"): u for u in old.get("unhealthyNodes") or [] if isinstance(u, Mapping)}
    unhealthy: list[dict[str, Any]] = []
    in_flight: dict[str, str] = {}
    for decision in evaluation.decisions:
        rems = by_node.get(decision.node, [])
        if not decision.unhealthy and not rems:
            continue
        entry: dict[str, Any] = {"name": decision.node}
        listed = []
        for rem in sorted(rems, key=lambda r: str((r.get("metadata") or {}).get("creationTimestamp", ""))):
            meta = rem.get("metadata") or {}
            annotations = meta.get("annotations") or {}
            item: dict[str, Any] = {
                "resource": {
                    "apiVersion": rem.get("apiVersion"),
                    "kind": rem.get("kind"),
                    "namespace": meta.get("namespace"),
                    "name": meta.get("name"),
                    "uid": meta.get("uid"),
                },
                "started": meta.get("creationTimestamp") or stamp,
            }
            if annotations.get(TEMPLATE_NAME_ANNOTATION):
                item["templateName"] = annotations[TEMPLATE_NAME_ANNOTATION]
            if annotations.get(TIMED_OUT_ANNOTATION):
                item["timedOut"] = annotations[TIMED_OUT_ANNOTATION]
            listed.append(item)
            in_flight.setdefault(decision.node, item["started"])
        if listed:
            entry["remediations"] = listed
        if not decision.unhealthy:
            before = old_unhealthy.get(decision.node) or {}
            entry["conditionsHealthyTimestamp"] = before.get("conditionsHealthyTimestamp") or stamp
            if decision.code == Code.HEALTHY_DELAYED or any(
                HEALTHY_DELAY_ANNOTATION in ((r.get("metadata") or {}).get("annotations") or {}) for r in rems
            ):
                entry["healthyDelayed"] = True
        unhealthy.append(entry)

    if disabled_reason:
        phase, reason = "Disabled", f"{disabled_reason}: {disabled_message}"
        condition = {"type": "Disabled", "status": "True", "reason": disabled_reason, "message": disabled_message}
    else:
        if evaluation.paused:
            phase = "Paused"
        elif any(e.get("remediations") for e in unhealthy):
            phase = "Remediating"
        else:
            phase = "Enabled"
        reason = {
            "Paused": f"NHC is paused: {', '.join(evaluation.pause_requests)}",
            "Remediating": f"NHC is remediating {len(unhealthy)} node(s)",
            "Enabled": "NHC is enabled, no ongoing remediation",
        }[phase]
        condition = {
            "type": "Disabled",
            "status": "False",
            "reason": "NodeHealthCheckEnabled",
            "message": "No issues found, NodeHealthCheck is enabled.",
        }
    conditions = [dict(c) for c in old.get("conditions") or [] if isinstance(c, Mapping)]
    changes = [condition, *([] if disabled_reason else [c.as_dict() for c in evaluation.storm.conditions])]
    for change in changes:  # upstream decides nothing but Disabled for a disabled NodeHealthCheck
        set_condition(conditions, change["type"], change["status"], change["reason"], change["message"], stamp)

    status: dict[str, Any] = {
        "observedNodes": evaluation.observed,
        "healthyNodes": evaluation.healthy,
        "unhealthyNodes": unhealthy,
        "inFlightRemediations": in_flight,
        "phase": phase,
        "reason": reason,
        "conditions": conditions,
    }
    if disabled_reason or evaluation.paused:
        # As upstream: a disabled or paused check stops before it looks at the nodes, so what the status said
        # of them stays as it was (a paused check does not list the unhealthy nodes it leaves alone).
        for key in NODE_FIELDS:
            if key in old:
                status[key] = old[key]
            else:
                del status[key]
    unchanged = {k: old.get(k) for k in status} == status
    status["lastUpdateTime"] = old.get("lastUpdateTime") if unchanged and old.get("lastUpdateTime") else stamp
    return status


def remediations_after(
    remediations: Sequence[Mapping[str, Any]], evaluation: Evaluation, now: float
) -> list[dict[str, Any]]:
    """The remediation objects as ``evaluation``'s writes would leave them, for the status a pass that writes
    nothing shows (check mode, offline): its deletions gone (or, for an object a finalizer holds, marked deleted
    at ``now``, as the API server keeps it until the finalizer goes), its marks added, and each new object as
    made at ``now`` (named after its node; a generated name and the UID are the API server's)."""
    gone = {(r.namespace, r.name) for r in evaluation.to_delete}
    marks: dict[tuple[str, str], dict[str, str]] = {}
    for refs, annotation in (
        (evaluation.to_mark_timed_out, TIMED_OUT_ANNOTATION),
        (evaluation.to_mark_healthy, HEALTHY_DELAY_ANNOTATION),
    ):
        for ref in refs:
            marks.setdefault((ref.namespace, ref.name), {})[annotation] = format_time(now)
    after: list[dict[str, Any]] = []
    for rem in remediations:
        meta = rem.get("metadata") or {}
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        if key in gone:
            if not meta.get("finalizers"):
                continue
            meta = {**meta, "deletionTimestamp": meta.get("deletionTimestamp") or format_time(now)}
            rem = {**rem, "metadata": meta}
        if key in marks:
            annotations = {**(meta.get("annotations") or {}), **marks[key]}
            rem = {**rem, "metadata": {**meta, "annotations": annotations}}
        after.append(dict(rem))
    for request in evaluation.to_remediate:
        source = request.template.reference
        after.append(
            {
                "apiVersion": source.get("apiVersion"),
                "kind": request.template.remediation_kind,
                "metadata": {
                    "name": request.node,
                    "namespace": source.get("namespace"),
                    "creationTimestamp": format_time(now),
                    "annotations": {
                        NODE_NAME_ANNOTATION: request.node,
                        TEMPLATE_NAME_ANNOTATION: request.template.name,
                    },
                },
            }
        )
    return after


@dataclass
class PassResult:
    evaluation: Evaluation
    created: list[dict[str, Any]] = field(default_factory=list)  # {node, kind, namespace, name}
    deleted: list[dict[str, Any]] = field(default_factory=list)
    marked: list[dict[str, Any]] = field(default_factory=list)  # {node, name, annotation}
    leases: list[dict[str, Any]] = field(default_factory=list)  # node Leases taken, renewed, given up
    status: dict[str, Any] | None = None
    status_changed: bool = False
    events: list[dict[str, str]] = field(default_factory=list)  # {reason, type, message}
    disabled: str | None = None
    disabled_reason: str | None = None  # the Disabled condition's reason (default RemediationTemplateNotFound)
    rereads: int = 0  # writes refused as decided on a stale read: each one a new read and evaluation

    @property
    def changed(self) -> bool:
        return bool(self.created or self.deleted or self.marked or self.leases or self.status_changed)


def skipped(evaluation: Evaluation) -> dict[str, dict[str, str]]:
    """Unhealthy nodes not remediated in this pass: node -> {code, reason}."""
    return {
        d.node: {"code": d.code, "reason": d.reason}
        for d in evaluation.decisions
        if d.unhealthy and d.code not in (Code.REMEDIATE, Code.ESCALATE, Code.REMEDIATING)
    }


#: The events of storm recovery's transitions, as upstream records them.
STORM_EVENTS: dict[str, dict[str, str]] = {
    STORM_STARTED: {
        "reason": STORM_STARTED,
        "type": "Warning",
        "message": "Storm recovery mode activated - delaying remediation until threshold is reached",
    },
    STORM_COOLDOWN_STARTED: {
        "reason": STORM_COOLDOWN_STARTED,
        "type": "Warning",
        "message": "Storm recovery mode will exit after cooldown delay",
    },
    STORM_ENDED: {
        "reason": STORM_ENDED,
        "type": "Normal",
        "message": "Storm recovery mode deactivated - normal remediation resumed",
    },
}


def evaluation_events(evaluation: Evaluation, created_nodes: set[str], storm: bool = True) -> list[dict[str, str]]:
    """Events upstream records for a pass: DetectedUnhealthy and RemediationCreated for new remediations,
    RemediationSkipped (Warning) for unhealthy nodes left alone, InvalidNodeLabel for messages."""
    events: list[dict[str, str]] = []
    for d in evaluation.decisions:
        if d.node in created_nodes:
            events.append({"reason": "DetectedUnhealthy", "type": "Normal", "message": f"Node {d.node}: {d.reason}"})
            events.append(
                {"reason": "RemediationCreated", "type": "Normal", "message": f"Created remediation for node {d.node}"}
            )
        elif d.code in (
            Code.SKIPPED_MIN_HEALTHY,
            Code.SKIPPED_CONTROL_PLANE,
            Code.SKIPPED_MAINTENANCE,
            Code.SKIPPED_EXCLUDED,
        ):
            events.append({"reason": "RemediationSkipped", "type": "Warning", "message": f"Node {d.node}: {d.reason}"})
        elif d.code == Code.SKIPPED_LEASE:
            message = f"Skipped remediation of node: {d.node}, because node lease is already taken"
            events.append({"reason": "RemediationSkipped", "type": "Warning", "message": message})
        elif d.code == Code.NO_TEMPLATE_LEFT:
            events.append({"reason": "NoTemplateLeft", "type": "Warning", "message": f"Node {d.node}: {d.reason}"})
    for message in evaluation.messages:
        events.append({"reason": "InvalidNodeLabel", "type": "Warning", "message": message})
    if not storm:
        return events
    events.extend(STORM_EVENTS[reason] for reason in evaluation.storm.events)
    if evaluation.storm.blocked:
        events.append(
            {
                "reason": "RemediationSkipped",
                "type": "Warning",
                "message": "Storm recovery active: skipping creation of new remediations",
            }
        )
    return events


def offline_pass(
    spec: Mapping[str, Any],
    nodes: Sequence[Mapping[str, Any]],
    remediations: Sequence[Mapping[str, Any]],
    now: float | None,
    maintenance: Iterable[str] = (),
    status: Mapping[str, Any] | None = None,
    leases: Iterable[Mapping[str, Any]] = (),
    name: str = "",
) -> PassResult:
    """A pass over objects given as data, writing nothing: what it would create, delete and mark, the node Leases
    it would take, renew and give up (as the NodeHealthCheck ``name``), its events, and (with the
    NodeHealthCheck's ``status`` as read) the status it would write. ``now``: seconds since the epoch; None reads
    the clock."""
    if now is None:
        now = time.time()
    old = status or {}
    if not isinstance(old, Mapping):
        raise HealthInputError("status: must be a mapping (the status of the NodeHealthCheck as read).")
    leases = list(leases)
    if leases and not name:
        raise HealthInputError(
            "leases: give name too, the NodeHealthCheck whose node Leases they may be (held as NodeHealthCheck-<name>)."
        )
    held = node_leases(leases) if name else None  # as a live pass of a spec without a NodeHealthCheck
    holder = nodelease.holder_for(name) if name else ""
    evaluation = evaluate(spec, nodes, remediations, now, maintenance, old.get("conditions") or [], held, holder)
    result = PassResult(evaluation)
    result.leases = [w.as_dict() for w in in_write_order(evaluation.lease_writes)]
    for request in evaluation.to_remediate:
        ref = request.template.reference
        result.created.append(
            {
                "node": request.node,
                "kind": request.template.remediation_kind,
                "namespace": ref.get("namespace", ""),
                "name": request.node,
            }
        )
    result.deleted = [r.as_dict() for r in evaluation.to_delete]
    for refs, annotation in (
        (evaluation.to_mark_timed_out, TIMED_OUT_ANNOTATION),
        (evaluation.to_mark_healthy, HEALTHY_DELAY_ANNOTATION),
    ):
        result.marked.extend({"node": ref.node, "name": ref.name, "annotation": annotation} for ref in refs)
    result.events = pass_events(result)
    if status is not None:
        result.status = build_status(old, evaluation, remediations_after(remediations, evaluation, now), now)
        result.status_changed = result.status != {k: old.get(k) for k in result.status}
    return result


def in_write_order(writes: Iterable[nodelease.LeaseWrite]) -> list[nodelease.LeaseWrite]:
    """Node Lease writes in the order a pass makes them: the Leases taken (before the remediation objects are
    created), then those renewed and given up (after the other writes)."""
    writes = list(writes)
    return [w for w in writes if w.action == "take"] + [w for w in writes if w.action != "take"]


def pass_events(result: PassResult) -> list[dict[str, str]]:
    """The events of a pass, from what it wrote (or would write): the evaluation's, one RemediationRemoved per
    deletion, and Disabled (a disabled NodeHealthCheck changes no storm state, so it records no storm event)."""
    events = evaluation_events(result.evaluation, {c["node"] for c in result.created}, storm=not result.disabled)
    for deleted in result.deleted:
        events.append(
            {
                "reason": "RemediationRemoved",
                "type": "Normal",
                "message": f"Deleted remediation {deleted['kind']} {deleted['namespace']}/{deleted['name']} "
                f"of node {deleted['node']}",
            }
        )
    if result.disabled:
        events.append({"reason": "Disabled", "type": "Warning", "message": result.disabled})
    return events


class HealthPass:
    """One pass for the NodeHealthCheck ``name`` (or a ``spec`` given as data, which writes nothing)."""

    def __init__(
        self,
        client: Client,
        check_mode: bool = False,
        emit_events: bool = True,
        lease_namespace: str | None = None,
        lease_wait: float = LEASE_WAIT,
        node_lease_namespace: str = nodelease.NAMESPACE,
    ) -> None:
        self.client = client
        self.check_mode = check_mode
        self.emit_events = emit_events
        self.lease_namespace = lease_namespace
        self.lease_wait = lease_wait
        self.node_lease_namespace = node_lease_namespace
        #: what went wrong beside the writes (a Lease renewal the API did not answer)
        self.warnings: list[str] = []
        self._resources: dict[tuple[str, str], Resource] = {}

    def _resource(self, api_version: str, kind: str) -> Resource:
        key = (api_version, kind)
        if key not in self._resources:
            self._resources[key] = self.client.resource_for(api_version, kind)
        return self._resources[key]

    def _templates(self, spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        if spec.get("remediationTemplate"):
            return [spec["remediationTemplate"]]
        return [step.get("remediationTemplate") or {} for step in spec.get("escalatingRemediations") or []]

    def _shared_kind_problem(self, spec: Mapping[str, Any]) -> str | None:
        """Escalation steps whose templates share a kind make objects of one kind for one node, so each such
        template must carry the multiple-templates annotation (their objects then get generated names); else
        they would collide on the node's name. What is wrong, or None."""
        refs = self._templates(spec)
        kinds = [str(ref.get("kind", "")) for ref in refs]
        for ref in refs:
            if kinds.count(str(ref.get("kind", ""))) < 2:
                continue
            try:
                template = self._read_template(ref)
            except (NotFound, MissingResourceType):
                continue  # a missing one disables the NodeHealthCheck when a node needs it
            if ((template.get("metadata") or {}).get("annotations") or {}).get(MULTIPLE_TEMPLATES_ANNOTATION) != "true":
                return (
                    f"template {ref.get('kind')} {ref.get('namespace')}/{ref.get('name')} shares its kind with another"
                    f' escalation step but lacks the annotation {MULTIPLE_TEMPLATES_ANNOTATION}: "true" (without it'
                    " both steps' objects would be named after the node)"
                )
        return None

    def _read_template(self, ref: Mapping[str, Any]) -> dict[str, Any]:
        res = self._resource(str(ref.get("apiVersion", "")), str(ref.get("kind", "")))
        return self.client.get(res, str(ref.get("name")), ref.get("namespace"))

    def remediations(self, spec: Mapping[str, Any], nhc: Mapping[str, Any] | None) -> list[dict[str, Any]]:
        """The remediation objects of the spec's template kinds owned by ``nhc`` (all of them without one)."""
        out: list[dict[str, Any]] = []
        seen: set[tuple[str, str, str]] = set()
        for ref in self._templates(spec):
            kind = str(ref.get("kind", ""))
            kind = kind[: -len("Template")] if kind.endswith("Template") else kind
            key = (str(ref.get("apiVersion", "")), kind, str(ref.get("namespace") or ""))
            if key in seen:
                continue
            seen.add(key)
            try:
                res = self._resource(key[0], kind)
            except (MissingResourceType, NotFound):
                continue
            for item in self.client.list(res, namespace=key[2] or None)["items"]:
                item.setdefault("apiVersion", key[0])
                item.setdefault("kind", kind)
                if nhc is None or owned_by(item, nhc):
                    out.append(item)
        return out

    def maintenance(self) -> set[str]:
        try:
            items = self.client.list(NODE_MAINTENANCES)["items"]
        except (MissingResourceType, NotFound):
            return set()
        return under_maintenance(items)

    def _read_nhc(self, name: str) -> dict[str, Any]:
        try:
            return self.client.get(NODE_HEALTH_CHECKS, name)
        except NotFound:
            raise HealthInputError(
                f"NodeHealthCheck {name!r} does not exist; check the name with 'kubectl get nhc'."
            ) from None

    def run(self, name: str | None, spec: Mapping[str, Any] | None, now: Callable[[], float] = time.time) -> PassResult:
        """One pass at the time ``now`` reads (seconds since the epoch); a pass that writes holds the
        NodeHealthCheck's Lease (see :meth:`_run`): two passes at once would each decide on a read the other is
        changing (two remediation objects for one node)."""
        if not name or self.check_mode:
            return self._run(name, spec, now)
        nhc = self._read_nhc(name)
        namespace = self.lease_namespace or lease_namespace_of(nhc.get("spec") or {})
        lease = Lease(self.client, health_lease_name(name), namespace)
        if not lease.acquire(self.lease_wait):
            raise Busy(
                f"Another node_health pass ({lease.holder}) holds Lease {namespace}/{lease.name} of NodeHealthCheck"
                f" {name} (waited {self.lease_wait:g} s); nothing was written. Run again, or raise lease_wait.",
                409,
                None,
            )
        reader = self.client
        self.client = cast(Client, GuardedClient(reader, lease))
        try:
            with lease.kept(self.warnings.append):
                return self._run(name, spec, now)
        finally:
            self.client = reader
            if not lease.release(retry_for=10.0):
                self.warnings.append(f"Lease {namespace}/{lease.name} could not be given up; it expires by itself.")

    def _run(self, name: str | None, spec: Mapping[str, Any] | None, now: Callable[[], float]) -> PassResult:
        """Read, evaluate and write until a whole evaluation's writes went through (or wrote nothing).

        Every write carries a precondition on the object as read (see the module docstring); when one is refused
        (Conflict, UIDMismatch, a by-name create that meets an existing object) the rest of that evaluation's
        writes are dropped, everything is read again and the evaluation made again: what was written before is
        part of that read. More than REEVALUATIONS refusals in one pass: Conflict, naming what kept changing.
        """
        done = _Done()
        refused: list[StaleRead] = []
        while True:
            try:
                result, nhc = self._evaluate_and_write(name, spec, now, done)
            except StaleRead as exc:
                refused.append(exc)
                if len(refused) > REEVALUATIONS:
                    raise Conflict(_gave_up(name or "", refused), 409) from None  # the message names each refusal
                continue
            break
        result.rereads = len(refused)

        result.events = pass_events(result)
        if nhc is not None and not self.check_mode and self.emit_events:
            for event in result.events:
                self.client.create_event(nhc, event["reason"], event["message"], event["type"])
        return result

    def _evaluate_and_write(
        self, name: str | None, spec: Mapping[str, Any] | None, now: Callable[[], float], done: _Done
    ) -> tuple[PassResult, dict[str, Any] | None]:
        """One read, one evaluation and its writes (recorded in ``done`` as each one goes through).

        Raises StaleRead when a write is refused because what it was decided on changed since it was read.
        """
        nhc: dict[str, Any] | None = None
        if name:
            nhc = self._read_nhc(name)
            spec = nhc.get("spec") or {}
        if spec is None:
            raise HealthInputError("give the name of a NodeHealthCheck or its spec.")
        nodes = self.client.list(NODES)["items"]
        rems = self.remediations(spec, nhc)
        held = self.maintenance()
        moment = now()
        conditions = ((nhc or {}).get("status") or {}).get("conditions") or []
        leases = node_leases(self.client.list(LEASES, self.node_lease_namespace)["items"]) if name else None
        holder = nodelease.holder_for(name or "")
        evaluation = evaluate(spec, nodes, rems, moment, held, conditions, leases, holder)
        result = PassResult(evaluation)
        writes = nhc is not None and not self.check_mode

        # Templates: a missing one disables the NodeHealthCheck (upstream: RemediationTemplateNotFound).
        templates: dict[str, dict[str, Any]] = {}
        for request in evaluation.to_remediate:
            ref = request.template.reference
            key = f"{ref.get('namespace')}/{ref.get('kind')}/{ref.get('name')}"
            if key in templates:
                continue
            try:
                templates[key] = self._read_template(ref)
            except (NotFound, MissingResourceType):
                result.disabled = f"template {ref.get('kind')} {ref.get('namespace')}/{ref.get('name')} not found"
                break
        if result.disabled is None and evaluation.to_remediate:
            result.disabled = self._shared_kind_problem(spec)
            if result.disabled:
                result.disabled_reason = "RemediationTemplateInvalid"

        if result.disabled is None:
            if writes:
                self._write(evaluation, templates, nhc, nodes, moment, done)
            else:
                self._show(evaluation, templates, nhc, moment, result)
        result.created.extend(done.created)
        result.deleted.extend(done.deleted)
        result.marked.extend(done.marked)
        # a Lease written again after a re-read (taken, then found taken by this pass) is listed once, as last written
        result.leases.extend({(w["node"], w["action"]): w for w in done.leases}.values())

        if nhc is not None:
            if writes:
                rems = self.remediations(spec, nhc)
            elif result.disabled is None:  # a disabled NodeHealthCheck writes nothing
                rems = remediations_after(rems, evaluation, moment)
            self._status(nhc, name or "", evaluation, rems, moment, writes, result)
        return result, nhc

    def _show(
        self,
        evaluation: Evaluation,
        templates: Mapping[str, Mapping[str, Any]],
        nhc: Mapping[str, Any] | None,
        moment: float,
        result: PassResult,
    ) -> None:
        """What the writes would be (check mode, or a spec given as data): recorded in ``result``, nothing sent."""
        result.leases.extend(w.as_dict() for w in in_write_order(evaluation.lease_writes))
        for request in evaluation.to_remediate:
            body = remediation_object(request, templates[_template_key(request)], nhc)
            result.created.append(_shown(request, body))
        result.deleted.extend(ref.as_dict() for ref in evaluation.to_delete)
        for refs, annotation in (
            (evaluation.to_mark_timed_out, TIMED_OUT_ANNOTATION),
            (evaluation.to_mark_healthy, HEALTHY_DELAY_ANNOTATION),
        ):
            result.marked.extend({"node": ref.node, "name": ref.name, "annotation": annotation} for ref in refs)

    def _write(
        self,
        evaluation: Evaluation,
        templates: Mapping[str, Mapping[str, Any]],
        nhc: Mapping[str, Any] | None,
        nodes: Sequence[Mapping[str, Any]],
        moment: float,
        done: _Done,
    ) -> None:
        """The writes of ``evaluation``, each conditional on the read it was decided on; each one that goes
        through is recorded in ``done`` at once, so a StaleRead raised by a later one leaves an honest record.
        A node's Lease is taken before its remediation object is created, and renewed or given up after the rest."""
        node_uids = {
            str((n.get("metadata") or {}).get("name")): str((n.get("metadata") or {}).get("uid") or "") for n in nodes
        }
        ordered = in_write_order(evaluation.lease_writes)
        for write in ordered:
            if write.action == "take":
                self._write_lease(write, node_uids.get(write.node, ""), moment, done)
        for request in evaluation.to_remediate:
            body = remediation_object(request, templates[_template_key(request)], nhc)
            shown = _shown(request, body)
            res = self._resource(body["apiVersion"], body["kind"])
            # No precondition is possible on a create: by name it is create-only (409 when an object of that name
            # exists: someone made it since the list, so decide again). A generated name never conflicts, so
            # that create is sent once: after a failure that may hide an object made (an answer lost), the
            # pass reads again instead of sending it again.
            what = f"create {body['kind']} {shown['namespace']}/{shown['name']}"
            generated = not body["metadata"].get("name")
            once = within_deadline(self.client, time.monotonic()) if generated else contextlib.nullcontext()
            with _stale_on_conflict(what), _stale_on_unsure(what, generated), once:
                made = self.client.create(res, body, body["metadata"]["namespace"])
            shown["name"] = made["metadata"]["name"]
            done.created.append(shown)
        for ref in evaluation.to_delete:
            res = self._resource(ref.api_version, ref.kind)
            try:
                with _stale_on_conflict(f"delete {ref.kind} {ref.namespace}/{ref.name}"):
                    self.client.delete(
                        res, ref.name, ref.namespace, uid=ref.uid or None, resource_version=ref.resource_version or None
                    )
            except NotFound:
                continue  # already gone (someone else deleted it): not a deletion of this pass
            done.deleted.append(ref.as_dict())
        for refs, annotation in (
            (evaluation.to_mark_timed_out, TIMED_OUT_ANNOTATION),
            (evaluation.to_mark_healthy, HEALTHY_DELAY_ANNOTATION),
        ):
            for ref in refs:
                patch = _conditional({"annotations": {annotation: format_time(moment)}}, ref.resource_version)
                try:
                    with _stale_on_conflict(f"annotate {ref.kind} {ref.namespace}/{ref.name} ({annotation})"):
                        self.client.patch(self._resource(ref.api_version, ref.kind), ref.name, patch, ref.namespace)
                except NotFound:
                    continue
                done.marked.append({"node": ref.node, "name": ref.name, "annotation": annotation})
        versions = {
            str((n.get("metadata") or {}).get("name")): str((n.get("metadata") or {}).get("resourceVersion") or "")
            for n in nodes
        }
        for node in evaluation.confirmations_to_clear:
            patch = _conditional({"annotations": {CONFIRMED_HEALTHY_ANNOTATION: None}}, versions.get(node, ""))
            try:
                with _stale_on_conflict(f"remove the annotation {CONFIRMED_HEALTHY_ANNOTATION} of Node {node}"):
                    self.client.patch(NODES, node, patch)
            except NotFound:
                continue  # the Node is gone, and its annotation with it
        for write in ordered:
            if write.action != "take":
                self._write_lease(write, node_uids.get(write.node, ""), moment, done)

    def _write_lease(self, write: nodelease.LeaseWrite, node_uid: str, moment: float, done: _Done) -> None:
        """One node Lease write, conditional on the Lease as read: created (the namespace too, when missing),
        replaced on its resourceVersion, or deleted on its uid and resourceVersion."""
        namespace, name = self.node_lease_namespace, nodelease.name_for(write.node)
        what = f"{write.action} node Lease {namespace}/{name}"
        current = write.current
        if write.action == "release":
            if current is None:
                return
            try:
                with _stale_on_conflict(what):
                    self.client.delete(
                        LEASES,
                        name,
                        namespace,
                        uid=current.uid or None,
                        resource_version=current.resource_version or None,
                    )
            except NotFound:
                return  # already given up (or expired and deleted by someone else)
            done.leases.append(write.as_dict())
            return
        # a replace keeps what the Lease carries besides its spec (the owner reference to its Node, labels)
        kept = {k: v for k, v in (current.metadata if current else {}).items() if k in LEASE_METADATA_KEPT}
        body: dict[str, Any] = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {**copy.deepcopy(kept), "name": name, "namespace": namespace},
            "spec": nodelease.spec_after(write, moment),
        }
        if current is None:
            if node_uid:
                body["metadata"]["ownerReferences"] = [
                    {"apiVersion": "v1", "kind": "Node", "name": write.node, "uid": node_uid}
                ]
            with _stale_on_conflict(what):
                try:
                    self.client.create(LEASES, body, namespace)
                except NotFound:  # the namespace is missing: made, as upstream does
                    with contextlib.suppress(Conflict):
                        self.client.create(
                            NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
                        )
                    self.client.create(LEASES, body, namespace)
        else:
            body["metadata"]["resourceVersion"] = current.resource_version
            with _stale_on_conflict(what):
                try:
                    self.client.replace(LEASES, body)
                except NotFound as exc:  # deleted since the read: decide again
                    raise StaleRead(what, Conflict(exc.msg, 409, exc.body)) from None
        done.leases.append(write.as_dict())

    def _status(
        self,
        nhc: dict[str, Any],
        name: str,
        evaluation: Evaluation,
        rems: Sequence[Mapping[str, Any]],
        moment: float,
        writes: bool,
        result: PassResult,
    ) -> None:
        """The status from this evaluation, written (when it changed) on the NodeHealthCheck's version as read
        for it: a Conflict (the NodeHealthCheck changed since, its spec maybe) is a StaleRead."""
        disabled = (result.disabled_reason or "RemediationTemplateNotFound") if result.disabled else None
        old = nhc.get("status") or {}
        status = build_status(old, evaluation, rems, moment, disabled, result.disabled or "")
        result.status = status
        result.status_changed = status != {k: old.get(k) for k in status}
        if not result.status_changed or not writes:
            return
        body = dict(nhc)
        body["status"] = status
        with _stale_on_conflict(f"update NodeHealthCheck {name} status"):
            updated = self.client.replace(NODE_HEALTH_CHECKS, body, subresource="status")
        nhc.clear()
        nhc.update(updated)


@dataclass
class _Done:
    """What a pass wrote so far, over all its evaluations (a write that went through stays written)."""

    created: list[dict[str, Any]] = field(default_factory=list)
    deleted: list[dict[str, Any]] = field(default_factory=list)
    marked: list[dict[str, Any]] = field(default_factory=list)
    leases: list[dict[str, Any]] = field(default_factory=list)


def _template_key(request: RemediationRequest) -> str:
    ref = request.template.reference
    return f"{ref.get('namespace')}/{ref.get('kind')}/{ref.get('name')}"


def _shown(request: RemediationRequest, body: Mapping[str, Any]) -> dict[str, Any]:
    meta = body["metadata"]
    return {
        "node": request.node,
        "kind": body["kind"],
        "namespace": meta["namespace"],
        "name": meta.get("name") or meta["generateName"],
    }


def _conditional(metadata: dict[str, Any], resource_version: str) -> dict[str, Any]:
    """A merge patch of ``metadata`` that holds the resourceVersion as read: refused (Conflict) when the object
    changed since. Without a version (an object given without one) the patch is unconditional."""
    if resource_version:
        metadata = {**metadata, "resourceVersion": resource_version}
    return {"metadata": metadata}


@contextlib.contextmanager
def _stale_on_conflict(what: str) -> Iterator[None]:
    """A Conflict (a changed resourceVersion, a UID that is another object's now, a name taken) raised by the
    write ``what`` becomes a StaleRead: the decision was made on a read that is out of date."""
    try:
        yield
    except Conflict as exc:
        raise StaleRead(what, exc) from exc


@contextlib.contextmanager
def _stale_on_unsure(what: str, applies: bool) -> Iterator[None]:
    """When ``applies``, a transient failure of the write ``what`` (it may have taken effect) becomes a
    StaleRead: read again to see."""
    try:
        yield
    except K8sError as exc:
        if not applies or not is_transient(exc):
            raise
        unsure = Conflict(f"no answer, so whether it took effect is read again ({exc.msg})", exc.status, exc.body)
        raise StaleRead(what, unsure) from exc


def _gave_up(name: str, refused: Sequence[StaleRead]) -> str:
    counts: dict[str, int] = {}
    for stale in refused:
        counts[stale.what] = counts.get(stale.what, 0) + 1
    kept = "; ".join(f"{what} ({count}x)" for what, count in counts.items())
    last = refused[-1].cause.msg.rstrip(".")
    return (
        f"NodeHealthCheck {name}: what this pass writes kept changing while it wrote it; after {REEVALUATIONS} "
        f"re-reads and new evaluations a write was still refused as decided on a stale read. Refused: {kept}. "
        f"Last answer: {last}. Another writer is changing these objects (another node_health "
        "pass, the NodeHealthCheck operator, a controller of the remediation objects); what was written before "
        "stays written, and the next pass goes on from it."
    )
