"""core/maintenance/rolling.py: the record of a rolling run, admissions, outcomes, the fail budget, the summary."""

from __future__ import annotations

import contextlib
import json
import re
from fractions import Fraction
from typing import Any

import pytest
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.maintenance import lifecycle as lc
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.maintenance import rolling as core
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z
RUN = "chg-1234"
REQUESTOR = "upgrades.example.com"

ACTIVE = sorted(lc.ACTIVE_PHASES)  # Scheduled, Cordon, WaitForPodCompletion, Draining
DRAINED = [lc.PHASE_READY, lc.PHASE_REQUESTOR_FAILED]
NOT_ADMITTED: list[str | None] = [None, "", lc.PHASE_PENDING]
ALL_PHASES: list[str | None] = [*NOT_ADMITTED, *ACTIVE, *DRAINED]

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

FAST = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def new_run(*nodes: str, now: float = NOW) -> core.RunRecord:
    run = core.RunRecord(RUN, REQUESTOR)
    core.plan_start(run, list(nodes), now)
    return run


def roundtrip(run: core.RunRecord) -> core.RunRecord:
    return core.RunRecord.from_data(run.to_data(), run.run_id, run.requestor)


def in_wave(run: core.RunRecord, *nodes: str, now: float = NOW) -> int:
    """Admit pending ``nodes`` together in a new admission batch (``core.admit``: the first opens it, the others
    join it); its number."""
    batches = {core.admit(run, node, now, gather=-1.0 if i == 0 else float("inf")) for i, node in enumerate(nodes)}
    assert len(batches) == 1 and None not in batches, batches
    return batches.pop()  # type: ignore[return-value]


# ============================================================================== the record (storage)
def test_a_record_round_trips_through_configmap_data() -> None:
    run = new_run("n0", "n1", "n2")
    run.nodes["n0"].admitted = NOW + 1.25
    run.nodes["n0"].ready = NOW + 2.5
    in_wave(run, "n0", now=NOW + 3)
    core.mark_failed(run, "n0", "firmware update failed", NOW + 4.125)
    data = run.to_data()
    assert set(data) == {core.RUN_KEY, core.STATE_KEY}
    assert all(isinstance(v, str) for v in data.values())
    back = core.RunRecord.from_data(data, RUN, REQUESTOR)
    assert back == run
    assert back.to_data() == data


def test_the_stored_form_is_a_table_of_milliseconds_sorted_by_node() -> None:
    run = new_run("zeta", "alpha", now=NOW + 0.25)
    run.nodes["alpha"].admitted = NOW + 1.5
    data = run.to_data()
    assert json.loads(data[core.RUN_KEY]) == {
        "runID": RUN,
        "requestor": REQUESTOR,
        "started": "2027-01-15T08:00:00.250Z",
    }
    table = json.loads(data[core.STATE_KEY])
    assert table["format"] == core.RECORD_FORMAT and table["columns"] == list(core.COLUMNS)
    assert table["base"] == 1_800_000_000_250  # the earliest time, in milliseconds since the epoch
    rows = [dict(zip(table["columns"], row, strict=True)) for row in table["rows"]]
    assert [r["node"] for r in rows] == ["alpha", "zeta"]
    assert rows[0]["requested"] == 0 and rows[0]["admitted"] == 1250 and rows[0]["ready"] is None
    assert rows[0]["state"] == core.PENDING and rows[0]["wave"] is None
    assert data[core.STATE_KEY].count("\n") == 3  # one row a line, for people reading it with kubectl
    # as people and tools see it, whatever the stored form
    assert core.stored_nodes(data)["alpha"]["admitted"] == "2027-01-15T08:00:01.500Z"


def test_a_record_in_the_first_form_is_still_read_so_an_earlier_run_goes_on() -> None:
    run = new_run("n0", "n1", now=NOW + 0.25)
    in_wave(run, "n0", now=NOW + 3)
    first_form = json.dumps([run.nodes[n].as_dict() for n in sorted(run.nodes)], sort_keys=True, indent=0)
    data = {**run.to_data(), core.STATE_KEY: first_form}
    back = core.RunRecord.from_data(data, RUN, REQUESTOR)
    assert back == run
    assert core.stored_nodes(data) == core.stored_nodes(run.to_data())


def test_a_record_of_2000_nodes_takes_less_than_a_quarter_of_a_configmap() -> None:
    run = new_run(*(f"ip-10-0-{i // 256}-{i % 256}.eu-west-1.compute.internal" for i in range(2000)))
    for index, name in enumerate(sorted(run.nodes)):
        record = run.nodes[name]
        start = NOW + 3600 * 10 + index  # ten hours into the run: eight-digit offsets
        record.admitted, record.ready, record.began, record.ended = start, start + 9.5, start + 11, start + 900
        record.finished, record.back = start + 901, start + 960
        core.admit(run, name, start + 10, gather=0)
        core.mark_done(run, name, start + 960)
    data = run.to_data()
    assert core.record_size(data) < core.RECORD_LIMIT // 4  # about 125 bytes a node (400 in the first form)
    core.check_size(data, len(run.nodes))
    core.check_capacity(run)
    assert core.RunRecord.from_data(data, RUN, REQUESTOR) == roundtrip(run)


