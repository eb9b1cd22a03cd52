"""Maintenance windows and gates of a rolling run: engines/rolling.py against the in-memory API (its clock is the
run's clock, so the end of a window is a fake clock moving on), and the pure gate rules of core/maintenance/gates.py."""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.maintenance import gates as gatecore
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.maintenance import lifecycle as lc
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.maintenance.window import parse_window
from ansible_collections.nodeops.maintenance.plugins.module_utils.engines.maintenance import ReconcileOptions
from ansible_collections.nodeops.maintenance.plugins.module_utils.engines.rolling import (
    GateOptions,
    RunOptions,
)
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.client import (
    MAINTENANCE_CONFIGS,
    NODE_MAINTENANCES,
    NODES,
    PODS,
)
from ansible_collections.nodeops.maintenance.plugins.module_utils.prometheus import PrometheusError
from unit.test_engine_maintenance import NOW, NS, nm
from unit.test_rolling_engine import CFG, RECORD, REQUESTOR, RUN, Api, rolling

# NOW is Friday 2027-01-15 08:00 UTC
OPEN = parse_window(None, "08:00", "09:00", "UTC")  # open now, closes in an hour
CLOSED = parse_window(None, "10:00", "11:00", "UTC")  # opens in two hours
assert OPEN is not None and CLOSED is not None and OPEN.is_open(NOW) and not CLOSED.is_open(NOW)


class GateApi(Api):
    """Api whose pod lists honour a ``key=value`` label selector."""

    def list(self, res: Any, namespace: str | None = None, **kw: Any) -> dict[str, Any]:
        answer = super().list(res, namespace, **kw)
        selector = kw.get("label_selector")
        if res is PODS and selector:
            key, value = selector.split("=", 1)
            answer["items"] = [p for p in answer["items"] if (p["metadata"].get("labels") or {}).get(key) == value]
        return answer


def pod(name: str, node_name: str, labels: dict[str, str], phase: str = "Running") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "apps", "labels": labels},
        "spec": {"nodeName": node_name},
        "status": {"phase": phase},
    }


# ============================================================================== windows
def test_a_start_outside_the_window_changes_nothing_and_says_when_it_opens(gate_api: GateApi) -> None:
    result = rolling(gate_api, window=CLOSED).start(["n0", "n1"], "release", False)
    assert result["changed"] is False and result["pending"] == []
    assert result["stopped"]["reason"] == "window"
    assert result["window"]["opens_at"] == "2027-01-15T10:00+00:00 (UTC)" == result["stopped"]["opens_at"]
    assert "2027-01-15T10:00+00:00 (UTC)" in result["stopped"]["message"]
    assert gate_api.requests() == [] and gate_api.write_count == 0
    assert ("configmaps", CFG, RECORD) not in gate_api.objects


def test_admit_outside_the_window_gives_the_request_back_and_keeps_the_node_pending(gate_api: GateApi) -> None:
    rolling(gate_api, window=OPEN).start(["n0", "n1"], "release", False)
    gate_api.set_phase("n0", lc.PHASE_READY)  # the operator prepared it already
    result = rolling(gate_api, window=CLOSED).admit("n0")
    assert result["admitted"] is False and result["wave"] is None and result["stopped"]["reason"] == "window"
    assert result["withdrawn"] == ["n0"] and result["changed"] is True
    assert result["state"] == "pending" and result["opened"] is False  # what every admit returns, as documented
    assert gate_api.request("n0") is None
    record = gate_api.record()
    assert {n: r["state"] for n, r in record.items()} == {"n0": "pending", "n1": "pending"}
    assert record["n0"]["admitted"] is None and record["n0"]["ready"] is None
    # the stop is on record: the other node's admit gives its request back too
    other = rolling(gate_api, window=CLOSED).admit("n1")
    assert other["admitted"] is False and other["stopped"]["reason"] == "window" and gate_api.requests() == []
    # the same command later, inside the window: start requests them again and the nodes are admitted
    again = rolling(gate_api, window=OPEN).start(["n0", "n1"], "release", False)
    assert again["pending"] == ["n0", "n1"] and gate_api.request("n0") is not None
    gate_api.set_phase("n0", lc.PHASE_READY)
    gate_api.set_phase("n1", lc.PHASE_READY)
    assert [rolling(gate_api, window=OPEN).admit(n)["admitted"] for n in ("n0", "n1")] == [True, True]


