"""The remediation manager acts only on nodes whose agent has shown it can fence them, counts the
watchdog timeout the agent published, and deletes only the pods it listed (by UID); against the real test
cluster, through the module and the engine."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import pytest
from ansible_collections.nodeops.maintenance.plugins.module_utils.engines.remediation import RemediationManager
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.client import PODS, Client
from cluster import kwok
from integration.test_drain import replace_pod
from integration.test_node_health import SNR_GROUP, VERSION, crds, token_auth
from kubernetes import client as k8s
from support.ansible_cli import run_module

pytestmark = pytest.mark.integration
__all__ = ["crds"]

WORKER = "node-role.kubernetes.io/worker"
WATCHDOG = "self-node-remediation.medik8s.io/watchdog-timeout"
REBOOT_CAPABLE = "is-reboot-capable.self-node-remediation.medik8s.io"
NO_SCHEDULE = "remediation.medik8s.io/self-node-remediation"
CONFIG_SPEC = {"apiServerTimeout": "10ms", "apiCheckInterval": "1s", "maxApiErrorThreshold": 1}


def stamp(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)  # noqa: UP017


@pytest.fixture
def scene(crds: None, api: k8s.ApiClient, namespace: str) -> Iterator[dict[str, Any]]:
    objs = k8s.CustomObjectsApi(api)
    core = k8s.CoreV1Api(api)
    tag = uuid.uuid4().hex[:6]
    [node] = kwok.add_nodes(api, 1, prefix=f"cap-{tag}", labels={WORKER: ""})
    kwok.wait_nodes_ready(api, [node], timeout=120)
    config = {
        "apiVersion": f"{SNR_GROUP}/{VERSION}",
        "kind": "SelfNodeRemediationConfig",
        "metadata": {"name": "self-node-remediation-config", "namespace": namespace},
        "spec": CONFIG_SPEC,
    }
    objs.create_namespaced_custom_object(SNR_GROUP, VERSION, namespace, "selfnoderemediationconfigs", config)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "db-0", "namespace": namespace},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
    }
    core.create_namespaced_pod(namespace, pod)
    snr = {
        "apiVersion": f"{SNR_GROUP}/{VERSION}",
        "kind": "SelfNodeRemediation",
        "metadata": {"name": node, "namespace": namespace},
        "spec": {"remediationStrategy": "ResourceDeletion"},
    }
    objs.create_namespaced_custom_object(SNR_GROUP, VERSION, namespace, "selfnoderemediations", snr)
    try:
        yield {"node": node, "namespace": namespace, "uid": core.read_namespaced_pod("db-0", namespace).metadata.uid}
    finally:
        patch = {"metadata": {"finalizers": None}}
        objs.patch_namespaced_custom_object(SNR_GROUP, VERSION, namespace, "selfnoderemediations", node, patch)
        kwok.delete_nodes(api, [node], timeout=120)


def remediate(cluster: Any, namespace: str, **extra: Any) -> dict[str, Any]:
    run = run_module("remediation", {**token_auth(cluster), "namespace": namespace, **extra}, timeout=300)
    assert run.rc == 0, run.result
    [outcome] = run.result["remediations"]
    return dict(outcome)


def test_a_node_without_an_agent_keeps_its_pods_however_long_the_run_waits(
    cluster: Any, api: k8s.ApiClient, scene: dict[str, Any]
) -> None:
    core = k8s.CoreV1Api(api)
    objs = k8s.CustomObjectsApi(api)
    node, ns = scene["node"], scene["namespace"]
    outcome = remediate(cluster, ns, settle_timeout=5)
    assert outcome["code"] == "NotRebootCapable" and REBOOT_CAPABLE in outcome["reason"]
    # even an object a run had fenced long ago, should the annotation go, recovers nothing
    status = {"phase": "Pre-Reboot-Completed", "timeAssumedRebooted": "2000-01-01T00:00:00Z"}
    objs.patch_namespaced_custom_object_status(SNR_GROUP, VERSION, ns, "selfnoderemediations", node, {"status": status})
    outcome = remediate(cluster, ns, settle_timeout=5)
    assert outcome["code"] == "NotRebootCapable" and outcome["pods_deleted"] == []
    assert core.read_namespaced_pod("db-0", ns).metadata.uid == scene["uid"]
    assert NO_SCHEDULE not in {t.key for t in core.read_node(node).spec.taints or ()}
    # the reason is in the object's status and in an event
    snr = objs.get_namespaced_custom_object(SNR_GROUP, VERSION, ns, "selfnoderemediations", node)
    assert snr["status"]["phase"] == "Pre-Reboot-Completed"
    conditions = {c["type"]: c for c in snr["status"]["conditions"]}
    assert conditions["Processing"]["reason"] == "NodeNotRebootCapable"
    events = core.list_namespaced_event(ns, field_selector=f"involvedObject.name={node}").items
    assert any(e.reason == "RemediationCannotStart" and e.type == "Warning" for e in events)
    # once an agent publishes that it can fence the node, the same object goes on
    core.patch_node(node, {"metadata": {"annotations": {REBOOT_CAPABLE: "true", WATCHDOG: "1"}}})
    outcome = remediate(cluster, ns, settle_timeout=5)
    assert outcome["pods_deleted"] == [f"{ns}/db-0"], outcome


def test_the_safe_time_counts_the_watchdog_timeout_the_agent_published(
    cluster: Any, api: k8s.ApiClient, scene: dict[str, Any]
) -> None:
    core = k8s.CoreV1Api(api)
    objs = k8s.CustomObjectsApi(api)
    node, ns = scene["node"], scene["namespace"]
    core.patch_node(node, {"metadata": {"annotations": {REBOOT_CAPABLE: "true", WATCHDOG: "300"}}})
    # a shorter watchdog given to the module does not shorten what the agent published
    first = remediate(cluster, ns, watchdog_timeout=1)
    assert first["phase"] == "Pre-Reboot-Completed"
    assert first["safe_time"]["watchdog_seconds"] == 300 and first["safe_time"]["reboot_seconds"] == 330
    snr = objs.get_namespaced_custom_object(SNR_GROUP, VERSION, ns, "selfnoderemediations", node)
    started = stamp({c["type"]: c for c in snr["status"]["conditions"]}["Processing"]["lastTransitionTime"])
    assumed = stamp(snr["status"]["timeAssumedRebooted"])
    assert (assumed - started).total_seconds() >= first["safe_time"]["effective_seconds"]
    # a later pass before that time deletes nothing
    later = remediate(cluster, ns, settle_timeout=3)
    assert later["code"] == "WaitingSafeTime" and later["pods_deleted"] == []
    assert core.read_namespaced_pod("db-0", ns).metadata.uid == scene["uid"]


def test_a_pod_recreated_elsewhere_between_the_list_and_the_deletion_stays_untouched(
    cluster: Any, api: k8s.ApiClient, scene: dict[str, Any]
) -> None:
    """The run lists the remediated node's pods; before its deletions, db-0 is deleted (by another run, or a
    person) and re-created under the same name on a healthy node. The force-deletion carries the listed UID,
    so the new pod survives and the run does not report db-0 as deleted by it."""
    core = k8s.CoreV1Api(api)
    objs = k8s.CustomObjectsApi(api)
    node, ns = scene["node"], scene["namespace"]
    [healthy] = kwok.add_nodes(api, 1, prefix=f"healthy-{uuid.uuid4().hex[:6]}")
    try:
        core.patch_node(node, {"metadata": {"annotations": {REBOOT_CAPABLE: "true", WATCHDOG: "1"}}})
        status = {"phase": "Reboot-Completed", "timeAssumedRebooted": "2000-01-01T00:00:00Z"}
        objs.patch_namespaced_custom_object_status(
            SNR_GROUP, VERSION, ns, "selfnoderemediations", node, {"status": status}
        )
        client = Client.from_params(token_auth(cluster))
        replaced: list[str] = []
        listing = client.list

        def list_then_replace(res: Any, namespace: str | None = None, **kw: Any) -> dict[str, Any]:
            result = listing(res, namespace, **kw)
            if res is PODS and not replaced:
                assert [p["metadata"]["uid"] for p in result["items"]] == [scene["uid"]]
                replaced.append(replace_pod(core, ns, "db-0", healthy, {}))
            return result

        client.list = list_then_replace  # type: ignore[method-assign]
        manager = RemediationManager(client, emit_events=False)  # the engine reads the clock
        [outcome] = manager.run(ns, node, wait_timeout=0)
        assert replaced, "the run never listed the node's pods"
        pod = core.read_namespaced_pod("db-0", ns)
        assert pod.metadata.uid == replaced[0] and pod.spec.node_name == healthy
        assert pod.metadata.deletion_timestamp is None, "the new pod on a healthy node was deleted"
        assert outcome.pods_deleted == [] and outcome.pods_already_gone == [f"{ns}/db-0"], outcome
        assert outcome.phase == "Fencing-Completed", outcome
        # a run of the module now (the object is completed) leaves the new pod alone too
        again = remediate(cluster, ns)
        assert again["pods_deleted"] == [] and core.read_namespaced_pod("db-0", ns).metadata.uid == replaced[0]
    finally:
        kwok.delete_nodes(api, [healthy], timeout=120)
