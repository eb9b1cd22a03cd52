"""The drain engine against a fake client: ordering of cordon / evict / wait, retries, deadlines, progress."""

from __future__ import annotations

import contextlib
import copy
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.maintenance import drain as core
from ansible_collections.nodeops.maintenance.plugins.module_utils.engines.drain import (
    DrainError,
    DrainOptions,
    DrainPass,
    WaitForCompletion,
    drain,
    pool_size_for,
    wait_for_completion,
)
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s import errors
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.client import (
    DAEMONSETS,
    NODE_MAINTENANCES,
    NODES,
    PDBS,
    PODS,
)

NODE = "n1"


def pod(
    name: str, owner: str | None = "ReplicaSet", labels: dict[str, str] | None = None, node: str = NODE, **extra: Any
) -> dict:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": f"u-{name}", "labels": labels or {"app": "web"}}
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": "x", "controller": True}]
    meta.update(extra)
    return {"metadata": meta, "spec": {"nodeName": node, "containers": [{"name": "c"}]}, "status": {"phase": "Running"}}


def replacement(name: str) -> dict:
    """A new pod under ``name`` (as a StatefulSet re-creates it), on another node."""
    new = pod(name, owner="StatefulSet", node="n2")
    new["metadata"]["uid"] = f"u-new-{name}"
    return new


class FakeWatch:
    def __init__(self, events: queue.Queue[Any]) -> None:
        self.events = events
        self.stopped = threading.Event()

    def stop(self) -> None:
        self.stopped.set()

    def __iter__(self) -> Iterator[dict[str, Any]]:
        while not self.stopped.is_set():
            try:
                event = self.events.get(timeout=0.02)
            except queue.Empty:
                continue
            if isinstance(event, Exception):
                raise event
            yield event


