# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Asking for and giving back node maintenance as a requestor: the I/O behind ``node_maintenance``.

A requestor owns the NodeMaintenance it created (``spec.requestorID``), or joins one that another
requestor created for the node by adding itself to ``additionalRequestors`` (as NVIDIA's
k8s-operator-libs does). Giving back: the owner deletes its object (the reconciler holds the release while
other requestors remain); a joined requestor removes itself from the list. Every update is a conditional
replace, retried after a re-read on Conflict.
"""

from __future__ import annotations

import contextlib
import copy
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..core.maintenance import lifecycle as lc
from ..core.maintenance import requestspec
from ..core.maintenance.scheduler import FINALIZER
from ..core.node import rfc3339
from ..core.node.errors import NodeopsError
from ..k8s.client import EVENTS, NODE_MAINTENANCES, NODES, Client
from ..k8s.errors import Conflict, K8sError, NotFound, UIDMismatch
from .maintenance import PassReport, Reconciler, summary

MAX_CONFLICTS = 5

CREATED = "created"
JOINED = "joined"
UPDATED = "updated"
UNCHANGED = "unchanged"
DELETED = "deleted"
DELETING = "deleting"  # deleted before this run, not gone yet (no change)
LEFT = "left"
ABSENT = "absent"


def nm_spec(p: dict[str, Any]) -> dict[str, Any]:
    """The NodeMaintenance spec fields from the request options (module_utils/request_options.py), with the CRD's
    names, without the sub-fields whose zero value means the same as leaving them out (as the NVIDIA Maintenance
    Operator writes them back)."""
    spec: dict[str, Any] = {"cordon": p["cordon"]}
    wait = p["wait_for_pod_completion"]
    if wait is not None:
        if wait["timeout_seconds"] < 0:
            raise ValueError("wait_for_pod_completion.timeout_seconds must be 0 or more.")
        spec["waitForPodCompletion"] = {"podSelector": wait["pod_selector"], "timeoutSeconds": wait["timeout_seconds"]}
    drain = p["drain_spec"]
    if drain is not None:
        if drain["timeout_seconds"] < 0:
            raise ValueError("drain_spec.timeout_seconds must be 0 or more.")
        out: dict[str, Any] = {
            "force": drain["force"],
            "deleteEmptyDir": drain["delete_emptydir_data"],
            "podSelector": drain["pod_selector"],
            "timeoutSeconds": drain["timeout_seconds"],
        }
        if drain["pod_eviction_filters"]:
            for index, entry in enumerate(drain["pod_eviction_filters"]):
                try:
                    re.compile(entry["by_resource_name_regex"])
                except re.error as exc:
                    raise ValueError(
                        f"drain_spec.pod_eviction_filters[{index}].by_resource_name_regex is not a valid "
                        f"regular expression: {exc}."
                    ) from None
            out["podEvictionFilters"] = [
                {"byResourceNameRegex": e["by_resource_name_regex"]} for e in drain["pod_eviction_filters"]
            ]
        spec["drainSpec"] = out
    return requestspec.canonical(spec)


def for_engine(spec: dict[str, Any], engine: str) -> tuple[dict[str, Any], list[str]]:
    """The request to write for ``engine``, and what it changes in the request asked for. The NVIDIA Maintenance
    Operator serves ``cordon: false`` and a drain timeout of 0 with the CRD's defaults: the request says so from
    the start, and a sentence for each goes to the task's warnings."""
    if engine != "operator":
        return spec, []
    return requestspec.operator_stores(spec)


class RequestError(NodeopsError):
    def __init__(self, msg: str, result: dict[str, Any] | None = None) -> None:
        super().__init__(msg)
        self.msg = msg
        self.result = result or {}


@dataclass
class Action:
    node: str
    action: str
    namespace: str
    name: str
    obj: dict[str, Any] | None = None
    before: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"node": self.node, "action": self.action, "name": f"{self.namespace}/{self.name}"}
        if self.obj is not None:
            s = summary(self.obj)
            out.update(phase=s["phase"], conditions=s["conditions"], requestor=s["requestor"])
            out["additional_requestors"] = list((self.obj.get("spec") or {}).get("additionalRequestors") or [])
            out["drain"] = (self.obj.get("status") or {}).get("drain")
        else:
            out.update(phase=None, conditions=[])
        return out


