"""Bad input across the modules: each entry fails with a message that names what was wrong and how to fix it,
and the cluster is never contacted (no read, so no write): the client the module would use records any use.

Offline entries would not need a cluster anyway; the live ones (no offline data given) prove that the check
comes before the first API call."""

from __future__ import annotations

import importlib
import json
from typing import Any

import pytest
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.module import K8sModule
from support.specs import NHC

# ansible-core 2.19's helper; `make compat` (ansible-core 2.16) skips this file
patch_module_args = pytest.importorskip(
    "ansible.module_utils.testing", reason="ansible.module_utils.testing is new in ansible-core 2.19"
).patch_module_args

NM = {
    "kind": "NodeMaintenance",
    "metadata": {"name": "m", "namespace": "ops"},
    "spec": {"nodeName": "n0", "requestorID": "a.example.com"},
}
PLAN = {"nodes": [{"metadata": {"name": "n0"}}], "node_maintenances": [NM]}
SNR_OFFLINE = {"remediations": [], "kubernetes_version": "v1.30.2"}
REQUEST = {"name": ["n0"], "requestor": "a.example.com"}


def nhc(**change: Any) -> dict[str, Any]:
    spec = {k: v for k, v in NHC.items() if k not in change}
    spec.update({k: v for k, v in change.items() if v is not None})
    return {"spec": spec}


def config(**spec: Any) -> dict[str, Any]:
    return {**SNR_OFFLINE, "configs": [{"metadata": {"name": "self-node-remediation-config"}, "spec": spec}]}


def snr(**spec: Any) -> dict[str, Any]:
    obj = {"metadata": {"name": "n0", "namespace": "ops"}, "spec": spec}
    return {**SNR_OFFLINE, "remediations": [obj]}


def nm(**spec: Any) -> dict[str, Any]:
    return {**PLAN, "node_maintenances": [{**NM, "spec": {**NM["spec"], **spec}}]}


