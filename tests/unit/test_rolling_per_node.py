"""One node at a time: core.admit and core.node_outcome, and Rolling.admit / Rolling.release against the in-memory
API, with many hosts of one run at the same time (threads) updating one record."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.maintenance import lifecycle as lc
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.maintenance import rolling as core
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.maintenance.window import parse_window
from ansible_collections.nodeops.maintenance.plugins.module_utils.engines import rolling as engine
from ansible_collections.nodeops.maintenance.plugins.module_utils.engines.maintenance import (
    ReconcileOptions,
    Reconciler,
)
from ansible_collections.nodeops.maintenance.plugins.module_utils.engines.requests import BELL_LOOK, RequestError
from ansible_collections.nodeops.maintenance.plugins.module_utils.engines.rolling import (
    FAILED_REASON,
    NODE_GONE,
    WAIT_ADMIT,
    WAIT_BACK,
)
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.client import (
    CONFIGMAPS,
    LEASES,
    MAINTENANCE_CONFIGS,
    NODE_MAINTENANCES,
    NODES,
)
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.errors import K8sError
from ansible_collections.nodeops.maintenance.plugins.plugin_utils import group_commit
from hypothesis import given, settings
from hypothesis import strategies as st
from unit.test_engine_maintenance import NS, node
from unit.test_rolling_engine import CFG, RECORD, RUN, Api, record_reads, rolling

NODES_OF_RUN = [f"n{i}" for i in range(8)]


@pytest.fixture
def api() -> Api:
    fake = Api()
    for name in NODES_OF_RUN:
        fake.add(NODES, node(name))
    return fake


def deferred(api: Api, *nodes: str, **options: Any) -> dict[str, Any]:
    return rolling(api, **options).start(list(nodes), "release", False, defer_requests=True)


# ================================================================================= core
def run_of(*nodes: str) -> core.RunRecord:
    run = core.RunRecord("r", "q")
    core.plan_start(run, list(nodes), 0.0)
    return run


def test_nodes_admitted_within_gather_seconds_of_a_batch_s_first_share_it() -> None:
    run = run_of("a", "b", "c", "d")
    assert core.admit(run, "a", 100.0, gather=30) == 1
    assert core.admit(run, "b", 130.0, gather=30) == 1
    assert core.admit(run, "c", 131.0, gather=30) == 2  # 31 s after the first of batch 1
    assert core.admit(run, "d", 140.0, gather=30) == 2
    assert [run.nodes[n].state for n in "abcd"] == [core.MAINTAINING] * 4
    assert run.nodes["c"].started == 131.0 and run.nodes["c"].ready == 131.0


def test_a_node_is_admitted_once_and_not_over_the_failure_budget() -> None:
    run = run_of("a", "b", "c")
    assert core.admit(run, "a", 1.0, gather=0) == 1
    assert core.admit(run, "a", 50.0, gather=0) is None and run.nodes["a"].started == 1.0  # not handed over again
    core.node_outcome(run, "a", "broken", 60.0)
    assert core.admit(run, "a", 70.0, gather=0) is None
    assert core.admit(run, "b", 70.0, gather=0, max_fail_percentage=30) is None  # 1 of 3 failed: over 30 %
    assert run.nodes["b"].state == core.PENDING
    assert core.admit(run, "b", 70.0, gather=0, max_fail_percentage=40) == 2
    with pytest.raises(core.RollingError, match="x is not a node of the run; a start step adds the targets first"):
        core.admit(run, "x", 70.0, gather=0)


def test_an_outcome_is_recorded_once_and_only_for_an_admitted_node() -> None:
    run = run_of("a", "b", "c")
    with pytest.raises(core.RollingError, match="b is pending; only an admitted node has an outcome"):
        core.node_outcome(run, "b", None, 5.0)
    core.admit(run, "a", 1.0, gather=0)
    core.admit(run, "c", 1.0, gather=0)
    assert core.node_outcome(run, "a", None, 5.0, (2.0, 4.0)) is True
    assert run.nodes["a"].state == core.MAINTAINING and run.nodes["a"].finished == 5.0
    assert (run.nodes["a"].began, run.nodes["a"].ended) == (2.0, 4.0)
    assert core.node_outcome(run, "a", None, 6.0) is False  # the same report again
    assert run.nodes["a"].state == core.MAINTAINING and run.nodes["a"].finished == 5.0
    assert core.node_outcome(run, "c", "disk full", 5.0) is True
    assert run.nodes["c"].state == core.FAILED and run.nodes["c"].message == "disk full"
    assert core.node_outcome(run, "c", "disk full", 7.0) is False


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.floats(0, 100)), max_size=30), st.floats(0, 40))
def test_batches_only_grow_and_each_node_is_admitted_once(steps: list[tuple[int, float]], gather: float) -> None:
    names = [f"m{i}" for i in range(6)]
    run = run_of(*names)
    now = 0.0
    batches: dict[str, int] = {}
    last = 0
    for index, delta in steps:
        now += delta
        name = names[index]
        batch = core.admit(run, name, now, gather)
        if name in batches:
            assert batch is None and run.nodes[name].wave == batches[name]
            continue
        assert batch is not None
        assert batch in (last, last + 1) and batch >= 1
        first = min(r.started for r in run.nodes.values() if r.wave == batch and r.started is not None)
        assert now - first <= gather or batch == last + 1
        batches[name], last = batch, batch
    assert sorted(run.in_state(core.MAINTAINING)) == sorted(batches)


# ================================================================================= engine
def test_a_deferred_start_requests_nothing_and_admit_makes_the_node_s_request(api: Api) -> None:
    result = deferred(api, "n0", "n1")
    assert result["requested"] == [] and result["pending"] == ["n0", "n1"] and api.requests() == []
    api.auto_ready = True
    admitted = rolling(api).admit("n0")
    assert admitted["changed"] is True and admitted["admitted"] is True and admitted["wave"] == 1
    assert api.request("n0") is not None and api.request("n1") is None
    assert api.record()["n0"]["state"] == core.MAINTAINING and api.record()["n1"]["state"] == core.PENDING
    again = rolling(api).admit("n0")  # its host asks again: the maintenance is not handed over twice
    assert again["changed"] is False and again["admitted"] is False and again["state"] == core.MAINTAINING


def test_admit_waits_for_the_scheduler_and_hands_the_wait_back_with_progress(api: Api) -> None:
    deferred(api, "n0")
    waiting = rolling(api, progress_after=3.0).admit("n0")
    assert waiting["admitted"] is False and waiting["resume"]["phase"] == WAIT_ADMIT
    assert "n0 waiting for the scheduler" in waiting["waiting"]["message"]
    assert api.record()["n0"]["state"] == core.PENDING
    api.set_phase("n0", lc.PHASE_READY)
    admitted = rolling(api, progress_after=3.0).admit("n0", resume=waiting["resume"])
    assert admitted["admitted"] is True and admitted["wave"] == 1


def test_admit_of_a_node_not_in_the_run_is_an_error(api: Api) -> None:
    deferred(api, "n0")
    with pytest.raises(RequestError, match="n5 is not a node of run"):
        rolling(api).admit("n5")


def test_admit_over_the_failure_budget_admits_nothing(api: Api) -> None:
    deferred(api, "n0", "n1")
    api.auto_ready = True
    rolling(api).admit("n0")
    rolling(api).release("n0", "broken")
    result = rolling(api).admit("n1")
    assert result["admitted"] is False and result["abort"] is True and api.request("n1") is None


def test_admit_that_times_out_gives_the_request_back(api: Api) -> None:
    deferred(api, "n0")
    with pytest.raises(RequestError, match=r"n0 .* did not become ready for its maintenance within 5s"):
        rolling(api, wave_timeout=5.0).admit("n0")
    assert api.request("n0") is None and api.record()["n0"]["state"] == core.PENDING


def test_admit_outside_the_window_stops_without_a_request(api: Api) -> None:
    deferred(api, "n0")
    closed = parse_window(None, "10:00", "11:00", "UTC")  # the fake clock is at 08:00 UTC
    result = rolling(api, window=closed).admit("n0")
    assert result["admitted"] is False and result["stopped"]["reason"] == "window"
    assert api.request("n0") is None and api.record()["n0"]["state"] == core.PENDING


def test_admit_of_a_node_deleted_during_the_run_fails_it(api: Api) -> None:
    deferred(api, "n0")
    del api.objects[(NODES.plural, None, "n0")]
    result = rolling(api).admit("n0")
    assert result["admitted"] is False and result["failure"] == NODE_GONE
    assert api.record()["n0"]["state"] == core.FAILED and api.request("n0") is None


def test_release_of_a_maintained_node_waits_for_ready_then_gives_the_request_back(api: Api) -> None:
    deferred(api, "n0")
    api.auto_ready = True
    rolling(api).admit("n0")
    api.set_node_ready("n0", False)
    waiting = rolling(api, progress_after=3.0).release("n0", None, (1.0, 2.0))
    assert waiting["resume"]["phase"] == WAIT_BACK and waiting["released"] == []
    assert api.record()["n0"]["state"] == core.MAINTAINING and api.request("n0") is not None
    api.set_node_ready("n0", True)
    done = rolling(api).release("n0", None, resume=waiting["resume"])
    assert done["released"] == ["n0"] and done["state"] == core.DONE and api.request("n0") is None
    assert rolling(api).release("n0", None)["changed"] is False


def test_release_of_a_failed_node_keeps_it_cordoned_with_requestor_failed(api: Api) -> None:
    deferred(api, "n0")
    api.auto_ready = True
    rolling(api).admit("n0")
    result = rolling(api).release("n0", "firmware flash failed")
    assert result["state"] == core.FAILED and result["failure"] == "firmware flash failed"
    assert result["released"] == [] and api.request("n0") is not None
    condition = api.condition("n0", lc.CONDITION_REQUESTOR_FAILED)
    assert condition is not None and condition["reason"] == FAILED_REASON


def test_a_release_before_admit_is_an_error_that_changes_nothing(api: Api) -> None:
    deferred(api, "n0")
    writes = api.write_count
    with pytest.raises(RequestError, match="n0 is pending; only an admitted node has an outcome"):
        rolling(api).release("n0", None)
    assert api.write_count == writes


def test_an_update_that_meets_conflicts_reads_again_and_keeps_the_others_rows(api: Api) -> None:
    deferred(api, "n0", "n1")
    api.auto_ready = True
    api.conflicts[(CONFIGMAPS.plural, RECORD)] = 3
    assert rolling(api).admit("n0")["admitted"] is True
    assert api.record()["n0"]["state"] == core.MAINTAINING


def test_an_update_that_always_meets_conflicts_gives_up_and_says_so(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    deferred(api, "n0")
    api.auto_ready = True
    api.conflicts[(CONFIGMAPS.plural, RECORD)] = 1000
    monkeypatch.setattr(engine, "UPDATE_BACKOFF", 0.0)
    with pytest.raises(
        RequestError, match=f"changed under each of {engine.UPDATE_ATTEMPTS} writes; nothing was written"
    ):
        rolling(api).admit("n0")
    assert api.record()["n0"]["state"] == core.PENDING


def test_hosts_admitting_and_releasing_at_once_lose_no_row_and_admit_each_node_once(api: Api) -> None:
    deferred(api, *NODES_OF_RUN)
    api.auto_ready = True
    admitted: list[dict[str, Any]] = []
    errors: list[BaseException] = []

    def host(name: str) -> None:
        try:
            mine = []
            for _attempt in range(2):  # the same host asks twice: one admission
                mine.append(rolling(api, max_fail_percentage=100).admit(name))
            admitted.extend(mine)
            if any(a["admitted"] for a in mine):  # only the host its node was handed to maintains and releases it
                rolling(api, max_fail_percentage=100).release(name, None if name != "n3" else "broken")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=host, args=(name,)) for name in NODES_OF_RUN * 2]  # two hosts per node
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == [] and not any(t.is_alive() for t in threads)
    assert all(a["admitted"] == a["changed"] for a in admitted)
    record = api.record()
    assert {n: record[n]["state"] for n in NODES_OF_RUN} == {
        n: core.FAILED if n == "n3" else core.DONE for n in NODES_OF_RUN
    }
    waves = {a["node"]: a["wave"] for a in admitted if a["admitted"]}
    assert all(record[n]["wave"] == w for n, w in waves.items())  # every answer names the batch on record
    assert sorted(a["node"] for a in admitted if a["admitted"]) == NODES_OF_RUN  # one admission each, one host
    assert {o["spec"]["nodeName"] for o in api.requests()} == {"n3"}
    assert api.obj(CONFIGMAPS, RECORD, CFG) is not None


def test_hosts_sharing_a_group_commit_have_each_change_applied_once_and_written_together(
    api: Api, tmp_path: Path
) -> None:
    """The action's hosts share one group commit per record (group_commit, tested on its own, grouping included):
    every node is admitted once and done, each change applied once by one holder, none left in the queue."""
    deferred(api, *NODES_OF_RUN)
    api.auto_ready = True
    group = group_commit.Group(str(tmp_path), f"{CFG}/{RECORD}")
    batches: list[int] = []
    admitted: list[str] = []

    def host(name: str) -> None:
        for step in ("admit", "release"):
            one = rolling(api, max_fail_percentage=100)

            def commit(change: dict[str, Any], apply: Any, wait: float | None = None) -> Any:
                def noting(changes: list[dict[str, Any]]) -> Any:
                    batches.append(len(changes))
                    return apply(changes)

                return group.commit(change, noting, group_commit.WAIT if wait is None else wait)

            one.commit = commit
            if step == "admit":
                if one.admit(name)["admitted"]:
                    admitted.append(name)
            else:
                one.release(name, None)

    threads = [threading.Thread(target=host, args=(name,), name=name) for name in NODES_OF_RUN]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    record = api.record()
    assert {n: record[n]["state"] for n in NODES_OF_RUN} == dict.fromkeys(NODES_OF_RUN, core.DONE)
    assert sorted(admitted) == NODES_OF_RUN
    # an admission, an outcome and a release a node, each applied by one holder
    assert sum(batches) == 3 * len(NODES_OF_RUN)
    assert not list(tmp_path.glob("*.d/*.op")) and not list(tmp_path.glob("*.d/*.taken"))


def test_a_group_of_changes_is_one_write_and_a_change_the_record_refuses_fails_alone(api: Api) -> None:
    deferred(api, "n0", "n1")
    api.auto_ready = True
    one = rolling(api)
    assert one.admit("n0")["admitted"] is True
    writes = api.write_count
    now = api.clock()
    run, results = one.apply_changes(
        [
            {"kind": "outcome", "node": "n0", "failure": None, "timing": None, "now": now},
            {"kind": "done", "node": "n1", "now": now},  # n1 is pending: refused
            {"kind": "stop", "stop": {"reason": engine.STOP_ASKED, "message": "m"}, "now": now},
        ]
    )
    assert api.write_count == writes + 1  # one write for the group
    assert results[0] == {"value": True, "wrote": True} and results[2]["wrote"] is True
    assert results[1] == {"error": f"Run {RUN!r}: n1 is pending; it cannot become done."}
    assert api.record()["n0"]["finished"] is not None and run.stopped is not None
    assert api.record()["n1"]["state"] == core.PENDING


def test_a_release_whose_holder_died_before_answering_still_ends_its_batch(api: Api) -> None:
    """The holder wrote the node's release and died before its answers: the node's own worker applies the change
    again, finds it on record and still reports the batch it ended (for the batch-end notification)."""
    deferred(api, "n0", "n1")
    api.auto_ready = True
    assert rolling(api).admit("n0")["admitted"] is True
    now = api.clock()
    rolling(api).apply_changes([{"kind": "outcome", "node": "n0", "failure": None, "timing": None, "now": now}])
    done = {"kind": "done", "node": "n0", "now": now + 1}
    holder = rolling(api).engine
    holder.apply_changes([{**done, "leave": True}])  # written; its answer never reached the worker
    worker = rolling(api).engine
    run, _value = worker._leave(done)
    assert worker.wrote is False and worker._ended == run.nodes["n0"].wave == 1


def test_a_stop_waits_for_the_group_commit_briefly_and_the_other_changes_their_turn(api: Api) -> None:
    """Hundreds of hosts may queue for the record; a stop does not queue behind the admissions it is to hold back:
    it waits for the group briefly (then writes alone), the other changes with the group's own wait."""
    deferred(api, "n0", "n1")
    waits: list[float | None] = []

    def commit(change: dict[str, Any], apply: Any, wait: float | None = None) -> None:
        waits.append(wait)
        return None  # no group: the change is applied alone

    api.auto_ready = True
    one = rolling(api)
    one.commit = commit
    assert one.admit("n0")["admitted"] is True
    assert waits and set(waits) == {None}, waits  # an admission: the group's own wait
    waits.clear()
    other = rolling(api)
    other.commit = commit
    assert other.stop("a fatal notification")["stopped"]["reason"] == engine.STOP_ASKED
    assert waits == [engine.STOP_WAIT]


