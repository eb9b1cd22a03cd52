"""The rolling_maintenance module run as Ansible runs it (its arguments, exit_json) against the in-memory API of
test_rolling_engine: what each step reports in check mode, that check mode writes nothing, and that a real step
reports a change exactly when check mode said it would."""

from __future__ import annotations

import copy
import json
import time
from typing import Any

import pytest
import yaml
from ansible_collections.nodeops.maintenance.plugins.module_utils import rolling_steps
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.maintenance import lifecycle as lc
from ansible_collections.nodeops.maintenance.plugins.module_utils.engines.rolling_results import (
    AdmitResult,
    DriveResult,
    ReleaseResult,
    RunStatus,
    StartResult,
    StepResult,
    StopResult,
    SummaryResult,
    Waiting,
)
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.client import NODES
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.module import K8sModule
from ansible_collections.nodeops.maintenance.plugins.modules import rolling_maintenance
from unit.test_engine_maintenance import NS, node
from unit.test_rolling_engine import CFG, REQUESTOR, RUN, Api, admitted, rolling, started

# ansible-core 2.19's helper; `make compat` (ansible-core 2.16) skips this file
patch_module_args = pytest.importorskip(
    "ansible.module_utils.testing", reason="ansible.module_utils.testing is new in ansible-core 2.19"
).patch_module_args


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Api:
    fake = Api()
    for name in ("n0", "n1", "n2", "n3"):
        fake.add(NODES, node(name))
    monkeypatch.setattr(K8sModule, "client", property(lambda self: fake))
    return fake


def run_module(
    capsys: pytest.CaptureFixture[str], check_mode: bool, fails: bool = False, **params: Any
) -> dict[str, Any]:
    args = {
        "run_id": RUN,
        "requestor": REQUESTOR,
        "namespace": NS,
        "config_namespace": CFG,
        "engine": "operator",
        "poll_interval": 0.01,
        "_ansible_check_mode": check_mode,
        **params,
    }
    capsys.readouterr()
    with patch_module_args(args), pytest.raises(SystemExit):
        rolling_maintenance.main()
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert bool(result.get("failed")) is fails, result
    return result


def checked(api: Api, capsys: pytest.CaptureFixture[str], **params: Any) -> dict[str, Any]:
    """The step in check mode; asserts that it wrote nothing."""
    before, writes = copy.deepcopy(api.objects), api.write_count
    result = run_module(capsys, True, **params)
    assert api.write_count == writes and api.objects == before
    return result


# ============================================================================== start
def test_check_mode_start_of_a_new_run_would_change(api: Api, capsys: pytest.CaptureFixture[str]) -> None:
    result = checked(api, capsys, step="start", node_names=["n0", "n1"])
    assert result["changed"] is True
    assert [(r["node"], r["action"]) for r in result["requested"]] == [("n0", "created"), ("n1", "created")]
    assert result["pending"] == ["n0", "n1"]


def test_check_mode_start_of_a_started_run_would_not_change(api: Api, capsys: pytest.CaptureFixture[str]) -> None:
    started(api, "n0", "n1")
    result = checked(api, capsys, step="start", node_names=["n0", "n1"])
    assert result["changed"] is False
    assert run_module(capsys, False, step="start", node_names=["n0", "n1"])["changed"] is False


# ============================================================================== admit
def test_check_mode_admit_past_the_fail_budget_aborts_without_a_change(
    api: Api, capsys: pytest.CaptureFixture[str]
) -> None:
    rolling(api).start(["n0", "n1", "n2"], "release", False, defer_requests=True)
    api.auto_ready = True
    rolling(api).admit("n0")
    rolling(api).release("n0", "boom")
    result = checked(api, capsys, step="admit", node="n1")
    assert (result["changed"], result["admitted"], result["abort"]) == (False, False, True)
    real = run_module(capsys, False, step="admit", node="n1")
    assert (real["changed"], real["admitted"], real["abort"]) == (False, False, True)
    assert api.request("n1") is None


