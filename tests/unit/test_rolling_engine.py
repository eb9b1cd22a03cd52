"""engines/rolling.py (class Rolling) against the in-memory API of test_engine_maintenance: the record in a
ConfigMap, requests, each node's admission and release, and what a later run does after a killed one."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.maintenance import lifecycle as lc
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.maintenance import rolling as core
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.maintenance.scheduler import FINALIZER
from ansible_collections.nodeops.maintenance.plugins.module_utils.engines.maintenance import ReconcileOptions
from ansible_collections.nodeops.maintenance.plugins.module_utils.engines.requests import RequestError
from ansible_collections.nodeops.maintenance.plugins.module_utils.engines.rolling import (
    FAILED_REASON,
    NODE_GONE,
    RIDE_OUT,
    STOP_ASKED,
    Rolling,
    RunOptions,
)
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s import errors
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.client import (
    CONFIGMAPS,
    MAINTENANCE_CONFIGS,
    NODE_MAINTENANCES,
    NODES,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from unit.test_engine_maintenance import NS, FakeApi, node

RUN = "chg-1234"
REQUESTOR = "upgrades.example.com"
CFG = "cfg"
RECORD = "nodeops-rolling-chg-1234"


class Crash(Exception):
    """The playbook was killed: raised by the API at a chosen write."""


class Api(FakeApi):
    """FakeApi with a clock that moves on at every list (one look at the cluster), an optional stand-in for the
    operator that makes new requests Ready, hooks run at every look, and a crash at the n-th write."""

    def __init__(self) -> None:
        super().__init__()
        self.tick = 1.0
        self.auto_ready = False
        self.hooks: list[Callable[[Api], None]] = []
        self.crash_at: int | None = None
        self.write_count = 0
        self.lists = 0
        self.gets_look = True  # a GET of a request moves the clock on and runs the hooks, as a list does

    def clock(self) -> float:
        return self.now

    def _write(self) -> None:
        self.write_count += 1
        if self.crash_at is not None and self.write_count == self.crash_at:
            raise Crash(f"killed at write {self.write_count}")

    def list(self, res: Any, namespace: str | None = None, **kw: Any) -> dict[str, Any]:
        self.now += self.tick
        self.lists += 1
        if res is NODE_MAINTENANCES:
            self._look()
        return super().list(res, namespace, **kw)

    def get(self, res: Any, name: str, namespace: str | None = None) -> dict[str, Any]:
        if res in (NODE_MAINTENANCES, NODES) and self.gets_look:  # a node's step reads its own objects: looks too
            self.now += self.tick
            if res is NODE_MAINTENANCES:
                self._look()
        return super().get(res, name, namespace)

    def _look(self) -> None:
        for hook in list(self.hooks):
            hook(self)
        if self.auto_ready:
            for obj in self.requests():
                if not (obj.get("status") or {}).get("conditions"):
                    self.set_phase(obj["spec"]["nodeName"], lc.PHASE_READY)

    def create(self, res: Any, body: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
        self._write()
        return super().create(res, body, namespace)

    def replace(self, res: Any, body: dict[str, Any], subresource: str | None = None) -> dict[str, Any]:
        self._write()
        return super().replace(res, body, subresource)

    def delete(self, res: Any, name: str, namespace: str | None = None, **kw: Any) -> dict:
        self._write()
        return super().delete(res, name, namespace, **kw)

    # -- for the tests ---------------------------------------------------------------------------
    def requests(self) -> list[dict[str, Any]]:
        return [o for (plural, _ns, _n), o in self.objects.items() if plural == NODE_MAINTENANCES.plural]

    def request(self, node_name: str) -> dict[str, Any] | None:
        """The request of the run's requestor (owned or joined) for the node; not one released already (being
        deleted without the maintenance finalizer, kept only by another finalizer)."""
        found = [
            o
            for o in self.requests()
            if o["spec"]["nodeName"] == node_name
            and REQUESTOR in (o["spec"].get("requestorID"), *(o["spec"].get("additionalRequestors") or []))
            and not (
                o["metadata"].get("deletionTimestamp") and FINALIZER not in (o["metadata"].get("finalizers") or [])
            )
        ]
        assert len(found) <= 1
        return found[0] if found else None

    def set_phase(self, node_name: str, phase: str) -> None:
        """What the operator writes: the Ready condition with the phase as its reason."""
        obj = self.request(node_name)
        assert obj is not None, node_name
        conditions = [c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] != "Ready"]
        conditions.append({"type": "Ready", "status": str(phase == lc.PHASE_READY), "reason": phase})
        obj["status"] = {**(obj.get("status") or {}), "conditions": conditions}
        self._bump(obj)

    def condition(self, node_name: str, kind: str) -> dict[str, Any] | None:
        obj = self.request(node_name)
        assert obj is not None
        return next((c for c in obj.get("status", {}).get("conditions") or [] if c["type"] == kind), None)

    def record(self) -> dict[str, dict[str, Any]]:
        cm = self.objects.get((CONFIGMAPS.plural, CFG, RECORD))
        assert cm is not None, "no record"
        return core.stored_nodes(cm["data"])

    def set_node_ready(self, name: str, ready: bool) -> None:
        obj = self.objects[(NODES.plural, None, name)]
        obj["status"] = {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}


@pytest.fixture
def api() -> Api:
    fake = Api()
    for name in ("n0", "n1", "n2", "n3"):
        fake.add(NODES, node(name))
    return fake


class Rendered:
    """A Rolling whose steps return their results as the module renders them (``as_dict``: what a playbook sees);
    anything else is the Rolling's own."""

    STEPS = frozenset(("start", "admit", "release", "drive", "stop", "summary"))

    def __init__(self, engine: Rolling) -> None:
        object.__setattr__(self, "engine", engine)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.engine, name)
        if name not in self.STEPS:
            return value

        def step(*args: Any, **kwargs: Any) -> dict[str, Any]:
            result: dict[str, Any] = value(*args, **kwargs).as_dict()
            return result

        return step

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self.engine, name, value)


