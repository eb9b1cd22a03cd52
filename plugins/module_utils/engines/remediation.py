# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Self Node Remediation manager as passes: for every SelfNodeRemediation, read what
core/remediation/steps.py needs, apply its step, read again, until a step writes nothing.

A step is decided (core/remediation.plan_step) on the object and its Node as read, and written only while
both are still that: every write of the object carries the resourceVersion it was decided on (then the one
the step's previous write of it returned), the taints carry the Node's. A Conflict (or the Node deleted
meanwhile) means the decision was made on a state that is gone: nothing more of that step is written, the
object and the Node are read again and the step decided again from them (at most RETRIES times per object
and run, then the Conflict is raised). So two runs at once never write a stale decision over a newer one:
the phase never moves back and ``timeAssumedRebooted`` is never set again. Events are recorded once a step's
writes went through. The safe time is computed once per object, when it is first fenced, from the
SelfNodeRemediationConfig, the worker count and the node's watchdog-timeout annotation
(core/node/safetime.py), and kept in ``status.timeAssumedRebooted``, so a run killed at any point
continues from the object. In check mode (and offline, on objects given as data) the run is the same, against
objects held in memory (k8s/memory.py): each object goes through the steps a run would take now, up to the
first wait, and the result is what the run would write; nothing reaches the cluster.

Pods are force-deleted with the UID they were listed with as a precondition: a pod deleted meanwhile,
or replaced by a new pod of the same name (maybe on a healthy node, maybe by another run), is reported
as already gone, not as deleted by this run, and the new pod is left alone.
"""

from __future__ import annotations

import contextlib
import copy
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, cast

from ..core.node import rfc3339
from ..core.node.errors import NodeopsError
from ..core.node.rfc3339 import format_time
from ..core.node.safetime import SafeTime, safe_time, watchdog_seconds
from ..core.remediation.steps import (
    FINALIZER,
    ON_NODE,
    REBOOT_COMPLETED,
    Code,
    Step,
    event_dict,
    phase_of,
    plan_step,
    published_watchdog_timeout,
    taints_after,
)
from ..core.remediation.strategy import resolve_strategy
from ..k8s.client import (
    NODE_MAINTENANCES,
    NODES,
    PODS,
    SELF_NODE_REMEDIATION_CONFIGS,
    SELF_NODE_REMEDIATIONS,
    VOLUME_ATTACHMENTS,
    Client,
    Resource,
)
from ..k8s.errors import OBJECT_GONE, Conflict, MissingResourceType, NotFound
from ..k8s.lease import GuardedClient, Lease, default_identity, lease_name
from ..k8s.memory import MemoryClient
from .health import under_maintenance

CONFIG_NAME = "self-node-remediation-config"
WORKER_LABEL = "node-role.kubernetes.io/worker"
MAX_STEPS = 10
#: Conflicts per object and run: each one a re-read of the object and its Node and a new decision.
RETRIES = 5
#: Seconds between looks at a node Lease another run holds, while a run with a wait_timeout waits for it
BUSY_POLL_SECONDS = 2.0


def seconds_until(stamp: str | None, now: float) -> float | None:
    """Seconds from ``now`` to the time ``stamp`` (0 once it has passed); None without a readable time."""
    moment = rfc3339.to_epoch(stamp)
    if moment is None:
        return None
    return max(0.0, round(moment - now, 3))


def safe_time_for(
    node: Mapping[str, Any], config: Mapping[str, Any], workers: int, watchdog_timeout: float | None
) -> SafeTime:
    """The safe time for ``node``: its published watchdog timeout, or ``watchdog_timeout`` when that is longer
    (a setting can lengthen the wait, never shorten it below what the node's agent published)."""
    watchdog = watchdog_seconds(published_watchdog_timeout(node))
    if watchdog_timeout is not None:
        watchdog = max(watchdog, watchdog_seconds(watchdog_timeout))
    return safe_time(config.get("spec") or {}, workers, watchdog)


def decide_step(
    snr: Mapping[str, Any],
    node: Mapping[str, Any] | None,
    config: Mapping[str, Any] | None,
    workers: int,
    git_version: str,
    now: float,
    under_maintenance: bool,
    pods: list[dict[str, Any]],
    attachments: list[dict[str, Any]],
    watchdog_timeout: float | None,
) -> tuple[Step, str, SafeTime | None]:
    """The next step for ``snr`` on ``node`` (None: it does not exist) from what was read (or given offline):
    (the step, the strategy that runs, the safe time when this step would start the wait for it).
    ``workers``: the number of worker nodes; ``pods`` and ``attachments``: those of the node."""
    strategy = resolve_strategy((snr.get("spec") or {}).get("remediationStrategy"), git_version)
    computed = None
    seconds = 0.0
    if config is not None and node is not None and not (snr.get("status") or {}).get("timeAssumedRebooted"):
        computed = safe_time_for(node, config, workers, watchdog_timeout)
        seconds = float(computed.effective_seconds)
    step = plan_step(
        snr,
        node,
        now,
        seconds,
        strategy,
        under_maintenance=under_maintenance,
        pods=pods,
        attachments=attachments,
        config_found=config is not None,
    )
    return step, strategy, computed


def offline_outcomes(
    remediations: list[dict[str, Any]],
    nodes: list[dict[str, Any]],
    pods: list[dict[str, Any]],
    attachments: list[dict[str, Any]],
    configs: list[dict[str, Any]],
    git_version: str,
    now: float | None,
    node_maintenances: list[dict[str, Any]],
    watchdog_timeout: float | None = None,
    config_namespace: str | None = None,
) -> tuple[list[Outcome], list[str]]:
    """What a check-mode run reports, from objects given as data: the same run, on the objects held in memory,
    for each SelfNodeRemediation the steps it would take now (up to the first wait), with the phase, conditions,
    taints and events it would write, the strategy that runs and the safe time. The objects outside
    ``config_namespace`` (when set) are ignored, as a live run ignores them: (outcomes, ignored). ``now``:
    seconds since the epoch; None reads the clock."""
    if now is None:
        now = time.time()
    for index, snr in enumerate(remediations):
        meta = snr.get("metadata") if isinstance(snr, Mapping) else None
        if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str) or not meta["name"]:
            raise RemediationInputError(f"remediations[{index}]: not a SelfNodeRemediation (no metadata.name).")
        if not isinstance(snr.get("spec") or {}, Mapping) or not isinstance(snr.get("status") or {}, Mapping):
            raise RemediationInputError(f"remediations[{index}] ({meta['name']}): spec and status must be mappings.")
    for kind, objs in (
        ("nodes", nodes),
        ("pods", pods),
        ("volume_attachments", attachments),
        ("configs", configs),
        ("node_maintenances", node_maintenances),
    ):
        for index, obj in enumerate(objs):
            if not isinstance(obj, Mapping) or not isinstance(obj.get("metadata") or {}, Mapping):
                raise RemediationInputError(f"{kind}[{index}]: not a Kubernetes object (a mapping with metadata).")
            if not isinstance(obj.get("spec") or {}, Mapping):
                raise RemediationInputError(f"{kind}[{index}]: spec must be a mapping.")
    given: list[tuple[Resource, Mapping[str, Any]]] = [
        *((SELF_NODE_REMEDIATIONS, o) for o in remediations),
        *((NODES, o) for o in nodes),
        *((PODS, o) for o in pods),
        *((VOLUME_ATTACHMENTS, o) for o in attachments),
        *((SELF_NODE_REMEDIATION_CONFIGS, o) for o in configs),
        *((NODE_MAINTENANCES, o) for o in node_maintenances),
    ]
    clock = now
    memory = MemoryClient(given, git_version=git_version, now=lambda: clock)
    manager = RemediationManager(
        memory,  # type: ignore[arg-type]  # the subset of Client a run uses
        now=lambda: clock,
        check_mode=True,
        config_namespace=config_namespace,
        watchdog_timeout=watchdog_timeout,
    )
    outcomes = manager.run(None, None, 0.0)
    return outcomes, sorted(manager.ignored)


class RemediationInputError(NodeopsError, ValueError):
    """Offline input that is not what it should be; the message names the item."""


class NodeGone(Conflict):
    """The Node went away between its read and the write of its taints: read again and decide again, as for a
    Conflict."""


@dataclass
class Outcome:
    """What happened to one object in a run."""

    namespace: str
    name: str
    node: str
    strategy: str | None = None
    phase_before: str = ""
    phase: str = ""
    code: str = ""
    reason: str = ""
    time_assumed_rebooted: str | None = None
    safe_time: dict[str, Any] | None = None
    wait_until: float | None = None  # seconds since the epoch
    changed: bool = False
    pods_deleted: list[str] = field(default_factory=list)  # by this run (or, in check mode, that would be)
    pods_already_gone: list[str] = field(default_factory=list)  # to delete, but gone or replaced before it
    attachments_deleted: list[str] = field(default_factory=list)
    taints_added: list[str] = field(default_factory=list)
    taints_removed: list[str] = field(default_factory=list)
    events: list[dict[str, str]] = field(default_factory=list)
    conditions: list[dict[str, Any]] = field(default_factory=list)  # the object's, after the run
    taints: list[str] = field(default_factory=list)  # the node's taint keys, after the run
    steps: list[dict[str, Any]] = field(default_factory=list)
    rereads: int = 0  # Conflicts met: each one a re-read and a new decision, the stale step dropped
    seconds_to_safe_time: float | None = None  # from the run's end to timeAssumedRebooted (0 once passed)

    def as_dict(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "node": self.node,
            "strategy": self.strategy,
            "phase_before": self.phase_before,
            "phase": self.phase,
            "code": self.code,
            "reason": self.reason,
            "time_assumed_rebooted": self.time_assumed_rebooted,
            "safe_time": self.safe_time,
            "wait_until": format_time(self.wait_until) if self.wait_until is not None else None,
            "changed": self.changed,
            "pods_deleted": self.pods_deleted,
            "pods_already_gone": self.pods_already_gone,
            "attachments_deleted": self.attachments_deleted,
            "taints_added": self.taints_added,
            "taints_removed": self.taints_removed,
            "events": self.events,
            "conditions": self.conditions,
            "taints": self.taints,
            "steps": self.steps,
            "rereads": self.rereads,
            "seconds_to_safe_time": self.seconds_to_safe_time,
        }


def node_lease_name(node: str) -> str:
    """The name of a node's remediation Lease."""
    return lease_name("nodeops-remediation", node)


def snr_node(snr: Mapping[str, Any]) -> str:
    meta = snr.get("metadata") or {}
    return str((meta.get("annotations") or {}).get("remediation.medik8s.io/node-name") or meta.get("name", ""))


class RemediationManager:
    def __init__(
        self,
        client: Client,
        now: Callable[[], float] = time.time,
        check_mode: bool = False,
        emit_events: bool = True,
        config_namespace: str | None = None,
        watchdog_timeout: float | None = None,
    ) -> None:
        # In check mode the run reads through to the cluster and writes to memory only (k8s/memory.py).
        self.client = cast(Client, MemoryClient(base=client, now=now)) if check_mode else client
        self.writer = self.client  # the client for writes: guarded by the node's Lease while a run acts on it
        self.identity = default_identity()
        self.now = now  # the clock, in seconds since the epoch
        self.check_mode = check_mode
        self.emit_events = emit_events
        self.config_namespace = config_namespace
        self.watchdog_timeout = watchdog_timeout
        self._git_version: str | None = None
        #: objects outside ``config_namespace`` (namespace/name): never acted on, reported
        self.ignored: set[str] = set()
        #: what went wrong beside the steps (a node Lease renewal the API did not answer)
        self.warnings: list[str] = []
        #: whether the last run stopped at its hand_back_after, with objects still waiting
        self.handed_back = False
        #: the events recorded in this run (namespace, name, reason, message): each once per run, and per task
        #: over the calls that go on with a wait (``emitted``, carried in the module's resume)
        self._emitted: set[tuple[str, str, str, str]] = set()

    EMITTED_KEYS = ("namespace", "name", "reason", "message")

    @property
    def emitted(self) -> list[dict[str, str]]:
        """The events recorded so far, as ``resume`` carries them to the next call of the same task."""
        return [dict(zip(self.EMITTED_KEYS, once, strict=True)) for once in sorted(self._emitted)]

    @emitted.setter
    def emitted(self, events: list[dict[str, str]]) -> None:
        self._emitted = {tuple(str(e.get(k, "")) for k in self.EMITTED_KEYS) for e in events}  # type: ignore[misc]

    # -- reads ------------------------------------------------------------------------------
    def git_version(self) -> str:
        if self._git_version is None:
            self._git_version = str(self.client.server_version().get("gitVersion", ""))
        return self._git_version

    def config(self, namespace: str) -> dict[str, Any] | None:
        try:
            return self.client.get(SELF_NODE_REMEDIATION_CONFIGS, CONFIG_NAME, self.config_namespace or namespace)
        except NotFound:
            return None

    def maintenance(self) -> set[str]:
        try:
            return under_maintenance(self.client.list(NODE_MAINTENANCES)["items"])
        except (MissingResourceType, NotFound):
            return set()

    def objects(self, namespace: str | None, name: str | None) -> list[dict[str, Any]]:
        """The objects to act on. With ``config_namespace`` only those of that namespace: an object anyone
        could create elsewhere must not fence a node; the others are recorded in ``ignored``."""
        if name:
            try:
                found = [self.client.get(SELF_NODE_REMEDIATIONS, name, namespace)]
            except NotFound:
                found = []
        else:
            found = self.client.list(SELF_NODE_REMEDIATIONS, namespace=namespace)["items"]
        if not self.config_namespace:
            return found
        kept = []
        for snr in found:
            meta = snr.get("metadata") or {}
            if meta.get("namespace") == self.config_namespace:
                kept.append(snr)
            else:
                self.ignored.add(f"{meta.get('namespace')}/{meta.get('name')}")
        return kept

    # -- one object -------------------------------------------------------------------------
    def run_one(self, snr: dict[str, Any]) -> Outcome:
        """The steps of one object, under the Lease of its node (one run at a time acts on a node: two runs
        at once would both decide on what the other is changing)."""
        meta = snr["metadata"]
        namespace, name = str(meta.get("namespace", "")), str(meta["name"])
        node_name = snr_node(snr)
        if self.check_mode:
            self.writer = self.client
            return self._run_one(snr, namespace, name, node_name)
        lease = Lease(self.client, node_lease_name(node_name), self.config_namespace or namespace, self.identity)
        if not lease.acquire(0):
            outcome = Outcome(namespace, name, node_name, phase_before=phase_of(snr), phase=phase_of(snr))
            outcome.code = "Busy"
            outcome.reason = (
                f"another run ({lease.holder}) holds Lease {lease.namespace}/{lease.name} of node {node_name};"
                " nothing was done for it in this run"
            )
            # Look again when the holder gives the Lease up or its hold runs out (a run that died holding it
            # never gives it up): a run with a wait_timeout goes on with the node then.
            left = BUSY_POLL_SECONDS
            if lease.holder_expires is not None:
                left = min(left, max(0.0, lease.holder_expires - lease.clock()))
            outcome.wait_until = self.now() + left
            return outcome
        self.writer = cast(Client, GuardedClient(self.client, lease))
        try:
            with lease.kept(self.warnings.append):  # renewed while the steps run (many pods, a slow API)
                return self._run_one(snr, namespace, name, node_name)
        finally:
            self.writer = self.client
            lease.release(retry_for=10.0)

    def _run_one(self, snr: dict[str, Any], namespace: str, name: str, node_name: str) -> Outcome:
        outcome = Outcome(namespace, name, node_name, phase_before=phase_of(snr))
        config = self.config(namespace)
        steps = 0
        node: dict[str, Any] | None = None
        while steps < MAX_STEPS:
            node = self._node(node_name)
            step = self._plan(snr, node_name, node, config, outcome)
            if not step.writes:
                self._took(snr, node, step, outcome)
                break
            try:
                updated = self._apply(snr, node, step, outcome)
            except Conflict as exc:
                # The object or its Node changed since they were read (or the Node went away): the step was
                # decided on a state that is gone, so none of the rest of it is written. Read both again and
                # decide again; what the step wrote before the Conflict is part of what is read.
                outcome.rereads += 1
                if outcome.rereads > RETRIES:
                    raise Conflict(
                        f"SelfNodeRemediation {namespace}/{name}: the object or node {node_name} kept changing while"
                        f" its step was written ({RETRIES} re-reads and new decisions); the next run goes on from"
                        f" what is written ({exc.msg})",
                        exc.status,
                        exc.body,
                    ) from exc
                try:
                    snr = self.client.get(SELF_NODE_REMEDIATIONS, name, namespace)
                except NotFound:
                    outcome.phase = "Deleted"
                    return outcome
                continue
            steps += 1
            outcome.changed = True
            self._took(snr, node, step, outcome)
            if updated is None:  # the object is gone
                outcome.phase = "Deleted"
                outcome.taints = _taint_keys(self._node(node_name))
                return outcome
            snr = updated
        status = snr.get("status") or {}
        outcome.phase = outcome.phase or str(status.get("phase") or "")
        outcome.time_assumed_rebooted = status.get("timeAssumedRebooted")
        outcome.conditions = [dict(c) for c in status.get("conditions") or [] if isinstance(c, Mapping)]
        outcome.taints = _taint_keys(node)
        outcome.seconds_to_safe_time = seconds_until(outcome.time_assumed_rebooted, self.now())
        return outcome

    def _plan(
        self,
        snr: Mapping[str, Any],
        node_name: str,
        node: dict[str, Any] | None,
        config: Mapping[str, Any] | None,
        outcome: Outcome,
    ) -> Step:
        """The next step for ``snr`` on ``node`` (None: no Node ``node_name``), both as just read; the pods, the
        VolumeAttachments, the worker count and the NodeMaintenances are read here."""
        pods: list[dict[str, Any]] = []
        attachments: list[dict[str, Any]] = []
        if node is not None and phase_of(snr) == REBOOT_COMPLETED:
            pods = self.client.list(PODS, field_selector=f"spec.nodeName={node_name}")["items"]
            attachments = [
                a
                for a in self.client.list(VOLUME_ATTACHMENTS)["items"]
                if (a.get("spec") or {}).get("nodeName") == node_name
            ]
        workers = None
        if config is not None and node is not None and not (snr.get("status") or {}).get("timeAssumedRebooted"):
            workers = len(self.client.list(NODES, label_selector=WORKER_LABEL)["items"])
        step, strategy, computed = decide_step(
            snr,
            node,
            config,
            workers or 0,
            self.git_version(),
            self.now(),
            node_name in self.maintenance(),
            pods,
            attachments,
            self.watchdog_timeout,
        )
        outcome.strategy = strategy
        if computed is not None:
            outcome.safe_time = computed.as_dict()
        return step

    def _took(self, snr: Mapping[str, Any], node: Mapping[str, Any] | None, step: Step, outcome: Outcome) -> None:
        """Report ``step`` as taken (its writes, if any, went through) and record its events."""
        outcome.code, outcome.reason, outcome.wait_until = step.code, step.reason, step.wait_until
        outcome.steps.append(step.as_dict())
        self._events(snr, node, step, outcome)

    def _node(self, name: str) -> dict[str, Any] | None:
        try:
            return self.client.get(NODES, name)
        except NotFound:
            return None

    def _events(self, snr: Mapping[str, Any], node: Mapping[str, Any] | None, step: Step, outcome: Outcome) -> None:
        """Record the step's events on the object or its Node (as upstream records each), each once per run."""
        for event in step.events:
            if event.reason == "RemediationSkipped" and any(e["reason"] == event.reason for e in outcome.events):
                continue
            outcome.events.append(event_dict(event))
            once = (outcome.namespace, outcome.name, event.reason, event.message)
            if once in self._emitted:  # a later pass of this run decided the same again: one event is enough
                continue
            involved = {"apiVersion": "v1", "kind": "Node", **node} if event.on == ON_NODE and node else dict(snr)
            if self.emit_events:  # in check mode the writer holds them in memory
                with contextlib.suppress(NotFound):
                    self.writer.create_event(involved, event.reason, event.message, event.type)
                self._emitted.add(once)

    def _apply(
        self, snr: dict[str, Any], node: dict[str, Any] | None, step: Step, outcome: Outcome
    ) -> dict[str, Any] | None:
        """Write ``step``, decided on ``snr`` and ``node`` as read; the object afterwards, None once it is gone.

        The object's writes carry ``snr``'s resourceVersion (then the one the previous write returned), the taints
        ``node``'s: Conflict (NodeGone) as soon as either changed since, and the caller decides again. Pods go with
        the UID they were listed with.
        """
        name = snr["metadata"]["name"]
        namespace = snr["metadata"].get("namespace")
        if step.add_finalizer:
            written = self._write_object(_add_finalizer(copy.deepcopy(snr)), outcome)
            if written is None:
                return None
            snr = written
        if (step.taints_to_add or step.taints_to_remove) and node is not None:
            self._write_taints(node, step, outcome)
        for pod_ns, pod_name, pod_uid in step.pods_to_delete:
            try:
                self.writer.delete_pod(pod_name, pod_ns, uid=pod_uid, grace_period=0)
            except OBJECT_GONE:  # deleted meanwhile, or a new pod has its name now: not ours to delete
                outcome.pods_already_gone.append(f"{pod_ns}/{pod_name}")
            else:
                outcome.pods_deleted.append(f"{pod_ns}/{pod_name}")
        for attachment, attachment_uid in step.attachments_to_delete:
            try:
                self.writer.delete(
                    VOLUME_ATTACHMENTS, attachment, propagation_policy="Background", uid=attachment_uid or None
                )
            except OBJECT_GONE:  # gone meanwhile, or another attachment has its name now: not the one listed
                continue
            outcome.attachments_deleted.append(attachment)
        if step.status is not None:
            body = copy.deepcopy(snr)
            body["status"] = step.status
            written = self._write_object(body, outcome, status=True)
            if written is None:
                return None
            snr = written
        if step.remove_finalizer:
            if self._write_object(_remove_finalizer(copy.deepcopy(snr)), outcome) is None:
                return None
            try:
                return self.client.get(SELF_NODE_REMEDIATIONS, name, namespace)
            except NotFound:
                return None
        return snr

    def _write_object(self, body: dict[str, Any], outcome: Outcome, status: bool = False) -> dict[str, Any] | None:
        """PUT ``body`` (the object as read, changed), only if it is still at the version read: Conflict when not.
        The object as written; None when it is gone."""
        meta = body["metadata"]
        if not meta.get("resourceVersion"):  # without it the PUT would be unconditional
            raise ValueError(
                f"SelfNodeRemediation {meta.get('namespace')}/{meta['name']}: no resourceVersion to write on"
            )
        try:
            written = self.writer.replace(SELF_NODE_REMEDIATIONS, body, subresource="status" if status else None)
        except NotFound:
            return None
        outcome.changed = True
        return written

    def _write_taints(self, node: Mapping[str, Any], step: Step, outcome: Outcome) -> None:
        """Set the taints ``step`` decided on ``node`` (as read), only if the Node is still at that version."""
        taints = taints_after(node, step)
        if taints is None:
            return
        body = copy.deepcopy(dict(node))
        name = body["metadata"]["name"]
        if not body["metadata"].get("resourceVersion"):  # without it the PUT would be unconditional
            raise ValueError(f"Node {name}: no resourceVersion to write on")
        body.setdefault("spec", {})["taints"] = taints
        try:
            self.writer.replace(NODES, body)
        except NotFound as exc:
            raise NodeGone(f"node {name} was deleted meanwhile", exc.status, exc.body) from exc
        outcome.changed = True
        outcome.taints_added += [t["key"] for t in step.taints_to_add]
        outcome.taints_removed += list(step.taints_to_remove)

    # -- runs -------------------------------------------------------------------------------
    def run(
        self,
        namespace: str | None,
        name: str | None,
        wait_timeout: float,
        sleep: Callable[[float], None] = time.sleep,
        hand_back_after: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> list[Outcome]:
        """Passes over every object until none waits for something within ``wait_timeout`` seconds; with
        ``hand_back_after`` > 0, stops after that many seconds of this call instead, with ``handed_back`` set (the
        next run goes on with the time left)."""
        start = clock()
        merged: dict[tuple[str, str], Outcome] = {}
        self.handed_back = False
        while True:
            for snr in self.objects(namespace, name):
                out = self.run_one(snr)
                key = (out.namespace, out.name)
                if key in merged:
                    out = _merge(merged[key], out)
                merged[key] = out
            if self.check_mode:
                break
            waits = [o.wait_until for o in merged.values() if o.wait_until is not None and o.phase != "Deleted"]
            if not waits:
                break
            elapsed = clock() - start
            left = wait_timeout - elapsed
            pause = max(0.0, min(waits) - self.now())
            if left <= 0 or pause > left:
                break
            pause = min(max(pause, 0.2), left)
            if hand_back_after > 0:
                if elapsed >= hand_back_after:
                    self.handed_back = True
                    break
                pause = min(pause, hand_back_after - elapsed)
            sleep(pause)
        return sorted(merged.values(), key=lambda o: (o.namespace, o.name))


# What accumulates when the outcomes of one object in two passes (or two runs of a task) are merged.
ACCUMULATED = ("pods_deleted", "pods_already_gone", "attachments_deleted", "taints_added", "taints_removed")


def merge_outcomes(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """One object's outcome over two passes, as dicts (``Outcome`` fields, or its ``as_dict``): what the later pass
    found, what either did, the phase the earlier one started from."""
    merged = dict(after)
    if after.get("code") == "Busy":  # this pass did nothing for it: what an earlier pass found still holds
        for key in ("strategy", "time_assumed_rebooted", "phase"):
            merged[key] = after.get(key) or before.get(key)
    merged["phase_before"] = before.get("phase_before")
    merged["changed"] = bool(after.get("changed") or before.get("changed"))
    merged["safe_time"] = after.get("safe_time") or before.get("safe_time")
    for key in ACCUMULATED:
        merged[key] = list(before.get(key) or []) + list(after.get(key) or [])
    events = list(before.get("events") or [])
    merged["events"] = events + [e for e in after.get("events") or [] if e not in events]
    merged["rereads"] = int(before.get("rereads") or 0) + int(after.get("rereads") or 0)
    merged["steps"] = list(before.get("steps") or []) + [
        s for s in after.get("steps") or [] if s.get("code") != Code.WAITING_SAFE_TIME or s.get("status_update")
    ]
    return merged


def _merge(before: Outcome, after: Outcome) -> Outcome:
    return Outcome(**merge_outcomes(asdict(before), asdict(after)))


def _taint_keys(node: Mapping[str, Any] | None) -> list[str]:
    return [str(t.get("key")) for t in ((node or {}).get("spec") or {}).get("taints") or [] if isinstance(t, Mapping)]


def _add_finalizer(obj: dict[str, Any]) -> dict[str, Any]:
    finalizers = obj["metadata"].setdefault("finalizers", [])
    if FINALIZER not in finalizers:
        finalizers.append(FINALIZER)
    return obj


def _remove_finalizer(obj: dict[str, Any]) -> dict[str, Any]:
    obj["metadata"]["finalizers"] = [f for f in obj["metadata"].get("finalizers") or [] if f != FINALIZER]
    return obj
