# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The NodeMaintenance scheduler and the rollout simulation.

Pure: the inputs are Node, NodeMaintenance and MaintenanceOperatorConfig data (plain Kubernetes
dicts, parsed here into frozen dataclasses); nothing here talks to the API or reads the clock.

One pass (:func:`schedule`) decides which ``Pending`` requests move to ``Scheduled``:

* ``availableSlots = min(max(0, maxParallelOperations - |nodes under maintenance|), N)`` with the
  percentage of all ``N`` nodes rounded up (unset = 1, ``0`` or negative schedules nothing);
* ``canBecomeUnavailable = max(0, maxUnavailable - |unavailable nodes U nodes under maintenance|)``
  with the percentage rounded down; unset or negative = no limit (``None``);
* candidates are the Pending requests on nodes with no request in progress, ranked: requestors with a
  request in progress first, then requestors with fewer Pending requests (counted up to 100, as
  upstream does), then creation time (seconds), nodeName, requestorID and ``namespace/name``;
* one request per node; a request on an already unavailable node (cordoned or not Ready) does not use
  the ``maxUnavailable`` budget; a candidate skipped for lack of budget does not use up a slot
  (upstream lets it use up its position): the walk goes on until the slots are filled or the list ends.

Decisions where upstream and the issue are silent (also in docs/design-notes.md):

* A request in progress (Ready reason ``Scheduled`` or later, or any unknown reason) holds its node
  while the object exists, including while it is being deleted, as long as it still carries the
  ``maintenance.nvidia.com/finalizer``; once that finalizer is gone its cleanup is done and the node
  is free even if another finalizer keeps the object alive.
* A request with no Ready condition yet (just created, before the reconciler marks it Pending) is
  treated as Pending: it will be Pending at the next step of the same pass.
* A Pending request that is being deleted is never scheduled (reason ``being_deleted``) and is not
  counted in its requestor's pending count.
* A request for a node that does not exist is an input error by default (``unknown_nodes="error"``),
  since offline data with a typo must not plan silently; with ``unknown_nodes="skip"`` (a live cluster,
  where a Node can go away before its requests are collected) it is reported as ``node_not_found``
  and, as upstream, still counts in its requestor's ranking.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from heapq import heapify, heappop, heappush
from typing import Any, TypeVar

from ..crd_schemas import SCHEMAS
from ..intorpercent import parse, scaled
from ..node import rfc3339
from ..node.errors import NodeopsError
from ..node.nodes import node_ready

_T = TypeVar("_T")

FINALIZER = "maintenance.nvidia.com/finalizer"
INITIAL_UNSCHEDULABLE_ANNOTATION = "maintenance.nvidia.com/node-initial-state.unschedulable"

# Ready condition reasons of a NodeMaintenance (the NVIDIA operator's).
PHASE_NEW = ""
PHASE_PENDING = "Pending"
PHASE_SCHEDULED = "Scheduled"
_WAITING_PHASES = frozenset((PHASE_NEW, PHASE_PENDING))

# Reason codes of a decision: stable, for playbooks to test against.
SCHEDULED = "scheduled"
SCHEDULED_NODE_UNAVAILABLE = "scheduled_node_unavailable"
NO_SLOT = "no_slot"
NO_BUDGET = "no_budget"
NODE_IN_MAINTENANCE = "node_in_maintenance"
NODE_TAKEN = "node_taken"
NODE_NOT_FOUND = "node_not_found"
BEING_DELETED = "being_deleted"
REASONS = (
    SCHEDULED,
    SCHEDULED_NODE_UNAVAILABLE,
    NO_SLOT,
    NO_BUDGET,
    NODE_IN_MAINTENANCE,
    NODE_TAKEN,
    NODE_NOT_FOUND,
    BEING_DELETED,
)
SCHEDULED_REASONS = frozenset((SCHEDULED, SCHEDULED_NODE_UNAVAILABLE))

IN_PROGRESS_WEIGHT = 1000
PENDING_CAP = 100
UNKNOWN_NODES_MODES = ("error", "skip")


# dict first: API objects are dicts, and the check against the Mapping ABC costs ten times more.
_MAPS = (dict, Mapping)


class SchedulerInputError(NodeopsError, ValueError):
    """Input the scheduler cannot use; the message names the object and the field."""


