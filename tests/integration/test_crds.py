"""roles/crds and the CRDs it installs, against the real API server of the test cluster.

The role runs through ``ansible-playbook`` (as users run it); the API checks use the official client,
so they show what the server itself enforces: the schema, the CEL rules, the defaults and the
selectable fields.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException
from support.ansible_cli import BIN, clean_env

pytestmark = pytest.mark.integration

GROUP = "maintenance.nvidia.com"
VERSION = "v1alpha1"
NM_PLURAL = "nodemaintenances"
CONFIG_PLURAL = "maintenanceoperatorconfigs"
RECAP = re.compile(r"^localhost\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.MULTILINE)


def run_role(cluster: Any, tmp_path: Path, role_vars: dict[str, Any], check: bool = False) -> dict[str, Any]:
    """Run the crds role in a playbook on localhost; returns the recap counters."""
    playbook = tmp_path / "crds.yml"
    playbook.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "Install the maintenance CRDs",
                    "hosts": "localhost",
                    "connection": "local",
                    "gather_facts": False,
                    "roles": [{"role": "nodeops.maintenance.crds", "vars": role_vars}],
                }
            ]
        )
    )
    cmd = [str(BIN / "ansible-playbook"), "-i", "localhost,", str(playbook), "--diff"]
    if check:
        cmd.append("--check")
    env = clean_env(
        {"ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.default", "K8S_AUTH_KUBECONFIG": str(cluster.kubeconfig)}
    )
    env["ANSIBLE_PYTHON_INTERPRETER"] = sys.executable
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)
    match = RECAP.search(proc.stdout)
    assert proc.returncode == 0 and match, f"rc={proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    ok, changed, unreachable, failed = (int(g) for g in match.groups())
    return {"ok": ok, "changed": changed, "unreachable": unreachable, "failed": failed, "output": proc.stdout}


@pytest.fixture(scope="module")
def installed(
    cluster: Any, api: client.ApiClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    """The role run twice with a namespace of its own and the default config in it."""
    namespace = f"crds-{uuid.uuid4().hex[:8]}"
    role_vars = {
        "crds_namespace": namespace,
        "crds_create_namespace": True,
        "crds_create_default_config": True,
        "crds_max_unavailable": "20%",
        "crds_max_parallel_operations": "2",  # as -e gives it: sent as the number 2
    }
    tmp = tmp_path_factory.mktemp("crds-role")
    first = run_role(cluster, tmp, role_vars)
    second = run_role(cluster, tmp, role_vars)
    second_check = run_role(cluster, tmp, role_vars, check=True)
    yield {"namespace": namespace, "first": first, "second": second, "second_check": second_check}
    # The CRDs stay: they are cluster-wide, the same for every test, and deleting them is slow.
    try:
        client.CoreV1Api(api).delete_namespace(namespace)
    except ApiException as err:
        if err.status != 404:
            raise


def custom(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


def nm(name: str, node: str, requestor: str = "gpu-driver.example.com", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "NodeMaintenance",
        "metadata": {"name": name},
        "spec": {"requestorID": requestor, "nodeName": node, **spec},
    }


def config(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "MaintenanceOperatorConfig",
        "metadata": {"name": name},
        "spec": spec,
    }


def get_table(api: client.ApiClient, path: str) -> dict[str, Any]:
    """GET ``path`` as a server-side Table (the view kubectl get prints)."""
    method, url, headers, body, post = api.param_serialize(
        "GET",
        path,
        header_params={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"},
        auth_settings=["BearerToken"],
    )
    response = api.call_api(method, url, headers, body, post)
    response.read()
    assert response.status == 200, response.data
    return json.loads(response.data)


def rejected(call: Any) -> str:
    """Run an API call that must be refused as invalid; returns the server's message."""
    with pytest.raises(ApiException) as info:
        call()
    assert info.value.status == 422, info.value.body
    return str(info.value.body)


# -- the role ----------------------------------------------------------------------------------
def test_role_is_idempotent(installed: dict[str, Any]) -> None:
    assert installed["first"]["failed"] == 0
    assert installed["first"]["changed"] == 1  # the apply task: at least the new namespace and config
    assert installed["second"]["changed"] == 0, installed["second"]["output"]
    assert installed["second_check"]["changed"] == 0, installed["second_check"]["output"]


