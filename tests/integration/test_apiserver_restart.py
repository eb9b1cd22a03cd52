"""kube-apiserver killed (SIGKILL) and started again 5 s later, in the middle of the work, against the real
control plane: a 100-pod drain held back by a PodDisruptionBudget, and a reconcile run until settled.

Both run as the ``ansible`` command in a subprocess. The drain must finish within its timeout and report each
of its pods evicted exactly once, nothing failed; the reconcile must settle with every request where the
limits put it, name among ``recovered`` only what the outage caused, and give its Lease back. Each is run
three times.

The tests restart the control plane of their pytest worker; before a test ends (passed or not) every
component answers its health check again and every kwok node is Ready, its Lease renewed since the restart,
for the tests that come after it on the same worker.
"""

from __future__ import annotations

import datetime
import json
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from cluster import kwok
from cluster.launcher import NODE_MONITOR_GRACE_SECONDS, START_ORDER, Cluster
from integration.test_maintenance_reconcile import GROUP, NM_PLURAL, VERSION, config, crds, get_nm, nm, phase
from kubernetes import client as k8s
from support.ansible_cli import BIN, clean_env
from support.processes import kill_tree

pytestmark = pytest.mark.integration
__all__ = ["crds"]

APISERVER = "kube-apiserver"
# How long kube-apiserver stays down: the fault injected, not a wait for anything.
DOWN_SECONDS = 5.0
RUNS = range(3)
IMAGE = "registry.invalid/app:1"
LEASE = "nodeops-maintenance-reconcile"
# kube-controller-manager's --node-monitor-period (launcher.py): how often it looks at the node Leases.
NODE_MONITOR_PERIOD = 2.0
# What the client layer raises, and reconcile_until_settled gets past, while the API server is down or starting.
OUTAGE_REASONS = {"unreachable", "too_many_requests", "error"}


def token_auth(cluster: Cluster) -> dict[str, Any]:
    return {"host": cluster.server, "api_key": cluster.token, "ca_cert": str(cluster.ca_file)}


# --------------------------------------------------------------------------- the fault and the recovery


class Outage:
    """Kills kube-apiserver and starts it again; ``recover`` brings the whole control plane back to ready."""

    def __init__(self, cluster: Cluster, api: k8s.ApiClient) -> None:
        self.cluster = cluster
        self.api = api
        self.killed_at: float | None = None  # time.monotonic() of the kill
        self.back_at: datetime.datetime | None = None  # wall time when /readyz answered again
        self.restart_seconds: float | None = None  # from the restart to /readyz

    def inject(self) -> None:
        """SIGKILL kube-apiserver, leave it down DOWN_SECONDS, start it again and wait for its /readyz."""
        self.cluster.kill(APISERVER)
        self.killed_at = time.monotonic()
        # The fault itself: the API server is away this long. Nothing is awaited here.
        threading.Event().wait(DOWN_SECONDS)
        self.cluster.restart(APISERVER, timeout=180)
        self.back_at = datetime.datetime.now(datetime.UTC)
        self.restart_seconds = self.cluster.timings.get(f"{APISERVER} /readyz restart")

    def recover(self) -> None:
        """Every component healthy again and every kwok node Ready, untainted, with its Lease renewed since the
        restart, once the node-lifecycle controller can no longer hold the outage against a node."""
        if not self.cluster.status().get(APISERVER):
            self.cluster.restart(APISERVER, timeout=180)
            self.back_at = datetime.datetime.now(datetime.UTC)
        for name in START_ORDER:
            kwok.wait_until(lambda name=name: self.cluster.healthy(name), 180, f"{name} healthy again")
        if self.killed_at is None:
            return
        core, coordination = k8s.CoreV1Api(self.api), k8s.CoordinationV1Api(self.api)
        # The node-lifecycle controller marks a node Ready=Unknown when it has seen no Lease renewal for the
        # grace period; renewals it missed during the outage can make it do so up to that long after the kill
        # (one monitor period later), and kwok then makes the node Ready again. So the nodes count as ready only
        # once that time is past.
        settled_after = self.killed_at + NODE_MONITOR_GRACE_SECONDS + 2 * NODE_MONITOR_PERIOD
        back = self.back_at

        def ready() -> bool:
            if time.monotonic() < settled_after:
                return False
            for node in core.list_node().items:
                if (node.metadata.annotations or {}).get(kwok.MANAGED_ANNOTATION) != kwok.MANAGED_VALUE:
                    continue
                if not kwok.schedulable_ready(node):
                    return False
                lease = coordination.read_namespaced_lease(node.metadata.name, kwok.LEASE_NAMESPACE)
                if back is None or lease.spec.renew_time is None or lease.spec.renew_time < back:
                    return False
            return True

        kwok.wait_until(ready, 180, "every kwok node Ready, untainted, its Lease renewed since the restart")


