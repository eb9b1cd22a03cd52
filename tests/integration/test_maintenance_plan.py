"""nodeops.maintenance.maintenance_plan end to end: the ansible command, the real API server, kwok nodes.

The CRDs come from the crds role (as users install them). The NodeMaintenance statuses are written
through the status subresource, the way the reconciler writes them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster import kwok
from integration.test_crds import run_role
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException
from support.ansible_cli import run_module
from support.cleanup import drop_finalizers

pytestmark = pytest.mark.integration

GROUP = "maintenance.nvidia.com"
VERSION = "v1alpha1"
NM_PLURAL = "nodemaintenances"
NM_CRD = f"{NM_PLURAL}.{GROUP}"


@pytest.fixture(scope="module")
def crds(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> None:
    run_role(cluster, tmp_path_factory.mktemp("plan-crds"), {})


def token_auth(cluster: Any) -> dict[str, Any]:
    return {"host": cluster.server, "api_key": cluster.token, "ca_cert": str(cluster.ca_file)}


def unavailable(node: k8s.V1Node) -> bool:
    return bool(node.spec.unschedulable) or kwok.ready_status(node) not in ("True", None)


def nm(name: str, node: str, requestor: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "NodeMaintenance",
        "metadata": {"name": name},
        "spec": {"requestorID": requestor, "nodeName": node},
    }


def set_phase(objs: k8s.CustomObjectsApi, namespace: str, name: str, reason: str) -> None:
    condition = {
        "type": "Ready",
        "status": "True" if reason == "Ready" else "False",
        "reason": reason,
        "message": "",
        "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    objs.patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, NM_PLURAL, name, {"status": {"conditions": [condition]}}
    )


@pytest.fixture
def scenario(crds: None, api: k8s.ApiClient, namespace: str) -> Iterator[dict[str, Any]]:
    """7 kwok nodes (n5 cordoned, n6 NotReady), one request in progress and pending ones from 3 requestors.

    maxParallelOperations 3 and maxUnavailable = (unavailable nodes of other tests) + 4, so the budget of
    the first pass is 1 whatever else the cluster holds.
    """
    core = k8s.CoreV1Api(api)
    foreign_down = sum(1 for n in core.list_node().items if unavailable(n))
    names = kwok.add_nodes(api, 7, prefix="plan")
    try:
        kwok.wait_nodes_ready(api, names, timeout=60)
        n = dict(enumerate(names))
        core.patch_node(n[5], {"spec": {"unschedulable": True}})
        kwok.stop_heartbeat(api, n[6])
        objs = k8s.CustomObjectsApi(api)
        objs.create_namespaced_custom_object(
            GROUP,
            VERSION,
            namespace,
            "maintenanceoperatorconfigs",
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "MaintenanceOperatorConfig",
                "metadata": {"name": "default"},
                "spec": {"maxParallelOperations": 3, "maxUnavailable": foreign_down + 4},
            },
        )
        requests = {
            "running": (0, "a.example.com", "Draining"),
            "a-0": (0, "a.example.com", "Pending"),
            "a-1": (1, "a.example.com", "Pending"),
            "b-1": (2, "b.example.com", "Pending"),
            "b-2": (3, "b.example.com", "Pending"),
            "b-5": (5, "b.example.com", "Pending"),
            "new": (4, "c.example.com", None),  # no status yet: counts as Pending
            "c-6": (6, "c.example.com", "Pending"),
        }
        for name, (index, requestor, phase) in requests.items():
            objs.create_namespaced_custom_object(GROUP, VERSION, namespace, NM_PLURAL, nm(name, n[index], requestor))
            if phase:
                set_phase(objs, namespace, name, phase)
        # A request for a node that does not exist (its Node was deleted before the request was collected).
        objs.create_namespaced_custom_object(
            GROUP, VERSION, namespace, NM_PLURAL, nm("ghost", "plan-gone", "b.example.com")
        )
        set_phase(objs, namespace, "ghost", "Pending")
        kwok.wait_node_ready_status(api, n[6], "Unknown", timeout=90)
        yield {"nodes": names, "namespace": namespace, "foreign_down": foreign_down}
    finally:
        kwok.delete_nodes(api, names)


def key(namespace: str, *names: str) -> list[str]:
    return [f"{namespace}/{name}" for name in names]


def test_plan_from_the_cluster(cluster: Any, api: k8s.ApiClient, scenario: dict[str, Any]) -> None:
    ns, nodes = scenario["namespace"], scenario["nodes"]
    run = run_module("maintenance_plan", {**token_auth(cluster), "namespace": ns, "config_namespace": ns})
    assert not run.failed, run.result
    r = run.result
    assert r["changed"] is False and r["source"] == "cluster"
    assert r["config"] == {
        "max_parallel_operations": 3,
        "max_unavailable": scenario["foreign_down"] + 4,
        "source": f"MaintenanceOperatorConfig {ns}/default",
    }
    assert (r["available_slots"], r["can_become_unavailable"]) == (2, 1)
    assert r["in_maintenance"] == [nodes[0]]
    assert {nodes[5], nodes[6]} <= set(r["unavailable_nodes"])
    assert r["in_progress"] == key(ns, "running")
    assert r["total_nodes"] == len(k8s.CoreV1Api(api).list_node().items)

    decisions = {c["name"].split("/", 1)[1]: c for c in r["candidates"]}
    assert {name: d["reason"] for name, d in decisions.items()} == {
        "a-1": "scheduled",  # its requestor already has a request in progress: ranked first
        "c-6": "scheduled_node_unavailable",  # NotReady node: no budget used
        "new": "no_budget",  # the one unit of budget went to a-1; does not use up a slot
        "b-1": "no_slot",
        "b-2": "no_slot",
        "b-5": "no_slot",
        "a-0": "node_in_maintenance",
        "ghost": "node_not_found",
    }
    assert decisions["a-1"]["position"] == 1 and decisions["a-1"]["rank"] == 1098
    assert decisions["a-0"]["position"] is None
    assert all(d["message"] for d in decisions.values())
    assert sorted(r["scheduled"]) == key(ns, "a-1", "c-6")
    assert any("plan-gone, which does not exist" in w for w in r.get("warnings", []))

    waves = [sorted(w["requests"]) for w in r["waves"]]
    assert waves == [key(ns, "a-1", "c-6"), key(ns, "a-0", "b-5", "new"), key(ns, "b-1", "b-2")]
    assert sorted(r["waves"][0]["nodes"]) == sorted([nodes[1], nodes[6]])
    assert [(d["name"], d["reason"]) for d in r["never_scheduled"]] == [(f"{ns}/ghost", "node_not_found")]

    check = run_module("maintenance_plan", {**token_auth(cluster), "namespace": ns, "config_namespace": ns}, check=True)
    assert {k: v for k, v in check.result.items() if k != "warnings"} == {k: v for k, v in r.items() if k != "warnings"}

    everywhere = run_module("maintenance_plan", {**token_auth(cluster), "config_namespace": ns})
    assert not everywhere.failed, everywhere.result
    assert set(key(ns, "a-1", "ghost")) <= {c["name"] for c in everywhere.result["candidates"]}


def test_offline_from_data_needs_no_cluster(
    cluster: Any, api: k8s.ApiClient, scenario: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> None:
    ns = scenario["namespace"]
    node_list = api.sanitize_for_serialization(k8s.CoreV1Api(api).list_node())
    nm_list = k8s.CustomObjectsApi(api).list_namespaced_custom_object(GROUP, VERSION, ns, NM_PLURAL)
    known = [item for item in nm_list["items"] if item["metadata"]["name"] != "ghost"]
    config = {"max_parallel_operations": "3", "max_unavailable": scenario["foreign_down"] + 4}
    # No connection option and no K8S_AUTH_* / KUBECONFIG in the environment: nothing to connect to.
    args = {"nodes": node_list, "node_maintenances": known, "config": config}
    run = run_module("maintenance_plan", args, env={"KUBECONFIG": "/nonexistent"})
    assert not run.failed, run.result
    r = run.result
    assert r["source"] == "data" and r["config"]["source"] == "the config option"
    assert r["config"]["max_parallel_operations"] == 3  # "3", as -e passes numbers, is taken as 3
    assert sorted(r["scheduled"]) == key(ns, "a-1", "c-6")
    assert [sorted(w["requests"]) for w in r["waves"]] == [
        key(ns, "a-1", "c-6"),
        key(ns, "a-0", "b-5", "new"),
        key(ns, "b-1", "b-2"),
    ]
    assert r["never_scheduled"] == []

    # The whole List objects work too, and without config the built-in defaults apply (1 slot, no limit).
    defaults = run_module("maintenance_plan", {"nodes": node_list, "node_maintenances": {"items": known}})
    assert not defaults.failed, defaults.result
    assert defaults.result["config"] == {
        "max_parallel_operations": 1,
        "max_unavailable": None,
        "source": "built-in defaults",
    }
    assert (defaults.result["available_slots"], defaults.result["can_become_unavailable"]) == (0, None)

    # Offline with every request, the plan is the live one: the request for an unknown node is not scheduled.
    snapshot = {"nodes": node_list, "node_maintenances": nm_list["items"], "config": config}
    full = run_module("maintenance_plan", snapshot)
    assert not full.failed, full.result
    assert [(d["name"], d["reason"]) for d in full.result["never_scheduled"]] == [(f"{ns}/ghost", "node_not_found")]
    assert any("plan-gone, which does not exist" in w for w in full.result.get("warnings", []))
    # With unknown_nodes=error it is an input error that names the object and the field (a typo in the data).
    bad = run_module("maintenance_plan", {**snapshot, "unknown_nodes": "error"})
    assert bad.failed
    assert f"NodeMaintenance {ns}/ghost: spec.nodeName 'plan-gone' is not one of the given nodes" in bad.result["msg"]

    wrong = run_module("maintenance_plan", {**args, "config": {"max_unavailable": "10.5%"}})
    assert wrong.failed
    assert 'config.maxUnavailable: the string "10.5%" is refused' in wrong.result["msg"]

    # The same from files, as kubectl saves them: one List of mixed kinds, and a typed NodeList
    tmp = tmp_path_factory.mktemp("plan-snapshot")
    nms = tmp / "nms.json"
    nms.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": nm_list["items"]}))
    nodes_file = tmp / "nodes.json"
    nodes_file.write_text(json.dumps({**node_list, "kind": "NodeList"}))
    saved = run_module("maintenance_plan", {"snapshot": [str(nodes_file), str(nms)], "config": config})
    assert not saved.failed, saved.result
    assert {k: v for k, v in saved.result.items() if k not in ("warnings", "invocation")} == {
        k: v for k, v in full.result.items() if k not in ("warnings", "invocation")
    }
    missing = run_module("maintenance_plan", {"snapshot": [str(tmp / "none.json")]})
    assert missing.failed and f"snapshot: cannot read {tmp / 'none.json'}" in missing.result["msg"]


def test_config_missing_gives_the_defaults(cluster: Any, crds: None, namespace: str) -> None:
    run = run_module("maintenance_plan", {**token_auth(cluster), "namespace": namespace, "config_namespace": namespace})
    assert not run.failed, run.result
    assert run.result["config"]["source"] == f"built-in defaults (no MaintenanceOperatorConfig {namespace}/default)"
    assert run.result["candidates"] == [] and run.result["waves"] == []


def test_missing_crd_gives_the_client_layer_error(cluster: Any, api: k8s.ApiClient, tmp_path: Path) -> None:
    """Without the NodeMaintenance CRD the module fails with the client layer's message; the CRDs are restored."""
    ext = k8s.ApiextensionsV1Api(api)
    drop_finalizers(api)  # objects of earlier tests on this control plane would hold the CRD's deletion
    try:
        ext.delete_custom_resource_definition(NM_CRD)
    except ApiException as err:
        if err.status != 404:
            raise
    try:
        objs = k8s.CustomObjectsApi(api)

        def gone() -> bool:
            try:
                objs.list_cluster_custom_object(GROUP, VERSION, NM_PLURAL)
            except ApiException as err:
                return err.status == 404
            return False

        kwok.wait_until(gone, 60, "the NodeMaintenance CRD to be gone")
        run = run_module("maintenance_plan", token_auth(cluster))
        assert run.failed
        assert run.result["error"]["reason"] == "missing_crd"
        assert "install the CRDs with the nodeops.maintenance.crds role" in run.result["msg"]
    finally:
        run_role(cluster, tmp_path, {})


