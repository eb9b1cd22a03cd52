"""The action of nodeops.maintenance.rolling_maintenance (plugins/action/rolling_maintenance.py): it runs the module
again with ``resume`` while a step hands its wait back, prints each wait's message, and returns the last result with
what a start did in its first call. The module runs are a scripted stand-in here; the module itself is tested in
test_module_rolling_maintenance.py and test_rolling_progress.py, the whole in the rolling integration tests."""

from __future__ import annotations

from typing import Any

import pytest
from ansible.plugins.action import ActionBase
from ansible_collections.nodeops.maintenance.plugins.action import rolling_maintenance as action
from ansible_collections.nodeops.maintenance.plugins.module_utils.engines import rolling as engine
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.client import NODES
from support.action_runs import Task, Templar, run_action

TASK = "Request maintenance of the targets"


def run(
    monkeypatch: pytest.MonkeyPatch, args: dict[str, Any], answers: list[dict[str, Any]]
) -> tuple[dict[str, Any], list[dict[str, Any]], list[str]]:
    """The action's result for ``args`` when the module answers ``answers`` in turn; the module args of each call,
    and the lines printed."""
    return run_action(monkeypatch, action.ActionModule, args, answers, name=TASK)


def waiting(phase: str, message: str, **extra: Any) -> dict[str, Any]:
    resume: dict[str, Any] = {"phase": phase, "since": 100.0}
    return {"changed": False, "waiting": {"phase": phase, "message": message}, "resume": resume, **extra}


def test_a_step_that_does_not_wait_is_one_call(monkeypatch: pytest.MonkeyPatch) -> None:
    answer = {"changed": False, "lines": ["node  wave"], "stopped": None}
    result, calls, lines = run(monkeypatch, {"step": "summary"}, [answer])
    assert len(calls) == 1 and lines == [] and result == answer


