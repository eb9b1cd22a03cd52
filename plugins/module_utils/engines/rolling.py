# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The I/O of a rolling maintenance run: its record in a ConfigMap, requests, admissions and releases.

The steps (``start``, ``drive``, each node's ``admit`` and ``release``, ``stop``, ``summary``) are what
``rolling_maintenance.yml`` calls between its own tasks; the rules are the pure ``core/maintenance/rolling.py``.
The record is written with conditional updates before anything that depends on it happens, so a run killed at
any moment is picked up by the next one: a node is requested again when its request is missing, an admission is
recorded before the node's maintenance tasks start, and a node is released only after its outcome is recorded.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from typing import Any, TypeVar, cast

from ..core.maintenance import changes as record_changes
from ..core.maintenance import gates as gatecore
from ..core.maintenance import lifecycle as lc
from ..core.maintenance import rolling as core
from ..core.maintenance.gates import PrometheusError
from ..core.maintenance.scheduler import FINALIZER
from ..core.maintenance.window import Window
from ..core.node.conditions import find as find_condition
from ..core.node.conditions import set_condition
from ..core.node.errors import NodeopsError
from ..core.node.nodes import node_ready
from ..k8s.client import CONFIGMAPS, DEFAULT_RETRY_SECONDS, NODE_MAINTENANCES, PODS, Client, retrying_for
from ..k8s.errors import Conflict, K8sError, NotFound
from ..k8s.memory import MemoryClient
from .maintenance import PassReport, ReconcileError, ReconcileOptions, Reconciler
from .requests import (
    BELL_LOOK,
    DELETED,
    LEFT,
    UNCHANGED,
    Action,
    Bell,
    RequestError,
    Requests,
    RequestSpec,
    is_given_back,
    is_kept_for_others,
)
from .rolling_results import (
    AdmitResult,
    DriveResult,
    ReleaseResult,
    RunStatus,
    StartResult,
    StepResult,
    StopResult,
    SummaryResult,
    Waiting,
)

FAILED_REASON = "FailedMaintenance"
STOP_WINDOW = "window"
STOP_GATE = "gate"
STOP_TIMEOUT = "timeout"  # a node waited wave_timeout for a slot: the others would wait as long
STOP_ASKED = "asked"  # step=stop (the playbook's fatal notification)
# The waits a step can hand back with ``progress_after`` (``waiting`` in its result), and go on with ``resume``.
WAIT_INTERRUPTED = "interrupted"  # start: nodes interrupted during their maintenance are not Ready yet
WAIT_ADMIT = "admit"  # admit: the node's request is not Ready yet (or its gates block)
WAIT_ADMIT_GATE = "admit_gate"  # admit: a gate blocks the node
WAIT_BACK = "back"  # release: the maintained node is not Ready in Kubernetes yet
WAIT_PHASES = (WAIT_INTERRUPTED, WAIT_ADMIT_GATE, WAIT_ADMIT, WAIT_BACK)
# The step that goes on with each wait.
STEP_OF_WAIT = {
    WAIT_INTERRUPTED: "start",
    WAIT_ADMIT_GATE: "admit",
    WAIT_ADMIT: "admit",
    WAIT_BACK: "release",
}
# How often a record update is tried again when the record changed in between (the other hosts of the run)
UPDATE_ATTEMPTS = 30
UPDATE_BACKOFF = 1.0  # the longest pause (seconds, at random up to it) before an update is tried again
NAMES_SHOWN = 5  # nodes a progress message names
R = TypeVar("R", bound=StepResult)
NODE_GONE = "its Node object is gone (deleted during the run, before its admission); it was not maintained"
DRIVER_SUFFIX = "-driver"  # the end of a driver's Lease identity (see Rolling.drive)
LEASE_LOOK = 5.0  # seconds a node's step trusts that a driver holds the Lease before it looks again
RUN_ID_ANNOTATION = "maintenance.nodeops.io/run-id"
STOPPED_ANNOTATION = "maintenance.nodeops.io/stopped"
# How long a stop waits for its turn in the group commit of the record before it is written alone.
STOP_WAIT = 10.0
# The longest a node's step tries one call again while the API server does not answer (see Rolling._riding_out).
RIDE_OUT = 300.0
NODE_LOOK = 5.0  # seconds between two checks by admit that the Node of a request still waiting is there
DRIVER_TURN = 5.0  # the longest a driver waits for the Lease (or after an error) before it looks at its run again
DRIVER_RECORD_LOOK = 2.0  # seconds between two reads of the run's record by its driver
# A driver's turn: every DRIVER_HOLD seconds it looks whether another driver asked for the Lease (in the last
# DRIVER_ASKED seconds: a waiting driver asks again every DRIVER_TURN) and hands it over then, so that the driver of
# another run of the same config, whose namespace its passes do not serve, gets its turn instead of waiting for
# this run's end.
DRIVER_HOLD = 10.0
DRIVER_ASKED = 2 * DRIVER_TURN


@dataclass
class GateOptions:
    """The gates checked before each node's admission (see docs/windows-and-gates.md)."""

    pod_selector: str = ""  # pods with these labels block
    pod_scope: str = "wave"  # wave: only on the node to be admitted; cluster: anywhere
    prometheus_url: str = ""  # firing alerts there block
    alert_filter: str = ".*"  # alert names that block (whole-name regular expression)
    pending_alerts: bool = False  # pending alerts block too
    validate_certs: bool = True
    check_failure: str = ""  # the user's gate tasks failed with this message (the playbook ran them)
    tasks: bool = False  # the playbook runs gate tasks of its own before each node's admission
    timeout: float = 3600.0  # how long a blocked gate is checked again before the run stops
    interval: float = 30.0  # between two checks while blocked
    prometheus_timeout: float = 10.0

    @property
    def active(self) -> bool:
        return bool(self.pod_selector or self.prometheus_url or self.check_failure or self.tasks)


@dataclass
class RunOptions:
    run_id: str
    requestor: str
    namespace: str  # of the NodeMaintenances
    record_namespace: str  # of the run's ConfigMap (the config namespace)
    spec: dict[str, Any]  # cordon, waitForPodCompletion, drainSpec of new requests
    name_prefix: str | None = None
    engine: str = "builtin"
    reconcile: ReconcileOptions | None = None
    interval: float = 0.5  # between two looks when nothing moved
    gather: float = 30.0  # see core.admit
    wave_timeout: float = 3600.0
    node_ready_timeout: float = 600.0
    release_timeout: float = 300.0
    release_failed: bool = False
    max_fail_percentage: float = 0.0
    window: Window | None = None  # nodes are admitted only inside it
    gates: GateOptions | None = None
    # a wait that lasts this many seconds returns ``waiting`` (say so, then call again with ``resume``); 0: never
    progress_after: float = 0.0

    @property
    def holds(self) -> bool:
        """Whether something may hold the next admission back: then only admit's passes schedule new requests."""
        return self.window is not None or (self.gates is not None and self.gates.active)


class Rolling:
    def __init__(
        self,
        client: Client,
        options: RunOptions,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        fetch_alerts: Callable[..., list[dict[str, Any]]] | None = None,
        plan: bool = False,
    ) -> None:
        # a plan (check mode): the same steps on an overlay of the cluster that keeps every write in memory, with no
        # reconcile pass of its own (the steps only look at the requests), waiting for nothing (each wait is handed
        # back at once, as with ``progress_after``)
        self.plan = plan
        self.client = cast(Client, MemoryClient(base=client, now=clock)) if plan else client
        client = self.client
        self.options = options
        self.clock = clock
        self.monotonic = monotonic
        self.fetch_alerts = fetch_alerts
        self.name = core.record_name(options.run_id)
        prefix = options.name_prefix or options.requestor
        self.requests = Requests(
            client,
            RequestSpec(options.requestor, options.namespace, prefix, options.spec),
            workers=options.reconcile.workers if options.reconcile is not None else 1,
        )
        self.reconciler = (
            Reconciler(client, options.reconcile or ReconcileOptions(namespace=options.namespace))
            if options.engine == "builtin" and not plan
            else None
        )
        if self.reconciler is not None and options.holds:
            # the passes of start and release (the releases) schedule nothing new: the window and the gates are
            # checked by admit before its own passes schedule
            self.reconciler.schedule_new = False
        self._configmap: dict[str, Any] | None = None
        self.wrote = False  # whether the last update wrote the record
        self._per_node = False  # a node's step (admit, release), which many hosts run at once
        self._ended: int | None = None  # the admission batch this release ended
        self._driven_until = 0.0  # (monotonic) until then a driver holds the Lease: no pass of its own
        # the action's doorbell between the run's driver and its nodes' steps (processes of one ansible-playbook):
        # the driver rings a node when a pass changed its request; a step waiting for its request looks when it
        # rings, not every poll interval (see requests.Bell)
        self.bell: Bell | None = None
        self._waiter = threading.Event()
        self._asked = False  # admit: the node may have a request of this call's
        # the group commit the action gives, which its workers share: the hosts of a run on one controller have
        # their changes of the record written together (``commit(change, apply, wait)``, see update)
        self.commit: Callable[..., tuple[Any, dict[str, Any]] | None] | None = None

    # -- the record ------------------------------------------------------------------------------
    def load(self) -> core.RunRecord:
        try:
            self._configmap = self.client.get(CONFIGMAPS, self.name, self.options.record_namespace)
        except NotFound:
            self._configmap = None
        data = (self._configmap or {}).get("data")
        try:
            return core.RunRecord.from_data(data, self.options.run_id, self.options.requestor)
        except core.RollingError as exc:
            raise RequestError(
                f"ConfigMap {self.options.record_namespace}/{self.name} (the record of run {self.options.run_id!r}): "
                f"{exc}. Delete it to start the run over, or use another run ID."
            ) from None

    def save(self, run: core.RunRecord, merge: bool = False) -> None:
        """Write the record; a Conflict means another run of the same run ID wrote it in between (with ``merge``,
        the Conflict is raised for :meth:`update` to try again). A record too large for its ConfigMap is an error
        before the write (the API server would refuse it)."""
        data = run.to_data()
        try:
            core.check_size(data, len(run.nodes))
        except core.RollingError as exc:
            raise RequestError(f"ConfigMap {self.options.record_namespace}/{self.name}: {exc}.") from None
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": self.name,
                "namespace": self.options.record_namespace,
                "labels": {"app.kubernetes.io/managed-by": "nodeops.maintenance"},
                "annotations": {
                    RUN_ID_ANNOTATION: self.options.run_id,
                    # the stop (empty: none), where a look at the record's metadata alone sees it (see
                    # stopped_on_record)
                    STOPPED_ANNOTATION: "" if run.stopped is None else str(run.stopped.get("reason") or "stopped"),
                },
            },
            "data": data,
        }
        try:
            if self._configmap is None:
                self._configmap = self.client.create(CONFIGMAPS, body, self.options.record_namespace)
            else:
                body["metadata"]["resourceVersion"] = self._configmap["metadata"]["resourceVersion"]
                self._configmap = self.client.replace(CONFIGMAPS, body)
        except Conflict:
            if merge:
                raise
            raise RequestError(
                f"The record of run {self.options.run_id!r} (ConfigMap {self.options.record_namespace}/{self.name}) "
                "was changed by someone else: is another run with the same run ID going on? Nothing more was done."
            ) from None

    def update(self, change: dict[str, Any], urgent: bool = False) -> tuple[core.RunRecord, Any]:
        """Apply ``change`` (see core/maintenance/changes.py) to the record: with the group commit the action gives
        (:attr:`commit`), together with the changes the other hosts of the run on this controller asked for, in
        one write by whichever of them writes next; else alone. Returns the record as written and what the change
        returned; :attr:`wrote` says whether the change changed the record. A stop (``urgent``) does not wait
        long behind the others: after STOP_WAIT seconds it is applied alone (the write is conditional
        either way)."""
        self.wrote = False
        answer = None
        if self.commit is not None and not self.plan:
            answer = self.commit(change, self._apply_group, STOP_WAIT if urgent else None)
        if answer is None:
            run, (result,) = self.apply_changes([change])
        else:
            data, result = answer
            run = self.load() if data is None else self._from_data(data)
        if "error" in result:
            raise RequestError(result["error"])
        self.wrote = bool(result["wrote"])
        return run, result["value"]

    def _apply_group(self, changes: list[dict[str, Any]]) -> tuple[dict[str, str] | None, list[dict[str, Any]]]:
        """:meth:`apply_changes` for a group commit: what the changes share is the record's data as written."""
        _run, results = self.apply_changes(changes)
        return (self._configmap or {}).get("data"), results

    def apply_changes(self, changes: Sequence[Mapping[str, Any]]) -> tuple[core.RunRecord, list[dict[str, Any]]]:
        """Read the record, apply ``changes`` in their order and write it back once when one changed it; when
        another writer wrote it in between, read it again and apply them to that (a conditional write each
        time, so what a change checks holds when it is written). Returns the record as written and each
        change's result: ``value`` and ``wrote`` (it changed the record), or ``error`` (a change the record
        refuses; the others are written)."""
        for attempt in range(UPDATE_ATTEMPTS):
            if attempt:  # apart from the others that met the same Conflict (another controller's, say)
                self._waiter.wait(random.uniform(0, min(UPDATE_BACKOFF, 0.02 * 2**attempt)))
            run = self.load()
            results: list[dict[str, Any]] = []
            for change in changes:
                try:
                    value, changed = record_changes.apply(run, change)
                except core.RollingError as exc:
                    results.append({"error": f"Run {self.options.run_id!r}: {exc}."})
                except (KeyError, TypeError, ValueError) as exc:  # a malformed change fails alone
                    kind = change.get("kind")
                    results.append({"error": f"Run {self.options.run_id!r}: change {kind!r} is malformed ({exc!r})."})
                else:
                    results.append({"value": value, "wrote": changed})
            if not any(r.get("wrote") for r in results):
                return run, results
            try:
                self.save(run, merge=True)
            except Conflict as exc:
                if not (exc.after_lost_answer and self._took_effect(run)):
                    continue
            return run, results
        raise RequestError(
            f"The record of run {self.options.run_id!r} (ConfigMap {self.options.record_namespace}/{self.name}) "
            f"changed under each of {UPDATE_ATTEMPTS} writes; nothing was written. Run the step again."
        )

    def _from_data(self, data: Mapping[str, str]) -> core.RunRecord:
        try:
            return core.RunRecord.from_data(data, self.options.run_id, self.options.requestor)
        except core.RollingError as exc:
            raise RequestError(f"Run {self.options.run_id!r}: {exc}.") from None

    def stopped_on_record(self) -> dict[str, Any] | None:
        """The run's stop on record, for the steps that wait and look for one every few seconds: the record's
        metadata alone first (its annotation says whether the run stopped), the whole record only when it says so
        or has no such annotation (a record written by an earlier version). Hundreds of hosts wait at once, and the
        record of thousands of nodes is a few hundred KB."""
        get_metadata = getattr(self.client, "get_metadata", None)
        if get_metadata is not None:
            try:
                meta = get_metadata(CONFIGMAPS, self.name, self.options.record_namespace).get("metadata") or {}
            except NotFound:
                return None  # no record: no stop
            if (meta.get("annotations") or {}).get(STOPPED_ANNOTATION) == "":
                return None
        return self.load().stopped

    def _took_effect(self, run: core.RunRecord) -> bool:
        """After a write of ``run`` whose answer was lost and whose repeat met a Conflict: whether the record is
        what was written (the lost write took effect and nothing came after it), so that the change is this
        call's and not applied again as another's (an admission that would then not be handed to its tasks)."""
        self.load()
        return self._configmap is not None and (self._configmap.get("data") or {}) == run.to_data()

    # -- reading requests ----------------------------------------------------------------------
    def _phases(self, nodes: Sequence[str]) -> tuple[dict[str, str | None], dict[str, dict[str, Any]]]:
        """node -> Ready reason of the request this requestor holds or joined (None: no request, or one being
        deleted), and the objects, as listed now."""
        phases, objects, _deleting = self._look(nodes)
        return phases, objects

    def _look(
        self, nodes: Sequence[str], report: PassReport | None = None
    ) -> tuple[dict[str, str | None], dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
        """:meth:`_phases`, and by node the request of this requestor being deleted and waited for, where the node
        has no other (its own, gone soon, or one it joined that is not drained: it is released soon). A request it
        joined that is drained is held for it when its owner deletes it, and counts as this run's. The requests
        as the reconcile pass ``report`` left them when it went through (see ``PassReport.objects``), else as
        listed now."""
        wanted = set(nodes)
        if report is not None and report.objects is not None and report.namespace == self.options.namespace:
            items = report.objects
        else:
            items = (
                self._own_request(nodes)
                or self.client.list(NODE_MAINTENANCES, namespace=self.options.namespace)["items"]
            )
        objects: dict[str, dict[str, Any]] = {}
        deleting: dict[str, dict[str, Any]] = {}
        requestor = self.options.requestor
        for obj in items:
            spec = obj.get("spec") or {}
            node = spec.get("nodeName")
            if node not in wanted:
                continue
            if spec.get("requestorID") == requestor or requestor in (spec.get("additionalRequestors") or []):
                obj.setdefault("apiVersion", NODE_MAINTENANCES.api_version)
                obj.setdefault("kind", NODE_MAINTENANCES.kind)
                meta = obj.get("metadata") or {}
                if meta.get("deletionTimestamp") and not lc.held_for(obj, requestor):
                    # its own or one it joined, still to be released: waited for until it is gone; its own held for
                    # the requestors that joined it (not soon) gets a request beside it, which waits for it; one
                    # without the finalizer is released already (only another finalizer keeps it): nothing of it is
                    # this run's, and the node is requested again
                    own = spec.get("requestorID") == requestor
                    if FINALIZER in (meta.get("finalizers") or []) and not (
                        own and lc.held(lc.NodeMaintenanceView.from_dict(obj))
                    ):
                        deleting[node] = obj
                    continue
                # a request of its own, one it joined, or one it joined held for it: this run's to use
                objects[node] = obj
        phases = {n: (lc.NodeMaintenanceView.from_dict(objects[n]).phase if n in objects else None) for n in nodes}
        return phases, objects, {n: o for n, o in deleting.items() if n not in objects}

    def _own_request(self, nodes: Sequence[str]) -> list[dict[str, Any]]:
        """For a node's step: its request under this run's name, read alone, when it is this requestor's and not
        being deleted (what the step sees nearly always); else nothing, and the caller lists them all (a request the
        node joined, or one going away, is found and judged there)."""
        if len(nodes) != 1 or not self._per_node:
            return []
        name = self.requests.request.object_name(nodes[0])
        try:
            obj = self.client.get(NODE_MAINTENANCES, name, self.options.namespace)
        except NotFound:
            return []
        spec = obj.get("spec") or {}
        if spec.get("nodeName") != nodes[0] or spec.get("requestorID") != self.options.requestor:
            return []
        return [] if (obj.get("metadata") or {}).get("deletionTimestamp") else [obj]

    def _pass(self) -> PassReport | None:
        """One reconcile pass with the built-in engine (None with the operator, and in a node's step while a
        driver holds the Lease: its passes do the work, the step only looks, and looks at the Lease again every
        LEASE_LOOK seconds)."""
        if self.reconciler is None:
            return None
        if self._driven_until > self.monotonic() or self._bell() is not None:
            return None
        with retrying_for(self.client, None):  # a pass holds the Lease: not one of a step's long retries
            report = self.reconciler.run_pass()
        self.requests.note(report)
        if self._per_node and report.busy and (report.holder or "").endswith(DRIVER_SUFFIX):
            self._driven_until = self.monotonic() + LEASE_LOOK
        return report

    def run_pass(self) -> PassReport | None:
        """What a wait for requests runs between two looks (see Requests.wait)."""
        return self._pass()

    def _pause(
        self, changed: bool, deadline: float, nodes: Sequence[str] = (), rung: tuple[int, ...] | None = None
    ) -> None:
        """After a look that changed nothing: wait the poll interval, or with ``rung`` (the bell of ``nodes`` as it
        was before the look) until the driver rings for one of them, BELL_LOOK seconds at most."""
        if changed:
            return
        left = max(0.0, deadline - self.monotonic())
        bell = self._bell()
        if bell is not None and rung is not None:
            bell.wait(nodes, rung, min(BELL_LOOK, left))
        else:
            self._waiter.wait(min(self.options.interval, left))

    def _bell(self) -> Bell | None:
        """The bell, for a node's step while the run's driver holds the Lease and rings; else None."""
        if self.bell is None or not self._per_node or self.plan or not self.bell.live():
            return None
        return self.bell

    def _wait_bell(self) -> Bell | None:
        """The bell for a wait of a node's step that may last (Requests.wait looks whether it is live each time)."""
        return None if self.bell is None or not self._per_node or self.plan else self.bell

    def _rung(self, nodes: Sequence[str]) -> tuple[int, ...] | None:
        """The bell of ``nodes`` before a look (None without a live bell), for :meth:`_pause` after it."""
        bell = self._bell()
        return None if bell is None else bell.state(nodes)

    # -- long waits, handed back with progress ------------------------------------------------------
    def _since(self, resume: Mapping[str, Any] | None, phase: str) -> float:
        """When a wait of ``phase`` began (seconds since the epoch): the one ``resume`` goes on with, or now."""
        if resume is not None and resume.get("phase") == phase:
            return min(float(resume["since"]), self.clock())
        return self.clock()

    def _deadline(self, since: float, timeout: float) -> float:
        """The monotonic deadline of a wait that began at ``since`` (wall clock) and may last ``timeout``."""
        return self.monotonic() + timeout - max(0.0, self.clock() - since)

    def _progress_due(self, began: float) -> bool:
        """Whether this call has waited long enough to hand the wait back with its progress (a plan: at once)."""
        after = self.options.progress_after
        return self.plan or (after > 0 and self.monotonic() - began >= after)

    def _until_progress(self, began: float) -> float:
        after = self.options.progress_after
        if self.plan:
            return 0.0
        return float("inf") if after <= 0 else max(0.0, began + after - self.monotonic())

    def _waiting(
        self,
        run: core.RunRecord,
        phase: str,
        since: float,
        timeout: float,
        message: str,
        result: R,
        resume_nodes: Sequence[str] = (),
        **details: Any,
    ) -> R:
        """``result`` (what the step has done so far) as a step that hands its wait back: what it waits for, since
        when, and the ``resume`` token the next call of the same step takes to go on with the same deadline."""
        waited = max(0.0, self.clock() - since)
        result.waiting = Waiting(
            phase=phase,
            since=since,
            waited=round(waited, 1),
            timeout=timeout,
            message=f"Run {self.options.run_id}: {message} (waiting {waited:.0f}s of at most {timeout:g}s)",
            resume_nodes=list(resume_nodes) if resume_nodes or phase == WAIT_INTERRUPTED else None,
            details=details,
        )
        result.status = self.status(run)
        return result

    # -- steps -----------------------------------------------------------------------------------
    def start(
        self,
        targets: Sequence[str],
        interrupted: str,
        retry_failed: bool,
        resume: Mapping[str, Any] | None = None,
        defer_requests: bool = False,
    ) -> StartResult:
        """Bring the record and the requests in line with the targets; the nodes interrupted during their
        maintenance are released once Ready. With ``progress_after``, that Ready wait hands back ``waiting``
        when it lasts longer; the call with its ``resume`` goes on with the release alone (the rest is done).
        With ``defer_requests``, only the record: each node's :meth:`admit` makes its request, and a request of a
        pending node (left by an admit that was killed in its wait) is given back, so that the scheduler prepares
        no node that no host waits for."""
        call_began = self.monotonic()
        resuming = resume is not None and resume.get("phase") == WAIT_INTERRUPTED
        if resuming:  # the nodes the first call waited for, whatever the targets are now
            run = self.load()
            plan = core.StartPlan(
                [], core.awaiting_release(run, list((resume or {}).get("nodes") or [])), [], [], [], []
            )
            actions: list[Action] = []
        else:
            if not targets:
                raise RequestError(
                    "No target nodes: give nodes, a node selector that matches some, or a non-empty group."
                )
            self.requests.check_nodes(targets)
            gates = self.options.gates
            if gates is not None and gates.pod_selector:  # a selector the API server refuses fails here, not later
                self.client.list(PODS, label_selector=gates.pod_selector)
            window = self.window_state()
            if window is not None and not window["open"]:  # changes nothing: no record, no request
                return StartResult(window=window, stopped=self.window_stop(window))
            run = self.load()
            plan = core.plan_start(run, targets, self.clock(), interrupted, retry_failed)
            try:
                core.check_capacity(run)  # before anything is written
            except core.RollingError as exc:
                raise RequestError(f"Run {self.options.run_id!r}: {exc}.") from None
            self.save(run)  # the interrupted and requeued nodes are on record before any request changes
            for node in plan.fail:
                self._mark_failed_request(node, run.nodes[node].message)
            if plan.rerun:
                self._clear_failed(plan.rerun)
            actions = self.requests.present(plan.request) if plan.request and not defer_requests else []
            if plan.request and defer_requests:
                withdrawn = [a for a in self.requests.absent(plan.request) if a.action in (DELETED, LEFT)]
                self._warn_kept(withdrawn)
                actions = withdrawn
        result = StartResult(
            changed=start_changed(plan, actions),
            requested=[a.as_dict() for a in actions],
            added=plan.added,
            interrupted=plan.release + plan.fail,
            requeued=plan.rerun,
            finished=plan.finished,
        )
        since = self._since(resume, WAIT_INTERRUPTED)
        timeout = self.options.node_ready_timeout
        not_back, left = self._wait_ready(plan.release, self._deadline(since, timeout), call_began)
        result.pending = run.in_state(core.PENDING)
        if left:
            return self._waiting(
                run,
                WAIT_INTERRUPTED,
                since,
                timeout,
                f"waiting for {_named(left)}, interrupted during their maintenance, to be Ready in Kubernetes "
                "before they are released",
                result,
                resume_nodes=plan.release,
                nodes_not_ready=left,
            )
        for node, why in not_back.items():  # interrupted and not back: for a person, like a failure
            core.mark_failed(run, node, f"interrupted, then {why}", self.clock())
            self._mark_failed_request(node, run.nodes[node].message)
        if not_back:
            self.save(run)
        result.released = self._release(run, [n for n in plan.release if n not in not_back])
        self.save(run)
        result.pending, result.status = run.in_state(core.PENDING), self.status(run)
        return result

    def _gone(
        self, pending: Sequence[str], missing: Sequence[str], report: PassReport | None, first: bool
    ) -> list[str]:
        """The pending nodes whose Node object is gone, among those without a request (``missing``: one cannot be
        made for them) and those the reconcile pass ``report`` did not list; without a pass that listed the Nodes
        (the operator's engine), all of them at the ``first`` look of a call. Each confirmed by a read."""
        listed = report.node_names if report is not None else None
        if listed is None and first:
            suspects = list(pending)
        else:
            suspects = [n for n in pending if n in missing or (listed is not None and n not in listed)]
        return self.requests.unknown_nodes(suspects) if suspects else []

    def admit(self, node: str, resume: Mapping[str, Any] | None = None) -> AdmitResult:
        """Hand one node of the run to its maintenance tasks: check the window and the gates for it, make its
        request when it has none, run reconcile passes (``engine=builtin``) until the scheduler has made it Ready
        (cordoned and drained within the limits), then record it as ``maintaining`` in an admission batch. Each
        host of a run calls this for its own node, at the same time as the others; the record is updated per
        node. With ``progress_after``, a longer wait returns ``waiting``; the call with its ``resume`` goes on
        with the same deadline. A stop on record (see :meth:`stop`) ends the wait: the node is not admitted.
        However the wait ends without an admission (an error too), the node's request is given back."""
        self._asked = resume is not None  # a wait handed back went on with a request made
        gates = self.options.gates
        patience = self.options.wave_timeout + (gates.timeout if gates is not None and gates.active else 0.0)
        try:
            with self._riding_out(patience):
                return self._admit(node, resume)
        except NodeopsError:
            if self._asked:  # nothing left for the scheduler to prepare with no one waiting for it (best effort)
                with contextlib.suppress(NodeopsError):
                    self._give_up(node)
            raise

    def _riding_out(self, patience: float) -> AbstractContextManager[None]:
        """Within the block, each call to the API server that gets no answer (no connection, a timeout, 5xx, 429)
        is tried again for up to ``patience`` seconds from its own start (at most RIDE_OUT, at least the client's
        default of 20 s) instead of that default: hundreds of hosts wait in their steps at once, and an API server
        slow or restarting for a few minutes must not fail a node whose maintenance passed, or the wait of one not
        admitted. A window per call, so a step overruns its own timeouts by one window at most when the API server
        is away at their end; the reconcile passes keep the client's default (see :meth:`_pass`)."""
        return retrying_for(self.client, max(DEFAULT_RETRY_SECONDS, min(patience, RIDE_OUT)))

    def _admit(self, node: str, resume: Mapping[str, Any] | None) -> AdmitResult:
        opts = self.options
        call_began = self.monotonic()
        self._take_turns()
        run = self.load()
        record = run.nodes.get(node)
        if record is None:
            raise RequestError(f"{node} is not a node of run {opts.run_id!r}; a start step adds the targets first.")
        if record.state != core.PENDING:  # admitted already (once: its maintenance is not run again), or finished
            return self._admitted(run, node, changed=False)
        self._asked = True
        if run.stopped is not None:  # another node's step stopped the run: nothing new for it
            given_up = self._give_up(node)
            given_up.stopped = run.stopped
            return given_up
        if core.fail_budget(run, opts.max_fail_percentage).exceeded:
            return self._give_up(node, abort=True)
        gate_report: dict[str, Any] = {}
        if resume is None or resume.get("phase") != WAIT_ADMIT:
            since = self._since(resume, WAIT_ADMIT_GATE)
            stop, gate_report = self._hold(run, node, since, call_began)
            if stop is not None:
                return stop
        since = self._since(resume, WAIT_ADMIT)
        deadline = self._deadline(since, opts.wave_timeout)
        if self.reconciler is not None:
            self.reconciler.schedule_new = True
        first = True
        requested = False  # this call made the node's request
        node_look = self.monotonic() + NODE_LOOK
        gates = opts.gates if opts.gates is not None and opts.gates.active else None
        gate_look = self.monotonic() + (gates.interval if gates is not None else 0.0)
        while True:
            window = self.window_state()
            if window is not None and not window["open"]:  # the window closed while the node waited
                return self._stop(run, self.window_stop(window), node, window)
            began = self.clock()
            rung = self._rung([node])
            report = self._pass()
            changed = report is not None and report.changed
            phases, objects, deleting = self._look([node], report)
            gone = False
            if phases[node] is None and node not in deleting:
                gone = bool(self._gone([node], [node], report, first=first))
            elif phases[node] not in core.DRAINED_PHASES and self.monotonic() >= node_look:
                # a request the scheduler leaves alone (its Node deleted meanwhile) says nothing: look at the Node,
                # and at the record, which another node's step may have stopped the run in
                node_look = self.monotonic() + NODE_LOOK
                listed = None if report is None else report.node_names
                gone = bool(self.requests.unknown_nodes([node])) if listed is None or node not in listed else False
                stopped = self.stopped_on_record()
                if stopped is not None and not gone:
                    return self._stop(run, stopped, node)
            if gone:
                self.requests.absent([node])
                run = self.update({"kind": "failed", "node": node, "message": NODE_GONE, "now": self.clock()})[0]
                gone_result = self._admitted(run, node, changed=True)
                gone_result.failure = NODE_GONE
                return gone_result
            waits_its_turn = phases[node] is None or phases[node] not in (*core.ACTIVE_PHASES, *core.DRAINED_PHASES)
            if gates is not None and waits_its_turn and self.monotonic() >= gate_look:
                # still in the scheduler's queue: a gate that started to block since must hold it back (nothing new
                # is cordoned while a gate blocks), so its request is given back until the gates are clear again
                gate_look = self.monotonic() + gates.interval
                if self.blockers([node]):
                    self._give_back([node])
                    stop, gate_report = self._hold(run, node, self.clock(), call_began)
                    if stop is not None:
                        return stop
                    since, deadline = self.clock(), self._deadline(self.clock(), opts.wave_timeout)
                    first = True
                    continue
            if phases[node] is None and node not in deleting:
                # the record as it is now: nothing new once the run stopped (during the gates' wait, say), and no
                # request again for a node another host of it admitted (and released) meanwhile
                now_on_record = self.load()
                if now_on_record.stopped is not None:
                    return self._stop(run, now_on_record.stopped, node)
                if now_on_record.nodes[node].state != core.PENDING:
                    return self._admitted(now_on_record, node, changed=False)
                self.requests.present([node], checked=True)
                phases, objects, deleting = self._look([node])
                changed = requested = True
            first = False
            if phases[node] in core.DRAINED_PHASES:
                admission = {
                    "kind": "admit",
                    "node": node,
                    "now": self.clock(),
                    "began": began,
                    "gather": opts.gather,
                    "max_fail_percentage": opts.max_fail_percentage,
                }
                # own: the record holds this call's admission already (a write whose answer was lost)
                run, (batch, opened, own) = self.update(admission)
                if batch is None and run.nodes[node].state == core.PENDING:
                    if run.stopped is not None:
                        return self._stop(run, run.stopped, node)
                    return self._give_up(node, abort=True)  # the failures went over the budget
                handed = self.wrote or own
                admitted = self._admitted(run, node, changed=handed, admitted=handed)
                admitted.opened, admitted.gates = handed and opened, gate_report
                if self.plan:  # the admission it would record (wave, state); no maintenance runs on a plan
                    admitted.admitted = False
                return admitted
            if self.monotonic() >= deadline:  # admit gives the request back
                why = self.requests.explain(self._action(node, objects.get(node) or deleting.get(node)))
                message = (
                    f"{node} (run {opts.run_id!r}) did not become ready for its maintenance within "
                    f"{opts.wave_timeout:g}s: {why}"
                )
                if node not in deleting and phases[node] not in (*core.ACTIVE_PHASES, *core.DRAINED_PHASES):
                    # no slot came for it: the nodes after it would wait as long, so the run stops for them all
                    timed_out = {
                        "reason": STOP_TIMEOUT,
                        "message": f"{message}. The run stopped: nothing new is cordoned; run the same command "
                        "again to go on once the scheduler has room.",
                    }
                    self.update({"kind": "stop", "stop": timed_out, "now": self.clock()}, urgent=True)
                raise RequestError(message)
            if self._progress_due(call_began):
                state = (
                    "whose earlier request is still being deleted"
                    if node in deleting
                    else (
                        "being prepared (cordon, drain)"
                        if phases[node] in core.ACTIVE_PHASES
                        else "waiting for the scheduler"
                    )
                )
                return self._waiting(
                    run,
                    WAIT_ADMIT,
                    since,
                    opts.wave_timeout,
                    f"{node} {state}",
                    # a plan's wait would end in the node's admission, a change
                    AdmitResult(changed=requested or self.plan, node=node, state=core.PENDING),
                    resume_nodes=[node],
                )
            self._pause(changed, min(deadline, self.monotonic() + self._until_progress(call_began)), [node], rung)

    def _give_up(self, node: str, abort: bool = False) -> AdmitResult:
        """Give the request of a node that will not be admitted now back (waiting until it is gone: the node
        uncordoned) and leave the node pending, as a stop does; what admit returns then."""
        self._give_back([node])
        run = self.update({"kind": "withdraw", "nodes": [node]})[0]
        return self._admitted(run, node, changed=self.wrote, abort=abort)

    def _take_turns(self) -> None:
        """For the steps of one node, which many hosts run at once: a reconcile pass that finds the Lease held
        does not wait for it (another host's pass is doing the work for all); the step looks at its node and
        tries again after its poll interval."""
        self._per_node = True
        if self.reconciler is not None and self.reconciler.options.lease_wait:
            # a reconciler of its own: the run's options (which the caller may share) stay as they were
            waiting = self.reconciler
            self.reconciler = Reconciler(self.client, replace(waiting.options, lease_wait=0.0))
            self.reconciler.schedule_new = waiting.schedule_new

    def _admitted(
        self, run: core.RunRecord, node: str, changed: bool, abort: bool = False, admitted: bool = False
    ) -> AdmitResult:
        """What admit returns for ``node``: ``admitted`` when this call handed it to its maintenance tasks (a node
        admitted earlier, by this host or another, is not handed over again), and the record's view of it."""
        record = run.nodes[node]
        return AdmitResult(
            changed=changed,
            status=self.status(run),
            node=node,
            admitted=admitted,
            wave=record.wave if admitted else None,
            state=record.state,
            done=not run.in_state(core.PENDING),
            abort=abort,
        )

    def release(
        self,
        node: str,
        failure: str | None,
        timing: Sequence[float] | None = None,
        resume: Mapping[str, Any] | None = None,
    ) -> ReleaseResult:
        """Take the outcome of one admitted node's maintenance tasks (``failure``: why they failed; None: they
        passed), wait until the node is Ready in Kubernetes and release it (the request given back, the node
        uncordoned). A failed node keeps its request (RequestorFailed, cordoned for a person) unless
        ``release_failed``. With ``progress_after``, a longer Ready wait returns ``waiting``; the call with its
        ``resume`` (the outcome is on record) goes on with the same deadline."""
        with self._riding_out(self.options.node_ready_timeout + self.options.release_timeout):
            return self._release_one(node, failure, timing, resume)

    def _release_one(
        self,
        node: str,
        failure: str | None,
        timing: Sequence[float] | None,
        resume: Mapping[str, Any] | None,
    ) -> ReleaseResult:
        opts = self.options
        began = self.monotonic()
        self._take_turns()
        self._ended = None
        if resume is not None and resume.get("phase") == WAIT_BACK:
            run = self.load()
            changed = True
        else:
            span = list(timing) if timing else None
            outcome = {"kind": "outcome", "node": node, "failure": failure, "timing": span, "now": self.clock()}
            run, changed = self._leave(outcome)
        record = run.nodes[node]  # node_outcome refused a node not in the run
        if record.state == core.DONE:
            return self._released(run, node, changed, [])
        if record.state == core.FAILED:
            if record.back is not None or not opts.release_failed:
                if not opts.release_failed:
                    self._mark_failed_request(node, record.message)
                return self._released(run, node, changed, [])
            self._give_back([node])
            run = self.update({"kind": "released", "node": node, "now": self.clock()})[0]
            return self._released(run, node, True, [node])
        if record.state != core.MAINTAINING:
            raise RequestError(f"{node} is {record.state} in run {opts.run_id!r}; only an admitted node is released.")
        since = record.finished if resume is None else self._since(resume, WAIT_BACK)
        not_back, left = self._wait_ready([node], self._deadline(since or self.clock(), opts.node_ready_timeout), began)
        if left:
            return self._waiting(
                run,
                WAIT_BACK,
                since or self.clock(),
                opts.node_ready_timeout,
                f"waiting for {node} to be Ready in Kubernetes after its maintenance",
                ReleaseResult(changed=changed, node=node),  # the outcome is on record
                resume_nodes=[node],
                nodes_not_ready=left,
            )
        if not_back:
            run = self._leave({"kind": "failed", "node": node, "message": not_back[node], "now": self.clock()})[0]
            if not opts.release_failed:
                self._mark_failed_request(node, not_back[node])
                return self._released(run, node, True, [])
        self._give_back([node])
        if not_back:
            run = self.update({"kind": "released", "node": node, "now": self.clock()})[0]
        else:
            run = self._leave({"kind": "done", "node": node, "now": self.clock()})[0]
        return self._released(run, node, True, [node])

    def _leave(self, change: dict[str, Any]) -> tuple[core.RunRecord, Any]:
        """:meth:`update` with ``change`` of one node; when that write takes the node out of ``maintaining`` and
        leaves no node of its admission batch maintaining, this call ended the batch (:attr:`_ended`; exactly one
        call does, the writes being conditional)."""
        run, (value, ended, own) = self.update({**change, "leave": True})
        if (self.wrote or own) and ended is not None:
            self._ended = ended
        return run, value

    def _released(self, run: core.RunRecord, node: str, changed: bool, released: list[str]) -> ReleaseResult:
        record = run.nodes[node]
        ended: dict[str, Any] | None = None
        if self._ended is not None:
            nodes, failures = core.batch_of(run, self._ended)
            ended = {"wave": self._ended, "nodes": nodes, "failures": failures}
        return ReleaseResult(
            changed=changed,
            status=self.status(run),
            node=node,
            wave=record.wave,
            batch_ended=ended,
            state=record.state,
            failure=record.message if record.state == core.FAILED else None,
            released=released,
            abort=core.fail_budget(run, self.options.max_fail_percentage).exceeded,
        )

    def drive(self, alive: Callable[[], bool] = lambda: True) -> DriveResult:
        """The run's driver: reconcile passes one after the other (``engine=builtin``), holding the Lease from pass
        to pass, until no node of the run is pending or maintaining, or ``alive`` says the run's playbook is gone.
        While it holds the Lease, the nodes' steps (``admit``, ``release``) run no pass of their own: each looks at
        its own request and Node only. Its passes serve its run's namespace (as the nodes' steps did), the
        namespaces of other configs being theirs. The driver is not needed for safety or for progress: without it
        (never started, killed: its Lease runs out) the nodes' steps run the passes themselves, as before. Another
        holder of the Lease (another run's driver, a scheduled reconcile) serves this run's requests too; the
        driver waits for its turn, and asks for it on the Lease. Turns: every DRIVER_HOLD seconds it looks whether
        another driver asked, and hands the Lease over to it then (straight, so no node's step takes it in between),
        so that the driver of a run of the same config in another namespace (which its passes do not serve) is not
        kept waiting until this run ends. A stopped run's driver ends once no node of it is maintaining."""
        if self.reconciler is None:
            return DriveResult(status=self.status(self.load()))
        options = self.reconciler.options
        # a reconciler of its own, which schedules new requests (the nodes' steps make them)
        reconciler = Reconciler(self.client, replace(options, lease_wait=min(options.lease_wait, DRIVER_TURN)))
        reconciler.lease.identity += DRIVER_SUFFIX
        reconciler.on_moved = None if self.bell is None else self.bell.ring
        passes, changed = 0, False
        errors: list[str] = []
        look_at = 0.0  # (monotonic) when the record is read next
        finished = False

        def ended() -> bool:
            nonlocal look_at, finished, errors
            if self.monotonic() >= look_at:
                look_at = self.monotonic() + DRIVER_RECORD_LOOK
                try:
                    run = self.load()
                except (K8sError, RequestError) as exc:  # the API away: looked at again, as the passes are
                    errors = [*errors, str(exc)][-NAMES_SHOWN:]
                else:
                    pending = [] if run.stopped is not None else run.in_state(core.PENDING)
                    finished = not pending and not run.in_state(core.MAINTAINING)
            return finished or not alive()

        while not ended():
            try:
                with reconciler.holding(ask=True) as held, self._beating(held, reconciler):
                    look_at_turn = self.monotonic() + DRIVER_HOLD
                    while held and not ended():
                        report = reconciler.run_pass()
                        passes += 1
                        changed = changed or report.changed
                        errors = [e["error"] for e in report.errors][-NAMES_SHOWN:] or errors
                        if report.lease_lost:
                            break
                        if self.monotonic() >= look_at_turn:
                            look_at_turn = self.monotonic() + DRIVER_HOLD
                            if reconciler.lease.asked(DRIVER_ASKED) is not None:  # handed over as the block ends
                                reconciler.lease.hand_over_within = DRIVER_ASKED
                                break
                        self._pause(report.changed, self.monotonic() + self.options.interval)
            except (K8sError, ReconcileError) as exc:  # the API away, a bad config: tried again, as an operator does
                errors = [*errors, str(exc)][-NAMES_SHOWN:]
                self._waiter.wait(DRIVER_TURN)
            finally:
                reconciler.lease.hand_over_within = 0.0
        with contextlib.suppress(K8sError):  # no holder hands the Lease to a driver that has ended
            reconciler.lease.withdraw()
        try:
            status: RunStatus | None = self.status(self.load())
        except (K8sError, RequestError):
            status = None
        return DriveResult(changed=changed, status=status, passes=passes, errors=errors)

    def _beating(self, held: bool, reconciler: Reconciler) -> AbstractContextManager[None]:
        """The driver's heartbeat on the bell while it holds the Lease (and can show it)."""
        if not held or self.bell is None:
            return contextlib.nullcontext()
        lease = reconciler.lease
        return self.bell.beating(lambda: lease.monotonic() < lease.valid_until)

    def summary(self) -> SummaryResult:
        run = self.load()
        rows = core.summary_rows(run)
        status = self.status(run)
        backs = [r.back for r in run.nodes.values() if r.back is not None]
        total = f"{max(backs) - run.started:.0f}s" if backs and run.started is not None else "-"
        counts = ", ".join(f"{state} {count}" for state, count in status.counts.items() if count)
        lines = [
            *core.render_summary(rows),
            f"waves: {run.last_wave}; {counts}; from the first request to the last release: {total}",
        ]
        if run.stopped is not None:
            lines.append(f"stopped ({run.stopped['reason']}): {run.stopped.get('message', '')}")
        return SummaryResult(status=status, nodes=rows, lines=lines, stopped=run.stopped)

    def stop(self, message: str) -> StopResult:
        """Stop the run (the playbook's fatal notification): on record, so that each node's admit gives its request
        back and admits nothing more; the nodes in their maintenance go on. The next start goes on with the run."""
        stop = {"reason": STOP_ASKED, "message": message or "the run was stopped"}
        run, stopped = self.update({"kind": "stop", "stop": stop, "now": self.clock()}, urgent=True)
        return StopResult(changed=self.wrote, status=self.status(run), stopped=stopped)

    # -- window and gates ------------------------------------------------------------------------
    def window_state(self) -> dict[str, Any] | None:
        """Whether the window is open now, when it opens and closes; None without a window."""
        window = self.options.window
        if window is None:
            return None
        now = self.clock()
        opens = window.next_open(now)
        closes = window.closes_at(now)
        return {
            "open": opens == now,
            "window": window.describe(),
            "opens_at": window.format(opens),
            "opens_in": round(opens - now, 1),
            "closes_at": None if closes is None else window.format(closes),
        }

    @staticmethod
    def window_stop(window: dict[str, Any]) -> dict[str, Any]:
        return {
            "reason": STOP_WINDOW,
            "message": f"Outside the maintenance window ({window['window']}); it opens at {window['opens_at']}. "
            "Run the same command again then to go on.",
            "opens_at": window["opens_at"],
            "blockers": [],
        }

    def _hold(
        self, run: core.RunRecord, node: str, since: float, began: float
    ) -> tuple[AdmitResult | None, dict[str, Any]]:
        """Before anything that could schedule ``node``: the window, then the gates, checked again every gate
        interval while they block, up to the gate timeout from ``since`` (when the gate wait began, on the wall
        clock). (a result that stops the run or hands the wait back, or None; what the gates did). A stop takes back
        the node's request."""
        window = self.window_state()
        if window is not None and not window["open"]:
            return self._stop(run, self.window_stop(window), node, window), {}
        gates = self.options.gates
        if gates is None or not gates.active:
            return None, {}
        deadline = self._deadline(since, gates.timeout)
        seen: dict[str, None] = {}
        checks = 0
        while True:
            blockers = self.blockers([node])
            checks += 1
            report = {"checks": checks, "waited": round(max(0.0, self.clock() - since), 1), "blocked_by": list(seen)}
            if not blockers:
                return None, report
            seen.update(dict.fromkeys(b.message for b in blockers))
            remaining = deadline - self.monotonic()
            if gates.check_failure or remaining <= 0:
                stopped = {
                    "reason": STOP_GATE,
                    "message": "The next admission is blocked"
                    + ("" if gates.check_failure else f" (still after {gates.timeout:g}s)")
                    + f": {gatecore.summarize(blockers)}. Nothing new was cordoned; run the same command again "
                    "to go on once it is clear.",
                    "blockers": [b.as_dict() for b in blockers],
                }
                return self._stop(run, stopped, node, window), {**report, "blocked_by": list(seen)}
            on_record = self.stopped_on_record()  # another node's step may have stopped the run meanwhile
            if on_record is not None:
                return self._stop(run, on_record, node, window), {**report, "blocked_by": list(seen)}
            if self._progress_due(began):
                message = f"the next admission waits for its gates: {gatecore.summarize(blockers)}"
                waiting = self._waiting(
                    run,
                    WAIT_ADMIT_GATE,
                    since,
                    gates.timeout,
                    message,
                    AdmitResult(node=node),
                    resume_nodes=[node],
                    blockers=[b.as_dict() for b in blockers],
                )
                return waiting, {**report, "blocked_by": list(seen)}
            self._waiter.wait(min(gates.interval, remaining, self._until_progress(began)))
            window = self.window_state()
            if window is not None and not window["open"]:
                return self._stop(run, self.window_stop(window), node, window), {**report, "blocked_by": list(seen)}

    def blockers(self, nodes: Sequence[str]) -> list[gatecore.Blocker]:
        """What blocks the admission of ``nodes`` now, by every gate (reads only); the pod gate looks at the pods on
        these nodes (or, with the scope ``cluster``, anywhere)."""
        gates = self.options.gates
        out: list[gatecore.Blocker] = []
        if gates is None:
            return out
        if gates.check_failure:
            out.append(gatecore.Blocker("tasks", f"the gate tasks failed: {gates.check_failure}"))
        if gates.pod_selector:
            pods = self.client.list(PODS, label_selector=gates.pod_selector)["items"]
            out += gatecore.blocking_pods(pods, None if gates.pod_scope == "cluster" else list(nodes))
        if gates.prometheus_url and self.fetch_alerts is None:  # fail safe, as when Prometheus does not answer
            out.append(gatecore.Blocker("alerts", "no Prometheus client was given; the alert gate blocks"))
        elif gates.prometheus_url and self.fetch_alerts is not None:
            try:
                alerts = self.fetch_alerts(
                    gates.prometheus_url, timeout=gates.prometheus_timeout, validate_certs=gates.validate_certs
                )
            except PrometheusError as exc:  # fail safe: an alert gate that cannot be checked blocks
                out.append(gatecore.Blocker("alerts", f"{exc}; the alert gate blocks until it answers"))
            else:
                out += gatecore.blocking_alerts(alerts, gates.alert_filter, gates.pending_alerts)
        return out

    def _stop(
        self, run: core.RunRecord, stopped: dict[str, Any], node: str, window: dict[str, Any] | None = None
    ) -> AdmitResult:
        """Stop the run before ``node`` is admitted: record the stop (the first one stays) for every node's step,
        give the node's request back while it is pending, so that nothing is cordoned or drained for this run while
        it stands still (a node already prepared is uncordoned), and say why. The same command goes on later: start
        requests the nodes again."""
        if self.reconciler is not None:
            self.reconciler.schedule_new = False
        run = self.load()  # the record as it is now (other hosts write it too)
        pending = [node] if node in run.in_state(core.PENDING) else []
        actions = self.requests.absent(pending) if pending else []
        if actions and not self.plan and not self._wait_given_back(actions):
            left = [self.requests.explain(a) for a in actions if not is_given_back(a)]
            raise RequestError(
                f"The run stopped ({stopped['reason']}), but its requests were not gone after "
                f"{self.options.release_timeout:g}s: " + "; ".join(left)
            )
        self._warn_kept(actions)
        withdrawn = sorted(a.node for a in actions if a.action in (DELETED, LEFT))

        withdrawal = {"kind": "withdraw", "nodes": pending, "stop": stopped, "now": self.clock()}
        run = self.update(withdrawal, urgent=True)[0]
        return AdmitResult(
            changed=bool(withdrawn),
            status=self.status(run),
            node=node,
            state=run.nodes[node].state if node in run.nodes else None,
            stopped=stopped,
            withdrawn=withdrawn,
            window=window,
        )

    # -- helpers ---------------------------------------------------------------------------------
    def status(self, run: core.RunRecord) -> RunStatus:
        budget = core.fail_budget(run, self.options.max_fail_percentage)
        return RunStatus(
            run_id=self.options.run_id,
            record=f"{self.options.record_namespace}/{self.name}",
            waves=run.last_wave,
            counts={state: len(run.in_state(state)) for state in core.STATES},
            need_a_look=run.in_state(core.FAILED, core.INTERRUPTED),
            failed_nodes=run.in_state(core.FAILED),
            interrupted_nodes=run.in_state(core.INTERRUPTED),
            failed_percentage=budget.percentage,
            complete=not run.in_state(core.PENDING, core.MAINTAINING),
        )

    def _action(self, node: str, obj: dict[str, Any] | None) -> Action:
        meta = (obj or {}).get("metadata") or {}
        name = meta.get("name") or self.requests.request.object_name(node)
        return Action(node, "unchanged", self.options.namespace, name, obj)

    def _wait_ready(
        self, nodes: Sequence[str], deadline: float | None = None, began: float | None = None
    ) -> tuple[dict[str, str], list[str]]:
        """Wait until the nodes are Ready in Kubernetes, until the (monotonic) deadline: those that are not by
        then, with why. With ``began`` (this call's start) and ``progress_after``, stop early instead and return
        the nodes still waited for as the second item (the first is then empty)."""
        if not nodes:
            return {}, []
        if deadline is None:
            deadline = self.monotonic() + self.options.node_ready_timeout
        left = set(nodes)
        while True:
            present = self.requests.node_objects(left)
            for node in list(left):
                if node in present and node_ready(present[node]):
                    left.discard(node)
            if not left or self.monotonic() >= deadline:
                break
            if began is not None and self._progress_due(began):
                return {}, sorted(left)
            self._pause(
                False, deadline if began is None else min(deadline, self.monotonic() + self._until_progress(began))
            )
        return {
            n: f"not Ready in Kubernetes {self.options.node_ready_timeout:g}s after its maintenance"
            if n in present
            else "the Node object is gone"
            for n in sorted(left)
        }, []

    def _release(self, run: core.RunRecord, nodes: Sequence[str]) -> list[str]:
        """Give the interrupted nodes' requests back and wait until they are gone (the nodes uncordoned); record
        them."""
        if not nodes:
            return []
        self._give_back(nodes)
        now = self.clock()
        for node in nodes:
            core.mark_released(run, node, now)
        return list(nodes)

    def _give_back(self, nodes: Sequence[str]) -> None:
        """Give the nodes' requests back and wait until they are gone (the nodes uncordoned); a plan does not
        wait."""
        actions = self.requests.absent(nodes)
        if self.plan:
            return
        if not self._wait_given_back(actions):
            left = [self.requests.explain(a) for a in actions if not is_given_back(a)]
            timeout = self.options.release_timeout
            raise RequestError(f"Released requests not gone after {timeout:g}s: " + "; ".join(left))
        self._warn_kept(actions)

    def _wait_given_back(self, actions: Sequence[Action]) -> bool:
        """Wait (release_timeout at most) until the requests of ``actions`` are given back; whether they are."""
        return self.requests.wait(
            actions, is_given_back, self.options.release_timeout, self, self.options.interval, bell=self._wait_bell()
        )

    def _warn_kept(self, actions: Sequence[Action]) -> None:
        """A warning for each request given back that the engine keeps for the requestors that joined it: the run
        is done with the node, which stays in maintenance until they leave."""
        for action in actions:
            if not is_kept_for_others(action):
                continue
            others = ", ".join((action.obj or {}).get("spec", {}).get("additionalRequestors") or [])
            warning = (
                f"{action.node}: this run gave NodeMaintenance {action.namespace}/{action.name} back, but it stays, "
                f"and the node in maintenance, for the requestors that joined it ({others}) until they leave it"
            )
            if warning not in self.requests.warnings:
                self.requests.warnings.append(warning)

    def _update_request(self, node: str, mutate: Callable[[dict[str, Any]], bool], status: bool) -> None:
        for _attempt in range(5):
            _phases, objects = self._phases([node])
            obj = objects.get(node)
            if obj is None:
                return
            if not mutate(obj):
                return
            try:
                self.client.replace(NODE_MAINTENANCES, obj, subresource="status" if status else None)
                return
            except Conflict:
                continue
        raise RequestError(f"The request of {node} kept changing; its RequestorFailed condition was not written.")

    def _mark_failed_request(self, node: str, message: str) -> None:
        """Set RequestorFailed=True on the node's request and keep the garbage collector away from it, so the
        node stays cordoned for a person."""
        now = lc.rfc3339(self.clock())

        def keep(obj: dict[str, Any]) -> bool:
            annotations = obj["metadata"].setdefault("annotations", {}) or {}
            obj["metadata"]["annotations"] = annotations
            if annotations.get(lc.GC_IGNORE_ANNOTATION) == "true":
                return False
            annotations[lc.GC_IGNORE_ANNOTATION] = "true"
            return True

        def fail(obj: dict[str, Any]) -> bool:
            return _set_condition(obj, "True", FAILED_REASON, message[:1024], now)

        self._update_request(node, keep, status=False)
        self._update_request(node, fail, status=True)

    def _clear_failed(self, nodes: Sequence[str]) -> None:
        now = lc.rfc3339(self.clock())
        for node in nodes:
            self._update_request(node, lambda obj: _set_condition(obj, "False", "Retried", "", now), status=True)


def start_changed(plan: core.StartPlan, actions: Sequence[Action]) -> bool:
    """Whether a start step changes (or, in check mode, would change) anything."""
    return bool(plan.added or plan.release or plan.fail or plan.rerun) or any(a.action != UNCHANGED for a in actions)


def _set_condition(obj: dict[str, Any], status: str, reason: str, message: str, now: str) -> bool:
    """Set the RequestorFailed condition; False when it already says so (status and reason: a node that failed
    again keeps its first message), and a False one is only written over a condition that is there."""
    conditions = obj.setdefault("status", {}).setdefault("conditions", []) or []
    obj["status"]["conditions"] = conditions
    current = find_condition(conditions, lc.CONDITION_REQUESTOR_FAILED)
    if current is None and status == "False":
        return False
    if current is not None and current.get("status") == status and current.get("reason") == reason:
        return False
    return set_condition(conditions, lc.CONDITION_REQUESTOR_FAILED, status, reason, message, now)


def _named(nodes: Sequence[str]) -> str:
    """``3 node(s) (a, b, c)``, naming at most NAMES_SHOWN."""
    shown = ", ".join(nodes[:NAMES_SHOWN]) + (", ..." if len(nodes) > NAMES_SHOWN else "")
    return f"{len(nodes)} node(s)" + (f" ({shown})" if nodes else "")