@pytest.fixture
def outage(cluster: Cluster, api: k8s.ApiClient) -> Iterator[Outage]:
    fault = Outage(cluster, api)
    try:
        yield fault
    finally:
        fault.recover()


# --------------------------------------------------------------------------- running a module


def start_module(module: str, args: dict[str, Any]) -> subprocess.Popen[str]:
    """``ansible localhost -m nodeops.maintenance.<module>`` in the background, in a session of its own."""
    cmd = [str(BIN / "ansible"), "localhost", "-c", "local", "-i", "localhost,"]
    cmd += ["-m", f"nodeops.maintenance.{module}", "-a", json.dumps(args)]
    return subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env(), start_new_session=True
    )


def result_of(proc: subprocess.Popen[str], timeout: float) -> tuple[int, dict[str, Any], str]:
    """(exit code, the module's result, the output) once the command has ended."""
    out, err = proc.communicate(timeout=timeout)
    line = next((line for line in out.splitlines() if line.startswith("{")), "")
    try:
        result = json.loads(line)["result"]
    except (ValueError, KeyError) as exc:
        raise AssertionError(f"no JSON result: rc={proc.returncode}\nstdout:\n{out}\nstderr:\n{err}") from exc
    return proc.returncode, result, out + err


def still_running(proc: subprocess.Popen[str], what: str) -> None:
    if proc.poll() is not None:
        out, err = proc.communicate()
        raise AssertionError(f"{what} ended (rc={proc.returncode}) before the fault was injected:\n{out}\n{err}")


# --------------------------------------------------------------------------- the drain

REPLICAS = 100
MAX_UNAVAILABLE = 10
DRAIN_TIMEOUT = 180


@pytest.fixture
def drain_pool(api: k8s.ApiClient) -> Iterator[tuple[str, str, str]]:
    """(tag, node to drain, spare node), both labelled ``restart-test=<tag>``."""
    tag = uuid.uuid4().hex[:6]
    names = kwok.add_nodes(api, 2, prefix=f"restart-{tag}", labels={"restart-test": tag})
    try:
        kwok.wait_nodes_ready(api, names, timeout=120)
        yield tag, names[0], names[1]
    finally:
        kwok.delete_nodes(api, names)


def live_pods(core: k8s.CoreV1Api, namespace: str, node: str) -> dict[str, k8s.V1Pod]:
    """The pods on ``node`` that are not terminating, by UID."""
    pods = core.list_namespaced_pod(namespace, field_selector=f"spec.nodeName={node}").items
    return {p.metadata.uid: p for p in pods if p.metadata.deletion_timestamp is None}


