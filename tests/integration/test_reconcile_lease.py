"""A reconcile pass that loses its Lease writes nothing more, against the real API server.

Pass A drains a node whose only pod a PodDisruptionBudget protects, so A sits in its drain holding the
Lease. A is then paused (SIGSTOP of its whole process tree) until its Lease has run out by the Lease's own
renewTime; pass B takes the Lease over and finishes the work. When A is resumed, a watch sees no write of
A to the NodeMaintenances or the Nodes, and A says that it stopped writing. A watch monitor checks
maxParallelOperations during the whole test.
"""

from __future__ import annotations

import datetime
import json
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from cluster import kwok
from integration.test_maintenance_acceptance import api_client
from integration.test_maintenance_reconcile import GROUP, NM_PLURAL, VERSION, config, crds, get_nm, nm, phase
from integration.test_node_health import token_auth
from kubernetes import client as k8s
from support.ansible_cli import BIN, clean_env
from support.monitor import Monitor
from support.processes import continue_tree, kill_tree, stop_tree

pytestmark = pytest.mark.integration
__all__ = ["crds"]

LEASE = "nodeops-maintenance-reconcile"
LEASE_SECONDS = 6


@pytest.fixture
def two_nodes(crds: None, api: k8s.ApiClient) -> Iterator[list[str]]:
    names = kwok.add_nodes(api, 2, prefix=f"lease-{uuid.uuid4().hex[:4]}")
    try:
        kwok.wait_nodes_ready(api, names, timeout=120)
        yield names
    finally:
        kwok.delete_nodes(api, names)


def start_pass(cluster: Any, namespace: str, *, timeout: float) -> subprocess.Popen[str]:
    args = {
        **token_auth(cluster),
        "namespace": namespace,
        "config_namespace": namespace,
        "until_settled": True,
        "settle_timeout": timeout,
        "lease_duration": LEASE_SECONDS,
        "lease_wait": 120,
        "step_timeout": 300,
    }
    cmd = [str(BIN / "ansible"), "localhost", "-c", "local", "-i", "localhost,"]
    cmd += ["-m", "nodeops.maintenance.maintenance_reconcile", "-a", json.dumps(args)]
    return subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env(), start_new_session=True
    )


def result_of(proc: subprocess.Popen[str], timeout: float) -> tuple[int, dict[str, Any], str]:
    out, err = proc.communicate(timeout=timeout)
    start = out.find("{")
    parsed = json.loads(out[start:]) if start >= 0 else {}
    return proc.returncode, parsed, out + err


def lease_expired(coordination: k8s.CoordinationV1Api, namespace: str) -> bool:
    """Whether the Lease's own renewTime + duration has passed (by the API server's clock via a fresh write)."""
    lease = coordination.read_namespaced_lease(LEASE, namespace)
    renewed = lease.spec.renew_time or lease.spec.acquire_time
    now = datetime.datetime.now(datetime.UTC)
    return renewed is not None and now > renewed + datetime.timedelta(seconds=lease.spec.lease_duration_seconds + 1)


def test_a_paused_pass_writes_nothing_after_its_lease_ran_out(
    cluster: Any, api: k8s.ApiClient, namespace: str, two_nodes: list[str]
) -> None:
    core, policy, objs = k8s.CoreV1Api(api), k8s.PolicyV1Api(api), k8s.CustomObjectsApi(api)
    coordination = k8s.CoordinationV1Api(api)
    n0, n1 = two_nodes
    config(objs, namespace, {"maxParallelOperations": 1})
    labels = {"app": "db"}
    core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": "db-0", "labels": labels},
            "spec": {"nodeName": n0, "containers": [{"name": "c", "image": "registry.invalid/db:1"}]},
        },
    )
    policy.create_namespaced_pod_disruption_budget(
        namespace, {"metadata": {"name": "db"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": labels}}}
    )
    kwok.wait_until(
        lambda: core.read_namespaced_pod("db-0", namespace).status.phase == "Running" or None, 60, "db-0 Running"
    )
    for name, node in (("a", n0), ("b", n1)):
        objs.create_namespaced_custom_object(
            GROUP, VERSION, namespace, NM_PLURAL, nm(name, node, drainSpec={"force": True, "timeoutSeconds": 0})
        )
    monitor = Monitor(api_client(cluster, 4), namespace)
    monitor.start()
    first = start_pass(cluster, namespace, timeout=600)
    paused: set[int] = set()
    try:
        kwok.wait_until(lambda: phase(get_nm(objs, namespace, "a")) == "Draining" or None, 120, "a Draining")
        paused = stop_tree(first.pid)
        kwok.wait_until(lambda: lease_expired(coordination, namespace) or None, 120, "the Lease running out")
        # the budget goes; the second pass takes the Lease over and finishes what the first began
        policy.delete_namespaced_pod_disruption_budget("db", namespace)
        second = start_pass(cluster, namespace, timeout=120)
        rc, _result, output = result_of(second, 600)
        assert rc == 0, output[-4000:]
        assert phase(get_nm(objs, namespace, "a")) == "Ready", output[-6000:]
        assert phase(get_nm(objs, namespace, "b")) == "Pending"  # one slot, held by a (Ready)
        cut = int(core.list_namespaced_pod(namespace).metadata.resource_version)
        nodes_at_cut = {n: core.read_node(n) for n in two_nodes}
        continue_tree(paused)
        paused = set()
        rc, _result, output = result_of(first, 600)
    finally:
        if paused:
            continue_tree(paused)
        if first.poll() is None:
            kill_tree(first.pid)
            first.wait(60)
        monitor.stop()
    assert monitor.errors == []
    # nothing of the resumed pass reached a NodeMaintenance or a Node
    written = [h for h in monitor.history if h[0] == NM_PLURAL and h[3] > cut]
    assert written == [], written
    for name, before in nodes_at_cut.items():
        after = core.read_node(name)
        assert (after.spec.unschedulable, after.metadata.annotations) == (
            before.spec.unschedulable,
            before.metadata.annotations,
        )
    assert rc == 0, output[-4000:]
    assert "stopped writing" in output
    assert monitor.max_in_progress == 1
