# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The drain engine: the I/O around ``core/maintenance/drain.py``.

Two entry points:

* :func:`drain` - the blocking call the ``drain`` module makes: cordon first (remembering whether
  the node was cordoned already), optionally wait for some pods to complete, then one
  :meth:`DrainPass.run` up to the deadline, and undo the cordon when a rule blocks (nothing was
  evicted) or, if asked, when the drain fails.
* :class:`DrainPass` - one bounded pass for a reconciler (the NodeMaintenance ``Draining``
  step): list the node's pods once, classify them, evict what may go (in parallel, retrying
  PodDisruptionBudget refusals with backoff), and wait, through one watch, until the pods are
  gone, the pass ends (``until``) or the drain's deadline passes. A later pass starts from the
  objects' state: terminating pods are waited for, not evicted again.

Every eviction and deletion carries the UID of the pod that was planned (a UID precondition), and a
pod counts as gone once no pod with its UID is left: a pod of the same name with another UID (a
StatefulSet's replacement, maybe on another node) is a new pod, which the drain never touches. A
worker stops as soon as its pod is gone.

Progress (the NodeMaintenance ``status.drain`` numbers) goes to an optional callback on every change.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from ..core.maintenance import drain as core
from ..core.maintenance.cordon import CORDONED, DRAIN_FIELD_MANAGER, is_cordoned
from ..core.maintenance.scheduler import parse_requests
from ..core.node.errors import NodeopsError
from ..k8s.client import DAEMONSETS, NODE_MAINTENANCES, NODES, PDBS, PODS, Client, Watch
from ..k8s.errors import OBJECT_GONE, Conflict, K8sError, MissingResourceType, NotFound, TooManyRequests
from .cordon import set_state, undo_own_cordon

ProgressCallback = Callable[[core.DrainProgress], None]
# Extra connections beyond the eviction workers: the watch, and the main thread's own calls.
EXTRA_CONNECTIONS = 2


class DrainError(NodeopsError):
    """The drain cannot start or did not finish; ``result`` holds what is known."""

    def __init__(self, msg: str, result: dict[str, Any] | None = None) -> None:
        super().__init__(msg)
        self.msg = msg
        self.result = result or {}


@dataclass
class DrainOptions:
    force: bool = False
    delete_emptydir_data: bool = False
    pod_selector: str | None = None
    eviction_filters: Sequence[core.EvictionFilter] = ()
    grace_period: int | None = None
    disable_eviction: bool = False
    bypass_pdb_after: float | None = None
    timeout: float = 300.0
    concurrency: int = 32
    dry_run: bool = False

    @property
    def rules(self) -> core.DrainRules:
        return core.DrainRules(self.force, self.delete_emptydir_data, tuple(self.eviction_filters))


@dataclass
class PassResult:
    """What one pass saw and did."""

    total_pods: int
    plans: list[core.PodPlan]
    outcomes: list[core.PodOutcome]
    progress: core.DrainProgress
    blocked_by_rules: str = ""  # the failure message when a rule blocks; nothing was evicted
    done: bool = False  # every pod to remove is gone
    timed_out: bool = False  # the drain's deadline passed with pods left
    warnings: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return any(o.action in (core.EVICTED, core.DELETED) for o in self.outcomes)


@dataclass
class _Target:
    plan: core.PodPlan
    outcome: core.PodOutcome
    requested: str = ""  # EVICTED or DELETED once the API accepted it (set by the worker)
    bypassed: bool = False  # deleted because bypass_pdb_after passed (set by the worker)
    answer_lost: bool = False  # the request's answer was lost; a repeat found the pod gone (set by the worker)
    contention: str = ""  # the last Conflict on a budget's update while asked again (set by the worker)
    gone: bool = False  # no pod with the planned UID is left (set by the main loop)
    final: bool = False  # the worker gave up (blocked at the deadline, or an error)
    wake: threading.Event = field(default_factory=threading.Event)  # ends the worker's wait between attempts


# The messages the eviction workers and the pod watch send to the pass's main loop.
class _Message:
    """A message to the main loop of a drain pass."""


@dataclass(frozen=True)
class _WorkerMessage(_Message):
    """From the worker that evicts ``target``."""

    target: _Target


class _Requested(_WorkerMessage):
    """The eviction (or deletion) was accepted; the pod is terminating. The worker is done."""


class _Gone(_WorkerMessage):
    """The worker found its pod gone or replaced by a new one of the same name. The worker is done."""


class _Refused(_WorkerMessage):
    """A budget refused the first eviction; the worker goes on asking."""


class _GaveUp(_WorkerMessage):
    """Still refused (or the pass stopped) at the end: blocked by a budget. The worker is done."""


@dataclass(frozen=True)
class _Failed(_WorkerMessage):
    """An error that asking again will not mend, or a budget contended until the end. The worker is done."""

    error: str


@dataclass(frozen=True)
class _PodEvent(_Message):
    """An event of the watch of the node's pods."""

    event: Any


@dataclass(frozen=True)
class _WatchFailed(_Message):
    """The watch ended with an error: the main loop lists the pods from now on."""

    error: Exception


class DrainPass:
    """One bounded pass over a node's pods. Create one per pass; not reusable."""

    def __init__(
        self,
        client: Client,
        node: str,
        options: DrainOptions,
        started_at: float,
        on_progress: ProgressCallback | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.node = node
        self.options = options
        self.started_at = started_at
        self.on_progress = on_progress
        self.clock = clock
        self.deadline = started_at + options.timeout
        self._events: queue.Queue[_Message] = queue.Queue()
        self._stop = threading.Event()
        self._pdb_cache: dict[str, list[dict[str, Any]]] = {}
        self._pdb_lock = threading.Lock()
        self._watch: Watch | None = None
        self._end = self.deadline
        self.warnings: list[str] = []

    # -- listing and planning ------------------------------------------------------------------
    def list_pods(self, label_selector: str | None = None) -> tuple[list[dict[str, Any]], str | None]:
        listing = self.client.list(PODS, field_selector=f"spec.nodeName={self.node}", label_selector=label_selector)
        return listing["items"], (listing.get("metadata") or {}).get("resourceVersion")

    def existing_daemonsets(self, pods: Sequence[Mapping[str, Any]]) -> set[tuple[str, str]]:
        present = set()
        for namespace, name in sorted(core.daemonsets_to_check(pods)):
            try:
                self.client.get(DAEMONSETS, name, namespace)
            except NotFound:
                continue
            present.add((namespace, name))
        return present

    def plan(self) -> tuple[list[dict[str, Any]], list[core.PodPlan], str | None, int]:
        """(pods, plans, resourceVersion of the listing, total pods on the node)."""
        pods, version = self.list_pods(self.options.pod_selector)
        total = len(pods)
        if self.options.pod_selector:
            total = len(self.list_pods()[0])
        plans = core.classify(pods, self.options.rules, self.existing_daemonsets(pods))
        return pods, plans, version, total

    # -- the pass --------------------------------------------------------------------------------
    def _retrying(self) -> contextlib.AbstractContextManager[None]:
        """This thread's API calls retry transient failures (an API server restart) until the pass ends."""
        return self.client.retrying_until(time.monotonic() + max(0.0, self._end - self.clock()))

    def run(self, until: float | None = None) -> PassResult:
        """Plan, evict and wait until the pods are gone, ``until`` or the deadline (whichever is first)."""
        self._end = self.deadline if until is None else min(until, self.deadline)
        with self._retrying():
            return self._run(until)

    def _run(self, until: float | None) -> PassResult:
        pods, plans, version, total = self.plan()
        for p in plans:
            if p.warning and p.action == core.EVICT:
                self.warnings.append(p.warning + "; its pod is evicted because force is set")
        outcomes = {p.uid: core.initial_outcome(p) for p in plans}
        if message := core.block_message(self.node, plans):
            result = PassResult(total, plans, list(outcomes.values()), core.progress_of(total, plans, ()))
            result.blocked_by_rules = message
            return result
        targets = {p.uid: _Target(p, outcomes[p.uid]) for p in plans if p.action in (core.EVICT, core.WAIT)}
        by_uid = {core.pod_uid(p): p for p in pods}
        if self.options.dry_run:
            self._dry_run(targets, by_uid)
        else:
            end = self.deadline if until is None else min(until, self.deadline)
            self._evict_and_wait(targets, by_uid, version, end)
        gone = {uid for uid, t in targets.items() if t.gone}
        progress = core.progress_of(total, plans, gone)
        result = PassResult(total, plans, [outcomes[p.uid] for p in plans], progress, warnings=self.warnings)
        result.done = not self.options.dry_run and len(gone) == len(targets)
        result.timed_out = not result.done and not self.options.dry_run and self.clock() >= self.deadline
        return result

    def _report(self, total: int, targets: Mapping[str, _Target]) -> None:
        if self.on_progress is None:
            return
        plans = [t.plan for t in targets.values()]
        self.on_progress(core.progress_of(total, plans, {uid for uid, t in targets.items() if t.gone}))

    def _dry_run(self, targets: dict[str, _Target], pods: Mapping[str, Mapping[str, Any]]) -> None:
        """Server-side dry-run evictions: which pods would go, which PDBs would refuse."""
        evict = [t for t in targets.values() if t.plan.action == core.EVICT]

        def one(t: _Target) -> None:
            ns, name, uid, grace = t.plan.namespace, t.plan.name, t.plan.uid, self.options.grace_period
            try:
                if self.options.disable_eviction:
                    self.client.delete_pod(name, ns, uid=uid, grace_period=grace, dry_run=True)
                    t.outcome.action = core.DELETED
                else:
                    self.client.evict(name, ns, uid=uid, grace_period=grace, dry_run=True)
                    t.outcome.action = core.EVICTED
            except OBJECT_GONE:
                t.outcome.action = core.GONE
            except TooManyRequests as exc:
                t.outcome.action = core.BLOCKED
                t.outcome.reason = "pdb"
                t.outcome.pdbs = self._pdbs(pods.get(t.plan.uid) or {}, exc)
            except K8sError as exc:
                t.outcome.action = core.FAILED
                t.outcome.error = exc.msg

        with ThreadPoolExecutor(max_workers=max(1, self.options.concurrency)) as pool:
            list(pool.map(one, evict))

    def _pdbs(self, pod: Mapping[str, Any], exc: K8sError) -> list[str]:
        names = core.pdbs_from_status(exc.body)
        if names:
            return names
        namespace = str((pod.get("metadata") or {}).get("namespace", ""))
        with self._pdb_lock:
            if namespace not in self._pdb_cache:
                try:
                    self._pdb_cache[namespace] = self.client.list(PDBS, namespace)["items"]
                except K8sError:
                    self._pdb_cache[namespace] = []
            pdbs = self._pdb_cache[namespace]
        return core.pdbs_for_pod(pod, pdbs)

    def _worker(self, t: _Target, pod: Mapping[str, Any]) -> None:
        """Evict (or delete) one pod, retrying PDB refusals until the pass ends.

        Every call carries the planned pod's UID. The worker stops, counting the pod as gone, as soon as
        that pod is gone: the API answers 404, or 409 on the UID precondition (another pod has its name
        now), unless that answers a repeat of a call whose earlier attempt may have done it (then the pod
        counts as evicted or deleted by it, reason answer_lost); the main loop saw it go (the watch or a
        re-list; ``t.gone``, which also ends the wait between attempts); or the read before a retry finds no
        pod, or another one, under its name.
        So nothing is ever sent for a pod created under the same name since the plan. A budget's refusal
        (429) and a Conflict on the budget's update (the API server gave up against other evictions of the
        moment) are asked again after a backoff until the pass ends; only a refusal can lead to a bypass.
        """
        with self._retrying():
            self._attempt(t, pod)

    def _attempt(self, t: _Target, pod: Mapping[str, Any]) -> None:
        ns, name, uid, grace = t.plan.namespace, t.plan.name, t.plan.uid, self.options.grace_period
        attempt = refusals = conflicts = 0
        last: TooManyRequests | None = None
        contended: Conflict | None = None
        while not self._stop.is_set():
            if t.gone or (attempt and not self._still_there(t)):
                self._events.put(_Gone(t))
                return
            now = self.clock()
            delete = self.options.disable_eviction or (
                last is not None and core.bypass_due(self.started_at, now, self.options.bypass_pdb_after)
            )
            try:
                if delete:
                    self.client.delete_pod(name, ns, uid=uid, grace_period=grace)
                    t.requested = core.DELETED
                else:
                    self.client.evict(name, ns, uid=uid, grace_period=grace)
                    t.requested = core.EVICTED
                t.bypassed = delete and last is not None
                # the watch may report the pod gone before this message arrives
                self._events.put(_Requested(t))
                return
            except OBJECT_GONE as exc:  # deleted, or replaced by a new pod of the same name (left alone)
                if exc.after_lost_answer:
                    # An earlier attempt of this very call got no answer (an API server going down) and the pod
                    # was gone when it was asked again: found by its effect, that attempt is what removed it.
                    t.answer_lost = True  # before requested: the main loop reads them in that order
                    t.bypassed = delete and last is not None
                    t.requested = core.DELETED if delete else core.EVICTED
                    self._events.put(_Requested(t))
                    return
                self._events.put(_Gone(t))
                return
            except TooManyRequests as exc:
                last = exc
                attempt += 1
                refusals += 1
                if refusals == 1:
                    t.outcome.pdbs = self._pdbs(pod, exc)
                    self._events.put(_Refused(t))
                now = self.clock()
                if now >= self._end:
                    self._events.put(_GaveUp(t))
                    return
                # the next attempt: after the backoff, at the bypass time, or one last time at the end
                delay = min(core.retry_delay(refusals), self._end - now)
                if self.options.bypass_pdb_after is not None:
                    delay = min(delay, max(0.0, self.started_at + self.options.bypass_pdb_after - now))
                self._pause(t, delay)
            except Conflict as exc:
                # The API server gave up updating the PodDisruptionBudget against the other evictions of
                # the moment (it retries that itself, a few seconds): nothing was done, so it is asked again
                # after a backoff until the pass ends; it neither counts as a budget's refusal nor leads to
                # a bypass deletion.
                attempt += 1
                conflicts += 1
                contended = exc
                t.contention = exc.msg
                now = self.clock()
                if now >= self._end:
                    break
                self._pause(t, min(core.retry_delay(conflicts), self._end - now))
            except K8sError as exc:
                self._events.put(_Failed(t, exc.msg))
                return
        if last is not None:
            self._events.put(_GaveUp(t))
        elif contended is not None:
            self._events.put(_Failed(t, contended.msg))
        else:
            self._events.put(_GaveUp(t))

    def _pause(self, t: _Target, delay: float) -> None:
        """Wait ``delay`` seconds before the next attempt; ends early when the pod is gone or the pass stops."""
        t.wake.wait(delay)

    def _still_there(self, t: _Target) -> bool:
        """Whether the planned pod (its UID) is still there, read before a retry. A failed read counts as
        there: the next call's UID precondition still keeps a new pod of the same name safe."""
        try:
            current = self.client.get(PODS, t.plan.name, t.plan.namespace)
        except NotFound:
            return False
        except K8sError:
            return True
        return core.pod_uid(current) == t.plan.uid

    def _watcher(self, watch: Watch) -> None:
        try:
            for event in watch:
                self._events.put(_PodEvent(event))
        except Exception as exc:  # the main loop falls back to listing
            self._events.put(_WatchFailed(exc))

    def _evict_and_wait(
        self, targets: dict[str, _Target], pods: Mapping[str, Mapping[str, Any]], version: str | None, end: float
    ) -> None:
        self._end = end
        total = len(pods)
        if not targets:
            self._report(total, targets)
            return
        by_key = {t.plan.key: t for t in targets.values()}
        # Created here, started in a thread: stop() works even before the thread runs.
        self._watch = self.client.watch(
            PODS,
            field_selector=f"spec.nodeName={self.node}",
            label_selector=self.options.pod_selector,
            resource_version=version,
            timeout=max(1.0, end - self.clock() + 1),
        )
        threading.Thread(target=self._watcher, args=(self._watch,), daemon=True).start()
        to_evict = [t for t in targets.values() if t.plan.action == core.EVICT]
        workers = max(1, min(self.options.concurrency, len(to_evict)))
        pool = ThreadPoolExecutor(max_workers=workers) if to_evict else None
        in_flight = len(to_evict)
        if pool is not None:
            for t in to_evict:
                pool.submit(self._worker, t, pods.get(t.plan.uid) or {})
        polling = False
        self._report(total, targets)

        def mark_gone(t: _Target) -> None:
            if t.gone:
                return
            t.gone = True
            t.wake.set()  # its worker, if waiting to retry, stops now
            t.outcome.seconds = self.clock() - self.started_at
            t.outcome.action = t.requested or core.GONE
            t.outcome.error = ""
            if t.requested == core.EVICTED:
                t.outcome.pdbs, t.outcome.reason = [], "answer_lost" if t.answer_lost else ""
            self._report(total, targets)

        def finished() -> bool:
            remaining = [t for t in targets.values() if not t.gone]
            if not remaining:
                return True
            # nothing more can happen: no worker running and every pod left has given up
            return in_flight == 0 and all(t.final for t in remaining)

        try:
            while not finished():
                wait = end - self.clock()
                if wait <= 0:
                    break
                try:
                    message = self._events.get(timeout=min(wait, 1.0) if polling else wait)
                except queue.Empty:
                    if polling:
                        self._relist(targets, mark_gone)
                    continue
                if isinstance(message, _PodEvent):
                    self._on_event(message.event, targets, by_key, mark_gone)
                    continue
                if isinstance(message, _WatchFailed):
                    polling = True
                    self.warnings.append(
                        f"Watching the pods of node {self.node} failed ({message.error}); polling instead."
                    )
                    self._relist(targets, mark_gone)
                    continue
                if not isinstance(message, _WorkerMessage):
                    raise TypeError(f"unknown drain message {message!r}")
                t = message.target
                if isinstance(message, _Refused):  # the first refusal; the worker goes on asking
                    if not t.gone:
                        t.outcome.action = core.BLOCKED
                        t.outcome.reason = "pdb"
                    continue
                in_flight -= 1  # every other message is the worker's last
                if isinstance(message, _Requested):
                    if not t.gone:
                        t.outcome.action = core.TERMINATING
                        t.outcome.reason = ""
                elif isinstance(message, _Gone):  # the worker found its pod gone or replaced
                    mark_gone(t)
                elif isinstance(message, _GaveUp):
                    t.final = True
                    t.outcome.action = core.BLOCKED
                    t.outcome.reason = "pdb"
                elif isinstance(message, _Failed):
                    t.final = True
                    t.outcome.action = core.FAILED
                    t.outcome.error = message.error
        finally:
            self._stop.set()
            for t in targets.values():
                t.wake.set()
            if self._watch is not None:
                self._watch.stop()
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)
        for t in targets.values():
            if t.gone and t.requested:  # gone before its worker's message was read
                t.outcome.action = t.requested
                if t.requested == core.EVICTED:
                    t.outcome.pdbs, t.outcome.reason = [], "answer_lost" if t.answer_lost else ""
            if t.bypassed:
                t.outcome.reason = "pdb_bypassed"
                self.warnings.append(
                    f"Pod {t.plan.key} was deleted despite PodDisruptionBudget "
                    f"{', '.join(t.outcome.pdbs) or '(unknown)'} (bypass_pdb_after)."
                )
            elif t.answer_lost and t.gone:
                t.outcome.reason = "answer_lost"
            if not t.gone and t.outcome.action == core.BLOCKED:
                t.outcome.seconds = self.clock() - self.started_at
            elif not t.gone and not t.requested and not t.final and t.contention:
                # the pass ended while it was asked again after a Conflict: that is why the pod is still there
                t.outcome.action, t.outcome.error = core.FAILED, t.contention

    def _on_event(
        self,
        event: Mapping[str, Any],
        targets: Mapping[str, _Target],
        by_key: Mapping[str, _Target],
        mark_gone: Callable[[_Target], None],
    ) -> None:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "RELIST":
            present = {core.pod_uid(p) for p in obj.get("items") or []}
            for uid, t in targets.items():
                if uid not in present:
                    mark_gone(t)
            return
        uid = core.pod_uid(obj)
        if kind == "DELETED" and uid in targets:
            mark_gone(targets[uid])
            return
        same_name = by_key.get(core.pod_key(obj))
        if same_name is not None and uid != same_name.plan.uid:
            mark_gone(same_name)  # the same name with a new UID: the old pod is gone

    def _relist(self, targets: Mapping[str, _Target], mark_gone: Callable[[_Target], None]) -> None:
        try:
            pods = self.list_pods(self.options.pod_selector)[0]
        except K8sError:
            return
        self._on_event({"type": "RELIST", "object": {"items": pods}}, targets, {}, mark_gone)


# ---------------------------------------------------------------------------------------------- blocking


@dataclass
class WaitForCompletion:
    pod_selector: str | None = None
    timeout: float = 0.0  # 0 = no limit (bounded by nothing but the caller)


def wait_for_completion(
    client: Client,
    node: str,
    spec: WaitForCompletion,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[bool, list[str]]:
    """Wait (through a watch) until the node's pods matching the selector are deleted; (completed, left)."""
    options = DrainOptions(pod_selector=spec.pod_selector, timeout=spec.timeout if spec.timeout > 0 else 10**9)
    waiter = DrainPass(client, node, options, clock(), clock=clock)
    pods, version = waiter.list_pods(spec.pod_selector)
    if not pods:
        return True, []
    plans = [
        core.PodPlan(str(p["metadata"]["namespace"]), str(p["metadata"]["name"]), core.pod_uid(p), core.WAIT)
        for p in pods
    ]
    targets = {p.uid: _Target(p, core.initial_outcome(p)) for p in plans}
    waiter._evict_and_wait(targets, {core.pod_uid(p): p for p in pods}, version, waiter.deadline)
    left = sorted(t.plan.key for t in targets.values() if not t.gone)
    return not left, left


def pool_size_for(concurrency: int) -> int:
    """Connections a client needs for a drain with ``concurrency`` parallel evictions."""
    return max(1, concurrency) + EXTRA_CONNECTIONS


def maintenance_holding(client: Client, node: str) -> str | None:
    """Why a NodeMaintenance may count on the node staying cordoned (one in progress holds it, or they cannot be
    read to tell), or None."""
    try:
        items = client.list(NODE_MAINTENANCES)["items"]
    except (MissingResourceType, NotFound):
        return None  # no NodeMaintenance type here: nothing can hold the node
    except K8sError as exc:
        return f"the NodeMaintenances could not be read to check that none holds it ({exc.msg})"
    try:
        held = [r for r in parse_requests(items) if r.holds_node and r.node_name == node]
    except ValueError as exc:
        return f"the NodeMaintenances could not be read to check that none holds it ({exc})"
    if held:
        return f"NodeMaintenance {held[0].key} holds it"
    return None


def drain(
    client: Client,
    node: str,
    options: DrainOptions,
    *,
    cordon: bool = True,
    uncordon_on_failure: bool = False,
    completion: WaitForCompletion | None = None,
    on_progress: ProgressCallback | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> dict[str, Any]:
    """Cordon, (wait for completion,) drain until done or the deadline. Returns the result; raises DrainError."""
    begin = clock()
    try:
        node_obj = client.get(NODES, node)
    except NotFound:
        raise DrainError(
            f"Node {node} not found; nothing was changed. Check the name with 'kubectl get nodes'."
        ) from None
    was_cordoned = is_cordoned(node_obj)
    cordoned_now = False
    warnings: list[str] = []
    result: dict[str, Any] = {"node": node, "was_cordoned": was_cordoned}

    def finish(pass_result: PassResult | None, changed: bool) -> dict[str, Any]:
        result["changed"] = changed
        result["cordoned"] = was_cordoned or cordoned_now
        if pass_result is not None:
            result["pods"] = [o.as_dict() for o in pass_result.outcomes]
            result["totals"] = core.totals(pass_result.outcomes)
            result["progress"] = pass_result.progress.as_status()
            result["pdbs"] = core.pdb_names(pass_result.outcomes)
            warnings.extend(pass_result.warnings)
        result["warnings"] = warnings
        result["seconds"] = round(clock() - begin, 3)
        return result

    def uncordon() -> str | None:
        """Undo this run's cordon, unless someone cordoned the node again since or a NodeMaintenance now holds
        the node (it found the node cordoned, so it wrote no cordon of its own): then it stays cordoned, and
        the reason is returned (and warned)."""
        if options.dry_run:  # the dry-run cordon changed nothing
            return None
        why = maintenance_holding(client, node)
        if why is None and not undo_own_cordon(client, node, DRAIN_FIELD_MANAGER):
            why = "someone else changed its cordon during the drain"
        if why is not None:
            warnings.append(f"Node {node} was not uncordoned: {why}.")
        return why

    if cordon and not was_cordoned:
        # conditional on the node read above: a node cordoned meanwhile by someone else is theirs, left as it is
        written = set_state(client, node_obj, CORDONED, dry_run=options.dry_run, field_manager=DRAIN_FIELD_MANAGER)
        cordoned_now = written.change.changed
        if not cordoned_now:
            was_cordoned = result["was_cordoned"] = True

    if completion is not None:
        if options.dry_run:
            pods = DrainPass(client, node, options, begin, clock=clock).list_pods(completion.pod_selector)[0]
            result["wait_for_completion"] = sorted(core.pod_key(p) for p in pods)
        else:
            done, left = wait_for_completion(client, node, completion, clock=clock)
            result["wait_for_completion"] = left
            if not done:
                warnings.append(
                    f"wait_for_pod_completion timed out after {completion.timeout:g}s with "
                    f"{', '.join(left)} still on node {node}; draining them."
                )

    drain_pass = DrainPass(client, node, options, clock(), on_progress=on_progress, clock=clock)
    outcome = drain_pass.run()
    if outcome.blocked_by_rules:
        if cordoned_now and uncordon() is None:
            cordoned_now = False
        raise DrainError(outcome.blocked_by_rules, finish(outcome, changed=False))
    changed = cordoned_now or outcome.changed
    if options.dry_run:
        blocked = [o for o in outcome.outcomes if o.action == core.BLOCKED]
        if blocked:
            warnings.append(
                "A real drain would wait for PodDisruptionBudget(s) "
                + ", ".join(core.pdb_names(outcome.outcomes))
                + " to allow evicting "
                + ", ".join(f"{o.namespace}/{o.name}" for o in blocked)
                + "."
            )
        return finish(outcome, changed=changed)
    if not outcome.done:
        message = core.failure_message(node, outcome.outcomes, options.timeout, outcome.timed_out)
        why = uncordon() if uncordon_on_failure and cordoned_now else ""
        if why is None:
            cordoned_now = False
            message += f" Node {node} was uncordoned again (uncordon_on_failure)."
        elif why:
            message += f" Node {node} stays cordoned: {why}."
        elif was_cordoned or cordoned_now:
            message += f" Node {node} stays cordoned."
        raise DrainError(message, finish(outcome, changed=changed))
    return finish(outcome, changed=changed)
