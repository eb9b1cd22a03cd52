"""The action nodeops.maintenance.check_variables (plugins/action/check_variables.py) on its own: a warning per
unknown variable by default, a failure with ``unknown: fail``; the playbooks' use of it is in
test_playbook_arguments.py."""

from __future__ import annotations

from typing import Any

import pytest
from ansible.plugins.action import ActionBase
from ansible_collections.nodeops.maintenance.plugins.action import check_variables
from support.action_runs import Task

KNOWN = ["rolling_run_id", "rolling_max_unavailable"]
TASK_VARS = {"rolling_run_id": "x", "rolling_max_unavailabel": "10%", "inventory_hostname": "localhost"}


def run(monkeypatch: pytest.MonkeyPatch, args: dict[str, Any]) -> dict[str, Any]:
    plugin = check_variables.ActionModule.__new__(check_variables.ActionModule)
    plugin._task = Task(args, "Check the variable names")  # type: ignore[assignment]
    monkeypatch.setattr(ActionBase, "run", lambda self, tmp=None, task_vars=None: {})
    return plugin.run(task_vars=TASK_VARS)


def test_an_unknown_variable_is_a_warning_naming_the_closest_one(monkeypatch: pytest.MonkeyPatch) -> None:
    result = run(monkeypatch, {"known": KNOWN, "prefixes": ["rolling_"]})
    assert result.get("failed") is not True and result["changed"] is False
    assert result["warnings"] == [
        "rolling_max_unavailabel is not a variable of this playbook; did you mean rolling_max_unavailable?"
    ]
    assert list(result["unknown"]) == ["rolling_max_unavailabel"]


def test_with_unknown_fail_an_unknown_variable_fails_the_task(monkeypatch: pytest.MonkeyPatch) -> None:
    result = run(monkeypatch, {"known": KNOWN, "prefixes": ["rolling_"], "unknown": "fail"})
    assert result["failed"] is True and "warnings" not in result
    assert result["msg"] == (
        "rolling_max_unavailabel is not a variable of this playbook; did you mean rolling_max_unavailable?"
    )


def test_known_variables_pass_without_a_word(monkeypatch: pytest.MonkeyPatch) -> None:
    result = run(monkeypatch, {"known": [*KNOWN, "rolling_max_unavailabel"], "unknown": "fail"})
    assert result.get("failed") is not True and result["unknown"] == {} and "warnings" not in result