def test_a_deferred_start_gives_back_a_request_an_admit_left_in_its_wait(api: Api) -> None:
    deferred(api, "n0", "n1")
    rolling(api).requests.present(["n0"])  # an admit killed after it made the request
    assert api.request("n0") is not None
    again = deferred(api, "n0", "n1")
    assert [(r["node"], r["action"]) for r in again["requested"]] == [("n0", "deleted")] and again["changed"] is True
    assert api.request("n0") is None and api.request("n1") is None
    assert deferred(api, "n0", "n1")["changed"] is False


# ================================================================================= the driver
def driven(api: Api, *nodes: str) -> ReconcileOptions:
    """A deferred run of ``nodes`` with the built-in engine, the limits letting all of them at once; its reconcile
    options. The fake clock moves on a little at each look (the driver's record reads are paced by it)."""
    limits = {"maxParallelOperations": len(nodes), "maxUnavailable": len(nodes)}
    api.add(MAINTENANCE_CONFIGS, {"metadata": {"name": "default", "namespace": NS}, "spec": limits})
    api.tick = 0.01
    reconcile = ReconcileOptions(namespace=NS, config_namespace=NS, lease_wait=0)
    deferred(api, *nodes, engine="builtin", reconcile=reconcile)
    return reconcile


def lease_holder(api: Api) -> str | None:
    lease = api.objects.get((LEASES.plural, NS, ReconcileOptions().lease_name))
    return None if lease is None else (lease.get("spec") or {}).get("holderIdentity")