# -- inputs ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class NodeState:
    """What the scheduler needs of a Node: its name and whether it is available."""

    name: str
    unschedulable: bool = False
    ready: bool = True

    @property
    def available(self) -> bool:
        """Schedulable and Ready (a node without a Ready condition counts as Ready, as upstream)."""
        return self.ready and not self.unschedulable

    @classmethod
    def from_dict(cls, obj: Any, where: str = "node") -> NodeState:
        if not isinstance(obj, _MAPS):
            raise SchedulerInputError(
                f"{where}: a Node must be an object as 'kubectl get node -o json' prints it, not {_kind_of(obj)}."
            )
        kind = obj.get("kind")
        if kind not in (None, "Node"):
            raise SchedulerInputError(f"{where}: kind is {kind!r}; expected a Node.")
        name = _name(obj, where)
        spec = obj.get("spec") or {}
        if not isinstance(spec, _MAPS):
            _mapping(spec, f"Node {name}: spec")
        unschedulable = spec.get("unschedulable")
        if unschedulable is not None and not isinstance(unschedulable, bool):
            raise SchedulerInputError(f"Node {name}: spec.unschedulable must be true or false, not {unschedulable!r}.")
        status = obj.get("status") or {}
        if not isinstance(status, _MAPS):
            _mapping(status, f"Node {name}: status")
        conditions = status.get("conditions") or ()
        if not isinstance(conditions, (list, tuple)):
            _list(conditions, f"Node {name}: status.conditions")
        # a node without a Ready condition is available (as upstream counts it)
        ready = node_ready(obj, missing=True)
        return _build(cls, name=name, unschedulable=bool(unschedulable), ready=ready)


@dataclass(frozen=True)
class MaintenanceRequest:
    """What the scheduler needs of a NodeMaintenance."""

    namespace: str
    name: str
    node_name: str
    requestor_id: str
    phase: str = PHASE_PENDING  # the Ready condition's reason; "" when it has no Ready condition yet
    created: int = 0  # creationTimestamp in seconds since the epoch; 0 when unknown (sorts first)
    deleting: bool = False
    finalizer: bool = False  # carries maintenance.nvidia.com/finalizer
    cordon: bool = True
    initial_unschedulable: str | None = None  # the node-initial-state.unschedulable annotation
    additional_requestors: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def waiting(self) -> bool:
        """Pending, or new (no Ready condition yet): the scheduler may pick it."""
        return self.phase in _WAITING_PHASES

    @property
    def in_progress(self) -> bool:
        return self.phase not in _WAITING_PHASES

    @property
    def holds_node(self) -> bool:
        """In progress and not yet released: counts as 'under maintenance' for its node."""
        return self.phase not in _WAITING_PHASES and (self.finalizer or not self.deleting)

    @classmethod
    def from_dict(cls, obj: Any, where: str = "NodeMaintenance") -> MaintenanceRequest:
        if not isinstance(obj, _MAPS):
            raise SchedulerInputError(
                f"{where}: a NodeMaintenance must be an object as 'kubectl get nodemaintenance -o json' prints it, "
                f"not {_kind_of(obj)}."
            )
        kind = obj.get("kind")
        if kind not in (None, "NodeMaintenance"):
            raise SchedulerInputError(f"{where}: kind is {kind!r}; expected a NodeMaintenance.")
        name = _name(obj, where)
        meta = obj["metadata"]
        namespace = meta.get("namespace") or "default"
        if not isinstance(namespace, str):
            raise SchedulerInputError(f"NodeMaintenance {name}: metadata.namespace must be a string.")
        what = f"NodeMaintenance {namespace}/{name}"
        spec = obj.get("spec")
        if not isinstance(spec, _MAPS):
            raise SchedulerInputError(f"{what}: spec is missing or not an object; it needs nodeName and requestorID.")
        node_name = spec.get("nodeName")
        if not isinstance(node_name, str) or not node_name:
            raise SchedulerInputError(f"{what}: spec.nodeName is missing or not a string; name the node to maintain.")
        requestor = spec.get("requestorID")
        if not isinstance(requestor, str) or not requestor:
            raise SchedulerInputError(
                f"{what}: spec.requestorID is missing or not a string; set the ID of who asks (e.g. gpu.example.com)."
            )
        additional = spec.get("additionalRequestors") or ()
        if additional and (
            not isinstance(additional, (list, tuple)) or not all(isinstance(a, str) for a in additional)
        ):
            raise SchedulerInputError(f"{what}: spec.additionalRequestors must be a list of strings.")
        cordon = spec.get("cordon", True)
        if cordon is None:
            cordon = True
        if not isinstance(cordon, bool):
            raise SchedulerInputError(f"{what}: spec.cordon must be true or false, not {cordon!r}.")
        # The checks below build their message only on failure: this runs once per object of a 10k list.
        finalizers = meta.get("finalizers") or ()
        if not isinstance(finalizers, (list, tuple)):
            _list(finalizers, f"{what}: metadata.finalizers")
        annotations = meta.get("annotations") or {}
        if not isinstance(annotations, _MAPS):
            _mapping(annotations, f"{what}: metadata.annotations")
        initial = annotations.get(INITIAL_UNSCHEDULABLE_ANNOTATION)
        status = obj.get("status") or {}
        if not isinstance(status, _MAPS):
            _mapping(status, f"{what}: status")
        conditions = status.get("conditions") or ()
        if not isinstance(conditions, (list, tuple)):
            _list(conditions, f"{what}: status.conditions")
        phase = PHASE_NEW
        for condition in conditions:
            if isinstance(condition, _MAPS) and condition.get("type") == "Ready":
                reason = condition.get("reason")
                if not isinstance(reason, str):
                    raise SchedulerInputError(f"{what}: status.conditions[Ready].reason must be a string.")
                phase = reason
        return _build(
            cls,
            namespace=namespace,
            name=name,
            node_name=node_name,
            requestor_id=requestor,
            phase=phase,
            created=_epoch(meta.get("creationTimestamp"), what, "metadata.creationTimestamp"),
            deleting=_deleting(meta.get("deletionTimestamp"), what),
            finalizer=FINALIZER in finalizers,
            cordon=cordon,
            initial_unschedulable=initial if isinstance(initial, str) else None,
            additional_requestors=tuple(additional),
        )