def web_on_one_node(api: k8s.ApiClient, namespace: str, tag: str, node: str, spare: str) -> dict[str, str]:
    """REPLICAS pods of Deployment web Running on ``node`` (the spare cordoned meanwhile), a PodDisruptionBudget
    allowing MAX_UNAVAILABLE of them to be away, counted by the disruption controller; the spare schedulable
    again. Returns the pods' names by UID."""
    core, apps, policy = k8s.CoreV1Api(api), k8s.AppsV1Api(api), k8s.PolicyV1Api(api)
    labels = {"app": "web"}
    core.patch_node(spare, {"spec": {"unschedulable": True}})
    apps.create_namespaced_deployment(
        namespace,
        {
            "metadata": {"name": "web"},
            "spec": {
                "replicas": REPLICAS,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"nodeSelector": {"restart-test": tag}, "containers": [{"name": "app", "image": IMAGE}]},
                },
            },
        },
    )

    def all_running() -> dict[str, k8s.V1Pod] | None:
        pods = live_pods(core, namespace, node)
        running = {uid: p for uid, p in pods.items() if p.status.phase == "Running"}
        return running if len(running) == REPLICAS else None

    pods = kwok.wait_until(all_running, 240, f"{REPLICAS} pods of web Running on {node}")
    body = {
        "metadata": {"name": "web"},
        "spec": {"selector": {"matchLabels": labels}, "maxUnavailable": MAX_UNAVAILABLE},
    }
    policy.create_namespaced_pod_disruption_budget(namespace, body)

    def counted() -> bool:
        status = policy.read_namespaced_pod_disruption_budget("web", namespace).status
        return bool(
            status
            and status.observed_generation
            and status.current_healthy == REPLICAS
            and status.disruptions_allowed == MAX_UNAVAILABLE
        )

    kwok.wait_until(counted, 120, "the disruption controller to count web's pods")
    core.patch_node(spare, {"spec": {"unschedulable": None}})
    return {uid: p.metadata.name for uid, p in pods.items()}


@pytest.mark.parametrize("run", RUNS)
def test_a_drain_rides_out_an_apiserver_restart(
    run: int,
    cluster: Cluster,
    api: k8s.ApiClient,
    namespace: str,
    drain_pool: tuple[str, str, str],
    outage: Outage,
) -> None:
    core = k8s.CoreV1Api(api)
    tag, node, spare = drain_pool
    before = web_on_one_node(api, namespace, tag, node, spare)
    proc = start_module("drain", {**token_auth(cluster), "name": node, "timeout_seconds": DRAIN_TIMEOUT})
    try:

        def evicting() -> bool:
            still_running(proc, "the drain")
            left = set(before) & set(live_pods(core, namespace, node))
            assert left, "the drain evicted every pod before the fault could be injected"
            return len(left) < len(before)

        kwok.wait_until(evicting, 180, "the drain's first evictions", interval=0.2)
        outage.inject()
        rc, result, output = result_of(proc, DRAIN_TIMEOUT + 120)
    finally:
        if proc.poll() is None:
            kill_tree(proc.pid)
            proc.wait(60)

    assert rc == 0 and not result.get("failed"), f"{result.get('msg')}\n{output[-4000:]}"
    # every pod of the node is reported once, evicted; none failed, none left behind
    names = [p["name"] for p in result["pods"]]
    assert sorted(names) == sorted(before.values()), "each pod of the node is reported exactly once"
    actions = {p["name"]: p["action"] for p in result["pods"]}
    assert actions == dict.fromkeys(before.values(), "evicted"), {n: a for n, a in actions.items() if a != "evicted"}
    assert result["totals"]["evicted"] == REPLICAS
    assert sum(result["totals"].values()) == REPLICAS and result["totals"]["failed"] == 0
    assert result["progress"] == {
        "totalPods": REPLICAS,
        "evictionPods": REPLICAS,
        "drainProgress": 100,
        "waitForEviction": [],
    }
    assert result["pdbs"] == []
    assert result["cordoned"] is True and result["changed"] is True
    # its own clock: it finished within its timeout
    assert 0 < result["seconds"] <= DRAIN_TIMEOUT, result["seconds"]
    assert all(p["seconds"] <= result["seconds"] for p in result["pods"])
    # by UID: no pod of the plan is left anywhere; their replacements run on the spare node
    pods = core.list_namespaced_pod(namespace).items
    assert {p.metadata.uid for p in pods} & set(before) == set()
    assert [p.metadata.name for p in pods if p.spec.node_name == node] == []

    def replaced() -> bool:
        running = [p for p in live_pods(core, namespace, spare).values() if p.status.phase == "Running"]
        return len(running) == REPLICAS

    kwok.wait_until(replaced, 180, f"{REPLICAS} replacements Running on {spare}")
    print(
        f"run {run}: drain of {REPLICAS} pods took {result['seconds']}s (timeout {DRAIN_TIMEOUT}s); "
        f"down {DOWN_SECONDS}s + {outage.restart_seconds}s to /readyz; warnings: {result.get('warnings')}"
    )


