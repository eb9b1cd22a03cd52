# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One NodeHealthCheck pass against the cluster: read, evaluate (core/health.py), write, report.

Reads the NodeHealthCheck, every Node, the remediation objects it owns and the NodeMaintenances;
creates the remediation objects for the nodes to remediate (from the template, owned by the
NodeHealthCheck, with upstream's labels and annotations), deletes those of nodes healthy again,
marks timed-out and healthy-delayed ones, updates the status conditionally (resourceVersion; a
conflict is retried after a re-read) and records events. In check mode nothing is written.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..core.health import (
    CONFIRMED_HEALTHY_ANNOTATION,
    CONTROL_PLANE_CR_LABEL,
    HEALTHY_DELAY_ANNOTATION,
    NODE_NAME_ANNOTATION,
    TEMPLATE_NAME_ANNOTATION,
    TIMED_OUT_ANNOTATION,
    Code,
    Evaluation,
    RemediationRef,
    RemediationRequest,
    evaluate,
    format_time,
    remediation_node,
)
from ..core.scheduler import parse_requests
from ..k8s.client import NODE_HEALTH_CHECKS, NODE_MAINTENANCES, NODES, Client, Resource
from ..k8s.errors import Conflict, MissingResourceType, NotFound

PART_OF_LABEL = "app.kubernetes.io/part-of"
PART_OF_VALUE = "node-healthcheck-controller"
MULTIPLE_TEMPLATES_ANNOTATION = "remediation.medik8s.io/multiple-templates-support"
NHC_API_VERSION = "remediation.medik8s.io/v1alpha1"
STATUS_RETRIES = 5


class HealthInputError(ValueError):
    """Input the pass cannot use (a missing NodeHealthCheck or template); the message says what to fix."""


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
        labels[CONTROL_PLANE_CR_LABEL] = "true"
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


def build_status(
    old: Mapping[str, Any],
    evaluation: Evaluation,
    remediations: Sequence[Mapping[str, Any]],
    now: datetime,
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
            "Paused": "NHC is paused (spec.pauseRequests)",
            "Remediating": f"NHC is remediating {len(unhealthy)} node(s)",
            "Enabled": "NHC is enabled, no ongoing remediation",
        }[phase]
        condition = {
            "type": "Disabled",
            "status": "False",
            "reason": "NodeHealthCheckEnabled",
            "message": "No issues found, NodeHealthCheck is enabled.",
        }
    old_conditions = [c for c in old.get("conditions") or [] if isinstance(c, Mapping)]
    conditions = [dict(c) for c in old_conditions if c.get("type") != "Disabled"]
    previous = next((c for c in old_conditions if c.get("type") == "Disabled"), None)
    keep_time = previous is not None and previous.get("status") == condition["status"]
    condition["lastTransitionTime"] = previous["lastTransitionTime"] if keep_time and previous else stamp
    conditions.append(condition)

    status: dict[str, Any] = {
        "observedNodes": evaluation.observed,
        "healthyNodes": evaluation.healthy,
        "unhealthyNodes": unhealthy,
        "inFlightRemediations": in_flight,
        "phase": phase,
        "reason": reason,
        "conditions": conditions,
    }
    unchanged = {k: old.get(k) for k in status} == status
    status["lastUpdateTime"] = old.get("lastUpdateTime") if unchanged and old.get("lastUpdateTime") else stamp
    return status


@dataclass
class PassResult:
    evaluation: Evaluation
    created: list[dict[str, Any]] = field(default_factory=list)  # {node, kind, namespace, name}
    deleted: list[dict[str, Any]] = field(default_factory=list)
    marked: list[dict[str, Any]] = field(default_factory=list)  # {node, name, annotation}
    status: dict[str, Any] | None = None
    status_changed: bool = False
    events: list[dict[str, str]] = field(default_factory=list)  # {reason, type, message}
    disabled: str | None = None

    @property
    def changed(self) -> bool:
        return bool(self.created or self.deleted or self.marked or self.status_changed)


def skipped(evaluation: Evaluation) -> dict[str, dict[str, str]]:
    """Unhealthy nodes not remediated in this pass: node -> {code, reason}."""
    return {
        d.node: {"code": d.code, "reason": d.reason}
        for d in evaluation.decisions
        if d.unhealthy and d.code not in (Code.REMEDIATE, Code.ESCALATE, Code.REMEDIATING)
    }


def evaluation_events(evaluation: Evaluation, created_nodes: set[str]) -> list[dict[str, str]]:
    """Events upstream records for a pass: DetectedUnhealthy and RemediationCreated for new remediations,
    RemediationSkipped (Warning) for unhealthy nodes left alone, InvalidNodeLabel for messages."""
    events: list[dict[str, str]] = []
    for d in evaluation.decisions:
        if d.node in created_nodes:
            events.append({"reason": "DetectedUnhealthy", "type": "Normal", "message": f"Node {d.node}: {d.reason}"})
            events.append(
                {"reason": "RemediationCreated", "type": "Normal", "message": f"Created remediation for node {d.node}"}
            )
        elif d.code in (Code.SKIPPED_MIN_HEALTHY, Code.SKIPPED_CONTROL_PLANE, Code.SKIPPED_MAINTENANCE):
            events.append({"reason": "RemediationSkipped", "type": "Warning", "message": f"Node {d.node}: {d.reason}"})
        elif d.code == Code.NO_TEMPLATE_LEFT:
            events.append({"reason": "NoTemplateLeft", "type": "Warning", "message": f"Node {d.node}: {d.reason}"})
    for message in evaluation.messages:
        events.append({"reason": "InvalidNodeLabel", "type": "Warning", "message": message})
    return events


class HealthPass:
    """One pass for the NodeHealthCheck ``name`` (or a ``spec`` given as data, which writes nothing)."""

    def __init__(self, client: Client, check_mode: bool = False, emit_events: bool = True) -> None:
        self.client = client
        self.check_mode = check_mode
        self.emit_events = emit_events
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

    def run(self, name: str | None, spec: Mapping[str, Any] | None, now: Callable[[], datetime]) -> PassResult:
        nhc: dict[str, Any] | None = None
        if name:
            try:
                nhc = self.client.get(NODE_HEALTH_CHECKS, name)
            except NotFound:
                raise HealthInputError(
                    f"NodeHealthCheck {name!r} does not exist; check the name with 'kubectl get nhc'."
                ) from None
            spec = nhc.get("spec") or {}
        if spec is None:
            raise HealthInputError("give the name of a NodeHealthCheck or its spec.")
        nodes = self.client.list(NODES)["items"]
        rems = self.remediations(spec, nhc)
        held = self.maintenance()
        moment = now()
        evaluation = evaluate(spec, nodes, rems, moment, held)
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

        created_nodes: set[str] = set()
        if result.disabled is None:
            for request in evaluation.to_remediate:
                ref = request.template.reference
                template = templates[f"{ref.get('namespace')}/{ref.get('kind')}/{ref.get('name')}"]
                body = remediation_object(request, template, nhc)
                shown = {
                    "node": request.node,
                    "kind": body["kind"],
                    "namespace": body["metadata"]["namespace"],
                    "name": body["metadata"].get("name") or body["metadata"]["generateName"],
                }
                if writes:
                    res = self._resource(body["apiVersion"], body["kind"])
                    made = self.client.create(res, body, body["metadata"]["namespace"])
                    shown["name"] = made["metadata"]["name"]
                    rems.append(made)
                result.created.append(shown)
                created_nodes.add(request.node)
            for ref_ in evaluation.to_delete:
                if writes:
                    with contextlib.suppress(NotFound):
                        self.client.delete(self._resource(ref_.api_version, ref_.kind), ref_.name, ref_.namespace)
                result.deleted.append(ref_.as_dict())
            self._annotate(evaluation.to_mark_timed_out, TIMED_OUT_ANNOTATION, moment, writes, result)
            self._annotate(evaluation.to_mark_healthy, HEALTHY_DELAY_ANNOTATION, moment, writes, result)
            for node in evaluation.confirmations_to_clear:
                if writes:
                    patch = {"metadata": {"annotations": {CONFIRMED_HEALTHY_ANNOTATION: None}}}
                    self.client.patch(NODES, node, patch)

        result.events = evaluation_events(evaluation, created_nodes)
        for deleted in result.deleted:
            result.events.append(
                {
                    "reason": "RemediationRemoved",
                    "type": "Normal",
                    "message": f"Deleted remediation {deleted['kind']} {deleted['namespace']}/{deleted['name']} "
                    f"of node {deleted['node']}",
                }
            )
        if result.disabled:
            result.events.append({"reason": "Disabled", "type": "Warning", "message": result.disabled})

        if nhc is not None:
            if writes:
                rems = self.remediations(spec, nhc)
            else:
                gone = {(r.namespace, r.name) for r in evaluation.to_delete}
                rems = [r for r in rems if ((r["metadata"].get("namespace"), r["metadata"]["name"]) not in gone)]
            self._status(nhc, name or "", evaluation, rems, moment, writes, result)
            if writes and self.emit_events:
                for event in result.events:
                    self.client.create_event(nhc, event["reason"], event["message"], event["type"])
        return result

    def _annotate(
        self, refs: Sequence[RemediationRef], annotation: str, moment: datetime, writes: bool, result: PassResult
    ) -> None:
        for ref in refs:
            if writes:
                patch = {"metadata": {"annotations": {annotation: format_time(moment)}}}
                try:
                    self.client.patch(self._resource(ref.api_version, ref.kind), ref.name, patch, ref.namespace)
                except NotFound:
                    continue
            result.marked.append({"node": ref.node, "name": ref.name, "annotation": annotation})

    def _status(
        self,
        nhc: dict[str, Any],
        name: str,
        evaluation: Evaluation,
        rems: Sequence[Mapping[str, Any]],
        moment: datetime,
        writes: bool,
        result: PassResult,
    ) -> None:
        disabled = "RemediationTemplateNotFound" if result.disabled else None
        current = nhc
        for _attempt in range(STATUS_RETRIES):
            old = current.get("status") or {}
            status = build_status(old, evaluation, rems, moment, disabled, result.disabled or "")
            result.status = status
            result.status_changed = status != {k: old.get(k) for k in status}
            if not result.status_changed or not writes:
                return
            body = dict(current)
            body["status"] = status
            try:
                updated = self.client.replace(NODE_HEALTH_CHECKS, body, subresource="status")
            except Conflict:
                current = self.client.get(NODE_HEALTH_CHECKS, name)
                continue
            nhc.clear()
            nhc.update(updated)
            return
        raise Conflict(f"update NodeHealthCheck {name} status: still conflicting after {STATUS_RETRIES} re-reads")
