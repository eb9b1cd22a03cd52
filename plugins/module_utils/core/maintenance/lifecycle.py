# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The life of one NodeMaintenance: from what it is now, the next step (the NVIDIA operator's states).

Pure: the inputs are the NodeMaintenance and its Node as plain dicts, ``now`` (seconds since the
epoch) and what the engine observed when a step needs I/O (the pods still to wait for, the outcome of
a drain pass). :func:`next_step` returns one :class:`Step`; the engine applies it in this order, so a
run killed between two writes continues correctly:

1. ``delete`` (garbage collection) - the object gets its deletionTimestamp, then the deletion path runs;
2. uncordon the Node (before the finalizer that guards the clean-up goes), or only remove our
   ``cordoned-by`` marker from it;
3. metadata: finalizer, owner reference, annotations;
4. cordon the Node (after its initial state is recorded in the annotation);
5. status: the Ready condition (``phase``) and ``status`` fields, then the events.

The steps that decide about the Node (Cordon, and the release of a request being deleted) are computed on
the Node as the engine last saw it when they write it, and the engine writes the Node conditionally (its
resourceVersion): when the Node changed meanwhile, the engine reads it again and asks for the step again. A
step that would leave the Node alone is computed on a Node the engine has just read.

Who lifts a cordon: the release uncordons only a Node that this request cordoned and that nobody has
cordoned since (:func:`should_uncordon`): the initial state it recorded is "false", the Node's
``maintenance.nodeops.io/cordoned-by`` marker still names this request, and the engine's field manager still
owns ``spec.unschedulable`` (``core/maintenance/cordon.py``). Any other cordoned Node is left cordoned, and the release
says so (:data:`EVENT_LEFT_CORDONED`).

The engine calls :func:`next_step` again on the updated object until a step changes nothing
(``Step.idle``) or needs I/O (``Step.need``) it did not do in this pass.

State order, exactly as upstream: (none) -> Pending -> Scheduled -> Cordon -> WaitForPodCompletion ->
Draining -> Ready <-> RequestorFailed; every request goes through every state even when the step has
nothing to do. Scheduling (Pending -> Scheduled) is the scheduler's (``scheduler.py``); :func:`scheduled_step`
writes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..node import conditions as _conditions
from ..node import rfc3339 as _rfc3339
from ..node.errors import NodeopsError
from . import cordon as _cordon_core
from . import drain as drain_core
from .scheduler import FINALIZER, INITIAL_UNSCHEDULABLE_ANNOTATION

PHASE_PENDING = "Pending"
PHASE_SCHEDULED = "Scheduled"
PHASE_CORDON = "Cordon"
PHASE_WAIT = "WaitForPodCompletion"
PHASE_DRAINING = "Draining"
PHASE_READY = "Ready"
PHASE_REQUESTOR_FAILED = "RequestorFailed"
PHASES = (
    PHASE_PENDING,
    PHASE_SCHEDULED,
    PHASE_CORDON,
    PHASE_WAIT,
    PHASE_DRAINING,
    PHASE_READY,
    PHASE_REQUESTOR_FAILED,
)
# Steps a request still moves through by itself (the engine keeps working on them).
ACTIVE_PHASES = frozenset((PHASE_SCHEDULED, PHASE_CORDON, PHASE_WAIT, PHASE_DRAINING))

WAIT_START_ANNOTATION = "maintenance.nvidia.com/wait-pod-completion-start-time"
READY_TIME_ANNOTATION = "maintenance.nvidia.com/ready-time"
GC_IGNORE_ANNOTATION = "maintenance.nvidia.com/garbage-collector.ignore"
# Ours (not upstream's): when the current drain attempt began, so that a drain spread over several
# passes (and runs) keeps one deadline; a new attempt starts after a timeout.
DRAIN_START_ANNOTATION = "maintenance.nodeops.io/drain-attempt-start-time"

CONDITION_READY = "Ready"
CONDITION_REQUESTOR_FAILED = "RequestorFailed"
EVENT_CONDITION_CHANGED = "ConditionChanged"
EVENT_EVICTION_BLOCKED = "EvictionBlocked"
EVENT_DRAIN_TIMEOUT = "DrainTimeout"
# Ours: the release gives the node back but leaves it cordoned (someone else's cordon); Warning when the node
# was cordoned again by someone else during the maintenance, Normal when it was cordoned before.
EVENT_LEFT_CORDONED = "NodeLeftCordoned"