# --------------------------------------------------------------------------- the reconcile

PODS_PER_NODE = 8
RECONCILE_TIMEOUT = 180
MAX_PARALLEL = 2


@pytest.fixture
def maintenance_pool(crds: None, api: k8s.ApiClient) -> Iterator[tuple[str, list[str]]]:
    """(tag, four kwok nodes labelled ``restart-test=<tag>``): three to maintain and a spare one."""
    tag = uuid.uuid4().hex[:6]
    names = kwok.add_nodes(api, 4, prefix=f"restart-nm-{tag}", labels={"restart-test": tag})
    try:
        kwok.wait_nodes_ready(api, names, timeout=120)
        yield tag, names
    finally:
        kwok.delete_nodes(api, names)


def apps_on_their_nodes(
    api: k8s.ApiClient, namespace: str, tag: str, pool: list[str], nodes: list[str]
) -> dict[str, set[str]]:
    """For each of ``nodes`` a Deployment of PODS_PER_NODE pods Running on it (made while the other nodes of the
    pool are cordoned) and a PodDisruptionBudget letting one of them be away at a time. Returns the pods' UIDs
    by node."""
    core, apps, policy = k8s.CoreV1Api(api), k8s.AppsV1Api(api), k8s.PolicyV1Api(api)
    placed: dict[str, set[str]] = {}
    for index, node in enumerate(nodes):
        others = [n for n in pool if n != node]
        for other in others:
            core.patch_node(other, {"spec": {"unschedulable": True}})
        app = f"app-{index}"
        labels = {"app": app}
        apps.create_namespaced_deployment(
            namespace,
            {
                "metadata": {"name": app},
                "spec": {
                    "replicas": PODS_PER_NODE,
                    "selector": {"matchLabels": labels},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {
                            "nodeSelector": {"restart-test": tag},
                            "containers": [{"name": "app", "image": IMAGE}],
                        },
                    },
                },
            },
        )

        def running(node: str = node, app: str = app) -> set[str] | None:
            pods = live_pods(core, namespace, node).values()
            uids = {p.metadata.uid for p in pods if p.status.phase == "Running" and p.metadata.labels["app"] == app}
            return uids if len(uids) == PODS_PER_NODE else None

        placed[node] = kwok.wait_until(running, 120, f"{PODS_PER_NODE} pods of {app} Running on {node}")
        for other in others:
            core.patch_node(other, {"spec": {"unschedulable": None}})
        policy.create_namespaced_pod_disruption_budget(
            namespace, {"metadata": {"name": app}, "spec": {"selector": {"matchLabels": labels}, "maxUnavailable": 1}}
        )

    def counted() -> bool:
        for index in range(len(nodes)):
            status = policy.read_namespaced_pod_disruption_budget(f"app-{index}", namespace).status
            if not (status and status.observed_generation and status.current_healthy == PODS_PER_NODE):
                return False
        return True

    kwok.wait_until(counted, 120, "the disruption controller to count the pods")
    return placed


def outage_error(error: dict[str, Any]) -> bool:
    """An error a pass met because the API server was away or starting: no connection, or its 5xx/429."""
    if error.get("reason") not in OUTAGE_REASONS:
        return False
    if error["reason"] == "unreachable":
        return "Cannot reach the Kubernetes API" in error["error"]
    if error["reason"] == "error":
        return " failed with HTTP 5" in error["error"]
    return True


