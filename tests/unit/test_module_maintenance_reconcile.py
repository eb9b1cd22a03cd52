"""The maintenance_reconcile module run as Ansible runs it (its arguments, exit_json) against the in-memory API of
test_engine_maintenance: passes handed back with their progress (``until_settled`` with ``progress_after``) and
picked up with ``resume``. The action that prints the lines and goes on is tested in
test_action_maintenance_reconcile.py, the whole in the integration tests of the reconcile playbook."""

from __future__ import annotations

import json
from typing import Any

import pytest
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s import errors
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.client import NODE_MAINTENANCES, PODS
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.module import K8sModule
from ansible_collections.nodeops.maintenance.plugins.modules import maintenance_reconcile
from unit.test_engine_maintenance import NS, FakeApi, nm, phase, small_cluster

patch_module_args = pytest.importorskip(
    "ansible.module_utils.testing", reason="ansible.module_utils.testing is new in ansible-core 2.19"
).patch_module_args


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    fake = small_cluster()
    monkeypatch.setattr(K8sModule, "client", property(lambda self: fake))
    return fake


def run_module(capsys: pytest.CaptureFixture[str], fails: bool = False, **params: Any) -> dict[str, Any]:
    args = {"namespace": NS, "config_namespace": NS, "lease_wait": 0, **params}
    capsys.readouterr()
    with patch_module_args(args), pytest.raises(SystemExit):
        maintenance_reconcile.main()
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert bool(result.get("failed")) is fails, result
    return result


def held_by_a_pod(api: FakeApi) -> None:
    """A request that waits for a training pod that never ends: never settled."""
    api.add(NODE_MAINTENANCES, nm("a", "n0", waitForPodCompletion={"podSelector": "app=training"}))
    api.add(
        PODS,
        {
            "metadata": {"name": "trainer", "namespace": "apps", "labels": {"app": "training"}},
            "spec": {"nodeName": "n0"},
            "status": {"phase": "Running"},
        },
    )


def test_passes_that_do_not_settle_are_handed_back_with_what_they_wait_for(
    api: FakeApi, capsys: pytest.CaptureFixture[str]
) -> None:
    held_by_a_pod(api)
    result = run_module(capsys, until_settled=True, settle_timeout=300, progress_after=0.2)
    assert result["settled"] is False and result["passes"] >= 1 and phase(api, "a") == "WaitForPodCompletion"
    progress = result["progress"]
    assert progress["moving"] == [f"{NS}/a (WaitForPodCompletion)"]
    assert "1 request(s) not settled yet: ns/a (WaitForPodCompletion)" in progress["message"]
    assert "of at most 300s" in progress["message"]
    assert result["resume"] == {"since": progress["since"], "errors": []}
    # the next call goes on: the pod ends and the request gets to Ready
    api.objects.pop(("pods", "apps", "trainer"))
    done = run_module(capsys, until_settled=True, progress_after=0.2, resume=result["resume"])
    assert done["settled"] is True and "resume" not in done and "progress" not in done
    assert phase(api, "a") == "Ready"


def test_the_settle_timeout_counts_from_the_first_call(api: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    held_by_a_pod(api)
    first = run_module(capsys, until_settled=True, settle_timeout=300, progress_after=0.2)
    # a call that goes on after the timeout has run out makes one pass and ends the task, not settled
    late = {**first["resume"], "since": first["resume"]["since"] - 1000}
    result = run_module(capsys, until_settled=True, settle_timeout=300, progress_after=0.2, resume=late)
    assert result["passes"] == 1 and result["settled"] is False and "resume" not in result


def test_an_error_of_the_last_pass_before_a_hand_back_does_not_fail_the_task(
    api: FakeApi, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The API server is down while the passes are handed back: the call hands them back with the error; the
    next call, with the server back, gets past it and reports it as recovered, with a warning."""
    api.add(NODE_MAINTENANCES, nm("a", "n0"))
    original = api.list

    def down(res: Any, namespace: str | None = None, **kw: Any) -> dict[str, Any]:
        if res is NODE_MAINTENANCES:
            raise errors.Unreachable("connection refused", None, {})
        return original(res, namespace, **kw)

    monkeypatch.setattr(api, "list", down)
    first = run_module(capsys, until_settled=True, progress_after=0.2)
    assert [e["reason"] for e in first["resume"]["errors"]] == ["unreachable"]
    assert "the last pass failed (connection refused" in first["progress"]["message"]
    monkeypatch.setattr(api, "list", original)
    # the warnings as the module gives them (where they go depends on whether the process also runs the controller)
    warned: list[str] = []
    monkeypatch.setattr(K8sModule, "warn", lambda self, msg: warned.append(msg), raising=False)
    done = run_module(capsys, until_settled=True, progress_after=0.2, resume=first["resume"])
    assert done["settled"] is True and done["errors"] == [] and phase(api, "a") == "Ready"
    assert [e["reason"] for e in done["recovered"]] == ["unreachable"]
    assert "An earlier pass failed and a later one went on: the pass: connection refused" in warned


def test_check_mode_makes_one_pass_and_hands_nothing_back(api: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    held_by_a_pod(api)
    writes = len(api.writes)
    result = run_module(capsys, until_settled=True, progress_after=0.01, _ansible_check_mode=True)
    assert result["passes"] == 1 and "resume" not in result and "progress" not in result
    assert len(api.writes) == writes


def test_a_negative_progress_after_fails_and_changes_nothing(api: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    api.add(NODE_MAINTENANCES, nm("a", "n0"))
    writes = len(api.writes)
    result = run_module(capsys, fails=True, until_settled=True, progress_after=-1)
    assert result["msg"] == "progress_after must be 0 (no line) or more (got -1)."
    assert len(api.writes) == writes