def test_role_installs_both_crds_established(installed: dict[str, Any], api: client.ApiClient) -> None:
    ext = client.ApiextensionsV1Api(api)
    for plural in (NM_PLURAL, CONFIG_PLURAL):
        crd = ext.read_custom_resource_definition(f"{plural}.{GROUP}")
        conditions = {c.type: c.status for c in crd.status.conditions}
        assert conditions.get("Established") == "True"
        assert conditions.get("NamesAccepted") == "True"
    nm_crd = ext.read_custom_resource_definition(f"{NM_PLURAL}.{GROUP}")
    assert nm_crd.spec.names.short_names == ["nm"]


def test_role_creates_the_default_config_with_the_settings(installed: dict[str, Any], api: client.ApiClient) -> None:
    obj = custom(api).get_namespaced_custom_object(GROUP, VERSION, installed["namespace"], CONFIG_PLURAL, "default")
    assert obj["spec"] == {
        "maxParallelOperations": 2,
        "maxUnavailable": "20%",
        "maxNodeMaintenanceTimeSeconds": 3600,
        "logLevel": "info",
    }


def test_role_check_mode_on_a_new_namespace_writes_nothing(
    installed: dict[str, Any], cluster: Any, api: client.ApiClient, tmp_path: Path
) -> None:
    """The namespace and config exist only in the dry run; the config is reported, not failed."""
    namespace = f"crds-check-{uuid.uuid4().hex[:6]}"
    role_vars = {"crds_namespace": namespace, "crds_create_namespace": True, "crds_create_default_config": True}
    run = run_role(cluster, tmp_path, role_vars, check=True)
    assert run["changed"] == 1
    assert f"MaintenanceOperatorConfig/default in namespace {namespace}" in run["output"]
    with pytest.raises(ApiException) as info:
        client.CoreV1Api(api).read_namespace(namespace)
    assert info.value.status == 404


def test_role_rejects_a_bad_percentage_before_writing(installed: dict[str, Any], cluster: Any, tmp_path: Path) -> None:
    namespace = f"crds-bad-{uuid.uuid4().hex[:6]}"
    role_vars = {
        "crds_namespace": namespace,
        "crds_create_namespace": True,
        "crds_create_default_config": True,
        "crds_max_unavailable": "10.5%",
    }
    with pytest.raises(AssertionError, match=r"whole percentage"):
        run_role(cluster, tmp_path, role_vars)


# -- NodeMaintenance ---------------------------------------------------------------------------
def test_malformed_requestor_id_is_rejected(installed: dict[str, Any], api: client.ApiClient, namespace: str) -> None:
    for bad in ("-bad_id-", "a", "x" * 64, "a..b"):
        body = rejected(
            lambda bad=bad: custom(api).create_namespaced_custom_object(
                GROUP, VERSION, namespace, NM_PLURAL, nm("bad", "node-1", requestor=bad)
            )
        )
        assert "spec.requestorID" in body


def test_required_fields(installed: dict[str, Any], api: client.ApiClient, namespace: str) -> None:
    no_node = nm("x", "node-1")
    del no_node["spec"]["nodeName"]
    assert "spec.nodeName" in rejected(
        lambda: custom(api).create_namespaced_custom_object(GROUP, VERSION, namespace, NM_PLURAL, no_node)
    )
    no_spec = nm("y", "node-1")
    del no_spec["spec"]
    assert "spec" in rejected(
        lambda: custom(api).create_namespaced_custom_object(GROUP, VERSION, namespace, NM_PLURAL, no_spec)
    )


def test_defaults_and_immutable_fields(installed: dict[str, Any], api: client.ApiClient, namespace: str) -> None:
    objs = custom(api)
    created = objs.create_namespaced_custom_object(
        GROUP, VERSION, namespace, NM_PLURAL, nm("upgrade", "node-1", drainSpec={"force": True})
    )
    assert created["spec"]["cordon"] is True
    assert created["spec"]["drainSpec"] == {"force": True, "timeoutSeconds": 300}
    assert "waitForPodCompletion" not in created["spec"]

    plain = objs.create_namespaced_custom_object(GROUP, VERSION, namespace, NM_PLURAL, nm("plain", "node-1"))
    assert plain["spec"]["cordon"] is True
    assert "drainSpec" not in plain["spec"]  # absent means no drain

    body = rejected(
        lambda: objs.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, NM_PLURAL, "upgrade", {"spec": {"nodeName": "node-2"}}
        )
    )
    assert "nodeName is immutable" in body
    body = rejected(
        lambda: objs.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, NM_PLURAL, "upgrade", {"spec": {"requestorID": "other.example.com"}}
        )
    )
    assert "requestorID is immutable" in body
    # Mutable fields still change.
    patched = objs.patch_namespaced_custom_object(
        GROUP, VERSION, namespace, NM_PLURAL, "upgrade", {"spec": {"additionalRequestors": ["other.example.com"]}}
    )
    assert patched["spec"]["additionalRequestors"] == ["other.example.com"]
    assert "spec.drainSpec.timeoutSeconds" in rejected(
        lambda: objs.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, NM_PLURAL, "upgrade", {"spec": {"drainSpec": {"timeoutSeconds": -1}}}
        )
    )