class FakeClient:
    """Pods on one node; an accepted eviction/delete makes the pod go (a DELETED watch event), like kwok.

    Evictions and deletions act on the pod that has the name now, as the API server does; one that carries a
    UID is refused with 409 when that pod has another UID (the preconditions), one without acts on whatever pod
    has the name. ``sent`` records (verb, name, uid) of every eviction and deletion.
    """

    def retrying_until(self, until: float | None) -> contextlib.AbstractContextManager[None]:
        """The real client retries transient failures until ``until``; this one has none."""
        return contextlib.nullcontext()

    def __init__(self, pods: list[dict], cordoned: bool = False) -> None:
        self.pods = {p["metadata"]["uid"]: p for p in pods}
        self.node: dict[str, Any] = {"metadata": {"name": NODE, "resourceVersion": "1"}, "spec": {}}
        if cordoned:
            self.set_unschedulable(True, "kubectl-cordon")
        self.calls: list[tuple[Any, ...]] = []
        self.lock = threading.Lock()
        self.events: queue.Queue[Any] = queue.Queue()
        self.refuse: dict[str, int] = {}  # pod name -> number of 429s before it is accepted (-1: always)
        self.contend: dict[str, int] = {}  # pod name -> number of 409s on its budget before it is accepted (-1: always)
        self.fail: dict[str, errors.K8sError] = {}
        self.vanish = True  # accepted evictions remove the pod
        self.daemonsets: set[tuple[str, str]] = set()
        self.pdbs: list[dict] = []
        self.node_maintenances: list[dict] = []
        self.watch_error: Exception | None = None
        self.sent: list[tuple[str, str, str | None]] = []
        self.replace_on_call: dict[str, dict] = {}  # pod name -> the pod that replaces it as the call arrives

    def get(self, res: Any, name: str, namespace: str | None = None) -> dict:
        self.calls.append(("get", res.kind, name))
        if res is NODES:
            if name != NODE:
                raise errors.NotFound("no", 404, {})
            return self.node
        if res is DAEMONSETS:
            if (namespace, name) in self.daemonsets:
                return {}
            raise errors.NotFound("no", 404, {})
        if res is PODS:
            with self.lock:
                found = [p for p in self.pods.values() if p["metadata"]["name"] == name]
            if not found:
                raise errors.NotFound("no", 404, {})
            return found[0]
        raise AssertionError(res)

    def list(self, res: Any, namespace: str | None = None, label_selector: str | None = None, **kw: Any) -> dict:
        self.calls.append(("list", res.kind, label_selector))
        if res is PDBS:
            return {"items": self.pdbs}
        if res is NODE_MAINTENANCES:
            return {"items": self.node_maintenances}
        assert res is PODS and kw["field_selector"] == f"spec.nodeName={NODE}"
        with self.lock:
            items = [p for p in self.pods.values() if p["spec"]["nodeName"] == NODE]
        if label_selector:
            key, value = label_selector.split("=")
            items = [p for p in items if p["metadata"]["labels"].get(key) == value]
        return {"metadata": {"resourceVersion": "100"}, "items": items}

    def patch(
        self, res: Any, name: str, body: dict, dry_run: bool = False, field_manager: str | None = None, **kw: Any
    ) -> dict:
        self.calls.append(("patch", name, body["spec"]["unschedulable"], dry_run))
        version = (body.get("metadata") or {}).get("resourceVersion")
        if version is not None and version != self.node["metadata"]["resourceVersion"]:
            raise errors.Conflict("the object has been modified", 409, {})
        if not dry_run:
            self.set_unschedulable(body["spec"]["unschedulable"], field_manager or "nodeops.maintenance")
        return copy.deepcopy(self.node)

    def set_unschedulable(self, value: bool | None, manager: str) -> None:
        """Write the node's spec.unschedulable as ``manager``: the field is owned by whoever last changed it,
        and by nobody once cleared (the API server's managedFields)."""
        meta = self.node["metadata"]
        meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)
        self.node["spec"]["unschedulable"] = value
        owned = {"fieldsV1": {"f:spec": {"f:unschedulable": {}}}}
        meta["managedFields"] = [{"manager": manager, **owned}] if value else []

    def _arrive(self, verb: str, name: str, uid: str | None) -> None:
        self.sent.append((verb, name, uid))
        new = self.replace_on_call.pop(name, None)
        if new is not None:  # deleted by someone else and re-created elsewhere just before this call
            with self.lock:
                old = self.pods.pop(f"u-{name}")
                self.pods[new["metadata"]["uid"]] = new
            self.events.put({"type": "DELETED", "object": old})

    def _remove(self, name: str, namespace: str, uid: str | None) -> None:
        with self.lock:
            current = next((u for u, p in self.pods.items() if p["metadata"]["name"] == name), None)
            if current is None:
                raise errors.NotFound("gone", 404, {})
            if uid is not None and uid != current:
                message = f"Precondition failed: UID in precondition: {uid}, UID in object meta: {current}"
                raise errors.UIDMismatch(message, 409, {"message": message})
            if self.vanish:
                self.events.put({"type": "DELETED", "object": self.pods.pop(current)})

    # grace_period and dry_run may come by position, as older callers sent them
    def evict(
        self,
        name: str,
        namespace: str,
        grace_period: int | None = None,
        dry_run: bool = False,
        *,
        uid: str | None = None,
    ) -> dict:
        self.calls.append(("evict", name, grace_period, dry_run))
        self._arrive("evict", name, uid)
        if name in self.fail:
            raise self.fail[name]
        left = self.refuse.get(name, 0)
        if left:
            self.refuse[name] = left - 1 if left > 0 else -1
            body = {"details": {"causes": [{"message": "The disruption budget web-pdb needs 1 healthy pods"}]}}
            raise errors.TooManyRequests("refused", 429, body)
        left = self.contend.get(name, 0)
        if left and not dry_run:
            self.contend[name] = left - 1 if left > 0 else -1
            message = 'Operation cannot be fulfilled on poddisruptionbudgets.policy "web-pdb": the object was modified'
            raise errors.Conflict(f"Conflict for evict pod {namespace}/{name}: {message}", 409, {"message": message})
        if not dry_run:
            self._remove(name, namespace, uid)
        return {}

    def delete_pod(
        self,
        name: str,
        namespace: str,
        grace_period: int | None = None,
        dry_run: bool = False,
        *,
        uid: str | None = None,
    ) -> dict:
        self.calls.append(("delete", name, grace_period, dry_run))
        self._arrive("delete", name, uid)
        if not dry_run:
            self._remove(name, namespace, uid)
        return {}

    def watch(self, res: Any, **kw: Any) -> FakeWatch:
        self.calls.append(("watch", kw["resource_version"], kw["field_selector"]))
        if self.watch_error is not None:
            self.events.put(self.watch_error)
        return FakeWatch(self.events)

    def evictions(self) -> list[str]:
        return sorted(c[1] for c in self.calls if c[0] == "evict")

    def after_eviction(self, action: Callable[[str], None]) -> None:
        """Call ``action(pod name)`` once the API accepted (or refused) each eviction: for what happens "later"."""
        original = self.evict

        def evict(name: str, namespace: str, grace_period: int | None = None, dry_run: bool = False, **kw: Any) -> dict:
            try:
                return original(name, namespace, grace_period, dry_run, **kw)
            finally:
                action(name)

        self.evict = evict  # type: ignore[method-assign]


