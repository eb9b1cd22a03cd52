"""nodeops.maintenance.node_health end to end: the ansible command, the real API server, kwok nodes.

A kwok node's heartbeat is stopped; the real node-lifecycle controller marks it Ready=Unknown; the
module creates a SelfNodeRemediation for it only when minHealthy holds, the node is not excluded and
not under maintenance; when the node heartbeats again the remediation object goes.
"""

from __future__ import annotations

import calendar
import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster import kwok
from integration.test_crds import RECAP, run_role
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException
from support.ansible_cli import BIN, clean_env, run_module

pytestmark = pytest.mark.integration

NHC_GROUP = "remediation.medik8s.io"
SNR_GROUP = "self-node-remediation.medik8s.io"
NM_GROUP = "maintenance.nvidia.com"
VERSION = "v1alpha1"
EXCLUDE = "remediation.medik8s.io/exclude-from-remediation"
LEASE_NS = "medik8s-leases"


def token_auth(cluster: Any) -> dict[str, Any]:
    return {"host": cluster.server, "api_key": cluster.token, "ca_cert": str(cluster.ca_file)}


@pytest.fixture(scope="module")
def crds(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> None:
    run_role(cluster, tmp_path_factory.mktemp("health-crds"), {})


def template(namespace: str, strategy: str = "ResourceDeletion") -> dict[str, Any]:
    return {
        "apiVersion": f"{SNR_GROUP}/{VERSION}",
        "kind": "SelfNodeRemediationTemplate",
        "metadata": {"name": "snr-template", "namespace": namespace},
        "spec": {"template": {"spec": {"remediationStrategy": strategy}}},
    }


def nhc_body(name: str, tag: str, namespace: str, min_healthy: int | str) -> dict[str, Any]:
    return {
        "apiVersion": f"{NHC_GROUP}/{VERSION}",
        "kind": "NodeHealthCheck",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"health-test": tag}},
            "unhealthyConditions": [
                {"type": "Ready", "status": "Unknown", "duration": "2s"},
                {"type": "Ready", "status": "False", "duration": "2s"},
            ],
            "minHealthy": min_healthy,
            "remediationTemplate": {
                "apiVersion": f"{SNR_GROUP}/{VERSION}",
                "kind": "SelfNodeRemediationTemplate",
                "namespace": namespace,
                "name": "snr-template",
            },
        },
    }


@pytest.fixture
def setup(crds: None, api: k8s.ApiClient, namespace: str) -> Iterator[dict[str, Any]]:
    """Three kwok nodes, one of them with its heartbeat stopped (Ready=Unknown), a template and an NHC."""
    objs = k8s.CustomObjectsApi(api)
    tag = uuid.uuid4().hex[:6]
    names = kwok.add_nodes(api, 3, prefix=f"health-{tag}", labels={"health-test": tag})
    kwok.wait_nodes_ready(api, names, timeout=60)
    objs.create_namespaced_custom_object(
        SNR_GROUP, VERSION, namespace, "selfnoderemediationtemplates", template(namespace)
    )
    nhc = f"nhc-{tag}"
    objs.create_cluster_custom_object(NHC_GROUP, VERSION, "nodehealthchecks", nhc_body(nhc, tag, namespace, 3))
    try:
        yield {"nodes": names, "nhc": nhc, "namespace": namespace, "objs": objs}
    finally:
        try:
            objs.delete_cluster_custom_object(NHC_GROUP, VERSION, "nodehealthchecks", nhc)
        except ApiException as err:
            if err.status != 404:
                raise
        kwok.delete_nodes(api, names)


def stop_and_wait_unhealthy(api: k8s.ApiClient, auth: dict[str, Any], nhc: str, dead: str) -> None:
    """Stop ``dead``'s heartbeat and wait until the NodeHealthCheck ``nhc`` sees it unhealthy (Ready=Unknown for
    longer than the condition's duration)."""
    kwok.stop_heartbeat(api, dead)
    kwok.wait_node_ready_status(api, dead, "Unknown", timeout=90)
    kwok.wait_until(
        lambda: run_module("node_health", {**auth, "name": nhc}, check=True).result["unhealthy_nodes"] == [dead],
        30,
        "the condition duration to pass",
    )