@dataclass(frozen=True)
class SchedulerConfig:
    """The limits of a MaintenanceOperatorConfig; the values are validated when the object is made."""

    max_parallel_operations: Any = 1
    max_unavailable: Any = None
    source: str = "MaintenanceOperatorConfig"

    def __post_init__(self) -> None:
        parse(self.max_parallel_operations, f"{self.source}: spec.maxParallelOperations")
        if self.max_unavailable is not None:
            parse(self.max_unavailable, f"{self.source}: spec.maxUnavailable")

    @classmethod
    def from_spec(cls, spec: Any, source: str = "MaintenanceOperatorConfig") -> SchedulerConfig:
        """From a config's ``spec`` (or the whole object); ``None`` gives the defaults."""
        if spec is None:
            return cls(source=source)
        if not isinstance(spec, _MAPS):
            raise SchedulerInputError(f"{source}: the config must be an object (its spec), not {_kind_of(spec)}.")
        if "spec" in spec and ("kind" in spec or "metadata" in spec):
            spec = _mapping(spec.get("spec"), f"{source}: spec")
        unknown = sorted(set(spec) - _CONFIG_FIELDS)
        if unknown:
            raise SchedulerInputError(
                f"{source}: unknown field(s) {', '.join(unknown)}; a MaintenanceOperatorConfig spec has "
                f"{', '.join(sorted(_CONFIG_FIELDS))}."
            )
        _gc_seconds(spec.get("maxNodeMaintenanceTimeSeconds"), source)
        mpo = spec.get("maxParallelOperations")
        return cls(1 if mpo is None else mpo, spec.get("maxUnavailable"), source)

    def parallel_limit(self, total: int) -> int:
        """maxParallelOperations as a number of nodes (percent rounded up)."""
        return scaled(self.max_parallel_operations, total, True, "spec.maxParallelOperations")

    def unavailable_limit(self, total: int) -> int | None:
        """maxUnavailable as a number of nodes (percent rounded down); ``None`` = no limit."""
        if self.max_unavailable is None:
            return None
        limit = scaled(self.max_unavailable, total, False, "spec.maxUnavailable")
        return None if limit < 0 else limit


# the fields of a MaintenanceOperatorConfig spec, as the CRD in the collection has them
_CONFIG_FIELDS = frozenset(SCHEMAS["MaintenanceOperatorConfig"]["schema"]["properties"]["spec"]["properties"])


def parse_nodes(objs: Iterable[Any], where: str = "nodes") -> list[NodeState]:
    return [NodeState.from_dict(obj, f"{where}[{index}]") for index, obj in enumerate(objs)]


def parse_requests(objs: Iterable[Any], where: str = "node_maintenances") -> list[MaintenanceRequest]:
    return [MaintenanceRequest.from_dict(obj, f"{where}[{index}]") for index, obj in enumerate(objs)]


# -- one pass ----------------------------------------------------------------------------------
@dataclass
class Decision:
    """Why a waiting request was or was not scheduled in this pass.

    Not frozen, unlike the inputs: a pass makes one per waiting request, and a frozen dataclass costs
    ten times more to build (about 20 ms of a 10k pass). Treat it as read-only.
    """

    request: MaintenanceRequest
    reason: str
    message: str
    position: int | None = None  # 1-based place in the ranked candidate list; None when not ranked
    rank: int | None = None  # upstream's score: 1000 for an in-progress requestor + (100 - pending count)

    @property
    def scheduled(self) -> bool:
        return self.reason in SCHEDULED_REASONS

    def as_dict(self) -> dict[str, Any]:
        r = self.request
        return {
            "name": r.key,
            "namespace": r.namespace,
            "node": r.node_name,
            "requestor": r.requestor_id,
            "scheduled": self.scheduled,
            "reason": self.reason,
            "message": self.message,
            "position": self.position,
            "rank": self.rank,
        }


