# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The manager side of Self Node Remediation as a pure step function: what to do next for one
SelfNodeRemediation object, given what the caller read (the phases of medik8s Self Node Remediation's
manager).

Pure, standard library only; time is the ``now`` parameter, seconds since the epoch. The caller applies the
step's writes, reads again and asks for the next step, until a step writes nothing (then ``wait_until`` says
when to look again).

Phases: unset (Fencing-Started) -> Pre-Reboot-Completed (finalizer and the
``remediation.medik8s.io/self-node-remediation:NoSchedule`` taint added, ``timeAssumedRebooted`` =
now + safe time) -> Reboot-Completed (only once ``now >= timeAssumedRebooted``) -> Fencing-Completed
(the strategy's work is done). Rules kept from upstream: nothing for a node labelled
``remediation.medik8s.io/exclude-from-remediation=true``; an object marked
``remediation.medik8s.io/nhc-timed-out`` stops (Processing=False, Succeeded=False); deleting the object
does not abort a fencing already started: the phases complete, then the taints and the finalizer go.

Never on a guess: nothing is tainted, deleted or marked rebooted for a node that has not shown it can fence
itself, i.e. whose agent has not annotated it ``is-reboot-capable.self-node-remediation.medik8s.io: "true"``
(upstream refuses to start without it too; here it is also checked before every later step, so a node
that stops being capable is held where it is). The safe time counts the node's published
``self-node-remediation.medik8s.io/watchdog-timeout``.

Ours: nothing at all (no taint, no deletion) for a node under maintenance; ResourceDeletion also
deletes the node's VolumeAttachments; OutOfServiceTaint waits, as upstream, for the terminating pods and the
VolumeAttachments (a pod that tolerates the taint stays and holds nothing), and also for the pods the taint is
about to evict (so it never completes before the taint took effect); it force-deletes the terminating ones, as
the pod garbage collector does for an out-of-service node, and deletes the VolumeAttachments that remain once
none is left (all only after the safe time); the out-of-service taint is removed once the node is Ready again
(or the object is deleted), not as soon as the pods are gone. The manager records upstream's event reasons,
and also NodeReboot on the Node when it starts fencing (upstream's agent records it before rebooting; the agent
here may have no API to record it with). A pod to delete is named with the UID it was listed with, and
deleted only while the pod of that name is still that one: a pod re-created under the same name elsewhere is
never deleted.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ..node.conditions import set_condition
from ..node.nodes import node_ready
from ..node.rfc3339 import format_time
from ..node.safetime import watchdog_text_unusable
from .health import EXCLUDE_LABEL, TIMED_OUT_ANNOTATION, parse_time
from .strategy import OUT_OF_SERVICE_TAINT, RESOURCE_DELETION

FINALIZER = "self-node-remediation.medik8s.io/snr-finalizer"
REBOOT_CAPABLE_ANNOTATION = "is-reboot-capable.self-node-remediation.medik8s.io"
WATCHDOG_TIMEOUT_ANNOTATION = "self-node-remediation.medik8s.io/watchdog-timeout"
NO_SCHEDULE_TAINT_KEY = "remediation.medik8s.io/self-node-remediation"
OUT_OF_SERVICE_TAINT_KEY = "node.kubernetes.io/out-of-service"
OUT_OF_SERVICE_VALUE = "nodeshutdown"
#: After timeAssumedRebooted + this, a deleted object's out-of-service taint goes even if pods remain.
OUT_OF_SERVICE_EXPIRY_SECONDS = 60.0
#: How often to look again while waiting for pods and VolumeAttachments to go.
POLL_SECONDS = 2.0

FENCING_STARTED = "Fencing-Started"
PRE_REBOOT_COMPLETED = "Pre-Reboot-Completed"
REBOOT_COMPLETED = "Reboot-Completed"
FENCING_COMPLETED = "Fencing-Completed"
PHASES = (FENCING_STARTED, PRE_REBOOT_COMPLETED, REBOOT_COMPLETED, FENCING_COMPLETED)

# Condition reasons (upstream's tokens).
REMEDIATION_STARTED = "RemediationStarted"
REMEDIATION_FINISHED = "RemediationFinishedSuccessfully"
REMEDIATION_TIMEOUT_BY_NHC = "RemediationTimeoutByNHC"
NODE_NOT_FOUND = "RemediationSkippedNodeNotFound"
NOT_REBOOT_CAPABLE = "NodeNotRebootCapable"
CONFIGURATION_NOT_FOUND = "ConfigurationNotFound"


#: What an event is recorded on: the SelfNodeRemediation or its Node (as upstream records them).
ON_REMEDIATION = "SelfNodeRemediation"
ON_NODE = "Node"


class Event(NamedTuple):
    """An event a step records once its writes went through, with upstream's reason where upstream has one."""

    type: str  # Normal or Warning
    reason: str
    message: str
    on: str = ON_REMEDIATION  # ON_REMEDIATION or ON_NODE


class Code:
    """What a step is about, for the result."""

    DISABLED = "Disabled"
    STOPPED = "StoppedByNHC"
    NODE_NOT_FOUND = "NodeNotFound"
    EXCLUDED = "Excluded"
    NOT_REBOOT_CAPABLE = "NotRebootCapable"  # no agent has shown the node can fence itself
    MAINTENANCE = "UnderMaintenance"
    FENCING = "Fencing"  # finalizer, taint, timeAssumedRebooted
    WAITING_SAFE_TIME = "WaitingSafeTime"
    RECOVERING = "Recovering"  # the strategy is at work
    COMPLETED = "Completed"
    CLEANING_UP = "CleaningUp"  # the object is deleted: taints and finalizer go
    GONE = "Gone"


def no_schedule_taint() -> dict[str, Any]:
    return {"key": NO_SCHEDULE_TAINT_KEY, "effect": "NoSchedule"}


def out_of_service_taint(now: float) -> dict[str, Any]:
    return {
        "key": OUT_OF_SERVICE_TAINT_KEY,
        "value": OUT_OF_SERVICE_VALUE,
        "effect": "NoExecute",
        "timeAdded": format_time(now),
    }


@dataclass
class Step:
    """The next writes for one object. Apply them in field order; ``status`` None = unchanged."""

    code: str
    reason: str
    add_finalizer: bool = False
    taints_to_add: list[dict[str, Any]] = field(default_factory=list)
    # (namespace, name, uid): deleted only while the pod of that name is still the one listed (UID precondition)
    pods_to_delete: list[tuple[str, str, str]] = field(default_factory=list)
    # (name, uid): deleted only while the VolumeAttachment of that name is still the one listed
    attachments_to_delete: list[tuple[str, str]] = field(default_factory=list)
    taints_to_remove: list[str] = field(default_factory=list)  # keys
    remove_finalizer: bool = False
    status: dict[str, Any] | None = None
    events: list[Event] = field(default_factory=list)
    wait_until: float | None = None  # seconds since the epoch

    @property
    def writes(self) -> bool:
        return bool(
            self.add_finalizer
            or self.taints_to_add
            or self.pods_to_delete
            or self.attachments_to_delete
            or self.taints_to_remove
            or self.remove_finalizer
            or self.status is not None
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "reason": self.reason,
            "add_finalizer": self.add_finalizer,
            "taints_to_add": [t["key"] for t in self.taints_to_add],
            "pods_to_delete": [f"{ns}/{name}" for ns, name, _uid in self.pods_to_delete],
            "attachments_to_delete": [name for name, _uid in self.attachments_to_delete],
            "taints_to_remove": list(self.taints_to_remove),
            "remove_finalizer": self.remove_finalizer,
            "status_update": self.status is not None,
            "events": [event_dict(e) for e in self.events],
            "wait_until": format_time(self.wait_until) if self.wait_until is not None else None,
        }


def event_dict(event: Event) -> dict[str, str]:
    """An event as results show it."""
    return {"type": event.type, "reason": event.reason, "message": event.message, "on": event.on}


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _pod_ref(pod: Mapping[str, Any]) -> tuple[str, str, str]:
    meta = _meta(pod)
    return (str(meta.get("namespace")), str(meta.get("name")), str(meta.get("uid") or ""))


def _attachment_ref(attachment: Mapping[str, Any]) -> tuple[str, str]:
    meta = _meta(attachment)
    return (str(meta.get("name")), str(meta.get("uid") or ""))


def _taint_keys(node: Mapping[str, Any]) -> set[str]:
    return {str(t.get("key")) for t in (node.get("spec") or {}).get("taints") or [] if isinstance(t, Mapping)}


def tolerates(pod: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """Whether one of the pod's tolerations matches ``taint`` (key, value and effect; an empty key with operator
    Exists matches every taint, an empty effect every effect), as the taint manager decides."""
    for toleration in (pod.get("spec") or {}).get("tolerations") or []:
        if not isinstance(toleration, Mapping):
            continue
        if toleration.get("effect") and toleration.get("effect") != taint.get("effect"):
            continue
        key = toleration.get("key") or ""
        if key and key != taint.get("key"):
            continue
        if toleration.get("operator") == "Exists":
            return True
        if key and (toleration.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def reboot_capable(node: Mapping[str, Any]) -> bool:
    """Whether the node's agent has published that it can fence the node (annotation exactly "true"), with a
    watchdog timeout the safe time can count (missing counts as 60 s; text that is not a number does not: an
    unknown watchdog could outlast any assumed safe time, so nothing is deleted on a guess)."""
    return not_capable_because(node) is None


def not_capable_because(node: Mapping[str, Any]) -> str | None:
    """Why the node does not count as reboot-capable, or None when it does."""
    annotations = _meta(node).get("annotations") or {}
    value = annotations.get(REBOOT_CAPABLE_ANNOTATION)
    if value != "true":
        return f'{REBOOT_CAPABLE_ANNOTATION} is {"missing" if value is None else repr(value)}, not "true"'
    watchdog = annotations.get(WATCHDOG_TIMEOUT_ANNOTATION)
    if watchdog_text_unusable(watchdog):
        return f"{WATCHDOG_TIMEOUT_ANNOTATION} is {watchdog!r}, not a number of seconds"
    return None


def published_watchdog_timeout(node: Mapping[str, Any]) -> str | None:
    """The watchdog timeout the node's agent published (the annotation's text), or None."""
    value = (_meta(node).get("annotations") or {}).get(WATCHDOG_TIMEOUT_ANNOTATION)
    return None if value is None else str(value)


def phase_of(snr: Mapping[str, Any]) -> str:
    return str((snr.get("status") or {}).get("phase") or FENCING_STARTED)


def _with_conditions(
    old: Mapping[str, Any], now: float, updates: Mapping[str, tuple[str, str, str]], **fields: Any
) -> dict[str, Any] | None:
    """``old`` status with ``fields`` and the conditions ``type -> (status, reason, message)`` set;
    None when nothing differs. A condition's lastTransitionTime changes only with its status."""
    status = dict(old)
    status.update({k: v for k, v in fields.items() if v is not None})
    conditions = [dict(c) for c in old.get("conditions") or [] if isinstance(c, Mapping)]
    for ctype, (cstatus, reason, message) in updates.items():
        set_condition(conditions, ctype, cstatus, reason, message, format_time(now))
    status["conditions"] = conditions
    return None if status == dict(old) else status


def assumed_rebooted(now: float, safe_seconds: float) -> float:
    """``now + safe_seconds`` to the microsecond, rounded up to a whole second (the status keeps whole seconds,
    and truncating would shorten the safe time)."""
    return float(math.ceil(round(now + safe_seconds, 6)))


@dataclass(frozen=True)
class _Case:
    """What every phase handler of :func:`plan_step` reads, computed once."""

    snr: Mapping[str, Any]
    node: Mapping[str, Any] | None
    now: float
    safe_seconds: float
    strategy: str
    pods: Sequence[Mapping[str, Any]]
    attachments: Sequence[Mapping[str, Any]]
    name: str
    old: Mapping[str, Any]
    deleting: bool
    has_finalizer: bool
    phase: str
    node_name: str
    taints: frozenset[str]

    def status(self, updates: Mapping[str, tuple[str, str, str]], **fields: Any) -> dict[str, Any] | None:
        return _with_conditions(self.old, self.now, updates, **fields)

    def cleanup(self, code: str, reason: str, expired: bool = False) -> Step:
        """Give the node back (our taints off) and let the object go (our finalizer off)."""
        step = Step(code, reason)
        if self.node is not None:
            step.taints_to_remove = [k for k in (OUT_OF_SERVICE_TAINT_KEY, NO_SCHEDULE_TAINT_KEY) if k in self.taints]
        step.remove_finalizer = self.has_finalizer
        node = self.node_name or self.name
        if OUT_OF_SERVICE_TAINT_KEY in step.taints_to_remove:
            if expired:
                message = "out-of-service taint removed after its expiry, with pods still on the node"
                step.events.append(Event("Warning", "OutOfServiceTimestampExpired", message, ON_NODE))
            step.events.append(
                Event("Normal", "RemoveOutOfService", f"out-of-service taint removed from {node}", ON_NODE)
            )
        if NO_SCHEDULE_TAINT_KEY in step.taints_to_remove:
            message = f"NoSchedule taint removed from node {node}"
            step.events.append(Event("Normal", "RemoveNoScheduleTaint", message, ON_NODE))
        if step.remove_finalizer:
            step.events.append(Event("Normal", "RemoveFinalizer", "finalizer removed"))
        if step.writes:
            step.events.append(Event("Normal", "RemediationFinished", f"remediation of node {node} finished"))
        return step

    def stopped(self, code: str, reason: str, message: str, event: Event, succeeded: str) -> Step:
        """A remediation that cannot go on: Processing False, Succeeded ``succeeded``; the event once."""
        status = self.status({"Processing": ("False", reason, message), "Succeeded": (succeeded, reason, message)})
        step = Step(code, message, status=status)
        if status is not None:
            step.events.append(event)
        return step


_PROCESSING = {
    "Processing": ("True", REMEDIATION_STARTED, "remediation started"),
    "Succeeded": ("Unknown", REMEDIATION_STARTED, "remediation started"),
}


def plan_step(
    snr: Mapping[str, Any],
    node: Mapping[str, Any] | None,
    now: float,
    safe_seconds: float,
    strategy: str,
    under_maintenance: bool = False,
    pods: Sequence[Mapping[str, Any]] = (),
    attachments: Sequence[Mapping[str, Any]] = (),
    config_found: bool = True,
) -> Step:
    """The next step for ``snr`` (a SelfNodeRemediation) on ``node`` (None when it does not exist).

    ``safe_seconds``: the effective safe time (core/node/safetime.py); ``strategy``: the resolved one
    (ResourceDeletion or OutOfServiceTaint); ``pods``: the pods bound to the node; ``attachments``:
    the VolumeAttachments whose ``spec.nodeName`` is the node.

    First the reasons to do nothing or only clean up (:func:`_held`), then one handler per phase.
    """
    meta = _meta(snr)
    case = _Case(
        snr=snr,
        node=node,
        now=now,
        safe_seconds=safe_seconds,
        strategy=strategy,
        pods=pods,
        attachments=attachments,
        name=str(meta.get("name", "")),
        old=snr.get("status") or {},
        deleting=bool(meta.get("deletionTimestamp")),
        has_finalizer=FINALIZER in (meta.get("finalizers") or []),
        phase=phase_of(snr),
        node_name=str((node and _meta(node).get("name")) or ""),
        taints=frozenset(_taint_keys(node) if node else ()),
    )
    held = _held(case, under_maintenance, config_found)
    if held is not None:
        return held
    if case.phase == FENCING_STARTED:
        return _fencing_started(case)
    assumed_text = case.old.get("timeAssumedRebooted")
    if not assumed_text:  # a phase without the time: never guess, start the wait now
        assumed = assumed_rebooted(now, safe_seconds)
        status = case.status(_PROCESSING, phase=PRE_REBOOT_COMPLETED, timeAssumedRebooted=format_time(assumed))
        step = Step(
            Code.FENCING, "timeAssumedRebooted missing: the safe time starts now", status=status, wait_until=assumed
        )
        step.events.append(_time_assumed_event(assumed))
        return step
    assumed = parse_time(assumed_text, f"SelfNodeRemediation {case.name}: status.timeAssumedRebooted")
    if case.phase == PRE_REBOOT_COMPLETED:
        return _pre_reboot_completed(case, assumed)
    if case.phase == REBOOT_COMPLETED:
        return _reboot_completed(case, assumed)
    return _fencing_completed(case)  # Fencing-Completed, and any phase this collection does not write


def _held(case: _Case, under_maintenance: bool, config_found: bool) -> Step | None:
    """The step when something other than the phase decides: the object going, no configuration, timed out by
    the NodeHealthCheck, no node, a node under maintenance or excluded, a node no agent can fence; else None."""
    node, phase, deleting = case.node, case.phase, case.deleting
    if deleting and not case.has_finalizer:
        return Step(Code.GONE, "being deleted; nothing of ours holds it")
    if not config_found:
        if deleting:
            return case.cleanup(Code.CLEANING_UP, "deleted; the configuration is missing, cleaning up")
        status = case.status({"Disabled": ("True", CONFIGURATION_NOT_FOUND, "SelfNodeRemediationConfig not found")})
        return Step(Code.DISABLED, "no SelfNodeRemediationConfig: nothing is done", status=status)
    if TIMED_OUT_ANNOTATION in (_meta(case.snr).get("annotations") or {}):
        if deleting:
            return case.cleanup(Code.CLEANING_UP, "timed out by the NodeHealthCheck and deleted: cleaning up")
        message = "the NodeHealthCheck timed the remediation out"
        event = Event("Normal", "RemediationStopped", "remediation stopped: timed out by NodeHealthCheck")
        step = case.stopped(Code.STOPPED, REMEDIATION_TIMEOUT_BY_NHC, message, event, "False")
        step.reason = "timed out by the NodeHealthCheck; stopped"
        return step
    if node is None:
        if deleting:
            return case.cleanup(Code.CLEANING_UP, "the node is gone; dropping the finalizer")
        message = f"node {case.name} not found"
        event = Event("Warning", "RemediationCannotStart", message)
        return case.stopped(Code.NODE_NOT_FOUND, NODE_NOT_FOUND, message, event, "False")
    if under_maintenance:
        if deleting and phase in (FENCING_STARTED, FENCING_COMPLETED):
            return case.cleanup(Code.CLEANING_UP, "deleted: removing the taints and the finalizer")
        return Step(
            Code.MAINTENANCE,
            f"node {case.node_name} is under maintenance (a NodeMaintenance in progress): nothing is done",
            events=[Event("Normal", "RemediationSkipped", f"node {case.node_name} is under maintenance")],
        )
    if (_meta(node).get("labels") or {}).get(EXCLUDE_LABEL) == "true" and phase == FENCING_STARTED:
        return Step(
            Code.EXCLUDED,
            f"node {case.node_name} is labelled {EXCLUDE_LABEL}=true: nothing is done",
            events=[Event("Normal", "RemediationSkipped", f"node {case.node_name} is excluded from remediation")],
        )
    because = None if phase == FENCING_COMPLETED or deleting else not_capable_because(node)
    if because is not None:
        message = (
            f"node {case.node_name} is not known to be able to fence itself ({because}): no agent has shown it can"
            " reboot the node, so nothing is tainted or deleted; deploy the node agent on it, or check why its"
            " watchdog did not open"
        )
        event = Event("Warning", "RemediationCannotStart", message)
        step = case.stopped(Code.NOT_REBOOT_CAPABLE, NOT_REBOOT_CAPABLE, message, event, "Unknown")
        step.wait_until = case.now + POLL_SECONDS
        return step
    return None


def _fencing_started(case: _Case) -> Step:
    """Taint the node and start the safe time."""
    if case.deleting:
        return case.cleanup(Code.CLEANING_UP, "deleted before fencing started")
    step = Step(Code.FENCING, f"fencing node {case.node_name}: taint, then wait {case.safe_seconds:g}s")
    step.events.append(Event("Normal", "RemediationStarted", f"remediation of node {case.node_name} started"))
    _keep_fenced(case, step)
    assumed = assumed_rebooted(case.now, case.safe_seconds)
    step.status = case.status(_PROCESSING, phase=PRE_REBOOT_COMPLETED, timeAssumedRebooted=format_time(assumed))
    step.wait_until = assumed
    step.events.append(_time_assumed_event(assumed))
    message = f"node {case.node_name} is expected to fence itself (its agent reboots it) before {format_time(assumed)}"
    step.events.append(Event("Normal", "NodeReboot", message, ON_NODE))
    return step


def _time_assumed_event(assumed: float) -> Event:
    return Event("Normal", "UpdateTimeAssumedRebooted", f"the node is assumed rebooted at {format_time(assumed)}")


def _keep_fenced(case: _Case, step: Step) -> None:
    """The finalizer on the object (unless it is going) and the NoSchedule taint on the node, with their events."""
    if not case.has_finalizer and not case.deleting:
        step.add_finalizer = True
        step.events.append(Event("Normal", "AddFinalizer", "finalizer added"))
    if NO_SCHEDULE_TAINT_KEY not in case.taints:
        step.taints_to_add.append(no_schedule_taint())
        message = f"NoSchedule taint added to the unhealthy node {case.node_name}"
        step.events.append(Event("Normal", "AddNoScheduleTaint", message, ON_NODE))


def _pre_reboot_completed(case: _Case, assumed: float) -> Step:
    """Keep the taint and wait for the safe time; then the node can be assumed rebooted."""
    step = Step(Code.FENCING, f"fencing node {case.node_name}")
    _keep_fenced(case, step)
    if case.now < assumed:
        step.code = Code.WAITING_SAFE_TIME
        step.reason = f"waiting until {format_time(assumed)} ({assumed - case.now:.0f}s left)"
        step.status = case.status(_PROCESSING)
        step.wait_until = assumed
        return step
    step.code = Code.RECOVERING
    step.reason = "the node can be assumed rebooted"
    step.status = case.status(_PROCESSING, phase=REBOOT_COMPLETED)
    return step


def _reboot_completed(case: _Case, assumed: float) -> Step:
    """Recover the workloads with the strategy: completed when, with ResourceDeletion, no pod or VolumeAttachment
    of the node is left; with OutOfServiceTaint, no terminating pod and no VolumeAttachment (as upstream: a pod
    that tolerates the out-of-service taint stays, and does not hold the remediation)."""
    now, node_name, taints = case.now, case.node_name, case.taints
    if now < assumed:  # clock skew between passes: wait again, do nothing
        return Step(Code.WAITING_SAFE_TIME, "before timeAssumedRebooted", wait_until=assumed)
    step = Step(Code.RECOVERING, "")
    live = list(case.pods)
    attachments = case.attachments
    terminating = [p for p in live if _meta(p).get("deletionTimestamp")]
    if case.strategy == RESOURCE_DELETION:
        step.pods_to_delete = [_pod_ref(p) for p in live]
        step.attachments_to_delete = [_attachment_ref(a) for a in attachments]
        step.reason = f"ResourceDeletion: {len(live)} pod(s), {len(attachments)} VolumeAttachment(s) left"
        left = bool(live or attachments)
    elif case.strategy == OUT_OF_SERVICE_TAINT:
        # not yet terminating and not tolerating the taint: the taint manager evicts them (waited for, so the
        # remediation does not complete before the taint took effect); tolerating pods stay and hold nothing
        evicted = [
            p for p in live if not _meta(p).get("deletionTimestamp") and not tolerates(p, out_of_service_taint(now))
        ]
        if OUT_OF_SERVICE_TAINT_KEY not in taints:
            step.taints_to_add.append(out_of_service_taint(now))
            message = f"out-of-service taint added to the unhealthy node {node_name}"
            step.events.append(Event("Normal", "AddOutOfService", message, ON_NODE))
        else:
            # Pods the taint evicted: finish them now, as the pod garbage collector does for an
            # out-of-service node (without waiting for its 20 s period); the node is fenced.
            step.pods_to_delete = [_pod_ref(p) for p in terminating]
            if not terminating and not evicted:
                step.attachments_to_delete = [_attachment_ref(a) for a in attachments]
        step.reason = (
            f"OutOfServiceTaint: {len(terminating)} terminating pod(s), {len(evicted)} to be evicted by the taint,"
            f" {len(live) - len(terminating) - len(evicted)} tolerating it, {len(attachments)} VolumeAttachment(s)"
            " left"
        )
        expired = now >= assumed + OUT_OF_SERVICE_EXPIRY_SECONDS
        if case.deleting and expired and (terminating or evicted or attachments):
            return case.cleanup(Code.CLEANING_UP, "deleted and past the out-of-service expiry", expired=True)
        left = bool(terminating or evicted or attachments or step.taints_to_add)
    else:
        raise ValueError(f"strategy {case.strategy!r}: expected {RESOURCE_DELETION} or {OUT_OF_SERVICE_TAINT}")
    if left:
        if not step.writes:
            step.wait_until = now + POLL_SECONDS
        return step
    step.events.append(
        Event(
            "Normal", "DeleteResources", f"finished deleting the resources of the unhealthy node {node_name}", ON_NODE
        )
    )
    step.code = Code.COMPLETED
    step.reason = f"the workloads of node {node_name} are free to run elsewhere"
    step.status = case.status(
        {
            "Processing": ("False", REMEDIATION_FINISHED, "remediation finished"),
            "Succeeded": ("True", REMEDIATION_FINISHED, "remediation finished"),
        },
        phase=FENCING_COMPLETED,
    )
    return step


def _fencing_completed(case: _Case) -> Step:
    """Done; the out-of-service taint comes off once the node is back."""
    if case.deleting:
        return case.cleanup(Code.CLEANING_UP, "deleted: removing the taints and the finalizer")
    step = Step(
        Code.COMPLETED, f"fencing of node {case.node_name} completed; the object stays until the node is healthy"
    )
    if case.node is not None and OUT_OF_SERVICE_TAINT_KEY in case.taints and node_ready(case.node):
        step.taints_to_remove = [OUT_OF_SERVICE_TAINT_KEY]
        message = f"node {case.node_name} is back: out-of-service taint removed"
        step.events.append(Event("Normal", "RemoveOutOfService", message, ON_NODE))
    return step


def taints_after(node: Mapping[str, Any], step: Step) -> list[dict[str, Any]] | None:
    """The node's taints after ``step``; None when they do not change."""
    current = [dict(t) for t in (node.get("spec") or {}).get("taints") or [] if isinstance(t, Mapping)]
    keys = {t.get("key") for t in current}
    new = [t for t in current if t.get("key") not in step.taints_to_remove]
    new += [dict(t) for t in step.taints_to_add if t["key"] not in keys]
    return None if new == current else new