NEED_PODS = "pods"  # list the node's pods that match waitForPodCompletion.podSelector
NEED_DRAIN = "drain"  # run a drain pass

DEFAULT_DRAIN_TIMEOUT = 300
#: The fields of ``status.drain`` that name what blocks a drain: the collection's CRD has them, the NVIDIA operator's
#: does not (the API server then drops them; the EvictionBlocked events keep the same details).
BLOCKING_FIELDS = ("blockingPods", "blockingPDBs", "blockedByRules")
DEFAULT_MAX_MAINTENANCE_SECONDS = 3600
#: The CRD's timeoutSeconds are int32.
MAX_TIMEOUT_SECONDS = 2**31 - 1


class LifecycleInputError(NodeopsError, ValueError):
    """A NodeMaintenance field the lifecycle cannot use; the message names the field and says how to fix it."""


@dataclass(frozen=True)
class Event:
    reason: str
    message: str
    type: str = "Normal"


@dataclass(frozen=True)
class DrainReport:
    """What one drain pass found (engines/drain.py ``PassResult``, reduced to what the lifecycle needs)."""

    done: bool
    status: Mapping[str, Any]  # status.drain: totalPods, evictionPods, drainProgress, waitForEviction
    timed_out: bool = False
    blocked_by_rules: str = ""  # a rule (force, deleteEmptyDir) blocks: nothing was evicted
    blocking_pods: tuple[str, ...] = ()  # namespace/name of pods whose eviction a PDB refuses
    blocking_pdbs: tuple[str, ...] = ()  # namespace/name of those PDBs
    message: str = ""  # why the drain did not finish, in words


@dataclass(frozen=True)
class Observation:
    """The I/O results a step asked for (``Step.need``); ``None`` = not observed in this pass."""

    waiting_pods: tuple[str, ...] | None = None  # pods (namespace/name) still to complete
    drain: DrainReport | None = None


@dataclass
class Step:
    """What to change now. Empty fields change nothing."""

    phase: str | None = None  # the new Ready reason
    finalizer: bool | None = None  # True: add ours, False: remove ours
    owner: bool = False  # add an ownerReference to the Node
    annotations: dict[str, str | None] = field(default_factory=dict)  # None removes the key
    unschedulable: bool | None = None  # True: cordon the node (with our marker), False: uncordon it (marker goes)
    forget_claim: bool = False  # remove our cordoned-by marker from the node, leave spec.unschedulable alone
    left_cordoned: str = ""  # the release leaves the node cordoned: why
    status: dict[str, Any] = field(default_factory=dict)  # status fields other than conditions; None removes
    events: list[Event] = field(default_factory=list)
    delete: bool = False  # garbage collection: delete the object
    need: str = ""  # NEED_PODS / NEED_DRAIN: observe, then ask again
    waiting: str = ""  # why the request does not move on (when it does not)
    released: bool = False  # the request gives its node back (our finalizer goes)

    @property
    def idle(self) -> bool:
        return not (
            self.phase
            or self.finalizer is not None
            or self.owner
            or self.annotations
            or self.unschedulable is not None
            or self.forget_claim
            or self.status
            or self.events
            or self.delete
        )


@dataclass(frozen=True)
class NodeMaintenanceView:
    """The fields of a NodeMaintenance the lifecycle reads."""

    key: str
    node_name: str
    phase: str
    deleting: bool
    finalizer: bool
    owned_by_node: bool
    cordon: bool
    annotations: Mapping[str, str]
    additional_requestors: tuple[str, ...]
    requestor_failed: bool
    wait_spec: Mapping[str, Any] | None
    drain_spec: Mapping[str, Any] | None
    status: Mapping[str, Any]
    claim: str = ""  # the value of our cordoned-by marker for this request

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> NodeMaintenanceView:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        phase = ""
        failed = False
        for condition in status.get("conditions") or ():
            if condition.get("type") == CONDITION_READY:
                phase = str(condition.get("reason") or "")
            elif condition.get("type") == CONDITION_REQUESTOR_FAILED:
                failed = condition.get("status") == "True"
        cordon = spec.get("cordon")
        return cls(
            key=f"{meta.get('namespace') or 'default'}/{meta.get('name')}",
            node_name=str(spec.get("nodeName") or ""),
            phase=phase,
            deleting=bool(meta.get("deletionTimestamp")),
            finalizer=FINALIZER in (meta.get("finalizers") or ()),
            owned_by_node=any(ref.get("kind") == "Node" for ref in meta.get("ownerReferences") or ()),
            cordon=True if cordon is None else bool(cordon),
            annotations={str(k): str(v) for k, v in (meta.get("annotations") or {}).items()},
            additional_requestors=tuple(spec.get("additionalRequestors") or ()),
            requestor_failed=failed,
            wait_spec=spec.get("waitForPodCompletion"),
            drain_spec=spec.get("drainSpec"),
            status=status,
            claim=claim_of(obj),
        )