@dataclass(frozen=True)
class Schedule:
    """The outcome of one pass: the numbers and a decision for every waiting request."""

    total_nodes: int
    max_parallel_operations: int
    max_unavailable: int | None  # None: no limit
    in_maintenance: tuple[str, ...]  # nodes with a request in progress, sorted
    unavailable: tuple[str, ...]  # nodes unschedulable or not Ready, sorted
    available_slots: int
    can_become_unavailable: int | None  # None: no limit
    decisions: tuple[Decision, ...]  # ranked candidates in order, then the others by namespace/name

    @property
    def scheduled(self) -> tuple[MaintenanceRequest, ...]:
        return tuple(d.request for d in self.decisions if d.reason in SCHEDULED_REASONS)

    def as_dict(self) -> dict[str, Any]:
        return {
            "scheduled": [r.key for r in self.scheduled],
            "total_nodes": self.total_nodes,
            "max_parallel_operations": self.max_parallel_operations,
            "max_unavailable": self.max_unavailable,
            "available_slots": self.available_slots,
            "can_become_unavailable": self.can_become_unavailable,
            "in_maintenance": list(self.in_maintenance),
            "unavailable_nodes": list(self.unavailable),
            "candidates": [d.as_dict() for d in self.decisions],
        }


def schedule(
    nodes: Iterable[NodeState],
    requests: Iterable[MaintenanceRequest],
    config: SchedulerConfig | None = None,
    unknown_nodes: str = "error",
) -> Schedule:
    """One scheduling pass over all nodes and all requests; the order of the inputs does not matter."""
    node_map = _node_map(nodes)
    reqs = _request_list(requests, node_map, unknown_nodes)
    return _schedule(node_map, reqs, config or SchedulerConfig())


def _node_map(nodes: Iterable[NodeState]) -> dict[str, NodeState]:
    node_map: dict[str, NodeState] = {}
    for node in nodes:
        if node.name in node_map:
            raise SchedulerInputError(f"Node {node.name}: given twice; each Node must appear once.")
        node_map[node.name] = node
    return node_map


def _request_list(
    requests: Iterable[MaintenanceRequest], node_map: Mapping[str, NodeState], unknown_nodes: str
) -> dict[str, MaintenanceRequest]:
    """The requests by namespace/name, checked: each once, and (with "error") on a known node."""
    if unknown_nodes not in UNKNOWN_NODES_MODES:
        raise ValueError(f"unknown_nodes must be one of {', '.join(UNKNOWN_NODES_MODES)}, not {unknown_nodes!r}")
    by_key: dict[str, MaintenanceRequest] = {}
    strict = unknown_nodes == "error"
    for req in requests:
        key = f"{req.namespace}/{req.name}"
        if key in by_key:
            raise SchedulerInputError(f"NodeMaintenance {key}: given twice; each object must appear once.")
        by_key[key] = req
        if strict and req.node_name not in node_map:
            raise SchedulerInputError(
                f"NodeMaintenance {key}: spec.nodeName {req.node_name!r} is not one of the given nodes; "
                "fix the name or add the Node."
            )
    return by_key


