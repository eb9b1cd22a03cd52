# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The NodeMaintenance reconcile pass: the I/O around ``core/maintenance/scheduler.py`` and
``core/maintenance/lifecycle.py``.

One pass (:meth:`Reconciler.run_pass`):

1. takes the ``coordination.k8s.io`` Lease (waiting a bounded time; a pass that cannot get it reports
   ``busy`` and writes nothing), so that passes from several processes take turns;
2. lists all Nodes and the NodeMaintenances once, and reads the ``default`` MaintenanceOperatorConfig;
3. schedules (``scheduler.schedule``) and writes ``Scheduled`` on the chosen requests;
4. moves every request one or more steps (``lifecycle.next_step``), several requests in parallel: a
   step that needs to look at pods lists them, a Draining step runs one bounded drain pass
   (``engines/drain.py``); garbage collection deletes requests Ready for too long;
5. gives the Lease back.

Every write is conditional (the object's resourceVersion); on Conflict the object is read again and its
step computed again. That holds for the Node too: the steps that decide about it (Cordon, a release) are
computed on the Node as last seen (as the pass listed it, or as an earlier write of the pass returned it) when
they write it (its cordon, uncordon or marker removal is a merge patch carrying that Node's resourceVersion,
under the field manager ``core.cordon.ENGINE_FIELD_MANAGER``, so a change since is a Conflict), and on a Node
read just before when they would leave it alone. Events:
``ConditionChanged`` (message = the new reason) on every Ready reason change, Warning ``EvictionBlocked`` /
``DrainTimeout`` for a drain that does not get on, ``NodeLeftCordoned`` for a release that leaves its node
cordoned because the cordon is not (or no longer) this request's.
"""

from __future__ import annotations

import contextlib
import copy
import queue
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, cast

from ..core.maintenance import drain as core_drain
from ..core.maintenance import lifecycle as lc
from ..core.maintenance.cordon import (
    CORDONED,
    CORDONED_BY_ANNOTATION,
    ENGINE_FIELD_MANAGER,
    UNCORDONED,
    cordon_patch,
    metadata_patch,
    resource_version,
)
from ..core.maintenance.scheduler import (
    FINALIZER,
    SchedulerConfig,
    SchedulerInputError,
    parse_nodes,
    parse_requests,
    schedule,
)
from ..core.node.errors import NodeopsError
from ..core.node.rfc3339 import format_time
from ..k8s.client import MAINTENANCE_CONFIGS, NODE_MAINTENANCES, NODES, PODS, Client
from ..k8s.errors import Conflict, K8sError, NotFound, TooManyRequests, Unreachable
from ..k8s.lease import GuardedClient, Lease, LeaseLost
from .drain import DrainOptions, DrainPass

DEFAULT_CONFIG = "default"
MAX_STEPS = 16  # steps of one request in one pass (there are 7 states; conflicts add a few)
MAX_CONFLICTS = 5
EVENT_SENDERS = 4  # threads that send a holder's events (see Reconciler._events_sent_aside)
COMPONENT = "nodeops-maintenance"


class ReconcileError(NodeopsError):
    """The pass cannot run (bad config, missing CRDs, no namespace for the Lease)."""


class NodeGone(Conflict):
    """The Node went away between its read and a write to it: read again and decide again, as for a Conflict."""


@dataclass
class ReconcileOptions:
    namespace: str | None = None  # the NodeMaintenances of one namespace; None = all namespaces
    config_namespace: str = "nodeops-maintenance"
    lease_name: str = "nodeops-maintenance-reconcile"
    lease_namespace: str | None = None  # default: config_namespace
    lease_duration: int = 60
    lease_wait: float = 30.0
    step_budget: float = 20.0  # the longest a drain may run within one pass
    workers: int = 4  # requests moved in parallel
    drain_concurrency: int = 8  # parallel evictions per drain
    identity: str | None = None

    def pool_size(self) -> int:
        return self.workers * (self.drain_concurrency + 2) + 4


@dataclass
class PassReport:
    busy: bool = False
    holder: str | None = None
    scheduled: list[str] = field(default_factory=list)
    advanced: list[dict[str, Any]] = field(default_factory=list)
    released: list[str] = field(default_factory=list)
    left_cordoned: list[dict[str, Any]] = field(default_factory=list)
    collected: list[str] = field(default_factory=list)
    waiting: list[dict[str, Any]] = field(default_factory=list)
    plan: dict[str, Any] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    settled: bool = False
    moving: list[str] = field(default_factory=list)  # what a further pass would move by itself, with phases
    writes: int = 0
    lease_lost: bool = False
    # every request of the pass's namespace (``namespace``; None: all) that is still there after the pass: as its
    # last write left it, else as the pass listed it (one the pass failed to move, or did not need to, is as old as
    # the pass); the ones it saw go are left out. None when the pass did not go through (busy, check mode, the Lease
    # lost, an error before its read). A wait for requests to go looks here instead of listing them again.
    objects: list[dict[str, Any]] | None = None
    namespace: str | None = None
    # the names of the Nodes the pass listed (None when it did not read them): a node missing here was deleted, or
    # was not there yet when the pass listed
    node_names: frozenset[str] | None = None

    @property
    def changed(self) -> bool:
        return self.writes > 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "busy": self.busy,
            "holder": self.holder,
            "scheduled": self.scheduled,
            "advanced": self.advanced,
            "released": self.released,
            "left_cordoned": self.left_cordoned,
            "collected": self.collected,
            "waiting": self.waiting,
            "plan": self.plan,
            "events": self.events,
            "errors": self.errors,
            "requests": self.requests,
            "settled": self.settled,
            "lease_lost": self.lease_lost,
        }


# an event sent aside: the request, the event, its time, the report of the pass that recorded it
_AsideEvent = tuple[dict[str, Any], lc.Event, str, PassReport]


def _version(obj: Mapping[str, Any]) -> Any:
    return (obj.get("metadata") or {}).get("resourceVersion")


def key_of(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def phase_of(obj: Mapping[str, Any]) -> str:
    return lc.NodeMaintenanceView.from_dict(obj).phase


def summary(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    return {
        "name": key_of(obj),
        "node": (obj.get("spec") or {}).get("nodeName"),
        "requestor": (obj.get("spec") or {}).get("requestorID"),
        "phase": phase_of(obj),
        "deleting": bool(meta.get("deletionTimestamp")),
        "conditions": list((obj.get("status") or {}).get("conditions") or []),
    }


def drain_options(spec: Mapping[str, Any], concurrency: int) -> DrainOptions:
    """DrainOptions from a drainSpec; ValueError for an invalid podEvictionFilters regex."""
    filters = core_drain.parse_eviction_filters(
        [{"by_resource_name_regex": f.get("byResourceNameRegex")} for f in spec.get("podEvictionFilters") or []]
    )
    timeout = lc.drain_timeout(spec)
    return DrainOptions(
        force=bool(spec.get("force")),
        delete_emptydir_data=bool(spec.get("deleteEmptyDir")),
        pod_selector=spec.get("podSelector") or None,
        eviction_filters=filters,
        timeout=float(timeout) if timeout > 0 else 1e9,
        concurrency=concurrency,
    )


class Reconciler:
    """Reconcile passes over the NodeMaintenances; ``clock`` is wall time (the annotations hold wall times)."""

    def __init__(self, client: Client, options: ReconcileOptions, clock: Callable[[], float] = time.time) -> None:
        self.options = options
        self.clock = clock
        self.lease = Lease(
            client,
            options.lease_name,
            options.lease_namespace or options.config_namespace,
            options.identity,
            options.lease_duration,
            clock,
        )
        # every write of a pass (drains included) first checks that the pass still holds the Lease
        self.client = cast(Client, GuardedClient(client, self.lease))
        self._lock = threading.Lock()
        self._report = PassReport()
        self._warned: set[str] = set()
        self._released_present: list[dict[str, Any]] = []  # released by this pass but still there (see _apply)
        self._nodes_written: dict[str, dict[str, Any]] = {}  # the nodes as this pass's writes left them, by name
        self._holding = False  # within holding(): passes keep the Lease instead of taking it each
        # within holding(): the queues of the threads that send the events of the passes (see _events_sent_aside)
        self._event_queues: list[queue.SimpleQueue[_AsideEvent | None]] | None = None
        # False: passes move the requests already in progress (and release) but schedule no new one, e.g. while
        # a rolling run is outside its maintenance window or a gate blocks its next wave
        self.schedule_new = True
        # called with the node of each request a pass changed (moved, or released and gone), as soon as its own
        # writes are done: a rolling run's driver rings the steps waiting for that node (see requests.Bell)
        self.on_moved: Callable[[str], None] | None = None

    # -- reading -------------------------------------------------------------------------------
    def read_config(self) -> tuple[SchedulerConfig, float]:
        name = f"{self.options.config_namespace}/{DEFAULT_CONFIG}"
        try:
            spec = self.client.get(MAINTENANCE_CONFIGS, DEFAULT_CONFIG, self.options.config_namespace).get("spec") or {}
            source = f"MaintenanceOperatorConfig {name}"
        except NotFound:
            spec, source = {}, "built-in defaults"
        try:
            config = SchedulerConfig.from_spec(spec, source=source)
        except (SchedulerInputError, ValueError) as exc:
            raise ReconcileError(str(exc)) from exc
        max_seconds = spec.get("maxNodeMaintenanceTimeSeconds")
        return config, float(lc.DEFAULT_MAX_MAINTENANCE_SECONDS if max_seconds is None else max_seconds)

    def read(self) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
        nodes = {n["metadata"]["name"]: n for n in self.client.list(NODES)["items"]}
        nms = self.client.list(NODE_MAINTENANCES, namespace=self.options.namespace)["items"]
        for obj in nms:  # list items carry no kind; events and the parsers want it
            obj.setdefault("apiVersion", NODE_MAINTENANCES.api_version)
            obj.setdefault("kind", NODE_MAINTENANCES.kind)
        return nodes, nms

    # -- the pass ------------------------------------------------------------------------------
    @contextlib.contextmanager
    def holding(self, ask: bool = False) -> Iterator[bool]:
        """Hold the Lease across the passes run within the block (a process that runs pass after pass, such as a
        rolling run's driver, instead of taking it for each): yields whether it got the Lease (waiting up to
        ``lease_wait``). It is renewed from a thread all along; a pass that finds it lost reports ``lease_lost``
        and the block should end. Given back at the end (handed over, with ``Lease.hand_over_within``). With
        ``ask``, a wait for the Lease asks its holder to hand it over (see ``Lease.ask``)."""
        if not self.lease.acquire(self.options.lease_wait, ask=ask):
            yield False
            return
        try:
            with self.lease.kept(self._warn), self._events_sent_aside():
                self._holding = True
                try:
                    yield True
                finally:
                    self._holding = False
        finally:
            self.lease.release(retry_for=self.options.lease_duration)

    @contextlib.contextmanager
    def _events_sent_aside(self) -> Iterator[None]:
        """Within the block (a holder's passes), the events of each request's steps are sent by EVENT_SENDERS
        threads of their own, the events of one request in their order, instead of by the step: a request's
        steps then wait only for the writes that move it (its status, the node), which matters when many are
        moved at once on a busy API server. Every event is sent before the block ends, while the Lease is
        held. An event sent aside is reported in the report of the pass that recorded it, and is not one of its
        ``writes`` (a pass that moved nothing is not ``changed`` by the events of an earlier one)."""
        queues: list[queue.SimpleQueue[_AsideEvent | None]] = [queue.SimpleQueue() for _sender in range(EVENT_SENDERS)]

        def send(mine: queue.SimpleQueue[_AsideEvent | None]) -> None:
            while (item := mine.get()) is not None:
                obj, event, now, report = item
                try:
                    self._send_event(obj, event, now, report)
                except Exception as exc:  # one event that fails leaves the others to be sent
                    with self._lock:
                        report.warnings.append(f"Could not record event {event.reason} on {key_of(obj)}: {exc}")

        senders = [threading.Thread(target=send, args=(q,), name=f"nodeops-events-{i}") for i, q in enumerate(queues)]
        for sender in senders:
            sender.start()
        self._event_queues = queues
        try:
            yield
        finally:
            self._event_queues = None
            for q in queues:
                q.put(None)
            for sender in senders:
                sender.join()

    def run_pass(self, check_mode: bool = False) -> PassReport:
        report = self._report = PassReport()
        self._warned = set()
        if self._holding and not check_mode:  # within holding(): the Lease is taken and renewed already
            try:
                self._pass(False)
            except LeaseLost as exc:
                report.warnings.append(exc.msg)
            return self._lost(report)
        if not check_mode and not self.lease.acquire(self.options.lease_wait):
            report.busy, report.holder = True, self.lease.holder
            report.warnings.append(
                f"Another reconcile pass ({self.lease.holder}) holds Lease "
                f"{self.lease.namespace}/{self.lease.name}; nothing was done in this pass."
            )
            return report
        renewing = contextlib.nullcontext() if check_mode else self.lease.kept(self._warn)
        try:
            with renewing:  # keep the Lease while drains run
                self._pass(check_mode)
        except LeaseLost as exc:
            report.warnings.append(exc.msg)
        finally:
            # also after a failure: as soon as the API answers again, within the Lease's own time
            if not check_mode and not self.lease.release(retry_for=self.options.lease_duration):
                report.warnings.append(
                    f"Lease {self.lease.namespace}/{self.lease.name} could not be given up; it expires by itself."
                )
        return self._lost(report)

    def _lost(self, report: PassReport) -> PassReport:
        """``report``, marked when a write found the Lease no longer shown to be held."""
        if any(error.get("reason") == LeaseLost.reason for error in report.errors) or (
            self._holding and not self._shown_held()
        ):
            report.lease_lost, report.settled, report.objects = True, False, None
            report.warnings.append(
                f"This pass stopped writing when it could no longer show that it holds Lease "
                f"{self.lease.namespace}/{self.lease.name}."
            )
        return report

    def _shown_held(self) -> bool:
        try:
            self.lease.check()
        except LeaseLost:
            return False
        return True

    def _warn(self, message: str) -> None:
        with self._lock:
            self._report.warnings.append(message)

    def _warn_once(self, key: str, message: str) -> None:
        """A warning given once per pass however many objects show it."""
        with self._lock:
            if key not in self._warned:
                self._warned.add(key)
                self._report.warnings.append(message)

    def _pass(self, check_mode: bool) -> None:
        report = self._report
        self._released_present = []
        self._nodes_written = {}
        config, max_seconds = self.read_config()
        nodes, nms = self.read()
        report.node_names = frozenset(nodes)
        chosen: set[str] = set()  # what this pass schedules (decided after the releases)
        decisions: dict[str, Any] = {}

        def work(obj: dict[str, Any]) -> dict[str, Any] | None:
            try:
                moved = self._advance(obj, nodes, key_of(obj) in chosen, max_seconds, decisions)
            except K8sError as exc:
                with self._lock:
                    report.errors.append({"name": key_of(obj), "error": exc.msg, "reason": exc.reason})
                return obj
            if self.on_moved is not None and (moved is None or _version(moved) != _version(obj)):
                self.on_moved(obj["spec"]["nodeName"])
            return moved

        # The releases first (the requests being deleted), then the plan on the requests and nodes as they left them:
        # a slot a release frees goes to the next request in this pass, not one pass later (when many requests are
        # moved at once on a busy API server, a pass lasts seconds).
        released: dict[str, dict[str, Any] | None] = {} if check_mode else self._release_first(nms, work)
        if released:
            nodes.update(self._nodes_written)  # uncordoned: as the releases wrote them
            left: list[dict[str, Any] | None] = [released.get(key_of(obj), obj) for obj in nms]
            nms = [obj for obj in left if obj is not None]
        try:
            plan = schedule(parse_nodes(nodes.values()), parse_requests(nms), config, unknown_nodes="skip")
        except SchedulerInputError as exc:
            raise ReconcileError(str(exc)) from exc
        report.plan = plan.as_dict()
        if self.schedule_new:
            chosen.update(r.key for r in plan.scheduled)
        decisions.update((d.request.key, d) for d in plan.decisions)
        now = self.clock()
        if check_mode:
            for obj in nms:
                key = key_of(obj)
                if key in chosen:
                    report.scheduled.append(key)
                    continue
                step = lc.next_step(obj, nodes.get(obj["spec"]["nodeName"]), now, None, max_seconds)
                self._note_waiting(obj, step, decisions)
                report.requests.append(summary(obj))
            report.moving = self._moving(nms, chosen)
            report.settled = not report.moving
            return

        # A request waiting its turn (Pending, not chosen) is only looked at, with no API call. In a large fleet most
        # are, so they are looked at here while the workers move the others, instead of each costing a task in the
        # pool (a hand-off to a thread and a future each).
        quiet: list[dict[str, Any]] = []
        moving: list[dict[str, Any]] = []
        done: list[dict[str, Any]] = []  # the releases', moved already
        for obj in nms:
            if key_of(obj) in released:
                done.append(obj)
            else:
                (quiet if _waits_its_turn(obj, chosen) else moving).append(obj)
        # the requests under way first, then the new ones in the scheduler's order: the next in line starts first
        rank = {r.key: index for index, r in enumerate(plan.scheduled)}
        moving.sort(key=lambda obj: rank.get(key_of(obj), -1))
        workers = max(1, min(self.options.workers, len(moving)))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            pending = pool.map(work, moving)
            results = done + [work(obj) for obj in quiet]
            results += pending
        final = [obj for obj in results if obj is not None]
        report.requests = sorted((summary(obj) for obj in final), key=lambda s: s["name"])
        report.scheduled.sort()
        report.released.sort()
        report.collected.sort()
        report.waiting.sort(key=lambda w: w["name"])
        report.moving = self._moving(final, set())
        report.settled = not report.moving
        report.objects, report.namespace = final + self._released_present, self.options.namespace

    def _release_first(
        self, nms: list[dict[str, Any]], work: Callable[[dict[str, Any]], dict[str, Any] | None]
    ) -> dict[str, dict[str, Any] | None]:
        """Move the requests being deleted (``work`` each, in parallel); by key, what is left of each (None: gone,
        or released and no longer this engine's)."""
        releasing = [obj for obj in nms if (obj.get("metadata") or {}).get("deletionTimestamp")]
        if not releasing:
            return {}
        with ThreadPoolExecutor(max_workers=max(1, min(self.options.workers, len(releasing)))) as pool:
            return dict(zip([key_of(obj) for obj in releasing], pool.map(work, releasing), strict=True))

    @staticmethod
    def _moving(nms: list[dict[str, Any]], chosen: set[str]) -> list[str]:
        """What a further pass would move by itself (nothing: settled), each with its phase: ``ns/name
        (Draining)``."""
        moving = [f"{key} (scheduled)" for key in sorted(chosen)]
        for obj in nms:
            view = lc.NodeMaintenanceView.from_dict(obj)
            if key_of(obj) in chosen:
                continue
            if view.phase in lc.ACTIVE_PHASES or view.phase == "":
                moving.append(f"{key_of(obj)} ({view.phase or 'new'})")
            elif view.deleting and view.finalizer and not view.additional_requestors:
                moving.append(f"{key_of(obj)} (being deleted)")
        return moving

    def _note_waiting(self, obj: dict[str, Any], step: lc.Step, decisions: Mapping[str, Any]) -> None:
        key = key_of(obj)
        entry = {"name": key, "node": (obj.get("spec") or {}).get("nodeName"), "phase": phase_of(obj)}
        decision = decisions.get(key)
        if decision is not None and entry["phase"] in ("", lc.PHASE_PENDING):
            entry.update(reason=decision.reason, message=decision.message)
        elif step.need:
            what = "drains the node" if step.need == lc.NEED_DRAIN else "looks at the pods to wait for"
            entry.update(reason=f"needs_{step.need}", message=f"a pass {what}")
        elif step.waiting:
            entry.update(reason="waiting", message=step.waiting)
        elif not step.idle:
            entry.update(reason="next_step", message=f"would move to {step.phase or 'the next step'}")
        else:
            return
        with self._lock:
            self._report.waiting.append(entry)

    # -- one request ---------------------------------------------------------------------------
    def _advance(
        self,
        obj: dict[str, Any],
        nodes: Mapping[str, dict[str, Any]],
        chosen: bool,
        max_seconds: float,
        decisions: Mapping[str, Any],
    ) -> dict[str, Any] | None:
        """Move one request as far as it goes in this pass; its object afterwards (None once gone)."""
        node_name = obj["spec"]["nodeName"]
        node = nodes.get(node_name)
        start_phase = phase_of(obj)
        drained = False
        conflicts = 0
        node_fresh = False  # node was read (or written) for the step being decided
        step = lc.Step()
        for _step in range(MAX_STEPS):
            now = self.clock()
            phase = phase_of(obj)
            deleting = bool(obj["metadata"].get("deletionTimestamp"))
            scheduling = chosen and phase == lc.PHASE_PENDING and not deleting
            if not node_fresh and lc.decides_on_node(obj):  # cordon / release: on the node as it is now
                # A step that writes the node is decided on the node as last seen (listed, or as an earlier write of
                # this pass returned it): the write carries that resourceVersion, so a change since fails with
                # Conflict and is decided again on the node read afresh. A step that would leave the node alone is
                # decided on the node read afresh (no write would show that it changed).
                if node is None or not lc.writes_node(lc.next_step(obj, node, now, None, max_seconds)):
                    node = self._read_node(node_name)
                node_fresh = True
            if chosen and phase in ("", lc.PHASE_PENDING) and not deleting:
                step = lc.next_step(obj, node, now, None, max_seconds) if phase == "" else lc.scheduled_step()
            else:
                step = lc.next_step(obj, node, now, None, max_seconds)
                if step.need == lc.NEED_PODS:
                    step = lc.next_step(obj, node, now, lc.Observation(waiting_pods=self._pods(obj)), max_seconds)
                elif step.need == lc.NEED_DRAIN:
                    if drained:
                        step = lc.Step(waiting="draining; continues in the next pass")
                        break
                    drained = True
                    report = self._drain(obj, node_name, now)
                    step = lc.next_step(obj, node, self.clock(), lc.Observation(drain=report), max_seconds)
            if step.idle:
                break
            try:
                updated, node = self._apply(obj, step, node)
            except Conflict:
                conflicts += 1
                if conflicts > MAX_CONFLICTS:
                    raise
                try:
                    obj = self._get(obj)
                except NotFound:
                    return None
                node = self._read_node(node_name)
                node_fresh = True
                continue
            node_fresh = False
            if scheduling:
                with self._lock:
                    self._report.scheduled.append(key_of(obj))
            if step.released:
                with self._lock:
                    self._report.released.append(key_of(obj))
                    if step.left_cordoned:
                        self._report.left_cordoned.append(
                            {"name": key_of(obj), "node": node_name, "message": step.left_cordoned}
                        )
            if updated is None:
                return None
            obj = updated
            if step.waiting:
                break
        new_phase = phase_of(obj)
        if new_phase != start_phase:
            with self._lock:
                self._report.advanced.append(
                    {"name": key_of(obj), "node": node_name, "from": start_phase, "to": new_phase}
                )
        self._note_waiting(obj, step, decisions)
        return obj

    def _read_node(self, name: str) -> dict[str, Any] | None:
        try:
            return self.client.get(NODES, name)
        except NotFound:
            return None

    def _write_node(self, node: Mapping[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
        """A conditional merge patch of the node (``patch`` holds its resourceVersion), as the engine's field manager.

        Conflict when the node changed since it was read, NodeGone when it was deleted: the caller reads it
        again and decides again.
        """
        name = node["metadata"]["name"]
        try:
            written = self.client.patch(NODES, name, patch, field_manager=ENGINE_FIELD_MANAGER)
        except NotFound as exc:
            raise NodeGone(f"node {name} was deleted meanwhile", exc.status, exc.body) from exc
        self._count_write()
        with self._lock:
            self._nodes_written[name] = written
        return written

    def _get(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        fresh = self.client.get(NODE_MAINTENANCES, meta["name"], meta["namespace"])
        fresh.setdefault("apiVersion", NODE_MAINTENANCES.api_version)
        fresh.setdefault("kind", NODE_MAINTENANCES.kind)
        return fresh

    def _pods(self, obj: Mapping[str, Any]) -> tuple[str, ...]:
        selector = ((obj.get("spec") or {}).get("waitForPodCompletion") or {}).get("podSelector") or None
        pods = self.client.list(
            PODS, field_selector=f"spec.nodeName={obj['spec']['nodeName']}", label_selector=selector
        )["items"]
        return tuple(core_drain.pod_key(p) for p in pods)

    def _drain(self, obj: Mapping[str, Any], node: str, now: float) -> lc.DrainReport:
        spec = (obj.get("spec") or {}).get("drainSpec") or {}
        try:
            options = drain_options(spec, self.options.drain_concurrency)
        except ValueError as exc:
            return lc.DrainReport(done=False, status={"totalPods": 0}, blocked_by_rules=f"drainSpec: {exc}")
        started = lc.drain_started_at(obj, now)
        drain_pass = DrainPass(self.client, node, options, started, clock=self.clock)
        result = drain_pass.run(until=now + self.options.step_budget)
        blocking = [o for o in result.outcomes if o.action == core_drain.BLOCKED and not o.needs]
        message = ""
        if not result.done and not result.blocked_by_rules:
            message = core_drain.failure_message(node, result.outcomes, options.timeout, result.timed_out)
        with self._lock:
            self._report.warnings.extend(result.warnings)
        return lc.DrainReport(
            done=result.done,
            status=result.progress.as_status(),
            timed_out=result.timed_out,
            blocked_by_rules=result.blocked_by_rules,
            blocking_pods=tuple(sorted(f"{o.namespace}/{o.name}" for o in blocking)),
            blocking_pdbs=tuple(core_drain.pdb_names(blocking)),
            message=message,
        )

    def _count_write(self) -> None:
        with self._lock:
            self._report.writes += 1

    def _apply(
        self, obj: dict[str, Any], step: lc.Step, node: dict[str, Any] | None
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """Write one step in the safe order; (the object afterwards or None when gone, the node)."""
        meta = obj["metadata"]
        if step.delete:
            # decided on this version of the object (its state and age): Conflict if it changed since
            try:
                self.client.delete(
                    NODE_MAINTENANCES,
                    meta["name"],
                    meta["namespace"],
                    uid=meta.get("uid"),
                    resource_version=meta.get("resourceVersion"),
                )
            except NotFound:  # deleted meanwhile (or a retried call's first attempt went through): gone
                return None, node
            self._count_write()
            with self._lock:
                self._report.collected.append(key_of(obj))
            try:
                return self._get(obj), node
            except NotFound:
                return None, node
        # uncordon (or drop our marker) before the finalizer goes; only on the node this step was decided on
        if step.unschedulable is False and node is not None:
            forget = {CORDONED_BY_ANNOTATION: None}
            node = self._write_node(node, cordon_patch(UNCORDONED, resource_version(node), forget))
        elif step.forget_claim and node is not None:
            node = self._write_node(
                node, {"metadata": metadata_patch(resource_version(node), {CORDONED_BY_ANNOTATION: None})}
            )
        released_from = obj
        if step.finalizer is not None or step.owner or step.annotations:
            body = copy.deepcopy(obj)
            bmeta = body["metadata"]
            finalizers = [f for f in bmeta.get("finalizers") or [] if f != FINALIZER]
            if step.finalizer or (step.finalizer is None and FINALIZER in (bmeta.get("finalizers") or [])):
                finalizers.append(FINALIZER)
            bmeta["finalizers"] = finalizers
            if step.owner and node is not None:
                refs = [r for r in bmeta.get("ownerReferences") or [] if r.get("kind") != "Node"]
                refs.append(
                    {
                        "apiVersion": "v1",
                        "kind": "Node",
                        "name": node["metadata"]["name"],
                        "uid": node["metadata"]["uid"],
                    }
                )
                bmeta["ownerReferences"] = refs
            annotations = dict(bmeta.get("annotations") or {})
            for name, value in step.annotations.items():
                if value is None:
                    annotations.pop(name, None)
                else:
                    annotations[name] = value
            bmeta["annotations"] = annotations
            try:
                obj = self.client.replace(NODE_MAINTENANCES, body)
            except NotFound:
                return None, node
            self._count_write()
            obj.setdefault("apiVersion", NODE_MAINTENANCES.api_version)
            obj.setdefault("kind", NODE_MAINTENANCES.kind)
            if (
                step.finalizer is False
                and obj["metadata"].get("deletionTimestamp")
                and not obj["metadata"].get("finalizers")
            ):
                self._record_events(released_from, step.events)
                return None, node
        if step.unschedulable and node is not None:  # cordon after the initial state is recorded, with our marker
            claim = {CORDONED_BY_ANNOTATION: lc.claim_of(obj)}
            node = self._write_node(node, cordon_patch(CORDONED, resource_version(node), claim))
        if step.finalizer is False:
            self._record_events(released_from, step.events)
            with self._lock:  # not being deleted (its node is gone), or held by another finalizer: still there
                self._released_present.append(obj)
            return None, node  # released: the object goes now, or belongs to another finalizer
        if step.phase or step.status:
            body = copy.deepcopy(obj)
            status = body.setdefault("status", {})
            for name, value in step.status.items():
                if value is None:
                    status.pop(name, None)
                else:
                    status[name] = value
            if step.phase:
                conditions = [dict(c) for c in status.get("conditions") or [] if isinstance(c, Mapping)]
                lc.set_ready(conditions, step.phase, body["metadata"].get("generation"), self.clock())
                status["conditions"] = conditions
            obj = self.client.replace(NODE_MAINTENANCES, body, subresource="status")
            self._count_write()
            pruned = lc.pruned_fields(status, obj.get("status") or {})
            if pruned:
                self._warn_once(
                    "pruned",
                    f"The installed NodeMaintenance CRD drops {', '.join(pruned)} (the NVIDIA Maintenance Operator's "
                    "CRD has no such fields): what blocks a drain is in the object's EvictionBlocked events. Install "
                    "the collection's CRDs (role nodeops.maintenance.crds) to have it in the status too.",
                )
            obj.setdefault("apiVersion", NODE_MAINTENANCES.api_version)
            obj.setdefault("kind", NODE_MAINTENANCES.kind)
        self._record_events(obj, step.events)
        return obj, node

    def _record_events(self, obj: dict[str, Any], events: list[lc.Event]) -> None:
        queues = self._event_queues
        for event in events:
            if queues is None:
                self._send_event(obj, event)
            else:  # the same sender for every event of one request: they are sent in their order, with their time
                aside = (obj, event, format_time(self.clock()), self._report)
                queues[zlib.crc32(key_of(obj).encode()) % len(queues)].put(aside)

    def _send_event(
        self, obj: dict[str, Any], event: lc.Event, now: str | None = None, aside: PassReport | None = None
    ) -> None:
        """Send one event: by the step (``aside`` None), counted among the pass's writes; or by a sender thread,
        reported in the report ``aside`` of the pass that recorded it."""
        report = self._report if aside is None else aside
        try:
            self.client.create_event(obj, event.reason, event.message, event.type, component=COMPONENT, now=now)
        except K8sError as exc:  # an event is information; the step is done
            with self._lock:
                report.warnings.append(f"Could not record event {event.reason} on {key_of(obj)}: {exc.msg}")
            return
        if aside is None:
            self._count_write()
        with self._lock:
            report.events.append(
                {"name": key_of(obj), "reason": event.reason, "message": event.message, "type": event.type}
            )


def _waits_its_turn(obj: Mapping[str, Any], chosen: set[str]) -> bool:
    """A request in Pending that this pass does not schedule, and not being deleted: its step is to wait."""
    return (
        key_of(obj) not in chosen
        and phase_of(obj) == lc.PHASE_PENDING
        and not (obj.get("metadata") or {}).get("deletionTimestamp")
    )


def transient(exc: K8sError) -> bool:
    """An error that a later attempt may not meet: no connection, the server overloaded or failing."""
    return isinstance(exc, (Unreachable, TooManyRequests)) or (exc.status or 0) >= 500


# How reconcile_until_settled ended.
SETTLED = "settled"  # a pass left nothing that a further pass would move by itself
TIMED_OUT = "timed_out"  # the timeout ran out first
HANDED_BACK = "handed_back"  # hand_back_after seconds passed first: call again to go on


def reconcile_until_settled(
    reconciler: Reconciler,
    timeout: float,
    interval: float = 1.0,
    clock: Callable[[], float] = time.monotonic,
    stop: threading.Event | None = None,
    hand_back_after: float = 0.0,
) -> tuple[list[PassReport], str]:
    """Passes until one is settled or ``timeout`` seconds have passed, or (``hand_back_after`` > 0) until that
    many seconds have passed in this call; (the reports, SETTLED, TIMED_OUT or HANDED_BACK). There is always at
    least one pass."""
    began = clock()
    deadline = began + timeout
    reports: list[PassReport] = []
    waiter = stop or threading.Event()
    while True:
        try:
            report = reconciler.run_pass()
        except K8sError as exc:
            if not transient(exc):
                raise
            # the API server is unreachable or failing (a restart): the pass gave its Lease up as soon
            # as it could; the next one starts afresh from the objects
            report = PassReport(errors=[{"name": "", "error": exc.msg, "reason": exc.reason}])
        reports.append(report)
        if report.settled and not report.busy:
            return reports, SETTLED
        now = clock()
        if now >= deadline:
            return reports, TIMED_OUT
        if hand_back_after > 0 and now - began >= hand_back_after:
            return reports, HANDED_BACK
        if not report.changed:  # nothing moved: give pods and other writers time before the next look
            until = deadline if hand_back_after <= 0 else min(deadline, began + hand_back_after)
            waiter.wait(min(interval, max(0.0, until - now)))
