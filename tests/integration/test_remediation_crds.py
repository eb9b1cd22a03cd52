"""The medik8s-compatible remediation CRDs installed by roles/crds, against the real API server.

The role runs through ``ansible-playbook`` (as users run it); the checks use the official client, so
they show what the server itself enforces: defaults, enums, duration patterns and minimums, and the
CEL rules that stand in for upstream's webhooks.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from integration.test_crds import run_role
from kubernetes import client
from kubernetes.client.rest import ApiException

pytestmark = pytest.mark.integration

NHC_GROUP = "remediation.medik8s.io"
SNR_GROUP = "self-node-remediation.medik8s.io"
VERSION = "v1alpha1"
CONFIG_NAME = "self-node-remediation-config"
TEMPLATE_REF = {
    "apiVersion": f"{SNR_GROUP}/{VERSION}",
    "kind": "SelfNodeRemediationTemplate",
    "namespace": "nodeops-maintenance",
    "name": "self-node-remediation-automatic-strategy-template",
}


@pytest.fixture(scope="module")
def installed(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The role with its defaults (crds_remediation: true), run twice."""
    tmp = tmp_path_factory.mktemp("remediation-crds")
    first = run_role(cluster, tmp, {})
    second = run_role(cluster, tmp, {})
    return {"first": first, "second": second}


@pytest.fixture
def objs(installed: dict[str, Any], api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


@pytest.fixture
def nhc_names(objs: client.CustomObjectsApi) -> Iterator[list[str]]:
    """Names of cluster-scoped NodeHealthChecks a test creates; deleted afterwards."""
    names: list[str] = []
    yield names
    for name in names:
        try:
            objs.delete_cluster_custom_object(NHC_GROUP, VERSION, "nodehealthchecks", name)
        except ApiException as err:
            if err.status != 404:
                raise


def rejected(call: Callable[[], Any]) -> str:
    with pytest.raises(ApiException) as info:
        call()
    assert info.value.status == 422, info.value.body
    return str(info.value.body)


def snr_object(kind: str, name: str, spec: dict[str, Any] | None) -> dict[str, Any]:
    body: dict[str, Any] = {"apiVersion": f"{SNR_GROUP}/{VERSION}", "kind": kind, "metadata": {"name": name}}
    if spec is not None:
        body["spec"] = spec
    return body


def nhc(name: str, **spec: Any) -> dict[str, Any]:
    full = {"selector": {"matchExpressions": [{"key": "node-role.kubernetes.io/worker", "operator": "Exists"}]}}
    full.update(spec)
    return {"apiVersion": f"{NHC_GROUP}/{VERSION}", "kind": "NodeHealthCheck", "metadata": {"name": name}, "spec": full}


# -- the role ---------------------------------------------------------------------------------
def test_role_installs_the_four_crds_established(installed: dict[str, Any], api: client.ApiClient) -> None:
    assert installed["first"]["failed"] == 0
    assert installed["second"]["changed"] == 0, installed["second"]["output"]
    ext = client.ApiextensionsV1Api(api)
    expected = {
        f"nodehealthchecks.{NHC_GROUP}": ("Cluster", ["nhc"]),
        f"selfnoderemediations.{SNR_GROUP}": ("Namespaced", ["snr"]),
        f"selfnoderemediationtemplates.{SNR_GROUP}": ("Namespaced", ["snrt"]),
        f"selfnoderemediationconfigs.{SNR_GROUP}": ("Namespaced", ["snrc"]),
    }
    for name, (scope, short) in expected.items():
        crd = ext.read_custom_resource_definition(name)
        conditions = {c.type: c.status for c in crd.status.conditions}
        assert conditions.get("Established") == "True", name
        assert (crd.spec.scope, crd.spec.names.short_names) == (scope, short)


def test_role_without_remediation_skips_them(installed: dict[str, Any], cluster: Any, tmp_path: Path) -> None:
    """crds_remediation: false applies only the maintenance CRDs (nothing changes, nothing is removed)."""
    run = run_role(cluster, tmp_path, {"crds_remediation": False})
    assert run["changed"] == 0
    assert "nodehealthchecks" not in run["output"]


# -- SelfNodeRemediationConfig ----------------------------------------------------------------
def test_config_defaults(objs: client.CustomObjectsApi, namespace: str) -> None:
    created = objs.create_namespaced_custom_object(
        SNR_GROUP,
        VERSION,
        namespace,
        "selfnoderemediationconfigs",
        snr_object("SelfNodeRemediationConfig", CONFIG_NAME, {}),
    )
    assert created["spec"] == {
        "watchdogFilePath": "/dev/watchdog",
        "isSoftwareRebootEnabled": True,
        "apiServerTimeout": "5s",
        "apiCheckInterval": "15s",
        "maxApiErrorThreshold": 3,
        "peerApiServerTimeout": "5s",
        "peerDialTimeout": "5s",
        "peerRequestTimeout": "7s",
        "peerUpdateInterval": "15m",
        "hostPort": 30001,
        "minPeersForRemediation": 1,
    }


def test_config_accepts_a_full_custom_spec(objs: client.CustomObjectsApi, namespace: str) -> None:
    spec = {
        "safeTimeToAssumeNodeRebootedSeconds": 240,
        "apiServerTimeout": "1.5s",
        "apiCheckInterval": "1m30s",
        "peerRequestTimeout": "500ms",
        "peerUpdateInterval": "10s",
        "customDsTolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "customDsNodeSelectorRequirements": [
            {"key": "zone", "operator": "In", "values": ["a", "b"]},
            {"key": "rack", "operator": "Gt", "values": ["3"]},
        ],
        "minPeersForRemediation": 0,
    }
    created = objs.create_namespaced_custom_object(
        SNR_GROUP,
        VERSION,
        namespace,
        "selfnoderemediationconfigs",
        snr_object("SelfNodeRemediationConfig", CONFIG_NAME, spec),
    )
    assert {k: created["spec"][k] for k in spec} == spec


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"apiServerTimeout": "5"}, "spec.apiServerTimeout"),  # no unit
        ({"apiCheckInterval": "fast"}, "spec.apiCheckInterval"),
        ({"apiCheckInterval": "500ms"}, "apiCheckInterval must be at least 1s"),
        ({"peerDialTimeout": "5ms"}, "peerDialTimeout must be at least 10ms"),
        ({"peerUpdateInterval": "5s"}, "peerUpdateInterval must be at least 10s"),
        ({"maxApiErrorThreshold": 0}, "spec.maxApiErrorThreshold"),
        ({"hostPort": 0}, "spec.hostPort"),
        ({"minPeersForRemediation": -1}, "spec.minPeersForRemediation"),
        ({"safeTimeToAssumeNodeRebootedSeconds": -5}, "spec.safeTimeToAssumeNodeRebootedSeconds"),
        ({"customDsTolerations": [{"key": "a", "operator": "Exists", "value": "x"}]}, "operator Exists takes no value"),
        ({"customDsTolerations": [{"key": "a", "effect": "Sometimes"}]}, "effect"),
        ({"customDsNodeSelectorRequirements": [{"key": "a", "operator": "In"}]}, "In and NotIn need"),
        ({"customDsNodeSelectorRequirements": [{"key": "a", "operator": "Gt", "values": ["x"]}]}, "Gt and Lt"),
    ],
)
def test_config_rejects_bad_values(
    objs: client.CustomObjectsApi, namespace: str, spec: dict[str, Any], field: str
) -> None:
    body = rejected(
        lambda: objs.create_namespaced_custom_object(
            SNR_GROUP,
            VERSION,
            namespace,
            "selfnoderemediationconfigs",
            snr_object("SelfNodeRemediationConfig", CONFIG_NAME, spec),
        )
    )
    assert field in body