TABLE: list[tuple[str, dict[str, Any], str]] = [
    # node_health: the NodeHealthCheck spec, checked as the API server checks it
    ("node_health", nhc(minHealthy=None, minHealty="51%"), "spec.minHealty: unknown field; did you mean minHealthy?"),
    (
        "node_health",
        nhc(minHealthy=None, min_healthy="51%"),
        "did you mean minHealthy? (objects take the CRD's camelCase",
    ),
    ("node_health", nhc(minHealthy="120%"), "minHealthy must be a number of 0 or more or a percentage from 0% to 100%"),
    ("node_health", nhc(minHealthy=True), "spec.minHealthy: must be a whole number or a string"),
    ("node_health", nhc(maxUnhealthy=1), "set exactly one of minHealthy and maxUnhealthy"),
    ("node_health", nhc(minHealthy=None), "set exactly one of minHealthy and maxUnhealthy"),
    (
        "node_health",
        nhc(unhealthyConditions=[{"type": "Ready", "status": "False", "duration": "5 minutes"}]),
        'spec.unhealthyConditions[0].duration: the string "5 minutes" does not have the form',
    ),
    (
        "node_health",
        nhc(unhealthyConditions=[{"type": "Ready", "duration": "5m"}]),
        "unhealthyConditions[0].status: required",
    ),
    (
        "node_health",
        nhc(selector={"matchExpressions": [{"key": "k", "operator": "exists"}]}),
        "did you mean Exists?",
    ),
    (
        "node_health",
        nhc(remediationTemplate={**NHC["remediationTemplate"], "kind": "SelfNodeRemediation"}),
        "the kind of a remediation template must end in Template",
    ),
    ("node_health", nhc(pauseRequests="stop"), "spec.pauseRequests: must be a list"),
    ("node_health", {**nhc(minHealthy=None, minHealty=1), "nodes": []}, "spec.minHealty: unknown field"),
    ("node_health", {"specs": NHC}, "specs: unknown option; did you mean spec?"),
    ("node_health", {**nhc(), "lease_wiat": 5}, "lease_wiat: unknown option; did you mean lease_wait?"),
    # remediation offline: SelfNodeRemediationConfig, SelfNodeRemediation objects
    (
        "remediation",
        config(safe_time_to_assume_node_rebooted_seconds=30),
        "configs[0].spec.safe_time_to_assume_node_rebooted_seconds: unknown field; did you mean "
        "safeTimeToAssumeNodeRebootedSeconds?",
    ),
    ("remediation", config(safeTimeToAssumeNodeRebootedSeconds="30"), 'not the string "30" (a number in quotes'),
    ("remediation", config(safeTimeToAssumeNodeRebootedSeconds=-1), "is below the least allowed value, 0"),
    ("remediation", config(apiCheckInterval="1ms"), "apiCheckInterval must be at least 1s"),
    ("remediation", config(peerRequestTimeout=5), "configs[0].spec.peerRequestTimeout: must be a string"),
    ("remediation", config(maxApiErrorThreshold=0), "maxApiErrorThreshold: 0 is below the least allowed value, 1"),
    ("remediation", config(isSoftwareRebootEnabled="yes"), "(write true or false without quotes)"),
    ("remediation", snr(remediationStrategy="Reboot"), "remediations[0].spec.remediationStrategy: the string"),
    ("remediation", snr(remediationStrategy="outOfServiceTaint"), "did you mean OutOfServiceTaint?"),
    (
        "remediation",
        {**SNR_OFFLINE, "watchdog_timout": 3},
        "watchdog_timout: unknown option; did you mean watchdog_timeout?",
    ),
    # maintenance_plan: limits, offline objects, options
    ("maintenance_plan", {**PLAN, "config": {"max_parallel_operation": 3}}, "did you mean max_parallel_operations?"),
    (
        "maintenance_plan",
        {**PLAN, "config": {"max_unavailable": "10pct"}},
        'config.maxUnavailable: the string "10pct" is refused: maxUnavailable must be an integer or a whole',
    ),
    (
        "maintenance_plan",
        {**PLAN, "config": {"max_unavailable": "10.5%"}},
        "maxUnavailable must be an integer or a whole percentage",
    ),
    (
        "maintenance_plan",
        {**PLAN, "config": {"maxParallelOperations": True}},
        "config.maxParallelOperations: must be a whole number or a string",
    ),
    ("maintenance_plan", {"nodes": PLAN["nodes"]}, "nodes without node_maintenances: an offline plan needs both"),
    ("maintenance_plan", {"node_maintenances": [NM]}, "node_maintenances without nodes: an offline plan needs both"),
    (
        "maintenance_plan",
        nm(nodename="n0"),
        "node_maintenances[0].spec.nodename: unknown field; did you mean nodeName?",
    ),
    (
        "maintenance_plan",
        nm(drainSpec={"timeoutSeconds": "300"}),
        'drainSpec.timeoutSeconds: must be a whole number, not the string "300"',
    ),
    ("maintenance_plan", nm(cordon="yes"), "spec.cordon: must be true or false"),
    ("maintenance_plan", {**PLAN, "unknown_nodes": "fail"}, "value of unknown_nodes must be one of: skip, error"),
    (
        "maintenance_plan",
        {**PLAN, "node_maintenance": []},
        "node_maintenance: unknown option; did you mean node_maintenances?",
    ),
    # node_maintenance: the request options (snake_case, or the CRD's camelCase)
    ("node_maintenance", {**REQUEST, "drain_specs": {}}, "drain_specs: unknown option; did you mean drain_spec?"),
    (
        "node_maintenance",
        {**REQUEST, "drainSpec": {"timeout_second": 5}},
        "drainSpec.timeout_second: unknown option; did you mean",
    ),
    ("node_maintenance", {**REQUEST, "drain_spec": {"timeoutSeconds": "abc"}}, "timeout_seconds"),
    (
        "node_maintenance",
        {**REQUEST, "drain_spec": {"timeout_seconds": -1}},
        "drain_spec.timeout_seconds must be 0 or more",
    ),
    ("node_maintenance", {"name": ["n0"]}, "missing required arguments: requestor"),
    ("node_maintenance", {**REQUEST, "state": "gone"}, "value of state must be one of: present, absent"),
    (
        "node_maintenance",
        {**REQUEST, "drain_spec": {"pod_eviction_filters": [{"by_resource_name": "gpu"}]}},
        "drain_spec.pod_eviction_filters[0].by_resource_name: unknown option; did you mean by_resource_name_regex?",
    ),
    (
        "node_maintenance",
        {**REQUEST, "drain_spec": {"pod_eviction_filters": [{"by_resource_name_regex": "gpu["}]}},
        "is not a valid regular expression",
    ),
    ("node_maintenance", {**REQUEST, "requestor": "Not A Name!"}, "spec.requestorID"),
    # rolling_maintenance: the spec of the requests it will make, before the first call
    (
        "rolling_maintenance",
        {"step": "start", "run_id": "r", "node_names": ["n0"], "requestor": "Not A Name!"},
        "spec.requestorID",
    ),
    (
        "rolling_maintenance",
        {"step": "start", "run_id": "r", "node_names": ["n0"], "requestor": "a.example.com", "gather_secs": 5},
        "gather_secs: unknown option; did you mean gather_seconds?",
    ),
    # maintenance_plan: the config, checked against the MaintenanceOperatorConfig CRD
    (
        "maintenance_plan",
        {**PLAN, "config": {"log_level": "verbose"}},
        'config.logLevel: the string "verbose" is not one',
    ),
    ("maintenance_plan", {**PLAN, "config": {"maxNodeMaintenanceTimeSeconds": -1}}, "below the least allowed value"),
    # drain and cordon
    ("drain", {"name": "n0", "timeout": 5}, "timeout: unknown option; did you mean timeout_seconds?"),
    ("drain", {"name": "n0", "delete_empty_dir_data": True}, "did you mean delete_emptydir_data?"),
    ("cordon", {"name": ["n0"], "node_selecter": "a=b"}, "node_selecter: unknown option; did you mean node_selector?"),
]


class Untouchable:
    """The client a module would use: any use is recorded and refused."""

    def __init__(self, used: list[str]) -> None:
        self._used = used

    def __getattr__(self, name: str) -> Any:
        self._used.append(name)
        raise AssertionError(f"the cluster was contacted ({name})")


@pytest.mark.parametrize(("module", "args", "expected"), TABLE, ids=[f"{row[0]}-{i}" for i, row in enumerate(TABLE)])
def test_bad_input_fails_with_a_clear_message_and_contacts_nothing(
    module: str,
    args: dict[str, Any],
    expected: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    used: list[str] = []
    monkeypatch.setattr(K8sModule, "client", property(lambda self: Untouchable(used)))
    main = importlib.import_module(f"ansible_collections.nodeops.maintenance.plugins.modules.{module}").main
    capsys.readouterr()
    with patch_module_args(args), pytest.raises(SystemExit):
        main()
    result = json.loads(capsys.readouterr().out)
    assert used == []
    assert result.get("failed") is True, result
    assert expected in result["msg"], result["msg"]
    assert not result.get("changed")


def test_the_table_is_wide() -> None:
    assert len(TABLE) >= 40
    assert len({row[0] for row in TABLE}) >= 6