def test_the_end_of_the_window_stops_the_run_after_the_nodes_in_their_maintenance(gate_api: GateApi) -> None:
    """A fake clock: the node is admitted inside the window, its maintenance outlasts the window; its release goes
    on normally, no node is admitted after it, and the run goes on when the window opens again."""
    gate_api.tick = 1.0
    rolling(gate_api, window=OPEN).start(["n0", "n1", "n2"], "release", False)
    gate_api.set_phase("n0", lc.PHASE_READY)
    assert rolling(gate_api, window=OPEN).admit("n0")["admitted"] is True
    gate_api.set_phase("n1", lc.PHASE_READY)  # the operator prepared the next one meanwhile
    gate_api.now = NOW + 3600.0  # 09:00: the window closed during the maintenance
    result = rolling(gate_api, window=OPEN).release("n0", None)
    assert result["state"] == "done" and result["released"] == ["n0"]
    following = rolling(gate_api, window=OPEN).admit("n1")
    assert following["admitted"] is False and following["stopped"]["reason"] == "window"
    assert following["stopped"]["opens_at"] == "2027-01-16T08:00+00:00 (UTC)"
    assert following["withdrawn"] == ["n1"]
    on_record = rolling(gate_api, window=OPEN).admit("n2")["stopped"]  # the stop on record (with its time)
    assert on_record["reason"] == "window" and on_record["message"] == following["stopped"]["message"]
    assert {n: r["state"] for n, r in gate_api.record().items()} == {"n0": "done", "n1": "pending", "n2": "pending"}
    assert gate_api.requests() == []
    # the next day's window
    gate_api.now = NOW + 86400.0
    rolling(gate_api, window=OPEN).start(["n0", "n1", "n2"], "release", False)
    gate_api.set_phase("n1", lc.PHASE_READY)
    gate_api.set_phase("n2", lc.PHASE_READY)
    assert [rolling(gate_api, window=OPEN).admit(n)["wave"] for n in ("n1", "n2")] == [2, 2]


def test_with_the_builtin_engine_no_pass_schedules_a_new_node_once_the_window_closed(gate_api: GateApi) -> None:
    gate_api.add(
        MAINTENANCE_CONFIGS, {"metadata": {"name": "default", "namespace": NS}, "spec": {"maxParallelOperations": 2}}
    )
    gate_api.tick = 0.0
    reconcile = ReconcileOptions(namespace=NS, config_namespace=NS, lease_wait=0)
    opts: dict[str, Any] = {"engine": "builtin", "reconcile": reconcile, "window": OPEN}
    rolling(gate_api, **opts).start(["n0"], "release", False)
    assert rolling(gate_api, **opts).admit("n0")["admitted"] is True
    gate_api.add(NODE_MAINTENANCES, nm("other-n2", "n2"))  # someone else's request, with a free slot
    gate_api.now = NOW + 3600.0
    result = rolling(gate_api, **opts).release("n0", None)  # its release runs passes: they must schedule nothing
    assert result["released"] == ["n0"]
    assert "unschedulable" not in gate_api.objects[(NODES.plural, None, "n2")]["spec"]
    phase = lc.NodeMaintenanceView.from_dict(gate_api.objects[(NODE_MAINTENANCES.plural, NS, "other-n2")]).phase
    assert phase in ("", lc.PHASE_PENDING)
    # an admission inside the window schedules the other request as before
    gate_api.now = NOW
    opts["window"] = None
    rolling(gate_api, **opts).start(["n1"], "release", False)
    assert rolling(gate_api, **opts).admit("n1")["admitted"] is True
    assert gate_api.objects[(NODES.plural, None, "n2")]["spec"].get("unschedulable") is True