def snrs(objs: k8s.CustomObjectsApi, namespace: str) -> list[dict[str, Any]]:
    return objs.list_namespaced_custom_object(SNR_GROUP, VERSION, namespace, "selfnoderemediations")["items"]


def test_offline_what_if_needs_no_cluster() -> None:
    spec = nhc_body("x", "t", "ns", "50%")["spec"]
    now = "2026-01-02T03:10:00Z"

    def node(name: str, status: str) -> dict[str, Any]:
        return {
            "metadata": {"name": name, "labels": {"health-test": "t"}},
            "status": {
                "conditions": [{"type": "Ready", "status": status, "lastTransitionTime": "2026-01-02T03:00:00Z"}]
            },
        }

    run = run_module("node_health", {"spec": spec, "nodes": [node("a", "True"), node("b", "Unknown")], "now": now})
    assert not run.failed, run.result
    assert run.result["changed"] is False
    assert run.result["unhealthy_nodes"] == ["b"]
    assert run.result["remediated_nodes"] == ["b"]
    assert (run.result["healthy"], run.result["observed"], run.result["min_healthy"]) == (1, 2, 1)

    three = [node("a", "True"), node("b", "Unknown"), node("c", "Unknown")]
    run = run_module("node_health", {"spec": spec, "nodes": three, "now": now})
    assert run.result["remediated_nodes"] == []
    assert run.result["not_remediated"]["b"]["code"] == "SkippedMinHealthy"
    assert run.result["min_healthy"] == 2

    bad = run_module("node_health", {"spec": {**spec, "minHealthy": -1}, "nodes": three, "now": now})
    assert bad.failed and "spec.minHealthy" in bad.result["msg"]

    # with the status as read: the status the pass would write, storm recovery included
    stormy = {**spec, "stormCooldownDuration": "1m"}
    run = run_module("node_health", {"spec": stormy, "nodes": three, "now": now, "status": {}})
    assert not run.failed, run.result
    status = run.result["status"]
    assert (status["observedNodes"], status["healthyNodes"], status["phase"]) == (3, 1, "Enabled")
    assert [u["name"] for u in status["unhealthyNodes"]] == ["b", "c"]
    storm = {c["type"]: c["status"] for c in status["conditions"] if c["type"].startswith("Storm")}
    assert storm == {"StormActive": "True", "StormCooldownActive": "False"}
    assert "StormRecoveryStarted" in [e["reason"] for e in run.result["events"]]
    live = run_module("node_health", {"name": "x", "status": {}})
    assert live.failed and "status is only for offline mode" in live.result["msg"]


