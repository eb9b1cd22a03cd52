"""The action of nodeops.maintenance.remediation (plugins/action/remediation.py): it runs the module again with
``resume`` while it hands a wait back, prints each line, and returns each object's outcome over every call. The
module runs are a scripted stand-in here; the whole is tested in tests/integration/test_remediation.py."""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.nodeops.maintenance.plugins.action import remediation as action
from support.action_runs import run_action

TASK = "Fence the unhealthy nodes and recover their workloads"


def outcome(name: str, phase: str, **extra: Any) -> dict[str, Any]:
    return {"namespace": "ops", "name": name, "node": name, "phase": phase, "phase_before": phase, **extra}


def test_a_wait_handed_back_goes_on_and_each_objects_outcome_adds_up(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = [
        {
            "changed": True,
            "remediations": [
                outcome("w1", "Pre-Reboot-Completed", changed=True, taints_added=["t"]),
                outcome("w2", "X"),
            ],
            "waiting": ["ops/w1"],
            "progress": {"message": "1 remediation(s) waiting: ops/w1 on w1 (Pre-Reboot-Completed, ...)"},
            "resume": {"since": 100.0},
        },
        {
            "changed": True,
            "remediations": [outcome("w1", "Fencing-Completed", changed=True, pods_deleted=["ops/db-0"])],
            "waiting": [],
        },
    ]
    args = {"settle_timeout": 300, "progress_after": 10}
    result, calls, lines = run_action(monkeypatch, action.ActionModule, args, answers, name=TASK)
    assert calls[1]["resume"] == {"since": 100.0} and "resume" not in calls[0]
    assert lines == [
        "Fence the unhealthy nodes and recover their workloads: "
        "1 remediation(s) waiting: ops/w1 on w1 (Pre-Reboot-Completed, ...)"
    ]
    w1, w2 = result["remediations"]
    # w1 over both calls: the phase it started from, what each call did; w2 (not seen again) as first reported
    assert (w1["phase_before"], w1["phase"]) == ("Pre-Reboot-Completed", "Fencing-Completed")
    assert w1["taints_added"] == ["t"] and w1["pods_deleted"] == ["ops/db-0"]
    assert w2 == outcome("w2", "X")
    assert result["waiting"] == [] and "progress" not in result and "resume" not in result