def test_field_selectors_on_node_and_requestor(
    installed: dict[str, Any], api: client.ApiClient, namespace: str
) -> None:
    objs = custom(api)
    for name, node, requestor in (
        ("a", "node-a", "one.example.com"),
        ("b", "node-b", "one.example.com"),
        ("c", "node-a", "two.example.com"),
    ):
        objs.create_namespaced_custom_object(GROUP, VERSION, namespace, NM_PLURAL, nm(name, node, requestor))

    def names(selector: str) -> list[str]:
        listed = objs.list_namespaced_custom_object(GROUP, VERSION, namespace, NM_PLURAL, field_selector=selector)
        return sorted(item["metadata"]["name"] for item in listed["items"])

    assert names("spec.nodeName=node-a") == ["a", "c"]
    assert names("spec.requestorID=one.example.com") == ["a", "b"]
    assert names("spec.nodeName=node-a,spec.requestorID=two.example.com") == ["c"]
    assert names("spec.nodeName=elsewhere") == []


def test_status_subresource_and_printer_columns(
    installed: dict[str, Any], api: client.ApiClient, namespace: str
) -> None:
    objs = custom(api)
    objs.create_namespaced_custom_object(GROUP, VERSION, namespace, NM_PLURAL, nm("shown", "node-7"))
    condition = {
        "type": "Ready",
        "status": "False",
        "reason": "Pending",
        "message": "",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    objs.patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, NM_PLURAL, "shown", {"status": {"conditions": [condition]}}
    )
    # A condition without its required fields is refused by the status schema.
    assert "reason" in rejected(
        lambda: objs.patch_namespaced_custom_object_status(
            GROUP,
            VERSION,
            namespace,
            NM_PLURAL,
            "shown",
            {"status": {"conditions": [{"type": "RequestorFailed", "status": "True"}]}},
        )
    )
    table = get_table(api, f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{NM_PLURAL}/shown")
    columns = [c["name"] for c in table["columnDefinitions"]]
    assert columns == ["Name", "Node", "Requestor", "Ready", "Phase", "Age"]
    assert table["rows"][0]["cells"][:5] == ["shown", "node-7", "gpu-driver.example.com", "False", "Pending"]


# -- MaintenanceOperatorConfig -----------------------------------------------------------------
def test_config_accepts_percent_and_integer(installed: dict[str, Any], api: client.ApiClient, namespace: str) -> None:
    objs = custom(api)
    pct = objs.create_namespaced_custom_object(
        GROUP, VERSION, namespace, CONFIG_PLURAL, config("pct", maxUnavailable="20%")
    )
    assert pct["spec"] == {
        "maxUnavailable": "20%",
        "maxParallelOperations": 1,
        "maxNodeMaintenanceTimeSeconds": 3600,
        "logLevel": "info",
    }
    num = objs.create_namespaced_custom_object(
        GROUP, VERSION, namespace, CONFIG_PLURAL, config("num", maxUnavailable=3, maxParallelOperations="50%")
    )
    assert (num["spec"]["maxUnavailable"], num["spec"]["maxParallelOperations"]) == (3, "50%")


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"maxUnavailable": "5"}, "spec.maxUnavailable"),
        ({"maxUnavailable": "10.5%"}, "spec.maxUnavailable"),
        ({"maxParallelOperations": "two"}, "spec.maxParallelOperations"),
        ({"maxNodeMaintenanceTimeSeconds": -1}, "spec.maxNodeMaintenanceTimeSeconds"),
        ({"logLevel": "trace"}, "spec.logLevel"),
    ],
)
def test_config_rejects_bad_values(
    installed: dict[str, Any], api: client.ApiClient, namespace: str, spec: dict[str, Any], field: str
) -> None:
    body = rejected(
        lambda: custom(api).create_namespaced_custom_object(
            GROUP, VERSION, namespace, CONFIG_PLURAL, config("bad", **spec)
        )
    )
    assert field in body