def _offline_nm(name: str, created: Any = "2026-01-01T00:00:00Z") -> dict[str, Any]:
    return {
        "kind": "NodeMaintenance",
        "metadata": {"name": name, "namespace": "ops", "creationTimestamp": created},
        "spec": {"nodeName": "n0", "requestorID": "a.example.com"},
    }


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"node_maintenances": [_offline_nm("m", "9999-12-31T23:59:59-01:00")]},
            "NodeMaintenance ops/m: metadata.creationTimestamp: '9999-12-31T23:59:59-01:00' is outside the years 0001",
        ),
        (
            {"node_maintenances": [_offline_nm("m", "2026-02-30T00:00:00Z")]},
            "NodeMaintenance ops/m: metadata.creationTimestamp: '2026-02-30T00:00:00Z' is not a valid RFC 3339",
        ),
        (
            {"node_maintenances": [_offline_nm("m", "\u0662\u0660\u0662\u0666-01-01T00:00:00Z")]},
            "NodeMaintenance ops/m: metadata.creationTimestamp: '\u0662\u0660\u0662\u0666-01-01T00:00:00Z' is not an "
            "RFC 3339 timestamp; write it as '2026-01-31T12:00:00Z', with ASCII digits",
        ),
        (
            {"config": {"max_parallel_operations": "\u0663"}},
            'config.maxParallelOperations: the string "\u0663" is refused',
        ),
        ({"config": {"max_unavailable": "\uff150%"}}, 'config.maxUnavailable: the string "\uff150%" is refused'),
    ],
)
def test_offline_bad_input_fails_naming_the_field(change: dict[str, Any], message: str) -> None:
    """A Python traceback (OverflowError), a bare ValueError or a Unicode digit taken as a number before."""
    args: dict[str, Any] = {"nodes": [{"metadata": {"name": "n0"}}], "node_maintenances": [_offline_nm("m")]}
    args.update(change)
    run = run_module("maintenance_plan", args, env={"KUBECONFIG": "/nonexistent"})
    assert run.failed, run.result
    assert message in run.result["msg"], run.result
    # fail_json, not an exception (which ansible reports as "Task failed: Module failed: <the exception>")
    assert not run.result["msg"].startswith("Task failed") and "module_stderr" not in run.result
    assert "Traceback" not in run.stderr