def test_while_the_driver_runs_the_passes_the_nodes_steps_only_read_their_own_objects(api: Api) -> None:
    reconcile = driven(api, "n0", "n1")
    reads = record_reads(api, by_thread=True)
    driver_result: dict[str, Any] = {}
    driver = threading.Thread(
        target=lambda: driver_result.update(rolling(api, engine="builtin", reconcile=reconcile).drive()),
        name="driver",
    )
    driver.start()
    deadline = time.monotonic() + 30
    while not (lease_holder(api) or "").endswith(engine.DRIVER_SUFFIX):
        assert time.monotonic() < deadline, "the driver never took the Lease"
        threading.Event().wait(0.01)
    outcomes: dict[str, Any] = {}

    def host(name: str) -> None:
        admitted = rolling(api, engine="builtin", reconcile=reconcile).admit(name)
        assert admitted["admitted"] is True
        outcomes[name] = rolling(api, engine="builtin", reconcile=reconcile).release(name, None)

    hosts = [threading.Thread(target=host, args=(name,), name=f"host-{name}") for name in ("n0", "n1")]
    for thread in hosts:
        thread.start()
    for thread in [*hosts, driver]:
        thread.join(60)
        assert not thread.is_alive()
    assert {n: o["state"] for n, o in outcomes.items()} == {"n0": core.DONE, "n1": core.DONE}
    assert api.request("n0") is None and api.request("n1") is None
    # the driver ended by itself once no node was pending or maintaining, and gave its Lease back
    assert driver_result["complete"] is True and driver_result["passes"] >= 1 and lease_holder(api) is None
    for name in ("host-n0", "host-n1"):
        # no pass of their own (it reads the config) and no list of the Nodes; the requests listed only to make
        # the node's request and to give it back (and once before it is made: none under its name yet); each look
        # in the waits a GET of its own request or Node
        mine = reads[name]
        assert ("get", MAINTENANCE_CONFIGS.plural) not in mine and ("list", NODES.plural) not in mine
        assert mine.count(("list", NODE_MAINTENANCES.plural)) <= 3
        assert ("get", NODE_MAINTENANCES.plural) in mine and ("get", NODES.plural) in mine
    assert ("list", NODES.plural) in reads["driver"]