def test_a_run_too_large_for_its_configmap_is_refused_at_the_start_saying_how_to_split_it() -> None:
    names = [f"gpu-node-{i:05d}.cluster-a.datacenter-east.example.com" for i in range(12_000)]
    run = new_run(*names)
    with pytest.raises(core.RollingError, match=r"split the targets into runs of at most about (\d+) nodes") as info:
        core.check_capacity(run)
    fit = int(re.search(r"at most about (\d+)", str(info.value)).group(1))  # type: ignore[union-attr]
    assert 5000 < fit < 12_000
    core.check_capacity(new_run(*names[:fit]))  # as many as it says do fit
    with pytest.raises(core.RollingError):
        core.check_capacity(new_run(*names[: fit + 200]))


def test_a_record_over_the_limit_is_an_error_before_it_is_written() -> None:
    run = new_run(*(f"n{i}" for i in range(3)))
    data = run.to_data()
    core.check_size(data, 3)
    with pytest.raises(core.RollingError, match=r"needs \d+ bytes, more than the 1048576 a ConfigMap holds"):
        core.check_size({**data, "padding": "x" * core.RECORD_LIMIT}, 3)


def test_a_long_message_is_cut_in_the_record() -> None:
    run = new_run("n0")
    in_wave(run, "n0")
    core.mark_failed(run, "n0", "x" * 5000, NOW + 1)
    stored = roundtrip(run).nodes["n0"].message
    assert len(stored) == core.MESSAGE_LIMIT and stored.endswith("...")
    assert run.nodes["n0"].message == "x" * 5000  # in memory (this step's request condition) it is whole


def test_a_time_that_rounds_up_to_the_next_second_carries_over() -> None:
    record = core.NodeRecord("n0", requested=NOW + 59.9996)
    assert record.as_dict()["requested"] == "2027-01-15T08:01:00.000Z"


@pytest.mark.parametrize("data", [None, {}])
def test_no_data_is_a_new_record(data: dict[str, str] | None) -> None:
    run = core.RunRecord.from_data(data, RUN, REQUESTOR)
    assert run == core.RunRecord(RUN, REQUESTOR)
    assert run.started is None and run.nodes == {} and run.last_wave == 0


def test_a_record_of_another_run_id_is_refused() -> None:
    data = core.RunRecord("chg-9", REQUESTOR).to_data()
    with pytest.raises(core.RollingError, match="belongs to run 'chg-9'"):
        core.RunRecord.from_data(data, RUN, REQUESTOR)


def test_a_record_of_another_requestor_is_refused() -> None:
    data = core.RunRecord(RUN, "other.example.com").to_data()
    with pytest.raises(core.RollingError, match=re.escape("started by requestor 'other.example.com'")):
        core.RunRecord.from_data(data, RUN, REQUESTOR)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ({core.RUN_KEY: "{not json"}, "not JSON"),
        ({core.STATE_KEY: "[1,"}, "not JSON"),
        ({core.RUN_KEY: "[]"}, "wrong shape"),
        ({core.STATE_KEY: "{}"}, "wrong shape"),
        ({core.STATE_KEY: "[42]"}, "not a node record"),
        ({core.STATE_KEY: '[{"state": "done"}]'}, "not a node record"),
        ({core.STATE_KEY: '[{"node": "n0", "state": "rebooting"}]'}, "unknown state 'rebooting'"),
        ({core.STATE_KEY: '{"format": 2, "columns": ["node"], "rows": []}'}, "wrong shape"),
        ({core.STATE_KEY: '{"format": 2, "columns": ["node", "state"], "base": 0, "rows": [["n0"]]}'}, "not a node"),
        ({core.STATE_KEY: '{"format": 2, "columns": ["node"], "base": 0, "rows": [[7]]}'}, "not a node record"),
    ],
)
def test_a_broken_record_is_an_error_not_a_new_run(data: dict[str, str], match: str) -> None:
    with pytest.raises(core.RollingError, match=match):
        core.RunRecord.from_data(data, RUN, REQUESTOR)


def test_a_node_record_reads_defaults_and_ignores_bad_times() -> None:
    record = core.NodeRecord.from_dict({"node": "n0", "ready": "yesterday", "wave": "2", "message": None})
    assert record == core.NodeRecord("n0")


def test_in_state_is_sorted_and_last_wave_is_the_highest() -> None:
    run = new_run("c", "a", "b", "d")
    assert run.in_state(core.PENDING) == ["a", "b", "c", "d"]
    assert run.last_wave == 0
    in_wave(run, "c")
    in_wave(run, "a", "b")
    assert run.in_state(core.MAINTAINING) == ["a", "b", "c"]
    assert run.in_state(core.PENDING, core.MAINTAINING) == ["a", "b", "c", "d"]
    assert run.last_wave == 2