# ============================================================================== summary
@pytest.mark.parametrize(
    "make",
    [
        lambda: StartResult(window={}, stopped={}, overrides=[]),
        lambda: AdmitResult(gates={}, stopped={}, withdrawn=[], window={}, failure="x"),
        lambda: ReleaseResult(wave=1, state="done"),
        DriveResult,
        StopResult,
        SummaryResult,
    ],
    ids=["start", "admit", "release", "drive", "stop", "summary"],
)
def test_every_value_a_step_can_return_is_documented(make: Any) -> None:
    """Each result with every field set, its run status and a wait handed back (with each detail a wait can
    have), rendered as the module returns it: no key, and no key of ``waiting``, that the module's RETURN
    documentation does not list."""
    result: StepResult = make()
    result.status = RunStatus("r", "ns/cm", 0, {}, [], [], [], 0.0, False)
    result.waiting = Waiting("admit", 1.0, 0.0, 1.0, "m", ["n0"], {"nodes_not_ready": [], "blockers": []})
    rendered = result.as_dict()
    assert {"changed", "waiting", "resume", "run_id", "complete"} <= set(rendered)
    documented = yaml.safe_load(rolling_maintenance.RETURN)
    assert set(rendered) - set(documented) == {"changed"}
    assert set(rendered["waiting"]) == set(documented["waiting"]["contains"])


def test_a_value_left_out_while_none_is_left_out_and_the_others_stay() -> None:
    rendered = AdmitResult(node="n0").as_dict()
    assert rendered["wave"] is None and rendered["state"] is None  # always there
    assert not {"gates", "stopped", "withdrawn", "window", "failure", "waiting", "resume"} & set(rendered)
    assert "run_id" not in rendered  # no status given


def test_check_mode_summary_reads_only(api: Api, capsys: pytest.CaptureFixture[str]) -> None:
    admitted(api, "n0")
    result = checked(api, capsys, step="summary")
    assert result["changed"] is False and [r["node"] for r in result["nodes"]] == ["n0"]


# ============================================================================== window and gates
CLOSED = {"start": "10:00", "end": "11:00", "time_zone": "UTC"}  # the fake API's clock is 08:00 UTC
OPEN = {"start": "08:00", "end": "09:00", "time_zone": "UTC"}


@pytest.fixture
def clocked(api: Api, monkeypatch: pytest.MonkeyPatch) -> Api:
    """The module's runs on the fake API's clock."""
    real = rolling_steps.Rolling

    def on_fake_clock(client: Any, options: Any, **given: Any) -> Any:
        return real(client, options, clock=api.clock, monotonic=api.clock, **given)

    monkeypatch.setattr(rolling_steps, "Rolling", on_fake_clock)
    return api


@pytest.mark.parametrize(
    ("params", "says"),
    [
        (
            {"window": {"days": ["mon", "funday"], "start": "01:00", "end": "02:00"}},
            "'funday' is not a day of the week",
        ),
        ({"window": {"start": "25:00", "end": "02:00"}}, "window start '25:00' is not a time of day"),
        ({"window": {"start": "01:00", "end": "02:00", "time_zone": "Europe/Nowhere"}}, "'Europe/Nowhere' is not in"),
        ({"window": {"start": "01:00"}}, "give both the window's start and end"),
        ({"gates": {"prometheus_url": "prometheus:9090"}}, "is not an http:// or https:// URL"),
        ({"gates": {"prometheus_url": "http://p:9090", "alert_filter": "Node("}}, "not a regular expression"),
        ({"gate_timeout": 0}, "gate_timeout must be more than 0"),
    ],
)
@pytest.mark.parametrize("step", ["start", "admit", "window"])
def test_bad_window_or_gate_settings_fail_and_change_nothing(
    api: Api, capsys: pytest.CaptureFixture[str], params: dict[str, Any], says: str, step: str
) -> None:
    before, writes = copy.deepcopy(api.objects), api.write_count
    result = run_module(capsys, False, fails=True, step=step, node_names=["n0"], node="n0", **params)
    assert says in result["msg"]
    assert api.write_count == writes and api.objects == before


def test_start_outside_the_window_changes_nothing_in_check_mode_or_not(
    clocked: Api, capsys: pytest.CaptureFixture[str]
) -> None:
    api = clocked
    checked_result = checked(api, capsys, step="start", node_names=["n0"], window=CLOSED)
    assert checked_result["changed"] is False and checked_result["stopped"]["reason"] == "window"
    before, writes = copy.deepcopy(api.objects), api.write_count
    result = run_module(capsys, False, step="start", node_names=["n0"], window=CLOSED)
    assert result["changed"] is False and "opens at 2027-01-15T10:00+00:00 (UTC)" in result["stopped"]["message"]
    assert api.write_count == writes and api.objects == before