@dataclass
class RequestSpec:
    requestor: str
    namespace: str
    name_prefix: str
    spec: dict[str, Any] = field(default_factory=dict)  # cordon, waitForPodCompletion, drainSpec

    def object_name(self, node: str) -> str:
        return requestspec.request_name(self.name_prefix, node)


def _rv(obj: Mapping[str, Any]) -> int:
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


class Passes(Protocol):
    """What runs the passes of a wait: a Reconciler, or a rolling run that runs one only when no driver does."""

    def run_pass(self) -> PassReport | None: ...


class Bell(Protocol):
    """Says when a wait should look at its requests again (plugin_utils/doorbell.py): rung for a node by the
    process that runs the passes when one changed that node's request, with a heartbeat while it holds the Lease.
    Only when to look: what a wait decides, it decides on what it reads."""

    def ring(self, node: str) -> None: ...

    def beating(self, holding: Callable[[], bool]) -> AbstractContextManager[None]: ...

    def live(self) -> bool: ...

    def state(self, nodes: Sequence[str]) -> tuple[int, ...]: ...

    def wait(self, nodes: Sequence[str], state: tuple[int, ...], seconds: float) -> bool: ...


# seconds a wait on a live bell goes without looking when it does not ring (a ring lost, a change made by another)
BELL_LOOK = 5.0
REFRESH_BY_LIST = 10  # more requests than this to look at again: one list instead of a GET each