times = st.one_of(st.none(), st.floats(min_value=0, max_value=4_000_000_000, allow_nan=False))
node_names = st.from_regex(r"[a-z][a-z0-9-]{0,8}", fullmatch=True)
node_records = st.builds(
    core.NodeRecord,
    node=node_names,
    state=st.sampled_from(core.STATES),
    wave=st.one_of(st.none(), st.integers(min_value=1, max_value=10_000)),
    requested=times,
    admitted=times,
    ready=times,
    started=times,
    finished=times,
    back=times,
    message=st.text(max_size=40),
)


@st.composite
def run_records(draw: st.DrawFn) -> core.RunRecord:
    records = draw(st.lists(node_records, max_size=6, unique_by=lambda r: r.node))
    run_id = draw(st.text(min_size=1, max_size=20))
    requestor = draw(st.text(max_size=20))
    return core.RunRecord(run_id, requestor, draw(times), {r.node: r for r in records})


def _close(a: float | None, b: float | None) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and abs(a - b) <= 0.0005 + 1e-6)


@FAST
@given(run_records())
def test_property_record_round_trips_through_to_data_and_from_data(run: core.RunRecord) -> None:
    data = run.to_data()
    back = core.RunRecord.from_data(data, run.run_id, run.requestor)
    assert back.run_id == run.run_id and back.requestor == run.requestor
    assert _close(back.started, run.started)
    assert set(back.nodes) == set(run.nodes)
    for name, record in run.nodes.items():
        got = back.nodes[name]
        assert (got.node, got.state, got.wave, got.message) == (record.node, record.state, record.wave, record.message)
        for key in ("requested", "admitted", "ready", "started", "finished", "back"):
            assert _close(getattr(got, key), getattr(record, key)), key  # milliseconds are kept
    # once stored, the form is stable: reading and writing again changes nothing
    assert back.to_data() == data
    assert core.RunRecord.from_data(back.to_data(), run.run_id, run.requestor) == back


# ============================================================================== record_name
def test_a_run_id_that_is_a_dns_label_is_used_as_it_is() -> None:
    assert core.record_name("chg-1234") == "nodeops-rolling-chg-1234"


@pytest.mark.parametrize("run_id", ["CHG-1234", "chg_1234", "chg 1234", "-chg-1234", "chg.1234", "Ärger", "x" * 48])
def test_a_run_id_that_had_to_change_gets_a_hash(run_id: str) -> None:
    name = core.record_name(run_id)
    assert DNS_LABEL.match(name) and len(name) <= 63
    assert re.search(r"-[0-9a-f]{10}$", name)
    assert name != "nodeops-rolling-chg-1234"


def test_run_ids_differing_only_in_case_or_punctuation_get_different_records() -> None:
    names = {core.record_name(r) for r in ("chg-1234", "CHG-1234", "Chg-1234", "chg_1234", "chg.1234", "chg 1234")}
    assert len(names) == 6


def test_the_longest_plain_run_id_fits_exactly() -> None:
    run_id = "a" * (63 - len(core.NAME_PREFIX))
    assert core.record_name(run_id) == core.NAME_PREFIX + run_id
    assert len(core.record_name(run_id + "a")) <= 63
    assert core.record_name(run_id + "a") != core.record_name(run_id + "b")


@pytest.mark.parametrize("run_id", ["", "   ", "\t\n"])
def test_an_empty_run_id_is_refused(run_id: str) -> None:
    with pytest.raises(core.RollingError, match="run ID is empty"):
        core.record_name(run_id)


run_ids = st.text(min_size=1, max_size=90).filter(lambda s: s.strip() != "")
label_like_ids = st.from_regex(r"[a-zA-Z0-9._ -]{1,70}", fullmatch=True).filter(lambda s: s.strip() != "")


@FAST
@given(st.one_of(run_ids, label_like_ids))
def test_property_record_name_is_a_dns1123_label_of_at_most_63(run_id: str) -> None:
    name = core.record_name(run_id)
    assert len(name) <= 63
    assert DNS_LABEL.match(name), name
    assert name.startswith(core.NAME_PREFIX)
    assert core.record_name(run_id) == name  # stable: the next run finds the same record


@FAST
@given(st.one_of(run_ids, label_like_ids), st.one_of(run_ids, label_like_ids))
def test_property_distinct_run_ids_give_distinct_names(a: str, b: str) -> None:
    if a != b:
        assert core.record_name(a) != core.record_name(b)
    else:
        assert core.record_name(a) == core.record_name(b)


@FAST
@given(label_like_ids)
def test_property_close_variants_of_a_run_id_do_not_share_a_record(run_id: str) -> None:
    variants = {run_id, run_id.lower(), run_id.upper(), run_id + "-", run_id.replace(" ", "-"), run_id + "1"}
    assert len({core.record_name(v) for v in variants}) == len(variants)


