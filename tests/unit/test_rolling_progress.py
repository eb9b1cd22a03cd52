"""Long waits of a rolling run handed back with their progress (``progress_after``) and picked up again with
``resume``: engines/rolling.py against the in-memory API, whose clock moves on at every look at the cluster. Each
call is a fresh Rolling, as each task of the playbook is a new module run."""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.maintenance import lifecycle as lc
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.maintenance import rolling as core
from ansible_collections.nodeops.maintenance.plugins.module_utils.engines.requests import RequestError
from ansible_collections.nodeops.maintenance.plugins.module_utils.engines.rolling import GateOptions
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.client import PODS
from unit.test_rolling_engine import Api, admitted, rolling, started
from unit.test_rolling_windows_gates import GateApi, pod


def calls_until_done(step: Any, limit: int = 100) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Call ``step(resume)`` again while it hands back ``waiting``: the waiting results and the last one."""
    waits: list[dict[str, Any]] = []
    result = step(None)
    while "waiting" in result:
        assert len(waits) < limit, "the wait never ends"
        waits.append(result)
        result = step(result["resume"])
    return waits, result


def test_an_admit_wait_is_handed_back_with_its_progress_then_goes_on_to_the_admission(gate_api: Api) -> None:
    gate_api.tick = 5.0
    started(gate_api, "n0")
    gate_api.set_phase("n0", lc.PHASE_DRAINING)
    looks: list[float] = []

    def drain_after_a_while(fake: Api) -> None:
        looks.append(fake.now)
        if len(looks) == 30:
            fake.set_phase("n0", lc.PHASE_READY)

    gate_api.hooks.append(drain_after_a_while)
    waits, result = calls_until_done(lambda resume: rolling(gate_api, progress_after=20.0).admit("n0", resume))
    assert len(waits) >= 2
    first = waits[0]["waiting"]
    assert first["phase"] == "admit" and waits[0]["wave"] is None and waits[0]["changed"] is False
    assert "n0 being prepared (cordon, drain)" in first["message"] and "of at most 300s" in first["message"]
    # every call goes on with the same wait: one start, the time waited growing
    assert {w["resume"]["since"] for w in waits} == {first["since"]}
    assert [w["waiting"]["waited"] for w in waits] == sorted(w["waiting"]["waited"] for w in waits)
    assert result["admitted"] is True and "waiting" not in result
    # the node was not handed out while it waited
    assert all(w["admitted"] is False for w in waits)


def test_the_admit_timeout_counts_from_the_start_of_the_wait_across_calls(gate_api: Api) -> None:
    gate_api.tick = 5.0
    started(gate_api, "n0")
    gate_api.set_phase("n0", lc.PHASE_DRAINING)
    calls: list[dict[str, Any] | None] = []

    def step(resume: dict[str, Any] | None) -> dict[str, Any]:
        calls.append(resume)
        return rolling(gate_api, wave_timeout=60.0, progress_after=10.0).admit("n0", resume)

    with pytest.raises(RequestError) as info:
        calls_until_done(step)
    assert "did not become ready for its maintenance within 60s" in info.value.msg
    # one wait of 60s in calls of about 10s each, not 60s a call
    assert 4 <= len(calls) <= 8
    assert gate_api.record()["n0"]["state"] == core.PENDING


def test_without_progress_after_the_admit_wait_is_one_call(gate_api: Api) -> None:
    gate_api.tick = 5.0
    started(gate_api, "n0")
    gate_api.set_phase("n0", lc.PHASE_DRAINING)
    looks: list[int] = []

    def drain_after_a_while(fake: Api) -> None:
        looks.append(1)
        if len(looks) == 20:
            fake.set_phase("n0", lc.PHASE_READY)

    gate_api.hooks.append(drain_after_a_while)
    result = rolling(gate_api).admit("n0")
    assert result["admitted"] is True and "waiting" not in result and len(looks) >= 20


def test_a_gate_wait_is_handed_back_naming_what_blocks_and_keeps_its_timeout(gate_api: GateApi) -> None:
    gate_api.add(PODS, pod("trainer", "n0", {"block": "yes"}))
    options = {"gates": GateOptions(pod_selector="block=yes", timeout=100.0, interval=1.0), "progress_after": 1.0}
    rolling(gate_api, **options).start(["n0"], "release", False)
    gate_api.set_phase("n0", lc.PHASE_READY)
    waits, result = calls_until_done(lambda resume: rolling(gate_api, **options).admit("n0", resume))
    assert waits, "the gate wait was never handed back"
    first = waits[0]["waiting"]
    assert first["phase"] == "admit_gate" and [b["message"] for b in first["blockers"]] == ["pod apps/trainer on n0"]
    assert "the next admission waits for its gates" in first["message"]
    # the pod never goes: the run stops after the gate timeout, counted from the first call
    assert result["stopped"]["reason"] == "gate" and "still after 100s" in result["stopped"]["message"]
    assert gate_api.now - first["since"] >= 100.0
    assert gate_api.request("n0") is None  # given back, as any gate stop does


def test_a_gate_that_clears_between_calls_lets_the_node_in(gate_api: GateApi) -> None:
    gate_api.add(PODS, pod("trainer", "n0", {"block": "yes"}))
    options = {"gates": GateOptions(pod_selector="block=yes", timeout=100.0, interval=1.0), "progress_after": 1.0}
    rolling(gate_api, **options).start(["n0"], "release", False)
    gate_api.set_phase("n0", lc.PHASE_READY)
    first = rolling(gate_api, **options).admit("n0")
    assert first["waiting"]["phase"] == "admit_gate" and gate_api.request("n0") is not None
    gate_api.objects.pop((PODS.plural, "apps", "trainer"))
    result = rolling(gate_api, **options).admit("n0", first["resume"])
    assert result["admitted"] is True


def test_the_ready_timeout_of_a_release_counts_from_the_first_call(gate_api: Api) -> None:
    admitted(gate_api, "n0")
    gate_api.set_node_ready("n0", False)
    waits, result = calls_until_done(
        lambda resume: rolling(gate_api, node_ready_timeout=20.0, progress_after=3.0).release("n0", None, None, resume)
    )
    assert 3 <= len(waits) <= 10
    assert result["failure"] == "not Ready in Kubernetes 20s after its maintenance"
    assert gate_api.record()["n0"]["state"] == core.FAILED and gate_api.request("n0") is not None


def test_a_resumed_release_after_the_node_was_released_writes_nothing(gate_api: Api) -> None:
    admitted(gate_api, "n0")
    done = rolling(gate_api).release("n0", None)
    assert done["released"] == ["n0"]
    writes = gate_api.write_count
    again = rolling(gate_api, progress_after=3.0).release("n0", None, resume={"phase": "back", "since": gate_api.now})
    assert "waiting" not in again and again["released"] == [] and again["state"] == core.DONE
    assert gate_api.write_count == writes


def test_a_resume_from_the_future_is_taken_as_now(gate_api: Api) -> None:
    gate_api.tick = 5.0
    started(gate_api, "n0")
    gate_api.set_phase("n0", lc.PHASE_DRAINING)
    result = rolling(gate_api, wave_timeout=60.0, progress_after=10.0).admit(
        "n0", {"phase": "admit", "since": gate_api.now + 1e6}
    )
    assert result["waiting"]["since"] <= gate_api.now and result["waiting"]["waited"] >= 0


def test_a_restart_waiting_for_interrupted_nodes_hands_the_wait_back_then_releases(gate_api: Api) -> None:
    admitted(gate_api, "n0", "n1")  # the run dies during the maintenance, with n1 still down
    gate_api.set_node_ready("n1", False)
    options = {"node_ready_timeout": 60.0, "progress_after": 3.0}
    first = rolling(gate_api, **options).start(["n0", "n1", "n2"], "release", False)
    waiting = first["waiting"]
    assert waiting["phase"] == "interrupted" and waiting["nodes_not_ready"] == ["n1"]
    assert "interrupted during their maintenance" in waiting["message"]
    assert first["resume"] == {"phase": "interrupted", "since": waiting["since"], "nodes": ["n0", "n1"]}
    # the start did its work before it handed the wait back: n2 is requested, nothing is released yet
    assert first["changed"] is True and first["added"] == ["n2"] and first["interrupted"] == ["n0", "n1"]
    assert first["released"] == [] and first["pending"] == ["n2"]
    assert gate_api.request("n0") is not None and gate_api.request("n2") is not None
    assert {n: r["state"] for n, r in gate_api.record().items()} == {
        "n0": "interrupted",
        "n1": "interrupted",
        "n2": "pending",
    }
    writes = gate_api.write_count
    gate_api.set_node_ready("n1", True)
    # the call that goes on releases the nodes the first one waited for, even if the targets changed meanwhile
    # (a node selector that matches none of them any more)
    done = rolling(gate_api, **options).start([], "release", False, resume=first["resume"])
    assert "waiting" not in done and done["released"] == ["n0", "n1"] and done["pending"] == ["n2"]
    # the call that goes on only releases: no new request, nothing planned again
    assert done["added"] == [] and done["requested"] == []
    assert gate_api.request("n0") is None and gate_api.request("n1") is None and gate_api.request("n2") is not None
    assert gate_api.write_count > writes


def test_the_interrupted_nodes_ready_timeout_counts_from_the_first_call(gate_api: Api) -> None:
    admitted(gate_api, "n0")
    gate_api.set_node_ready("n0", False)
    waits, result = calls_until_done(
        lambda resume: rolling(gate_api, node_ready_timeout=20.0, progress_after=3.0).start(
            ["n0"], "release", False, resume=resume
        )
    )
    assert 3 <= len(waits) <= 10
    assert result["released"] == [] and gate_api.record()["n0"]["state"] == core.FAILED
    assert "interrupted, then not Ready in Kubernetes 20s" in gate_api.record()["n0"]["message"]
    assert gate_api.request("n0") is not None  # left cordoned, for a person


def test_a_resumed_start_with_interrupted_fail_and_retry_failed_queues_nothing_again(gate_api: Api) -> None:
    """The call that goes on with a start's wait does not plan again: a node the first call failed (policy fail)
    is not handed back to the queue by retry_failed."""
    admitted(gate_api, "n0", "n1")  # the run dies with both maintaining
    result = rolling(gate_api, progress_after=3.0).start(["n0", "n1"], "fail", True)
    assert "waiting" not in result and result["interrupted"] == ["n0", "n1"]
    again = rolling(gate_api, progress_after=3.0).start(
        ["n0", "n1"], "fail", True, resume={"phase": "interrupted", "since": gate_api.now}
    )
    assert again["requeued"] == [] and again["released"] == []
    assert {n: r["state"] for n, r in gate_api.record().items()} == {"n0": "failed", "n1": "failed"}
