"""nodeops.maintenance.node_health + remediation end to end, once with each strategy.

A kwok node running a StatefulSet pod and a Deployment pod with a VolumeAttachment stops
heartbeating; the real node-lifecycle controller marks it Ready=Unknown; ``node_health`` (condition
duration 2 s) creates a SelfNodeRemediation; ``remediation`` taints the node, waits the safe time
(a small config and a 1 s watchdog: 63 s, the computed minimum, not the configured 10 s) and then
recovers the workloads; the pods run elsewhere and the VolumeAttachment is gone. When the node
heartbeats again the taints go and the remediation object is deleted.

Timing (printed, see the report): from the node's Ready=Unknown transition to the new StatefulSet
pod Ready elsewhere, against condition duration + safe time.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.node.safetime import safe_time
from cluster import kwok
from integration.test_node_health import NHC_GROUP, SNR_GROUP, VERSION, crds, nhc_body, template, token_auth
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException
from support.ansible_cli import run_module

pytestmark = pytest.mark.integration
__all__ = ["crds"]

WORKER = "node-role.kubernetes.io/worker"
WATCHDOG = "self-node-remediation.medik8s.io/watchdog-timeout"
REBOOT_CAPABLE = "is-reboot-capable.self-node-remediation.medik8s.io"
NO_SCHEDULE = "remediation.medik8s.io/self-node-remediation"
OUT_OF_SERVICE = "node.kubernetes.io/out-of-service"
CONDITION_SECONDS = 2
CONFIG_SPEC = {
    "apiServerTimeout": "10ms",
    "apiCheckInterval": "1s",
    "maxApiErrorThreshold": 1,
    "peerDialTimeout": "10ms",
    "peerRequestTimeout": "10ms",
    "safeTimeToAssumeNodeRebootedSeconds": 10,  # below the minimum: the minimum is used
}


def utc(text: str) -> float:
    from datetime import timezone

    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()  # noqa: UP017


def workloads(namespace: str, tag: str, first: str) -> list[tuple[str, dict[str, Any]]]:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "rem-test", "operator": "In", "values": [tag]}]}]
            },
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "preference": {
                        "matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [first]}]
                    },
                }
            ],
        }
    }

    def pod_template(app: str) -> dict[str, Any]:
        return {
            "metadata": {"labels": {"app": app}},
            "spec": {"affinity": affinity, "containers": [{"name": "c", "image": "busybox"}]},
        }

    sts = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": namespace},
        "spec": {
            "serviceName": "db",
            "replicas": 1,
            "selector": {"matchLabels": {"app": "db"}},
            "template": pod_template("db"),
        },
    }
    deploy = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": namespace},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}}, "template": pod_template("web")},
    }
    return [("sts", sts), ("deploy", deploy)]


def pod_of(core: k8s.CoreV1Api, namespace: str, app: str) -> list[k8s.V1Pod]:
    return core.list_namespaced_pod(namespace, label_selector=f"app={app}").items


def ready_on(core: k8s.CoreV1Api, namespace: str, app: str, node: str | None, not_node: str | None = None) -> Any:
    for pod in pod_of(core, namespace, app):
        if pod.metadata.deletion_timestamp or pod.status.phase != "Running":
            continue
        if (node and pod.spec.node_name != node) or (not_node and pod.spec.node_name == not_node):
            continue
        return pod
    return None


@pytest.fixture
def scene(crds: None, api: k8s.ApiClient, namespace: str, request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    strategy = request.param
    objs = k8s.CustomObjectsApi(api)
    core = k8s.CoreV1Api(api)
    tag = uuid.uuid4().hex[:6]
    names = kwok.add_nodes(api, 3, prefix=f"rem-{tag}", labels={"health-test": tag, "rem-test": tag, WORKER: ""})
    kwok.wait_nodes_ready(api, names, timeout=120)
    dead = names[0]
    # what the node agent publishes: it can fence the node, with a 1 s watchdog
    core.patch_node(dead, {"metadata": {"annotations": {WATCHDOG: "1", REBOOT_CAPABLE: "true"}}})
    objs.create_namespaced_custom_object(
        SNR_GROUP, VERSION, namespace, "selfnoderemediationtemplates", template(namespace, strategy)
    )
    config = {
        "apiVersion": f"{SNR_GROUP}/{VERSION}",
        "kind": "SelfNodeRemediationConfig",
        "metadata": {"name": "self-node-remediation-config", "namespace": namespace},
        "spec": CONFIG_SPEC,
    }
    objs.create_namespaced_custom_object(SNR_GROUP, VERSION, namespace, "selfnoderemediationconfigs", config)
    nhc = f"nhc-{tag}"
    body = nhc_body(nhc, tag, namespace, 2)
    body["spec"]["unhealthyConditions"] = [{"type": "Ready", "status": "Unknown", "duration": f"{CONDITION_SECONDS}s"}]
    objs.create_cluster_custom_object(NHC_GROUP, VERSION, "nodehealthchecks", body)
    apps = k8s.AppsV1Api(api)
    apps.create_namespaced_stateful_set(namespace, workloads(namespace, tag, dead)[0][1])
    apps.create_namespaced_deployment(namespace, workloads(namespace, tag, dead)[1][1])
    storage = k8s.StorageV1Api(api)
    attachment = f"va-{tag}"
    storage.create_volume_attachment(
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "VolumeAttachment",
            "metadata": {"name": attachment},
            "spec": {"attacher": "fake.csi.example.com", "nodeName": dead, "source": {"persistentVolumeName": "pv-x"}},
        }
    )
    try:
        yield {
            "strategy": strategy,
            "nodes": names,
            "dead": dead,
            "nhc": nhc,
            "namespace": namespace,
            "attachment": attachment,
        }
    finally:
        for call in (
            lambda: objs.delete_cluster_custom_object(NHC_GROUP, VERSION, "nodehealthchecks", nhc),
            lambda: storage.delete_volume_attachment(attachment),
        ):
            try:
                call()
            except ApiException as err:
                if err.status != 404:
                    raise
        for snr in objs.list_namespaced_custom_object(SNR_GROUP, VERSION, namespace, "selfnoderemediations")["items"]:
            patch = {"metadata": {"finalizers": None}}
            objs.patch_namespaced_custom_object(
                SNR_GROUP, VERSION, namespace, "selfnoderemediations", snr["metadata"]["name"], patch
            )
        kwok.delete_nodes(api, names, timeout=120)


def taint_keys(core: k8s.CoreV1Api, node: str) -> set[str]:
    return {t.key for t in core.read_node(node).spec.taints or ()}


@pytest.mark.parametrize("scene", ["ResourceDeletion", "OutOfServiceTaint"], indirect=True)
def test_dead_node_is_fenced_then_its_workloads_run_elsewhere(
    cluster: Any, api: k8s.ApiClient, scene: dict[str, Any]
) -> None:
    auth = token_auth(cluster)
    core = k8s.CoreV1Api(api)
    objs = k8s.CustomObjectsApi(api)
    ns, dead, nhc = scene["namespace"], scene["dead"], scene["nhc"]
    old = {
        app: kwok.wait_until(lambda app=app: ready_on(core, ns, app, dead), 60, f"{app} pod Running on {dead}")
        for app in ("db", "web")
    }
    expected = safe_time(CONFIG_SPEC, 3, "1")
    assert expected.effective_seconds == expected.minimum_seconds == 63

    kwok.stop_heartbeat(api, dead)
    node = kwok.wait_node_ready_status(api, dead, "Unknown", timeout=90)
    not_ready_at = next(c.last_transition_time for c in node.status.conditions if c.type == "Ready").timestamp()

    def created() -> dict[str, Any] | None:
        run = run_module("node_health", {**auth, "name": nhc})
        assert not run.failed, run.result
        return run.result if run.result["remediated_nodes"] == [dead] else None

    kwok.wait_until(created, 120, "node_health to create the remediation")

    first = run_module("remediation", {**auth, "namespace": ns})
    assert not first.failed, first.result
    [outcome] = first.result["remediations"]
    assert outcome["phase"] == "Pre-Reboot-Completed", outcome
    assert outcome["strategy"] == scene["strategy"]
    assert outcome["safe_time"]["effective_seconds"] == 63
    assert outcome["safe_time"]["configured_used"] is False
    assumed = utc(outcome["time_assumed_rebooted"])
    assert NO_SCHEDULE in taint_keys(core, dead)
    assert OUT_OF_SERVICE not in taint_keys(core, dead)
    snr = objs.get_namespaced_custom_object(SNR_GROUP, VERSION, ns, "selfnoderemediations", dead)
    assert "self-node-remediation.medik8s.io/snr-finalizer" in snr["metadata"]["finalizers"]
    conditions = {c["type"]: (c["status"], c["reason"]) for c in snr["status"]["conditions"]}
    assert conditions == {"Processing": ("True", "RemediationStarted"), "Succeeded": ("Unknown", "RemediationStarted")}

    # Before the safe time nothing is recovered: the pods are still the old ones.
    again = run_module("remediation", {**auth, "namespace": ns})
    assert again.result["remediations"][0]["code"] == "WaitingSafeTime", again.result
    assert again.result["remediations"][0]["pods_deleted"] == []
    assert {p.metadata.uid for p in pod_of(core, ns, "db")} == {old["db"].metadata.uid}

    # the wait for the safe time, with a progress line at least every 10 s, in one task
    done = run_module(
        "remediation", {**auth, "namespace": ns, "settle_timeout": 150, "progress_after": 10}, timeout=200
    )
    assert not done.failed, done.result
    [outcome] = done.result["remediations"]
    assert outcome["phase"] == "Fencing-Completed", outcome
    assert time.time() >= assumed
    lines = [line for line in done.stdout.splitlines() if "1 remediation(s) waiting: " in line]
    assert lines and all(f"{ns}/{dead} on {dead} (Pre-Reboot-Completed" in line for line in lines), done.stdout
    assert "progress" not in done.result and "resume" not in done.result

    db = kwok.wait_until(lambda: ready_on(core, ns, "db", None, dead), 60, "db pod Running elsewhere")
    web = kwok.wait_until(lambda: ready_on(core, ns, "web", None, dead), 60, "web pod Running elsewhere")
    assert db.metadata.creation_timestamp.timestamp() >= assumed - 1  # never recreated before the safe time
    assert web.spec.node_name != dead
    storage = k8s.StorageV1Api(api)
    assert scene["attachment"] not in {a.metadata.name for a in storage.list_volume_attachment().items}
    snr = objs.get_namespaced_custom_object(SNR_GROUP, VERSION, ns, "selfnoderemediations", dead)
    conditions = {c["type"]: (c["status"], c["reason"]) for c in snr["status"]["conditions"]}
    assert conditions["Succeeded"] == ("True", "RemediationFinishedSuccessfully")
    ready_at = next(c.last_transition_time for c in db.status.conditions if c.type == "Ready").timestamp()
    budget = CONDITION_SECONDS + expected.effective_seconds
    assert ready_at - not_ready_at >= budget - 1  # timestamps have whole seconds
    print(
        f"\n[timing] {scene['strategy']}: NotReady -> StatefulSet pod Ready elsewhere {ready_at - not_ready_at:.0f}s; "
        f"condition duration + safe time = {budget}s; overhead {ready_at - not_ready_at - budget:.0f}s"
    )

    # The node heartbeats again: the taints go and the remediation object is deleted.
    kwok.start_heartbeat(api, dead)
    kwok.wait_node_ready_status(api, dead, "True", timeout=60)
    back = run_module("node_health", {**auth, "name": nhc})
    assert [d["name"] for d in back.result["deleted"]] == [dead], back.result
    clean = run_module("remediation", {**auth, "namespace": ns})
    assert not clean.failed, clean.result
    assert clean.result["remediations"][0]["phase"] == "Deleted", clean.result
    assert not taint_keys(core, dead) & {NO_SCHEDULE, OUT_OF_SERVICE}
    assert objs.list_namespaced_custom_object(SNR_GROUP, VERSION, ns, "selfnoderemediations")["items"] == []