def test_offline_from_a_snapshot_file_is_offline_from_data(tmp_path: Path) -> None:
    """What kubectl saves (the NodeHealthCheck, Nodes, its remediation objects, Leases) gives the same result as
    the same objects passed as options; objects of other owners are not its remediation objects."""
    spec = nhc_body("x", "t", "ns", 1)["spec"]
    now = "2026-01-02T03:10:00Z"
    nodes = [_offline_node("a"), _offline_node("b", "Unknown"), _offline_node("c", "Unknown")]
    nhc = {"kind": "NodeHealthCheck", "metadata": {"name": "x", "uid": "nhc-uid"}, "spec": spec, "status": {}}
    owner = [{"kind": "NodeHealthCheck", "name": "x", "uid": "nhc-uid"}]
    ours = {
        "apiVersion": f"{SNR_GROUP}/{VERSION}",
        "kind": "SelfNodeRemediation",
        "metadata": {
            "name": "c",
            "namespace": "ns",
            "ownerReferences": owner,
            "creationTimestamp": now,
            "annotations": {"remediation.medik8s.io/template-name": "snr-template"},
        },
    }
    theirs = {**ours, "metadata": {"name": "b", "namespace": "ns", "creationTimestamp": now}}
    lease = {
        "kind": "Lease",
        "metadata": {"name": "node-b", "namespace": "medik8s-leases"},
        "spec": {"holderIdentity": "node-maintenance", "leaseDurationSeconds": 3600, "renewTime": now},
    }
    saved = tmp_path / "cluster.json"
    listed = [{"kind": "Node", **item} for item in nodes]
    saved.write_text(json.dumps({"kind": "List", "items": [nhc, *listed, ours, theirs, lease]}))
    from_file = run_module("node_health", {"snapshot": [str(saved)], "now": now})
    assert not from_file.failed, from_file.result
    given = {"name": "x", "spec": spec, "status": {}, "nodes": nodes, "remediations": [ours], "now": now}
    from_data = run_module("node_health", {**given, "leases": [lease]})
    assert {k: v for k, v in from_file.result.items() if k != "invocation"} == {
        k: v for k, v in from_data.result.items() if k != "invocation"
    }
    # the objects read are not echoed back as the task's arguments
    assert from_file.result["invocation"]["module_args"]["nodes"] is None
    assert from_file.result["not_remediated"]["b"]["code"] == "SkippedNodeLease"
    assert "status" in from_file.result
    bad = run_module("node_health", {"snapshot": [str(saved)], "nodes": nodes, "now": now})
    assert bad.failed and "snapshot and nodes are mutually exclusive" in bad.result["msg"]


