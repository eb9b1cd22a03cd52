"""The record's changes as data (core/maintenance/changes.py): each does what its rule does, through JSON, says
whether it changed the record, recognises its own effect when applied again, and a refused one changes nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.maintenance import changes
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.maintenance import rolling as core
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

NOW = 1_800_000_000.0


def new_run(*nodes: str) -> core.RunRecord:
    run = core.RunRecord("run", "requestor")
    core.plan_start(run, list(nodes), NOW)
    return run


def apply(run: core.RunRecord, **change: Any) -> tuple[Any, bool]:
    """Through JSON, as a change another worker asked for reaches the holder, and its answer the worker."""
    value, changed = changes.apply(run, json.loads(json.dumps(change)))
    return json.loads(json.dumps(value)), changed


def admit(node: str, now: float, gather: float = 30.0) -> dict[str, Any]:
    return {"kind": "admit", "node": node, "now": now, "began": now - 1, "gather": gather, "max_fail_percentage": 100}


def test_an_admission_opens_a_batch_the_next_joins_it_and_a_repeat_is_recognised_as_its_own() -> None:
    run = new_run("a", "b")
    assert apply(run, **admit("a", NOW + 1)) == ([1, True, False], True)
    assert apply(run, **admit("b", NOW + 2)) == ([1, False, False], True)
    assert run.nodes["a"].state == run.nodes["b"].state == core.MAINTAINING
    # the same admission again (its write's answer lost, or its holder died before answering): its own, no change
    assert apply(run, **admit("b", NOW + 2)) == ([1, False, True], False)
    # another call's admission of an admitted node: not admitted again
    assert apply(run, **admit("b", NOW + 3)) == ([None, False, False], False)


def test_no_admission_once_the_run_stopped() -> None:
    run = new_run("a")
    assert apply(run, kind="stop", stop={"reason": "asked", "message": "m"}, now=NOW)[1] is True
    assert apply(run, **admit("a", NOW + 1)) == ([None, False, False], False)
    assert run.nodes["a"].state == core.PENDING


def test_the_release_that_takes_the_last_node_of_a_batch_out_says_it_ended_the_batch() -> None:
    run = new_run("a", "b")
    apply(run, **admit("a", NOW + 1))
    apply(run, **admit("b", NOW + 2))
    first = apply(run, kind="outcome", node="a", failure=None, timing=None, now=NOW + 10, leave=True)
    assert first == ([True, None, False], True) and run.nodes["a"].began == NOW + 1  # from the admission
    assert apply(run, kind="outcome", node="a", failure=None, timing=None, now=NOW + 11, leave=True) == (
        [False, None, False],
        False,
    )  # on record already
    assert apply(run, kind="done", node="a", now=NOW + 12, leave=True) == ([None, None, False], True)  # b in it
    assert apply(run, kind="outcome", node="b", failure="broke", timing=[NOW + 3, NOW + 4], now=NOW + 13, leave=True)[
        0
    ] == [True, 1, False]  # b failed: out of maintaining, the last of batch 1
    assert run.nodes["b"].state == core.FAILED and (run.nodes["b"].began, run.nodes["b"].ended) == (NOW + 3, NOW + 4)
    assert apply(run, kind="released", node="b", now=NOW + 14) == (None, True) and run.nodes["b"].back == NOW + 14


def test_a_node_gone_before_its_admission_fails_and_a_withdrawal_with_a_stop_keeps_the_first_stop() -> None:
    run = new_run("a", "b")
    core.observe(run, {"b": core.PHASE_READY}, NOW + 1)
    assert apply(run, kind="failed", node="a", message="gone", now=NOW + 2) == (None, True)
    assert run.nodes["a"].state == core.FAILED and run.nodes["a"].message == "gone"
    stop = {"reason": "window", "message": "closed"}
    assert apply(run, kind="withdraw", nodes=["b"], stop=stop, now=NOW + 3) == (None, True)
    assert run.nodes["b"].ready is None and run.stopped is not None and run.stopped["reason"] == "window"
    assert apply(run, kind="stop", stop={"reason": "asked"}, now=NOW + 4) == (run.stopped, False)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"kind": "drop"}, "unknown change"),
        ({"kind": "done", "node": "z", "now": NOW}, "not a node of the run"),
        ({"kind": "done", "node": "a", "now": NOW}, "pending; it cannot become done"),
        ({"kind": "outcome", "node": "a", "failure": None, "timing": None, "now": NOW}, "only an admitted node"),
        (admit("z", NOW), "not a node of the run"),
    ],
)
def test_a_change_the_record_refuses_is_an_error_and_changes_nothing(change: dict[str, Any], match: str) -> None:
    run = new_run("a", "b")
    before = run.to_data()
    with pytest.raises(core.RollingError, match=match):
        changes.apply(run, change)
    assert run.to_data() == before


def test_a_release_applied_again_is_its_own_with_the_batch_it_ended() -> None:
    """A holder died after its write and before its answers: the worker applies its change again to the record as
    written; it gets what the first time returned (the batch end too, for its notification), and nothing changes."""
    run = new_run("a", "b")
    apply(run, **admit("a", NOW + 1.0004))
    apply(run, **admit("b", NOW + 2))
    apply(run, kind="outcome", node="a", failure=None, timing=None, now=NOW + 5.0006, leave=True)
    done_a = {"kind": "done", "node": "a", "now": NOW + 6.0002, "leave": True}
    failed_b = {"kind": "outcome", "node": "b", "failure": "x" * 400, "timing": None, "now": NOW + 7.0008}
    failed_b["leave"] = True
    assert apply(run, **done_a) == ([None, None, False], True)
    assert apply(run, **failed_b) == ([True, 1, False], True)
    stored = core.RunRecord.from_data(run.to_data(), "run", "requestor")  # as the record holds it
    assert apply(stored, **failed_b) == ([True, 1, True], False)
    assert apply(stored, **done_a) == ([None, None, True], False)  # b left after it: not a's batch end
    not_back = {"kind": "failed", "node": "b", "message": "y" * 400, "now": NOW + 8, "leave": True}
    assert apply(stored, **not_back)[0] == [None, None, False]  # b is failed already: not in maintaining


KINDS = st.sampled_from(["admit", "outcome", "failure", "done", "failed", "released", "withdraw", "stop"])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.tuples(KINDS, st.sampled_from(["a", "b", "c"]), st.booleans()), max_size=25),
    st.floats(min_value=0, max_value=0.999),
)
def test_changed_says_exactly_whether_the_stored_record_changed(
    steps: list[tuple[str, str, bool]], fraction: float
) -> None:
    """Whatever order the hosts' changes come in, applied to the record as stored or as kept in memory: the flag a
    change returns is what its write would store."""
    run = new_run("a", "b", "c")
    for i, (kind, node, stored) in enumerate(steps):
        if stored:
            run = core.RunRecord.from_data(run.to_data(), "run", "requestor")
        now = NOW + 1 + i + fraction
        change: dict[str, Any] = {
            "admit": admit(node, now),
            "outcome": {"kind": "outcome", "node": node, "failure": None, "timing": None, "now": now},
            "failure": {"kind": "outcome", "node": node, "failure": "x", "timing": None, "now": now},
            "done": {"kind": "done", "node": node, "now": now, "leave": True},
            "failed": {"kind": "failed", "node": node, "message": "m" * 400, "now": now, "leave": True},
            "released": {"kind": "released", "node": node, "now": now},
            "withdraw": {"kind": "withdraw", "nodes": [node]},
            "stop": {"kind": "stop", "stop": {"reason": "asked"}, "now": now},
        }[kind]
        before = run.to_data()
        try:
            _value, changed = changes.apply(run, change)
        except core.RollingError:
            assert run.to_data() == before
            continue
        assert changed == (run.to_data() != before), change
