"""The CRD manifests of roles/crds: they load, and say what the upstream APIs and docs/design-notes.md say.

Cheap checks without an API server; tests/integration/test_crds.py shows the server enforces them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

FILES = Path(__file__).resolve().parents[2] / "roles" / "crds" / "files"
NM_FILE = FILES / "maintenance.nvidia.com_nodemaintenances.yaml"
CONFIG_FILE = FILES / "maintenance.nvidia.com_maintenanceoperatorconfigs.yaml"
NHC_FILE = FILES / "remediation.medik8s.io_nodehealthchecks.yaml"
SNR_FILE = FILES / "self-node-remediation.medik8s.io_selfnoderemediations.yaml"
SNRT_FILE = FILES / "self-node-remediation.medik8s.io_selfnoderemediationtemplates.yaml"
SNRC_FILE = FILES / "self-node-remediation.medik8s.io_selfnoderemediationconfigs.yaml"
REMEDIATION_FILES = [NHC_FILE, SNR_FILE, SNRT_FILE, SNRC_FILE]
DNS_LIKE = "2-63 chars of DNS-name form"


def load(path: Path) -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    assert len(docs) == 1, f"{path.name} must hold exactly one document"
    return docs[0]


@pytest.fixture(scope="module")
def nm_crd() -> dict[str, Any]:
    return load(NM_FILE)


@pytest.fixture(scope="module")
def config_crd() -> dict[str, Any]:
    return load(CONFIG_FILE)


def version(crd: dict[str, Any]) -> dict[str, Any]:
    versions = crd["spec"]["versions"]
    assert [v["name"] for v in versions] == ["v1alpha1"]
    return versions[0]


def schema(crd: dict[str, Any]) -> dict[str, Any]:
    return version(crd)["schema"]["openAPIV3Schema"]


def walk(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path or ".", node
    for name, child in (node.get("properties") or {}).items():
        yield from walk(child, f"{path}.{name}")
    if "items" in node:
        yield from walk(node["items"], f"{path}[]")


def rules(node: dict[str, Any]) -> list[str]:
    return [r["rule"] for r in node.get("x-kubernetes-validations") or []]


# -- both CRDs -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("path", "plural", "kind"),
    [
        (NM_FILE, "nodemaintenances", "NodeMaintenance"),
        (CONFIG_FILE, "maintenanceoperatorconfigs", "MaintenanceOperatorConfig"),
    ],
)
def test_identity(path: Path, plural: str, kind: str) -> None:
    crd = load(path)
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["kind"] == "CustomResourceDefinition"
    assert crd["metadata"]["name"] == f"{plural}.maintenance.nvidia.com"
    assert path.name == f"maintenance.nvidia.com_{plural}.yaml"
    spec = crd["spec"]
    assert spec["group"] == "maintenance.nvidia.com"
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["kind"] == kind
    assert spec["names"]["plural"] == plural
    assert spec["names"]["listKind"] == kind + "List"
    v = version(crd)
    assert v["served"] is True
    assert v["storage"] is True
    assert v["subresources"] == {"status": {}}


@pytest.mark.parametrize("path", [NM_FILE, CONFIG_FILE, *REMEDIATION_FILES])
def test_schema_is_structural(path: Path) -> None:
    """Every node has a type (or is int-or-string / preserves unknown fields), as apiextensions/v1 wants."""
    for where, node in walk(schema(load(path))):
        if node.get("x-kubernetes-int-or-string"):
            assert "type" not in node, where
            assert node.get("anyOf") == [{"type": "integer"}, {"type": "string"}], where
            continue
        assert node.get("type") in {"object", "array", "string", "integer", "boolean"}, where
        if node["type"] == "array":
            assert "items" in node, where
        if "default" in node:
            assert "minimum" not in node or node["default"] >= node["minimum"], where
            assert "enum" not in node or node["default"] in node["enum"], where
        for rule in node.get("x-kubernetes-validations") or []:
            assert rule.get("rule") and rule.get("message"), where


# -- NodeMaintenance -------------------------------------------------------------------------
def test_nm_short_name_columns_and_selectable_fields(nm_crd: dict[str, Any]) -> None:
    assert nm_crd["spec"]["names"]["shortNames"] == ["nm"]
    v = version(nm_crd)
    columns = {c["name"]: c for c in v["additionalPrinterColumns"]}
    assert columns["Node"]["jsonPath"] == ".spec.nodeName"
    assert columns["Requestor"]["jsonPath"] == ".spec.requestorID"
    assert columns["Ready"]["jsonPath"] == '.status.conditions[?(@.type=="Ready")].status'
    assert columns["Phase"]["jsonPath"] == '.status.conditions[?(@.type=="Ready")].reason'
    assert "Failed" not in columns  # upstream's column reads a condition type nothing sets
    assert [f["jsonPath"] for f in v["selectableFields"]] == [".spec.nodeName", ".spec.requestorID"]


def test_nm_spec(nm_crd: dict[str, Any]) -> None:
    root = schema(nm_crd)
    assert root["required"] == ["spec"]
    spec = root["properties"]["spec"]
    assert set(spec["required"]) == {"requestorID", "nodeName"}
    props = spec["properties"]
    assert set(props) == {
        "requestorID",
        "additionalRequestors",
        "nodeName",
        "cordon",
        "waitForPodCompletion",
        "drainSpec",
    }

    requestor = props["requestorID"]
    assert (requestor["type"], requestor["minLength"], requestor["maxLength"]) == ("string", 2, 63)
    assert rules(requestor) == ["self == oldSelf"]
    assert rules(props["nodeName"]) == ["self == oldSelf"]
    assert props["nodeName"]["type"] == "string"

    assert props["additionalRequestors"]["x-kubernetes-list-type"] == "set"
    assert props["additionalRequestors"]["items"] == {"type": "string"}
    assert (props["cordon"]["type"], props["cordon"]["default"]) == ("boolean", True)

    wait = props["waitForPodCompletion"]["properties"]
    assert wait["podSelector"]["type"] == "string"
    assert (wait["timeoutSeconds"]["type"], wait["timeoutSeconds"]["format"]) == ("integer", "int32")
    assert wait["timeoutSeconds"]["minimum"] == 0
    assert "default" not in wait["timeoutSeconds"]

    drain = props["drainSpec"]["properties"]
    assert set(drain) == {"force", "podSelector", "timeoutSeconds", "deleteEmptyDir", "podEvictionFilters"}
    assert drain["force"]["type"] == drain["deleteEmptyDir"]["type"] == "boolean"
    assert drain["podSelector"]["type"] == "string"
    timeout = drain["timeoutSeconds"]
    assert (timeout["type"], timeout["format"], timeout["default"], timeout["minimum"]) == ("integer", "int32", 300, 0)
    filt = drain["podEvictionFilters"]["items"]
    assert filt["required"] == ["byResourceNameRegex"]
    assert list(filt["properties"]) == ["byResourceNameRegex"]
    assert filt["properties"]["byResourceNameRegex"]["type"] == "string"


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("ab", True),
        ("gpu-driver.example.com", True),
        ("Network-Operator.NVIDIA.com", True),
        ("a1.b2", True),
        ("x" * 63, True),
        ("a", False),  # too short
        ("x" * 64, False),  # too long
        ("-bad_id-", False),
        ("bad_id", False),
        ("-abc", False),
        ("abc-", False),
        ("a..b", False),
        (".ab", False),
        ("ab.", False),
        ("a b", False),
        ("ab.-c", False),
    ],
)
def test_requestor_id_validation(nm_crd: dict[str, Any], value: str, ok: bool) -> None:
    """The pattern (an RE2-compatible regex: Python's re reads it the same) plus the length bounds."""
    node = schema(nm_crd)["properties"]["spec"]["properties"]["requestorID"]
    accepted = node["minLength"] <= len(value) <= node["maxLength"] and re.search(node["pattern"], value) is not None
    assert accepted is ok, f"{value!r}: expected {'accepted' if ok else 'rejected'} ({DNS_LIKE})"


def test_nm_status(nm_crd: dict[str, Any]) -> None:
    status = schema(nm_crd)["properties"]["status"]["properties"]
    assert set(status) == {"conditions", "waitForCompletion", "drain"}
    conditions = status["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    cond = conditions["items"]
    assert set(cond["required"]) == {"type", "status", "reason", "message", "lastTransitionTime"}
    assert cond["properties"]["status"]["enum"] == ["True", "False", "Unknown"]
    assert cond["properties"]["lastTransitionTime"]["format"] == "date-time"
    assert cond["properties"]["observedGeneration"]["format"] == "int64"
    for reason in ("Pending", "Scheduled", "Cordon", "WaitForPodCompletion", "Draining", "Ready", "RequestorFailed"):
        assert re.search(cond["properties"]["reason"]["pattern"], reason)
    for ctype in ("Ready", "RequestorFailed"):
        assert re.search(cond["properties"]["type"]["pattern"], ctype)
    assert status["waitForCompletion"]["items"] == {"type": "string"}
    drain = status["drain"]
    assert drain["required"] == ["totalPods"]
    assert set(drain["properties"]) == {
        "totalPods",
        "evictionPods",
        "drainProgress",
        "waitForEviction",
        # ours (docs/design-notes.md): what blocks the drain
        "blockingPods",
        "blockingPDBs",
        "blockedByRules",
    }
    for name in ("totalPods", "evictionPods", "drainProgress"):
        assert drain["properties"][name]["format"] == "int32"
        assert drain["properties"][name]["minimum"] == 0
    assert drain["properties"]["waitForEviction"]["items"] == {"type": "string"}


# -- MaintenanceOperatorConfig ---------------------------------------------------------------
def test_config_spec(config_crd: dict[str, Any]) -> None:
    props = schema(config_crd)["properties"]["spec"]["properties"]
    assert set(props) == {"maxParallelOperations", "maxUnavailable", "maxNodeMaintenanceTimeSeconds", "logLevel"}
    assert props["maxParallelOperations"]["x-kubernetes-int-or-string"] is True
    assert props["maxParallelOperations"]["default"] == 1
    assert props["maxUnavailable"]["x-kubernetes-int-or-string"] is True
    assert "default" not in props["maxUnavailable"]  # unset = no limit
    seconds = props["maxNodeMaintenanceTimeSeconds"]
    assert (seconds["type"], seconds["format"], seconds["default"], seconds["minimum"]) == ("integer", "int32", 3600, 0)
    assert props["logLevel"]["enum"] == ["debug", "info", "error"]
    assert props["logLevel"]["default"] == "info"
    status = schema(config_crd)["properties"]["status"]
    assert status["type"] == "object"


@pytest.mark.parametrize("field", ["maxParallelOperations", "maxUnavailable"])
@pytest.mark.parametrize(
    ("value", "ok"),
    [("20%", True), ("0%", True), ("100%", True), ("5", False), ("10.5%", False), ("%", False), ("-5%", False)],
)
def test_config_percent_rule(config_crd: dict[str, Any], field: str, value: str, ok: bool) -> None:
    """Deliberate difference: strings must be whole percentages. Emulates the CEL rule for strings."""
    node = schema(config_crd)["properties"]["spec"]["properties"][field]
    (rule,) = rules(node)
    match = re.fullmatch(r"type\(self\) == int \|\| self\.matches\('(.+)'\)", rule)
    assert match, rule
    assert (re.search(match.group(1), value) is not None) is ok


def test_role_ships_both_files() -> None:
    role_vars = yaml.safe_load((FILES.parent / "vars" / "main.yml").read_text())
    assert role_vars["_crds_definitions_files"] == [NM_FILE.name, CONFIG_FILE.name]
    assert role_vars["_crds_remediation_definitions_files"] == [p.name for p in REMEDIATION_FILES]
    defaults = yaml.safe_load((FILES.parent / "defaults" / "main.yml").read_text())
    assert defaults["crds_remediation"] is True


# -- medik8s remediation CRDs ----------------------------------------------------------------
DURATION = "^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$"


@pytest.mark.parametrize(
    ("path", "group", "plural", "kind", "scope", "short"),
    [
        (NHC_FILE, "remediation.medik8s.io", "nodehealthchecks", "NodeHealthCheck", "Cluster", "nhc"),
        (
            SNR_FILE,
            "self-node-remediation.medik8s.io",
            "selfnoderemediations",
            "SelfNodeRemediation",
            "Namespaced",
            "snr",
        ),
        (
            SNRT_FILE,
            "self-node-remediation.medik8s.io",
            "selfnoderemediationtemplates",
            "SelfNodeRemediationTemplate",
            "Namespaced",
            "snrt",
        ),
        (
            SNRC_FILE,
            "self-node-remediation.medik8s.io",
            "selfnoderemediationconfigs",
            "SelfNodeRemediationConfig",
            "Namespaced",
            "snrc",
        ),
    ],
)
def test_remediation_identity(path: Path, group: str, plural: str, kind: str, scope: str, short: str) -> None:
    crd = load(path)
    assert crd["metadata"]["name"] == f"{plural}.{group}"
    assert path.name == f"{group}_{plural}.yaml"
    names = crd["spec"]["names"]
    assert (crd["spec"]["group"], crd["spec"]["scope"]) == (group, scope)
    assert (names["kind"], names["plural"], names["listKind"], names["shortNames"]) == (
        kind,
        plural,
        kind + "List",
        [short],
    )
    v = version(crd)
    assert (v["served"], v["storage"], v["subresources"]) == (True, True, {"status": {}})


def test_snr_config_defaults_and_minimums() -> None:
    root = schema(load(SNRC_FILE))
    assert rules(root) == ["self.metadata.name == 'self-node-remediation-config'"]
    props = root["properties"]["spec"]["properties"]
    defaults = {name: node.get("default") for name, node in props.items()}
    assert defaults == {
        "safeTimeToAssumeNodeRebootedSeconds": None,
        "watchdogFilePath": "/dev/watchdog",
        "isSoftwareRebootEnabled": True,
        "apiServerTimeout": "5s",
        "apiCheckInterval": "15s",
        "peerApiServerTimeout": "5s",
        "peerDialTimeout": "5s",
        "peerRequestTimeout": "7s",
        "peerUpdateInterval": "15m",
        "maxApiErrorThreshold": 3,
        "endpointHealthCheckUrl": None,
        "hostPort": 30001,
        "customDsTolerations": None,
        "customDsNodeSelectorRequirements": None,
        "minPeersForRemediation": 1,
    }
    minimums = {
        "apiServerTimeout": "10ms",
        "apiCheckInterval": "1s",
        "peerApiServerTimeout": "10ms",
        "peerDialTimeout": "10ms",
        "peerRequestTimeout": "10ms",
        "peerUpdateInterval": "10s",
    }
    for name, minimum in minimums.items():
        assert props[name]["pattern"] == DURATION, name
        assert rules(props[name]) == [f"duration(self) >= duration('{minimum}')"], name
    assert (props["maxApiErrorThreshold"]["minimum"], props["hostPort"]["minimum"]) == (1, 1)
    assert props["minPeersForRemediation"]["minimum"] == 0


@pytest.mark.parametrize(
    ("value", "ok"),
    [("300s", True), ("1h30m", True), ("1.5h", True), ("10µs", True), ("5", False), ("5 m", False), ("-5s", False)],
)
def test_duration_pattern(value: str, ok: bool) -> None:
    assert (re.search(DURATION, value) is not None) is ok


def test_strategy_enum_and_default() -> None:
    snr = schema(load(SNR_FILE))["properties"]["spec"]["properties"]["remediationStrategy"]
    template = schema(load(SNRT_FILE))["properties"]["spec"]["properties"]["template"]
    strategy = template["properties"]["spec"]["properties"]["remediationStrategy"]
    for node in (snr, strategy):
        assert node["enum"] == ["Automatic", "ResourceDeletion", "OutOfServiceTaint"]
        assert node["default"] == "Automatic"
    status = schema(load(SNR_FILE))["properties"]["status"]["properties"]
    assert set(status) == {"phase", "timeAssumedRebooted", "lastError", "conditions"}


def test_nhc_spec_and_status() -> None:
    root = schema(load(NHC_FILE))
    spec = root["properties"]["spec"]
    assert set(spec["properties"]) == {
        "selector",
        "unhealthyConditions",
        "minHealthy",
        "maxUnhealthy",
        "remediationTemplate",
        "escalatingRemediations",
        "pauseRequests",
        "healthyDelay",
        "stormCooldownDuration",
    }
    assert rules(spec) == [
        "has(self.minHealthy) != has(self.maxUnhealthy)",
        "has(self.remediationTemplate) != has(self.escalatingRemediations)",
    ]
    conditions = spec["properties"]["unhealthyConditions"]
    assert conditions["default"] == [
        {"type": "Ready", "status": "False", "duration": "300s"},
        {"type": "Ready", "status": "Unknown", "duration": "300s"},
    ]
    assert conditions["x-kubernetes-list-map-keys"] == ["type", "status"]
    assert conditions["items"]["properties"]["duration"]["pattern"] == DURATION
    assert "default" not in spec["properties"]["minHealthy"]  # no default since upstream v0.10
    escalation = spec["properties"]["escalatingRemediations"]
    assert escalation["x-kubernetes-list-map-keys"] == ["order"]
    assert rules(escalation["items"]) == ["duration(self.timeout) >= duration('60s')"]
    assert spec["properties"]["healthyDelay"]["pattern"] == "^-?" + DURATION[1:]
    status = root["properties"]["status"]["properties"]
    assert {"observedNodes", "healthyNodes", "unhealthyNodes", "inFlightRemediations", "conditions", "phase"} <= set(
        status
    )
    assert set(status["unhealthyNodes"]["items"]["properties"]) == {
        "name",
        "remediations",
        "conditionsHealthyTimestamp",
        "healthyDelayed",
    }


@pytest.mark.parametrize(("value", "ok"), [("51%", True), ("100%", True), ("0%", True), ("101%", False), ("5", False)])
def test_nhc_percent_rule(value: str, ok: bool) -> None:
    node = schema(load(NHC_FILE))["properties"]["spec"]["properties"]["minHealthy"]
    (rule,) = rules(node)
    pattern = re.search(r"self\.matches\('(.+)'\)", rule)
    assert pattern
    assert (re.search(pattern.group(1), value) is not None) is ok
