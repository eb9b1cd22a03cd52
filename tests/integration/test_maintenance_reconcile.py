"""nodeops.maintenance.maintenance_reconcile end to end: the ansible command, the real API server, kwok pods.

A request goes Pending -> Scheduled -> Cordon -> WaitForPodCompletion -> Draining -> Ready with its node's
pods really evicted, ConditionChanged events for every step, and its deletion uncordons the node (only when
the request cordoned it) and removes the finalizer. Passes take turns through the Lease.
"""

from __future__ import annotations

import datetime
import json
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from ansible_collections.nodeops.maintenance.plugins.module_utils.engines.maintenance import (
    ReconcileOptions,
    Reconciler,
)
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.client import NODES, Client, Resource
from cluster import kwok
from integration.test_crds import run_role
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException
from support.ansible_cli import BIN, clean_env, run_module
from support.engines import Engine

pytestmark = pytest.mark.integration

GROUP = "maintenance.nvidia.com"
VERSION = "v1alpha1"
NM_PLURAL = "nodemaintenances"
IMAGE = "registry.invalid/app:1"
FINALIZER = "maintenance.nvidia.com/finalizer"
INITIAL = "maintenance.nvidia.com/node-initial-state.unschedulable"
CORDONED_BY = "maintenance.nodeops.io/cordoned-by"


@pytest.fixture(scope="module")
def crds(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> None:
    run_role(cluster, tmp_path_factory.mktemp("reconcile-crds"), {})


def token_auth(cluster: Any) -> dict[str, Any]:
    return {"host": cluster.server, "api_key": cluster.token, "ca_cert": str(cluster.ca_file)}


def reconcile_args(cluster: Any, namespace: str, **extra: Any) -> dict[str, Any]:
    return {**token_auth(cluster), "namespace": namespace, "config_namespace": namespace, **extra}


def nm(name: str, node: str, requestor: str = "a.example.com", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "NodeMaintenance",
        "metadata": {"name": name},
        "spec": {"requestorID": requestor, "nodeName": node, **spec},
    }


def config(objs: k8s.CustomObjectsApi, namespace: str, spec: dict[str, Any]) -> None:
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "MaintenanceOperatorConfig",
        "metadata": {"name": "default"},
        "spec": spec,
    }
    objs.create_namespaced_custom_object(GROUP, VERSION, namespace, "maintenanceoperatorconfigs", body)