@pytest.mark.parametrize("run", RUNS)
def test_a_reconcile_until_settled_rides_out_an_apiserver_restart(
    run: int,
    cluster: Cluster,
    api: k8s.ApiClient,
    namespace: str,
    maintenance_pool: tuple[str, list[str]],
    outage: Outage,
) -> None:
    core, objs = k8s.CoreV1Api(api), k8s.CustomObjectsApi(api)
    coordination = k8s.CoordinationV1Api(api)
    tag, nodes = maintenance_pool
    maintained = nodes[:3]
    placed = apps_on_their_nodes(api, namespace, tag, nodes, maintained)
    config(objs, namespace, {"maxParallelOperations": MAX_PARALLEL})
    requests = {f"m{index}": node for index, node in enumerate(maintained)}
    for name, node in requests.items():
        objs.create_namespaced_custom_object(GROUP, VERSION, namespace, NM_PLURAL, nm(name, node, drainSpec={}))
    args = {
        **token_auth(cluster),
        "namespace": namespace,
        "config_namespace": namespace,
        "until_settled": True,
        "settle_timeout": RECONCILE_TIMEOUT,
    }
    proc = start_module("maintenance_reconcile", args)
    try:

        def draining() -> bool:
            still_running(proc, "the reconcile")
            for name, node in requests.items():
                if phase(get_nm(objs, namespace, name)) == "Draining":
                    left = placed[node] & set(live_pods(core, namespace, node))
                    if 0 < len(left) < PODS_PER_NODE:  # its drain is under way
                        return True
            return False

        kwok.wait_until(draining, 180, "a drain under way", interval=0.2)
        outage.inject()
        rc, result, output = result_of(proc, RECONCILE_TIMEOUT + 120)
    finally:
        if proc.poll() is None:
            kill_tree(proc.pid)
            proc.wait(60)

    assert rc == 0 and not result.get("failed"), f"{result.get('msg')}\n{output[-4000:]}"
    assert result["settled"] is True and result["errors"] == [], output[-6000:]
    assert result["busy"] is False and result["lease_lost"] is False
    # maxParallelOperations 2: two requests went all the way, the third is held back by the limit
    phases = {name: phase(get_nm(objs, namespace, name)) for name in requests}
    assert sorted(phases.values()) == ["Pending", "Ready", "Ready"], phases
    waiting = {w["name"]: w for w in result["waiting"]}
    pods = {p.metadata.uid for p in core.list_namespaced_pod(namespace).items}
    for name, node in requests.items():
        if phases[name] == "Ready":
            assert placed[node] & pods == set(), f"{name}: pods of {node} left"
            assert core.read_node(node).spec.unschedulable is True
        else:
            assert waiting[f"{namespace}/{name}"]["reason"] == "no_slot", waiting
            assert placed[node] <= set(live_pods(core, namespace, node)), "a Pending request's pods stay"
    # what earlier passes could not do is only what the outage caused; the last pass got past it
    assert all(outage_error(error) for error in result["recovered"]), result["recovered"]
    assert {e["name"] for e in result["recovered"]} <= {""} | {f"{namespace}/{name}" for name in requests}
    # the Lease is given back
    lease = coordination.read_namespaced_lease(LEASE, namespace)
    assert not lease.spec.holder_identity, lease.spec
    print(
        f"run {run}: reconcile settled after {result['passes']} passes; down {DOWN_SECONDS}s + "
        f"{outage.restart_seconds}s to /readyz; "
        f"recovered: {[(e['name'], e['reason'], e['error'][:120]) for e in result['recovered']]}"
    )
    # status.drain of a Ready request: the attempt's numbers (the CRD: totalPods are the pods bound to the node
    # when the attempt started), its own pods and any replacement of the other drain's pods that came before
    # its cordon; all of them gone
    for name in requests:
        if phases[name] == "Ready":
            obj = get_nm(objs, namespace, name)
            assert obj is not None
            drain = obj["status"]["drain"]
            assert drain["drainProgress"] == 100 and drain["waitForEviction"] == [], drain
            assert drain["totalPods"] == drain["evictionPods"] >= PODS_PER_NODE, (name, drain)
