"""The reconcile engine and the Lease against an in-memory API: conditional writes, order, events, lease turns."""

from __future__ import annotations

import copy
import threading
from typing import Any

import pytest
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.maintenance import lifecycle as lc
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.maintenance.cordon import (
    CORDONED_BY_ANNOTATION,
    ENGINE_FIELD_MANAGER,
    owns_unschedulable,
)
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.maintenance.scheduler import FINALIZER
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.node.rfc3339 import micro_time
from ansible_collections.nodeops.maintenance.plugins.module_utils.engines.maintenance import (
    HANDED_BACK,
    SETTLED,
    TIMED_OUT,
    PassReport,
    ReconcileOptions,
    Reconciler,
    reconcile_until_settled,
)
from ansible_collections.nodeops.maintenance.plugins.module_utils.engines.requests import (
    REFRESH_BY_LIST,
    RequestError,
    Requests,
    RequestSpec,
    is_given_back,
    is_gone,
    is_ready,
)
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s import errors
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.client import (
    LEASES,
    MAINTENANCE_CONFIGS,
    NODE_MAINTENANCES,
    NODES,
    PODS,
)
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.lease import Lease
from hypothesis import given, settings
from hypothesis import strategies as st

NOW = 1_800_000_000.0
NS = "ns"
INITIAL = "maintenance.nvidia.com/node-initial-state.unschedulable"