def test_without_a_live_driver_the_nodes_steps_run_the_passes_themselves(api: Api) -> None:
    reconcile = driven(api, "n0")
    # a driver that died holding the Lease: its hold ran out
    api.add(
        LEASES,
        {
            "metadata": {"name": reconcile.lease_name, "namespace": NS},
            "spec": {
                "holderIdentity": "gone-1-abc" + engine.DRIVER_SUFFIX,
                "leaseDurationSeconds": 60,
                "renewTime": "2020-01-01T00:00:00.000000Z",
            },
        },
    )
    admitted = rolling(api, engine="builtin", reconcile=reconcile).admit("n0")
    assert admitted["admitted"] is True
    assert rolling(api, engine="builtin", reconcile=reconcile).release("n0", None)["state"] == core.DONE
    assert api.request("n0") is None


def test_the_driver_stops_when_its_playbook_is_gone_and_gives_the_lease_back(api: Api) -> None:
    reconcile = driven(api, "n0")
    looks: list[int] = []

    def alive() -> bool:
        looks.append(1)
        return len(looks) < 5

    result = rolling(api, engine="builtin", reconcile=reconcile).drive(alive)
    assert result["complete"] is False and result["counts"]["pending"] == 1 and result["errors"] == []
    assert lease_holder(api) is None and api.request("n0") is None  # it requests nothing itself