# ============================================================================== plan_start
def test_a_new_run_requests_every_target_once() -> None:
    run = core.RunRecord(RUN, REQUESTOR)
    plan = core.plan_start(run, ["n1", "n0", "n1"], NOW)
    assert run.started == NOW
    assert plan.added == plan.request == ["n1", "n0"]
    assert plan.release == plan.fail == plan.rerun == plan.finished == []
    assert run.nodes["n0"] == core.NodeRecord("n0", requested=NOW)


def test_a_restart_keeps_the_start_time_and_requests_only_the_unfinished() -> None:
    run = new_run("p", "d", "f", "i")
    in_wave(run, "d", "f", "i")
    core.mark_done(run, "d", NOW + 1)
    core.mark_failed(run, "f", "boom", NOW + 1)
    run.nodes["i"].state = core.INTERRUPTED
    core.mark_released(run, "i", NOW + 2)
    run = roundtrip(run)
    plan = core.plan_start(run, ["p", "d", "f", "i", "new"], NOW + 100)
    assert run.started == NOW
    assert plan.request == ["p", "new"]
    assert plan.added == ["new"]
    assert plan.finished == ["d", "f", "i"]
    assert plan.release == plan.fail == plan.rerun == []
    assert run.nodes["new"].requested == NOW + 100
    assert run.nodes["p"].requested == NOW  # first request time kept
    assert [run.nodes[n].state for n in ("d", "f", "i")] == [core.DONE, core.FAILED, core.INTERRUPTED]


def test_interrupted_release_records_the_node_as_interrupted() -> None:
    run = new_run("n0", "n1")
    in_wave(run, "n0", now=NOW + 5)
    plan = core.plan_start(run, ["n0", "n1"], NOW + 50, "release")
    assert plan.release == ["n0"] and plan.request == ["n1"] and plan.fail == plan.rerun == []
    record = run.nodes["n0"]
    assert record.state == core.INTERRUPTED and record.finished == NOW + 50 and record.wave == 1
    assert "released without running it again" in record.message


def test_the_default_interrupted_policy_is_release() -> None:
    run = new_run("n0")
    in_wave(run, "n0")
    assert core.plan_start(run, ["n0"], NOW + 1).release == ["n0"]


def test_interrupted_fail_marks_the_node_failed() -> None:
    run = new_run("n0")
    in_wave(run, "n0")
    plan = core.plan_start(run, ["n0"], NOW + 50, "fail")
    assert plan.fail == ["n0"] and plan.request == plan.release == plan.rerun == []
    assert run.nodes["n0"].state == core.FAILED and run.nodes["n0"].finished == NOW + 50
    assert "interrupted policy fail" in run.nodes["n0"].message


def test_interrupted_rerun_queues_the_node_again_with_a_clean_slate() -> None:
    run = new_run("n0")
    in_wave(run, "n0", now=NOW + 5)
    run.nodes["n0"].finished = NOW + 6
    plan = core.plan_start(run, ["n0"], NOW + 50, "rerun")
    assert plan.rerun == plan.request == ["n0"] and plan.release == plan.fail == []
    record = run.nodes["n0"]
    assert (record.state, record.wave, record.started, record.finished, record.back) == (
        core.PENDING,
        None,
        None,
        None,
        None,
    )
    assert record.message.startswith("interrupted")
    assert in_wave(run, "n0") == 1  # its wave number was given back


def test_failed_nodes_are_queued_again_only_with_retry_failed() -> None:
    run = new_run("n0")
    in_wave(run, "n0")
    core.mark_failed(run, "n0", "boom", NOW + 1)
    assert core.plan_start(run, ["n0"], NOW + 2).finished == ["n0"]
    assert run.nodes["n0"].state == core.FAILED
    plan = core.plan_start(run, ["n0"], NOW + 3, retry_failed=True)
    assert plan.rerun == plan.request == ["n0"]
    assert run.nodes["n0"].state == core.PENDING and run.nodes["n0"].message == "" and run.nodes["n0"].wave is None


def test_retry_failed_leaves_done_and_interrupted_alone() -> None:
    run = new_run("d", "i")
    in_wave(run, "d", "i")
    core.mark_done(run, "d", NOW)
    core.plan_start(run, ["i"], NOW + 1)  # i: interrupted
    core.mark_released(run, "i", NOW + 1)
    plan = core.plan_start(run, ["d", "i"], NOW + 2, "rerun", retry_failed=True)
    assert plan.finished == ["d", "i"] and plan.request == [] and plan.rerun == []


def test_an_unknown_interrupted_policy_is_refused_before_anything_changes() -> None:
    run = core.RunRecord(RUN, REQUESTOR)
    with pytest.raises(core.RollingError, match="release, rerun, fail"):
        core.plan_start(run, ["n0"], NOW, "ignore")
    assert run == core.RunRecord(RUN, REQUESTOR)


