"""Maintenance limits on the real cluster: many requests, a watch-based monitor of the limits, concurrent passes.

The monitor watches Nodes and NodeMaintenances beside the test and checks after every event that the
requests in progress never exceed maxParallelOperations and the nodes unavailable or under maintenance never
exceed maxUnavailable (the nodes unavailable beforehand included).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.maintenance import lifecycle as lc
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.maintenance.scheduler import FINALIZER
from ansible_collections.nodeops.maintenance.plugins.module_utils.engines.maintenance import (
    PassReport,
    ReconcileOptions,
    Reconciler,
)
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.client import Client
from cluster import kwok
from integration.test_crds import run_role
from integration.test_maintenance_reconcile import (
    GROUP,
    NM_PLURAL,
    VERSION,
    config,
    nm,
    reasons,
    reconcile_args,
    token_auth,
)
from kubernetes import client as k8s
from support.ansible_cli import run_module
from support.monitor import Monitor

pytestmark = pytest.mark.integration

IMAGE = "registry.invalid/app:1"


@pytest.fixture(scope="module")
def crds(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> None:
    run_role(cluster, tmp_path_factory.mktemp("acceptance-crds"), {})


def api_client(cluster: Any, pool_size: int = 40) -> Client:
    return Client.from_params(token_auth(cluster), pool_size=pool_size)


@pytest.fixture
def monitor(cluster: Any, namespace: str) -> Iterator[Monitor]:
    watcher = Monitor(api_client(cluster, 4), namespace)
    watcher.start()
    try:
        yield watcher
    finally:
        watcher.stop()


def bare_pod(name: str, node: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"app": "bare"}},
        "spec": {"nodeName": node, "restartPolicy": "Never", "containers": [{"name": "c", "image": IMAGE}]},
    }


def delete_ready(objs: k8s.CustomObjectsApi, namespace: str) -> list[str]:
    """What requestors do once their node is Ready: release it."""
    released = []
    for item in objs.list_namespaced_custom_object(GROUP, VERSION, namespace, NM_PLURAL)["items"]:
        view = lc.NodeMaintenanceView.from_dict(item)
        if view.phase == lc.PHASE_READY and not view.deleting:
            objs.delete_namespaced_custom_object(GROUP, VERSION, namespace, NM_PLURAL, item["metadata"]["name"])
            released.append(item["metadata"]["name"])
    return released


@pytest.fixture
def fleet(crds: None, api: k8s.ApiClient) -> Iterator[list[str]]:
    names = kwok.add_nodes(api, 30, prefix=f"acc-{uuid.uuid4().hex[:4]}")
    try:
        kwok.wait_nodes_ready(api, names, timeout=120)
        yield names
    finally:
        kwok.delete_nodes(api, names, timeout=120)


def test_thirty_nodes_two_requestors_within_the_limits(
    cluster: Any, api: k8s.ApiClient, namespace: str, fleet: list[str]
) -> None:
    core, objs = k8s.CoreV1Api(api), k8s.CustomObjectsApi(api)
    total = len(core.list_node().items)
    limit = total * 20 // 100  # maxUnavailable "20%" rounds down: 6 when the fleet is the whole cluster
    dead, cordoned = fleet[0], fleet[1]
    kwok.stop_heartbeat(api, dead)
    core.patch_node(cordoned, {"spec": {"unschedulable": True}})
    for index, node in enumerate(fleet[1:], 1):  # the dead node has no pods: a dead kubelet never lets one go
        for p in range(2):
            core.create_namespaced_pod(namespace, bare_pod(f"p-{index}-{p}", node))
    kwok.wait_node_ready_status(api, dead, "Unknown", timeout=120)
    config(objs, namespace, {"maxParallelOperations": 5, "maxUnavailable": "20%"})
    for index, node in enumerate(fleet):
        requestor = "a.example.com" if index % 2 else "b.example.com"
        body = nm(f"m-{index:02d}", node, requestor, drainSpec={"force": True, "timeoutSeconds": 120})
        objs.create_namespaced_custom_object(GROUP, VERSION, namespace, NM_PLURAL, body)

    with_monitor = Monitor(api_client(cluster, 4), namespace)
    with_monitor.start()
    released: list[str] = []
    try:
        rounds = 0
        while len(released) < 30:
            rounds += 1
            assert rounds <= 20, f"no progress: released {sorted(released)}"
            run = run_module(
                "maintenance_reconcile",
                reconcile_args(cluster, namespace, until_settled=True, settle_timeout=120),
                timeout=240,
            )
            assert not run.failed, run.result
            assert run.result["settled"], run.result["waiting"]
            released += delete_ready(objs, namespace)
        final = run_module("maintenance_reconcile", reconcile_args(cluster, namespace))
        assert not final.failed, final.result
        kwok.wait_until(
            lambda: not objs.list_namespaced_custom_object(GROUP, VERSION, namespace, NM_PLURAL)["items"] or None,
            30,
            "every request released",
        )
    finally:
        with_monitor.stop()
    assert with_monitor.errors == []
    assert with_monitor.events > 0
    assert with_monitor.max_in_progress <= 5, with_monitor.max_in_progress
    assert with_monitor.max_in_progress == 5  # the slots were used
    assert with_monitor.max_down <= limit, (with_monitor.max_down, limit)
    assert len(with_monitor.ready_seen) == 30
    assert core.read_node(cordoned).spec.unschedulable is True, "the pre-cordoned node stays cordoned"
    for node in fleet:
        if node != cordoned:
            assert not core.read_node(node).spec.unschedulable, node
    for node in fleet[1:]:
        assert core.list_namespaced_pod(namespace, field_selector=f"spec.nodeName={node}").items == []
    expected = ["Pending", "Scheduled", "Cordon", "WaitForPodCompletion", "Draining", "Ready"]
    for index in range(30):
        assert reasons(api, namespace, f"m-{index:02d}") == expected, index


def test_eight_concurrent_passes_over_two_hundred_requests(
    cluster: Any, api: k8s.ApiClient, namespace: str, fleet: list[str], monitor: Monitor
) -> None:
    objs = k8s.CustomObjectsApi(api)
    config(objs, namespace, {"maxParallelOperations": 6, "maxUnavailable": 8})
    for index in range(200):  # several requests per node, from four requestors
        node = fleet[index % len(fleet)]
        body = nm(f"c-{index:03d}", node, f"r{index % 4}.example.com")
        objs.create_namespaced_custom_object(GROUP, VERSION, namespace, NM_PLURAL, body)

    def one_pass(index: int, barrier: threading.Barrier, out: list[PassReport | BaseException]) -> None:
        options = ReconcileOptions(
            namespace=namespace, config_namespace=namespace, lease_wait=120, identity=f"pass-{index}"
        )
        reconciler = Reconciler(api_client(cluster, options.pool_size()), options)
        barrier.wait()
        try:
            out.append(reconciler.run_pass())
        except BaseException as exc:
            out.append(exc)

    rounds = 0
    released: set[str] = set()
    while len(released) < 200:
        rounds += 1
        assert rounds <= 60, f"no progress after {rounds} rounds: {len(released)} released"
        barrier = threading.Barrier(8)
        results: list[PassReport | BaseException] = []
        threads = [threading.Thread(target=one_pass, args=(i, barrier, results)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)
        assert len(results) == 8
        for result in results:
            assert isinstance(result, PassReport), result
            assert not result.busy and result.errors == [], (result.busy, result.errors)
        scheduled = [key for r in results for key in r.scheduled]
        assert len(scheduled) == len(set(scheduled)), "no request is scheduled twice"
        released.update(delete_ready(objs, namespace))
        assert monitor.max_in_progress <= 6 and monitor.max_down <= 8, (
            monitor.max_in_progress,
            monitor.max_down,
        )
    # the last releases
    Reconciler(api_client(cluster), ReconcileOptions(namespace=namespace, config_namespace=namespace)).run_pass()
    leftover = objs.list_namespaced_custom_object(GROUP, VERSION, namespace, NM_PLURAL)["items"]
    assert [o for o in leftover if FINALIZER in (o["metadata"].get("finalizers") or [])] == []
    assert monitor.errors == []
    assert monitor.max_in_progress == 6
    assert monitor.max_down <= 8