def test_a_driver_of_the_operator_engine_does_nothing(api: Api) -> None:
    deferred(api, "n0")
    result = rolling(api).drive(lambda: True)
    assert result["passes"] == 0 and result["changed"] is False and lease_holder(api) is None


def test_holding_keeps_the_lease_from_pass_to_pass(api: Api) -> None:
    reconcile = driven(api, "n0")
    holder = Reconciler(api, ReconcileOptions(namespace=NS, config_namespace=NS, lease_wait=0))  # type: ignore[arg-type]
    other = Reconciler(api, ReconcileOptions(namespace=NS, config_namespace=NS, lease_wait=0))  # type: ignore[arg-type]
    with holder.holding() as held:
        assert held
        first = api.objects[(LEASES.plural, NS, reconcile.lease_name)]["spec"]["acquireTime"]
        assert holder.run_pass().busy is False and holder.run_pass().busy is False
        assert api.objects[(LEASES.plural, NS, reconcile.lease_name)]["spec"]["acquireTime"] == first
        assert lease_holder(api) == holder.lease.identity
        assert other.run_pass().busy is True  # the others wait their turn while it holds
    assert lease_holder(api) is None
    assert other.run_pass().busy is False


# ================================================================================= admission batches
def test_a_batch_whose_nodes_all_left_their_maintenance_takes_no_new_node() -> None:
    run = run_of("a", "b", "c")
    assert core.admit(run, "a", 100.0, gather=30) == 1
    assert not core.batch_ended(run, 1)
    core.node_outcome(run, "a", None, 101.0)
    core.mark_done(run, "a", 102.0)
    assert core.batch_ended(run, 1)
    assert core.admit(run, "b", 103.0, gather=30) == 2  # within 30 s of batch 1's first, but batch 1 ended
    assert core.batch_of(run, 1) == (["a"], {})


def test_the_admission_that_opens_a_batch_and_the_release_that_ends_it_say_so(api: Api) -> None:
    deferred(api, "n0", "n1")
    api.auto_ready = True
    first = rolling(api, gather=1000.0).admit("n0")
    second = rolling(api, gather=1000.0).admit("n1")
    assert (first["opened"], first["wave"]) == (True, 1) and (second["opened"], second["wave"]) == (False, 1)
    assert rolling(api).admit("n1")["opened"] is False  # admitted already: opens nothing
    failed = rolling(api).release("n1", "disk full")
    assert failed["batch_ended"] is None and failed["wave"] == 1  # n0 is still in its maintenance
    done = rolling(api).release("n0", None)
    assert done["batch_ended"] == {"wave": 1, "nodes": ["n0", "n1"], "failures": {"n1": "disk full"}}
    assert rolling(api).release("n0", None)["batch_ended"] is None  # said once


def test_exactly_one_release_ends_a_batch_when_its_hosts_release_at_once(api: Api) -> None:
    deferred(api, *NODES_OF_RUN)
    api.auto_ready = True
    for name in NODES_OF_RUN:
        assert rolling(api, gather=1000.0).admit(name)["wave"] == 1
    ended: list[dict[str, Any]] = []
    lock = threading.Lock()

    def host(name: str) -> None:
        result = rolling(api).release(name, None)
        if result["batch_ended"] is not None:
            with lock:
                ended.append(result["batch_ended"])

    threads = [threading.Thread(target=host, args=(name,)) for name in NODES_OF_RUN]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
        assert not thread.is_alive()
    assert ended == [{"wave": 1, "nodes": sorted(NODES_OF_RUN), "failures": {}}]


def test_a_release_without_the_tasks_own_span_counts_from_the_admission(api: Api) -> None:
    deferred(api, "n0")
    api.auto_ready = True
    rolling(api).admit("n0")
    started = api.record()["n0"]["started"]
    rolling(api).release("n0", None)
    row = api.record()["n0"]
    assert row["began"] == started and row["began"] <= row["ended"] <= row["finished"]


# ================================================================================= a failed release, a stopped run
def test_a_release_that_failed_after_recording_success_is_tried_again_by_the_next_release(api: Api) -> None:
    deferred(api, "n0")
    api.auto_ready = True
    rolling(api).admit("n0")
    api.set_node_ready("n0", False)
    waiting = rolling(api, progress_after=3.0).release("n0", None)  # success on record, not released yet
    assert waiting["resume"]["phase"] == WAIT_BACK and api.record()["n0"]["finished"] is not None
    api.set_node_ready("n0", True)
    again = rolling(api).release("n0", "its host left the play")  # the outcome on record stands
    assert again["state"] == core.DONE and again["released"] == ["n0"] and api.request("n0") is None


def test_a_stop_is_kept_in_the_record_the_first_stays_and_a_start_clears_it() -> None:
    run = run_of("a")
    blockers = [{"gate": "pods", "message": f"pod {i}"} for i in range(9)]
    first = core.record_stop(run, {"reason": "gate", "message": "blocked", "blockers": blockers}, 10.0)
    assert core.record_stop(run, {"reason": "timeout", "message": "later"}, 20.0) == first
    assert first["reason"] == "gate" and len(first["blockers"]) == core.STOP_BLOCKERS_KEPT
    again = core.RunRecord.from_data(run.to_data(), "r", "q")
    assert again.stopped == first
    core.plan_start(again, ["a"], 30.0)
    assert again.stopped is None and "stopped" not in json.loads(again.to_data()[core.RUN_KEY])
    broken = {**run.to_data(), core.RUN_KEY: json.dumps({"runID": "r", "requestor": "q", "stopped": "yes"})}
    with pytest.raises(core.RollingError, match="stop has the wrong shape"):
        core.RunRecord.from_data(broken, "r", "q")