def test_the_window_step_reads_nothing(clocked: Api, capsys: pytest.CaptureFixture[str]) -> None:
    api = clocked
    result = checked(api, capsys, step="window", window=CLOSED)
    assert result["open"] is False and result["window"]["opens_in"] == 7200.0
    assert run_module(capsys, False, step="window", window=OPEN)["open"] is True
    assert run_module(capsys, False, step="window")["open"] is True  # no window: always
    assert api.lists == 0


def test_check_mode_admit_outside_the_window_or_blocked_would_not_change(
    clocked: Api, capsys: pytest.CaptureFixture[str]
) -> None:
    api = clocked
    rolling(api).start(["n0"], "release", False, defer_requests=True)
    closed = checked(api, capsys, step="admit", node="n0", window=CLOSED)
    assert closed["changed"] is False and closed["window"]["open"] is False
    assert closed["admitted"] is False and closed["stopped"]["reason"] == "window"
    blocked = checked(api, capsys, step="admit", node="n0", gates={"check_failure": "ceph is HEALTH_WARN"})
    assert blocked["changed"] is False and blocked["stopped"]["blockers"][0]["gate"] == "tasks"
    # let through: it would make the node's request and wait for the scheduler (said, not waited for)
    would = checked(api, capsys, step="admit", node="n0", window=OPEN)
    assert would["changed"] is True and would["admitted"] is False and would["state"] == "pending"
    assert would["waiting"]["phase"] == "admit" and "resume" not in would


# ============================================================================== progress
@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"step": "admit", "progress_after": -1}, "progress_after must be 0 (wait to the end) or more (got -1)"),
        ({"step": "release", "resume": {"phase": "admit", "since": 1.0}}, "goes with step=admit, not step=release"),
        ({"step": "admit", "resume": {"phase": "back", "since": 1.0}}, "goes with step=release, not step=admit"),
        ({"step": "admit", "resume": {"phase": "interrupted", "since": 1.0}}, "goes with step=start, not step=admit"),
        (
            {"step": "admit", "resume": {"phase": "later", "since": 1.0}},
            "value of phase must be one of: interrupted, admit_gate, admit, back, got: later found in resume",
        ),
    ],
)
def test_bad_progress_settings_fail_and_change_nothing(
    api: Api, capsys: pytest.CaptureFixture[str], params: dict[str, Any], message: str
) -> None:
    started(api, "n0")
    before, writes = copy.deepcopy(api.objects), api.write_count
    result = run_module(capsys, False, fails=True, node="n0", **params)
    assert message in result["msg"]
    assert api.write_count == writes and api.objects == before


def test_a_long_admit_wait_hands_back_its_progress_and_the_same_call_with_resume_goes_on(
    api: Api, capsys: pytest.CaptureFixture[str]
) -> None:
    api.tick = 5.0
    started(api, "n0")
    api.set_phase("n0", lc.PHASE_DRAINING)
    result = run_module(capsys, False, step="admit", node="n0", progress_after=10, wave_timeout=600)
    assert result["waiting"]["phase"] == "admit" and result["resume"] == {
        "phase": "admit",
        "since": result["waiting"]["since"],
        "nodes": ["n0"],
    }
    assert result["changed"] is False and result["admitted"] is False
    api.set_phase("n0", lc.PHASE_READY)
    again = run_module(
        capsys, False, step="admit", node="n0", progress_after=10, wave_timeout=600, resume=result["resume"]
    )
    assert again["admitted"] is True and "waiting" not in again


# ============================================================================== the steps of one node
def test_check_mode_admit_and_release_of_one_node_write_nothing(api: Api, capsys: pytest.CaptureFixture[str]) -> None:
    rolling(api).start(["n0", "n1"], "release", False, defer_requests=True)
    admit = checked(api, capsys, step="admit", node="n0")
    assert admit["changed"] is True and admit["admitted"] is False and admit["state"] == "pending"
    api.auto_ready = True
    rolling(api).admit("n0")
    again = checked(api, capsys, step="admit", node="n0")
    assert again["changed"] is False and again["state"] == "maintaining"
    release = checked(api, capsys, step="release", node="n0", failure="disk")
    assert release["changed"] is True and release["state"] == "failed" and release["failure"] == "disk"
    before = run_module(capsys, True, fails=True, step="release", node="n1")  # as the live step says
    assert "n1 is pending; only an admitted node has an outcome" in before["msg"]