def test_dead_node_gets_a_remediation_only_when_allowed(
    cluster: Any, api: k8s.ApiClient, setup: dict[str, Any]
) -> None:
    auth = token_auth(cluster)
    objs, ns, nhc = setup["objs"], setup["namespace"], setup["nhc"]
    dead = setup["nodes"][0]
    stop_and_wait_unhealthy(api, auth, nhc, dead)

    # minHealthy 3 of 3: only 2 healthy, nothing is created
    run = run_module("node_health", {**auth, "name": nhc})
    assert not run.failed, run.result
    assert run.result["remediated_nodes"] == []
    assert run.result["not_remediated"][dead]["code"] == "SkippedMinHealthy"
    assert (run.result["healthy"], run.result["min_healthy"], run.result["min_healthy_met"]) == (2, 3, False)
    assert snrs(objs, ns) == []
    status = objs.get_cluster_custom_object(NHC_GROUP, VERSION, "nodehealthchecks", nhc)["status"]
    assert (status["observedNodes"], status["healthyNodes"], status["phase"]) == (3, 2, "Enabled")
    assert [u["name"] for u in status["unhealthyNodes"]] == [dead]

    objs.patch_cluster_custom_object(NHC_GROUP, VERSION, "nodehealthchecks", nhc, {"spec": {"minHealthy": 2}})

    # excluded by label
    core = k8s.CoreV1Api(api)
    core.patch_node(dead, {"metadata": {"labels": {EXCLUDE: "true"}}})
    run = run_module("node_health", {**auth, "name": nhc})
    assert run.result["not_remediated"][dead]["code"] == "SkippedExcluded", run.result
    assert snrs(objs, ns) == []
    core.patch_node(dead, {"metadata": {"labels": {EXCLUDE: None}}})

    # under maintenance: a NodeMaintenance in progress
    nm = {
        "apiVersion": f"{NM_GROUP}/{VERSION}",
        "kind": "NodeMaintenance",
        "metadata": {"name": f"nm-{dead}"},
        "spec": {"requestorID": "health.example.com", "nodeName": dead},
    }
    objs.create_namespaced_custom_object(NM_GROUP, VERSION, ns, "nodemaintenances", nm)
    condition = {
        "type": "Ready",
        "status": "False",
        "reason": "Draining",
        "message": "",
        "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    objs.patch_namespaced_custom_object_status(
        NM_GROUP, VERSION, ns, "nodemaintenances", nm["metadata"]["name"], {"status": {"conditions": [condition]}}
    )
    run = run_module("node_health", {**auth, "name": nhc})
    assert run.result["not_remediated"][dead]["code"] == "SkippedMaintenance", run.result
    assert snrs(objs, ns) == []
    objs.delete_namespaced_custom_object(NM_GROUP, VERSION, ns, "nodemaintenances", nm["metadata"]["name"])

    # check mode says what it would do and writes nothing
    check = run_module("node_health", {**auth, "name": nhc}, check=True)
    assert check.result["remediated_nodes"] == [dead] and check.result["changed"] is True
    assert snrs(objs, ns) == []

    run = run_module("node_health", {**auth, "name": nhc})
    assert not run.failed, run.result
    assert run.result["remediated_nodes"] == [dead]
    assert run.result["changed"] is True
    [snr] = snrs(objs, ns)
    meta = snr["metadata"]
    assert meta["name"] == dead
    assert meta["annotations"]["remediation.medik8s.io/node-name"] == dead
    assert meta["annotations"]["remediation.medik8s.io/template-name"] == "snr-template"
    assert meta["labels"]["app.kubernetes.io/part-of"] == "node-healthcheck-controller"
    assert [(o["kind"], o["name"]) for o in meta["ownerReferences"]] == [("NodeHealthCheck", nhc)]
    assert snr["spec"]["remediationStrategy"] == "ResourceDeletion"
    status = objs.get_cluster_custom_object(NHC_GROUP, VERSION, "nodehealthchecks", nhc)["status"]
    assert status["phase"] == "Remediating"
    assert status["inFlightRemediations"] == {dead: meta["creationTimestamp"]}
    assert status["unhealthyNodes"][0]["remediations"][0]["resource"]["name"] == dead
    events = core.list_namespaced_event("default", field_selector=f"involvedObject.name={nhc}").items
    assert {"RemediationCreated", "RemediationSkipped"} <= {e.reason for e in events}

    again = run_module("node_health", {**auth, "name": nhc})
    assert again.result["changed"] is False, again.result
    assert again.result["decisions"][0]["code"] == "Remediating"

    # heartbeat back: the remediation object goes (healthyDelay 0)
    kwok.start_heartbeat(api, dead)
    kwok.wait_node_ready_status(api, dead, "True", timeout=60)
    back = run_module("node_health", {**auth, "name": nhc})
    assert [d["name"] for d in back.result["deleted"]] == [dead], back.result
    assert snrs(objs, ns) == []
    final = run_module("node_health", {**auth, "name": nhc})
    assert final.result["healthy"] == 3 and final.result["phase"] == "Enabled", final.result
    status = objs.get_cluster_custom_object(NHC_GROUP, VERSION, "nodehealthchecks", nhc)["status"]
    assert (status["healthyNodes"], status["phase"], status["unhealthyNodes"]) == (3, "Enabled", [])