def test_admit_of_a_stopped_run_admits_nothing_gives_the_request_back_and_a_start_goes_on(api: Api) -> None:
    deferred(api, "n0", "n1")
    rolling(api).requests.present(["n1"])  # left by an admit that was killed in its wait
    stopped = rolling(api).stop("the webhook is down")
    assert stopped["changed"] is True and stopped["stopped"]["reason"] == engine.STOP_ASKED
    assert rolling(api).stop("again")["changed"] is False  # the first stop stays
    api.auto_ready = True
    result = rolling(api).admit("n1")
    assert result["admitted"] is False and result["stopped"]["message"] == "the webhook is down"
    assert api.request("n1") is None and api.record()["n1"]["state"] == core.PENDING
    assert rolling(api).summary()["stopped"]["reason"] == engine.STOP_ASKED
    deferred(api, "n0", "n1")  # the same command again
    assert rolling(api).summary()["stopped"] is None
    assert rolling(api).admit("n0")["admitted"] is True


def test_an_admit_waiting_for_its_turn_stops_when_another_step_stops_the_run(api: Api) -> None:
    deferred(api, "n0")
    looks: list[int] = []

    def stop_later(fake: Api) -> None:  # the run is stopped while n0 waits in the scheduler's queue
        looks.append(1)
        if len(looks) == 3:
            rolling(fake).stop("a fatal notification")

    api.hooks.append(stop_later)
    result = rolling(api, wave_timeout=3600.0).admit("n0")
    assert result["admitted"] is False and result["stopped"]["reason"] == engine.STOP_ASKED
    assert api.request("n0") is None and api.record()["n0"]["state"] == core.PENDING
    assert len(looks) < 50  # it read the record within NODE_LOOK, not at its timeout


def test_an_admit_waiting_for_its_turn_looks_for_a_stop_in_the_records_metadata(api: Api) -> None:
    """Hundreds of hosts wait at once and the record of thousands of nodes is large: a waiting step reads the
    record's metadata to see whether the run stopped, and the whole record only once it has."""
    deferred(api, "n0")
    looks: list[int] = []

    def stop_later(fake: Api) -> None:
        looks.append(1)
        if len(looks) == 100:
            rolling(fake).stop("a fatal notification")

    api.hooks.append(stop_later)
    step = rolling(api, wave_timeout=3600.0)
    reads = record_reads(api)[""]
    result = step.admit("n0")
    assert result["stopped"]["reason"] == engine.STOP_ASKED
    by_verb = [verb for verb, plural in reads if plural == CONFIGMAPS.plural]
    assert by_verb.count("get_metadata") >= 3, by_verb  # looked several times while it waited
    # the step's first reads, then the stop's (the stop itself, and the step's: the stop seen, the record as it
    # is, its update) and no more
    assert by_verb.count("get") <= 6, by_verb
    assert api.objects[(CONFIGMAPS.plural, CFG, RECORD)]["metadata"]["annotations"][engine.STOPPED_ANNOTATION]


def test_a_start_clears_the_stop_from_the_records_metadata(api: Api) -> None:
    deferred(api, "n0")
    rolling(api).stop("a fatal notification")
    assert rolling(api).stopped_on_record() is not None
    rolling(api).start(["n0"], "release", False)
    annotations = api.objects[(CONFIGMAPS.plural, CFG, RECORD)]["metadata"]["annotations"]
    assert annotations[engine.STOPPED_ANNOTATION] == "" and rolling(api).stopped_on_record() is None
    del annotations[engine.STOPPED_ANNOTATION]  # a record of an earlier version: read whole
    assert rolling(api).stopped_on_record() is None


def test_an_admit_that_gets_no_slot_in_time_stops_the_run_for_the_nodes_after_it(api: Api) -> None:
    deferred(api, "n0", "n1")
    with pytest.raises(RequestError, match=r"n0 .* did not become ready for its maintenance within 5s"):
        rolling(api, wave_timeout=5.0).admit("n0")
    stop = rolling(api).summary()["stopped"]
    assert stop["reason"] == engine.STOP_TIMEOUT and "run the same command again" in stop["message"]
    writes = api.write_count
    result = rolling(api, wave_timeout=3600.0).admit("n1")  # not another timeout of its own
    assert result["admitted"] is False and result["stopped"] == stop
    assert api.request("n1") is None and api.write_count == writes


def test_an_admit_whose_node_is_stuck_in_its_drain_times_out_alone(api: Api) -> None:
    deferred(api, "n0", "n1")

    def draining(fake: Api) -> None:
        if fake.request("n0") is not None and not fake.condition("n0", "Ready"):
            fake.set_phase("n0", lc.PHASE_DRAINING)

    api.hooks.append(draining)
    with pytest.raises(RequestError, match="did not become ready"):
        rolling(api, wave_timeout=5.0).admit("n0")
    assert rolling(api).summary()["stopped"] is None and api.request("n0") is None


def test_an_admit_that_fails_in_its_wait_gives_its_request_back(api: Api) -> None:
    deferred(api, "n0")
    failures: list[int] = []

    def api_away_once(fake: Api) -> None:
        if fake.request("n0") is not None and not failures:
            failures.append(1)
            raise K8sError("the API server went away")

    api.hooks.append(api_away_once)
    with pytest.raises(K8sError, match="went away"):
        rolling(api).admit("n0")
    assert failures and api.request("n0") is None and api.record()["n0"]["state"] == core.PENDING