def test_an_interrupted_node_not_released_yet_is_released_by_the_next_start() -> None:
    run = new_run("n0")
    in_wave(run, "n0")
    core.plan_start(run, ["n0"], NOW + 10)  # interrupted, recorded; the run dies before the release
    run = roundtrip(run)
    assert run.nodes["n0"].state == core.INTERRUPTED and run.nodes["n0"].back is None
    plan = core.plan_start(run, ["n0"], NOW + 20)
    assert plan.release == ["n0"]


# ============================================================================== observe
def test_observe_notes_the_first_time_a_node_is_admitted_and_drained() -> None:
    run = new_run("n0", "n1", "n2", "n3")
    core.observe(run, {"n0": lc.PHASE_CORDON, "n1": lc.PHASE_READY, "n2": lc.PHASE_PENDING, "n3": None}, NOW + 10)
    assert (run.nodes["n0"].admitted, run.nodes["n0"].ready) == (NOW + 10, None)
    assert (run.nodes["n1"].admitted, run.nodes["n1"].ready) == (NOW + 10, NOW + 10)
    assert (run.nodes["n2"].admitted, run.nodes["n2"].ready) == (None, None)
    assert (run.nodes["n3"].admitted, run.nodes["n3"].ready) == (None, None)
    core.observe(run, {"n0": lc.PHASE_READY, "n1": lc.PHASE_READY, "n2": lc.PHASE_SCHEDULED}, NOW + 20)
    assert (run.nodes["n0"].admitted, run.nodes["n0"].ready) == (NOW + 10, NOW + 20)
    assert (run.nodes["n1"].admitted, run.nodes["n1"].ready) == (NOW + 10, NOW + 10)  # first time kept
    assert run.nodes["n2"].admitted == NOW + 20


@pytest.mark.parametrize("phase", ALL_PHASES)
def test_observe_sets_times_by_phase(phase: str | None) -> None:
    run = new_run("n0")
    core.observe(run, {"n0": phase}, NOW + 1)
    record = run.nodes["n0"]
    assert (record.admitted is not None) == (phase in lc.ACTIVE_PHASES or phase in DRAINED)
    assert (record.ready is not None) == (phase in DRAINED)


def test_observe_dates_an_admission_back_to_the_start_of_the_look_that_found_it() -> None:
    run = new_run("a", "b", "c")
    phases = {"a": lc.PHASE_READY, "b": lc.PHASE_CORDON, "c": lc.PHASE_PENDING}
    core.observe(run, phases, NOW + 10, since=NOW + 4)
    assert (run.nodes["a"].admitted, run.nodes["a"].ready) == (NOW + 4, NOW + 10)
    assert (run.nodes["b"].admitted, run.nodes["b"].ready) == (NOW + 4, None)
    assert run.nodes["c"].admitted is None
    core.observe(run, {"a": lc.PHASE_READY, "b": lc.PHASE_READY}, NOW + 20, since=NOW + 15)
    assert run.nodes["b"].admitted == NOW + 4 and run.nodes["b"].ready == NOW + 20  # the first admission kept
    run2 = new_run("d")
    core.observe(run2, {"d": lc.PHASE_SCHEDULED}, NOW + 10, since=NOW + 12)  # never after now
    assert run2.nodes["d"].admitted == NOW + 10


def test_observe_leaves_nodes_that_are_not_pending_alone() -> None:
    run = new_run("n0")
    in_wave(run, "n0")
    core.observe(run, {"n0": lc.PHASE_READY}, NOW + 1)
    assert run.nodes["n0"].admitted == NOW and run.nodes["n0"].ready == NOW  # as its admission noted them


# ============================================================================== outcomes
def test_mark_done_records_the_return_and_clears_the_message() -> None:
    run = new_run("a", "b")
    in_wave(run, "a", "b")
    run.nodes["a"].message = "something earlier"
    run.nodes["b"].message = "interrupted; queued again (interrupted policy rerun)"
    core.mark_done(run, "a", NOW + 9)
    core.mark_done(run, "b", NOW + 9)
    assert (run.nodes["a"].state, run.nodes["a"].back, run.nodes["a"].message) == (core.DONE, NOW + 9, "")
    assert run.nodes["b"].message.startswith("interrupted")  # a rerun stays visible in the summary


def test_mark_failed_keeps_the_time_the_tasks_reported() -> None:
    run = new_run("a", "b")
    in_wave(run, "a", "b")
    core.node_outcome(run, "a", None, NOW + 5)
    core.mark_failed(run, "a", "not Ready", NOW + 600)
    core.mark_failed(run, "b", "x", NOW + 600)
    assert (run.nodes["a"].state, run.nodes["a"].finished, run.nodes["a"].message) == (
        core.FAILED,
        NOW + 5,
        "not Ready",
    )
    run2 = new_run("c")
    core.mark_failed(run2, "c", "gone", NOW + 7)
    assert run2.nodes["c"].finished == NOW + 7