def test_storm_recovery_holds_new_remediations_for_the_cooldown(
    cluster: Any, api: k8s.ApiClient, setup: dict[str, Any]
) -> None:
    """A shortfall starts a storm; once the threshold is met again the cooldown holds the dead node's remediation
    back, and the first pass after it remediates. Times are the product's: the condition's lastTransitionTime and
    the remediation object's creationTimestamp."""
    auth = token_auth(cluster)
    objs, ns, nhc = setup["objs"], setup["namespace"], setup["nhc"]
    core = k8s.CoreV1Api(api)
    cooldown = 5
    objs.patch_cluster_custom_object(
        NHC_GROUP, VERSION, "nodehealthchecks", nhc, {"spec": {"stormCooldownDuration": f"{cooldown}s"}}
    )
    dead = setup["nodes"][0]
    stop_and_wait_unhealthy(api, auth, nhc, dead)

    def conditions() -> dict[str, dict[str, Any]]:
        status = objs.get_cluster_custom_object(NHC_GROUP, VERSION, "nodehealthchecks", nhc)["status"]
        return {c["type"]: c for c in status["conditions"]}

    def reasons() -> list[str]:
        events = core.list_namespaced_event("default", field_selector=f"involvedObject.name={nhc}").items
        return [e.reason for e in events]

    # minHealthy 3 of 3 with one node dead: a storm
    storm = run_module("node_health", {**auth, "name": nhc})
    assert not storm.failed and storm.result["remediated_nodes"] == [], storm.result
    assert (conditions()["StormActive"]["status"], conditions()["StormCooldownActive"]["status"]) == ("True", "False")
    assert "StormRecoveryStarted" in reasons()

    # the threshold is met again: the cooldown starts and holds the node back
    objs.patch_cluster_custom_object(NHC_GROUP, VERSION, "nodehealthchecks", nhc, {"spec": {"minHealthy": 2}})
    held = run_module("node_health", {**auth, "name": nhc})
    assert held.result["not_remediated"][dead]["code"] == "SkippedStormCooldown", held.result
    assert snrs(objs, ns) == []
    cooling = conditions()["StormCooldownActive"]
    assert cooling["status"] == "True" and "StormRecoveryCooldownStarted" in reasons()
    assert 0 < held.result["requeue_after"] <= cooldown + 1

    # passes until one remediates: never before the cooldown has passed since the condition's transition
    def remediated() -> dict[str, Any] | None:
        run = run_module("node_health", {**auth, "name": nhc})
        assert not run.failed, run.result
        if run.result["remediated_nodes"]:
            return run.result
        assert run.result["not_remediated"][dead]["code"] == "SkippedStormCooldown", run.result
        return None

    done = kwok.wait_until(remediated, cooldown + 60, "the pass after the cooldown", interval=1.0)
    assert done["remediated_nodes"] == [dead]
    [snr] = snrs(objs, ns)
    made = snr["metadata"]["creationTimestamp"]
    started = cooling["lastTransitionTime"]
    assert _epoch(made) >= _epoch(started) + cooldown, (started, made)
    after = conditions()
    assert (after["StormActive"]["status"], after["StormCooldownActive"]["status"]) == ("False", "False")
    assert "StormRecoveryEnded" in reasons()