def _schedule(
    node_map: Mapping[str, NodeState], reqs: Mapping[str, MaintenanceRequest], config: SchedulerConfig
) -> Schedule:
    total = len(node_map)
    max_ops = config.parallel_limit(total)
    max_unav = config.unavailable_limit(total)

    holder: dict[str, str] = {}  # node -> first (by key) request in progress on it
    busy_requestors: set[str] = set()
    pending_count: dict[str, int] = {}
    waiting: list[tuple[str, MaintenanceRequest]] = []
    for key, req in reqs.items():
        if req.phase in _WAITING_PHASES:
            waiting.append((key, req))
            # A new request (no Ready condition yet) counts as Pending, because the pass marks it so, but only
            # on a node that exists: one for a missing node is never marked Pending (upstream neither), so it
            # does not count in its requestor's ranking. One Pending already whose node went since still counts.
            counted = req.phase == PHASE_PENDING or req.node_name in node_map
            if not req.deleting and counted:
                pending_count[req.requestor_id] = pending_count.get(req.requestor_id, 0) + 1
        elif req.finalizer or not req.deleting:
            busy_requestors.add(req.requestor_id)
            node = req.node_name
            if node in node_map and (node not in holder or key < holder[node]):
                holder[node] = key

    unavailable = {name for name, node in node_map.items() if not (node.ready and not node.unschedulable)}
    in_maint = holder.keys()
    available_slots = min(max(0, max_ops - len(in_maint)), total)
    already_down = len(unavailable | in_maint)
    budget = None if max_unav is None else max(0, max_unav - already_down)

    ranked: list[tuple[int, int, str, str, str, MaintenanceRequest]] = []
    others: list[tuple[str, Decision]] = []
    for key, req in waiting:
        node = req.node_name
        if req.deleting:
            others.append((key, Decision(req, BEING_DELETED, "the request is being deleted, so it is not scheduled.")))
        elif node not in node_map:
            others.append((key, Decision(req, NODE_NOT_FOUND, f"node {node} does not exist.")))
        elif node in holder:
            message = f"node {node} is under maintenance for {holder[node]}; one request per node at a time."
            others.append((key, Decision(req, NODE_IN_MAINTENANCE, message)))
        else:
            rank = (
                (IN_PROGRESS_WEIGHT if req.requestor_id in busy_requestors else 0)
                + PENDING_CAP
                - min(PENDING_CAP, pending_count.get(req.requestor_id, 0))
            )
            ranked.append((-rank, req.created, node, req.requestor_id, key, req))
    ranked.sort()  # namespace/name is unique, so the comparison never reaches the request itself

    decisions: list[Decision] = []
    first_on_node: dict[str, str] = {}
    slots = available_slots
    left = budget
    no_slot = _no_slot_message(max_ops, len(in_maint), available_slots)
    no_budget = (
        f"but maxUnavailable ({max_unav}) is reached: {already_down} node(s) unavailable or under maintenance"
        + (f", {budget} more scheduled in this pass." if budget else ".")
    )
    for position, (neg_rank, _created, node, _requestor, key, req) in enumerate(ranked, 1):
        rank = -neg_rank
        if node in first_on_node:
            reason = NODE_TAKEN
            message = f"{first_on_node[node]} ranks higher for node {node}; one request per node at a time."
        elif slots <= 0:
            first_on_node[node] = key
            reason = NO_SLOT
            message = no_slot
        elif node in unavailable:
            first_on_node[node] = key
            reason = SCHEDULED_NODE_UNAVAILABLE
            message = f"node {node} is already unavailable, so the maxUnavailable budget is not used."
            slots -= 1
        elif left is None or left > 0:
            first_on_node[node] = key
            reason = SCHEDULED
            if left is None:
                message = f"node {node} becomes unavailable; maxUnavailable sets no limit."
            else:
                message = f"node {node} becomes unavailable: {left} of the maxUnavailable budget left before it."
                left -= 1
            slots -= 1
        else:
            first_on_node[node] = key
            reason = NO_BUDGET
            message = f"node {node} is available and would become unavailable, {no_budget}"
        decisions.append(Decision(req, reason, message, position, rank))
    others.sort(key=_first)
    decisions.extend(decision for _key, decision in others)
    return Schedule(
        total_nodes=total,
        max_parallel_operations=max_ops,
        max_unavailable=max_unav,
        in_maintenance=tuple(sorted(in_maint)),
        unavailable=tuple(sorted(unavailable)),
        available_slots=available_slots,
        can_become_unavailable=budget,
        decisions=tuple(decisions),
    )


def _first(item: tuple[str, Decision]) -> str:
    return item[0]


def _no_slot_message(max_ops: int, busy: int, available_slots: int) -> str:
    if max_ops <= 0:
        return f"maxParallelOperations allows {max_ops} node(s) under maintenance, so nothing is scheduled."
    if available_slots == 0:
        return f"no free slot: {busy} node(s) under maintenance, maxParallelOperations allows {max_ops}."
    return f"no free slot: the {available_slots} free slot(s) went to higher-ranked requests."


# -- rollout -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Wave:
    index: int  # 1-based
    requests: tuple[MaintenanceRequest, ...]  # in ranked order

    def as_dict(self) -> dict[str, Any]:
        return {
            "wave": self.index,
            "requests": [r.key for r in self.requests],
            "nodes": [r.node_name for r in self.requests],
        }


@dataclass(frozen=True)
class Rollout:
    """The waves that follow if every scheduled request completes and is released.

    The model is synchronous: the requests in progress and those of a wave all complete and are released
    before the next wave is scheduled, and a released node returns to the availability it had before
    (a node the maintenance cordoned is uncordoned, as the release does). ``never`` lists the waiting
    requests that no wave reaches, with the reason of the last pass (no slot at all, a budget used up by
    nodes that stay unavailable, a node that does not exist, a request being deleted).
    """

    first: Schedule  # the next pass, on the state given
    in_progress: tuple[MaintenanceRequest, ...]  # requests already in progress, by namespace/name
    waves: tuple[Wave, ...]
    never: tuple[Decision, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "in_progress": [r.key for r in self.in_progress],
            "waves": [w.as_dict() for w in self.waves],
            "never": [d.as_dict() for d in self.never],
        }