def test_a_stopped_run_s_driver_ends_with_its_last_release_and_leaves_other_namespaces_alone(api: Api) -> None:
    reconcile = driven(api, "n0", "n1")
    assert rolling(api, engine="builtin", reconcile=reconcile).admit("n0")["admitted"] is True
    rolling(api).stop("stopped after the first admission")  # n1 is never admitted now
    other = {
        "apiVersion": NODE_MAINTENANCES.api_version,
        "kind": NODE_MAINTENANCES.kind,
        "metadata": {"name": "other-n5", "namespace": "elsewhere"},
        "spec": {"nodeName": "n5", "requestorID": "someone.else.io", "cordon": True},
    }
    api.add(NODE_MAINTENANCES, other)
    result: dict[str, Any] = {}
    driver = threading.Thread(
        target=lambda: result.update(rolling(api, engine="builtin", reconcile=reconcile).drive(lambda: True))
    )
    driver.start()
    deadline = time.monotonic() + 30
    while not (lease_holder(api) or "").endswith(engine.DRIVER_SUFFIX):
        assert time.monotonic() < deadline, "the driver never took the Lease"
        threading.Event().wait(0.01)
    assert driver.is_alive()  # n0 is still in its maintenance
    assert rolling(api, engine="builtin", reconcile=reconcile).release("n0", None)["state"] == core.DONE
    driver.join(60)
    assert not driver.is_alive(), "the driver of a stopped run did not end with its last release"
    assert result["passes"] >= 1 and result["complete"] is False and lease_holder(api) is None
    assert api.request("n1") is None and api.record()["n1"]["state"] == core.PENDING
    # a namespace of another config is not this driver's
    assert not (api.objects[(NODE_MAINTENANCES.plural, "elsewhere", "other-n5")].get("status") or {}).get("conditions")