@pytest.fixture
def backoffs(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The waits the workers of every DrainPass ask for (the product's own retry decisions, not wall time)."""
    waits: list[float] = []
    original = DrainPass._pause

    def pause(self: DrainPass, target: Any, delay: float) -> None:
        waits.append(delay)
        original(self, target, delay)

    monkeypatch.setattr(DrainPass, "_pause", pause)
    return waits


def test_cordons_first_evicts_in_parallel_and_waits_for_the_pods() -> None:
    client = FakeClient([pod(f"web-{i}") for i in range(20)])
    progress: list[dict[str, Any]] = []
    result = drain(client, NODE, DrainOptions(concurrency=8), on_progress=lambda p: progress.append(p.as_status()))
    kinds = [c[0] for c in client.calls]
    assert kinds[:3] == ["get", "patch", "list"], "cordon before listing the pods"
    assert client.calls[1] == ("patch", NODE, True, False)
    assert kinds.count("list") == 1, "the pods are listed once"
    assert ("watch", "100", f"spec.nodeName={NODE}") in client.calls, "the watch starts at the listing's version"
    assert len(client.evictions()) == 20
    assert result["changed"] is True and result["was_cordoned"] is False and result["cordoned"] is True
    assert result["totals"]["evicted"] == 20
    assert result["progress"] == {"totalPods": 20, "evictionPods": 20, "drainProgress": 100, "waitForEviction": []}
    assert progress[0]["drainProgress"] == 0 and progress[-1]["drainProgress"] == 100
    assert [p["drainProgress"] for p in progress] == sorted(p["drainProgress"] for p in progress)


def test_grace_period_zero_is_sent_and_unset_is_not() -> None:
    client = FakeClient([pod("a")])
    drain(client, NODE, DrainOptions(grace_period=0))
    assert ("evict", "a", 0, False) in client.calls
    client = FakeClient([pod("a")])
    drain(client, NODE, DrainOptions())
    assert ("evict", "a", None, False) in client.calls


def test_rule_block_fails_before_any_eviction_and_undoes_the_cordon() -> None:
    client = FakeClient([pod("web"), pod("bare", owner=None), pod("orphan", owner="DaemonSet")])
    with pytest.raises(DrainError) as err:
        drain(client, NODE, DrainOptions())
    assert "ns/bare has no controller" in err.value.msg
    assert "ns/orphan belongs to a DaemonSet that no longer exists" in err.value.msg
    assert client.evictions() == []
    assert client.calls[-1] == ("patch", NODE, None, False), "the cordon this run added is undone"
    assert err.value.result["changed"] is False and err.value.result["cordoned"] is False


def test_rule_block_leaves_someone_elses_cordon() -> None:
    client = FakeClient([pod("bare", owner=None)], cordoned=True)
    with pytest.raises(DrainError):
        drain(client, NODE, DrainOptions())
    assert not any(c[0] == "patch" for c in client.calls)


def test_daemonset_pods_stay_and_existing_daemonsets_are_looked_up_once() -> None:
    client = FakeClient([pod("agent-1", owner="DaemonSet"), pod("agent-2", owner="DaemonSet"), pod("web")])
    client.daemonsets = {("ns", "x")}
    result = drain(client, NODE, DrainOptions())
    assert client.evictions() == ["web"]
    assert [c for c in client.calls if c[:2] == ("get", "DaemonSet")] == [("get", "DaemonSet", "x")]
    assert result["totals"]["skipped"] == 2


def test_pdb_refusals_are_retried_until_accepted() -> None:
    client = FakeClient([pod("a"), pod("b")])
    client.refuse = {"a": 2}
    result = drain(client, NODE, DrainOptions(timeout=120))
    assert client.evictions().count("a") == 3
    pods = {p["name"]: p for p in result["pods"]}
    assert pods["a"]["action"] == "evicted" and "pdbs" not in pods["a"]
    assert pods["a"]["seconds"] >= core.retry_delay(1) + core.retry_delay(2)


def test_pdb_that_never_allows_fails_at_the_deadline_and_keeps_the_cordon(backoffs: list[float]) -> None:
    client = FakeClient([pod("a"), pod("b")])
    client.refuse = {"a": -1}
    with pytest.raises(DrainError) as err:
        drain(client, NODE, DrainOptions(timeout=1.5))
    # Not before the deadline (the drain's own clock), and no retry past it: the backoffs stop at the deadline.
    assert err.value.result["seconds"] >= 1.5
    assert backoffs and sum(backoffs) <= 1.5 + 1e-6, backoffs
    assert backoffs[0] == core.retry_delay(1)
    assert err.value.msg.startswith(f"Drain of node {NODE} timed out after 1.5s: ")
    assert "PodDisruptionBudget web-pdb for ns/a" in err.value.msg and "stays cordoned" in err.value.msg
    result = err.value.result
    assert result["pdbs"] == ["ns/web-pdb"]
    assert {p["name"]: p["action"] for p in result["pods"]} == {"a": "blocked", "b": "evicted"}
    assert result["progress"]["waitForEviction"] == ["ns/a"] and result["progress"]["drainProgress"] == 50
    assert client.node["spec"]["unschedulable"] is True


def test_a_budget_update_conflict_is_asked_again_and_is_no_refusal(backoffs: list[float]) -> None:
    # the API server gives up updating a budget that many evictions update at once: 409, nothing was done
    client = FakeClient([pod("a"), pod("b")])
    client.contend = {"a": 2}
    result = drain(client, NODE, DrainOptions(timeout=120, bypass_pdb_after=0))
    assert client.evictions().count("a") == 3 and not [c for c in client.calls if c[0] == "delete"]
    assert backoffs == [core.retry_delay(1), core.retry_delay(2)]
    pods = {p["name"]: p for p in result["pods"]}
    assert pods["a"]["action"] == "evicted" and "pdbs" not in pods["a"] and "reason" not in pods["a"]
    assert result["warnings"] == [] and result["pdbs"] == []


def test_a_budget_that_stays_contended_fails_that_pod_at_the_deadline(backoffs: list[float]) -> None:
    client = FakeClient([pod("a"), pod("b")])
    client.contend = {"a": -1}
    with pytest.raises(DrainError) as err:
        drain(client, NODE, DrainOptions(timeout=1.5, bypass_pdb_after=0))
    assert err.value.result["seconds"] >= 1.5
    assert backoffs and sum(backoffs) <= 1.5 + 1e-6, backoffs
    assert 'poddisruptionbudgets.policy "web-pdb": the object was modified' in err.value.msg
    assert {p["name"]: p["action"] for p in err.value.result["pods"]} == {"a": "failed", "b": "evicted"}
    assert not [c for c in client.calls if c[0] == "delete"], "a contended budget is no reason to bypass it"


def test_uncordon_on_failure_only_when_this_run_cordoned() -> None:
    client = FakeClient([pod("a")])
    client.refuse = {"a": -1}
    with pytest.raises(DrainError, match="uncordoned again"):
        drain(client, NODE, DrainOptions(timeout=0.5), uncordon_on_failure=True)
    assert client.node["spec"]["unschedulable"] is None
    client = FakeClient([pod("a")], cordoned=True)
    client.refuse = {"a": -1}
    with pytest.raises(DrainError, match="stays cordoned"):
        drain(client, NODE, DrainOptions(timeout=0.5), uncordon_on_failure=True)
    assert client.node["spec"]["unschedulable"] is True


def test_uncordon_on_failure_leaves_a_cordon_someone_else_made_again_during_the_drain() -> None:
    client = FakeClient([pod("a")])
    client.refuse = {"a": -1}

    def recordoned(_name: str) -> None:  # someone uncordons the node and cordons it again for work of their own
        if client.node["metadata"].get("managedFields") != [] or client.node["spec"].get("unschedulable"):
            client.set_unschedulable(None, "kubectl-cordon")
            client.set_unschedulable(True, "kubectl-cordon")

    client.after_eviction(recordoned)
    with pytest.raises(DrainError, match="stays cordoned: someone else changed its cordon") as err:
        drain(client, NODE, DrainOptions(timeout=0.5), uncordon_on_failure=True)
    assert client.node["spec"]["unschedulable"] is True
    assert not [c for c in client.calls if c[0] == "patch" and c[2] is None], "their cordon was undone"
    assert any("was not uncordoned" in w for w in err.value.result["warnings"])


def test_uncordon_on_failure_leaves_a_node_a_nodemaintenance_now_holds() -> None:
    """The maintenance was scheduled during the drain and found the node cordoned (by this drain), so it wrote no
    cordon of its own and counts on this one: undoing it would put a node under maintenance back to work."""
    client = FakeClient([pod("a")])
    client.refuse = {"a": -1}

    def scheduled(_name: str) -> None:
        client.node_maintenances = [
            {
                "metadata": {"name": "nm-1", "namespace": "ops", "creationTimestamp": "2026-01-01T00:00:00Z"},
                "spec": {"nodeName": NODE, "requestorID": "ops.example.com", "cordon": True},
                "status": {"conditions": [{"type": "Ready", "status": "False", "reason": "Draining"}]},
            }
        ]

    client.after_eviction(scheduled)
    with pytest.raises(DrainError, match="stays cordoned: NodeMaintenance ops/nm-1 holds it") as err:
        drain(client, NODE, DrainOptions(timeout=0.5), uncordon_on_failure=True)
    assert client.node["spec"]["unschedulable"] is True
    assert any("NodeMaintenance ops/nm-1 holds it" in w for w in err.value.result["warnings"])


def test_a_node_cordoned_by_someone_else_after_the_read_is_theirs() -> None:
    client = FakeClient([pod("bare", owner=None)])
    get = client.get
    first = [True]

    def get_then_cordon(res: Any, name: str, namespace: str | None = None) -> dict:
        found = copy.deepcopy(get(res, name, namespace))
        if res is NODES and first[0]:
            first[0] = False
            client.set_unschedulable(True, "kubectl-cordon")  # after our read, before our cordon
        return found

    client.get = get_then_cordon  # type: ignore[method-assign]
    with pytest.raises(DrainError) as err:
        drain(client, NODE, DrainOptions())
    assert client.node["spec"]["unschedulable"] is True, "their cordon was undone after the rule block"
    assert err.value.result["was_cordoned"] is True and err.value.result["changed"] is False


def test_bypass_deletes_a_blocked_pod_after_the_given_time_with_a_warning(backoffs: list[float]) -> None:
    client = FakeClient([pod("a"), pod("b")])
    client.refuse = {"a": -1}
    result = drain(client, NODE, DrainOptions(timeout=120, bypass_pdb_after=0.6))
    pods = {p["name"]: p for p in result["pods"]}
    assert pods["a"] == {
        "namespace": "ns",
        "name": "a",
        "action": "deleted",
        "reason": "pdb_bypassed",
        "pdbs": ["web-pdb"],
        "seconds": pods["a"]["seconds"],
    }
    # Deleted at the bypass time (the drain's own clock), not at the next backoff: the wait before it is cut short.
    assert pods["a"]["seconds"] >= 0.6
    assert sum(backoffs) <= 0.6 + 1e-6 < core.retry_delay(1) + core.retry_delay(2), backoffs
    assert [c[0] for c in client.calls if c[1] == "a"] == ["evict"] * len(backoffs) + ["delete"]
    assert pods["b"]["action"] == "evicted"
    assert result["warnings"] == ["Pod ns/a was deleted despite PodDisruptionBudget web-pdb (bypass_pdb_after)."]


def test_disable_eviction_deletes() -> None:
    client = FakeClient([pod("a")])
    result = drain(client, NODE, DrainOptions(disable_eviction=True, grace_period=5))
    assert ("delete", "a", 5, False) in client.calls and client.evictions() == []
    assert result["pods"][0]["action"] == "deleted" and result["warnings"] == []


def test_an_api_error_fails_that_pod_without_waiting_for_the_deadline() -> None:
    client = FakeClient([pod("a"), pod("b")])
    client.fail = {"a": errors.K8sError("evict pod ns/a failed with HTTP 500: several PDBs", 500, {})}
    with pytest.raises(DrainError) as err:
        drain(client, NODE, DrainOptions(timeout=120))
    assert "timed out" not in err.value.msg
    assert err.value.result["seconds"] < 120, "it waited for the deadline"
    assert "errors: ns/a: evict pod ns/<pod> failed with HTTP 500" in err.value.msg
    assert {p["name"]: p["action"] for p in err.value.result["pods"]} == {"a": "failed", "b": "evicted"}


def test_pod_already_gone_counts_as_done() -> None:
    client = FakeClient([pod("a")])
    client.fail = {"a": errors.NotFound("gone", 404, {})}
    client.events.put({"type": "DELETED", "object": pod("a")})
    result = drain(client, NODE, DrainOptions(timeout=120))
    assert result["pods"][0]["action"] == "gone"


def test_an_eviction_whose_answer_was_lost_is_found_by_its_effect() -> None:
    """The API server went down after the eviction took effect and before it answered; the client's repeat met
    404. The pod counts as evicted (reason answer_lost), not as gone by someone else's hand."""
    client = FakeClient([pod("a"), pod("b")])
    lost = errors.NotFound("pods a not found", 404, {})
    lost.after_lost_answer = True
    client.fail = {"a": lost}
    client.events.put({"type": "DELETED", "object": pod("a")})
    result = drain(client, NODE, DrainOptions(timeout=120))
    pods = {p["name"]: p for p in result["pods"]}
    assert (pods["a"]["action"], pods["a"].get("reason")) == ("evicted", "answer_lost")
    assert pods["b"]["action"] == "evicted" and not pods["b"].get("reason")
    assert result["totals"]["evicted"] == 2


def test_a_deletion_whose_answer_was_lost_says_why_it_was_deleted(backoffs: list[float]) -> None:
    lost = errors.NotFound("pods a not found", 404, {})
    lost.after_lost_answer = True
    client = FakeClient([pod("a")])  # disable_eviction: the deletion's answer lost
    delete_a = client.delete_pod

    def lose_the_first_answer(*args: Any, **kwargs: Any) -> Any:
        delete_a(*args, **kwargs)
        raise lost

    client.delete_pod = lose_the_first_answer  # type: ignore[method-assign]
    result = drain(client, NODE, DrainOptions(timeout=120, disable_eviction=True))
    assert (result["pods"][0]["action"], result["pods"][0].get("reason")) == ("deleted", "answer_lost")
    client = FakeClient([pod("b")])  # bypass_pdb_after: refused, then deleted, the deletion's answer lost
    client.refuse = {"b": -1}
    delete_pod = client.delete_pod

    def lose_the_answer(*args: Any, **kwargs: Any) -> Any:
        delete_pod(*args, **kwargs)
        client.events.put({"type": "DELETED", "object": pod("b")})
        raise lost

    client.delete_pod = lose_the_answer  # type: ignore[method-assign]
    result = drain(client, NODE, DrainOptions(timeout=120, bypass_pdb_after=0.2))
    assert (result["pods"][0]["action"], result["pods"][0].get("reason")) == ("deleted", "pdb_bypassed")
    assert result["warnings"] == ["Pod ns/b was deleted despite PodDisruptionBudget web-pdb (bypass_pdb_after)."]


def test_terminating_pods_are_waited_for_not_evicted() -> None:
    client = FakeClient([pod("old", deletionTimestamp="2026-01-01T00:00:00Z"), pod("web")])
    # the terminating pod goes only after the drain evicted the other one: it was waited for
    client.after_eviction(lambda name: client.events.put({"type": "DELETED", "object": client.pods.pop("u-old")}))
    result = drain(client, NODE, DrainOptions(timeout=120))
    assert client.evictions() == ["web"]
    assert {p["name"]: p["action"] for p in result["pods"]} == {"old": "gone", "web": "evicted"}


def test_same_name_with_a_new_uid_counts_as_gone() -> None:
    client = FakeClient([pod("db-0")])
    client.vanish = False  # the API accepts the eviction; only the replacement shows that the pod went
    replacement = pod("db-0")
    replacement["metadata"]["uid"] = "u-new"
    # The drain's clock stands still until the replacement appears, then moves on by 5 s: the time the
    # drain records for the pod says whether it counted the pod gone before or after the replacement.
    now = [1000.0]

    def recreate(name: str) -> None:
        now[0] += 5.0
        client.events.put({"type": "ADDED", "object": replacement})

    client.after_eviction(recreate)
    result = drain(client, NODE, DrainOptions(timeout=120), clock=lambda: now[0])
    assert result["pods"][0]["action"] == "evicted"
    assert result["pods"][0]["seconds"] == 5.0


def test_every_eviction_and_deletion_carries_the_planned_uid(backoffs: list[float]) -> None:
    client = FakeClient([pod("a"), pod("b")])
    client.refuse = {"a": 1}
    drain(client, NODE, DrainOptions(timeout=120))
    assert sorted(client.sent) == [("evict", "a", "u-a"), ("evict", "a", "u-a"), ("evict", "b", "u-b")]
    client = FakeClient([pod("a")])
    client.refuse = {"a": -1}
    drain(client, NODE, DrainOptions(timeout=120, bypass_pdb_after=0.2))
    assert client.sent[-1] == ("delete", "a", "u-a") and {sent[2] for sent in client.sent} == {"u-a"}
    client = FakeClient([pod("a")])
    drain(client, NODE, DrainOptions(disable_eviction=True))
    assert client.sent == [("delete", "a", "u-a")]
    for disable in (False, True):
        client = FakeClient([pod("a")])
        drain(client, NODE, DrainOptions(dry_run=True, disable_eviction=disable))
        assert client.sent == [("delete" if disable else "evict", "a", "u-a")]


def test_a_pod_replaced_while_its_eviction_is_retried_is_never_touched(backoffs: list[float]) -> None:
    client = FakeClient([pod("db-0"), pod("web")])
    client.refuse = {"db-0": 1}  # refused once: a retry by name would evict the replacement
    new = replacement("db-0")

    def replace_once_refused(name: str) -> None:
        # db-0 is deleted by someone else and re-created on n2; the watch does not tell the drain (it lags)
        if name == "db-0" and "u-db-0" in client.pods:
            with client.lock:
                del client.pods["u-db-0"]
                client.pods["u-new-db-0"] = new

    client.after_eviction(replace_once_refused)
    result = drain(client, NODE, DrainOptions(timeout=120))
    assert client.pods.get("u-new-db-0") is new and "deletionTimestamp" not in new["metadata"]
    assert [s for s in client.sent if s[1] == "db-0"] == [("evict", "db-0", "u-db-0")], "a call after the replacement"
    assert backoffs == [core.retry_delay(1)], "the worker stopped at its first retry"
    assert {p["name"]: p["action"] for p in result["pods"]} == {"db-0": "gone", "web": "evicted"}


@pytest.mark.parametrize("options", [{}, {"disable_eviction": True}], ids=["evict", "delete"])
def test_a_pod_replaced_just_before_the_call_is_left_alone_and_counts_as_gone(
    options: dict[str, Any], backoffs: list[float]
) -> None:
    client = FakeClient([pod("db-0"), pod("web")])
    new = replacement("db-0")
    client.replace_on_call = {"db-0": new}  # the API answers the call for the new pod: 409 on the UID precondition
    result = drain(client, NODE, DrainOptions(timeout=120, **options))
    assert client.pods.get("u-new-db-0") is new and "deletionTimestamp" not in new["metadata"]
    assert [s for s in client.sent if s[1] == "db-0"] == [(s[0], "db-0", "u-db-0") for s in client.sent[:1]]
    assert backoffs == []
    assert {p["name"]: p["action"] for p in result["pods"]} == {
        "db-0": "gone",
        "web": "deleted" if options else "evicted",
    }


def test_a_waiting_worker_stops_as_soon_as_the_watch_sees_its_pod_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    client = FakeClient([pod("db-0"), pod("web")])
    client.refuse = {"db-0": -1, "web": -1}
    new = replacement("db-0")
    monkeypatch.setattr(core, "retry_delay", lambda attempt: 600.0)  # a worker's wait ends early or not at all
    ended: list[bool] = []  # for db-0's wait: whether the pass was still running when it ended

    def replaced_and_seen(name: str) -> None:
        if name == "db-0" and "u-db-0" in client.pods:
            with client.lock:
                old = client.pods.pop("u-db-0")
                client.pods["u-new-db-0"] = new
            client.events.put({"type": "DELETED", "object": old})

    client.after_eviction(replaced_and_seen)
    original_pause = DrainPass._pause

    def pause(self: DrainPass, target: Any, delay: float) -> None:
        if target.plan.name != "db-0":  # web is retried quickly until db-0's worker is back
            original_pause(self, target, 0.01)
            return
        original_pause(self, target, delay)
        ended.append(not self._stop.is_set())
        client.refuse["web"] = 0  # only now may the drain finish

    monkeypatch.setattr(DrainPass, "_pause", pause)
    result = drain(client, NODE, DrainOptions(timeout=120))
    assert ended == [True], "db-0's worker waited on after its pod was gone"
    assert client.pods.get("u-new-db-0") is new
    assert [s for s in client.sent if s[1] == "db-0"] == [("evict", "db-0", "u-db-0")]
    assert {p["name"]: p["action"] for p in result["pods"]} == {"db-0": "gone", "web": "evicted"}


def test_evicted_pod_still_there_at_the_deadline_is_terminating() -> None:
    client = FakeClient([pod("slow")])
    client.vanish = False
    with pytest.raises(DrainError, match="still terminating: ns/slow"):
        drain(client, NODE, DrainOptions(timeout=0.5))


def test_relist_reconciles_after_a_gap() -> None:
    client = FakeClient([pod("a"), pod("b")])
    client.vanish = False
    client.events.put({"type": "RELIST", "object": {"items": [pod("b")]}})
    evicted: list[str] = []

    def b_goes_once_both_are_evicted(name: str) -> None:
        evicted.append(name)
        if sorted(evicted) == ["a", "b"]:
            client.events.put({"type": "DELETED", "object": pod("b")})

    client.after_eviction(b_goes_once_both_are_evicted)
    result = drain(client, NODE, DrainOptions(timeout=120))
    assert result["totals"]["evicted"] == 2


def test_watch_failure_falls_back_to_polling() -> None:
    client = FakeClient([pod("a")])
    client.watch_error = errors.Forbidden("watch forbidden", 403, {})
    result = drain(client, NODE, DrainOptions(timeout=10))
    assert result["pods"][0]["action"] == "evicted"
    assert any("polling instead" in w for w in result["warnings"])


def test_check_mode_uses_dry_run_and_predicts_pdb_blocks() -> None:
    client = FakeClient([pod("a"), pod("b"), pod("ds", owner="DaemonSet")])
    client.daemonsets = {("ns", "x")}
    client.refuse = {"a": -1}
    client.fail = {}
    result = drain(client, NODE, DrainOptions(dry_run=True))
    assert ("patch", NODE, True, True) in client.calls
    assert all(c[3] is True for c in client.calls if c[0] == "evict")
    assert not any(c[0] == "watch" for c in client.calls)
    assert client.node["spec"].get("unschedulable") is None
    assert len(client.pods) == 3
    pods = {p["name"]: p for p in result["pods"]}
    assert pods["a"]["action"] == "blocked" and pods["a"]["pdbs"] == ["web-pdb"]
    assert pods["b"]["action"] == "evicted"
    assert result["changed"] is True
    assert result["warnings"] == [
        "A real drain would wait for PodDisruptionBudget(s) ns/web-pdb to allow evicting ns/a."
    ]


def test_pdb_names_come_from_the_budgets_when_the_refusal_does_not_name_them() -> None:
    client = FakeClient([pod("a", labels={"app": "db"})])
    client.pdbs = [
        {"metadata": {"name": "db-pdb", "namespace": "ns"}, "spec": {"selector": {"matchLabels": {"app": "db"}}}}
    ]
    client.refuse = {"a": -1}
    original = client.evict

    def evict_without_causes(
        name: str, namespace: str, grace_period: int | None = None, dry_run: bool = False, **kw: Any
    ) -> dict:
        try:
            return original(name, namespace, grace_period, dry_run, **kw)
        except errors.TooManyRequests as exc:
            raise errors.TooManyRequests(exc.msg, 429, {}) from None

    client.evict = evict_without_causes  # type: ignore[method-assign]
    result = drain(client, NODE, DrainOptions(dry_run=True))
    assert result["pods"][0]["pdbs"] == ["db-pdb"]


def test_second_drain_of_a_drained_node_changes_nothing() -> None:
    client = FakeClient([pod("agent", owner="DaemonSet")], cordoned=True)
    client.daemonsets = {("ns", "x")}
    result = drain(client, NODE, DrainOptions())
    assert result["changed"] is False
    assert not any(c[0] in ("patch", "evict", "watch") for c in client.calls)


def test_unknown_node_changes_nothing() -> None:
    client = FakeClient([])
    with pytest.raises(DrainError, match="Node nope not found; nothing was changed"):
        drain(client, "nope", DrainOptions())


def test_pod_selector_limits_the_drain_but_total_counts_every_pod() -> None:
    client = FakeClient([pod("a", labels={"tier": "gpu"}), pod("b", labels={"tier": "cpu"})])
    result = drain(client, NODE, DrainOptions(pod_selector="tier=gpu"))
    assert client.evictions() == ["a"]
    assert result["progress"]["totalPods"] == 2 and result["progress"]["evictionPods"] == 1


def test_a_pass_is_bounded_and_a_later_pass_continues() -> None:
    client = FakeClient([pod("a"), pod("b")])
    client.refuse = {"a": -1}  # through the first pass
    started = time.monotonic()
    # The first pass's clock stands still until b is gone and a was refused twice, and the pass has read every
    # message (the first refusal among them); then it reaches the pass's bound. So the pass ends by its bound
    # with b evicted and a blocked, however slowly the threads run.
    progress: list[int] = []
    ended: list[bool] = []

    def first_clock() -> float:
        if not ended and progress[-1:] == [50] and client.evictions().count("a") >= 2 and first_pass._events.empty():
            ended.append(True)
        return started + (1.0 if ended else 0.0)

    first_pass = DrainPass(
        client,
        NODE,
        DrainOptions(timeout=120),
        started,
        on_progress=lambda p: progress.append(p.drain_progress),
        clock=first_clock,
    )
    first = first_pass.run(until=started + 1.0)
    assert ended, "the pass ended before its bound"
    assert not first.done and not first.timed_out
    assert {o.name: o.action for o in first.outcomes} == {"a": "blocked", "b": "evicted"}
    assert first.progress.drain_progress == 50
    client.refuse = {"a": 2}
    second = DrainPass(client, NODE, DrainOptions(timeout=120), started).run(until=time.monotonic() + 60)
    assert second.done
    assert [o.name for o in second.outcomes] == ["a"], "the second pass sees only what is left"


def test_wait_for_completion_waits_then_reports_what_is_left() -> None:
    client = FakeClient([pod("job", labels={"class": "batch"}), pod("web")])
    original_watch = client.watch

    def job_ends_once_watched(res: Any, **kw: Any) -> FakeWatch:
        watch = original_watch(res, **kw)
        client.events.put({"type": "DELETED", "object": client.pods.pop("u-job")})
        return watch

    client.watch = job_ends_once_watched  # type: ignore[method-assign]
    assert wait_for_completion(client, NODE, WaitForCompletion("class=batch", 120)) == (True, [])
    client = FakeClient([pod("job", labels={"class": "batch"})])
    readings: list[float] = []

    def clock() -> float:
        readings.append(time.monotonic())
        return readings[-1]

    assert wait_for_completion(client, NODE, WaitForCompletion("class=batch", 0.3), clock=clock) == (False, ["ns/job"])
    assert max(readings) - readings[0] >= 0.3, "it gave up before its timeout (by its own clock)"
    assert client.evictions() == []


def test_pool_size_covers_workers_and_the_watch() -> None:
    assert pool_size_for(32) == 34
    assert pool_size_for(0) == 3