def rolling(api: Api, fetch_alerts: Any = None, **options: Any) -> Any:
    """A fresh Rolling, as each step of the playbook makes (a module run): nothing kept in memory. Its steps return
    what the module renders (see :class:`Rendered`)."""
    defaults: dict[str, Any] = {
        "run_id": RUN,
        "requestor": REQUESTOR,
        "namespace": NS,
        "record_namespace": CFG,
        "spec": {"cordon": True},
        "engine": "operator",
        "interval": 0.0,
        "gather": 30.0,
        "wave_timeout": 300.0,
        "node_ready_timeout": 20.0,
        "release_timeout": 20.0,
    }
    return Rendered(
        Rolling(
            api,  # type: ignore[arg-type]
            RunOptions(**{**defaults, **options}),
            clock=api.clock,
            monotonic=api.clock,
            fetch_alerts=fetch_alerts,
        )
    )


def started(api: Api, *nodes: str, **options: Any) -> dict[str, Any]:
    return rolling(api, **options).start(list(nodes), "release", False)


def admitted(api: Api, *nodes: str, **options: Any) -> dict[str, dict[str, Any]]:
    """A run of ``nodes`` started and each of them admitted, its request made Ready as the operator would: every
    node in its maintenance, in admission batch 1. Each node's admit result."""
    started(api, *nodes, **options)
    for name in nodes:
        api.set_phase(name, lc.PHASE_READY)
    results = {name: rolling(api, **options).admit(name) for name in nodes}
    assert all(r["admitted"] and r["wave"] == 1 for r in results.values()), results
    return results


# ============================================================================== start
def test_start_records_the_run_and_requests_every_target(api: Api) -> None:
    result = started(api, "n1", "n0")
    assert result["changed"] is True
    assert result["added"] == ["n1", "n0"] and result["pending"] == ["n0", "n1"]
    assert [(r["node"], r["action"]) for r in result["requested"]] == [("n1", "created"), ("n0", "created")]
    assert result["record"] == f"{CFG}/{RECORD}" and result["run_id"] == RUN
    assert result["counts"] == {"pending": 2, "maintaining": 0, "done": 0, "failed": 0, "interrupted": 0}
    assert result["complete"] is False and result["waves"] == 0
    cm = api.obj(CONFIGMAPS, RECORD, CFG)
    assert cm is not None and cm["metadata"]["annotations"]["maintenance.nodeops.io/run-id"] == RUN
    assert json.loads(cm["data"][core.RUN_KEY])["requestor"] == REQUESTOR
    assert set(api.record()) == {"n0", "n1"} and api.record()["n0"]["state"] == core.PENDING
    for name in ("n0", "n1"):
        obj = api.request(name)
        assert obj is not None
        assert obj["metadata"]["name"] == f"{REQUESTOR}-{name}"
        assert obj["spec"] == {"requestorID": REQUESTOR, "nodeName": name, "cordon": True}
    assert api.request("n2") is None


def test_start_again_changes_nothing(api: Api) -> None:
    started(api, "n0", "n1")
    again = started(api, "n0", "n1")
    assert again["changed"] is False
    assert again["added"] == [] and again["pending"] == ["n0", "n1"]
    assert [r["action"] for r in again["requested"]] == ["unchanged", "unchanged"]
    assert len(api.requests()) == 2


def test_start_adds_new_targets_to_a_run(api: Api) -> None:
    started(api, "n0")
    result = started(api, "n0", "n2")
    assert result["changed"] is True and result["added"] == ["n2"] and result["pending"] == ["n0", "n2"]
    assert api.request("n2") is not None


def test_start_refuses_nodes_that_do_not_exist_and_writes_nothing(api: Api) -> None:
    with pytest.raises(RequestError, match="nX not found"):
        started(api, "n0", "nX")
    assert api.write_count == 0 and api.obj(CONFIGMAPS, RECORD, CFG) is None


def test_start_without_targets_is_an_error(api: Api) -> None:
    with pytest.raises(RequestError, match="No target nodes"):
        rolling(api).start([], "release", False)


def test_a_record_of_another_requestor_is_an_error_that_names_the_configmap(api: Api) -> None:
    started(api, "n0", requestor="someone.example.com")
    with pytest.raises(RequestError, match=f"ConfigMap {CFG}/{RECORD}.*Delete it"):
        started(api, "n0")


def test_a_run_id_is_stored_under_its_record_name(api: Api) -> None:
    rolling(api, run_id="CHG 77").start(["n0"], "release", False)
    cms = [k for k in api.objects if k[0] == CONFIGMAPS.plural]
    assert cms == [(CONFIGMAPS.plural, CFG, core.record_name("CHG 77"))]