def test_a_driver_hands_the_lease_to_the_driver_of_another_namespace_s_run_of_its_config_that_asks(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its passes serve its own namespace only: holding the Lease until its run ends would keep the other run's
    nodes waiting for as long."""
    monkeypatch.setattr(engine, "DRIVER_HOLD", 0.2)  # on the fake clock: a few passes
    mine = replace(driven(api, "n0"), lease_wait=1)
    api.add(MAINTENANCE_CONFIGS, {"metadata": {"name": "default", "namespace": NS}, "spec": {"maxUnavailable": 2}})
    theirs = ReconcileOptions(namespace="elsewhere", config_namespace=NS, lease_wait=1)
    # the hand-over takes real time (the Lease's clock), which the fake clock's wave_timeout must not run out first
    other_run = {
        "run_id": "other",
        "namespace": "elsewhere",
        "engine": "builtin",
        "reconcile": theirs,
        "wave_timeout": 1e9,
    }
    deferred(api, "n1", **other_run)
    results: dict[str, dict[str, Any]] = {}
    playbook_gone = threading.Event()

    def drive(name: str, **options: Any) -> threading.Thread:
        def run() -> None:
            results[name] = rolling(api, **options).drive(lambda: not playbook_gone.is_set())

        thread = threading.Thread(target=run, name=f"driver-{name}")
        thread.start()
        return thread

    drivers = [drive("mine", engine="builtin", reconcile=mine)]
    try:
        assert rolling(api, engine="builtin", reconcile=mine).admit("n0")["admitted"] is True  # its driver goes on
        drivers.append(drive("theirs", **other_run))
        admitted: list[Any] = []

        def other_host() -> None:
            try:
                admitted.append(rolling(api, **other_run).admit("n1"))
            except RequestError as exc:  # no slot came for it: this run's driver kept the Lease
                admitted.append(exc)

        host = threading.Thread(target=other_host)
        host.start()
        host.join(60)
        assert not host.is_alive(), "the other run's node waited for this run's driver to end"
        assert isinstance(admitted[0], dict) and admitted[0]["admitted"] is True, admitted
        assert rolling(api, **other_run).release("n1", None)["state"] == core.DONE
        assert rolling(api, engine="builtin", reconcile=mine).release("n0", None)["state"] == core.DONE
    except BaseException:
        playbook_gone.set()  # a failure above: end the drivers, not the test run
        raise
    finally:
        for thread in drivers:
            thread.join(60)
    assert results["mine"]["complete"] is True and results["theirs"]["complete"] is True
    assert results["theirs"]["passes"] >= 1  # its driver had a turn: not only its node's own passes


def test_a_host_whose_node_another_host_admitted_and_released_meanwhile_makes_no_request_again(api: Api) -> None:
    deferred(api, "n0")
    other_host: list[dict[str, Any]] = []

    def admitted_and_released_by_another_host(fake: Api) -> None:
        if other_host:  # once, and not from within its own steps
            return
        other_host.append({})
        fake.auto_ready = True
        other_host[0] = rolling(fake).admit("n0")
        rolling(fake).release("n0", None)
        fake.auto_ready = False

    api.hooks.append(admitted_and_released_by_another_host)
    result = rolling(api).admit("n0")  # its first look runs the other host's admission and release
    assert other_host[0]["admitted"] is True and api.record()["n0"]["state"] == core.DONE
    assert result["admitted"] is False and result["state"] == core.DONE
    assert api.requests() == []


def test_a_node_s_step_does_not_wait_for_the_lease_and_leaves_the_run_s_options_as_they_were(api: Api) -> None:
    reconcile = driven(api, "n0")
    shared = ReconcileOptions(namespace=NS, config_namespace=NS, lease_wait=30.0)
    step = rolling(api, engine="builtin", reconcile=shared)
    assert step.admit("n0")["admitted"] is True
    assert shared.lease_wait == 30.0  # the caller's options, unchanged
    assert step.reconciler is not None and step.reconciler.options.lease_wait == 0.0
    assert reconcile.lease_wait == 0


# ================================================================================= the doorbell
class DriverBell:
    """A bell (requests.Bell) whose driver is the test: each wait of a step runs one pass of the driver's
    reconciler, in a thread of its own named "driver", which rings for the requests it moved; ``ringing=False``
    loses every ring."""

    def __init__(self, driver: Reconciler, ringing: bool = True) -> None:
        self.driver = driver
        self.rings: dict[str, int] = {}
        self.waits: list[tuple[tuple[str, ...], tuple[int, ...], float, tuple[int, ...]]] = []
        if ringing:
            driver.on_moved = self.ring

    def ring(self, node: str) -> None:
        self.rings[node] = self.rings.get(node, 0) + 1

    def beating(self, holding: Any = None) -> Any:
        return contextlib.nullcontext()

    def live(self) -> bool:
        return True

    def state(self, nodes: Any) -> tuple[int, ...]:
        return tuple(self.rings.get(n, 0) for n in nodes)

    def wait(self, nodes: Any, state: tuple[int, ...], seconds: float) -> bool:
        now = self.state(nodes)  # what the step's look saw, when nothing rang in between
        driver = threading.Thread(target=self.driver.run_pass, name="driver")
        driver.start()
        driver.join(60)
        self.waits.append((tuple(nodes), state, seconds, now))
        return self.state(nodes) != state


def test_with_a_live_bell_a_waiting_step_runs_no_pass_and_looks_when_it_rings(api: Api) -> None:
    reconcile = driven(api, "n0")
    bell = DriverBell(Reconciler(api, reconcile))  # type: ignore[arg-type]
    reads = record_reads(api, by_thread=True)
    step = rolling(api, engine="builtin", reconcile=reconcile)
    step.engine.bell = bell
    admitted = step.admit("n0")
    assert admitted["admitted"] is True
    mine = reads[threading.current_thread().name]
    # no pass of its own (a pass reads the Lease and the config) while the driver's heartbeat is live
    assert ("get", LEASES.plural) not in mine and ("get", MAINTENANCE_CONFIGS.plural) not in mine
    assert ("list", NODES.plural) in reads["driver"]
    # each wait is given the bell as it was before the look it follows (a ring during the look is not lost), and
    # lasts BELL_LOOK at most; one look of its request per wait, and the pass that made it ready rang for it
    assert bell.waits and all(w[1] == w[3] and 0 < w[2] <= BELL_LOOK for w in bell.waits)
    # (the looks before its request is made, and right after, are of their own)
    assert mine.count(("get", NODE_MAINTENANCES.plural)) <= len(bell.waits) + 3
    assert bell.rings["n0"] >= 1


def test_a_bell_that_never_rings_costs_a_look_every_bell_look_not_the_admission(api: Api) -> None:
    reconcile = driven(api, "n0")
    bell = DriverBell(Reconciler(api, reconcile), ringing=False)  # type: ignore[arg-type]
    step = rolling(api, engine="builtin", reconcile=reconcile)
    step.engine.bell = bell
    assert step.admit("n0")["admitted"] is True
    assert bell.rings == {} and bell.waits
    release = rolling(api, engine="builtin", reconcile=reconcile)
    release.engine.bell = bell
    admission_waits = len(bell.waits)
    assert release.release("n0", None)["state"] == core.DONE  # its give-back waited on the bell as well
    assert api.request("n0") is None and len(bell.waits) > admission_waits


def test_a_pass_rings_for_the_requests_it_changed_and_not_for_those_it_left_as_they_were(api: Api) -> None:
    reconcile = driven(api, "n0", "n1", "n2")
    api.objects[(MAINTENANCE_CONFIGS.plural, NS, "default")]["spec"]["maxParallelOperations"] = 1
    step = rolling(api, engine="builtin", reconcile=reconcile)
    step.engine.requests.present(["n0", "n1", "n2"], checked=True)
    driver = Reconciler(api, reconcile)  # type: ignore[arg-type]
    rung: list[str] = []
    driver.on_moved = rung.append
    driver.run_pass()  # each new request gets its status (one of them Ready)
    assert sorted(rung) == ["n0", "n1", "n2"]
    ready = [n for n in ("n0", "n1", "n2") if lc.NodeMaintenanceView.from_dict(api.request(n)).phase == "Ready"]
    assert len(ready) == 1
    rung.clear()
    driver.run_pass()
    assert rung == []  # nothing changed: nothing rings
    step.engine.requests.absent(ready)  # its host gives it back
    driver.run_pass()
    # the released one (gone), and the one scheduled in the slot it freed; the third still waits its turn,
    # unchanged, and rings nothing
    assert rung[0] == ready[0] and len(rung) == 2 and rung[1] not in ready
    assert lc.NodeMaintenanceView.from_dict(api.request(rung[1])).phase == "Ready"


def test_a_ring_during_a_step_s_look_ends_the_wait_after_it(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    reconcile = driven(api, "n0")
    bell = DriverBell(Reconciler(api, reconcile), ringing=False)  # type: ignore[arg-type]
    getting = api.get

    def ringing_get(res: Any, name: str, namespace: str | None = None) -> dict[str, Any]:
        if res is NODE_MAINTENANCES:  # the driver rings while the step reads its request
            bell.ring("n0")
        return getting(res, name, namespace)

    monkeypatch.setattr(api, "get", ringing_get)
    step = rolling(api, engine="builtin", reconcile=reconcile)
    step.engine.bell = bell
    assert step.admit("n0")["admitted"] is True
    # each wait was given the bell as it was before the look, so the ring during the look shows in it: the wait
    # ends at once instead of waiting out BELL_LOOK
    assert bell.waits and all(w[3] != w[1] for w in bell.waits)