def get_nm(objs: k8s.CustomObjectsApi, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        return objs.get_namespaced_custom_object(GROUP, VERSION, namespace, NM_PLURAL, name)
    except ApiException as err:
        if err.status == 404:
            return None
        raise


def phase(obj: dict[str, Any] | None) -> str | None:
    if obj is None:
        return None
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition["type"] == "Ready":
            return str(condition["reason"])
    return ""


def unschedulable(api: k8s.ApiClient, name: str) -> bool:
    return bool(k8s.CoreV1Api(api).read_node(name).spec.unschedulable)


def reasons(api: k8s.ApiClient, namespace: str, name: str, reason: str = "ConditionChanged") -> list[str]:
    events = k8s.CoreV1Api(api).list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items
    events = [e for e in events if e.reason == reason]
    events.sort(
        key=lambda e: (
            e.first_timestamp or datetime.datetime.min.replace(tzinfo=datetime.UTC),
            e.metadata.resource_version,
        )
    )
    return [e.message for e in events]


@pytest.fixture
def nodes(crds: None, api: k8s.ApiClient) -> Iterator[list[str]]:
    """Three kwok nodes; the second one cordoned beforehand."""
    names = kwok.add_nodes(api, 3, prefix=f"rec-{uuid.uuid4().hex[:4]}")
    try:
        kwok.wait_nodes_ready(api, names, timeout=60)
        k8s.CoreV1Api(api).patch_node(names[1], {"spec": {"unschedulable": True}})
        yield names
    finally:
        kwok.delete_nodes(api, names)


@pytest.fixture
def engine_nodes(request: pytest.FixtureRequest, engine: Engine) -> Iterator[list[str]]:
    """Three kwok nodes on the engine's control plane; the second one cordoned beforehand."""
    if engine.name == "builtin":
        request.getfixturevalue("crds")  # the operator's control plane has them from its start
    names = kwok.add_nodes(engine.api, 3, prefix=f"rec-{uuid.uuid4().hex[:4]}")
    try:
        kwok.wait_nodes_ready(engine.api, names, timeout=60)
        k8s.CoreV1Api(engine.api).patch_node(names[1], {"spec": {"unschedulable": True}})
        yield names
    finally:
        kwok.delete_nodes(engine.api, names)


def pods_on(core: k8s.CoreV1Api, node: str, namespace: str) -> list[k8s.V1Pod]:
    return core.list_namespaced_pod(namespace, field_selector=f"spec.nodeName={node}").items


def test_request_goes_to_ready_and_is_released(
    cluster: Any, api: k8s.ApiClient, namespace: str, nodes: list[str]
) -> None:
    core, apps, objs = k8s.CoreV1Api(api), k8s.AppsV1Api(api), k8s.CustomObjectsApi(api)
    n0, n1, _n2 = nodes
    config(objs, namespace, {"maxParallelOperations": 2})
    on_n0 = {"kubernetes.io/hostname": n0}
    labels = {"app": "web"}
    apps.create_namespaced_deployment(
        namespace,
        {
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"nodeSelector": on_n0, "containers": [{"name": "app", "image": IMAGE}]},
                },
            },
        },
    )
    core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": "job", "labels": {"app": "job"}},
            "spec": {"nodeName": n0, "restartPolicy": "Never", "containers": [{"name": "c", "image": IMAGE}]},
        },
    )
    kwok.wait_until(
        lambda: len([p for p in pods_on(core, n0, namespace) if p.status.phase == "Running"]) == 3 or None,
        60,
        "3 pods Running",
    )
    objs.create_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        NM_PLURAL,
        nm(
            "m0",
            n0,
            waitForPodCompletion={"podSelector": "app=job"},
            drainSpec={"force": True, "timeoutSeconds": 60},
        ),
    )
    objs.create_namespaced_custom_object(GROUP, VERSION, namespace, NM_PLURAL, nm("m1", n1, drainSpec={}))

    # Check mode: the plan, and nothing written.
    check = run_module("maintenance_reconcile", reconcile_args(cluster, namespace), check=True)
    assert not check.failed, check.result
    assert check.result["changed"] is False
    assert sorted(check.result["scheduled"]) == [f"{namespace}/m0", f"{namespace}/m1"]
    assert phase(get_nm(objs, namespace, "m0")) == "" and not unschedulable(api, n0)

    first = run_module("maintenance_reconcile", reconcile_args(cluster, namespace))
    assert not first.failed, first.result
    r = first.result
    assert r["changed"] is True and r["busy"] is False
    assert sorted(r["scheduled"]) == [f"{namespace}/m0", f"{namespace}/m1"]
    m0 = get_nm(objs, namespace, "m0")
    assert m0 is not None and phase(m0) == "WaitForPodCompletion"
    assert m0["status"]["waitForCompletion"] == [f"{namespace}/job"]
    assert FINALIZER in m0["metadata"]["finalizers"]
    assert m0["metadata"]["annotations"][INITIAL] == "false"
    assert "maintenance.nvidia.com/wait-pod-completion-start-time" in m0["metadata"]["annotations"]
    assert [o["name"] for o in m0["metadata"]["ownerReferences"]] == [n0]
    assert unschedulable(api, n0)
    assert annotations_of(api, n0)[CORDONED_BY] == f"NodeMaintenance {namespace}/m0 {m0['metadata']['uid']}"
    m1 = get_nm(objs, namespace, "m1")
    assert phase(m1) == "Ready" and m1 is not None
    assert m1["metadata"]["annotations"][INITIAL] == "true"
    assert "maintenance.nvidia.com/ready-time" in m1["metadata"]["annotations"]
    waiting = {w["name"]: w for w in r["waiting"]}
    assert "job" in waiting[f"{namespace}/m0"]["message"]

    # The job completes: the wait ends and the drain evicts the deployment's pods.
    core.delete_namespaced_pod("job", namespace)
    settled = run_module(
        "maintenance_reconcile", reconcile_args(cluster, namespace, until_settled=True, settle_timeout=90)
    )
    assert not settled.failed, settled.result
    assert settled.result["settled"] is True
    m0 = get_nm(objs, namespace, "m0")
    assert phase(m0) == "Ready" and m0 is not None
    assert m0["status"]["drain"] == {"totalPods": 2, "evictionPods": 2, "drainProgress": 100, "waitForEviction": []}
    assert m0["status"]["conditions"][0]["status"] == "True"
    assert [p.metadata.name for p in pods_on(core, n0, namespace) if not p.metadata.deletion_timestamp] == []
    expected = ["Pending", "Scheduled", "Cordon", "WaitForPodCompletion", "Draining", "Ready"]
    assert reasons(api, namespace, "m0") == expected
    assert reasons(api, namespace, "m1") == expected

    # A settled pass writes nothing.
    again = run_module("maintenance_reconcile", reconcile_args(cluster, namespace))
    assert again.result["changed"] is False and again.result["settled"] is True, again.result

    # Release: deletion uncordons what we cordoned, leaves the pre-cordoned node cordoned, drops the finalizer.
    objs.delete_namespaced_custom_object(GROUP, VERSION, namespace, NM_PLURAL, "m0")
    objs.delete_namespaced_custom_object(GROUP, VERSION, namespace, NM_PLURAL, "m1")
    release = run_module("maintenance_reconcile", reconcile_args(cluster, namespace))
    assert not release.failed, release.result
    assert sorted(release.result["released"]) == [f"{namespace}/m0", f"{namespace}/m1"]
    assert get_nm(objs, namespace, "m0") is None and get_nm(objs, namespace, "m1") is None
    assert not unschedulable(api, n0) and CORDONED_BY not in annotations_of(api, n0)
    assert unschedulable(api, n1)
    assert [x["name"] for x in release.result["left_cordoned"]] == [f"{namespace}/m1"]


