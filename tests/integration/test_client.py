"""The client layer's errors, as the real API server produces them."""

from __future__ import annotations

import venv
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s import errors
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.client import NODES, Client, Resource
from kubernetes import client as k8s
from support.ansible_cli import run_module

pytestmark = pytest.mark.integration


def admin(cluster: Any) -> Client:
    return Client.from_params({"kubeconfig": str(cluster.kubeconfig)})


def unprivileged_token(api: k8s.ApiClient, namespace: str) -> str:
    """A token of a fresh ServiceAccount that has no RBAC permission at all."""
    core = k8s.CoreV1Api(api)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "nobody"}})
    request = core.create_namespaced_service_account_token(
        "nobody", namespace, {"spec": {"expirationSeconds": 600, "audiences": []}}
    )
    return str(request.status.token)


def test_forbidden_names_the_action_and_the_fix(cluster: Any, api: k8s.ApiClient, namespace: str) -> None:
    token = unprivileged_token(api, namespace)
    run = run_module(
        "cordon", {"host": cluster.server, "ca_cert": str(cluster.ca_file), "api_key": token, "name": "any-node"}
    )
    assert run.failed
    assert run.result["error"]["reason"] == "forbidden"
    assert "Forbidden (403) for get Node any-node" in run.result["msg"]
    assert "Grant the user RBAC permission" in run.result["msg"]
    assert token not in str(run.result) + run.stderr


def test_missing_resource_type_points_at_the_crds(cluster: Any) -> None:
    widgets = Resource("widgets.example.com/v1", "widgets", namespaced=True, kind="Widget")
    with pytest.raises(errors.MissingResourceType, match="resource type is not installed"):
        admin(cluster).list(widgets, namespace="default")
    with pytest.raises(errors.MissingResourceType, match=r"kind Widget in widgets\.example\.com/v1"):
        admin(cluster).resource_for("widgets.example.com/v1", "Widget")


def test_stale_write_is_a_conflict(cluster: Any, api: k8s.ApiClient, namespace: str) -> None:
    k8s.CoreV1Api(api).create_namespaced_config_map(namespace, {"metadata": {"name": "cm"}, "data": {"a": "1"}})
    client = admin(cluster)
    configmaps = Resource("v1", "configmaps", namespaced=True, kind="ConfigMap")
    current = client.get(configmaps, "cm", namespace)
    client.patch(configmaps, "cm", {"data": {"a": "2"}}, namespace)
    stale = {"metadata": {"resourceVersion": current["metadata"]["resourceVersion"]}, "data": {"a": "3"}}
    with pytest.raises(errors.Conflict, match="Conflict for patch ConfigMap cm"):
        client.patch(configmaps, "cm", stale, namespace)


def test_get_metadata_reads_the_metadata_without_the_body(cluster: Any, api: k8s.ApiClient, namespace: str) -> None:
    body = {"metadata": {"name": "big", "annotations": {"a": "b"}}, "data": {"blob": "x" * 100_000}}
    k8s.CoreV1Api(api).create_namespaced_config_map(namespace, body)
    client = admin(cluster)
    configmaps = Resource("v1", "configmaps", namespaced=True, kind="ConfigMap")
    got = client.get_metadata(configmaps, "big", namespace)
    assert got["kind"] == "PartialObjectMetadata" and "data" not in got
    assert got["metadata"]["annotations"] == {"a": "b"} and got["metadata"]["resourceVersion"]
    with pytest.raises(errors.NotFound):
        client.get_metadata(configmaps, "absent", namespace)


def test_unknown_node_is_not_found(cluster: Any) -> None:
    with pytest.raises(errors.NotFound, match="Not found: get Node no-such-node"):
        admin(cluster).get(NODES, "no-such-node")


def test_missing_kubernetes_package_is_reported(cluster: Any, tmp_path: Path) -> None:
    """A Python without the ``kubernetes`` package gets Ansible's missing-library message."""
    venv.create(tmp_path / "bare", with_pip=False)
    bare_python = str(tmp_path / "bare" / "bin" / "python")
    run = run_module(
        "cordon", {"kubeconfig": str(cluster.kubeconfig), "name": "n"}, env={"ANSIBLE_PYTHON_INTERPRETER": bare_python}
    )
    assert run.failed
    assert "Failed to import the required Python library (kubernetes)" in run.result["msg"]


def test_replace_is_conditional_and_events_are_recorded(cluster: Any, api: k8s.ApiClient, namespace: str) -> None:
    client = admin(cluster)
    configmaps = Resource("v1", "configmaps", namespaced=True, kind="ConfigMap")
    created = client.create(
        configmaps, {"metadata": {"name": "cm", "namespace": namespace}, "data": {"a": "1"}}, namespace
    )
    updated = client.replace(configmaps, {**created, "data": {"a": "2"}})
    assert updated["data"] == {"a": "2"}
    with pytest.raises(errors.Conflict):
        client.replace(configmaps, {**created, "data": {"a": "3"}})  # the resourceVersion of before the update

    event = client.create_event(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": updated["metadata"]}, "Tested", "an event", "Warning"
    )
    assert event["involvedObject"]["uid"] == updated["metadata"]["uid"]
    listed = k8s.CoreV1Api(api).list_namespaced_event(namespace, field_selector="reason=Tested").items
    assert [(e.type, e.message, e.involved_object.name) for e in listed] == [("Warning", "an event", "cm")]