@pytest.mark.parametrize("engine", ["builtin", "operator"])
def test_check_mode_runs_the_steps_of_a_node_as_they_would_go_writing_nothing(
    api: Api, capsys: pytest.CaptureFixture[str], engine: str
) -> None:
    """Check mode is the step itself on a copy that keeps its writes: each result is the one the real step then
    returns (but for the times), and nothing reaches the API."""
    rolling(api).start(["n0", "n1"], "release", False, defer_requests=True)
    api.auto_ready = True  # the scheduler makes a request Ready as soon as it is made (in the API)
    would_admit = checked(api, capsys, step="admit", node="n0", engine=engine)  # its request stays in the copy
    assert would_admit["changed"] is True and would_admit["admitted"] is False
    assert (
        would_admit["waiting"]["phase"] == "admit" and "waiting for the scheduler" in would_admit["waiting"]["message"]
    )
    admitted = run_module(capsys, False, step="admit", node="n0", engine=engine)
    assert admitted["admitted"] is True and admitted["wave"] == 1 and admitted["state"] == "maintaining"
    would_release = checked(api, capsys, step="release", node="n0", engine=engine)
    assert would_release["changed"] is True and would_release["released"] == ["n0"]
    assert would_release["state"] == "done" and would_release["batch_ended"]["nodes"] == ["n0"]
    released = run_module(capsys, False, step="release", node="n0", engine=engine)
    assert released == would_release
    # A release whose time on record is its own, to the millisecond, takes the record for its own first write (an
    # answer lost): on a fast machine the next call could come within that millisecond, so it comes after it.
    after = time.time() + 0.002
    while time.time() < after:
        pass
    assert checked(api, capsys, step="release", node="n0", engine=engine)["changed"] is False  # on record already


def test_check_mode_admit_of_a_node_made_ready_already_reports_the_admission_it_would_record_but_hands_it_out_not(
    api: Api, capsys: pytest.CaptureFixture[str]
) -> None:
    rolling(api).start(["n0"], "release", False)  # its request made
    api.set_phase("n0", lc.PHASE_READY)  # and made Ready by the scheduler
    would = checked(api, capsys, step="admit", node="n0")
    assert (would["changed"], would["wave"], would["state"]) == (True, 1, "maintaining")
    assert would["admitted"] is False  # no maintenance runs in check mode: its release would find it pending
    assert "waiting" not in would and rolling(api).load().nodes["n0"].state == "pending"


def test_a_step_of_one_node_without_a_node_or_not_in_the_run_fails(
    api: Api, capsys: pytest.CaptureFixture[str]
) -> None:
    rolling(api).start(["n0"], "release", False, defer_requests=True)
    assert "give node" in run_module(capsys, False, fails=True, step="admit")["msg"]
    for check_mode in (True, False):  # the same step, writing or not
        failed = run_module(capsys, check_mode, fails=True, step="release", node="n2")
        assert "n2 is not a node of the run; a start step adds the targets first" in failed["msg"]


def test_a_stop_records_its_reason_once_and_check_mode_writes_nothing(
    api: Api, capsys: pytest.CaptureFixture[str]
) -> None:
    rolling(api).start(["n0", "n1"], "release", False, defer_requests=True)
    would = checked(api, capsys, step="stop", stop_reason="the webhook is down")
    assert would["changed"] is True and rolling(api).load().stopped is None
    stopped = run_module(capsys, False, step="stop", stop_reason="the webhook is down")
    assert stopped["changed"] is True
    assert stopped["stopped"]["reason"] == "asked" and stopped["stopped"]["message"] == "the webhook is down"
    again = run_module(capsys, False, step="stop", stop_reason="another reason")  # the first stop stays
    assert again["changed"] is False and again["stopped"]["message"] == "the webhook is down"
    assert checked(api, capsys, step="stop", stop_reason="x")["changed"] is False
    admit = run_module(capsys, False, step="admit", node="n0")  # nothing new is admitted
    assert admit["admitted"] is False and admit["stopped"]["message"] == "the webhook is down"