def simulate_rollout(
    nodes: Iterable[NodeState],
    requests: Iterable[MaintenanceRequest],
    config: SchedulerConfig | None = None,
    unknown_nodes: str = "error",
) -> Rollout:
    """Schedule, complete and release wave after wave until no waiting request can be scheduled.

    Ends after at most one pass per waiting request plus one: every pass after the first either schedules
    at least one request or stops, because a released cluster does not change between passes. The first
    pass is :func:`schedule`'s; the passes after it are computed incrementally (:class:`_ReleasedPasses`),
    with the same result as a full pass on the released cluster and the requests still waiting, and the
    last one (the pass that schedules nothing and gives ``never``) is a full pass again.
    """
    config = config or SchedulerConfig()
    node_map = _node_map(nodes)
    reqs = _request_list(requests, node_map, unknown_nodes)
    first = _schedule(node_map, reqs, config)

    holding = [reqs[key] for key in sorted(reqs) if reqs[key].in_progress]
    # Release what is in progress: a node this maintenance cordoned gets uncordoned.
    released = dict(node_map)
    for req in holding:
        node = released.get(req.node_name)
        if (
            node is not None
            and req.holds_node
            and req.cordon
            and req.initial_unschedulable == "false"
            and node.unschedulable
        ):
            released[req.node_name] = NodeState(node.name, False, node.ready)

    waiting = {key: r for key, r in reqs.items() if r.waiting}
    waves: list[Wave] = []
    chosen = first.scheduled
    if chosen:
        waves.append(Wave(1, chosen))
        for req in chosen:
            del waiting[req.key]
    never: tuple[Decision, ...] = ()
    if waiting:
        passes = _ReleasedPasses(released, waiting.values(), config)
        while waiting:
            chosen = passes.next_pass()
            if not chosen:  # the cluster no longer changes: say why each request left waits
                never = _schedule(released, waiting, config).decisions
                break
            waves.append(Wave(len(waves) + 1, chosen))
            for req in chosen:
                del waiting[req.key]
    return Rollout(first, tuple(holding), tuple(waves), never)


# A waiting request's place in _schedule's ranking is (-rank, created, nodeName, requestorID, namespace/name).
# Only the rank changes from pass to pass, and for all requests of a requestor at once, so the rest is kept
# apart: _Order is (created, nodeName, requestorID, namespace/name), _Ranked is (-rank, _Order), which
# compares as the flat tuple does.
_Order = tuple[int, str, str, str]
_Ranked = tuple[int, _Order]