class FakeApi:
    """Objects by (plural, namespace, name) with resourceVersions; replace is conditional, as the API server's."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str | None, str], dict[str, Any]] = {}
        self.version = 0
        self.lock = threading.Lock()
        self.writes: list[tuple[str, ...]] = []
        self.events: list[tuple[str, str, str, str]] = []
        self.conflicts: dict[tuple[str, str], int] = {}  # (plural or plural/status, name) -> Conflicts to raise
        self.before_delete: dict[tuple[str, str], Any] = {}  # (plural, name) -> change made just before our delete
        self.now = NOW

    def _key(self, res: Any, name: str, namespace: str | None) -> tuple[str, str | None, str]:
        return (res.plural, namespace if res.namespaced else None, name)

    def _bump(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        return obj

    def add(self, res: Any, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        meta.setdefault("uid", "uid-" + meta["name"])
        meta.setdefault("generation", 1)
        self.objects[self._key(res, meta["name"], meta.get("namespace"))] = self._bump(copy.deepcopy(obj))

    def obj(self, res: Any, name: str, namespace: str | None = NS) -> dict[str, Any] | None:
        found = self.objects.get(self._key(res, name, namespace))
        return copy.deepcopy(found) if found else None

    # -- the client's methods ------------------------------------------------------------------
    def get(self, res: Any, name: str, namespace: str | None = None) -> dict[str, Any]:
        with self.lock:
            found = self.objects.get(self._key(res, name, namespace))
            if found is None:
                raise errors.NotFound(f"{res.plural} {name} not found", 404, {"details": {"name": name}})
            return copy.deepcopy(found)

    def get_metadata(self, res: Any, name: str, namespace: str | None = None) -> dict[str, Any]:
        with self.lock:
            found = self.objects.get(self._key(res, name, namespace))
            if found is None:
                raise errors.NotFound(f"{res.plural} {name} not found", 404, {"details": {"name": name}})
            return {"kind": "PartialObjectMetadata", "metadata": copy.deepcopy(found["metadata"])}

    def list(self, res: Any, namespace: str | None = None, **kw: Any) -> dict[str, Any]:
        with self.lock:
            items = [
                copy.deepcopy(o)
                for (plural, ns, _name), o in sorted(self.objects.items(), key=lambda kv: str(kv[0]))
                if plural == res.plural and (namespace is None or ns == namespace)
            ]
        if res is PODS and kw.get("field_selector"):
            node = kw["field_selector"].split("=", 1)[1]
            items = [p for p in items if p["spec"].get("nodeName") == node]
        return {"metadata": {"resourceVersion": str(self.version)}, "items": items}

    def create(self, res: Any, body: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
        with self.lock:
            key = self._key(res, body["metadata"]["name"], namespace)
            if key in self.objects:
                raise errors.Conflict("already exists", 409, {})
            obj = copy.deepcopy(body)
            obj["metadata"]["namespace"] = namespace
            self.objects[key] = self._bump(obj)
            self.writes.append(("create", res.plural, body["metadata"]["name"]))
            return copy.deepcopy(obj)

    def replace(self, res: Any, body: dict[str, Any], subresource: str | None = None) -> dict[str, Any]:
        with self.lock:
            meta = body["metadata"]
            key = self._key(res, meta["name"], meta.get("namespace"))
            what = (res.plural + (f"/{subresource}" if subresource else ""), meta["name"])
            if self.conflicts.get(what):
                self.conflicts[what] -= 1
                current = self.objects[key]
                current["metadata"]["annotations"] = {**(current["metadata"].get("annotations") or {}), "x": "y"}
                self._bump(current)  # someone else wrote meanwhile
            current = self.objects.get(key)
            if current is None:
                raise errors.NotFound("gone", 404, {"details": {"name": meta["name"]}})
            if meta.get("resourceVersion") != current["metadata"]["resourceVersion"]:
                raise errors.Conflict("the object has been modified", 409, {})
            new = copy.deepcopy(current)
            if subresource == "status":
                new["status"] = copy.deepcopy(body.get("status"))
            else:
                status = new.get("status")
                new = copy.deepcopy(body)
                if status is not None and res is NODE_MAINTENANCES:
                    new["status"] = status
            self.writes.append(("replace", what[0], meta["name"]))
            if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers"):
                del self.objects[key]
                return new
            self.objects[key] = self._bump(new)
            return copy.deepcopy(new)

    def patch(self, res: Any, name: str, patch: dict[str, Any], namespace: str | None = None, **kw: Any) -> dict:
        """A merge patch of a Node, as the API server: conditional when it holds metadata.resourceVersion, and
        spec.unschedulable owned (managedFields) by the field manager that last changed it."""
        assert res is NODES
        with self.lock:
            key = self._key(res, name, None)
            if self.conflicts.get(("nodes", name)):
                self.conflicts[("nodes", name)] -= 1
                other = self.objects[key]
                other["metadata"]["annotations"] = {**(other["metadata"].get("annotations") or {}), "x": "y"}
                self._bump(other)  # someone else wrote meanwhile
            current = self.objects.get(key)
            if current is None:
                raise errors.NotFound(f"nodes {name} not found", 404, {"details": {"name": name}})
            meta = dict(patch.get("metadata") or {})
            expected = meta.pop("resourceVersion", None)
            if expected is not None and expected != current["metadata"]["resourceVersion"]:
                raise errors.Conflict("the object has been modified", 409, {})
            node = copy.deepcopy(current)
            annotations = dict(node["metadata"].get("annotations") or {})
            for annotation, value in (meta.get("annotations") or {}).items():
                if value is None:
                    annotations.pop(annotation, None)
                else:
                    annotations[annotation] = value
            node["metadata"]["annotations"] = annotations
            spec = patch.get("spec") or {}
            if "unschedulable" in spec:
                before = bool(node["spec"].get("unschedulable"))
                node["spec"]["unschedulable"] = spec["unschedulable"]
                if not node["spec"]["unschedulable"]:
                    del node["spec"]["unschedulable"]
                if before != bool(spec["unschedulable"]):
                    set_unschedulable_owner(node, kw.get("field_manager") or "nodeops.maintenance")
            if kw.get("dry_run"):
                return node
            self.writes.append(("patch", "nodes", name, str(spec["unschedulable"]) if "unschedulable" in spec else "-"))
            self.objects[key] = self._bump(node)
            return copy.deepcopy(node)

    def delete(
        self,
        res: Any,
        name: str,
        namespace: str | None = None,
        *,
        uid: str | None = None,
        resource_version: str | None = None,
        **kw: Any,
    ) -> dict:
        with self.lock:
            key = self._key(res, name, namespace)
            hook = self.before_delete.pop((res.plural, name), None)
            if hook is not None:
                hook(self.objects[key])  # someone else writes (or deletes: a None hook result) just before our delete
                if hook is _deleted_meanwhile:
                    del self.objects[key]
                else:
                    self._bump(self.objects[key])
            if key not in self.objects:
                raise errors.NotFound("gone", 404, {"details": {"name": name}})
            obj = self.objects[key]
            if uid is not None and uid != obj["metadata"]["uid"]:
                raise errors.UIDMismatch("Precondition failed: UID in precondition", 409, {})
            if resource_version is not None and resource_version != obj["metadata"]["resourceVersion"]:
                raise errors.Conflict("Precondition failed: ResourceVersion in precondition", 409, {})
            self.writes.append(("delete", res.plural, name))
            if obj["metadata"].get("finalizers"):
                obj["metadata"]["deletionTimestamp"] = "2027-01-15T08:00:00Z"
                self._bump(obj)
            else:
                del self.objects[key]
            return {}

    def create_event(self, involved: dict, reason: str, message: str, event_type: str = "Normal", **kw: Any) -> dict:
        with self.lock:
            self.events.append((involved["metadata"]["name"], reason, message, event_type))
        return {}


def set_unschedulable_owner(node: dict[str, Any], manager: str) -> None:
    """managedFields after ``manager`` changed spec.unschedulable: it owns the field (while set), nobody else."""
    entries = [
        e for e in node["metadata"].get("managedFields") or [] if "f:unschedulable" not in e["fieldsV1"]["f:spec"]
    ]
    if node["spec"].get("unschedulable"):
        entries.append({"manager": manager, "operation": "Update", "fieldsV1": {"f:spec": {"f:unschedulable": {}}}})
    node["metadata"]["managedFields"] = entries


def node(name: str, unschedulable: bool = False, ready: bool = True) -> dict[str, Any]:
    status = {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    return {"metadata": {"name": name}, "spec": {"unschedulable": True} if unschedulable else {}, "status": status}


def nm(name: str, node_name: str, requestor: str = "a.example.com", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "maintenance.nvidia.com/v1alpha1",
        "kind": "NodeMaintenance",
        "metadata": {"name": name, "namespace": NS, "creationTimestamp": "2027-01-15T07:00:00Z"},
        "spec": {"nodeName": node_name, "requestorID": requestor, **spec},
    }


def phase(api: FakeApi, name: str) -> str | None:
    obj = api.obj(NODE_MAINTENANCES, name)
    return None if obj is None else lc.NodeMaintenanceView.from_dict(obj).phase


def reconciler(api: FakeApi, **options: Any) -> Reconciler:
    opts = ReconcileOptions(namespace=NS, config_namespace=NS, lease_wait=0, **options)
    return Reconciler(api, opts, clock=lambda: api.now)  # type: ignore[arg-type]


def small_cluster() -> FakeApi:
    """Three Ready nodes and the MaintenanceOperatorConfig ``default`` with no spec."""
    fake = FakeApi()
    for name in ("n0", "n1", "n2"):
        fake.add(NODES, node(name))
    fake.add(MAINTENANCE_CONFIGS, {"metadata": {"name": "default", "namespace": NS}, "spec": {}})
    return fake


@pytest.fixture
def api() -> FakeApi:
    return small_cluster()


def test_one_pass_takes_a_request_to_ready_within_the_limits(api: FakeApi) -> None:
    api.add(NODE_MAINTENANCES, nm("a", "n0"))
    api.add(NODE_MAINTENANCES, nm("b", "n1", requestor="b.example.com"))
    report = reconciler(api).run_pass()
    assert report.scheduled == [f"{NS}/a"]  # maxParallelOperations defaults to 1; a sorts first
    assert phase(api, "a") == "Ready" and phase(api, "b") == "Pending"
    assert [e[2] for e in api.events if e[0] == "a"] == [
        "Pending",
        "Scheduled",
        "Cordon",
        "WaitForPodCompletion",
        "Draining",
        "Ready",
    ]
    a = api.obj(NODE_MAINTENANCES, "a")
    assert a is not None and FINALIZER in a["metadata"]["finalizers"]
    assert a["metadata"]["annotations"][lc.READY_TIME_ANNOTATION] == lc.rfc3339(NOW)
    assert a["metadata"]["ownerReferences"][0]["name"] == "n0"
    node0 = api.obj(NODES, "n0", None)
    assert node0 is not None and node0["spec"]["unschedulable"] is True
    # the initial state is written before the cordon
    writes = [w for w in api.writes if w[0] in ("replace", "patch")]
    record = next(i for i, w in enumerate(writes) if w[:2] == ("replace", "nodemaintenances") and w[2] == "a")
    cordon = writes.index(("patch", "nodes", "n0", "True"))
    assert record < cordon
    waiting = {w["name"]: w for w in report.waiting}
    assert waiting[f"{NS}/b"]["reason"] == "no_slot"
    assert report.settled  # a is Ready, b waits for a slot

    before = len(api.writes)
    quiet = reconciler(api).run_pass()
    assert [w for w in api.writes[before:] if w[1] != "leases"] == [] and quiet.settled
    assert quiet.writes == 0


def test_release_uncordons_before_dropping_the_finalizer_and_frees_the_slot(api: FakeApi) -> None:
    api.add(NODE_MAINTENANCES, nm("a", "n0"))
    api.add(NODE_MAINTENANCES, nm("b", "n1"))
    reconciler(api).run_pass()
    api.delete(NODE_MAINTENANCES, "a", NS)
    api.writes.clear()
    report = reconciler(api).run_pass()
    assert report.released == [f"{NS}/a"] and api.obj(NODE_MAINTENANCES, "a") is None
    node0 = api.obj(NODES, "n0", None)
    assert node0 is not None and "unschedulable" not in node0["spec"]
    ours = [w for w in api.writes if w[1] != "leases"]
    assert ours.index(("patch", "nodes", "n0", "None")) < ours.index(("replace", "nodemaintenances", "a"))
    # the slot it freed goes to b in the same pass, after the release (not one pass later)
    assert report.scheduled == [f"{NS}/b"] and phase(api, "b") == "Ready"
    assert ours.index(("replace", "nodemaintenances", "a")) < ours.index(("replace", "nodemaintenances/status", "b"))


def test_conflicts_are_retried_after_a_re_read(api: FakeApi) -> None:
    api.add(NODE_MAINTENANCES, nm("a", "n0"))
    api.conflicts = {("nodemaintenances/status", "a"): 2, ("nodemaintenances", "a"): 1}
    report = reconciler(api).run_pass()
    assert report.errors == [] and phase(api, "a") == "Ready"
    a = api.obj(NODE_MAINTENANCES, "a")
    assert a is not None and a["metadata"]["annotations"]["x"] == "y", "the other writer's change is kept"
    assert [e[2] for e in api.events].count("Scheduled") == 1


def test_a_request_on_a_precordoned_node_is_left_cordoned(api: FakeApi) -> None:
    api.add(NODES, node("n2", unschedulable=True))
    api.add(NODE_MAINTENANCES, nm("c", "n2"))
    reconciler(api).run_pass()
    c = api.obj(NODE_MAINTENANCES, "c")
    assert (
        c is not None
        and c["metadata"]["annotations"]["maintenance.nvidia.com/node-initial-state.unschedulable"] == "true"
    )
    api.delete(NODE_MAINTENANCES, "c", NS)
    reconciler(api).run_pass()
    node2 = api.obj(NODES, "n2", None)
    assert node2 is not None and node2["spec"]["unschedulable"] is True
    assert not any(w[:3] == ("patch", "nodes", "n2") for w in api.writes)


def cordon_as(api: FakeApi, name: str, unschedulable: bool, manager: str = "kubectl") -> None:
    """Someone else (kubectl by default) cordons or uncordons the node."""
    api.patch(NODES, name, {"spec": {"unschedulable": True if unschedulable else None}}, field_manager=manager)


def test_the_cordon_is_a_conditional_write_decided_again_after_a_conflict(api: FakeApi) -> None:
    api.add(NODE_MAINTENANCES, nm("a", "n0"))
    api.conflicts = {("nodes", "n0"): 2}  # the node changes twice between the engine's read and its write
    report = reconciler(api).run_pass()
    assert report.errors == [] and phase(api, "a") == "Ready"
    node0 = api.obj(NODES, "n0", None)
    assert node0 is not None and node0["spec"]["unschedulable"] is True
    assert node0["metadata"]["annotations"]["x"] == "y", "the other writer's change is kept"
    assert node0["metadata"]["annotations"][CORDONED_BY_ANNOTATION] == f"NodeMaintenance {NS}/a uid-a"
    assert owns_unschedulable(node0, ENGINE_FIELD_MANAGER)
    assert [w for w in api.writes if w[1] == "nodes"] == [("patch", "nodes", "n0", "True")]


def test_a_cordon_that_meets_someone_elses_cordon_is_not_ours_to_lift(api: FakeApi) -> None:
    api.add(NODE_MAINTENANCES, nm("a", "n0"))
    original = api.patch

    def patch(res: Any, name: str, body: dict[str, Any], namespace: str | None = None, **kw: Any) -> dict:
        if kw.get("field_manager") == ENGINE_FIELD_MANAGER and not api.objects[("nodes", None, name)]["spec"]:
            cordon_as(api, name, True)  # kubectl cordon, between the engine's read of the node and its write
        return original(res, name, body, namespace, **kw)

    api.patch = patch  # type: ignore[method-assign]
    reconciler(api).run_pass()
    a = api.obj(NODE_MAINTENANCES, "a")
    assert a is not None and phase(api, "a") == "Ready"
    assert a["metadata"]["annotations"][INITIAL] == "true", "re-decided on the node read after the Conflict"
    node0 = api.obj(NODES, "n0", None)
    assert node0 is not None and CORDONED_BY_ANNOTATION not in node0["metadata"]["annotations"]
    api.delete(NODE_MAINTENANCES, "a", NS)
    report = reconciler(api).run_pass()
    assert report.released == [f"{NS}/a"] and api.obj(NODES, "n0", None)["spec"]["unschedulable"] is True  # type: ignore[index]
    assert [e[1:] for e in api.events if e[1] == lc.EVENT_LEFT_CORDONED] == [
        (lc.EVENT_LEFT_CORDONED, "node n0 was cordoned before this maintenance; it stays cordoned", "Normal")
    ]


def test_release_leaves_a_node_cordoned_again_by_someone_else_cordoned(api: FakeApi) -> None:
    api.add(NODE_MAINTENANCES, nm("a", "n0"))
    reconciler(api).run_pass()
    assert phase(api, "a") == "Ready"
    cordon_as(api, "n0", False)  # kubectl uncordon, then kubectl cordon: our marker stays, the owner changes
    cordon_as(api, "n0", True)
    api.delete(NODE_MAINTENANCES, "a", NS)
    report = reconciler(api).run_pass()
    assert report.released == [f"{NS}/a"] and api.obj(NODE_MAINTENANCES, "a") is None
    node0 = api.obj(NODES, "n0", None)
    assert node0 is not None and node0["spec"]["unschedulable"] is True
    assert CORDONED_BY_ANNOTATION not in node0["metadata"]["annotations"], "our stale marker goes"
    assert [(x["name"], x["node"]) for x in report.left_cordoned] == [(f"{NS}/a", "n0")]
    assert "set by kubectl" in report.left_cordoned[0]["message"]
    assert [(e[0], e[1], e[3]) for e in api.events if e[1] == lc.EVENT_LEFT_CORDONED] == [
        ("a", lc.EVENT_LEFT_CORDONED, "Warning")
    ]


def node_reads(api: FakeApi) -> list[str]:
    """From now on, the names of the nodes the engine reads one by one (GET), in order."""
    reads: list[str] = []
    original = api.get

    def get(res: Any, name: str, namespace: str | None = None) -> dict[str, Any]:
        if res is NODES:
            reads.append(name)
        return original(res, name, namespace)

    api.get = get  # type: ignore[method-assign]
    return reads


def refused_node_writes(api: FakeApi) -> list[str]:
    """From now on, the names of the nodes whose write the API refused with a Conflict, in order."""
    refused: list[str] = []
    original = api.patch

    def patch(res: Any, name: str, body: dict[str, Any], namespace: str | None = None, **kw: Any) -> dict:
        try:
            return original(res, name, body, namespace, **kw)
        except errors.Conflict:
            refused.append(name)
            raise

    api.patch = patch  # type: ignore[method-assign]
    return refused


def test_a_request_released_but_held_by_another_finalizer_is_not_taken_for_gone(api: FakeApi) -> None:
    api.add(NODE_MAINTENANCES, nm("a", "n0"))
    reconciler(api).run_pass()
    a = api.objects[(NODE_MAINTENANCES.plural, NS, "a")]
    a["metadata"]["finalizers"] = [*a["metadata"]["finalizers"], "example.com/other"]
    requests = Requests(api, RequestSpec("a.example.com", NS, "a", {"cordon": True}))  # type: ignore[arg-type]
    actions = requests.absent(["n0"])
    assert not requests.wait(actions, is_gone, 0, reconciler(api)), "still there: another finalizer holds it"
    assert actions[0].obj is not None and FINALIZER not in actions[0].obj["metadata"]["finalizers"]
    del api.objects[(NODE_MAINTENANCES.plural, NS, "a")]  # the other finalizer's owner lets it go
    assert requests.wait(actions, is_gone, 0, reconciler(api))


def test_the_owner_is_done_with_a_request_the_engine_keeps_for_a_requestor_that_joined_it(api: FakeApi) -> None:
    api.add(NODE_MAINTENANCES, nm("a", "n0", additionalRequestors=["b.example.com"]))
    reconciler(api).run_pass()
    owner = Requests(api, RequestSpec("a.example.com", NS, "a"))  # type: ignore[arg-type]
    actions = owner.absent(["n0"])
    assert owner.wait(actions, is_given_back, 0, reconciler(api)), "held for b.example.com: done with, for a"
    assert actions[0].obj is not None and actions[0].obj["metadata"].get("deletionTimestamp")
    assert not is_gone(actions[0]), "not gone: a wait for the node to be back (node_maintenance) goes on"
    assert api.objects[(NODES.plural, None, "n0")]["spec"].get("unschedulable") is True


def test_a_wait_for_ready_looks_at_the_requests_afresh_after_each_pass(api: FakeApi) -> None:
    """A pass shows a request it did not write as it listed it: good enough to see one go (it is looked at again
    after the next pass), not to call one Ready."""
    requests = Requests(api, RequestSpec("a.example.com", NS, "a", {"cordon": True}))  # type: ignore[arg-type]
    actions = requests.present(["n0"])
    looked: list[str] = []
    original = api.get

    def get(res: Any, name: str, namespace: str | None = None) -> dict[str, Any]:
        if res is NODE_MAINTENANCES:
            looked.append(name)
        return original(res, name, namespace)

    api.get = get  # type: ignore[method-assign]
    assert requests.wait(actions, is_ready, 0, reconciler(api))
    assert looked == [actions[0].name], "read after the pass"


def stale_node_list(api: FakeApi, name: str, change: Any) -> None:
    """The next list of the Nodes shows ``name`` as it was before ``change(api)``, which is made right after it."""
    original = api.list

    def listed(res: Any, namespace: str | None = None, **kw: Any) -> dict[str, Any]:
        result = original(res, namespace, **kw)
        if res is NODES:
            api.list = original  # type: ignore[method-assign]
            change(api)
        return result

    api.list = listed  # type: ignore[method-assign]


def test_a_cordon_and_a_release_that_write_the_node_are_decided_on_the_listed_node(api: FakeApi) -> None:
    api.add(NODE_MAINTENANCES, nm("a", "n0"))
    reads = node_reads(api)
    reconciler(api).run_pass()
    assert phase(api, "a") == "Ready" and api.obj(NODES, "n0", None)["spec"]["unschedulable"] is True  # type: ignore[index]
    api.delete(NODE_MAINTENANCES, "a", NS)
    assert reconciler(api).run_pass().released == [f"{NS}/a"]
    assert "unschedulable" not in api.obj(NODES, "n0", None)["spec"]  # type: ignore[index]
    assert reads == [], "a write conditional on the listed node's resourceVersion needs no read of its own"


def test_a_release_decided_on_a_node_listed_before_someone_cordoned_it_again_is_decided_again(api: FakeApi) -> None:
    api.add(NODE_MAINTENANCES, nm("a", "n0"))
    reconciler(api).run_pass()
    api.delete(NODE_MAINTENANCES, "a", NS)
    reads = node_reads(api)
    refused = refused_node_writes(api)
    # kubectl uncordon, then kubectl cordon, after the pass listed the node (as cordoned by us)
    stale_node_list(api, "n0", lambda a: (cordon_as(a, "n0", False), cordon_as(a, "n0", True)))
    report = reconciler(api).run_pass()
    assert refused == ["n0"], "the uncordon decided on the listed node was refused: it carried its resourceVersion"
    assert report.released == [f"{NS}/a"] and reads == ["n0"], "then the node was read and the release decided again"
    node0 = api.obj(NODES, "n0", None)
    assert node0 is not None and node0["spec"]["unschedulable"] is True, "kubectl's cordon stays"
    assert [(x["name"], x["node"]) for x in report.left_cordoned] == [(f"{NS}/a", "n0")]


def test_a_step_that_leaves_the_node_alone_is_decided_on_the_node_read_afresh(api: FakeApi) -> None:
    cordon_as(api, "n0", True)  # cordoned by kubectl when the pass lists it, uncordoned right after
    api.add(NODE_MAINTENANCES, nm("a", "n0"))
    reads = node_reads(api)
    stale_node_list(api, "n0", lambda a: cordon_as(a, "n0", False))
    reconciler(api).run_pass()
    assert reads == ["n0"]
    a = api.obj(NODE_MAINTENANCES, "a")
    assert a is not None and a["metadata"]["annotations"][INITIAL] == "false", "not taken for someone else's cordon"
    node0 = api.obj(NODES, "n0", None)
    assert node0 is not None and node0["spec"]["unschedulable"] is True, "cordoned by this maintenance"
    assert node0["metadata"]["annotations"][CORDONED_BY_ANNOTATION] == f"NodeMaintenance {NS}/a uid-a"


def test_garbage_collection_and_the_ignore_annotation(api: FakeApi) -> None:
    api.add(
        MAINTENANCE_CONFIGS,
        {
            "metadata": {"name": "default", "namespace": NS},
            "spec": {"maxParallelOperations": 2, "maxNodeMaintenanceTimeSeconds": 60},
        },
    )
    api.add(NODE_MAINTENANCES, nm("a", "n0"))
    keep = nm("k", "n1")
    keep["metadata"]["annotations"] = {lc.GC_IGNORE_ANNOTATION: "true"}
    api.add(NODE_MAINTENANCES, keep)
    reconciler(api).run_pass()
    assert phase(api, "a") == "Ready" and phase(api, "k") == "Ready"
    api.now = NOW + 61
    report = reconciler(api).run_pass()
    assert report.collected == [f"{NS}/a"] and report.released == [f"{NS}/a"]
    assert api.obj(NODE_MAINTENANCES, "a") is None and phase(api, "k") == "Ready"


def _deleted_meanwhile(_obj: dict[str, Any]) -> None:
    """A before_delete hook: someone else deletes the object just before our delete."""


def test_garbage_collection_of_a_request_deleted_meanwhile_is_no_error(api: FakeApi) -> None:
    api.add(
        MAINTENANCE_CONFIGS,
        {
            "metadata": {"name": "default", "namespace": NS},
            "spec": {"maxParallelOperations": 2, "maxNodeMaintenanceTimeSeconds": 60},
        },
    )
    api.add(NODE_MAINTENANCES, nm("a", "n0"))
    reconciler(api).run_pass()
    api.now = NOW + 61
    api.before_delete[("nodemaintenances", "a")] = _deleted_meanwhile
    report = reconciler(api).run_pass()
    assert report.errors == [] and report.collected == []
    assert api.obj(NODE_MAINTENANCES, "a") is None


def test_garbage_collection_decides_again_when_the_request_changed_meanwhile(api: FakeApi) -> None:
    api.add(
        MAINTENANCE_CONFIGS,
        {
            "metadata": {"name": "default", "namespace": NS},
            "spec": {"maxParallelOperations": 2, "maxNodeMaintenanceTimeSeconds": 60},
        },
    )
    api.add(NODE_MAINTENANCES, nm("a", "n0"))
    reconciler(api).run_pass()
    api.now = NOW + 61

    def keep(obj: dict[str, Any]) -> None:  # its owner marks it to be kept after the pass read it
        obj["metadata"]["annotations"] = {**(obj["metadata"].get("annotations") or {}), lc.GC_IGNORE_ANNOTATION: "true"}

    api.before_delete[("nodemaintenances", "a")] = keep
    report = reconciler(api).run_pass()
    assert report.collected == [] and ("delete", "nodemaintenances", "a") not in api.writes
    assert phase(api, "a") == "Ready"


def test_requestor_failed_is_mirrored(api: FakeApi) -> None:
    api.add(NODE_MAINTENANCES, nm("a", "n0"))
    reconciler(api).run_pass()
    obj = api.objects[("nodemaintenances", NS, "a")]
    obj["status"]["conditions"].append({"type": "RequestorFailed", "status": "True", "reason": "FailedMaintenance"})
    report = reconciler(api).run_pass()
    assert phase(api, "a") == "RequestorFailed"
    assert report.advanced == [{"name": f"{NS}/a", "node": "n0", "from": "Ready", "to": "RequestorFailed"}]


def test_node_gone_drops_the_finalizer(api: FakeApi) -> None:
    api.add(NODE_MAINTENANCES, nm("a", "n0"))
    reconciler(api).run_pass()
    del api.objects[("nodes", None, "n0")]
    report = reconciler(api).run_pass()
    assert report.released == [f"{NS}/a"]
    a = api.obj(NODE_MAINTENANCES, "a")
    assert a is not None and FINALIZER not in a["metadata"]["finalizers"]


def test_check_mode_takes_no_lease_and_writes_nothing(api: FakeApi) -> None:
    api.add(NODE_MAINTENANCES, nm("a", "n0"))
    report = reconciler(api).run_pass(check_mode=True)
    assert report.scheduled == [f"{NS}/a"] and api.writes == [] and api.events == []


def test_a_held_lease_makes_the_pass_busy(api: FakeApi) -> None:
    api.add(NODE_MAINTENANCES, nm("a", "n0"))
    other = Lease(api, "nodeops-maintenance-reconcile", NS, "other", 60, clock=lambda: api.now)  # type: ignore[arg-type]
    assert other.try_acquire()
    report = reconciler(api).run_pass()
    assert report.busy and report.holder == "other" and phase(api, "a") == ""
    api.now += 61  # expired: taken over
    assert reconciler(api).run_pass().scheduled == [f"{NS}/a"]
    lease = api.obj(LEASES, "nodeops-maintenance-reconcile")
    assert lease is not None and lease["spec"]["holderIdentity"] is None  # released after the pass
    assert lease["spec"]["leaseTransitions"] == 1


def test_lease_acquire_renew_release() -> None:
    api = FakeApi()
    a = Lease(api, "l", NS, "a", 30, clock=lambda: api.now)  # type: ignore[arg-type]
    b = Lease(api, "l", NS, "b", 30, clock=lambda: api.now)  # type: ignore[arg-type]
    assert a.try_acquire() and not b.try_acquire() and b.holder == "a"
    api.now += 20
    assert a.renew()
    api.now += 20  # 40 s after the acquisition, 20 s after the renewal: still a's
    assert not b.try_acquire()
    a.release()
    assert b.try_acquire()
    lease = api.obj(LEASES, "l")
    assert lease is not None and lease["spec"]["renewTime"] == micro_time(api.now)
    assert not a.renew()


def test_until_settled_stops_when_settled(api: FakeApi) -> None:
    api.add(NODE_MAINTENANCES, nm("a", "n0"))
    reports, outcome = reconcile_until_settled(reconciler(api), timeout=5, interval=0.01)
    assert outcome == SETTLED and len(reports) == 1


# -- node_maintenance's requests (engines/requests.py) ---------------------------------------------
def test_requests_create_join_leave_and_delete(api: FakeApi) -> None:
    a = Requests(api, RequestSpec("a.example.com", NS, "a", {"cordon": True}))  # type: ignore[arg-type]
    b = Requests(api, RequestSpec("b.example.com", NS, "b", {"cordon": True}))  # type: ignore[arg-type]
    with pytest.raises(RequestError, match="nope not found"):
        a.present(["n0", "nope"])
    assert api.writes == []
    check = Requests(api, RequestSpec("a.example.com", NS, "a", {}), check_mode=True)  # type: ignore[arg-type]
    assert [x.action for x in check.present(["n0"])] == ["created"] and api.writes == []

    assert [x.action for x in a.present(["n0", "n1"])] == ["created", "created"]
    assert [x.action for x in a.present(["n0"])] == ["unchanged"]
    api.conflicts = {("nodemaintenances", "a-n0"): 1}  # another writer came first: re-read and retry
    joined = b.present(["n0"])
    assert [x.action for x in joined] == ["joined"]
    obj = api.obj(NODE_MAINTENANCES, "a-n0")
    assert obj is not None and obj["spec"]["additionalRequestors"] == ["b.example.com"]
    assert obj["metadata"]["annotations"]["x"] == "y"
    assert [x.action for x in b.present(["n0"])] == ["unchanged"]
    assert [x.action for x in a.present(["n0"])] == ["unchanged"]  # the owner is not listed twice
    assert not is_ready(joined[0])

    released = a.absent(["n0", "n1", "n2"])
    assert [x.action for x in released] == ["deleted", "deleted", "absent"]
    assert api.obj(NODE_MAINTENANCES, "a-n1") is None  # no finalizer yet: gone at once
    assert api.obj(NODE_MAINTENANCES, "a-n0") is None
    a.refresh(released)
    assert all(is_gone(x) for x in released)


def test_requests_waiting_their_turn_are_looked_at_on_the_passs_own_thread(api: FakeApi) -> None:
    for index in range(12):
        api.add(NODES, node(f"w{index}"))
        api.add(NODE_MAINTENANCES, nm(f"r{index:02d}", f"w{index}"))
    api.objects[(MAINTENANCE_CONFIGS.plural, NS, "default")]["spec"] = {"maxParallelOperations": 2}
    r = reconciler(api, workers=4)
    r.run_pass()  # every request gets its status (Pending); two are taken to Ready
    threads: dict[str, int] = {}
    advance = r._advance

    def spy(obj: dict[str, Any], *args: Any) -> Any:
        threads[obj["metadata"]["name"]] = threading.get_ident()
        return advance(obj, *args)

    r._advance = spy  # type: ignore[method-assign]
    api.writes.clear()
    report = r.run_pass()
    waiting = {w["name"]: w["reason"] for w in report.waiting}
    assert len(waiting) == 10 and set(waiting.values()) == {"no_slot"}
    assert {threads[name.split("/")[1]] for name in waiting} == {threading.get_ident()}
    assert len(report.requests) == 12 and report.settled
    assert [w for w in api.writes if w[1] != "leases"] == []


def test_a_request_whose_creation_lost_its_answer_is_reported_as_created(api: FakeApi) -> None:
    """The client sends a creation again when the first got no answer; the API server refuses it (the first made
    the object), and the object found then is the one this task created."""
    create = api.create

    def answer_lost(res: Any, body: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
        create(res, body, namespace)
        refused = errors.Conflict("already exists", 409, {})
        refused.after_lost_answer = True
        raise refused

    api.create = answer_lost  # type: ignore[method-assign]
    requests = Requests(api, RequestSpec("a.example.com", NS, "a", {"cordon": True}))  # type: ignore[arg-type]
    assert [(x.action, x.name) for x in requests.present(["n0"])] == [("created", "a-n0")]
    assert [w for w in api.writes if w[0] == "create"] == [("create", NODE_MAINTENANCES.plural, "a-n0")]
    assert [(x.action, x.name) for x in requests.present(["n0"])] == [("unchanged", "a-n0")], "then unchanged"


def test_a_large_release_lists_the_requests_once_and_looks_at_them_again_with_one_list(api: FakeApi) -> None:
    a = Requests(api, RequestSpec("a.example.com", NS, "a"))  # type: ignore[arg-type]
    nodes = [f"w{index:02d}" for index in range(REFRESH_BY_LIST + 2)]
    for name in nodes:
        api.add(NODES, node(name))
    a.present(nodes)
    for name in nodes[:3]:  # held by a finalizer: still there, being deleted, after the release
        obj = api.objects[(NODE_MAINTENANCES.plural, NS, f"a-{name}")]
        obj["metadata"]["finalizers"] = [FINALIZER]
    calls: list[str] = []
    list_, get = api.list, api.get
    api.list = lambda res, *args, **kw: calls.append(f"list {res.plural}") or list_(res, *args, **kw)  # type: ignore[method-assign]
    api.get = lambda res, *args, **kw: calls.append(f"get {res.plural}") or get(res, *args, **kw)  # type: ignore[method-assign]
    released = a.absent(nodes)
    assert [x.action for x in released] == ["deleted"] * len(nodes)
    assert calls.count("list nodemaintenances") == 1
    calls.clear()
    a.refresh(released)
    assert calls == ["list nodemaintenances"]
    assert [x.obj is not None for x in released] == [True] * 3 + [False] * (len(nodes) - 3)
    assert all(x.obj["metadata"].get("deletionTimestamp") for x in released[:3])  # type: ignore[index]
    assert not any(is_gone(x) for x in released[:3]) and all(is_gone(x) for x in released[3:])
    calls.clear()
    a.refresh(released[:3])  # a few: a GET each
    assert calls == ["get nodemaintenances"] * 3


def test_a_joined_requestor_leaves_a_request_being_deleted(api: FakeApi) -> None:
    body = nm("shared", "n0", additionalRequestors=["b.example.com"])
    body["metadata"]["finalizers"] = [FINALIZER]
    api.add(NODE_MAINTENANCES, body)
    api.delete(NODE_MAINTENANCES, "shared", NS)
    owner = Requests(api, RequestSpec("a.example.com", NS, "a"))  # type: ignore[arg-type]
    assert [x.action for x in owner.absent(["n0"])] == ["deleting"]  # deleted already: no second delete
    b = Requests(api, RequestSpec("b.example.com", NS, "b"))  # type: ignore[arg-type]
    assert [x.action for x in b.absent(["n0"])] == ["left"]
    obj = api.obj(NODE_MAINTENANCES, "shared")
    assert obj is not None and obj["spec"]["additionalRequestors"] == []


def test_the_owner_never_deletes_a_request_of_the_same_name_made_since_by_another(api: FakeApi) -> None:
    api.add(NODE_MAINTENANCES, nm("a-n0", "n0"))

    def replaced(obj: dict[str, Any]) -> None:  # deleted and made again by another requestor meanwhile
        obj["metadata"]["uid"] = "uid-theirs"
        obj["spec"]["requestorID"] = "c.example.com"

    api.before_delete[("nodemaintenances", "a-n0")] = replaced
    a = Requests(api, RequestSpec("a.example.com", NS, "a"))  # type: ignore[arg-type]
    assert [x.action for x in a.absent(["n0"])] == ["absent"]  # not reported as deleted: it was not
    obj = api.obj(NODE_MAINTENANCES, "a-n0")
    assert obj is not None and obj["spec"]["requestorID"] == "c.example.com", "theirs was deleted"
    assert ("delete", "nodemaintenances", "a-n0") not in api.writes


# -- a pass writes only while it can show it holds the Lease -----------------------------------------
class Mono:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_pass_stops_writing_once_its_hold_on_the_lease_runs_out(api: FakeApi) -> None:
    for index in range(3):
        api.add(NODE_MAINTENANCES, nm(f"r{index}", f"n{index}"))
    rec = reconciler(api, lease_duration=60, workers=1)
    mono = Mono()
    rec.lease.monotonic = mono
    writes_before_pause: list[int] = []
    original = api.replace

    def replace(res: Any, body: dict[str, Any], subresource: str | None = None) -> dict[str, Any]:
        result = original(res, body, subresource)
        if res is NODE_MAINTENANCES and not writes_before_pause:
            # the process is paused here (SIGSTOP, a long GC) for longer than the Lease's time
            writes_before_pause.append(len([w for w in api.writes if w[1] != "leases"]))
            mono.now += 60
        return result

    api.replace = replace  # type: ignore[method-assign]
    report = rec.run_pass()
    # nothing was written after the pause but the Lease's release
    assert writes_before_pause and len([w for w in api.writes if w[1] != "leases"]) == writes_before_pause[0]
    assert api.events == []
    assert report.lease_lost and not report.settled
    assert any("stopped writing" in warning for warning in report.warnings)


def test_a_renewal_that_keeps_meeting_conflicts_gives_up() -> None:
    api = FakeApi()
    lease = Lease(api, "l", NS, "a", 30, clock=lambda: api.now)  # type: ignore[arg-type]
    assert lease.try_acquire()
    api.conflicts[("leases", "l")] = 1_000
    assert not lease.renew() and not lease.held
    assert api.conflicts[("leases", "l")] == 1_000 - 3


def test_until_settled_rides_out_an_unreachable_api_and_gives_the_lease_up_when_it_is_back(api: FakeApi) -> None:
    api.add(NODE_MAINTENANCES, nm("a", "n0"))
    rec = reconciler(api)
    outage = {"lists": 3}
    original = api.list

    def flaky_list(res: Any, namespace: str | None = None, **kw: Any) -> dict[str, Any]:
        if res is NODE_MAINTENANCES and outage["lists"] > 0:
            outage["lists"] -= 1
            raise errors.Unreachable("connection refused", None, {})
        return original(res, namespace, **kw)

    api.list = flaky_list  # type: ignore[method-assign]
    reports, outcome = reconcile_until_settled(rec, timeout=60, interval=0.01)
    assert outcome == SETTLED and len(reports) == 4 and not reports[-1].errors
    assert [r.errors[0]["reason"] for r in reports[:3]] == ["unreachable"] * 3
    lease = api.obj(LEASES, "nodeops-maintenance-reconcile")
    assert lease is not None and lease["spec"]["holderIdentity"] is None  # given up after every pass


def test_until_settled_does_not_hide_a_permanent_error(api: FakeApi) -> None:
    api.add(NODE_MAINTENANCES, nm("a", "n0"))

    def forbidden(*args: Any, **kw: Any) -> dict[str, Any]:
        raise errors.Forbidden("no list of nodemaintenances", 403, {})

    api.list = forbidden  # type: ignore[method-assign]
    with pytest.raises(errors.Forbidden):
        reconcile_until_settled(reconciler(api), timeout=60, interval=0.01)


class Passes:
    """Reconcile passes on a fake clock: each takes ``pass_seconds`` and reports what ``settle_at`` says (the
    pass from which on it is settled); the waits between passes move the clock too."""

    def __init__(self, pass_seconds: float, settle_at: int = 10**6, changed: bool = True) -> None:
        self.now, self.pass_seconds, self.settle_at, self.changed = 0.0, pass_seconds, settle_at, changed
        self.passes = 0
        self.waits: list[float] = []

    def run_pass(self) -> PassReport:
        self.now += self.pass_seconds
        self.passes += 1
        settled = self.passes >= self.settle_at
        return PassReport(settled=settled, moving=[] if settled else ["ns/a (Draining)"], writes=int(self.changed))

    def clock(self) -> float:
        return self.now

    def wait(self, seconds: float) -> bool:
        self.waits.append(seconds)
        self.now += seconds
        return False


def settle(passes: Passes, timeout: float, hand_back_after: float, interval: float = 5.0) -> tuple[int, str]:
    reports, outcome = reconcile_until_settled(
        passes,  # type: ignore[arg-type]
        timeout,
        interval=interval,
        clock=passes.clock,
        stop=passes,  # type: ignore[arg-type]
        hand_back_after=hand_back_after,
    )
    return len(reports), outcome


def test_until_settled_hands_its_passes_back_after_the_given_time() -> None:
    assert settle(Passes(4.0), timeout=300, hand_back_after=10) == (3, HANDED_BACK)  # at 12 s
    assert settle(Passes(4.0, settle_at=2), timeout=300, hand_back_after=10) == (2, SETTLED)
    assert settle(Passes(4.0), timeout=10, hand_back_after=30) == (3, TIMED_OUT)
    assert settle(Passes(4.0), timeout=40, hand_back_after=0) == (10, TIMED_OUT)  # 0: never handed back


def test_until_settled_makes_one_pass_even_with_no_time_left() -> None:
    """A call that goes on with passes handed back when the settle timeout has just run out still looks once."""
    assert settle(Passes(4.0), timeout=0, hand_back_after=10) == (1, TIMED_OUT)
    assert settle(Passes(4.0, settle_at=1), timeout=0, hand_back_after=10) == (1, SETTLED)


def test_the_wait_between_passes_ends_at_the_hand_back() -> None:
    """Passes that move nothing wait between them, but never past the time the progress is due."""
    passes = Passes(1.0, changed=False)
    assert settle(passes, timeout=300, hand_back_after=12, interval=5.0) == (3, HANDED_BACK)
    assert passes.waits == [5.0, 5.0] and passes.now == 13.0
    passes = Passes(1.0, changed=False)
    # the wait ends at 9 s, and a last pass sees the state the line describes
    assert settle(passes, timeout=300, hand_back_after=9, interval=5.0) == (3, HANDED_BACK)
    assert passes.waits == [5.0, 2.0] and passes.now == 10.0


def test_a_holder_s_steps_do_not_wait_for_their_events_and_all_are_sent_in_order_within_the_hold(
    api: FakeApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    api.add(NODE_MAINTENANCES, nm("a", "n0"))
    api.add(NODE_MAINTENANCES, nm("b", "n1"))
    limits = {"maxParallelOperations": 2}
    api.add(MAINTENANCE_CONFIGS, {"metadata": {"name": "default", "namespace": NS}, "spec": limits})
    sent = threading.Event()
    send = api.create_event

    def held_back(*args: Any, **kwargs: Any) -> dict:
        assert sent.wait(60)
        lease = api.obj(LEASES, ReconcileOptions().lease_name)
        assert lease is not None and lease["spec"].get("holderIdentity"), "an event sent after the Lease was given up"
        return send(*args, **kwargs)

    monkeypatch.setattr(api, "create_event", held_back)
    holder = reconciler(api)
    with holder.holding() as held:
        assert held
        holder.run_pass()
        # both moved to Ready while none of their events could be sent
        assert phase(api, "a") == "Ready" and phase(api, "b") == "Ready" and api.events == []
        sent.set()
    # the hold ended once every event was sent, each request's in the order of its steps
    chain = ["Pending", "Scheduled", "Cordon", "WaitForPodCompletion", "Draining", "Ready"]
    assert [e[2] for e in api.events if e[0] == "a"] == chain and [e[2] for e in api.events if e[0] == "b"] == chain
    lease = api.obj(LEASES, ReconcileOptions().lease_name)
    assert lease is None or not (lease.get("spec") or {}).get("holderIdentity")


def test_a_pass_s_workers_take_the_releases_first_then_the_new_requests_in_the_scheduler_s_order(api: FakeApi) -> None:
    api.add(NODES, node("n3"))
    limits = {"maxParallelOperations": 3}
    api.add(MAINTENANCE_CONFIGS, {"metadata": {"name": "default", "namespace": NS}, "spec": limits})
    api.add(NODE_MAINTENANCES, nm("z-done", "n0"))
    reconciler(api).run_pass()
    api.delete(NODE_MAINTENANCES, "z-done", NS)  # its requestor gives it back
    # listed after it and after each other by name, ranked before it by the scheduler (created first)
    for name, node_name, created in (("b-new", "n2", "2020-01-01T00:00:00Z"), ("c-new", "n1", "2019-01-01T00:00:00Z")):
        request = nm(name, node_name)
        request["metadata"]["creationTimestamp"] = created
        api.add(NODE_MAINTENANCES, request)
    api.writes.clear()
    report = reconciler(api, workers=1).run_pass()  # one worker: the order of its queue is the order of the writes
    assert report.released == [f"{NS}/z-done"] and sorted(report.scheduled) == [f"{NS}/b-new", f"{NS}/c-new"]
    ours = [w[2] for w in api.writes if w[1] in ("nodes", "nodemaintenances", "nodemaintenances/status")]
    first_of = {name: ours.index(name) for name in ("n0", "z-done", "b-new", "c-new")}
    assert first_of["n0"] < first_of["c-new"] and first_of["z-done"] < first_of["c-new"] < first_of["b-new"]


def _in_progress_and_unavailable(api: FakeApi) -> tuple[int, int]:
    """Requests holding their node (in progress, not released), and nodes unavailable (cordoned or not Ready)."""
    held = 0
    for (plural, _ns, _name), obj in api.objects.items():
        if plural != NODE_MAINTENANCES.plural:
            continue
        view = lc.NodeMaintenanceView.from_dict(obj)
        if view.phase not in ("", lc.PHASE_PENDING) and (view.finalizer or not view.deleting):
            held += 1
    down = 0
    for (plural, _ns, _name), obj in api.objects.items():
        if plural == NODES.plural:
            ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in obj["status"]["conditions"])
            down += bool((obj.get("spec") or {}).get("unschedulable")) or not ready
    return held, down


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.sampled_from(["ok", "cordoned", "not_ready"]), min_size=2, max_size=7),
    st.integers(1, 4),
    st.integers(0, 5),
    st.data(),
)
def test_a_pass_that_gives_the_slots_of_its_releases_to_the_next_requests_never_exceeds_the_limits(
    kinds: list[str], mpo: int, max_unavailable: int, data: st.DataObject
) -> None:
    api = FakeApi()
    names = [f"n{i}" for i in range(len(kinds))]
    for name, kind in zip(names, kinds, strict=True):
        api.add(NODES, node(name, unschedulable=kind == "cordoned", ready=kind != "not_ready"))
    limits = {"maxParallelOperations": mpo, "maxUnavailable": max_unavailable}
    api.add(MAINTENANCE_CONFIGS, {"metadata": {"name": "default", "namespace": NS}, "spec": limits})
    first = data.draw(st.lists(st.sampled_from(names), unique=True), label="requested first")
    for index, name in enumerate(first):
        request = nm(f"r-{name}", name)
        request["metadata"]["creationTimestamp"] = f"2027-01-15T07:00:{index:02d}Z"
        api.add(NODE_MAINTENANCES, request)
    reconciler(api).run_pass()
    ready = sorted(n for n in first if phase(api, f"r-{n}") == "Ready")
    for name in data.draw(st.lists(st.sampled_from(ready), unique=True) if ready else st.just([]), label="given back"):
        api.delete(NODE_MAINTENANCES, f"r-{name}", NS)
    rest = [n for n in names if n not in first]
    later = data.draw(st.lists(st.sampled_from(rest), unique=True) if rest else st.just([]), label="requested later")
    for index, name in enumerate(later):
        request = nm(f"r-{name}", name)
        request["metadata"]["creationTimestamp"] = f"2027-01-15T07:01:{index:02d}Z"
        api.add(NODE_MAINTENANCES, request)
    held_before, down_before = _in_progress_and_unavailable(api)
    report = reconciler(api, workers=data.draw(st.integers(1, 3), label="workers")).run_pass()
    held_after, down_after = _in_progress_and_unavailable(api)
    assert report.errors == []
    assert held_after <= max(mpo, held_before)
    assert down_after <= max(max_unavailable, down_before)
    # and it gave the slots the releases freed in the same pass: the next pass has nothing left to schedule
    assert reconciler(api).run_pass().scheduled == []