def test_config_name_is_fixed(objs: client.CustomObjectsApi, namespace: str) -> None:
    body = rejected(
        lambda: objs.create_namespaced_custom_object(
            SNR_GROUP,
            VERSION,
            namespace,
            "selfnoderemediationconfigs",
            snr_object("SelfNodeRemediationConfig", "my-config", {}),
        )
    )
    assert "self-node-remediation-config" in body


# -- SelfNodeRemediation and its template -----------------------------------------------------
def test_remediation_and_template_default_to_automatic(objs: client.CustomObjectsApi, namespace: str) -> None:
    snr = objs.create_namespaced_custom_object(
        SNR_GROUP, VERSION, namespace, "selfnoderemediations", snr_object("SelfNodeRemediation", "worker-1", {})
    )
    assert snr["spec"] == {"remediationStrategy": "Automatic"}
    template = objs.create_namespaced_custom_object(
        SNR_GROUP,
        VERSION,
        namespace,
        "selfnoderemediationtemplates",
        snr_object("SelfNodeRemediationTemplate", "automatic", {"template": {"spec": {}}}),
    )
    assert template["spec"]["template"]["spec"] == {"remediationStrategy": "Automatic"}
    status = {"phase": "Pre-Reboot-Completed", "timeAssumedRebooted": "2026-01-01T00:03:00Z"}
    patched = objs.patch_namespaced_custom_object_status(
        SNR_GROUP, VERSION, namespace, "selfnoderemediations", "worker-1", {"status": status}
    )
    assert patched["status"] == status


