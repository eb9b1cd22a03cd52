"""nodeops.maintenance.cordon end to end: the ansible command, the real API server, kwok nodes."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from cluster import kwok
from kubernetes import client as k8s
from support.ansible_cli import run_module

pytestmark = pytest.mark.integration


@pytest.fixture
def nodes(api: k8s.ApiClient) -> Iterator[list[str]]:
    tag = uuid.uuid4().hex[:6]
    names = kwok.add_nodes(api, 3, prefix=f"cordon-{tag}", labels={"cordon-test": tag})
    kwok.wait_nodes_ready(api, names, timeout=60)
    yield names
    kwok.delete_nodes(api, names)


def token_auth(cluster: Any) -> dict[str, Any]:
    return {"host": cluster.server, "api_key": cluster.token, "ca_cert": str(cluster.ca_file)}


def unschedulable(api: k8s.ApiClient, name: str) -> bool:
    return bool(k8s.CoreV1Api(api).read_node(name).spec.unschedulable)


def test_cordon_uncordon_idempotent_with_diff(cluster: Any, api: k8s.ApiClient, nodes: list[str]) -> None:
    auth = token_auth(cluster)
    first = run_module("cordon", {**auth, "name": nodes[0]}, diff=True)
    assert not first.failed, first.result
    assert first.result["changed"] is True
    assert first.result["nodes"] == [{"name": nodes[0], "before": "uncordoned", "after": "cordoned", "changed": True}]
    assert first.result["diff"]["after"] == {nodes[0]: {"unschedulable": True}}
    assert unschedulable(api, nodes[0])
    assert not unschedulable(api, nodes[1])

    again = run_module("cordon", {**auth, "name": nodes[0]})
    assert again.result["changed"] is False
    assert again.result["changed_nodes"] == []

    back = run_module("cordon", {**auth, "name": nodes[0], "state": "uncordoned"})
    assert back.result["changed"] is True
    node = k8s.CoreV1Api(api).read_node(nodes[0])
    assert node.spec.unschedulable is None  # the field is removed, as kubectl uncordon does
    assert run_module("cordon", {**auth, "name": nodes[0], "state": "uncordoned"}).result["changed"] is False


def test_check_mode_changes_nothing(cluster: Any, api: k8s.ApiClient, nodes: list[str]) -> None:
    run = run_module("cordon", {**token_auth(cluster), "name": nodes}, check=True, diff=True)
    assert not run.failed, run.result
    assert run.result["changed"] is True
    assert run.result["changed_nodes"] == sorted(nodes)
    assert not any(unschedulable(api, n) for n in nodes)


def test_node_selector_selects_the_nodes(cluster: Any, api: k8s.ApiClient, nodes: list[str]) -> None:
    tag = k8s.CoreV1Api(api).read_node(nodes[0]).metadata.labels["cordon-test"]
    run = run_module("cordon", {**token_auth(cluster), "node_selector": f"cordon-test={tag}"})
    assert sorted(run.result["changed_nodes"]) == sorted(nodes)
    assert all(unschedulable(api, n) for n in nodes)
    none = run_module("cordon", {**token_auth(cluster), "node_selector": "cordon-test=matches-nothing"})
    assert none.result["changed"] is False
    assert any("matched no node" in w for w in none.result.get("warnings", []))


def test_unknown_node_fails_and_changes_nothing(cluster: Any, api: k8s.ApiClient, nodes: list[str]) -> None:
    run = run_module("cordon", {**token_auth(cluster), "name": [nodes[0], "no-such-node"]})
    assert run.failed
    assert "Unknown node(s): no-such-node" in run.result["msg"]
    assert run.result["unknown_nodes"] == ["no-such-node"]
    assert not unschedulable(api, nodes[0])


def test_client_certificate_auth(cluster: Any, api: k8s.ApiClient, nodes: list[str]) -> None:
    args = {
        "host": cluster.server,
        "ca_cert": str(cluster.ca_file),
        "client_cert": str(cluster.client_cert),
        "client_key": str(cluster.client_key),
        "name": nodes[1],
    }
    run = run_module("cordon", args)
    assert not run.failed, run.result
    assert unschedulable(api, nodes[1])


def test_kubeconfig_with_client_certificate(cluster: Any, api: k8s.ApiClient, nodes: list[str]) -> None:
    run = run_module("cordon", {"kubeconfig": str(cluster.kubeconfig_cert), "name": nodes[1]})
    assert not run.failed, run.result
    assert unschedulable(api, nodes[1])


def test_env_alone_authenticates(cluster: Any, api: k8s.ApiClient, nodes: list[str]) -> None:
    env = {
        "K8S_AUTH_HOST": cluster.server,
        "K8S_AUTH_API_KEY": cluster.token,
        "K8S_AUTH_SSL_CA_CERT": str(cluster.ca_file),
        "K8S_AUTH_VERIFY_SSL": "True",
    }
    run = run_module("cordon", {"name": nodes[2]}, env=env)
    assert not run.failed, run.result
    assert unschedulable(api, nodes[2])
    env_kubeconfig = run_module(
        "cordon", {"name": nodes[2], "state": "uncordoned"}, env={"K8S_AUTH_KUBECONFIG": str(cluster.kubeconfig)}
    )
    assert env_kubeconfig.result["changed"] is True


def test_wrong_token_says_so(cluster: Any, api: k8s.ApiClient, nodes: list[str]) -> None:
    run = run_module("cordon", {**token_auth(cluster), "api_key": "not-the-token", "name": nodes[0]})
    assert run.failed
    assert "rejected the credentials (401 Unauthorized)" in run.result["msg"]
    assert run.result["error"]["reason"] == "unauthorized"
    assert "not-the-token" not in str(run.result) + run.stderr
    assert not unschedulable(api, nodes[0])


def running_pods_by_node(core: k8s.CoreV1Api, namespace: str, selector: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for pod in core.list_namespaced_pod(namespace, label_selector=selector).items:
        if pod.status.phase == "Running":
            counts[pod.spec.node_name] = counts.get(pod.spec.node_name, 0) + 1
    return counts


def wait_running(core: k8s.CoreV1Api, namespace: str, selector: str, count: int, timeout: float = 60) -> dict[str, int]:
    def enough() -> dict[str, int] | None:
        counts = running_pods_by_node(core, namespace, selector)
        return counts if sum(counts.values()) >= count else None

    return kwok.wait_until(enough, timeout, f"{count} Running pods of {selector}")


def test_scale_up_avoids_a_cordoned_node(cluster: Any, api: k8s.ApiClient, nodes: list[str], namespace: str) -> None:
    core, apps = k8s.CoreV1Api(api), k8s.AppsV1Api(api)
    tag = core.read_node(nodes[0]).metadata.labels["cordon-test"]
    labels = {"app": "cordon-scale"}
    deployment = k8s.V1Deployment(
        metadata=k8s.V1ObjectMeta(name="cordon-scale"),
        spec=k8s.V1DeploymentSpec(
            replicas=3,
            selector=k8s.V1LabelSelector(match_labels=labels),
            template=k8s.V1PodTemplateSpec(
                metadata=k8s.V1ObjectMeta(labels=labels),
                spec=k8s.V1PodSpec(
                    node_selector={"cordon-test": tag},
                    containers=[k8s.V1Container(name="app", image="registry.invalid/app:1")],
                ),
            ),
        ),
    )
    apps.create_namespaced_deployment(namespace, deployment)
    before = wait_running(core, namespace, "app=cordon-scale", 3)
    assert set(before) <= set(nodes)

    assert run_module("cordon", {**token_auth(cluster), "name": nodes[0]}).result["changed"] is True
    apps.patch_namespaced_deployment_scale(namespace=namespace, name="cordon-scale", body={"spec": {"replicas": 9}})
    after = wait_running(core, namespace, "app=cordon-scale", 9)
    assert after.get(nodes[0], 0) == before.get(nodes[0], 0), f"new pods landed on the cordoned node: {after}"

    assert run_module("cordon", {**token_auth(cluster), "name": nodes[0], "state": "uncordoned"}).result["changed"]
    assert not unschedulable(api, nodes[0])


def test_inline_kubeconfig_works_and_its_token_stays_hidden(cluster: Any, api: k8s.ApiClient, nodes: list[str]) -> None:
    kubeconfig = yaml.safe_load(cluster.kubeconfig_token.read_text())
    run = run_module("cordon", {"kubeconfig": kubeconfig, "name": nodes[0]})
    assert not run.failed, run.result
    assert unschedulable(api, nodes[0])
    assert cluster.token not in str(run.result)