def test_mark_released_only_notes_the_return_of_an_interrupted_node() -> None:
    run = new_run("a")
    in_wave(run, "a")
    core.plan_start(run, ["a"], NOW + 1)
    core.mark_released(run, "a", NOW + 2)
    assert (run.nodes["a"].state, run.nodes["a"].back) == (core.INTERRUPTED, NOW + 2)


# ============================================================================== at most once (property)
OPS = st.one_of(
    st.tuples(st.just("phase"), st.integers(0, 4), st.sampled_from(ALL_PHASES)),
    st.tuples(st.just("tick"), st.floats(min_value=0, max_value=40)),
    st.tuples(st.just("admit"), st.integers(0, 4), st.floats(min_value=0, max_value=60)),
    st.tuples(st.just("outcome"), st.integers(0, 4), st.booleans(), st.booleans()),
    st.tuples(st.just("restart"), st.sets(st.integers(0, 4)), st.sampled_from(["release", "fail"])),
    st.tuples(st.just("reload")),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sets(st.integers(0, 4), min_size=1), st.lists(OPS, max_size=25))
def test_property_a_node_is_admitted_at_most_once(first: set[int], ops: list[tuple[Any, ...]]) -> None:
    """Any sequence of starts/restarts (policies release and fail, no retry), observations, admissions (of any node,
    in any state), outcomes (complete, or cut short by a crash before the node is back) and reloads from the stored
    form."""
    names = [f"n{i}" for i in range(5)]
    run = core.RunRecord(RUN, REQUESTOR)
    now = NOW
    phases: dict[str, str | None] = {}
    core.plan_start(run, [names[i] for i in sorted(first)], now)
    handed: dict[str, int] = {}

    for op in ops:
        kind = op[0]
        if kind == "phase":
            phases[names[op[1]]] = op[2]
        elif kind == "tick":
            now += op[1]
        elif kind == "admit" and names[op[1]] in run.nodes:
            node = names[op[1]]
            core.observe(run, phases, now)
            batch = core.admit(run, node, now, op[2])
            if batch is not None:
                handed[node] = handed.get(node, 0) + 1
                assert run.nodes[node].wave == batch and run.nodes[node].state == core.MAINTAINING
        elif kind == "outcome" and names[op[1]] in run.nodes:
            node = names[op[1]]
            if run.nodes[node].state != core.MAINTAINING:  # not admitted, or its outcome on record: no change
                before = run.to_data()
                with contextlib.suppress(core.RollingError):
                    assert core.node_outcome(run, node, None, now) is False
                assert run.to_data() == before
                continue
            core.node_outcome(run, node, "x" if op[2] else None, now)
            if op[3] and run.nodes[node].state == core.MAINTAINING:  # back; otherwise the run dies before
                core.mark_done(run, node, now)
        elif kind == "restart":
            run = roundtrip(run)
            core.plan_start(run, [names[i] for i in sorted(op[1])], now, op[2])
        elif kind == "reload":
            run = roundtrip(run)
        assert all(count == 1 for count in handed.values()), handed
        for node, record in run.nodes.items():
            # a node handed out never is pending again (no rerun, no retry_failed)
            assert (record.state == core.PENDING) == (node not in handed), (node, record)


# ============================================================================== the state machine
@pytest.mark.parametrize("before", core.STATES)
@pytest.mark.parametrize("after", core.STATES)
def test_move_allows_exactly_the_transitions_of_the_table(before: str, after: str) -> None:
    record = core.NodeRecord("a", state=before)
    if after == before or after in core.TRANSITIONS[before]:
        core.move(record, after)
        assert record.state == after
    else:
        with pytest.raises(core.RollingError, match=f"a is {before}; it cannot become {after}"):
            core.move(record, after)
        assert record.state == before


def test_done_is_final_and_only_a_maintained_node_is_done() -> None:
    run = new_run("a", "b")
    in_wave(run, "a")
    core.mark_done(run, "a", NOW)
    for step in (lambda: core.mark_done(run, "b", NOW), lambda: core.mark_failed(run, "a", "x", NOW)):
        before = run.to_data()
        with pytest.raises(core.RollingError):
            step()
        assert run.to_data() == before  # refused before anything changed


def test_a_release_that_finds_its_node_interrupted_by_a_restart_fails_instead_of_calling_it_done() -> None:
    run = new_run("a")
    in_wave(run, "a")
    core.plan_start(run, ["a"], NOW + 1)  # a restarted run: policy release
    with pytest.raises(core.RollingError, match="a is interrupted; it cannot become done"):
        core.mark_done(run, "a", NOW + 2)


MOVES = st.one_of(
    st.tuples(st.just("admit"), st.integers(0, 3), st.floats(min_value=-1, max_value=60)),
    st.tuples(st.just("outcome"), st.integers(0, 3), st.booleans()),
    st.tuples(st.just("done"), st.integers(0, 3)),
    st.tuples(st.just("fail"), st.integers(0, 3)),
    st.tuples(st.just("released"), st.integers(0, 3)),
    st.tuples(
        st.just("restart"), st.sets(st.integers(0, 3)), st.sampled_from(core.INTERRUPTED_POLICIES), st.booleans()
    ),
    st.tuples(st.just("reload")),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(MOVES, max_size=30))
