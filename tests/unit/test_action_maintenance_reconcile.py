"""The action of nodeops.maintenance.maintenance_reconcile (plugins/action/maintenance_reconcile.py): it runs the
module again with ``resume`` while its passes are handed back, prints each line, and returns every call's passes as
one result. The module runs are a scripted stand-in here; the module is tested in
test_module_maintenance_reconcile.py."""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.nodeops.maintenance.plugins.action import maintenance_reconcile as action
from ansible_collections.nodeops.maintenance.plugins.plugin_utils import progress
from support.action_runs import run_action


def run(
    monkeypatch: pytest.MonkeyPatch,
    args: dict[str, Any],
    answers: list[dict[str, Any]],
    module_defaults: list[dict[str, Any]] | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]], list[str]]:
    return run_action(monkeypatch, action.ActionModule, args, answers, module_defaults, "Run the reconcile pass")


def passes(n: int, **extra: Any) -> dict[str, Any]:
    empty: dict[str, Any] = {k: [] for k in action.HISTORY}
    return {"changed": False, "passes": n, "settled": False, "errors": [], "waiting": [], **empty, **extra}


def handed_back(n: int, message: str, errors: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    resume = {"since": 100.0, "errors": errors or []}
    return {**passes(n, **extra), "progress": {"message": message}, "resume": resume}


def test_passes_handed_back_go_on_in_the_same_task_and_add_up(monkeypatch: pytest.MonkeyPatch) -> None:
    unreachable = {"name": "", "error": "connection refused", "reason": "unreachable"}
    answers = [
        handed_back(
            3, "3 pass(es) so far; 1 request(s) not settled yet: ns/a (Draining)", scheduled=["ns/a"], changed=True
        ),
        handed_back(2, "2 pass(es) so far; the last pass failed (connection refused); trying again", [unreachable]),
        {
            **passes(1, released=["ns/b"], recovered=[unreachable], events=[{"name": "ns/a"}]),
            "settled": True,
            "waiting": [{"name": "ns/c"}],
        },
    ]
    args = {"until_settled": True, "progress_after": 50}
    result, calls, lines = run(monkeypatch, args, answers)
    assert "resume" not in calls[0]
    assert calls[1]["resume"] == {"since": 100.0, "errors": []}
    assert calls[2]["resume"] == {"since": 100.0, "errors": [unreachable]}
    assert all(c["until_settled"] is True and c["progress_after"] == 50 for c in calls)
    assert lines == [
        "Run the reconcile pass: 3 pass(es) so far; 1 request(s) not settled yet: ns/a (Draining)",
        "Run the reconcile pass: 2 pass(es) so far; the last pass failed (connection refused); trying again",
    ]
    # what happened in any call, the state after the last
    assert result["passes"] == 6 and result["changed"] is True and result["settled"] is True
    assert result["scheduled"] == ["ns/a"] and result["released"] == ["ns/b"]
    assert result["recovered"] == [unreachable] and result["events"] == [{"name": "ns/a"}]
    assert result["waiting"] == [{"name": "ns/c"}] and "progress" not in result and "resume" not in result


def test_a_single_pass_is_one_call(monkeypatch: pytest.MonkeyPatch) -> None:
    result, calls, lines = run(monkeypatch, {}, [{**passes(1), "settled": True}])
    assert len(calls) == 1 and lines == [] and result["passes"] == 1


def test_a_failure_after_a_hand_back_keeps_the_passes_before_it(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = [
        handed_back(2, "2 pass(es) so far", scheduled=["ns/a"], changed=True),
        {**passes(1), "failed": True, "msg": "Some NodeMaintenance requests could not be moved: ns/a: forbidden"},
    ]
    result, calls, lines = run(monkeypatch, {"until_settled": True}, answers)
    assert len(calls) == 2 and len(lines) == 1
    assert result["failed"] is True and result["passes"] == 3 and result["scheduled"] == ["ns/a"]
    assert result["changed"] is True


def test_every_call_gets_the_connection_settings_of_kubernetes_core_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    defaults = [{"group/kubernetes.core.k8s": {"kubeconfig": "/theirs", "context": "theirs", "wait": True}}]
    answers = [handed_back(1, "1 pass(es) so far"), {**passes(1), "settled": True}]
    _result, calls, _lines = run(monkeypatch, {"until_settled": True, "context": "mine"}, answers, defaults)
    assert [(c["kubeconfig"], c["context"]) for c in calls] == [("/theirs", "mine")] * 2
    assert all("wait" not in c for c in calls)


def test_a_wait_that_never_ends_fails_the_task_after_the_last_call(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "MAX_CALLS", 3)
    answers = [handed_back(1, f"{n} pass(es) so far") for n in range(1, 4)]
    result, calls, lines = run(monkeypatch, {"until_settled": True}, answers)
    assert len(calls) == 3 and len(lines) == 2
    assert result["failed"] is True and "handed back 3 times" in result["msg"] and "resume" not in result