# -- time ----------------------------------------------------------------------------------------
# Our own annotations are read with rfc3339.to_epoch: a value that is not a usable time (an impossible date, a time
# outside the years 0001-9999 in UTC, non-ASCII digits) counts as missing and is written again.
def rfc3339(seconds: float) -> str:
    """UTC, whole seconds, as the operator writes its annotations."""
    return _rfc3339.format_time(seconds)


def timeout_seconds(spec: Mapping[str, Any], field: str, default: int) -> int:
    """``spec.timeoutSeconds`` as the CRD has it (an int32 of 0 or more; ``default`` when unset), or
    LifecycleInputError naming ``field`` (int() took "٣" as 3, and "x" raised a bare ValueError)."""
    value = spec.get("timeoutSeconds")
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TIMEOUT_SECONDS:
        raise LifecycleInputError(
            f"{field}: {value!r} is not a whole number of seconds from 0 to {MAX_TIMEOUT_SECONDS}; "
            "give one such as 300 (0: no limit)."
        )
    return value


# -- the node -------------------------------------------------------------------------------------
def node_unschedulable(node: Mapping[str, Any]) -> bool:
    return bool((node.get("spec") or {}).get("unschedulable"))


def claim_of(obj: Mapping[str, Any]) -> str:
    """The cordoned-by marker a NodeMaintenance writes on the node it cordons."""
    meta = obj.get("metadata") or {}
    return _cordon_core.claim(
        "NodeMaintenance", meta.get("namespace") or "default", str(meta.get("name") or ""), meta.get("uid")
    )


def decides_on_node(obj: Mapping[str, Any]) -> bool:
    """Whether the next step of ``obj`` is decided on its node's current state: a step that writes the node
    (:func:`writes_node`) carries the resourceVersion it was decided on; one that would not is decided on the node
    read just before."""
    nm = NodeMaintenanceView.from_dict(obj)
    if nm.deleting:
        return nm.finalizer
    return nm.phase == PHASE_CORDON


def writes_node(step: Step) -> bool:
    """Whether ``step`` writes the node (cordon, uncordon, or our marker removed); such a write carries the
    resourceVersion of the node the step was decided on."""
    return step.unschedulable is not None or step.forget_claim


def cordoned_by_us(nm: NodeMaintenanceView, node: Mapping[str, Any]) -> bool:
    """The node is cordoned by this request, and nobody has cordoned it since (``core/maintenance/cordon.py``)."""
    return _cordon_core.cordoned_by_claim(node, nm.claim)


def should_uncordon(nm: NodeMaintenanceView, node: Mapping[str, Any]) -> bool:
    """Upstream's rule (spec.cordon, and the node was schedulable before), and the cordon is still ours."""
    return (
        nm.cordon
        and nm.annotations.get(INITIAL_UNSCHEDULABLE_ANNOTATION) == "false"
        and node_unschedulable(node)
        and cordoned_by_us(nm, node)
    )


def left_cordoned(nm: NodeMaintenanceView, node: Mapping[str, Any]) -> Event | None:
    """Why a release that does not uncordon leaves a cordoned node cordoned (None: nothing to say)."""
    if not nm.cordon or not node_unschedulable(node):
        return None
    name = nm.node_name
    if nm.annotations.get(INITIAL_UNSCHEDULABLE_ANNOTATION) != "false":
        return Event(EVENT_LEFT_CORDONED, f"node {name} was cordoned before this maintenance; it stays cordoned")
    owners = _cordon_core.unschedulable_owners(node)
    marker = _cordon_core.cordoned_by(node)
    clues = []
    if owners:
        clues.append("spec.unschedulable set by " + ", ".join(owners))
    if marker != nm.claim:
        clues.append(f"marker {_cordon_core.CORDONED_BY_ANNOTATION}=" + (repr(marker) if marker else "(none)"))
    if not clues:
        message = (
            f"node {name}: its cordon can no longer be shown to be this maintenance's (no owner of "
            "spec.unschedulable in its managedFields); it stays cordoned"
        )
    else:
        message = (
            f"node {name} was cordoned again by someone else during this maintenance ({'; '.join(clues)}); "
            "it stays cordoned"
        )
    return Event(EVENT_LEFT_CORDONED, message, "Warning")