def test_property_every_change_of_state_is_a_transition_of_the_table(ops: list[tuple[Any, ...]]) -> None:
    """Any sequence of the record's operations, each on any node in any state (starts with every policy and
    retry_failed, admissions, outcomes, a node marked done or failed, reloads): each state a node leaves for another
    is one the table allows, and an operation refused leaves the record as it was."""
    names = [f"n{i}" for i in range(4)]
    run = new_run(*names)
    now = NOW
    for op in ops:
        now += 1
        before = {n: r.state for n, r in run.nodes.items()}
        data = run.to_data()
        node = names[op[1]] if op[0] not in ("restart", "reload") else ""
        state = run.nodes[node].state if node else None
        # what must go through: a node's next step from the state it is in, and any start or reload
        expected = {
            "admit": state == core.PENDING,
            "outcome": state == core.MAINTAINING and run.nodes[node].finished is None,
            "done": state == core.MAINTAINING,
            "fail": state != core.DONE,
            "released": True,
            "restart": True,
            "reload": True,
        }[op[0]]
        try:
            if op[0] == "admit":
                core.admit(run, node, now, op[2])
            elif op[0] == "outcome":
                core.node_outcome(run, node, "x" if op[2] else None, now)
            elif op[0] == "done":
                core.mark_done(run, node, now)
            elif op[0] == "fail":
                core.mark_failed(run, node, "x", now)
            elif op[0] == "released":
                core.mark_released(run, node, now)
            elif op[0] == "restart":
                core.plan_start(run, [names[i] for i in sorted(op[1])], now, op[2], op[3])
            else:
                run = roundtrip(run)
        except core.RollingError:
            assert not expected, (op, state)
            assert run.to_data() == data
            continue
        for name, record in run.nodes.items():
            was = before[name]
            assert record.state == was or record.state in core.TRANSITIONS[was], (op, name, was, record.state)


def test_rerun_and_retry_failed_are_the_only_ways_to_hand_a_node_out_again() -> None:
    run = new_run("a", "b")
    in_wave(run, "a", "b")
    core.mark_failed(run, "b", "x", NOW)
    assert core.admit(run, "a", NOW + 1, gather=30) is None and core.admit(run, "b", NOW + 1, gather=30) is None
    core.plan_start(run, ["a", "b"], NOW + 1, "rerun", retry_failed=True)
    assert in_wave(run, "a", "b", now=NOW + 2) == 1
    assert [(run.nodes[n].state, run.nodes[n].started) for n in "ab"] == [(core.MAINTAINING, NOW + 2)] * 2


# ============================================================================== fail budget
@pytest.mark.parametrize(
    ("failed", "total", "limit", "exceeded", "percentage"),
    [
        (0, 0, 0, False, 0.0),
        (0, 4, 0, False, 0.0),
        (1, 4, 0, True, 25.0),
        (1, 4, 25, False, 25.0),  # exactly the limit: not "more than"
        (1, 4, 24.99, True, 25.0),
        (2, 3, 66, True, 66.67),
        (2, 3, 66.67, False, 66.67),
        (4, 4, 100, False, 100.0),
        (4, 4, 99.9, True, 100.0),
    ],
)
def test_fail_budget_is_more_than_the_percentage(
    failed: int, total: int, limit: float, exceeded: bool, percentage: float
) -> None:
    run = new_run(*[f"n{i}" for i in range(total)])
    for i in range(failed):
        core.mark_failed(run, f"n{i}", "x", NOW)
    budget = core.fail_budget(run, limit)
    assert (budget.failed, budget.total, budget.percentage, budget.exceeded) == (failed, total, percentage, exceeded)


def test_only_failed_nodes_count_against_the_budget() -> None:
    run = new_run("a", "b", "c", "d")
    in_wave(run, "a", "b", "c")
    core.mark_done(run, "a", NOW)
    core.plan_start(run, ["b"], NOW)  # b: interrupted, c: still maintaining
    assert core.fail_budget(run, 0) == core.FailBudget(0, 4, 0.0, False)


@pytest.mark.parametrize("limit", [-0.1, 100.01, float("nan")])
def test_a_percentage_outside_0_to_100_is_refused(limit: float) -> None:
    with pytest.raises(core.RollingError, match="between 0 and 100"):
        core.fail_budget(new_run("a"), limit)


