"""nodeops.maintenance.drain end to end: the ansible command, the real API server, kwok running the pods."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from ansible_collections.nodeops.maintenance.plugins.module_utils.engines.drain import (
    DrainError,
    DrainOptions,
    drain,
    pool_size_for,
)
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s import errors
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.client import PODS, Client
from cluster import kwok
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException
from support.ansible_cli import run_module

pytestmark = pytest.mark.integration

IMAGE = "registry.invalid/app:1"


def token_auth(cluster: Any) -> dict[str, Any]:
    return {"host": cluster.server, "api_key": cluster.token, "ca_cert": str(cluster.ca_file)}


@pytest.fixture
def pool(api: k8s.ApiClient) -> Iterator[tuple[str, list[str]]]:
    """Two nodes labelled ``drain-test=<tag>``: the one to drain and a spare one."""
    tag = uuid.uuid4().hex[:6]
    names = kwok.add_nodes(api, 2, prefix=f"drain-{tag}", labels={"drain-test": tag})
    kwok.wait_nodes_ready(api, names, timeout=60)
    yield tag, names
    kwok.delete_nodes(api, names)


def pods_on(core: k8s.CoreV1Api, node: str, namespace: str) -> dict[str, k8s.V1Pod]:
    pods = core.list_namespaced_pod(namespace, field_selector=f"spec.nodeName={node}").items
    return {p.metadata.name: p for p in pods}


def running_on(core: k8s.CoreV1Api, node: str, namespace: str, count: int) -> dict[str, k8s.V1Pod]:
    def check() -> dict[str, k8s.V1Pod] | None:
        pods = pods_on(core, node, namespace)
        running = {n: p for n, p in pods.items() if p.status.phase == "Running" and not p.metadata.deletion_timestamp}
        return running if len(running) >= count else None

    return kwok.wait_until(check, 60, f"{count} pods Running on {node}")


def template(labels: dict[str, str], selector: dict[str, str], emptydir: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {"nodeSelector": selector, "containers": [{"name": "app", "image": IMAGE}]}
    if emptydir:
        spec["volumes"] = [{"name": "scratch", "emptyDir": {}}]
        spec["containers"][0]["volumeMounts"] = [{"name": "scratch", "mountPath": "/scratch"}]
    return {"metadata": {"labels": labels}, "spec": spec}


def deployment(name: str, replicas: int, selector: dict[str, str], emptydir: bool = False) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": template(labels, selector, emptydir),
        },
    }


def unschedulable(api: k8s.ApiClient, name: str) -> bool:
    return bool(k8s.CoreV1Api(api).read_node(name).spec.unschedulable)


class HealthyPods:
    """Watches the pods of a selector and records the fewest healthy at once (Ready, not being deleted), as a
    PodDisruptionBudget counts them; the drain's own times are when it saw each pod go, which kwok may
    report for several pods at once, so the order of evictions shows here, not there."""

    def __init__(self, client: Client, namespace: str, selector: str) -> None:
        listing = client.list(PODS, namespace=namespace, label_selector=selector)
        self.pods = {p["metadata"]["name"]: p for p in listing["items"]}
        self.lowest = self.healthy()
        self.errors: list[BaseException] = []
        self.watch = client.watch(
            PODS,
            namespace=namespace,
            label_selector=selector,
            resource_version=listing["metadata"]["resourceVersion"],
            timeout=600,
        )
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def healthy(self) -> int:
        return sum(1 for pod in self.pods.values() if _healthy(pod))

    def _run(self) -> None:
        try:
            for event in self.watch:
                obj = event["object"]
                if event["type"] == "RELIST":
                    self.pods = {p["metadata"]["name"]: p for p in obj.get("items") or []}
                elif event["type"] == "DELETED":
                    self.pods.pop(obj["metadata"]["name"], None)
                else:
                    self.pods[obj["metadata"]["name"]] = obj
                self.lowest = min(self.lowest, self.healthy())
        except BaseException as exc:  # reported by the test
            self.errors.append(exc)

    def stop(self) -> None:
        self.watch.stop()
        self.thread.join(10)


def _healthy(pod: dict[str, Any]) -> bool:
    if pod["metadata"].get("deletionTimestamp"):
        return False
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def by_name(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in result["pods"]}


def test_drain_follows_the_rules(cluster: Any, api: k8s.ApiClient, pool: tuple[str, list[str]], namespace: str) -> None:
    core, apps = k8s.CoreV1Api(api), k8s.AppsV1Api(api)
    _tag, (node, spare) = pool
    on_node = {"kubernetes.io/hostname": node}
    k8s.CoreV1Api(api).patch_node(spare, {"spec": {"unschedulable": True}})
    apps.create_namespaced_deployment(namespace, deployment("web", 2, on_node))
    apps.create_namespaced_deployment(namespace, deployment("cache", 1, on_node, emptydir=True))
    apps.create_namespaced_stateful_set(
        namespace,
        {
            "metadata": {"name": "db"},
            "spec": {
                "serviceName": "db",
                "replicas": 1,
                "selector": {"matchLabels": {"app": "db"}},
                "template": template({"app": "db"}, on_node),
            },
        },
    )
    apps.create_namespaced_daemon_set(
        namespace,
        {
            "metadata": {"name": "agent"},
            "spec": {"selector": {"matchLabels": {"app": "agent"}}, "template": template({"app": "agent"}, on_node)},
        },
    )
    core.create_namespaced_pod(
        namespace,
        {"metadata": {"name": "bare"}, "spec": {"nodeName": node, "containers": [{"name": "c", "image": IMAGE}]}},
    )
    before = running_on(core, node, namespace, 6)
    auth = token_auth(cluster)

    refused = run_module("drain", {**auth, "name": node})
    assert refused.failed
    msg = refused.result["msg"]
    assert msg.startswith(f"Cannot drain node {node}: ")
    assert f"{namespace}/bare has no controller that would recreate it (set force: true)" in msg
    cache_pod = next(n for n in before if n.startswith("cache-"))
    assert f"{namespace}/{cache_pod} uses emptyDir (set delete_emptydir_data: true" in msg
    assert "web-" not in msg
    assert not unschedulable(api, node), "a rule-blocked drain must leave the node as it was"
    assert set(pods_on(core, node, namespace)) == set(before), "a rule-blocked drain must evict nothing"

    run = run_module("drain", {**auth, "name": node, "force": True, "delete_emptydir_data": True}, diff=True)
    assert not run.failed, run.result
    result = run.result
    assert result["changed"] is True
    assert result["was_cordoned"] is False and result["cordoned"] is True
    assert result["diff"] == {"before": {"unschedulable": False}, "after": {"unschedulable": True}}
    pods = by_name(result)
    agent = next(n for n in before if n.startswith("agent-"))
    assert pods[agent]["action"] == "skipped" and pods[agent]["reason"] == "daemonset"
    for name in before:
        if name != agent:
            assert pods[name]["action"] == "evicted", pods[name]
    assert result["totals"]["evicted"] == 5 and result["totals"]["skipped"] == 1
    assert result["progress"] == {"totalPods": 6, "evictionPods": 5, "drainProgress": 100, "waitForEviction": []}
    assert unschedulable(api, node)
    left = pods_on(core, node, namespace)
    assert set(left) == {agent}, f"only the DaemonSet pod may stay: {sorted(left)}"
    # db-0 was recreated under the same name (new UID) and waits Pending for a schedulable node
    db = core.read_namespaced_pod("db-0", namespace)
    assert db.metadata.uid != before["db-0"].metadata.uid

    again = run_module("drain", {**auth, "name": node, "force": True, "delete_emptydir_data": True})
    assert not again.failed, again.result
    assert again.result["changed"] is False
    assert again.result["totals"]["evicted"] == 0


def spread_setup(
    api: k8s.ApiClient, namespace: str, node: str, spare: str, tag: str, replicas: int, pdb_spec: dict[str, Any]
) -> dict[str, k8s.V1Pod]:
    """A Deployment whose pods all run on ``node`` (the spare is cordoned meanwhile) and a PDB over it."""
    core, apps, policy = k8s.CoreV1Api(api), k8s.AppsV1Api(api), k8s.PolicyV1Api(api)
    core.patch_node(spare, {"spec": {"unschedulable": True}})
    apps.create_namespaced_deployment(namespace, deployment("web", replicas, {"drain-test": tag}))
    pods = running_on(core, node, namespace, replicas)
    body = {"metadata": {"name": "web-pdb"}, "spec": {"selector": {"matchLabels": {"app": "web"}}, **pdb_spec}}
    policy.create_namespaced_pod_disruption_budget(namespace, body)

    def observed() -> bool:
        status = policy.read_namespaced_pod_disruption_budget("web-pdb", namespace).status
        return bool(status and status.observed_generation and status.current_healthy == replicas)

    kwok.wait_until(observed, 60, "the disruption controller to count the PDB's pods")
    core.patch_node(spare, {"spec": {"unschedulable": None}})
    return pods


def test_pdb_max_unavailable_one_is_honoured(
    cluster: Any, api: k8s.ApiClient, pool: tuple[str, list[str]], namespace: str
) -> None:
    tag, (node, spare) = pool
    before = spread_setup(api, namespace, node, spare, tag, 3, {"maxUnavailable": 1})
    watcher = HealthyPods(Client.from_params(token_auth(cluster), pool_size=2), namespace, "app=web")
    try:
        run = run_module("drain", {**token_auth(cluster), "name": node, "timeout_seconds": 120})
    finally:
        watcher.stop()
    assert not run.failed, run.result
    pods = by_name(run.result)
    assert {n: p["action"] for n, p in pods.items()} == dict.fromkeys(before, "evicted")
    # one at a time: a watch never saw fewer than 2 of the 3 pods healthy (evicted ones are not)
    assert watcher.errors == [] and watcher.lowest == 2, (watcher.lowest, watcher.errors)
    assert run.result["pdbs"] == []
    core = k8s.CoreV1Api(api)
    assert pods_on(core, node, namespace) == {}
    running_on(core, spare, namespace, 3)


def test_unsatisfiable_pdb_blocks_until_the_deadline_and_bypass_drains(
    cluster: Any, api: k8s.ApiClient, pool: tuple[str, list[str]], namespace: str
) -> None:
    tag, (node, spare) = pool
    core = k8s.CoreV1Api(api)
    before = spread_setup(api, namespace, node, spare, tag, 2, {"maxUnavailable": 0})
    auth = token_auth(cluster)

    predicted = run_module("drain", {**auth, "name": node}, check=True)
    assert not predicted.failed, predicted.result
    assert predicted.result["changed"] is True
    assert {p["action"] for p in predicted.result["pods"]} == {"blocked"}
    assert all(p["pdbs"] == ["web-pdb"] for p in predicted.result["pods"])
    assert predicted.result["pdbs"] == [f"{namespace}/web-pdb"]
    assert any("web-pdb" in w for w in predicted.result.get("warnings", []))
    assert not unschedulable(api, node), "check mode changes nothing"
    assert set(pods_on(core, node, namespace)) == set(before)

    blocked = run_module("drain", {**auth, "name": node, "timeout_seconds": 4})
    assert blocked.failed
    assert blocked.result["msg"].startswith(f"Drain of node {node} timed out after 4s")
    assert "eviction refused by PodDisruptionBudget web-pdb for " in blocked.result["msg"]
    assert "stays cordoned" in blocked.result["msg"]
    assert blocked.result["pdbs"] == [f"{namespace}/web-pdb"]
    assert blocked.result["totals"]["blocked"] == 2
    assert 4 <= blocked.result["seconds"] < 60  # its own clock: it gave up at its deadline, not before
    assert unschedulable(api, node), "the node stays cordoned after a failed drain"
    assert set(pods_on(core, node, namespace)) == set(before)

    bypass = run_module("drain", {**auth, "name": node, "bypass_pdb_after": 1, "timeout_seconds": 60})
    assert not bypass.failed, bypass.result
    pods = by_name(bypass.result)
    assert {n: (p["action"], p.get("reason")) for n, p in pods.items()} == dict.fromkeys(
        before, ("deleted", "pdb_bypassed")
    )
    assert sum("despite PodDisruptionBudget web-pdb" in w for w in bypass.result["warnings"]) == 2
    assert pods_on(core, node, namespace) == {}


def test_uncordon_on_failure_only_undoes_its_own_cordon(
    cluster: Any, api: k8s.ApiClient, pool: tuple[str, list[str]], namespace: str
) -> None:
    tag, (node, spare) = pool
    spread_setup(api, namespace, node, spare, tag, 1, {"maxUnavailable": 0})
    auth = token_auth(cluster)
    run = run_module("drain", {**auth, "name": node, "timeout_seconds": 1, "uncordon_on_failure": True})
    assert run.failed
    assert "uncordoned again" in run.result["msg"]
    assert not unschedulable(api, node)
    k8s.CoreV1Api(api).patch_node(node, {"spec": {"unschedulable": True}})
    run = run_module("drain", {**auth, "name": node, "timeout_seconds": 1, "uncordon_on_failure": True})
    assert run.failed
    assert run.result["was_cordoned"] is True
    assert unschedulable(api, node), "someone else's cordon is never undone"


def test_terminate_grace_period_zero_and_disable_eviction(
    cluster: Any, api: k8s.ApiClient, pool: tuple[str, list[str]], namespace: str
) -> None:
    tag, (node, spare) = pool
    before = spread_setup(api, namespace, node, spare, tag, 2, {"maxUnavailable": 0})
    run = run_module(
        "drain",
        {
            **token_auth(cluster),
            "name": node,
            "terminate_grace_period": 0,
            "disable_eviction": True,
            "timeout_seconds": 30,
        },
    )
    assert not run.failed, run.result
    assert {n: p["action"] for n, p in by_name(run.result).items()} == dict.fromkeys(before, "deleted")
    assert not run.result.get("warnings"), "disable_eviction is asked for: no bypass warning"


def test_unknown_node_and_bad_filter_fail_clearly(cluster: Any, api: k8s.ApiClient) -> None:
    auth = token_auth(cluster)
    run = run_module("drain", {**auth, "name": "no-such-node"})
    assert run.failed
    assert run.result["msg"].startswith("Node no-such-node not found; nothing was changed")
    bad = run_module("drain", {**auth, "name": "x", "pod_eviction_filters": [{"by_resource_name_regex": "("}]})
    assert bad.failed
    assert "pod_eviction_filters[0].by_resource_name_regex '(' is not a valid regular expression" in bad.result["msg"]


def test_wait_for_pod_completion_times_out_and_goes_on(
    cluster: Any, api: k8s.ApiClient, pool: tuple[str, list[str]], namespace: str
) -> None:
    _tag, (node, _spare) = pool
    core = k8s.CoreV1Api(api)
    for name, labels in (("batch-1", {"class": "batch"}), ("other", {})):
        core.create_namespaced_pod(
            namespace,
            {
                "metadata": {"name": name, "labels": labels},
                "spec": {"nodeName": node, "containers": [{"name": "c", "image": IMAGE}]},
            },
        )
    running_on(core, node, namespace, 2)
    run = run_module(
        "drain",
        {
            **token_auth(cluster),
            "name": node,
            "force": True,
            "wait_for_pod_completion": {"pod_selector": "class=batch", "timeout_seconds": 2},
        },
    )
    assert not run.failed, run.result
    assert run.result["seconds"] >= 2  # its own clock: it waited the whole wait_for_pod_completion timeout
    assert run.result["wait_for_completion"] == [f"{namespace}/batch-1"]
    assert any("wait_for_pod_completion timed out after 2s" in w for w in run.result["warnings"])
    assert {p["action"] for p in run.result["pods"]} == {"evicted"}
    with pytest.raises(ApiException) as gone:
        core.read_namespaced_pod("batch-1", namespace)
    assert gone.value.status == 404


def bare_pod(name: str, node: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": IMAGE}]},
    }


def replace_pod(core: k8s.CoreV1Api, namespace: str, name: str, node: str, labels: dict[str, str]) -> str:
    """Delete the pod ``name`` at once and create a new pod of that name on ``node`` (as a StatefulSet re-creates
    db-0 elsewhere); returns the new pod's UID."""
    core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)

    def gone() -> bool:
        try:
            core.read_namespaced_pod(name, namespace)
        except ApiException as exc:
            if exc.status == 404:
                return True
            raise
        return False

    kwok.wait_until(gone, 60, f"pod {name} to be gone")
    return str(core.create_namespaced_pod(namespace, bare_pod(name, node, labels)).metadata.uid)