def test_a_failure_while_going_on_ends_the_task_with_it(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = [waiting("interrupted", "Run r: waiting for 1 node(s) (n0)"), {"failed": True, "msg": "API down"}]
    result, calls, lines = run(monkeypatch, {"step": "start"}, answers)
    assert len(calls) == 2 and len(lines) == 1 and calls[1]["resume"] == {"phase": "interrupted", "since": 100.0}
    assert result["failed"] is True and result["msg"] == "API down" and "resume" not in result


def test_the_engine_names_the_step_that_goes_on_with_each_of_its_waits() -> None:
    assert set(engine.STEP_OF_WAIT) == set(engine.WAIT_PHASES)


def test_a_start_that_waits_for_interrupted_nodes_keeps_what_its_first_call_did(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    planned = {
        "requested": [{"node": "n2", "action": "created"}],
        "added": ["n2"],
        "interrupted": ["n0", "n1"],
        "requeued": [],
        "finished": ["n3"],
        "overrides": ["maxParallelOperations 5 -> 2"],
    }
    answers = [
        {**waiting("interrupted", "Run r: waiting for 2 node(s) (n0, n1)"), **planned, "changed": True},
        {
            **waiting("interrupted", "Run r: waiting for 1 node(s) (n1)"),
            "requested": [],
            "added": [],
            "interrupted": ["n1"],
            "requeued": [],
            "finished": [],
            "overrides": [],
        },
        {
            "changed": True,
            "requested": [],
            "added": [],
            "interrupted": ["n1"],
            "requeued": [],
            "finished": [],
            "overrides": [],
            "released": ["n0", "n1"],
            "pending": ["n2"],
        },
    ]
    result, calls, lines = run(monkeypatch, {"step": "start", "run_id": "r", "progress_after": 50}, answers)
    assert [c["step"] for c in calls] == ["start", "start", "start"]
    assert calls[1]["resume"] == calls[2]["resume"] == {"phase": "interrupted", "since": 100.0}
    assert len(lines) == 2 and lines[0].endswith("Run r: waiting for 2 node(s) (n0, n1)")
    # what the start planned and requested comes from its first call, the release from its last
    assert {k: result[k] for k in planned} == planned
    assert result["released"] == ["n0", "n1"] and result["pending"] == ["n2"] and result["changed"] is True


def test_the_warnings_of_every_call_reach_the_task(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = [
        {**waiting("interrupted", "Run r: waiting for n0"), "warnings": ["a reconcile pass waited for the Lease"]},
        {"changed": False, "released": ["n0"], "warnings": ["another"], "deprecations": [{"msg": "d"}]},
    ]
    result, _calls, _lines = run(monkeypatch, {"step": "start"}, answers)
    assert result["warnings"] == ["a reconcile pass waited for the Lease", "another"]
    assert result["deprecations"] == [{"msg": "d"}] and "resume" not in result


# ============================================================================== the steps of one node
class PlayContext:
    check_mode = False


def on_controller(monkeypatch: pytest.MonkeyPatch, api: Any, args: dict[str, Any]) -> dict[str, Any]:
    """The action's result for a step of one node, run in the action against the in-memory ``api``: the module
    is never run where the task runs."""
    from ansible_collections.nodeops.maintenance.plugins.plugin_utils import controller_module

    def no_module(*_args: Any, **_kwargs: Any) -> dict[str, Any]:
        raise AssertionError("the module ran where the task runs")

    monkeypatch.setattr(controller_module.ControllerModule, "client", property(lambda self: api))
    plugin = action.ActionModule.__new__(action.ActionModule)
    plugin._task = Task(args, "Admit")  # type: ignore[assignment]
    plugin._templar = Templar()  # type: ignore[assignment]
    plugin._play_context = PlayContext()  # type: ignore[assignment]
    monkeypatch.setattr(plugin, "_execute_module", no_module, raising=False)
    monkeypatch.setattr(plugin, "_compute_environment_string", lambda out=None: "", raising=False)
    monkeypatch.setattr(ActionBase, "run", lambda self, tmp=None, task_vars=None: {})
    return plugin.run(task_vars={})


def test_the_steps_of_one_node_run_in_the_action_on_the_controller(monkeypatch: pytest.MonkeyPatch) -> None:
    from unit.test_engine_maintenance import NS
    from unit.test_rolling_engine import CFG, REQUESTOR, RUN, Api, node
    from unit.test_rolling_engine import rolling as make_rolling

    api = Api()
    api.add(NODES, node("n0"))
    make_rolling(api).start(["n0"], "release", False, defer_requests=True)
    api.auto_ready = True
    settings = {"run_id": RUN, "requestor": REQUESTOR, "namespace": NS, "config_namespace": CFG}
    admitted = on_controller(monkeypatch, api, {"step": "admit", "node": "n0", "engine": "operator", **settings})
    assert admitted.get("failed") is not True, admitted
    assert admitted["admitted"] is True and admitted["wave"] == 1 and admitted["changed"] is True
    released = on_controller(monkeypatch, api, {"step": "release", "node": "n0", "engine": "operator", **settings})
    assert released["state"] == "done" and released["released"] == ["n0"]


def test_a_misspelt_option_of_a_step_on_the_controller_is_named_and_nothing_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from unit.test_rolling_engine import Api

    api = Api()
    result = on_controller(monkeypatch, api, {"step": "admit", "nod": "n0", "run_id": "r"})
    assert result["failed"] is True
    assert "nod" in result["msg"] and "did you mean node?" in result["msg"], result["msg"]
    assert api.write_count == 0 and api.lists == 0


def test_a_step_on_the_controller_masks_secrets_as_a_module_does() -> None:
    from ansible_collections.nodeops.maintenance.plugins.module_utils.rolling_steps import ARGUMENT_SPEC
    from ansible_collections.nodeops.maintenance.plugins.plugin_utils.controller_module import (
        ControllerModule,
        Ended,
    )

    inline = {"users": [{"name": "u", "user": {"token": "t0ken-value"}}]}
    module = ControllerModule(
        ARGUMENT_SPEC,
        {"step": "admit", "node": "n0", "run_id": "r", "requestor": "q", "api_key": "s3cr3t-key", "kubeconfig": inline},
        check_mode=False,
    )
    module.warn("the server said s3cr3t-key and t0ken-value")
    with pytest.raises(Ended) as ended:
        module.fail_json(msg="refused s3cr3t-key")
    text = repr(ended.value.result)
    assert "s3cr3t-key" not in text and "t0ken-value" not in text and "********" in text


def test_the_steps_of_one_node_refuse_async(monkeypatch: pytest.MonkeyPatch) -> None:
    plugin = action.ActionModule.__new__(action.ActionModule)
    task = Task({"step": "admit", "node": "n0", "run_id": "r"}, "Admit")
    task.async_val = 60  # type: ignore[misc]
    plugin._task = task  # type: ignore[assignment]
    result = plugin.run(task_vars={})
    assert result["failed"] is True and "do not take async" in result["msg"]


def test_a_node_s_steps_print_its_admission_and_its_outcome_and_nothing_else() -> None:
    admitted = {"node": "gpu-7", "admitted": True, "opened": True, "wave": 3, "counts": {"pending": 12}}
    assert action.outcome_line("admit", admitted) == "Wave 3: gpu-7 admitted (a new wave); 12 still pending"
    assert action.outcome_line("admit", {**admitted, "admitted": False}) == ""  # not admitted: its own task says why
    failed = {"node": "gpu-7", "state": "failed", "wave": 3, "failure": "Reboot: timed out"}
    assert action.outcome_line("release", failed) == "gpu-7: failed (wave 3): Reboot: timed out"
    assert action.outcome_line("release", {**failed, "state": "done", "failure": None}) == "gpu-7: done (wave 3)"
    assert action.outcome_line("release", {**failed, "failed": True, "msg": "boom"}) == ""
    assert action.outcome_line("start", {"node": "x", "state": "done"}) == ""