class _ReleasedPasses:
    """The passes of a rollout after the first, one :meth:`next_pass` per pass, each with the result
    ``_schedule(released, waiting, config)`` has for the requests still waiting.

    After the first pass nothing is in progress and the nodes keep the availability of the released cluster,
    so every pass has the same slots and budget, no requestor is busy, and the candidates are the waiting
    requests not being deleted on a node that exists. Between passes only the candidates change (those of the
    last wave are gone) and with them the pending counts, which only fall, so a requestor's rank only rises.

    A pass takes, in ranked order, the first candidate of each node (the node's *head*; the others are
    ``node_taken``): on an unavailable node while slots last, on an available node while the budget lasts too
    (a ``no_budget`` candidate uses no slot). So a wave is the heads of the unavailable nodes and the first
    ``budget`` heads of the available nodes, merged in ranked order and cut after ``slots``, and a pass costs
    about the size of its wave instead of all nodes and requests:

    * ``queues[node][requestor]``: the requestor's candidates on the node, last in ``_Order`` at the end;
      among them the order never changes, so the first is the requestor's best there;
    * ``head[node]``: the node's head. A node with candidates of several requestors (a *shared* node) keeps
      in ``node_heap[node]`` a (-rank, first candidate) entry per requestor, pushed again when the requestor's
      rank rises or its first candidate there goes; an entry that is no longer current is dropped when it
      comes to the top (ranks only rise: a current entry always comes before the outdated ones of its request);
    * ``heads[requestor, down]``: the heads of the requestor on unavailable (``down``) or available nodes, in
      ``_Order``; ``top[down]``: a (-rank, first head) entry per requestor, pushed again when its rank or its
      first head changes, so that a rank change is one push per requestor instead of one per request. An entry
      whose head is no longer a head, or whose rank is outdated, is dropped when it comes to the top.

    A requestor's rank changes only while it has fewer than ``PENDING_CAP`` pending requests, so the pushes
    for rank changes are bounded by ``PENDING_CAP`` times its shared nodes.
    """

    def __init__(
        self, node_map: Mapping[str, NodeState], waiting: Iterable[MaintenanceRequest], config: SchedulerConfig
    ) -> None:
        total = len(node_map)
        down = {name for name, node in node_map.items() if not (node.ready and not node.unschedulable)}
        max_unav = config.unavailable_limit(total)
        self.slots = min(max(0, config.parallel_limit(total)), total)  # nothing is under maintenance any more
        self.budget = None if max_unav is None else max(0, max_unav - len(down))
        self.down = down
        self.requests: dict[str, MaintenanceRequest] = {}
        # The pending counts as _schedule counts them (nothing is in progress here). Keep the two in step; the
        # unit tests compare the rollout with one full _schedule per wave.
        pending: dict[str, int] = {}
        queues: dict[str, dict[str, list[_Order]]] = {}
        for req in waiting:
            if req.deleting:
                continue
            requestor, node = req.requestor_id, req.node_name
            if req.phase == PHASE_PENDING or node in node_map:
                pending[requestor] = pending.get(requestor, 0) + 1
            if node in node_map:
                key = f"{req.namespace}/{req.name}"
                self.requests[key] = req
                queues.setdefault(node, {}).setdefault(requestor, []).append((req.created, node, requestor, key))
        neg = {requestor: min(PENDING_CAP, count) - PENDING_CAP for requestor, count in pending.items()}
        self.pending, self.neg_rank, self.queues = pending, neg, queues
        self.shared: dict[str, set[str]] = {requestor: set() for requestor in pending}  # requestor -> shared nodes
        self.node_heap: dict[str, list[_Ranked]] = {}
        self.head: dict[str, _Order] = {}
        self.heads: dict[tuple[str, bool], list[_Order]] = {}
        self.top: tuple[list[_Ranked], list[_Ranked]] = ([], [])  # [False]: available nodes, [True]: unavailable
        for node, by_requestor in queues.items():
            for queue in by_requestor.values():
                queue.sort(reverse=True)
            if len(by_requestor) == 1:
                first = next(iter(by_requestor.values()))[-1]
            else:
                entries = [(neg[requestor], queue[-1]) for requestor, queue in by_requestor.items()]
                heapify(entries)
                self.node_heap[node] = entries
                for requestor in by_requestor:
                    self.shared[requestor].add(node)
                first = entries[0][1]
            self.head[node] = first
            self.heads.setdefault((first[2], node in down), []).append(first)
        for (requestor, is_down), heads in self.heads.items():
            heapify(heads)
            self.top[is_down].append((neg[requestor], heads[0]))
        for heap in self.top:
            heapify(heap)

    def next_pass(self) -> tuple[MaintenanceRequest, ...]:
        """The requests the next pass schedules, in ranked order; () when it schedules none. Completes and
        releases them: the pass after this one no longer has them."""
        head = self.head
        slots, left = self.slots, self.budget
        chosen: list[_Order] = []
        while slots > 0:
            down = self._current(self.top[True])
            up = self._current(self.top[False]) if left is None or left > 0 else None
            if up is not None and (down is None or up < down):
                is_down, order = False, up[1]
                if left is not None:
                    left -= 1
            elif down is not None:
                is_down, order = True, down[1]
            else:
                break
            heappop(self.top[is_down])
            slots -= 1
            chosen.append(order)
            del head[order[1]]  # taken for this pass; the node's next head is found after it
            self._advertise(order[2], is_down)
        if chosen:
            self._release(chosen)
        return tuple(self.requests.pop(order[3]) for order in chosen)

    def _current(self, heap: list[_Ranked]) -> _Ranked | None:
        """The first entry of ``top[...]`` that is a head with its requestor's current rank."""
        head, neg = self.head, self.neg_rank
        while heap:
            entry = heap[0]
            order = entry[1]
            if head.get(order[1]) is order and entry[0] == neg[order[2]]:
                return entry
            heappop(heap)
        return None

    def _advertise(self, requestor: str, is_down: bool) -> None:
        """Push the requestor's first head (on unavailable or available nodes) with its current rank."""
        heads = self.heads.get((requestor, is_down))
        head = self.head
        while heads:
            order = heads[0]
            if head.get(order[1]) is order:
                heappush(self.top[is_down], (self.neg_rank[requestor], order))
                return
            heappop(heads)

    def _release(self, chosen: list[_Order]) -> None:
        """Remove the wave's requests; update the ranks, and the heads of the nodes that changed."""
        pending, neg, queues, shared, node_heap, head = (
            self.pending,
            self.neg_rank,
            self.queues,
            self.shared,
            self.node_heap,
            self.head,
        )
        changed: set[str] = set()  # requestors whose rank rose
        for order in chosen:
            requestor = order[2]
            count = pending[requestor] = pending[requestor] - 1
            if count < PENDING_CAP:
                neg[requestor] = count - PENDING_CAP
                changed.add(requestor)
        for _created, node, requestor, _key in chosen:
            by_requestor = queues[node]
            queue = by_requestor[requestor]
            queue.pop()
            if queue:
                if len(by_requestor) > 1:
                    heappush(node_heap[node], (neg[requestor], queue[-1]))
                continue
            del by_requestor[requestor]
            shared[requestor].discard(node)
            if len(by_requestor) == 1:  # no longer shared
                shared[next(iter(by_requestor))].discard(node)
                del node_heap[node]
            elif not by_requestor:
                del queues[node]
        # A requestor whose rank rose can now come first on a node it shares (ranks only rise, so no other head
        # changes); on its other nodes it is the only requestor, and its heads are in top[...] again below.
        affected = set(changed)
        for requestor in changed:
            rank = neg[requestor]
            for node in shared[requestor]:
                order = queues[node][requestor][-1]
                heappush(node_heap[node], (rank, order))
                current = head.get(node)  # None for a node of the wave: its head is found below
                if current is not None and current[2] != requestor and (rank, order) < (neg[current[2]], current):
                    affected.add(current[2])
                    head[node] = order
                    heappush(self.heads.setdefault((requestor, node in self.down), []), order)
        # The nodes of the wave get their next head.
        for order in chosen:
            node = order[1]
            left = queues.get(node)
            if not left:
                continue
            if len(left) == 1:
                first = next(iter(left.values()))[-1]
            else:
                entries = node_heap[node]
                while True:
                    rank, first = entries[0]
                    theirs = left.get(first[2])
                    if theirs and theirs[-1] is first and rank == neg[first[2]]:
                        break
                    heappop(entries)
            head[node] = first
            heappush(self.heads.setdefault((first[2], node in self.down), []), first)
            affected.add(first[2])
        for requestor in affected:
            self._advertise(requestor, False)
            self._advertise(requestor, True)