@FAST
@given(st.integers(0, 60), st.integers(0, 60), st.integers(0, 10_000))
def test_property_fail_budget_matches_ansibles_more_than_rule(failed: int, others: int, hundredths: int) -> None:
    limit = hundredths / 100
    run = core.RunRecord(RUN, REQUESTOR)
    for i in range(failed):
        run.nodes[f"f{i}"] = core.NodeRecord(f"f{i}", state=core.FAILED)
    for i in range(others):
        run.nodes[f"o{i}"] = core.NodeRecord(f"o{i}", state=(core.DONE, core.PENDING, core.INTERRUPTED)[i % 3])
    budget = core.fail_budget(run, limit)
    total = failed + others
    exact = Fraction(100 * failed, total) if total else Fraction(0)
    assert budget.failed == failed and budget.total == total
    assert budget.exceeded == (exact > Fraction(hundredths, 100))
    assert abs(budget.percentage - float(exact)) <= 0.005 + 1e-9


# ============================================================================== summary
def finished_run() -> core.RunRecord:
    run = new_run("b", "a", "c", "d", now=NOW)
    core.observe(run, {"a": "Scheduled", "b": "Scheduled"}, NOW + 2)
    core.observe(run, {"a": lc.PHASE_READY, "b": lc.PHASE_READY}, NOW + 7.5)
    in_wave(run, "b", "a", now=NOW + 8)
    core.node_outcome(run, "a", None, NOW + 68)
    core.node_outcome(run, "b", "firmware update failed", NOW + 68)
    core.mark_done(run, "a", NOW + 71.25)
    core.observe(run, {"c": lc.PHASE_READY}, NOW + 80)
    in_wave(run, "c", now=NOW + 81)
    core.plan_start(run, ["a", "b", "c", "d"], NOW + 90)  # c: interrupted
    return roundtrip(run)


def test_summary_rows_in_wave_order_with_the_spans_of_each_step() -> None:
    rows = core.summary_rows(finished_run())
    assert [(r["node"], r["wave"], r["outcome"]) for r in rows] == [
        ("a", 1, core.DONE),
        ("b", 1, core.FAILED),
        ("c", 2, core.INTERRUPTED),
        ("d", None, core.PENDING),
    ]
    assert rows[0] == {
        "node": "a",
        "wave": 1,
        "outcome": "done",
        "waited": 2.0,
        "drained": 5.5,
        "maintained": 60.0,
        "back": 3.25,
        "message": "",
    }
    assert rows[1]["back"] is None and rows[1]["message"] == "firmware update failed"
    assert (rows[2]["waited"], rows[2]["drained"], rows[2]["maintained"], rows[2]["back"]) == (80.0, 0.0, 9.0, None)
    assert (rows[3]["waited"], rows[3]["drained"], rows[3]["maintained"], rows[3]["back"]) == (None, None, None, None)


def test_summary_spans_are_never_negative() -> None:
    run = new_run("a")
    run.nodes["a"].admitted = NOW - 5  # a clock that went back
    assert core.summary_rows(run)[0]["waited"] == 0.0


def test_render_summary_is_an_aligned_table_with_the_messages_of_nodes_that_need_a_look() -> None:
    lines = core.render_summary(core.summary_rows(finished_run()))
    assert lines[0].split() == ["node", "wave", "waited", "drained", "maintained", "back", "outcome"]
    assert lines[1].split() == ["a", "1", "2.0s", "5.5s", "60.0s", "3.2s", "done"]
    assert lines[2].split() == ["b", "1", "2.0s", "5.5s", "60.0s", "-", "failed"]
    assert lines[3].split() == ["c", "2", "80.0s", "0.0s", "9.0s", "-", "interrupted"]
    assert lines[4].split() == ["d", "-", "-", "-", "-", "-", "pending"]
    # columns line up: every cell of a column starts where its header does
    starts = [lines[0].index(h) for h in ("wave", "waited", "drained", "maintained", "back", "outcome")]
    for line in lines[1:5]:
        for start in starts:
            assert line[start - 2 : start] == "  " and line[start] != " "
    assert all(line == line.rstrip() for line in lines)
    assert lines[5:] == [
        "b: firmware update failed",
        "c: the run stopped during its maintenance; released without running it again",
    ]


def test_render_summary_of_no_rows_is_the_header() -> None:
    assert core.render_summary([]) == ["node  wave  waited  drained  maintained  back  outcome"]


def test_summary_rows_follow_the_waves_not_the_names() -> None:
    run = new_run("a", "m", "z", "0")
    in_wave(run, "z")
    in_wave(run, "a", "m")
    assert [r["node"] for r in core.summary_rows(run)] == ["z", "a", "m", "0"]


def test_render_summary_leaves_out_the_message_of_a_node_that_is_done() -> None:
    row = {"node": "n0", "wave": 1, "waited": 1.0, "drained": None, "maintained": None, "back": None, "message": "m"}
    lines = core.render_summary([{**row, "outcome": core.DONE}, {**row, "node": "n1", "outcome": core.FAILED}])
    assert [line.split() for line in lines[1:3]] == [
        ["n0", "1", "1.0s", "-", "-", "-", "done"],
        ["n1", "1", "1.0s", "-", "-", "-", "failed"],
    ]
    assert lines[3:] == ["n1: m"]