def test_the_node_lease_is_shared_with_node_maintenance_and_times_a_single_template_out(
    cluster: Any, api: k8s.ApiClient, setup: dict[str, Any]
) -> None:
    """medik8s' per-node Lease in medik8s-leases: a node maintenance's Lease keeps the node from being remediated;
    a remediation takes the Lease, a node healthy again gives it up, and a remediation whose Lease was taken three
    times its 10 minutes ago is timed out (the annotation, the status' timedOut) and gives it up."""
    auth = token_auth(cluster)
    objs, ns, nhc = setup["objs"], setup["namespace"], setup["nhc"]
    objs.patch_cluster_custom_object(NHC_GROUP, VERSION, "nodehealthchecks", nhc, {"spec": {"minHealthy": 2}})
    core, coordination = k8s.CoreV1Api(api), k8s.CoordinationV1Api(api)
    dead = setup["nodes"][0]
    name = f"node-{dead}"
    holder = f"NodeHealthCheck-{nhc}"

    def now_micro(ago: float = 0) -> str:
        # a non-zero fraction: the Python client reads the time and writes it back, without a fraction when it is 0,
        # which the API server refuses for a MicroTime
        return time.strftime("%Y-%m-%dT%H:%M:%S.500000Z", time.gmtime(time.time() - ago))

    def node_lease() -> Any:
        try:
            return coordination.read_namespaced_lease(name, LEASE_NS)
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    try:
        core.create_namespace({"metadata": {"name": LEASE_NS}})
    except ApiException as err:
        if err.status != 409:
            raise
    maintenance = {
        "metadata": {"name": name},
        "spec": {"holderIdentity": "node-maintenance", "leaseDurationSeconds": 3600, "renewTime": now_micro()},
    }
    coordination.create_namespaced_lease(LEASE_NS, maintenance)
    stop_and_wait_unhealthy(api, auth, nhc, dead)

    # a node maintenance holds the node's Lease: skipped, with upstream's event
    run = run_module("node_health", {**auth, "name": nhc})
    assert run.result["not_remediated"][dead]["code"] == "SkippedNodeLease", run.result
    assert snrs(objs, ns) == [] and run.result["leases"] == []
    events = core.list_namespaced_event("default", field_selector=f"involvedObject.name={nhc}").items
    assert f"Skipped remediation of node: {dead}, because node lease is already taken" in [e.message for e in events]

    # the maintenance gives it up: the pass takes it, then creates the remediation object
    coordination.delete_namespaced_lease(name, LEASE_NS)
    run = run_module("node_health", {**auth, "name": nhc})
    assert run.result["remediated_nodes"] == [dead], run.result
    assert run.result["leases"] == [{"node": dead, "lease": name, "action": "take", "duration_seconds": 660}]
    taken = node_lease()
    assert (taken.spec.holder_identity, taken.spec.lease_duration_seconds) == (holder, 660)
    assert [(o.kind, o.name) for o in taken.metadata.owner_references] == [("Node", dead)]

    # healthy again: the object goes, then the Lease is given up
    kwok.start_heartbeat(api, dead)
    kwok.wait_node_ready_status(api, dead, "True", timeout=60)
    run = run_module("node_health", {**auth, "name": nhc})
    assert [d["name"] for d in run.result["deleted"]] == [dead], run.result
    run = run_module("node_health", {**auth, "name": nhc})
    assert run.result["leases"] == [{"node": dead, "lease": name, "action": "release"}], run.result
    assert node_lease() is None

    # unhealthy again, and its remediation taken 30 minutes and a bit ago: overdue
    stop_and_wait_unhealthy(api, auth, nhc, dead)
    run = run_module("node_health", {**auth, "name": nhc})
    assert run.result["remediated_nodes"] == [dead], run.result
    coordination.patch_namespaced_lease(name, LEASE_NS, {"spec": {"acquireTime": now_micro(30 * 60 + 5)}})
    run = run_module("node_health", {**auth, "name": nhc})
    assert run.result["leases"] == [{"node": dead, "lease": name, "action": "release"}], run.result
    assert [m["annotation"] for m in run.result["marked"]] == ["remediation.medik8s.io/nhc-timed-out"]
    assert node_lease() is None
    [snr] = snrs(objs, ns)
    assert "remediation.medik8s.io/nhc-timed-out" in snr["metadata"]["annotations"]
    status = objs.get_cluster_custom_object(NHC_GROUP, VERSION, "nodehealthchecks", nhc)["status"]
    assert status["unhealthyNodes"][0]["remediations"][0]["timedOut"]
    # and a single template's remediation stays, timed out, until the node is healthy
    again = run_module("node_health", {**auth, "name": nhc})
    assert again.result["decisions"][0]["code"] == "Remediating" and again.result["changed"] is False, again.result