# -- helpers -----------------------------------------------------------------------------------
def _build(cls: type[_T], **values: Any) -> _T:
    """A frozen dataclass without its generated ``__init__``, which sets each field through
    ``object.__setattr__`` and costs more than all the parsing of a NodeMaintenance. Callers pass every
    field, checked; the classes have no ``__post_init__``."""
    obj = object.__new__(cls)
    obj.__dict__.update(values)
    return obj


def _kind_of(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _name(obj: Mapping[str, Any], where: str) -> str:
    meta = obj.get("metadata")
    if not isinstance(meta, _MAPS):
        raise SchedulerInputError(f"{where}: metadata is missing or not an object; it needs metadata.name.")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise SchedulerInputError(f"{where}: metadata.name is missing or not a string.")
    return name


def _mapping(value: Any, what: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, _MAPS):
        raise SchedulerInputError(f"{what} must be an object, not {_kind_of(value)}.")
    return value


def _list(value: Any, what: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):
        raise SchedulerInputError(f"{what} must be a list, not {_kind_of(value)}.")
    return list(value)


_INT32_MAX = 2**31 - 1


def _gc_seconds(value: Any, source: str) -> None:
    """maxNodeMaintenanceTimeSeconds, as the CRD has it: an int32 of 0 or more (the reconciler uses it)."""
    if value is None:
        return
    field = f"{source}: spec.maxNodeMaintenanceTimeSeconds"
    if isinstance(value, bool) or not isinstance(value, int):
        raise SchedulerInputError(f"{field}: {value!r} must be a whole number of seconds (ASCII digits) such as 3600.")
    if value < 0:
        raise SchedulerInputError(f"{field}: {value} is below 0; give 0 or more seconds (0 collects at once).")
    if value > _INT32_MAX:
        raise SchedulerInputError(f"{field}: {value} is above the maximum of {_INT32_MAX} seconds (an int32).")


def _deleting(value: Any, what: str) -> bool:
    """Whether metadata.deletionTimestamp is set; a value set is checked to be a timestamp."""
    if value:
        _epoch(value, what, "metadata.deletionTimestamp")
    return bool(value)


_EPOCH_CACHE: dict[str, int] = {}


def _epoch(value: Any, what: str, field: str) -> int:
    """An RFC 3339 timestamp (or a datetime, as YAML loaders give) in whole seconds since the epoch."""
    if value is None or value == "":
        return 0
    if not isinstance(value, (str, datetime.datetime)):
        raise SchedulerInputError(f"{what}: {field} must be an RFC 3339 timestamp such as 2026-01-31T12:00:00Z.")
    cached = _EPOCH_CACHE.get(value) if isinstance(value, str) else None
    if cached is not None:
        return cached
    try:
        # an impossible date, a time outside the years 0001-9999 in UTC or a non-ASCII digit is refused too
        seconds = math.floor(rfc3339.parse_time(value, f"{what}: {field}"))  # a naive datetime is UTC
    except rfc3339.TimeError as err:
        raise SchedulerInputError(str(err)) from err
    if isinstance(value, str) and len(_EPOCH_CACHE) < 65536:
        _EPOCH_CACHE[value] = seconds
    return seconds