def set_ready(conditions: list[dict[str, Any]], phase: str, generation: int | None, now: float) -> bool:
    """Set the Ready condition for ``phase`` in ``conditions`` (in place; whether it changed): status True only
    in Ready, the phase as its reason; lastTransitionTime moves only when the status changes."""
    extra = {} if generation is None else {"observedGeneration": generation}
    status = "True" if phase == PHASE_READY else "False"
    # Several Ready conditions (written by hand, or by another engine): the last one is what is read, so it is
    # the one kept and set.
    readies = [i for i, c in enumerate(conditions) if isinstance(c, Mapping) and c.get("type") == CONDITION_READY]
    for index in reversed(readies[:-1]):
        del conditions[index]
    changed = _conditions.set_condition(conditions, CONDITION_READY, status, phase, "", rfc3339(now), **extra)
    return changed or len(readies) > 1


# -- the steps ------------------------------------------------------------------------------------
def _to(phase: str) -> Step:
    return Step(phase=phase, events=[Event(EVENT_CONDITION_CHANGED, phase)])


def scheduled_step() -> Step:
    """Pending -> Scheduled, the scheduler's decision."""
    return _to(PHASE_SCHEDULED)


def gc_due(nm: NodeMaintenanceView, now: float, max_seconds: float) -> bool:
    """Ready (ready-time stamped) longer than maxNodeMaintenanceTimeSeconds, not kept, not being deleted."""
    if nm.deleting or nm.annotations.get(GC_IGNORE_ANNOTATION, "").lower() == "true":
        return False
    ready = _rfc3339.to_epoch(nm.annotations.get(READY_TIME_ANNOTATION))
    return ready is not None and now > ready + max_seconds


def next_step(
    obj: Mapping[str, Any],
    node: Mapping[str, Any] | None,
    now: float,
    observed: Observation | None = None,
    max_maintenance_seconds: float = DEFAULT_MAX_MAINTENANCE_SECONDS,
) -> Step:
    """The next step of one NodeMaintenance; ``node`` is None when its Node does not exist."""
    nm = NodeMaintenanceView.from_dict(obj)
    seen = observed or Observation()
    if nm.deleting:
        return _deletion(nm, node)
    if node is None:
        if nm.finalizer:
            return Step(finalizer=False, released=True, waiting=f"node {nm.node_name} does not exist")
        return Step(waiting=f"node {nm.node_name} does not exist")
    if gc_due(nm, now, max_maintenance_seconds):
        return Step(delete=True)
    phase = nm.phase
    if phase == "":
        return _to(PHASE_PENDING)
    if phase == PHASE_PENDING:
        return Step(waiting="waiting for the scheduler")
    if phase == PHASE_SCHEDULED:
        step = _to(PHASE_CORDON)
        if not nm.finalizer:
            step.finalizer = True
        step.owner = not nm.owned_by_node
        return step
    if phase == PHASE_CORDON:
        return _cordon(nm, node)
    if phase == PHASE_WAIT:
        return _wait(nm, now, seen)
    if phase == PHASE_DRAINING:
        return _drain(nm, now, seen)
    if phase in (PHASE_READY, PHASE_REQUESTOR_FAILED):
        step = Step()
        if _rfc3339.to_epoch(nm.annotations.get(READY_TIME_ANNOTATION)) is None:
            step.annotations[READY_TIME_ANNOTATION] = rfc3339(now)
        target = PHASE_REQUESTOR_FAILED if nm.requestor_failed else PHASE_READY
        if target != phase:
            step.phase = target
            step.events.append(Event(EVENT_CONDITION_CHANGED, target))
        return step
    return Step(waiting=f"unknown Ready reason {phase!r}; left alone")