def kubectl(cluster: Any, *args: str) -> str:
    """Someone else at the cluster: the real kubectl, as the admin."""
    cmd = [str(cluster.bindir / "kubectl"), "--kubeconfig", str(cluster.kubeconfig_token), *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def annotations_of(api: k8s.ApiClient, name: str) -> dict[str, str]:
    return k8s.CoreV1Api(api).read_node(name).metadata.annotations or {}


def left_cordoned_events(api: k8s.ApiClient, namespace: str, name: str) -> list[tuple[str, str]]:
    events = k8s.CoreV1Api(api).list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items
    return [(e.type, e.message) for e in events if e.reason == "NodeLeftCordoned"]


def test_someone_cordons_the_node_during_its_maintenance_and_the_release_leaves_it_cordoned(
    cluster: Any, api: k8s.ApiClient, namespace: str, nodes: list[str]
) -> None:
    objs = k8s.CustomObjectsApi(api)
    n0 = nodes[0]
    config(objs, namespace, {"maxParallelOperations": 1})
    objs.create_namespaced_custom_object(GROUP, VERSION, namespace, NM_PLURAL, nm("m0", n0, drainSpec={}))
    run = run_module("maintenance_reconcile", reconcile_args(cluster, namespace, until_settled=True, settle_timeout=90))
    assert not run.failed, run.result
    assert phase(get_nm(objs, namespace, "m0")) == "Ready" and unschedulable(api, n0)

    # During the maintenance someone uncordons the node and cordons it again, for a reason of their own.
    kubectl(cluster, "uncordon", n0)
    kubectl(cluster, "cordon", n0)
    objs.delete_namespaced_custom_object(GROUP, VERSION, namespace, NM_PLURAL, "m0")
    release = run_module("maintenance_reconcile", reconcile_args(cluster, namespace))
    assert not release.failed, release.result
    assert release.result["released"] == [f"{namespace}/m0"] and get_nm(objs, namespace, "m0") is None
    assert unschedulable(api, n0), "the release lifted a cordon that someone else made during the maintenance"
    assert [(x["name"], x["node"]) for x in release.result["left_cordoned"]] == [(f"{namespace}/m0", n0)]
    assert "set by kubectl" in release.result["left_cordoned"][0]["message"]
    assert [t for t, _message in left_cordoned_events(api, namespace, "m0")] == ["Warning"]
    assert CORDONED_BY not in annotations_of(api, n0), "the release removes its own marker"


class CordonsBeforeTheEngine(Client):
    """A client that lets someone run ``kubectl cordon`` on a node just before the engine's first write to it:
    after the pass read the node schedulable and decided to cordon it."""

    target = ""
    cluster: Any = None
    done = False

    def patch(self, res: Resource, name: str, patch: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        if res is NODES and name == self.target and not self.done:
            self.done = True
            kubectl(self.cluster, "cordon", name)
        return super().patch(res, name, patch, *args, **kwargs)


def test_a_node_already_cordoned_before_the_maintenance_cordoned_it_stays_cordoned_after_release(
    cluster: Any, api: k8s.ApiClient, namespace: str, nodes: list[str]
) -> None:
    objs = k8s.CustomObjectsApi(api)
    n2 = nodes[2]
    config(objs, namespace, {"maxParallelOperations": 1})
    objs.create_namespaced_custom_object(GROUP, VERSION, namespace, NM_PLURAL, nm("m2", n2, drainSpec={}))
    client = CordonsBeforeTheEngine.from_params(token_auth(cluster))
    client.target, client.cluster = n2, cluster
    reconciler = Reconciler(client, ReconcileOptions(namespace=namespace, config_namespace=namespace))
    report = reconciler.run_pass()
    assert client.done and report.errors == [], report.as_dict()
    m2 = get_nm(objs, namespace, "m2")
    assert phase(m2) == "Ready" and m2 is not None and unschedulable(api, n2)
    recorded = m2["metadata"]["annotations"][INITIAL]

    objs.delete_namespaced_custom_object(GROUP, VERSION, namespace, NM_PLURAL, "m2")
    release = run_module("maintenance_reconcile", reconcile_args(cluster, namespace))
    assert not release.failed, release.result
    assert release.result["released"] == [f"{namespace}/m2"] and get_nm(objs, namespace, "m2") is None
    assert unschedulable(api, n2), "the release lifted a cordon made before the maintenance cordoned the node"
    # the engine's write met the API server's Conflict, read the node again and found someone else's cordon
    assert recorded == "true"
    assert release.result["left_cordoned"][0]["node"] == n2
    assert [t for t, _message in left_cordoned_events(api, namespace, "m2")] == ["Normal"]
    assert CORDONED_BY not in annotations_of(api, n2)


def test_additional_requestors_hold_the_release(
    cluster: Any, api: k8s.ApiClient, namespace: str, nodes: list[str]
) -> None:
    objs = k8s.CustomObjectsApi(api)
    n2 = nodes[2]
    config(objs, namespace, {"maxParallelOperations": 1})
    objs.create_namespaced_custom_object(
        GROUP, VERSION, namespace, NM_PLURAL, nm("shared", n2, additionalRequestors=["b.example.com"])
    )
    run = run_module("maintenance_reconcile", reconcile_args(cluster, namespace, until_settled=True, settle_timeout=60))
    assert not run.failed, run.result
    assert phase(get_nm(objs, namespace, "shared")) == "Ready" and unschedulable(api, n2)
    objs.delete_namespaced_custom_object(GROUP, VERSION, namespace, NM_PLURAL, "shared")
    held = run_module("maintenance_reconcile", reconcile_args(cluster, namespace))
    assert not held.failed, held.result
    assert held.result["released"] == [] and unschedulable(api, n2)
    assert "b.example.com" in {w["name"]: w for w in held.result["waiting"]}[f"{namespace}/shared"]["message"]
    objs.patch_namespaced_custom_object(
        GROUP, VERSION, namespace, NM_PLURAL, "shared", {"spec": {"additionalRequestors": []}}
    )
    done = run_module("maintenance_reconcile", reconcile_args(cluster, namespace))
    assert done.result["released"] == [f"{namespace}/shared"], done.result
    assert get_nm(objs, namespace, "shared") is None and not unschedulable(api, n2)


def test_passes_take_turns_through_the_lease(
    cluster: Any, api: k8s.ApiClient, namespace: str, nodes: list[str]
) -> None:
    objs = k8s.CustomObjectsApi(api)
    coordination = k8s.CoordinationV1Api(api)
    config(objs, namespace, {"maxParallelOperations": 1})
    objs.create_namespaced_custom_object(GROUP, VERSION, namespace, NM_PLURAL, nm("a", nodes[0]))
    objs.create_namespaced_custom_object(GROUP, VERSION, namespace, NM_PLURAL, nm("b", nodes[2]))

    # Someone else holds the Lease: the pass waits lease_wait seconds, reports busy and writes nothing.
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    coordination.create_namespaced_lease(
        namespace,
        {
            "metadata": {"name": "nodeops-maintenance-reconcile"},
            "spec": {"holderIdentity": "someone-else", "leaseDurationSeconds": 300, "renewTime": now},
        },
    )
    busy = run_module("maintenance_reconcile", reconcile_args(cluster, namespace, lease_wait=1))
    assert not busy.failed, busy.result
    assert busy.result["busy"] is True and busy.result["changed"] is False
    assert busy.result["holder"] == "someone-else"
    assert phase(get_nm(objs, namespace, "a")) == ""
    coordination.delete_namespaced_lease("nodeops-maintenance-reconcile", namespace)

    # Two processes at once: both finish, neither fails, and maxParallelOperations 1 holds.
    cmd = [str(BIN / "ansible"), "localhost", "-c", "local", "-i", "localhost,", "-m"]
    cmd += ["nodeops.maintenance.maintenance_reconcile", "-a"]
    args = json.dumps(reconcile_args(cluster, namespace, lease_wait=60))
    procs = [
        subprocess.Popen([*cmd, args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env())
        for _process in range(2)
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, out + err
        line = next(line for line in out.splitlines() if line.startswith("{"))
        results.append(json.loads(line)["result"])
    assert all(not r["busy"] for r in results)
    scheduled = [s for r in results for s in r["scheduled"]]
    assert len(scheduled) == 1, results  # one slot: the second pass saw the first one's request in progress
    phases = sorted(phase(get_nm(objs, namespace, n)) or "" for n in ("a", "b"))
    assert phases == ["Pending", "Ready"]


def test_node_maintenance_requests_joins_and_releases(engine: Engine, engine_nodes: list[str]) -> None:
    """The module with either engine: its own reconcile passes, or the NVIDIA Maintenance Operator (it only waits)."""
    api, namespace = engine.api, engine.namespace
    objs = k8s.CustomObjectsApi(api)
    n0, n1, n2 = engine_nodes
    config(objs, engine.config_namespace, {"maxParallelOperations": 2})
    common = {
        **token_auth(engine.cluster),
        "namespace": namespace,
        "config_namespace": engine.config_namespace,
        "engine": engine.name,
    }

    unknown = run_module("node_maintenance", {**common, "name": [n0, "no-such-node"], "requestor": "a.example.com"})
    assert unknown.failed and "no-such-node not found" in unknown.result["msg"]
    assert objs.list_namespaced_custom_object(GROUP, VERSION, namespace, NM_PLURAL)["items"] == []

    check = run_module("node_maintenance", {**common, "name": n0, "requestor": "a.example.com"}, check=True)
    assert check.result["changed"] is True and check.result["node_maintenances"][0]["action"] == "created"
    assert objs.list_namespaced_custom_object(GROUP, VERSION, namespace, NM_PLURAL)["items"] == []

    args = {**common, "name": [n0, n2], "requestor": "a.example.com", "drain_spec": {"force": True}, "wait": True}
    run = run_module("node_maintenance", {**args, "wait_timeout": 90})
    assert not run.failed, run.result
    got = {m["node"]: m for m in run.result["node_maintenances"]}
    assert {m["action"] for m in got.values()} == {"created"}
    assert {m["phase"] for m in got.values()} == {"Ready"}
    assert got[n0]["name"] == f"{namespace}/a.example.com-{n0}"
    assert unschedulable(api, n0) and unschedulable(api, n2)
    again = run_module("node_maintenance", {**args, "wait_timeout": 30})
    assert again.result["changed"] is False, again.result

    joined = run_module("node_maintenance", {**common, "name": n0, "requestor": "b.example.com"})
    assert joined.result["node_maintenances"][0]["action"] == "joined", joined.result
    assert joined.result["node_maintenances"][0]["additional_requestors"] == ["b.example.com"]

    # The owner releases: n2 is given back; n0 is held while b is still listed.
    release = {**common, "name": [n0, n2], "requestor": "a.example.com", "state": "absent"}
    run = run_module("node_maintenance", {**release, "wait": True, "wait_timeout": 5})
    assert run.failed and "held for b.example.com" in run.result["msg"], run.result
    kwok.wait_until(lambda: not unschedulable(api, n2) or None, 60, f"{n2} given back")
    assert unschedulable(api, n0)
    left = run_module("node_maintenance", {**common, "name": n0, "requestor": "b.example.com", "state": "absent"})
    assert left.result["node_maintenances"][0]["action"] == "left", left.result
    run = run_module("node_maintenance", {**release, "wait": True, "wait_timeout": 60})
    assert not run.failed, run.result
    assert not unschedulable(api, n0)
    assert objs.list_namespaced_custom_object(GROUP, VERSION, namespace, NM_PLURAL)["items"] == []
    assert unschedulable(api, n1)  # never touched


@pytest.mark.parametrize("engine", ["operator"], indirect=True)
def test_the_operator_serves_cordon_false_as_true_and_the_task_says_so(engine: Engine, engine_nodes: list[str]) -> None:
    """The NVIDIA operator cordons every node it maintains and gives a drain of no limit its default of 300 s: the
    task warns, lists the overrides, writes the request as it will be served, and a second run is unchanged."""
    api, namespace = engine.api, engine.namespace
    n0 = engine_nodes[0]
    args = {
        **token_auth(engine.cluster),
        "namespace": namespace,
        "config_namespace": engine.config_namespace,
        "engine": "operator",
        "name": n0,
        "requestor": "a.example.com",
        "cordon": False,
        "drain_spec": {"force": True, "timeout_seconds": 0},
        "wait": True,
        "wait_timeout": 90,
    }
    first = run_module("node_maintenance", args)
    assert not first.failed, first.result
    overrides = first.result["overrides"]
    assert [o.split(":")[0] for o in overrides] == ["cordon", "drain_spec.timeout_seconds"], overrides
    assert all(o in first.result.get("warnings", []) for o in overrides)
    obj = get_nm(k8s.CustomObjectsApi(api), namespace, f"a.example.com-{n0}")
    assert obj is not None
    assert obj["spec"]["cordon"] is True and obj["spec"]["drainSpec"] == {"force": True, "timeoutSeconds": 300}
    assert unschedulable(api, n0)
    again = run_module("node_maintenance", args)
    assert again.result["changed"] is False, again.result
    assert again.result["node_maintenances"][0]["action"] == "unchanged"
    gone = run_module("node_maintenance", {**args, "state": "absent", "wait_timeout": 60})
    assert not gone.failed, gone.result
    assert not unschedulable(api, n0)


BLOCKING_FIELDS = ("blockingPods", "blockingPDBs", "blockedByRules")


def drain_status_schema(crd: dict[str, Any]) -> dict[str, Any]:
    status = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    return status["properties"]["drain"]["properties"]


@pytest.fixture
def crd_without_blocking_fields(crds: None, api: k8s.ApiClient, namespace: str) -> Iterator[None]:
    """The NodeMaintenance CRD without the status fields that name what blocks a drain, as the NVIDIA operator's
    CRD is; the collection's own is put back afterwards, and served again before the next test."""
    ext = k8s.ApiextensionsV1Api(api)
    objs = k8s.CustomObjectsApi(api)
    name = f"{NM_PLURAL}.{GROUP}"
    original = api.sanitize_for_serialization(ext.read_custom_resource_definition(name))

    def swap(schema_of: Any) -> None:
        """Replace the CRD's spec with ``schema_of(current)``'s, read afresh on a Conflict."""
        for _attempt in range(10):
            current = api.sanitize_for_serialization(ext.read_custom_resource_definition(name))
            body = {**current, "spec": schema_of(json.loads(json.dumps(original)))["spec"]}
            body.pop("status", None)
            try:
                ext.replace_custom_resource_definition(name, body)
                return
            except ApiException as err:
                if err.status != 409:
                    raise
        raise AssertionError(f"the CRD {name} kept changing")

    def stripped(crd: dict[str, Any]) -> dict[str, Any]:
        for key in BLOCKING_FIELDS:
            drain_status_schema(crd).pop(key)
        return crd

    def served(keeps: bool) -> Any:
        """A check that the API server keeps (or drops) status.drain.blockingPods, through a probe object."""

        def check() -> bool | None:
            current = objs.get_namespaced_custom_object(GROUP, VERSION, namespace, NM_PLURAL, "probe")
            current["status"] = {"drain": {"totalPods": 1, "blockingPods": ["x"]}}
            written = objs.replace_namespaced_custom_object_status(
                GROUP, VERSION, namespace, NM_PLURAL, "probe", current
            )
            return ("blockingPods" in written["status"]["drain"]) == keeps or None

        return check

    objs.create_namespaced_custom_object(GROUP, VERSION, namespace, NM_PLURAL, nm("probe", "no-node"))
    try:
        swap(stripped)
        kwok.wait_until(served(False), 60, "the API server to serve the CRD without the blocking fields")
        yield
    finally:
        swap(lambda crd: crd)
        kwok.wait_until(served(True), 60, "the API server to serve the collection's CRD again")
        objs.delete_namespaced_custom_object(GROUP, VERSION, namespace, NM_PLURAL, "probe")


def test_a_crd_without_the_blocking_fields_is_noticed_and_the_events_name_the_blocking_pod(
    cluster: Any, api: k8s.ApiClient, namespace: str, nodes: list[str], crd_without_blocking_fields: None
) -> None:
    """With a CRD that drops status.drain.blockingPods (the NVIDIA operator's), the task warns once, and its failure
    still names the pod and the budget that block the drain: from the EvictionBlocked event."""
    core, n0 = k8s.CoreV1Api(api), nodes[0]
    pod = {
        "metadata": {"name": "guarded", "labels": {"app": "guarded"}},
        "spec": {
            "nodeName": n0,
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": IMAGE}],
        },
    }
    core.create_namespaced_pod(namespace, pod)
    pdb = {"metadata": {"name": "guard"}, "spec": {"selector": {"matchLabels": {"app": "guarded"}}, "minAvailable": 1}}
    k8s.PolicyV1Api(api).create_namespaced_pod_disruption_budget(namespace, pdb)

    def counted() -> bool | None:
        status = k8s.PolicyV1Api(api).read_namespaced_pod_disruption_budget("guard", namespace).status
        return bool(status and status.observed_generation and status.current_healthy == 1) or None

    kwok.wait_until(counted, 60, "the disruption controller to count the guarded pod")
    config(k8s.CustomObjectsApi(api), namespace, {"maxParallelOperations": 1})
    args = {
        **token_auth(cluster),
        "namespace": namespace,
        "config_namespace": namespace,
        "name": n0,
        "requestor": "a.example.com",
        "drain_spec": {"force": True, "timeout_seconds": 120},
        "wait": True,
        "wait_timeout": 30,  # the budget blocks the drain for good: the wait only has to reach a blocked attempt
    }
    run = run_module("node_maintenance", args)
    assert run.failed, run.result
    assert (
        f"eviction refused by PodDisruptionBudget {namespace}/guard for pod(s) {namespace}/guarded"
        in (run.result["msg"])
    ), run.result["msg"]
    dropped = [w for w in run.result.get("warnings", []) if "drops status.drain.blockingPods" in w]
    assert len(dropped) == 1, run.result.get("warnings")
    obj = get_nm(k8s.CustomObjectsApi(api), namespace, f"a.example.com-{n0}")
    assert obj is not None and "blockingPods" not in obj["status"]["drain"]