def untouched(core: k8s.CoreV1Api, namespace: str, name: str, uid: str) -> None:
    pod = core.read_namespaced_pod(name, namespace)
    assert pod.metadata.uid == uid, "the new pod is gone"
    assert pod.metadata.deletion_timestamp is None, "the new pod was evicted or deleted"
    assert not any(c.type == "DisruptionTarget" for c in pod.status.conditions or ()), "an eviction reached it"


def pdb_counts(api: k8s.ApiClient, namespace: str, healthy: dict[str, int]) -> None:
    policy = k8s.PolicyV1Api(api)

    def observed() -> bool:
        for name, count in healthy.items():
            status = policy.read_namespaced_pod_disruption_budget(name, namespace).status
            if not (status and status.observed_generation and status.current_healthy == count):
                return False
        return True

    kwok.wait_until(observed, 60, "the disruption controller to count the PDBs' pods")


def test_the_api_server_refuses_an_eviction_or_deletion_of_a_replaced_pod(
    cluster: Any, api: k8s.ApiClient, pool: tuple[str, list[str]], namespace: str
) -> None:
    core = k8s.CoreV1Api(api)
    _tag, (node, spare) = pool
    client = Client.from_params(token_auth(cluster))
    core.create_namespaced_pod(namespace, bare_pod("db-0", node, {"app": "db"}))
    old = running_on(core, node, namespace, 1)["db-0"].metadata.uid
    new = replace_pod(core, namespace, "db-0", spare, {"app": "db"})
    for call in (client.evict, client.delete_pod):
        # a UID mismatch; or, from an API server whose cache has not seen the new pod yet (a busy machine: CI saw
        # it), NotFound: the call is refused either way, and the new pod is untouched
        with pytest.raises(errors.OBJECT_GONE) as replaced:
            call("db-0", namespace, uid=old, grace_period=0)
        assert isinstance(replaced.value, errors.UIDMismatch) or "not found" in replaced.value.msg
        untouched(core, namespace, "db-0", new)
        with pytest.raises(errors.NotFound):
            call("db-1", namespace, uid=old)
    client.delete_pod("db-0", namespace, uid=new, grace_period=0)  # the right UID: deleted

    def deleted() -> bool:
        return "db-0" not in pods_on(core, spare, namespace)

    kwok.wait_until(deleted, 60, "the new db-0 to be deleted with its own UID")