def test_with_only_gate_tasks_the_releases_schedule_no_new_node(gate_api: GateApi) -> None:
    """The playbook runs its own gate tasks before each admit: a release must not cordon the next nodes first."""
    gate_api.add(
        MAINTENANCE_CONFIGS, {"metadata": {"name": "default", "namespace": NS}, "spec": {"maxParallelOperations": 2}}
    )
    gate_api.tick = 0.0
    reconcile = ReconcileOptions(namespace=NS, config_namespace=NS, lease_wait=0)
    opts: dict[str, Any] = {"engine": "builtin", "reconcile": reconcile, "gates": GateOptions(tasks=True)}
    assert RunOptions(run_id=RUN, requestor=REQUESTOR, namespace=NS, record_namespace=CFG, spec={}, **opts).holds
    rolling(gate_api, **opts).start(["n0"], "release", False)
    assert rolling(gate_api, **opts).admit("n0")["admitted"] is True
    gate_api.add(NODE_MAINTENANCES, nm("other-n2", "n2"))  # someone else's request, with a free slot
    assert rolling(gate_api, **opts).release("n0", None)["released"] == ["n0"]
    assert "unschedulable" not in gate_api.objects[(NODES.plural, None, "n2")]["spec"]


def test_the_window_closing_while_a_node_waits_stops_without_admitting_it(gate_api: GateApi) -> None:
    gate_api.tick = 600.0  # every look at the cluster is ten minutes
    rolling(gate_api, window=OPEN).start(["n0", "n1"], "release", False)
    gate_api.set_phase("n0", lc.PHASE_DRAINING)
    result = rolling(gate_api, window=OPEN, wave_timeout=7200.0).admit("n0")
    assert result["stopped"]["reason"] == "window" and result["admitted"] is False
    assert gate_api.request("n0") is None and gate_api.record()["n0"]["state"] == "pending"


# ============================================================================== gates
def gates(**kw: Any) -> GateOptions:
    return GateOptions(**{"timeout": 10.0, "interval": 0.0, **kw})


def test_a_blocking_pod_on_the_node_stops_the_run_naming_it(gate_api: GateApi) -> None:
    gate_api.add(PODS, pod("trainer", "n0", {"block": "yes"}))
    gate_api.add(PODS, pod("done-job", "n1", {"block": "yes"}, phase="Succeeded"))
    gate_api.add(PODS, pod("elsewhere", "n3", {"block": "yes"}))
    opts = {"gates": gates(pod_selector="block=yes")}
    rolling(gate_api, **opts).start(["n0", "n1"], "release", False)
    gate_api.set_phase("n0", lc.PHASE_READY)
    result = rolling(gate_api, **opts).admit("n0")
    assert result["stopped"]["reason"] == "gate" and result["admitted"] is False and result["wave"] is None
    assert [b["message"] for b in result["stopped"]["blockers"]] == ["pod apps/trainer on n0"]
    assert (
        result["stopped"]["blockers"][0] | {"gate": "pods", "node": "n0", "namespace": "apps"}
        == (result["stopped"]["blockers"][0])
    )
    assert "pod apps/trainer on n0" in result["stopped"]["message"] and "after 10s" in result["stopped"]["message"]
    assert gate_api.request("n0") is None
    # the whole cluster: the pod on n3 (not in the run) blocks too
    gate_api.objects.pop((PODS.plural, "apps", "trainer"))
    rolling(gate_api, **opts).start(["n0", "n1"], "release", False)
    cluster = rolling(gate_api, gates=gates(pod_selector="block=yes", pod_scope="cluster")).admit("n1")
    assert [b["node"] for b in cluster["stopped"]["blockers"]] == ["n3"]