def test_a_run_too_large_for_its_record_is_refused_before_anything_is_written(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the room of a ConfigMap scaled down: four nodes are too many, three fit
    three = core.RunRecord(RUN, REQUESTOR)
    core.plan_start(three, ["n0", "n1", "n2"], api.clock())
    monkeypatch.setattr(core, "MESSAGE_ROOM", 200)
    monkeypatch.setattr(core, "RECORD_LIMIT", core.full_size(three) + 200 + 10)
    with pytest.raises(RequestError, match=f"Run '{RUN}': the record of 4 nodes .* runs of at most about 3 nodes"):
        started(api, "n0", "n1", "n2", "n3")
    assert api.write_count == 0 and api.obj(CONFIGMAPS, RECORD, CFG) is None and api.requests() == []
    started(api, "n0", "n1", "n2")


def test_a_record_that_outgrows_its_configmap_is_an_error_and_the_last_record_stays(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    admitted(api, "n0", "n1")
    before = api.record()
    monkeypatch.setattr(core, "RECORD_LIMIT", core.record_size(api.obj(CONFIGMAPS, RECORD, CFG)["data"]) + 200)
    writes = api.write_count
    with pytest.raises(RequestError, match=f"ConfigMap {CFG}/{RECORD}: the record of the run's 2 nodes needs"):
        rolling(api).release("n0", "x" * 250)
    assert api.record() == before and api.write_count == writes  # nothing released, nothing written


# ============================================================================== admit
def test_admit_records_the_node_in_its_maintenance_before_it_returns(api: Api) -> None:
    started(api, "n0", "n1")
    api.set_phase("n0", lc.PHASE_READY)
    result = rolling(api).admit("n0")
    assert result["changed"] is True and result["admitted"] is True and result["wave"] == 1
    assert result["abort"] is False and result["counts"]["maintaining"] == 1 and result["waves"] == 1
    record = api.record()
    assert (record["n0"]["state"], record["n1"]["state"]) == (core.MAINTAINING, core.PENDING)
    assert record["n0"]["wave"] == 1 and record["n0"]["started"] is not None and record["n0"]["ready"] is not None
    # admitted: when the look that found it began; drained: when that look ended
    assert core.rfc3339.to_epoch(record["n0"]["admitted"]) < core.rfc3339.to_epoch(record["n0"]["ready"])  # type: ignore[operator]


def test_admit_takes_a_request_this_requestor_joined(api: Api) -> None:
    other = {
        "metadata": {"name": "other-n0", "namespace": NS},
        "spec": {"nodeName": "n0", "requestorID": "other.example.com"},
    }
    api.add(NODE_MAINTENANCES, other)
    result = started(api, "n0")
    assert [r["action"] for r in result["requested"]] == ["joined"]
    api.set_phase("n0", lc.PHASE_READY)
    assert rolling(api).admit("n0")["admitted"] is True and not mine(api, "n0")


def test_a_drained_request_it_joined_and_its_owner_deleted_is_held_for_the_run(api: Api) -> None:
    other = {
        "metadata": {"name": "other-n1", "namespace": NS},
        "spec": {"nodeName": "n1", "requestorID": "other.example.com"},
    }
    api.add(NODE_MAINTENANCES, other)
    reconcile, _reads = builtin_with_lists(api, "n0", "n1")
    joined = api.objects[(NODE_MAINTENANCES.plural, NS, "other-n1")]
    assert joined["spec"]["additionalRequestors"] == [REQUESTOR]
    engine = rolling(api, engine="builtin", reconcile=reconcile).reconciler
    assert engine is not None and engine.run_pass().errors == []
    joined = api.objects[(NODE_MAINTENANCES.plural, NS, "other-n1")]
    assert lc.NodeMaintenanceView.from_dict(joined).phase == lc.PHASE_READY
    api.delete(NODE_MAINTENANCES, "other-n1", NS)  # its owner is done; the engine holds it for this run
    result = rolling(api, engine="builtin", reconcile=reconcile).admit("n1")
    assert result["admitted"] is True and not mine(api, "n1"), "held for this run: taken, no request of its own"
    assert rolling(api, engine="builtin", reconcile=reconcile).release("n1", None)["released"] == ["n1"]
    assert (NODE_MAINTENANCES.plural, NS, "other-n1") not in api.objects, "left, then released by the engine"
    assert "unschedulable" not in api.objects[(NODES.plural, None, "n1")]["spec"]


def test_admit_requests_a_node_again_when_a_request_it_joined_is_released(api: Api) -> None:
    other = {
        "metadata": {"name": "other-n1", "namespace": NS},
        "spec": {"nodeName": "n1", "requestorID": "other.example.com"},
    }
    api.add(NODE_MAINTENANCES, other)
    started(api, "n1")
    joined = api.objects[(NODE_MAINTENANCES.plural, NS, "other-n1")]
    joined["metadata"].update(deletionTimestamp="2027-01-15T08:00:00Z", finalizers=[FINALIZER, "example.com/held"])
    waiting = rolling(api, progress_after=3.0).admit("n1")
    assert waiting["admitted"] is False
    assert "n1 whose earlier request is still being deleted" in waiting["waiting"]["message"]
    assert not mine(api, "n1"), "not drained: the operator releases it; the node waits for it to go"
    joined["metadata"]["finalizers"] = ["example.com/held"]  # released; another finalizer keeps the object
    ready = [{"type": "Ready", "status": "True", "reason": lc.PHASE_READY}]
    api.hooks.append(lambda a: [o.update(status={"conditions": ready}) for o in mine(a, "n1")])
    again = rolling(api, progress_after=3.0).admit("n1", resume=waiting["resume"])
    assert again["admitted"] is True and mine(api, "n1"), "requested again once released"


def mine(api: Api, node_name: str) -> list[dict[str, Any]]:
    """The requests this run's requestor owns for the node."""
    return [o for o in api.requests() if o["spec"]["nodeName"] == node_name and o["spec"]["requestorID"] == REQUESTOR]


def test_admit_ignores_requests_of_other_requestors(api: Api) -> None:
    started(api, "n0")
    api.add(
        NODE_MAINTENANCES, {"metadata": {"name": "x", "namespace": NS}, "spec": {"nodeName": "n0", "requestorID": "x"}}
    )
    api.set_phase("n0", lc.PHASE_DRAINING)
    for obj in api.requests():  # the other requestor's request on n0 is Ready: not ours
        if obj["metadata"]["name"] == "x":
            obj["status"] = {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready"}]}
    with pytest.raises(RequestError, match="did not become ready for its maintenance"):
        rolling(api, wave_timeout=10.0).admit("n0")
    assert api.record()["n0"]["state"] == core.PENDING


# ============================================================================== release
def test_release_leaves_a_failed_node_cordoned_and_releases_a_maintained_one(api: Api) -> None:
    admitted(api, "n0", "n1")
    result = rolling(api).release("n1", "firmware update failed")
    assert result["changed"] is True and result["state"] == core.FAILED and result["released"] == []
    assert result["failure"] == "firmware update failed"
    assert result["abort"] is True  # max_fail_percentage 0
    assert result["need_a_look"] == result["failed_nodes"] == ["n1"] and result["interrupted_nodes"] == []
    obj = api.request("n1")
    assert obj is not None and obj["metadata"]["annotations"][lc.GC_IGNORE_ANNOTATION] == "true"
    cond = api.condition("n1", lc.CONDITION_REQUESTOR_FAILED)
    assert cond is not None
    assert (cond["status"], cond["reason"], cond["message"]) == ("True", FAILED_REASON, "firmware update failed")
    assert cond["lastTransitionTime"].endswith("Z")
    record = api.record()
    assert record["n1"]["state"] == core.FAILED and record["n1"]["message"] == "firmware update failed"
    assert record["n1"]["back"] is None and record["n1"]["finished"] is not None
    done = rolling(api).release("n0", None)
    assert done["state"] == core.DONE and done["released"] == ["n0"] and done["complete"] is True
    assert api.request("n0") is None and api.record()["n0"]["back"] is not None


class LostAnswers(Api):
    """The record's next write loses its answer: it takes effect (or, with ``drop``, does not), ``between`` runs (a
    write of another host after it), and the client's repeat of the write meets a Conflict, marked as coming after
    a lost answer, as the real client raises it."""

    def __init__(self) -> None:
        super().__init__()
        self.lose = 0  # how many of the next writes of the record lose their answer
        self.drop = False
        self.between: Callable[[], None] = lambda: None

    def replace(self, res: Any, body: dict[str, Any], subresource: str | None = None) -> dict[str, Any]:
        if res is not CONFIGMAPS or not self.lose:
            return super().replace(res, body, subresource)
        self.lose -= 1
        if not self.drop:
            super().replace(res, body, subresource)
        self.between()
        lost = errors.Conflict("the object has been modified", 409, {})
        lost.after_lost_answer = True
        raise lost


def lost_admission(drop: bool = False, another_write: bool = False) -> tuple[LostAnswers, dict[str, Any]]:
    """n0's admission, whose write loses its answer; n1 pending, which another host gives up on in between."""
    api = LostAnswers()
    for name in ("n0", "n1"):
        api.add(NODES, node(name))
    started(api, "n0", "n1")
    api.set_phase("n0", lc.PHASE_READY)
    api.lose, api.drop = 1, drop
    if another_write:

        def stop() -> None:
            rolling(api).stop("a fatal notification elsewhere")

        api.between = stop
    result = rolling(api).admit("n0")
    assert api.lose == 0, "the admission's write was not made"
    return api, result


def test_an_admission_whose_answer_was_lost_is_handed_to_its_tasks_once() -> None:
    """The write of the admission took effect though its answer was lost: the node is admitted by this call (its
    maintenance runs), not taken for one another host admitted (which would leave it maintaining, never run)."""
    api, result = lost_admission()
    assert result["admitted"] is True and result["changed"] is True and result["wave"] == 1 and result["opened"]
    assert api.record()["n0"]["state"] == core.MAINTAINING
    again = rolling(api).admit("n0")  # a host that calls again is not handed the node a second time
    assert again["admitted"] is False and again["state"] == core.MAINTAINING


def test_an_admission_whose_answer_was_lost_under_another_write_is_still_this_calls() -> None:
    """Another host wrote the record after the lost write (here a stop): the record is not what this call wrote,
    but the node's row holds this call's admission (its time), so the node is handed to its tasks."""
    api, result = lost_admission(another_write=True)
    assert result["admitted"] is True and result["wave"] == 1, result
    assert api.record()["n0"]["state"] == core.MAINTAINING


def test_a_lost_write_that_did_not_take_effect_is_made_again() -> None:
    """The write whose answer was lost did not take effect, and another host wrote meanwhile: the record holds
    neither this write nor this call's admission, so the admission is decided again on the record as it is."""
    api, result = lost_admission(drop=True, another_write=True)
    assert result["admitted"] is False and result["stopped"]["reason"] == STOP_ASKED, result
    assert api.record()["n0"]["state"] == core.PENDING  # stopped in between: not admitted
    api, result = lost_admission(drop=True)
    assert result["admitted"] is True and api.record()["n0"]["state"] == core.MAINTAINING


class Patience(Api):
    """Records how long the client may retry each call that gets no answer (``retrying_for``, as the real client):
    by verb, the window each call was made under."""

    def __init__(self) -> None:
        super().__init__()
        self.windows: list[tuple[str, float | None]] = []
        self._window: float | None = None

    @contextlib.contextmanager
    def retrying_for(self, seconds: float | None) -> Iterator[None]:
        before, self._window = self._window, seconds
        try:
            yield
        finally:
            self._window = before

    def get(self, res: Any, name: str, namespace: str | None = None) -> dict[str, Any]:
        self.windows.append(("get", self._window))
        return super().get(res, name, namespace)

    def list(self, res: Any, namespace: str | None = None, **kw: Any) -> dict[str, Any]:
        self.windows.append(("list", self._window))
        return super().list(res, namespace, **kw)


def test_a_nodes_steps_ride_out_an_api_server_without_answer_each_call_for_as_long_as_the_step_may_wait() -> None:
    """Each call of admit and release may be retried for as long as the step may wait (its timeouts, at most
    RIDE_OUT, at least the client's default), not the client's default of 20 s: an API server that stops answering
    for a minute under the load of many hosts' steps must not fail a node. The reconcile passes a step runs keep
    the default (a pass holds the Lease the other hosts' passes wait for)."""
    api = Patience()
    api.add(NODES, node("n0"))
    started(api, "n0")
    api.set_phase("n0", lc.PHASE_READY)
    api.windows.clear()
    rolling(api, wave_timeout=60.0).admit("n0")
    assert api.windows and {w for _verb, w in api.windows} == {60.0}, api.windows
    api.windows.clear()
    rolling(api, node_ready_timeout=5000.0, release_timeout=100.0).release("n0", None)
    assert api.windows and {w for _verb, w in api.windows} == {RIDE_OUT}, api.windows
    assert api._window is None  # and no longer than the step

    api.add(NODES, node("n1"))
    api.add(MAINTENANCE_CONFIGS, {"metadata": {"name": "default", "namespace": NS}, "spec": {"maxUnavailable": 2}})
    reconcile = ReconcileOptions(namespace=NS, config_namespace=NS, lease_wait=0)
    started(api, "n1", engine="builtin", reconcile=reconcile)
    api.windows.clear()
    result = rolling(api, engine="builtin", reconcile=reconcile, wave_timeout=5.0).admit("n1")
    assert result["admitted"] is True, result
    assert ("list", None) in api.windows, api.windows  # the pass's reads, with the default
    assert ("get", 20.0) in api.windows, api.windows  # the step's own look at its request: at least the default


def test_release_fails_a_node_that_is_not_ready_in_kubernetes_in_time(api: Api) -> None:
    admitted(api, "n0", "n1")
    api.set_node_ready("n0", False)
    result = rolling(api, node_ready_timeout=10.0).release("n0", None)
    assert result["state"] == core.FAILED and result["released"] == []
    assert result["failure"] == "not Ready in Kubernetes 10s after its maintenance"
    assert api.request("n0") is not None
    cond = api.condition("n0", lc.CONDITION_REQUESTOR_FAILED)
    assert cond is not None and cond["status"] == "True"
    assert api.record()["n0"]["state"] == core.FAILED
    assert rolling(api).release("n1", None)["released"] == ["n1"] and api.request("n1") is None


def test_release_waits_for_a_node_that_comes_back_in_time(api: Api) -> None:
    admitted(api, "n0")
    api.set_node_ready("n0", False)
    seen: list[int] = []
    original = api.get

    def get_node(res: Any, name: str, namespace: str | None = None) -> dict[str, Any]:
        if res is NODES:  # a look at the node
            seen.append(1)
            if len(seen) == 4:
                api.set_node_ready("n0", True)
        return original(res, name, namespace)

    api.get = get_node  # type: ignore[method-assign]
    result = rolling(api, node_ready_timeout=60.0).release("n0", None)
    assert result["state"] == core.DONE and result["released"] == ["n0"] and len(seen) >= 4
    assert api.record()["n0"]["state"] == core.DONE


def test_release_fails_a_node_whose_node_object_is_gone(api: Api) -> None:
    admitted(api, "n0")
    del api.objects[(NODES.plural, None, "n0")]
    result = rolling(api, node_ready_timeout=5.0).release("n0", None)
    assert result["state"] == core.FAILED and result["failure"] == "the Node object is gone"


def test_release_with_release_failed_releases_a_failed_node_too(api: Api) -> None:
    admitted(api, "n0", "n1")
    result = rolling(api, release_failed=True, max_fail_percentage=50).release("n1", "boom")
    assert result["released"] == ["n1"] and api.request("n1") is None
    assert result["abort"] is False and result["failed_percentage"] == 50.0  # within the fail budget
    record = api.record()
    assert record["n1"]["state"] == core.FAILED and record["n1"]["back"] is not None
    assert record["n1"]["message"] == "boom"
    assert record["n0"]["state"] == core.MAINTAINING and api.request("n0") is not None


def test_a_whole_run_ends_complete_with_a_summary(api: Api) -> None:
    admitted(api, "n0", "n1")
    rolling(api).release("n0", None)
    rolling(api).release("n1", None)
    summary = rolling(api).summary()
    assert summary["changed"] is False and summary["complete"] is True
    assert [(r["node"], r["wave"], r["outcome"]) for r in summary["nodes"]] == [("n0", 1, "done"), ("n1", 1, "done")]
    assert summary["lines"][0].split() == ["node", "wave", "waited", "drained", "maintained", "back", "outcome"]
    assert [line.split()[:2] for line in summary["lines"][1:3]] == [["n0", "1"], ["n1", "1"]]
    assert all(isinstance(r["maintained"], float) for r in summary["nodes"])
    assert not any(line.startswith(("n0:", "n1:")) for line in summary["lines"])  # no message for done nodes
    assert summary["lines"][-1].startswith("waves: 1; done 2; from the first request to the last release: ")
    assert summary["counts"]["done"] == 2 and summary["waves"] == 1


# ============================================================================== a later run after a killed one
def test_a_restart_releases_a_node_left_in_its_maintenance(api: Api) -> None:
    admitted(api, "n0", "n1")  # the run dies during the maintenance
    result = rolling(api).start(["n0", "n1"], "release", False)
    assert result["interrupted"] == ["n0", "n1"] and result["released"] == ["n0", "n1"]
    assert result["interrupted_nodes"] == result["need_a_look"] == ["n0", "n1"] and result["failed_nodes"] == []
    assert result["pending"] == [] and result["changed"] is True
    assert api.requests() == []
    record = api.record()
    assert record["n0"]["state"] == core.INTERRUPTED and record["n0"]["back"] is not None
    # and is not handed out again
    again = rolling(api).admit("n0")
    assert again["admitted"] is False and again["state"] == core.INTERRUPTED and api.requests() == []


def test_a_restart_gives_the_interrupted_nodes_back_in_parallel_with_the_same_outcome(api: Api) -> None:
    """The requests are deleted up to ``workers`` at once: two deletes meet at a barrier that one at a time would
    never pass (it breaks after its timeout), and the result is the one of deleting one by one."""
    admitted(api, "n0", "n1", "n2", "n3")  # the run dies during the maintenance
    meet = threading.Barrier(2, timeout=10)
    original = api.delete

    def delete(res: Any, name: str, namespace: str | None = None, **kw: Any) -> dict:
        if res is NODE_MAINTENANCES and meet.n_waiting < 2 and not meet.broken and len(api.requests()) == 4:
            meet.wait()
        return original(res, name, namespace, **kw)

    api.delete = delete  # type: ignore[method-assign]
    nodes = ["n0", "n1", "n2", "n3"]
    result = rolling(api, reconcile=ReconcileOptions(namespace=NS, workers=4)).start(nodes, "release", False)
    assert not meet.broken
    assert result["interrupted"] == result["released"] == nodes
    assert api.requests() == [] and {r["state"] for r in api.record().values()} == {core.INTERRUPTED}


def test_a_restart_with_interrupted_fail_leaves_the_node_cordoned(api: Api) -> None:
    admitted(api, "n0")
    result = rolling(api).start(["n0"], "fail", False)
    assert result["interrupted"] == ["n0"] and result["released"] == []
    cond = api.condition("n0", lc.CONDITION_REQUESTOR_FAILED)
    assert cond is not None and (cond["status"], cond["reason"]) == ("True", FAILED_REASON)
    assert "interrupted policy fail" in cond["message"]
    assert api.record()["n0"]["state"] == core.FAILED
    assert rolling(api).admit("n0")["admitted"] is False and api.request("n0") is not None


def test_a_restart_with_interrupted_rerun_hands_the_node_out_again(api: Api) -> None:
    admitted(api, "n0")
    result = rolling(api).start(["n0"], "rerun", False)
    assert result["requeued"] == ["n0"] and result["pending"] == ["n0"]
    assert [r["action"] for r in result["requested"]] == ["unchanged"]  # the request is still there
    again = rolling(api).admit("n0")
    assert again["admitted"] is True and api.record()["n0"]["state"] == core.MAINTAINING


def test_retry_failed_clears_the_requestor_failed_condition(api: Api) -> None:
    admitted(api, "n0")
    rolling(api).release("n0", "boom")
    assert rolling(api).start(["n0"], "release", False)["finished"] == ["n0"]
    result = rolling(api).start(["n0"], "release", True)
    assert result["requeued"] == ["n0"] and result["pending"] == ["n0"]
    cond = api.condition("n0", lc.CONDITION_REQUESTOR_FAILED)
    assert cond is not None and (cond["status"], cond["reason"]) == ("False", "Retried")
    assert api.record()["n0"]["state"] == core.PENDING


def test_a_release_cut_short_is_done_by_the_next_start(api: Api) -> None:
    admitted(api, "n0")
    api.crash_at = api.write_count + 2  # start: save the record (1), then the delete of the request (2) dies
    with pytest.raises(Crash):
        rolling(api).start(["n0"], "release", False)
    assert api.record()["n0"]["state"] == core.INTERRUPTED and api.request("n0") is not None
    api.crash_at = None
    rolling(api).start(["n0"], "release", False)
    assert api.request("n0") is None
    assert api.record()["n0"]["back"] is not None


# ============================================================================== conflicts
def test_a_record_written_meanwhile_by_another_run_is_an_error(api: Api) -> None:
    started(api, "n0")
    api.conflicts[(CONFIGMAPS.plural, RECORD)] = 1
    with pytest.raises(RequestError, match="changed by someone else"):
        started(api, "n0", "n1")
    assert set(api.record()) == {"n0"} and api.request("n1") is None


def test_two_runs_creating_the_same_record_is_an_error_for_the_second(api: Api) -> None:
    first, second = rolling(api), rolling(api)
    run = second.load()  # the second run read before the first created the record
    first.start(["n0"], "release", False)
    with pytest.raises(RequestError, match="changed by someone else"):
        second.save(run)


def test_writing_requestor_failed_is_retried_on_conflicts(api: Api) -> None:
    admitted(api, "n0")
    obj = api.request("n0")
    assert obj is not None
    api.conflicts[(f"{NODE_MAINTENANCES.plural}/status", obj["metadata"]["name"])] = 2
    rolling(api).release("n0", "boom")
    cond = api.condition("n0", lc.CONDITION_REQUESTOR_FAILED)
    assert cond is not None and cond["status"] == "True"


def test_a_request_that_keeps_changing_is_an_error(api: Api) -> None:
    admitted(api, "n0")
    obj = api.request("n0")
    assert obj is not None
    api.conflicts[(f"{NODE_MAINTENANCES.plural}/status", obj["metadata"]["name"])] = 99
    with pytest.raises(RequestError, match="The request of n0 kept changing"):
        rolling(api).release("n0", "boom")
    assert api.record()["n0"]["state"] == core.FAILED  # the outcome was recorded first


# ============================================================================== the built-in engine
def test_the_builtin_engine_runs_the_reconcile_passes_itself(api: Api) -> None:
    api.add(MAINTENANCE_CONFIGS, {"metadata": {"name": "default", "namespace": NS}, "spec": {}})
    api.tick = 0.0
    reconcile = ReconcileOptions(namespace=NS, config_namespace=NS, lease_wait=0)
    started(api, "n0", engine="builtin", reconcile=reconcile)
    assert rolling(api, engine="builtin", reconcile=reconcile).admit("n0")["admitted"] is True
    assert api.objects[(NODES.plural, None, "n0")]["spec"].get("unschedulable") is True  # cordoned by the pass
    result = rolling(api, engine="builtin", reconcile=reconcile).release("n0", None)
    assert result["released"] == ["n0"] and api.request("n0") is None
    assert "unschedulable" not in api.objects[(NODES.plural, None, "n0")]["spec"]


def builtin_with_lists(api: Api, *nodes: str) -> tuple[ReconcileOptions, list[tuple[str, str]]]:
    """A run of ``nodes`` with the built-in engine started (both at once within the limits); from then on, the
    ``(verb, plural)`` of every read of the API."""
    limits = {"maxParallelOperations": len(nodes), "maxUnavailable": len(nodes)}
    api.add(MAINTENANCE_CONFIGS, {"metadata": {"name": "default", "namespace": NS}, "spec": limits})
    api.tick = 0.0
    reconcile = ReconcileOptions(namespace=NS, config_namespace=NS, lease_wait=0)
    started(api, *nodes, engine="builtin", reconcile=reconcile)
    return reconcile, record_reads(api)[""]


def record_reads(api: Api, by_thread: bool = False) -> dict[str, list[tuple[str, str]]]:
    """From now on, the ``(verb, plural)`` of every read of the API: by the name of the thread that made it
    (``by_thread``), else all under ``""``."""
    reads: dict[str, list[tuple[str, str]]] = {} if by_thread else {"": []}
    listing, getting = api.list, api.get

    def note(verb: str, res: Any) -> None:
        reads.setdefault(threading.current_thread().name if by_thread else "", []).append((verb, res.plural))

    def counting_list(res: Any, namespace: str | None = None, **kw: Any) -> dict[str, Any]:
        note("list", res)
        return listing(res, namespace, **kw)

    def counting_get(res: Any, name: str, namespace: str | None = None) -> dict[str, Any]:
        note("get", res)
        return getting(res, name, namespace)

    def counting_get_metadata(res: Any, name: str, namespace: str | None = None) -> dict[str, Any]:
        note("get_metadata", res)
        return getting_metadata(res, name, namespace)

    getting_metadata = api.get_metadata
    api.list, api.get = counting_list, counting_get  # type: ignore[method-assign]
    api.get_metadata = counting_get_metadata  # type: ignore[method-assign]
    return reads


def test_admit_leaves_a_request_being_deleted_alone_and_makes_it_again_once_gone(api: Api) -> None:
    started(api, "n1")
    obj = api.request("n1")
    assert obj is not None
    obj["metadata"].update(deletionTimestamp="2027-01-15T08:00:00Z", finalizers=[FINALIZER, "example.com/other"])
    waiting = rolling(api, progress_after=3.0).admit("n1")
    assert waiting["admitted"] is False and api.request("n1") is obj, "no second request while the first is there"
    del api.objects[(NODE_MAINTENANCES.plural, NS, obj["metadata"]["name"])]
    api.hooks.append(lambda a: a.set_phase("n1", lc.PHASE_READY) if a.request("n1") else None)
    assert rolling(api).admit("n1", resume=waiting["resume"])["admitted"] is True, "requested again once gone"


def test_a_request_of_its_own_released_but_kept_by_another_finalizer_is_made_again_at_once(api: Api) -> None:
    started(api, "n1")
    old = api.request("n1")
    assert old is not None
    # the engine is done with it (its finalizer removed, the node uncordoned); only someone else's finalizer keeps it
    old["metadata"].update(deletionTimestamp="2027-01-15T08:00:00Z", finalizers=["example.com/other"])
    api.hooks.append(lambda a: a.set_phase("n1", lc.PHASE_READY) if a.request("n1") else None)
    assert rolling(api).admit("n1")["admitted"] is True
    again = [
        o
        for (plural, _ns, _name), o in api.objects.items()
        if plural == NODE_MAINTENANCES.plural and o["spec"]["nodeName"] == "n1" and o is not old
    ]
    assert [o["metadata"]["name"] for o in again] == [f"{REQUESTOR}-n1-2"], "requested again beside the kept one"
    step = rolling(api, release_timeout=5.0)
    assert step.release("n1", None)["released"] == ["n1"], "the old one, released already, is not waited for"
    assert api.record()["n1"]["state"] == core.DONE and step.requests.warnings == []


def test_a_restart_takes_a_held_request_it_joined_as_its_own_and_makes_none_beside_it(api: Api) -> None:
    other = {
        "metadata": {"name": "other-n1", "namespace": NS},
        "spec": {"nodeName": "n1", "requestorID": "other.example.com"},
    }
    api.add(NODE_MAINTENANCES, other)
    reconcile, _reads = builtin_with_lists(api, "n0", "n1")
    engine = rolling(api, engine="builtin", reconcile=reconcile).reconciler
    assert engine is not None and engine.run_pass().errors == []
    api.delete(NODE_MAINTENANCES, "other-n1", NS)  # its owner is done; the engine holds it for this run
    again = rolling(api, engine="builtin", reconcile=reconcile).start(["n0", "n1"], "release", False)
    assert {r["node"]: (r["action"], r["name"]) for r in again["requested"]}["n1"] == ("unchanged", f"{NS}/other-n1")
    assert not mine(api, "n1"), "no request of its own beside the held one (it would wait behind it)"
    assert rolling(api, engine="builtin", reconcile=reconcile).admit("n1")["admitted"] is True
    assert not mine(api, "n1")


def test_start_makes_a_request_under_another_name_while_its_own_of_that_name_is_being_deleted(api: Api) -> None:
    started(api, "n0", "n1")
    old = api.request("n1")
    assert old is not None
    old["metadata"].update(deletionTimestamp="2027-01-15T08:00:00Z", finalizers=["example.com/other"])
    result = started(api, "n0", "n1", spec={"cordon": False})  # e.g. the same run with another spec
    n1 = next(r for r in result["requested"] if r["node"] == "n1")
    assert n1["action"] == "created" and n1["name"] == f"{NS}/{REQUESTOR}-n1-2"
    assert sorted(o["metadata"]["name"] for o in mine(api, "n1")) == [f"{REQUESTOR}-n1", f"{REQUESTOR}-n1-2"]
    assert api.objects[(NODE_MAINTENANCES.plural, NS, f"{REQUESTOR}-n1")] is old, "the old one is left alone"


def test_a_request_whose_name_is_taken_meanwhile_is_made_under_the_next_free_name(api: Api) -> None:
    create = api.create
    raced: list[str] = []

    def racing_create(res: Any, body: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
        if res is NODE_MAINTENANCES and not raced:  # someone else made an object of that name just before
            raced.append(body["metadata"]["name"])
            FakeApi.create(
                api,
                res,
                {"metadata": {"name": body["metadata"]["name"]}, "spec": {"nodeName": "n3", "requestorID": "x"}},
                namespace,
            )
        return create(res, body, namespace)

    api.create = racing_create  # type: ignore[method-assign]
    result = started(api, "n0")
    assert raced == [f"{REQUESTOR}-n0"]
    assert result["requested"][0]["name"] == f"{NS}/{REQUESTOR}-n0-2" and mine(api, "n0")


def test_the_builtin_engine_fails_a_node_deleted_under_its_waiting_request_and_gives_the_request_back(
    api: Api,
) -> None:
    reconcile, _reads = builtin_with_lists(api, "n0", "n1")
    del api.objects[(NODES.plural, None, "n1")]  # its request stays, waiting for a node that is not there
    assert api.request("n1") is not None
    api.tick = 1.0  # admit looks at the Node of a request still waiting every few seconds
    result = rolling(api, engine="builtin", reconcile=reconcile, max_fail_percentage=50).admit("n1")
    assert result["admitted"] is False and result["failure"] == NODE_GONE and result["failed_nodes"] == ["n1"]
    assert api.request("n1") is None, "given back, and released by the engine (its node is gone)"


def test_a_gone_node_s_request_is_given_back_before_the_record_says_it_failed(api: Api) -> None:
    started(api, "n0", "n1")
    del api.objects[(NODES.plural, None, "n1")]
    api.set_phase("n1", lc.PHASE_PENDING)
    step = rolling(api, max_fail_percentage=50)
    save = step.save
    request_when_failed: list[Any] = []

    def killed_after_saving_the_failure(run: core.RunRecord, merge: bool = False) -> None:
        save(run, merge)
        if run.nodes["n1"].state == core.FAILED:
            request_when_failed.append(api.request("n1"))
            raise KeyboardInterrupt("killed")

    step.save = killed_after_saving_the_failure  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        step.admit("n1")
    assert request_when_failed == [None], "no request left behind for a node the record no longer waits for"


def test_with_the_operator_a_node_deleted_under_its_waiting_request_fails_at_its_admit(api: Api) -> None:
    started(api, "n0", "n1")
    del api.objects[(NODES.plural, None, "n1")]  # its request stays, Pending: the operator never admits it
    api.set_phase("n1", lc.PHASE_PENDING)
    result = rolling(api, max_fail_percentage=50).admit("n1")
    assert result["admitted"] is False and result["failure"] == NODE_GONE and result["failed_nodes"] == ["n1"]
    assert api.request("n1") is None and api.record()["n0"]["state"] == core.PENDING


def test_release_is_done_with_a_request_the_engine_keeps_for_another_requestor_that_joined_it(api: Api) -> None:
    reconcile, _reads = builtin_with_lists(api, "n0")
    assert rolling(api, engine="builtin", reconcile=reconcile).admit("n0")["admitted"] is True
    obj = api.request("n0")
    assert obj is not None
    obj["spec"]["additionalRequestors"] = ["other.example.com"]  # e.g. a firmware operator joined it
    api._bump(obj)
    step = rolling(api, engine="builtin", reconcile=reconcile, release_timeout=5.0)
    result = step.release("n0", None)
    assert result["released"] == ["n0"] and api.record()["n0"]["state"] == core.DONE
    assert [w for w in step.requests.warnings if w.startswith("n0: ")] == [
        f"n0: this run gave NodeMaintenance {NS}/{REQUESTOR}-n0 back, but it stays, and the node in maintenance, for "
        "the requestors that joined it (other.example.com) until they leave it"
    ]
    held = api.request("n0")
    assert held is not None and held["metadata"].get("deletionTimestamp"), "deleted, and kept for the other"
    assert api.objects[(NODES.plural, None, "n0")]["spec"].get("unschedulable") is True, "cordoned for the other"


def test_a_node_whose_own_request_is_kept_for_another_requestor_is_requested_again_beside_it(api: Api) -> None:
    started(api, "n1")
    old = api.request("n1")
    assert old is not None
    old["spec"]["additionalRequestors"] = ["other.example.com"]
    old["metadata"].update(deletionTimestamp="2027-01-15T08:00:00Z", finalizers=[FINALIZER])
    api.set_phase("n1", lc.PHASE_READY)  # drained: kept for the other requestor, for as long as it wants
    waiting = rolling(api, progress_after=3.0).admit("n1")
    assert waiting["admitted"] is False and "n1 waiting for the scheduler" in waiting["waiting"]["message"]
    again = [o for o in mine(api, "n1") if not o["metadata"].get("deletionTimestamp")]
    assert [o["metadata"]["name"] for o in again] == [f"{REQUESTOR}-n1-2"], "requested again, waiting behind it"


def test_a_request_of_its_own_being_deleted_is_named_as_such_while_the_node_waits(api: Api) -> None:
    api.tick = 5.0
    started(api, "n1")
    old = api.request("n1")
    assert old is not None
    old["metadata"].update(deletionTimestamp="2027-01-15T08:00:00Z", finalizers=[FINALIZER])
    waiting = rolling(api, progress_after=1.0).admit("n1")["waiting"]
    assert "n1 whose earlier request is still being deleted" in waiting["message"]
    with pytest.raises(RequestError) as info:
        rolling(api, wave_timeout=30.0).admit("n1")
    assert f"{NS}/{REQUESTOR}-n1 on n1: new (being deleted)" in info.value.msg and "gone" not in info.value.msg


# ============================================================================== at most once, with crashes
NODE_NAMES = ["n0", "n1", "n2"]
STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("start"), st.sets(st.sampled_from(NODE_NAMES), min_size=1)),
        st.tuples(st.just("admit"), st.sampled_from(NODE_NAMES)),
        st.tuples(st.just("release"), st.sampled_from(NODE_NAMES)),
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=40, deadline=None)
@given(STEPS, st.lists(st.one_of(st.none(), st.integers(1, 6)), min_size=12, max_size=12))
def test_property_no_node_is_handed_out_twice_whatever_step_is_killed(
    steps: list[tuple[str, Any]], crashes: list[int | None]
) -> None:
    api = Api()
    for name in NODE_NAMES:
        api.add(NODES, node(name))
    api.auto_ready = True
    handed: list[str] = []
    for (step, arg), crash in zip(steps, crashes, strict=False):
        api.crash_at = None
        states = {n: r.state for n, r in rolling(api).load().nodes.items()}
        api.crash_at = None if crash is None else api.write_count + crash
        engine = rolling(api, max_fail_percentage=100)
        try:
            if step == "start":
                engine.start(sorted(arg), "release", False)
            elif step == "admit" and arg in states:
                if engine.admit(arg)["admitted"]:
                    handed.append(arg)
            elif step == "release" and states.get(arg) == core.MAINTAINING:
                engine.release(arg, None)
        except Crash:
            pass
        api.crash_at = None
        assert len(handed) == len(set(handed)), handed
    if api.objects.get((CONFIGMAPS.plural, CFG, RECORD)):
        record = api.record()
        for name in handed:
            assert record[name]["state"] != core.PENDING and record[name]["wave"] is not None