def _epoch(stamp: str) -> float:
    return float(calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")))


def test_every_event_of_a_pass_is_recorded_on_the_nodehealthcheck(
    cluster: Any, api: k8s.ApiClient, setup: dict[str, Any]
) -> None:
    """DetectedUnhealthy, RemediationCreated and InvalidNodeLabel when a node is remediated; NoTemplateLeft once
    every escalation step timed out; Disabled (and the status' Disabled condition) for a template that is missing;
    RemediationRemoved when the node is healthy again."""
    auth = token_auth(cluster)
    objs, ns, nhc = setup["objs"], setup["namespace"], setup["nhc"]
    core = k8s.CoreV1Api(api)
    dead = setup["nodes"][0]

    def reasons() -> list[str]:
        events = core.list_namespaced_event("default", field_selector=f"involvedObject.name={nhc}").items
        return [e.reason for e in events]

    def patch_spec(spec: dict[str, Any]) -> None:
        objs.patch_cluster_custom_object(NHC_GROUP, VERSION, "nodehealthchecks", nhc, {"spec": spec})

    def one_pass() -> dict[str, Any]:
        run = run_module("node_health", {**auth, "name": nhc})
        assert not run.failed, run.result
        return run.result

    patch_spec({"minHealthy": 2})
    core.patch_node(dead, {"metadata": {"labels": {EXCLUDE: ""}}})  # empty: not excluded, called out
    stop_and_wait_unhealthy(api, auth, nhc, dead)
    assert one_pass()["remediated_nodes"] == [dead]
    assert {"DetectedUnhealthy", "RemediationCreated", "InvalidNodeLabel"} <= set(reasons())

    # one escalation step, and its object timed out: no template left
    template = dict(nhc_body(nhc, "t", ns, 2)["spec"]["remediationTemplate"])
    patch_spec(
        {
            "remediationTemplate": None,
            "escalatingRemediations": [{"remediationTemplate": template, "order": 0, "timeout": "60s"}],
        }
    )
    objs.patch_namespaced_custom_object(
        SNR_GROUP,
        VERSION,
        ns,
        "selfnoderemediations",
        dead,
        {"metadata": {"annotations": {"remediation.medik8s.io/nhc-timed-out": "2026-01-02T03:04:05Z"}}},
    )
    assert one_pass()["not_remediated"][dead]["code"] == "NoTemplateLeft"
    assert "NoTemplateLeft" in reasons()

    # a second step whose template is missing: the NodeHealthCheck is disabled, nothing is created
    missing = {**template, "name": "no-such-template"}
    patch_spec(
        {
            "escalatingRemediations": [
                {"remediationTemplate": template, "order": 0, "timeout": "60s"},
                {"remediationTemplate": missing, "order": 1, "timeout": "60s"},
            ]
        }
    )
    disabled = one_pass()
    assert disabled["phase"] == "Disabled" and disabled["remediated_nodes"] == [], disabled
    status = objs.get_cluster_custom_object(NHC_GROUP, VERSION, "nodehealthchecks", nhc)["status"]
    [condition] = [c for c in status["conditions"] if c["type"] == "Disabled"]
    assert (condition["status"], condition["reason"]) == ("True", "RemediationTemplateNotFound")
    assert "Disabled" in reasons() and [s["metadata"]["name"] for s in snrs(objs, ns)] == [dead]

    # back to the single template, the node healthy again: its object goes
    patch_spec({"escalatingRemediations": None, "remediationTemplate": template})
    kwok.start_heartbeat(api, dead)
    kwok.wait_node_ready_status(api, dead, "True", timeout=60)
    assert [d["name"] for d in one_pass()["deleted"]] == [dead]
    assert "RemediationRemoved" in reasons() and snrs(objs, ns) == []


def test_unknown_nhc_fails_clearly(cluster: Any, crds: None, tmp_path: Path) -> None:
    run = run_module("node_health", {**token_auth(cluster), "name": "no-such-nhc"})
    assert run.failed
    assert "NodeHealthCheck 'no-such-nhc' does not exist" in run.result["msg"]


def test_remediate_playbook_loop_mode(cluster: Any, setup: dict[str, Any]) -> None:
    """playbooks/remediate.yml through ansible-playbook: two passes, the NodeHealthCheck status written."""
    playbook = Path(__file__).resolve().parents[2] / "playbooks" / "remediate.yml"
    extra = {
        "remediate_nhc_name": setup["nhc"],
        "remediate_namespace": setup["namespace"],
        "remediate_count": 2,
        "remediate_interval": 0,
    }
    cmd = [str(BIN / "ansible-playbook"), "-i", "localhost,", str(playbook), "-e", json.dumps(extra)]
    env = clean_env(
        {"ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.default", "K8S_AUTH_KUBECONFIG": str(cluster.kubeconfig)}
    )
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert proc.stdout.count("TASK [Evaluate the NodeHealthCheck]") == 2
    recap = RECAP.search(proc.stdout)
    assert recap and recap.group(4) == "0", proc.stdout
    status = setup["objs"].get_cluster_custom_object(NHC_GROUP, VERSION, "nodehealthchecks", setup["nhc"])["status"]
    assert (status["observedNodes"], status["healthyNodes"], status["phase"]) == (3, 3, "Enabled")

    missing = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", "localhost,", str(playbook)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert missing.returncode != 0 and "missing required arguments: remediate_nhc_name" in missing.stdout


def _offline_node(name: str, status: str = "True", **labels: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"health-test": "t", **labels}},
        "status": {"conditions": [{"type": "Ready", "status": status, "lastTransitionTime": "2026-01-02T03:00:00Z"}]},
    }