@pytest.mark.parametrize("strategy", ["NodeDeletion", "automatic", "Reboot"])
def test_invalid_strategy_is_rejected(objs: client.CustomObjectsApi, namespace: str, strategy: str) -> None:
    body = rejected(
        lambda: objs.create_namespaced_custom_object(
            SNR_GROUP,
            VERSION,
            namespace,
            "selfnoderemediations",
            snr_object("SelfNodeRemediation", "worker-2", {"remediationStrategy": strategy}),
        )
    )
    assert "spec.remediationStrategy" in body
    body = rejected(
        lambda: objs.create_namespaced_custom_object(
            SNR_GROUP,
            VERSION,
            namespace,
            "selfnoderemediationtemplates",
            snr_object("SelfNodeRemediationTemplate", "bad", {"template": {"spec": {"remediationStrategy": strategy}}}),
        )
    )
    assert "remediationStrategy" in body


# -- NodeHealthCheck --------------------------------------------------------------------------
def test_nhc_defaults_and_escalations(objs: client.CustomObjectsApi, nhc_names: list[str]) -> None:
    name = f"nhc-{uuid.uuid4().hex[:6]}"
    nhc_names.append(name)
    created = objs.create_cluster_custom_object(
        NHC_GROUP, VERSION, "nodehealthchecks", nhc(name, minHealthy="51%", remediationTemplate=TEMPLATE_REF)
    )
    assert created["spec"]["unhealthyConditions"] == [
        {"type": "Ready", "status": "False", "duration": "300s"},
        {"type": "Ready", "status": "Unknown", "duration": "300s"},
    ]
    name2 = f"nhc-{uuid.uuid4().hex[:6]}"
    nhc_names.append(name2)
    steps = [
        {"remediationTemplate": TEMPLATE_REF, "order": 1, "timeout": "5m"},
        {"remediationTemplate": {**TEMPLATE_REF, "name": "other"}, "order": 2, "timeout": "1h"},
    ]
    created = objs.create_cluster_custom_object(
        NHC_GROUP,
        VERSION,
        "nodehealthchecks",
        nhc(name2, maxUnhealthy=1, escalatingRemediations=steps, healthyDelay="-1s", pauseRequests=["upgrade"]),
    )
    assert created["spec"]["escalatingRemediations"] == steps
    assert created["spec"]["healthyDelay"] == "-1s"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"minHealthy": 2, "maxUnhealthy": 1, "remediationTemplate": TEMPLATE_REF}, "exactly one of minHealthy"),
        ({"remediationTemplate": TEMPLATE_REF}, "exactly one of minHealthy"),
        ({"minHealthy": 2}, "exactly one of remediationTemplate"),
        ({"minHealthy": "5", "remediationTemplate": TEMPLATE_REF}, "minHealthy must be"),
        ({"minHealthy": "101%", "remediationTemplate": TEMPLATE_REF}, "minHealthy must be"),
        ({"maxUnhealthy": -1, "remediationTemplate": TEMPLATE_REF}, "maxUnhealthy must be"),
        ({"minHealthy": 1, "remediationTemplate": {**TEMPLATE_REF, "kind": "SelfNodeRemediation"}}, "end in Template"),
        ({"minHealthy": 1, "remediationTemplate": TEMPLATE_REF, "selector": {}}, "selector must not be empty"),
        (
            {
                "minHealthy": 1,
                "remediationTemplate": TEMPLATE_REF,
                "unhealthyConditions": [{"type": "Ready", "status": "False", "duration": "5 minutes"}],
            },
            "spec.unhealthyConditions[0].duration",
        ),
        ({"minHealthy": 1, "remediationTemplate": TEMPLATE_REF, "healthyDelay": "soon"}, "spec.healthyDelay"),
        (
            {
                "minHealthy": 1,
                "escalatingRemediations": [{"remediationTemplate": TEMPLATE_REF, "order": 1, "timeout": "30s"}],
            },
            "timeout must be at least 60s",
        ),
        (
            {
                "minHealthy": 1,
                "escalatingRemediations": [
                    {"remediationTemplate": TEMPLATE_REF, "order": 1, "timeout": "5m"},
                    {"remediationTemplate": TEMPLATE_REF, "order": 1, "timeout": "10m"},
                ],
            },
            "Duplicate value",
        ),
    ],
)
def test_nhc_rejects_bad_specs(objs: client.CustomObjectsApi, spec: dict[str, Any], message: str) -> None:
    body = rejected(
        lambda: objs.create_cluster_custom_object(NHC_GROUP, VERSION, "nodehealthchecks", nhc("bad-nhc", **spec))
    )
    assert message in body