def test_a_pod_recreated_on_another_node_while_its_eviction_is_retried_stays_untouched(
    cluster: Any, api: k8s.ApiClient, pool: tuple[str, list[str]], namespace: str
) -> None:
    """db-0's eviction is refused by its PDB; while the worker waits to retry, db-0 is deleted and re-created
    under the same name on the spare node, outside any PDB (an eviction by name would now succeed). web-0,
    blocked by its own PDB, keeps the drain going until its deadline."""
    core, policy = k8s.CoreV1Api(api), k8s.PolicyV1Api(api)
    _tag, (node, spare) = pool
    for name, app in (("db-0", "db"), ("web-0", "web")):
        core.create_namespaced_pod(namespace, bare_pod(name, node, {"app": app}))
        body = {
            "metadata": {"name": f"{app}-pdb"},
            "spec": {"selector": {"matchLabels": {"app": app}}, "maxUnavailable": 0},
        }
        policy.create_namespaced_pod_disruption_budget(namespace, body)
    running_on(core, node, namespace, 2)
    pdb_counts(api, namespace, {"db-pdb": 1, "web-pdb": 1})
    planned = core.read_namespaced_pod("db-0", namespace).metadata.uid

    client = Client.from_params(token_auth(cluster), pool_size=pool_size_for(4))
    calls: list[tuple[str, str, str | None]] = []  # (verb, pod, uid) sent for db-0 once it was replaced
    replacement: list[str] = []
    evict, delete_pod = client.evict, client.delete_pod

    def evict_then_replace(name: str, namespace_: str, *args: Any, **kw: Any) -> dict[str, Any]:
        if replacement and name == "db-0":
            calls.append(("evict", name, kw.get("uid")))
        try:
            return evict(name, namespace_, *args, **kw)
        except errors.TooManyRequests:
            if name == "db-0" and not replacement:  # the drain decided on db-0 and was refused: replace it now
                replacement.append(replace_pod(core, namespace, "db-0", spare, {"app": "db-new"}))
            raise

    def record_delete(name: str, namespace_: str, *args: Any, **kw: Any) -> dict[str, Any]:
        if replacement and name == "db-0":
            calls.append(("delete", name, kw.get("uid")))
        return delete_pod(name, namespace_, *args, **kw)

    client.evict = evict_then_replace  # type: ignore[method-assign]
    client.delete_pod = record_delete  # type: ignore[method-assign]
    with pytest.raises(DrainError) as err:
        drain(client, node, DrainOptions(force=True, timeout=10, concurrency=4))
    assert replacement, "db-0's eviction was never refused"
    untouched(core, namespace, "db-0", replacement[0])
    assert calls == [], f"calls for db-0 after it was replaced: {calls}"
    pods = by_name(err.value.result)
    assert (pods["db-0"]["action"], pods["web-0"]["action"]) == ("gone", "blocked"), pods
    assert planned != replacement[0]