def _by_node(items: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The requests listed, by node (in list order): looked up once per node, so that a step over a wave of a
    large fleet costs the size of the list plus the wave, not their product."""
    out: dict[str, list[dict[str, Any]]] = {}
    for obj in items:
        out.setdefault(str((obj.get("spec") or {}).get("nodeName") or ""), []).append(obj)
    return out


def _for_node(index: Mapping[str, Sequence[dict[str, Any]]], node: str, deleting: bool = False) -> list[dict[str, Any]]:
    """The requests for ``node`` (``index`` from :func:`_by_node`); those being deleted only with ``deleting`` (a
    joined requestor may still leave)."""
    return [o for o in index.get(node, ()) if deleting or not (o.get("metadata") or {}).get("deletionTimestamp")]


class Requests:
    def __init__(self, client: Client, request: RequestSpec, check_mode: bool = False, workers: int = 1) -> None:
        self.client = client
        self.request = request
        self.check_mode = check_mode
        #: requests deleted at once by absent() (a wave's release): the API calls, not the decisions, in parallel
        self.workers = workers
        #: the warnings of the reconcile passes run while waiting, each once
        self.warnings: list[str] = []

    def note(self, report: PassReport) -> None:
        """Keep the warnings of a reconcile pass (each once) for the task's result. A pass that found the Lease
        held by another (a rolling run beside this one, a scheduled reconcile) waited its turn: no warning."""
        if report.busy:
            return
        self.warnings.extend(w for w in dict.fromkeys(report.warnings) if w not in self.warnings)

    def _list(self) -> list[dict[str, Any]]:
        items = self.client.list(NODE_MAINTENANCES, namespace=self.request.namespace)["items"]
        for obj in items:
            obj.setdefault("apiVersion", NODE_MAINTENANCES.api_version)
            obj.setdefault("kind", NODE_MAINTENANCES.kind)
        return items

    def unknown_nodes(self, nodes: Sequence[str]) -> list[str]:
        """The ``nodes`` that no Node object has."""
        present = self.node_objects(nodes)
        return [n for n in nodes if n not in present]

    def node_objects(self, nodes: Iterable[str]) -> dict[str, dict[str, Any]]:
        """The Node objects of ``nodes`` that exist, by name: a GET each for a few, else one list."""
        wanted = list(dict.fromkeys(nodes))
        if len(wanted) > REFRESH_BY_LIST:
            listed = {n["metadata"]["name"]: n for n in self.client.list(NODES)["items"]}
            return {n: listed[n] for n in wanted if n in listed}
        present = {}
        for node in wanted:
            with contextlib.suppress(NotFound):
                present[node] = self.client.get(NODES, node)
        return present

    def check_nodes(self, nodes: Sequence[str]) -> None:
        present = {n["metadata"]["name"] for n in self.client.list(NODES)["items"]}
        missing = [n for n in nodes if n not in present]
        if missing:
            raise RequestError(
                f"Node(s) {', '.join(missing)} not found; nothing was changed. "
                "Check the names with 'kubectl get nodes'."
            )

    def _delete_own(self, obj: dict[str, Any]) -> bool:
        """Delete the request ``obj`` listed as this requestor's, only while the object of its name is that one
        (UID precondition): one of that name made since, another requestor's, is never deleted on a guess. If
        it is this requestor's again (read afresh), it goes too. False when nothing was deleted: gone meanwhile,
        or another requestor's now."""
        for _attempt in range(MAX_CONFLICTS):
            meta = obj["metadata"]
            try:
                self.client.delete(NODE_MAINTENANCES, meta["name"], meta["namespace"], uid=meta.get("uid"))
                return True
            except NotFound:
                return False
            except UIDMismatch:
                try:
                    obj = self.client.get(NODE_MAINTENANCES, meta["name"], meta["namespace"])
                except NotFound:
                    return False
                spec = obj.get("spec") or {}
                if spec.get("requestorID") != self.request.requestor:
                    return False
                if obj["metadata"].get("deletionTimestamp"):
                    return True  # ours again, and already being deleted
        raise Conflict(
            f"NodeMaintenance {obj['metadata']['namespace']}/{obj['metadata']['name']} was replaced"
            f" {MAX_CONFLICTS} times while it was being deleted; run again.",
            409,
            None,
        )

    def _update(self, obj: dict[str, Any], mutate: Callable[[dict[str, Any]], bool]) -> tuple[dict[str, Any], bool]:
        """Apply ``mutate`` (True when it changed the body) and replace conditionally, re-reading on Conflict."""
        meta = obj["metadata"]
        for _attempt in range(MAX_CONFLICTS):
            body = copy.deepcopy(obj)
            if not mutate(body):
                return obj, False
            if self.check_mode:
                return body, True
            try:
                new = self.client.replace(NODE_MAINTENANCES, body)
                new.setdefault("apiVersion", NODE_MAINTENANCES.api_version)
                new.setdefault("kind", NODE_MAINTENANCES.kind)
                return new, True
            except Conflict:
                obj = self.client.get(NODE_MAINTENANCES, meta["name"], meta["namespace"])
        raise RequestError(f"NodeMaintenance {meta['namespace']}/{meta['name']} kept changing; try again.")

    def present(self, nodes: Sequence[str], checked: bool = False) -> list[Action]:
        """Make sure each node has a request of this requestor: its own (its spec brought in line), one it joined,
        one it joined that is kept for it while its owner deletes it, or a new one. ``checked``: the caller has
        just found the nodes (no Node list)."""
        if not checked:
            self.check_nodes(nodes)
        listed = self._list()
        items = _by_node(listed)
        taken = {o["metadata"]["name"] for o in listed}
        actions: list[Action] = []
        lost: set[str] = set()  # names whose creation got no answer and was refused when tried again
        for node in nodes:
            for _attempt in range(MAX_CONFLICTS):
                try:
                    action = self._present_one(node, items, taken, lost)
                    if action.action == UNCHANGED and action.name in lost and action.before is not None:
                        # the first attempt made it: the request was created by this task
                        action = Action(node, CREATED, action.namespace, action.name, action.obj)
                    actions.append(action)
                    break
                except Conflict:  # a request of the new one's name was made meanwhile: look again
                    listed = self._list()
                    items = _by_node(listed)
                    taken = {o["metadata"]["name"] for o in listed}
            else:
                raise RequestError(f"The request for {node} could not be made: its name kept being taken; try again.")
        return actions

    def _present_one(
        self, node: str, items: Mapping[str, Sequence[dict[str, Any]]], taken: set[str], lost: set[str]
    ) -> Action:
        req = self.request
        live = _for_node(items, node)
        mine = [o for o in live if o["spec"].get("requestorID") == req.requestor]
        others = [o for o in live if o["spec"].get("requestorID") != req.requestor]
        if mine:
            obj = mine[0]

            def set_spec(body: dict[str, Any]) -> bool:
                spec = body["spec"]
                changed = False
                for key, value in req.spec.items():
                    if not requestspec.same_request(spec, req.spec, key):
                        spec[key] = value
                        changed = True
                return changed

            before = copy.deepcopy(obj)
            obj, changed = self._update(obj, set_spec)
            return Action(node, UPDATED if changed else UNCHANGED, req.namespace, obj["metadata"]["name"], obj, before)
        held = [o for o in _for_node(items, node, True) if lc.held_for(o, req.requestor)]
        if held:  # its owner deleted it, and the engine keeps it (the node in maintenance) for this requestor
            obj = held[0]
            return Action(node, UNCHANGED, req.namespace, obj["metadata"]["name"], obj, copy.deepcopy(obj))
        if others:
            obj = others[0]

            def join(body: dict[str, Any]) -> bool:
                extra = list(body["spec"].get("additionalRequestors") or [])
                if req.requestor in extra:
                    return False
                body["spec"]["additionalRequestors"] = [*extra, req.requestor]
                return True

            before = copy.deepcopy(obj)
            obj, changed = self._update(obj, join)
            return Action(node, JOINED if changed else UNCHANGED, req.namespace, obj["metadata"]["name"], obj, before)
        name = requestspec.free_request_name(req.name_prefix, node, taken)
        body: dict[str, Any] = {
            "apiVersion": NODE_MAINTENANCES.api_version,
            "kind": NODE_MAINTENANCES.kind,
            "metadata": {"name": name, "namespace": req.namespace},
            "spec": {"requestorID": req.requestor, "nodeName": node, **req.spec},
        }
        if self.check_mode:
            obj = body
        else:
            try:
                obj = self.client.create(NODE_MAINTENANCES, body, req.namespace)
            except Conflict as exc:
                if exc.after_lost_answer:
                    lost.add(name)
                raise
            obj.setdefault("apiVersion", NODE_MAINTENANCES.api_version)
            obj.setdefault("kind", NODE_MAINTENANCES.kind)
        taken.add(name)
        return Action(node, CREATED, req.namespace, name, obj)

    def absent(self, nodes: Sequence[str]) -> list[Action]:
        items = _by_node(self._list())
        req = self.request
        plan: list[tuple[str, list[dict[str, Any]], list[dict[str, Any]]]] = []
        for node in nodes:
            mine = [o for o in _for_node(items, node, True) if o["spec"].get("requestorID") == req.requestor]
            joined = [
                o
                for o in _for_node(items, node, True)
                if req.requestor in (o["spec"].get("additionalRequestors") or [])
                and o["spec"].get("requestorID") != req.requestor
            ]
            plan.append((node, mine, joined))
        doomed = [o for _node, mine, _joined in plan for o in mine if not o["metadata"].get("deletionTimestamp")]
        deleted = (
            dict(zip(map(id, doomed), self._each(self._delete_own, doomed), strict=True)) if not self.check_mode else {}
        )
        actions: list[Action] = []
        for node, mine, joined in plan:
            if not mine and not joined:
                actions.append(Action(node, ABSENT, req.namespace, req.object_name(node)))
            for obj in mine:
                meta = obj["metadata"]
                if meta.get("deletionTimestamp"):
                    actions.append(Action(node, DELETING, req.namespace, meta["name"], obj))
                    continue
                if not self.check_mode and not deleted[id(obj)]:
                    # gone meanwhile, or the object of its name is another requestor's now: nothing of ours left
                    actions.append(Action(node, ABSENT, req.namespace, meta["name"]))
                    continue
                actions.append(Action(node, DELETED, req.namespace, meta["name"], obj))
            for obj in joined:

                def leave(body: dict[str, Any]) -> bool:
                    extra = list(body["spec"].get("additionalRequestors") or [])
                    if req.requestor not in extra:
                        return False
                    body["spec"]["additionalRequestors"] = [r for r in extra if r != req.requestor]
                    return True

                before = copy.deepcopy(obj)
                new, changed = self._update(obj, leave)
                actions.append(
                    Action(node, LEFT if changed else UNCHANGED, req.namespace, new["metadata"]["name"], new, before)
                )
        return actions

    def _each(self, call: Callable[[dict[str, Any]], bool], objects: Sequence[dict[str, Any]]) -> list[bool]:
        """``call`` on each object, up to ``workers`` at once; the results in order (the first error raises)."""
        if self.workers <= 1 or len(objects) <= 1:
            return [call(o) for o in objects]
        with ThreadPoolExecutor(max_workers=min(self.workers, len(objects))) as pool:
            return list(pool.map(call, objects))

    # -- waiting ---------------------------------------------------------------------------------
    def explain(self, action: Action) -> str:
        """:func:`why_not_ready`, with the last EvictionBlocked event when the status does not say what blocks
        the drain (a CRD without those fields, as the NVIDIA operator's)."""
        obj = action.obj
        blocked = ""
        drain = ((obj or {}).get("status") or {}).get("drain") or {}
        draining = obj is not None and lc.NodeMaintenanceView.from_dict(obj).phase == lc.PHASE_DRAINING
        if obj is not None and draining and not any(drain.get(key) for key in lc.BLOCKING_FIELDS):
            annotations = (obj.get("metadata") or {}).get("annotations") or {}
            started = rfc3339.to_epoch(annotations.get(lc.DRAIN_START_ANNOTATION))
            blocked = self.last_event(obj, lc.EVENT_EVICTION_BLOCKED, since=started)
        return why_not_ready(action, blocked)

    def last_event(self, obj: Mapping[str, Any], reason: str, since: float | None = None) -> str:
        """The message of the latest event ``reason`` about ``obj`` ("" when none, or when events cannot be read);
        with ``since`` (epoch seconds) only an event last seen then or later: one of the current drain attempt,
        not a blocker that has gone since."""
        meta = obj.get("metadata") or {}
        selector = f"involvedObject.name={meta.get('name')},reason={reason}"
        if meta.get("uid"):
            selector += f",involvedObject.uid={meta['uid']}"
        try:
            events = self.client.list(EVENTS, namespace=meta.get("namespace"), field_selector=selector)["items"]
        except K8sError:
            return ""
        if since is not None:
            # an event's time has whole seconds: one of the attempt's first second counts
            events = [
                e for e in events if (rfc3339.to_epoch(e.get("lastTimestamp") or e.get("eventTime")) or 0) >= int(since)
            ]
        if not events:
            return ""
        latest = max(events, key=lambda e: (e.get("lastTimestamp") or e.get("eventTime") or "", _rv(e)))
        return str(latest.get("message") or "")

    def refresh(self, actions: Sequence[Action], report: PassReport | None = None) -> None:
        """Each action's object as it is now (None once gone): a GET each, or for more than :data:`REFRESH_BY_LIST`
        of them one list per namespace (a wave of a large fleet, released at once). With ``report``, a reconcile pass
        that went through and covers their namespaces, as it left them: only for a wait for them to go (an object
        the pass saw go is gone; one it shows as older than it is is looked at again after the next pass)."""
        live = [a for a in actions if a.obj is not None]
        if report is not None and report.objects is not None:
            covered = report.namespace
            if all(covered is None or a.namespace == covered for a in live):
                after = {(o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in report.objects}
                for action in live:
                    action.obj = after.get((action.namespace, action.name))
                return
        if len(live) > REFRESH_BY_LIST:
            current: dict[tuple[str, str], dict[str, Any]] = {}
            for namespace in sorted({a.namespace for a in live}):
                for obj in self.client.list(NODE_MAINTENANCES, namespace=namespace)["items"]:
                    obj.setdefault("apiVersion", NODE_MAINTENANCES.api_version)
                    obj.setdefault("kind", NODE_MAINTENANCES.kind)
                    current[(namespace, obj["metadata"]["name"])] = obj
            for action in live:
                action.obj = current.get((action.namespace, action.name))
            return
        for action in live:
            try:
                action.obj = self.client.get(NODE_MAINTENANCES, action.name, action.namespace)
            except NotFound:
                action.obj = None

    def wait(
        self,
        actions: Sequence[Action],
        until: Callable[[Action], bool],
        timeout: float,
        reconciler: Reconciler | Passes | None,
        interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        bell: Bell | None = None,
    ) -> bool:
        """Run passes (or only look, without a reconciler, or when its ``run_pass`` runs none) until ``until``
        holds for every action. With a ``bell`` that is live, a look that finds them not there yet is followed by
        the next when it rings for one of their nodes, or after BELL_LOOK seconds, instead of after ``interval``."""
        deadline = clock() + timeout
        waiter = threading.Event()
        nodes = [a.node for a in actions]
        while True:
            rung = bell.state(nodes) if bell is not None and bell.live() else None
            report = None if reconciler is None else reconciler.run_pass()
            changed = report is not None and report.changed
            if report is not None:
                self.note(report)
            self.refresh(actions, report if until in (is_gone, is_given_back) else None)
            if all(until(a) for a in actions):
                return True
            remaining = deadline - clock()
            if remaining <= 0:
                return False
            if changed:
                continue
            if rung is not None and bell is not None and bell.live():
                bell.wait(nodes, rung, min(BELL_LOOK, remaining))
            else:
                waiter.wait(min(interval, remaining))


def is_ready(action: Action) -> bool:
    if action.action in (ABSENT, DELETED, DELETING, LEFT):
        return True
    return action.obj is not None and lc.NodeMaintenanceView.from_dict(action.obj).phase == lc.PHASE_READY


def is_gone(action: Action) -> bool:
    return action.action not in (DELETED, DELETING) or action.obj is None


def is_given_back(action: Action) -> bool:
    """:func:`is_gone`; or being deleted and either kept by the engine for the requestors that joined it (the node
    stays in maintenance for them, no longer for this requestor) or released already (without the maintenance
    finalizer: only another finalizer keeps the object, the node is free). Done with, for this requestor."""
    if is_gone(action):
        return True
    obj = action.obj or {}
    return FINALIZER not in ((obj.get("metadata") or {}).get("finalizers") or []) or lc.held(
        lc.NodeMaintenanceView.from_dict(obj)
    )


def is_kept_for_others(action: Action) -> bool:
    """Given back, and kept by the engine for the requestors that joined it."""
    return not is_gone(action) and lc.held(lc.NodeMaintenanceView.from_dict(action.obj or {}))


def why_not_ready(action: Action, blocked: str = "") -> str:
    """What the request of ``action`` waits for; ``blocked``: the last EvictionBlocked event's message, said when
    the status does not name what blocks the drain (the installed CRD dropped it)."""
    if action.obj is None:
        return f"{action.namespace}/{action.name}: gone"
    obj: Mapping[str, Any] = action.obj
    view = lc.NodeMaintenanceView.from_dict(obj)
    text = f"{view.key} on {view.node_name}: {view.phase or 'new'}"
    drain = (obj.get("status") or {}).get("drain") or {}
    if drain.get("blockedByRules"):
        text += f" ({drain['blockedByRules']})"
    elif drain.get("blockingPods"):
        text += (
            f" (eviction of {', '.join(drain['blockingPods'])} refused by PodDisruptionBudget "
            f"{', '.join(drain.get('blockingPDBs') or []) or '(unknown)'})"
        )
    elif blocked and view.phase == lc.PHASE_DRAINING:
        text += f" ({blocked})"
    elif view.phase == lc.PHASE_WAIT and (obj.get("status") or {}).get("waitForCompletion"):
        text += f" (waiting for {', '.join(obj['status']['waitForCompletion'])})"
    if view.deleting:
        text += " (being deleted"
        if view.additional_requestors:
            text += ", held for " + ", ".join(view.additional_requestors)
        text += ")"
    return text
