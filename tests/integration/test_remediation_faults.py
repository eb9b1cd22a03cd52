"""Fault injection for nodeops.maintenance.remediation against the real API server.

* A run killed while it waits for the safe time leaves the object's progress behind; the next run
  continues with the same timeAssumedRebooted and deletes the pods, and a pod watch started before the
  first run sees each pod deleted exactly once, none before that time (by the API server's
  deletionTimestamp). The kill takes the whole process tree: ansible's workers run in sessions of
  their own, so a kill of the process group would leave the module running (tests/support/processes.py).
* A node under maintenance (a NodeMaintenance in progress) gets nothing: no taint, no finalizer, no
  status; check mode writes nothing either. Once the maintenance is gone the next run fences it.

(No remediation while minHealthy fails: node_health does not create the object then, see
test_node_health.py.)
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from cluster import kwok
from integration.test_node_health import NM_GROUP, SNR_GROUP, VERSION, crds, token_auth
from integration.test_remediation import CONFIG_SPEC, NO_SCHEDULE, WORKER, taint_keys, utc
from kubernetes import client as k8s
from kubernetes import watch
from kubernetes.client.rest import ApiException
from support.ansible_cli import BIN, clean_env, run_module
from support.processes import kill_tree

pytestmark = pytest.mark.integration
__all__ = ["crds"]


def snr_body(node: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{SNR_GROUP}/{VERSION}",
        "kind": "SelfNodeRemediation",
        "metadata": {"name": node, "namespace": namespace},
        "spec": {"remediationStrategy": "ResourceDeletion"},
    }


def pod_body(name: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"fault-test": "true"}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
    }


@pytest.fixture
def scene(crds: None, api: k8s.ApiClient, namespace: str) -> Iterator[dict[str, Any]]:
    objs = k8s.CustomObjectsApi(api)
    core = k8s.CoreV1Api(api)
    tag = uuid.uuid4().hex[:6]
    names = kwok.add_nodes(api, 3, prefix=f"fault-{tag}", labels={WORKER: ""})
    kwok.wait_nodes_ready(api, names, timeout=120)
    for name in names:
        # what the node agent publishes: it can fence the node, with a 1 s watchdog
        annotations = {
            "self-node-remediation.medik8s.io/watchdog-timeout": "1",
            "is-reboot-capable.self-node-remediation.medik8s.io": "true",
        }
        core.patch_node(name, {"metadata": {"annotations": annotations}})
    config = {
        "apiVersion": f"{SNR_GROUP}/{VERSION}",
        "kind": "SelfNodeRemediationConfig",
        "metadata": {"name": "self-node-remediation-config", "namespace": namespace},
        "spec": CONFIG_SPEC,
    }
    objs.create_namespaced_custom_object(SNR_GROUP, VERSION, namespace, "selfnoderemediationconfigs", config)
    try:
        yield {"nodes": names, "namespace": namespace}
    finally:
        for snr in objs.list_namespaced_custom_object(SNR_GROUP, VERSION, namespace, "selfnoderemediations")["items"]:
            name = snr["metadata"]["name"]
            try:
                objs.patch_namespaced_custom_object(
                    SNR_GROUP, VERSION, namespace, "selfnoderemediations", name, {"metadata": {"finalizers": None}}
                )
                objs.delete_namespaced_custom_object(SNR_GROUP, VERSION, namespace, "selfnoderemediations", name)
            except ApiException as err:
                if err.status != 404:
                    raise
        kwok.delete_nodes(api, names, timeout=120)


class PodDeletions:
    """Watches the namespace's pods and records, per deletion, what the API server says about it.

    ``seen``: (event type, pod name, pod UID, deletionTimestamp as a POSIX time or None) for every
    event of a pod that is being deleted or is deleted. The watch is started again from the last
    resourceVersion when the server ends it, so a slow test misses nothing.
    """

    def __init__(self, api: k8s.ApiClient, namespace: str) -> None:
        self.core = k8s.CoreV1Api(api)
        self.namespace = namespace
        self.seen: list[tuple[str, str, str, float | None]] = []
        self.watch = watch.Watch()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.started = threading.Event()
        self.stopping = False
        self.error: Exception | None = None

    def _run(self) -> None:
        try:
            rv = self.core.list_namespaced_pod(self.namespace).metadata.resource_version
            self.started.set()
            while not self.stopping:
                for event in self.watch.stream(
                    self.core.list_namespaced_pod, self.namespace, resource_version=rv, timeout_seconds=300
                ):
                    pod = event["object"]
                    rv = pod.metadata.resource_version
                    if event["type"] == "DELETED" or pod.metadata.deletion_timestamp:
                        stamp = pod.metadata.deletion_timestamp
                        self.seen.append(
                            (event["type"], pod.metadata.name, pod.metadata.uid, stamp.timestamp() if stamp else None)
                        )
        except Exception as err:  # reported by the test unless the watch was stopped
            if not self.stopping:
                self.error = err
        finally:
            self.started.set()

    def deleted(self) -> list[str]:
        """The names of the pods the watch saw go, once per DELETED event."""
        return sorted(name for kind, name, _uid, _stamp in self.seen if kind == "DELETED")

    def __enter__(self) -> PodDeletions:
        self.thread.start()
        assert self.started.wait(60), "the pod watch did not start"
        assert self.error is None, self.error
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping = True
        self.watch.stop()


def test_killed_run_resumes_and_no_pod_goes_before_the_safe_time(
    cluster: Any, api: k8s.ApiClient, scene: dict[str, Any]
) -> None:
    auth = token_auth(cluster)
    ns, node = scene["namespace"], scene["nodes"][0]
    core, objs = k8s.CoreV1Api(api), k8s.CustomObjectsApi(api)
    for index in range(2):
        core.create_namespaced_pod(ns, pod_body(f"p{index}", node))
    kwok.wait_until(
        lambda: all(p.status.phase == "Running" for p in core.list_namespaced_pod(ns).items) or None,
        120,
        "pods Running",
    )
    uids = {p.metadata.name: p.metadata.uid for p in core.list_namespaced_pod(ns).items}
    assert sorted(uids) == ["p0", "p1"]

    def snr_status() -> dict[str, Any]:
        snr = objs.get_namespaced_custom_object(SNR_GROUP, VERSION, ns, "selfnoderemediations", node)
        return dict(snr.get("status") or {})

    with PodDeletions(api, ns) as deletions:
        objs.create_namespaced_custom_object(SNR_GROUP, VERSION, ns, "selfnoderemediations", snr_body(node, ns))
        cmd = [
            str(BIN / "ansible"),
            "localhost",
            "-c",
            "local",
            "-i",
            "localhost,",
            "-m",
            "nodeops.maintenance.remediation",
        ]
        cmd += ["-a", json.dumps({**auth, "namespace": ns, "settle_timeout": 150})]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=clean_env())
        try:
            assumed_text = kwok.wait_until(
                lambda: snr_status().get("timeAssumedRebooted"), 120, "the first run to record timeAssumedRebooted"
            )
        finally:
            kill_tree(proc.pid)  # the run (ansible, its worker and the module) dies while it waits
            proc.wait(60)
        killed_at = time.time()
        assumed = utc(assumed_text)
        assert killed_at < assumed, f"the run was killed after its safe time {assumed_text}, not while it waited"
        # What the killed run left behind, read from the cluster: the resumed run starts from there.
        left_phase = snr_status().get("phase")
        left_pods = sorted(p.metadata.name for p in core.list_namespaced_pod(ns).items)
        assert NO_SCHEDULE in taint_keys(core, node)

        resumed = run_module("remediation", {**auth, "namespace": ns, "settle_timeout": 150}, timeout=300)
        assert not resumed.failed, resumed.result
        [outcome] = resumed.result["remediations"]
        assert outcome["phase_before"] == left_phase
        assert outcome["time_assumed_rebooted"] == assumed_text  # kept, not recomputed
        assert outcome["phase"] == "Fencing-Completed"
        # The killed run died before the safe time, so it cannot have deleted a pod; the resumed run
        # deleted exactly the pods the killed run left.
        assert left_pods == ["p0", "p1"], f"the killed run deleted pods before the safe time: {deletions.seen}"
        assert sorted(outcome["pods_deleted"]) == [f"{ns}/{name}" for name in left_pods]
        kwok.wait_until(lambda: not core.list_namespaced_pod(ns).items, 60, "pods gone")
        kwok.wait_until(
            lambda: {"p0", "p1"} <= set(deletions.deleted()) or deletions.error, 60, "the watch to see both pods go"
        )
    assert deletions.error is None, deletions.error
    assert deletions.deleted() == ["p0", "p1"], f"each pod deleted exactly once: {deletions.seen}"
    assert {(name, uid) for _kind, name, uid, _stamp in deletions.seen} == set(uids.items())
    # The API server stamps a deletion (whole seconds; timeAssumedRebooted is whole seconds, rounded up).
    stamps = [stamp for _kind, _name, _uid, stamp in deletions.seen]
    assert None not in stamps, deletions.seen
    early = [seen for seen in deletions.seen if seen[3] is not None and seen[3] < assumed]
    assert not early, f"deleted before the safe time {assumed_text}: {early}"


def test_node_under_maintenance_is_left_alone(cluster: Any, api: k8s.ApiClient, scene: dict[str, Any]) -> None:
    auth = token_auth(cluster)
    ns, node = scene["namespace"], scene["nodes"][1]
    core, objs = k8s.CoreV1Api(api), k8s.CustomObjectsApi(api)
    nm = {
        "apiVersion": f"{NM_GROUP}/{VERSION}",
        "kind": "NodeMaintenance",
        "metadata": {"name": f"nm-{node}"},
        "spec": {"requestorID": "faults.example.com", "nodeName": node},
    }
    objs.create_namespaced_custom_object(NM_GROUP, VERSION, ns, "nodemaintenances", nm)
    condition = {
        "type": "Ready",
        "status": "False",
        "reason": "Cordon",
        "message": "",
        "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    objs.patch_namespaced_custom_object_status(
        NM_GROUP, VERSION, ns, "nodemaintenances", f"nm-{node}", {"status": {"conditions": [condition]}}
    )
    objs.create_namespaced_custom_object(SNR_GROUP, VERSION, ns, "selfnoderemediations", snr_body(node, ns))

    run = run_module("remediation", {**auth, "namespace": ns})
    assert not run.failed, run.result
    [outcome] = run.result["remediations"]
    assert outcome["code"] == "UnderMaintenance" and outcome["changed"] is False, outcome
    snr = objs.get_namespaced_custom_object(SNR_GROUP, VERSION, ns, "selfnoderemediations", node)
    assert not snr.get("status") and not snr["metadata"].get("finalizers")
    assert NO_SCHEDULE not in taint_keys(core, node)

    objs.delete_namespaced_custom_object(NM_GROUP, VERSION, ns, "nodemaintenances", f"nm-{node}")
    check = run_module("remediation", {**auth, "namespace": ns}, check=True)
    assert check.result["changed"] is True
    assert check.result["remediations"][0]["taints_added"] == [NO_SCHEDULE]
    assert NO_SCHEDULE not in taint_keys(core, node)
    assert not objs.get_namespaced_custom_object(SNR_GROUP, VERSION, ns, "selfnoderemediations", node).get("status")

    fenced = run_module("remediation", {**auth, "namespace": ns})
    assert fenced.result["remediations"][0]["phase"] == "Pre-Reboot-Completed", fenced.result
    assert NO_SCHEDULE in taint_keys(core, node)