def _impossible_condition_time() -> list[dict[str, Any]]:
    broken = _offline_node("b", "Unknown")
    broken["status"]["conditions"][0]["lastTransitionTime"] = "2026-02-30T00:00:00Z"
    return [_offline_node("a"), broken]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"now": "2026-13-45T00:00:00Z"}, "now: '2026-13-45T00:00:00Z' is not a valid RFC 3339 timestamp"),
        (
            {"nodes": _impossible_condition_time()},
            "nodes[1].status.conditions[0].lastTransitionTime: '2026-02-30T00:00:00Z' is not a valid RFC 3339 "
            "timestamp (day is out of range for month); give a date and time that exist",
        ),
        (
            {
                "remediations": [
                    {
                        "apiVersion": f"{SNR_GROUP}/{VERSION}",
                        "kind": "SelfNodeRemediation",
                        "metadata": {"name": "b", "namespace": "ns", "creationTimestamp": "9999-12-31T23:59:59-01:00"},
                    }
                ]
            },
            "remediations[0].metadata.creationTimestamp: '9999-12-31T23:59:59-01:00' is outside the years 0001 to 9999",
        ),
        ({"nodes": [{}]}, "nodes[0]: metadata.name is missing"),
        (
            {"selector": {"matchLabels": {"health-test": 1}}},
            "spec.selector.matchLabels.health-test: must be a string, not the number 1",
        ),
        (
            {"selector": {"matchExpressions": [{"key": "health-test", "operator": "In", "values": [1]}]}},
            "spec.selector.matchExpressions[0].values[0]: must be a string, not the number 1",
        ),
        (
            {"minHealthy": "\uff150%"},
            'spec.minHealthy: the string "\uff150%" is refused: minHealthy must be a number of 0 or more',
        ),
        (
            {
                "node_maintenances": [
                    {
                        "metadata": {"name": "m", "creationTimestamp": "9999-12-31T23:59:59-01:00"},
                        "spec": {"nodeName": "a", "requestorID": "x.example.com"},
                    }
                ]
            },
            "NodeMaintenance default/m: metadata.creationTimestamp: '9999-12-31T23:59:59-01:00' is outside the years",
        ),
    ],
)
def test_offline_bad_input_fails_naming_the_field(change: dict[str, Any], message: str) -> None:
    """Each was a Python traceback, or silently 0 observed nodes, before."""
    spec = nhc_body("x", "t", "ns", "50%")["spec"]
    args: dict[str, Any] = {"spec": spec, "nodes": [_offline_node("a"), _offline_node("b", "Unknown")]}
    args["now"] = "2026-01-02T03:10:00Z"
    for key, value in change.items():
        if key in ("selector", "minHealthy"):
            args["spec"] = {**spec, key: value}
        else:
            args[key] = value
    run = run_module("node_health", args, env={"KUBECONFIG": "/nonexistent"})
    assert run.failed, run.result
    assert message in run.result["msg"], run.result
    # fail_json, not an exception (which ansible reports as "Task failed: Module failed: <the exception>")
    assert not run.result["msg"].startswith("Task failed") and "module_stderr" not in run.result
    assert "Traceback" not in run.stderr
    assert run.result.get("changed") is not True