def held(nm: NodeMaintenanceView) -> bool:
    """Whether a request being deleted is kept, its node still in maintenance, for its additional requestors: it
    is drained and still carries the finalizer (its node must exist too, else it is released)."""
    return (
        nm.deleting
        and nm.finalizer
        and nm.phase in (PHASE_READY, PHASE_REQUESTOR_FAILED)
        and bool(nm.additional_requestors)
    )


def held_for(obj: Mapping[str, Any], requestor: str) -> bool:
    """Whether ``obj`` is a request that ``requestor`` joined, deleted by its owner and kept for the requestors
    left (:func:`held`), this one among them: the node's maintenance goes on for it."""
    nm = NodeMaintenanceView.from_dict(obj)
    owner = (obj.get("spec") or {}).get("requestorID")
    return held(nm) and requestor in nm.additional_requestors and owner != requestor


def _deletion(nm: NodeMaintenanceView, node: Mapping[str, Any] | None) -> Step:
    if not nm.finalizer:
        return Step(waiting="being deleted; nothing of ours to clean up")
    if node is None:
        return Step(finalizer=False, released=True)
    if held(nm):
        return Step(waiting="being deleted, held for the additional requestors " + ", ".join(nm.additional_requestors))
    step = Step(finalizer=False, released=True)
    if should_uncordon(nm, node):
        step.unschedulable = False
        step.annotations[INITIAL_UNSCHEDULABLE_ANNOTATION] = None
        return step
    step.forget_claim = _cordon_core.cordoned_by(node) == nm.claim
    event = left_cordoned(nm, node)
    if event is not None:
        step.left_cordoned = event.message
        step.events.append(event)
    return step


def _cordon(nm: NodeMaintenanceView, node: Mapping[str, Any]) -> Step:
    """Record the node's initial state and cordon it, decided on the node as it is now.

    A schedulable node is cordoned (with our marker) and recorded "false", also when an earlier look had
    recorded "true" (upstream would go on without a cordon); a node cordoned by us (a pass stopped after the
    cordon) keeps "false"; a node cordoned by anyone else is recorded "true" and never uncordoned by us.
    """
    step = _to(PHASE_WAIT)
    if nm.cordon:
        if not node_unschedulable(node):
            initial = "false"
            step.unschedulable = True
        else:
            initial = "false" if cordoned_by_us(nm, node) else "true"
        if nm.annotations.get(INITIAL_UNSCHEDULABLE_ANNOTATION) != initial:
            step.annotations[INITIAL_UNSCHEDULABLE_ANNOTATION] = initial
    return step


def _wait(nm: NodeMaintenanceView, now: float, seen: Observation) -> Step:
    spec = nm.wait_spec
    if spec is None:
        return _to(PHASE_DRAINING)
    try:
        timeout = timeout_seconds(spec, "spec.waitForPodCompletion.timeoutSeconds", 0)
    except LifecycleInputError as err:
        return Step(waiting=str(err))  # held where it is, the reason shown, as for an unknown Ready reason
    start = _rfc3339.to_epoch(nm.annotations.get(WAIT_START_ANNOTATION))
    step = Step()
    if start is None:  # first check, or a value that does not parse: the wait starts now
        start = now
        step.annotations[WAIT_START_ANNOTATION] = rfc3339(now)
    if seen.waiting_pods is None:
        step.need = NEED_PODS
        return step
    left = sorted(seen.waiting_pods)
    if list(nm.status.get("waitForCompletion") or []) != left:
        step.status["waitForCompletion"] = left
    if not left or (timeout > 0 and now > start + timeout):
        step.phase = PHASE_DRAINING
        step.events.append(Event(EVENT_CONDITION_CHANGED, PHASE_DRAINING))
        return step
    step.waiting = f"waiting for {len(left)} pod(s) to complete: {', '.join(left[:5])}" + (
        " ..." if len(left) > 5 else ""
    )
    return step


def drain_timeout(spec: Mapping[str, Any]) -> int:
    """The drainSpec's timeoutSeconds (LifecycleInputError, a ValueError, naming it when it is not one)."""
    return timeout_seconds(spec, "spec.drainSpec.timeoutSeconds", DEFAULT_DRAIN_TIMEOUT)


