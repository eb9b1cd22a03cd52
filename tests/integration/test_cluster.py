"""The test control plane itself: kwok nodes, the real scheduler and the node-lifecycle controller."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from cluster import kwok
from cluster.launcher import NODE_MONITOR_GRACE_SECONDS, Cluster
from kubernetes import client

pytestmark = pytest.mark.integration

MakeNodes = Callable[..., list[str]]
UNREACHABLE = "node.kubernetes.io/unreachable"


@pytest.fixture
def make_nodes(api: client.ApiClient) -> Iterator[MakeNodes]:
    """``make_nodes(count, **add_nodes_kwargs)`` creates Ready kwok nodes, deleted after the test."""
    created: list[str] = []

    def make(count: int, **kwargs: Any) -> list[str]:
        names = kwok.add_nodes(api, count, **kwargs)
        created.extend(names)
        kwok.wait_nodes_ready(api, names, timeout=60)
        return names

    yield make
    kwok.delete_nodes(api, created)


def deployment(name: str, replicas: int, node_selector: dict[str, str]) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": node_selector,
                    "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}],
                },
            },
        },
    }


def running_pods(core: client.CoreV1Api, namespace: str, app: str) -> list[client.V1Pod]:
    pods = core.list_namespaced_pod(namespace, label_selector=f"app={app}").items
    return [p for p in pods if p.status.phase == "Running" and p.metadata.deletion_timestamp is None]


def wait_running(core: client.CoreV1Api, namespace: str, app: str, count: int) -> list[client.V1Pod]:
    def enough() -> list[client.V1Pod] | None:
        pods = running_pods(core, namespace, app)
        return pods if len(pods) == count else None

    return kwok.wait_until(enough, 60, f"{count} Running pods of {app}")


def has_taint(node: client.V1Node, key: str) -> bool:
    return any(t.key == key for t in node.spec.taints or ())


def test_cluster_attributes(cluster: Cluster) -> None:
    assert cluster.server.startswith("https://127.0.0.1:")
    assert cluster.kubeconfig.read_text() == cluster.kubeconfig_token.read_text()
    assert "client-certificate" in cluster.kubeconfig_cert.read_text()
    assert cluster.k8s_version.startswith("v1.")
    assert set(cluster.status()) == {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"}
    assert all(cluster.status().values())
    cert_api = kwok.api_client(cluster.kubeconfig_cert)
    try:
        assert client.VersionApi(cert_api).get_code().git_version == cluster.k8s_version
    finally:
        cert_api.close()


def test_twenty_kwok_nodes_become_ready(api: client.ApiClient, make_nodes: MakeNodes) -> None:
    started = time.monotonic()
    names = make_nodes(20, prefix="ready", capacity={"nvidia.com/gpu": "8"})
    print(f"20 nodes Ready in {time.monotonic() - started:.1f}s")
    core = client.CoreV1Api(api)
    nodes = {n.metadata.name: n for n in core.list_node(label_selector="type=kwok").items}
    for name in names:
        node = nodes[name]
        assert node.metadata.annotations[kwok.MANAGED_ANNOTATION] == kwok.MANAGED_VALUE
        assert node.status.allocatable["nvidia.com/gpu"] == "8"
        assert node.status.allocatable["pods"] == "110"
        assert not node.spec.taints
    # kwok holds every node's lease and renews it: that is the heartbeat.
    leases = {name: kwok.read_lease(api, name) for name in names}
    assert all(lease is not None and lease.spec.holder_identity != kwok.STOPPED_HOLDER for lease in leases.values())
    first = leases[names[0]]
    assert first is not None
    kwok.wait_until(
        lambda: (lease := kwok.read_lease(api, names[0])) and lease.spec.renew_time > first.spec.renew_time,
        15,
        "a lease renewal by kwok",
    )


def test_deployment_pods_are_scheduled_onto_kwok_nodes_and_run(
    api: client.ApiClient, make_nodes: MakeNodes, namespace: str
) -> None:
    tag = uuid.uuid4().hex[:6]
    names = make_nodes(3, prefix="sched", labels={"suite": tag})
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    apps.create_namespaced_deployment(namespace, deployment("web", 4, {"suite": tag}))
    pods = wait_running(core, namespace, "web", 4)
    for pod in pods:
        assert pod.spec.node_name in names
        conditions = {c.type: c.status for c in pod.status.conditions}
        assert conditions["PodScheduled"] == conditions["Ready"] == "True"
        assert pod.status.pod_ip
    kwok.wait_until(
        lambda: apps.read_namespaced_deployment(name="web", namespace=namespace).status.available_replicas == 4,
        60,
        "deployment web available",
    )
    # kwok finishes the deletion of a pod; the ReplicaSet replaces it.
    victim = pods[0].metadata.name
    core.delete_namespaced_pod(victim, namespace)
    kwok.wait_until(
        lambda: victim not in {p.metadata.name for p in core.list_namespaced_pod(namespace).items},
        30,
        f"pod {victim} gone",
    )
    wait_running(core, namespace, "web", 4)


def test_scale_up_avoids_an_unschedulable_node(api: client.ApiClient, make_nodes: MakeNodes, namespace: str) -> None:
    tag = uuid.uuid4().hex[:6]
    names = make_nodes(3, prefix="cordon", labels={"suite": tag})
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    apps.create_namespaced_deployment(namespace, deployment("spread", 3, {"suite": tag}))
    before = {p.metadata.name for p in wait_running(core, namespace, "spread", 3)}

    core.patch_node(names[0], {"spec": {"unschedulable": True}})
    apps.patch_namespaced_deployment_scale("spread", namespace, {"spec": {"replicas": 9}})
    after = wait_running(core, namespace, "spread", 9)

    new_nodes = [p.spec.node_name for p in after if p.metadata.name not in before]
    assert len(new_nodes) == 6
    assert names[0] not in new_nodes, f"new pods landed on the unschedulable node: {new_nodes}"
    assert set(new_nodes) <= set(names[1:])


def test_stopped_heartbeat_makes_the_node_ready_unknown(api: client.ApiClient, make_nodes: MakeNodes) -> None:
    core = client.CoreV1Api(api)
    name, healthy = make_nodes(2, prefix="heartbeat")

    kwok.stop_heartbeat(api, name)
    stopped_lease = kwok.read_lease(api, name)
    assert stopped_lease is not None and stopped_lease.spec.holder_identity == kwok.STOPPED_HOLDER
    node = kwok.wait_node_ready_status(api, name, "Unknown", timeout=NODE_MONITOR_GRACE_SECONDS + 90)
    ready = next(c for c in node.status.conditions if c.type == "Ready")
    # The cluster's own timestamps: the last renewal (the placeholder's) and the node-lifecycle controller's
    # transition (whole seconds).
    elapsed = (ready.last_transition_time - stopped_lease.spec.renew_time).total_seconds()
    print(f"Ready=Unknown {elapsed:.1f}s after the heartbeat stopped")
    # The lease went stale for the whole grace period: kwok did not renew it.
    assert elapsed >= NODE_MONITOR_GRACE_SECONDS - 2
    lease = kwok.read_lease(api, name)
    assert lease is not None
    assert lease.spec.holder_identity == kwok.STOPPED_HOLDER
    assert lease.spec.renew_time == stopped_lease.spec.renew_time
    assert ready.reason == "NodeStatusUnknown"  # set by the node-lifecycle controller, not by kwok
    assert kwok.ready_status(core.read_node(healthy)) == "True"
    kwok.wait_until(lambda: has_taint(core.read_node(name), UNREACHABLE), 90, f"{UNREACHABLE} taint on {name}")

    kwok.start_heartbeat(api, name)
    kwok.wait_nodes_ready(api, [name], timeout=90)
    kwok.wait_until(lambda: not has_taint(core.read_node(name), UNREACHABLE), 90, f"{UNREACHABLE} taint removed")
    renewed = kwok.read_lease(api, name)
    assert renewed is not None and renewed.spec.holder_identity != kwok.STOPPED_HOLDER


def test_crd_with_cel_rules_and_selectable_fields(api: client.ApiClient, namespace: str) -> None:
    group, plural = f"t{uuid.uuid4().hex[:6]}.nodeops.test", "widgets"
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {"min": {"type": "integer"}, "max": {"type": "integer"}, "pool": {"type": "string"}},
                "x-kubernetes-validations": [{"rule": "self.min <= self.max", "message": "min must not exceed max"}],
            }
        },
    }
    crd = {
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": "widget", "kind": "Widget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                    "selectableFields": [{"jsonPath": ".spec.pool"}],
                }
            ],
        },
    }
    extensions, custom = client.ApiextensionsV1Api(api), client.CustomObjectsApi(api)
    extensions.create_custom_resource_definition(crd)
    try:

        def established() -> bool:
            status = extensions.read_custom_resource_definition(f"{plural}.{group}").status
            return any(c.type == "Established" and c.status == "True" for c in (status and status.conditions) or ())

        kwok.wait_until(established, 90, "CRD established")

        def widget(name: str, low: int, high: int, pool: str) -> dict[str, Any]:
            body = {"apiVersion": f"{group}/v1", "kind": "Widget", "metadata": {"name": name}}
            return {**body, "spec": {"min": low, "max": high, "pool": pool}}

        custom.create_namespaced_custom_object(group, "v1", namespace, plural, widget("a", 1, 2, "blue"))
        custom.create_namespaced_custom_object(group, "v1", namespace, plural, widget("b", 1, 2, "green"))
        with pytest.raises(client.ApiException) as rejected:
            custom.create_namespaced_custom_object(group, "v1", namespace, plural, widget("c", 3, 2, "blue"))
        assert rejected.value.status == 422
        assert "min must not exceed max" in str(rejected.value.body)
        found = custom.list_namespaced_custom_object(group, "v1", namespace, plural, field_selector="spec.pool=green")
        assert [item["metadata"]["name"] for item in found["items"]] == ["b"]
    finally:
        extensions.delete_custom_resource_definition(f"{plural}.{group}")