def test_a_pod_that_goes_while_the_gate_waits_lets_the_node_in(gate_api: GateApi) -> None:
    gate_api.add(PODS, pod("trainer", "n0", {"block": "yes"}))
    opts = {"gates": gates(pod_selector="block=yes", timeout=100.0)}
    rolling(gate_api, **opts).start(["n0"], "release", False)
    gate_api.set_phase("n0", lc.PHASE_READY)

    listing = gate_api.list
    checks: list[int] = []

    def the_job_ends_after_a_few_checks(res: Any, namespace: str | None = None, **kw: Any) -> dict[str, Any]:
        if res is PODS:
            checks.append(1)
            if len(checks) > 3:
                gate_api.objects.pop((PODS.plural, "apps", "trainer"), None)
        return listing(res, namespace, **kw)

    gate_api.list = the_job_ends_after_a_few_checks  # type: ignore[method-assign]
    result = rolling(gate_api, **opts).admit("n0")
    assert result["admitted"] is True
    assert result["gates"]["blocked_by"] == ["pod apps/trainer on n0"] and result["gates"]["checks"] > 1


def test_the_pod_gate_looks_only_at_the_node_to_be_admitted(gate_api: GateApi) -> None:
    gate_api.add(PODS, pod("trainer", "n1", {"block": "yes"}))
    opts: dict[str, Any] = {"gates": gates(pod_selector="block=yes")}
    rolling(gate_api, **opts).start(["n0", "n1"], "release", False)
    gate_api.set_phase("n0", lc.PHASE_READY)
    assert rolling(gate_api, **opts).admit("n0")["admitted"] is True


def alerts_of(api: Api, answer: list[dict[str, Any]] | Exception) -> Any:
    def fetch(url: str, **kw: Any) -> list[dict[str, Any]]:
        api.now += 1.0  # asking takes time
        if isinstance(answer, Exception):
            raise answer
        return answer

    return fetch


FIRING = {"labels": {"alertname": "NodeDown", "severity": "critical", "instance": "n7"}, "state": "firing"}
PENDING = {"labels": {"alertname": "DiskFilling", "severity": "warning"}, "state": "pending"}


def test_a_firing_alert_blocks_the_node_and_is_named_with_its_labels(gate_api: GateApi) -> None:
    opts = {"gates": gates(prometheus_url="http://prom:9090")}
    rolling(gate_api, **opts).start(["n0"], "release", False)
    gate_api.set_phase("n0", lc.PHASE_READY)
    result = rolling(gate_api, alerts_of(gate_api, [FIRING, PENDING]), **opts).admit("n0")
    assert [b["message"] for b in result["stopped"]["blockers"]] == [
        "alert NodeDown (firing): instance=n7, severity=critical"
    ]
    assert result["stopped"]["blockers"][0]["labels"]["severity"] == "critical"


def test_pending_alerts_and_filtered_out_alerts(gate_api: GateApi) -> None:
    opts = {"gates": gates(prometheus_url="http://prom:9090", alert_filter="Disk.*", pending_alerts=True)}
    rolling(gate_api, **opts).start(["n0"], "release", False)
    gate_api.set_phase("n0", lc.PHASE_READY)
    result = rolling(gate_api, alerts_of(gate_api, [FIRING, PENDING]), **opts).admit("n0")
    assert [b["alertname"] for b in result["stopped"]["blockers"]] == ["DiskFilling"]
    rolling(gate_api, **opts).start(["n0"], "release", False)
    gate_api.set_phase("n0", lc.PHASE_READY)
    only_firing = {"gates": gates(prometheus_url="http://prom:9090", alert_filter="Disk.*")}
    assert rolling(gate_api, alerts_of(gate_api, [FIRING, PENDING]), **only_firing).admit("n0")["admitted"] is True


def test_prometheus_out_of_reach_blocks(gate_api: GateApi) -> None:
    opts = {"gates": gates(prometheus_url="http://prom:9090")}
    rolling(gate_api, **opts).start(["n0"], "release", False)
    gate_api.set_phase("n0", lc.PHASE_READY)
    down = PrometheusError("Prometheus at http://prom:9090 did not answer (connection refused)")
    result = rolling(gate_api, alerts_of(gate_api, down), **opts).admit("n0")
    assert result["stopped"]["reason"] == "gate" and result["admitted"] is False
    assert "did not answer (connection refused); the alert gate blocks" in result["stopped"]["message"]