def pruned_fields(written: Mapping[str, Any], stored: Mapping[str, Any]) -> list[str]:
    """The ``status.drain`` fields naming what blocks a drain that were written but not stored: the installed CRD
    has no place for them (the NVIDIA operator's). ``written`` and ``stored`` are the status sent and returned."""
    sent = written.get("drain") or {}
    kept = stored.get("drain") or {}
    return [f"status.drain.{key}" for key in BLOCKING_FIELDS if sent.get(key) and key not in kept]


def drain_started_at(obj: Mapping[str, Any], now: float) -> float:
    """When the current drain attempt began (the annotation), or ``now`` for a new attempt."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    start = _rfc3339.to_epoch(annotations.get(DRAIN_START_ANNOTATION))
    return now if start is None else start


def drain_counts_of_the_attempt(previous: Mapping[str, Any], current: Mapping[str, Any]) -> dict[str, Any]:
    """``status.drain``'s counts for an attempt that spans passes: ``totalPods`` and ``evictionPods`` are those of
    the attempt's start (each later pass sees only the pods left), ``drainProgress`` is measured against them."""
    out: dict[str, Any] = {}
    for key in ("totalPods", "evictionPods"):
        earlier, now = previous.get(key), current.get(key)
        if isinstance(earlier, int) and isinstance(now, int) and earlier > now:
            out[key] = earlier
    if "evictionPods" in out:
        remaining = len(current.get("waitForEviction") or [])
        out["drainProgress"] = drain_core.progress_percent(out["evictionPods"], remaining)
    return out


def _drain(nm: NodeMaintenanceView, now: float, seen: Observation) -> Step:
    spec = nm.drain_spec
    if spec is None:
        step = _to(PHASE_READY)
        if "drain" in nm.status:
            step.status["drain"] = None
        if DRAIN_START_ANNOTATION in nm.annotations:
            step.annotations[DRAIN_START_ANNOTATION] = None
        return step
    step = Step()
    attempt_started = _rfc3339.to_epoch(nm.annotations.get(DRAIN_START_ANNOTATION)) is not None
    if not attempt_started:
        step.annotations[DRAIN_START_ANNOTATION] = rfc3339(now)
    report = seen.drain
    if report is None:
        step.need = NEED_DRAIN
        return step
    status = dict(report.status)
    previous = nm.status.get("drain") or {}
    if attempt_started:
        status.update(drain_counts_of_the_attempt(previous, status))
    if report.blocking_pods:
        status["blockingPods"] = sorted(report.blocking_pods)
    if report.blocking_pdbs:
        status["blockingPDBs"] = sorted(report.blocking_pdbs)
    if report.done:
        step.phase = PHASE_READY
        step.events.append(Event(EVENT_CONDITION_CHANGED, PHASE_READY))
        step.annotations[DRAIN_START_ANNOTATION] = None
        for key in BLOCKING_FIELDS:
            status.pop(key, None)
        if dict(previous) != status:
            step.status["drain"] = status
        step.annotations = {k: v for k, v in step.annotations.items() if v is not None or k in nm.annotations}
        return step
    if report.blocked_by_rules:
        status["blockedByRules"] = report.blocked_by_rules
    if dict(previous) != status:
        step.status["drain"] = status
    if report.blocked_by_rules:
        step.waiting = report.blocked_by_rules
        if previous.get("blockedByRules") != report.blocked_by_rules:
            step.events.append(Event(EVENT_EVICTION_BLOCKED, report.blocked_by_rules, "Warning"))
    elif report.blocking_pods and (
        list(previous.get("blockingPods") or ()) != status["blockingPods"]
        or list(previous.get("blockingPDBs") or ()) != list(status.get("blockingPDBs") or ())
    ):
        message = (
            "eviction refused by PodDisruptionBudget "
            + (", ".join(status.get("blockingPDBs") or ()) or "(unknown)")
            + " for pod(s) "
            + ", ".join(status["blockingPods"])
        )
        step.events.append(Event(EVENT_EVICTION_BLOCKED, message, "Warning"))
    if report.timed_out:
        # A new attempt begins with the next pass (upstream restarts the drain after a timeout).
        step.annotations[DRAIN_START_ANNOTATION] = rfc3339(now)
        step.events.append(
            Event(EVENT_DRAIN_TIMEOUT, report.message or f"the drain of node {nm.node_name} timed out", "Warning")
        )
    if not step.waiting:
        step.waiting = report.message or "draining"
    return step