def test_a_failed_user_check_stops_at_once(gate_api: GateApi) -> None:
    rolling(gate_api).start(["n0"], "release", False)
    gate_api.set_phase("n0", lc.PHASE_READY)
    result = rolling(gate_api, gates=gates(check_failure="Check the storage: ceph is HEALTH_WARN")).admit("n0")
    assert result["stopped"]["reason"] == "gate"
    assert result["stopped"]["blockers"] == [
        {"gate": "tasks", "message": "the gate tasks failed: Check the storage: ceph is HEALTH_WARN"}
    ]
    assert "after" not in result["stopped"]["message"]


# ============================================================================== core/maintenance/gates.py
def test_blocking_pods_rules() -> None:
    pods = [
        pod("a", "n1", {}),
        pod("b", "n2", {}, phase="Failed"),
        pod("c", "n3", {}, phase="Pending"),
        {"metadata": {"name": "d", "namespace": "x"}, "spec": {}, "status": {"phase": "Pending"}},
    ]
    assert [b.message for b in gatecore.blocking_pods(pods, None)] == [
        "pod x/d (not scheduled)",
        "pod apps/a on n1",
        "pod apps/c on n3",
    ]
    assert [b.message for b in gatecore.blocking_pods(pods, ["n1", "n2"])] == ["pod apps/a on n1"]
    assert gatecore.blocking_pods(pods, []) == []


def test_alert_filter_matches_the_whole_name_and_a_bad_one_is_refused() -> None:
    assert [b.data["alertname"] for b in gatecore.blocking_alerts([FIRING], "Node")] == []
    assert [b.data["alertname"] for b in gatecore.blocking_alerts([FIRING], "Node.*|Disk.*")] == ["NodeDown"]
    with pytest.raises(gatecore.GateError, match="not a regular expression"):
        gatecore.blocking_alerts([FIRING], "Node(")


def test_summarize_names_the_first_ten() -> None:
    many = [gatecore.Blocker("pods", f"pod p{i}") for i in range(12)]
    assert gatecore.summarize(many).endswith("pod p9; and 2 more")
    assert gatecore.summarize([]) == "nothing blocks"


# ============================================================================== one node at a time
def test_a_gate_that_starts_to_block_while_a_node_waits_its_turn_takes_its_request_back(gate_api: GateApi) -> None:
    """admit checks the gates before the node's request, and again every gate interval while the request waits
    in the scheduler's queue: a blocking pod that appears meanwhile takes the request back (nothing new is cordoned
    while a gate blocks); the wait is handed back naming it, and once the pod is gone the node is requested again
    and admitted."""
    options = {"gates": GateOptions(pod_selector="block=yes", interval=1.0, timeout=100.0), "progress_after": 30.0}
    rolling(gate_api, **options).start(["n0"], "release", False, defer_requests=True)
    seen: list[bool] = []

    def the_pod_appears_while_n0_waits(fake: Api) -> None:
        if fake.request("n0") is not None and not seen:
            seen.append(True)
            fake.add(PODS, pod("trainer", "n0", {"block": "yes"}))

    gate_api.hooks.append(the_pod_appears_while_n0_waits)
    waiting = rolling(gate_api, **options).admit("n0")
    assert waiting["admitted"] is False and waiting["resume"]["phase"] == "admit_gate"
    assert [b["message"] for b in waiting["waiting"]["blockers"]] == ["pod apps/trainer on n0"]
    assert gate_api.request("n0") is None  # given back while the gate blocks
    del gate_api.objects[(PODS.plural, "apps", "trainer")]
    gate_api.auto_ready = True
    admitted = rolling(gate_api, **options).admit("n0", resume=waiting["resume"])
    assert admitted["admitted"] is True and gate_api.request("n0") is not None
