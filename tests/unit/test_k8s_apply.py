"""plugins/module_utils/k8s/apply.py without an API server: manifests, change detection, waiting."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s import errors
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.apply import (
    Applier,
    ApplyError,
    ManifestError,
    comparable,
    crd_kinds,
    crd_state,
    load_manifests,
    really_changed,
    without_managed_fields,
)
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.client import (
    CRDS,
    KNOWN_RESOURCES,
    Resource,
)

CONFIGMAPS = Resource("v1", "configmaps", namespaced=True, kind="ConfigMap")
WIDGETS = Resource("example.com/v1", "widgets", namespaced=True, kind="Widget")


def cm(name: str = "c", namespace: str | None = "ns", **data: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": dict(data)}


def crd(group: str = "example.com", kind: str = "Widget", plural: str = "widgets") -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural},
            "versions": [{"name": "v1", "served": True, "storage": True}],
        },
    }


class FakeClient:
    """Objects in a dict; apply replaces the manifest's fields and bumps resourceVersion on a real change."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str | None, str], dict[str, Any]] = {}
        self.served: dict[tuple[str, str], Resource] = dict(KNOWN_RESOURCES) | {("v1", "ConfigMap"): CONFIGMAPS}
        self.calls: list[tuple[str, str, bool]] = []
        self.rv = 100
        self.crd_status: list[dict[str, Any]] = [{"type": "Established", "status": "True"}]
        self.apply_error: errors.K8sError | None = None
        self.apply_error_for: dict[str, errors.K8sError] = {}
        self.deletes_are_instant = True
        self.before_delete: Any = None  # called with the stored object just before a delete: someone else meanwhile
        self.dry_run_deletes: list[str] = []

    def _key(self, res: Resource, name: str, namespace: str | None) -> tuple[str, str | None, str]:
        return (res.plural, namespace if res.namespaced else None, name)

    def resource_for(self, api_version: str, kind: str) -> Resource:
        if (api_version, kind) not in self.served:
            raise errors.MissingResourceType(f"kind {kind} not served")
        return self.served[(api_version, kind)]

    def get(self, res: Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        self.calls.append(("get", name, False))
        obj = self.objects.get(self._key(res, name, namespace))
        if obj is None:
            raise errors.NotFound(f"{name} not found")
        obj = copy.deepcopy(obj)
        if res is CRDS:
            obj["status"] = {"conditions": self.crd_status}
        return obj

    def apply(
        self, res: Resource, body: dict[str, Any], field_manager: str = "", force: bool = True, dry_run: bool = False
    ) -> dict[str, Any]:
        name, namespace = body["metadata"]["name"], body["metadata"].get("namespace")
        self.calls.append(("apply", name, dry_run))
        if self.apply_error is not None:
            raise self.apply_error
        if name in self.apply_error_for:
            raise self.apply_error_for[name]
        if res.namespaced and namespace not in {k[2] for k in self.objects if k[0] == "namespaces"} | {"ns"}:
            raise errors.NotFound(f'namespaces "{namespace}" not found')
        key = self._key(res, name, namespace)
        current = self.objects.get(key)
        new = copy.deepcopy(body)
        new["metadata"]["managedFields"] = [{"manager": field_manager}]
        if current is not None:
            new["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            new["metadata"]["uid"] = current["metadata"]["uid"]
            if "status" in current:
                new["status"] = current["status"]
            if comparable(new) == comparable(current):
                return copy.deepcopy(current)
        self.rv += 1
        new["metadata"]["resourceVersion"] = str(self.rv)
        new["metadata"].setdefault("uid", f"uid-{self.rv}")
        if not dry_run:
            if res is CRDS:
                for kind in crd_kinds(body):
                    plural = body["spec"]["names"]["plural"]
                    self.served[kind] = Resource(kind[0], plural, True, kind[1])
            self.objects[key] = copy.deepcopy(new)
        return new

    def delete(
        self, res: Resource, name: str, namespace: str | None = None, dry_run: bool = False, *, uid: str | None = None
    ) -> dict[str, Any]:
        self.calls.append(("delete", name, dry_run))
        key = self._key(res, name, namespace)
        if self.before_delete is not None:
            self.before_delete(self.objects[key])
        if uid is not None and key in self.objects and self.objects[key]["metadata"]["uid"] != uid:
            raise errors.UIDMismatch("Precondition failed: UID in precondition", 409, {})
        if dry_run:
            self.dry_run_deletes.append(res.path(namespace, name))
            return self.objects.get(key, {})
        if key not in self.objects:
            raise errors.NotFound(f"{name} not found")
        if self.deletes_are_instant:
            return self.objects.pop(key)
        self.objects[key]["metadata"]["deletionTimestamp"] = "now"
        self.objects[key]["metadata"]["finalizers"] = ["example.com/hold"]
        return self.objects[key]


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps = 0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps += 1
        self.now += seconds


def applier(client: FakeClient, **kwargs: Any) -> Applier:
    clock = FakeClock()
    return Applier(client, clock=clock, sleep=clock.sleep, **kwargs)  # type: ignore[arg-type]


def actions(a: Applier) -> list[str]:
    return [r["action"] for r in a.results]


# -- load_manifests --------------------------------------------------------------------------
def test_load_accepts_dict_nested_lists_yaml_and_list_kind() -> None:
    text = "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: ns}\n---\n"
    list_obj = {"apiVersion": "v1", "kind": "List", "items": [cm("b"), None, cm("c")]}
    manifests = load_manifests([cm("z"), [text, [list_obj]], None])
    assert [m.name for m in manifests] == ["z", "a", "b", "c"]
    assert [m.position for m in manifests] == [1, 2, 3, 4]


def test_load_fills_the_default_namespace_without_touching_the_input() -> None:
    given = cm("a", namespace=None)
    (m,) = load_manifests(given, default_namespace="team")
    assert m.namespace == "team"
    assert "namespace" not in given["metadata"]
    (m2,) = load_manifests(cm("a", namespace="own"), default_namespace="team")
    assert m2.namespace == "own"


@pytest.mark.parametrize(
    ("definition", "message"),
    [
        ([], "holds no manifest"),
        ("", "holds no manifest"),
        ([cm("a"), 5], "definition item 2 is a int"),
        ({"kind": "ConfigMap", "metadata": {"name": "x"}}, "has no apiVersion"),
        ({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "x-"}}, "has no metadata.name"),
        ("a: [", "not valid YAML"),
    ],
)
def test_load_rejects_bad_definitions(definition: Any, message: str) -> None:
    with pytest.raises(ManifestError, match=message):
        load_manifests(definition)


# -- pure helpers ----------------------------------------------------------------------------
def test_really_changed_ignores_bookkeeping_and_status() -> None:
    before = {
        "metadata": {"name": "a", "resourceVersion": "1", "generation": 1, "managedFields": [1]},
        "spec": {"x": 1},
    }
    same_rv = copy.deepcopy(before)
    assert really_changed(before, same_rv, dry_run=False) is False
    status_only = copy.deepcopy(before) | {"status": {"phase": "Active"}}
    status_only["metadata"] = status_only["metadata"] | {"resourceVersion": "2", "managedFields": [2]}
    assert really_changed(before, status_only, dry_run=False) is False
    spec_change = copy.deepcopy(status_only) | {"spec": {"x": 2}}
    assert really_changed(before, spec_change, dry_run=False) is True
    assert really_changed(before, spec_change, dry_run=True) is True
    assert really_changed(before, same_rv | {"spec": {"x": 2}}, dry_run=True) is True
    assert really_changed(None, before, dry_run=False) is True


def test_without_managed_fields_copies() -> None:
    obj = {"metadata": {"name": "a", "managedFields": [1]}}
    assert without_managed_fields(obj) == {"metadata": {"name": "a"}}
    assert obj["metadata"]["managedFields"] == [1]
    assert without_managed_fields(None) == {}


@pytest.mark.parametrize(
    ("conditions", "state"),
    [
        ([], "pending"),
        ([{"type": "Established", "status": "False", "message": "installing"}], "pending"),
        ([{"type": "NamesAccepted", "status": "True"}, {"type": "Established", "status": "True"}], "established"),
        ([{"type": "NamesAccepted", "status": "False", "message": "name taken"}], "failed"),
    ],
)
def test_crd_state(conditions: list[dict[str, Any]], state: str) -> None:
    assert crd_state({"status": {"conditions": conditions}})[0] == state


def test_crd_kinds() -> None:
    assert crd_kinds(crd()) == {("example.com/v1", "Widget")}
    assert crd_kinds({"spec": {}}) == set()


# -- present ---------------------------------------------------------------------------------
def test_create_then_unchanged_then_updated() -> None:
    client = FakeClient()
    first = applier(client)
    first.present(load_manifests(cm("a", x="1")))
    assert actions(first) == ["created"]
    assert first.results[0] == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "a",
        "namespace": "ns",
        "changed": True,
        "action": "created",
    }
    assert first.diffs[0]["before"] == {}
    assert "managedFields" not in first.diffs[0]["after"]["metadata"]

    again = applier(client)
    again.present(load_manifests(cm("a", x="1")))
    assert actions(again) == ["unchanged"]
    assert again.diffs == []

    update = applier(client)
    update.present(load_manifests(cm("a", x="2")))
    assert actions(update) == ["updated"]
    assert update.diffs[0]["before"]["data"] == {"x": "1"}
    assert update.diffs[0]["after"]["data"] == {"x": "2"}


def test_check_mode_uses_dry_run_and_writes_nothing() -> None:
    client = FakeClient()
    a = applier(client, check_mode=True)
    a.present(load_manifests([cm("a"), crd()]))
    assert actions(a) == ["created", "created"]
    assert client.objects == {}
    assert all(dry for call, _name, dry in client.calls if call == "apply")


def test_check_mode_reports_objects_of_a_pending_crd_or_namespace_without_dry_run() -> None:
    client = FakeClient()
    widget = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "ns"}}
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "fresh"}}
    a = applier(client, check_mode=True)
    a.present(load_manifests([crd(), widget, namespace, cm("in-fresh", namespace="fresh")]))
    assert actions(a) == ["created"] * 4
    assert [name for call, name, _dry in client.calls if call == "apply"] == ["widgets.example.com", "fresh"]


def test_crd_is_waited_for_until_established() -> None:
    client = FakeClient()
    client.crd_status = []
    clock = FakeClock()
    a = Applier(client, wait_timeout=5, clock=clock, sleep=clock.sleep)  # type: ignore[arg-type]
    with pytest.raises(ApplyError, match=r"not Established within 5 s \(no Established condition yet\)") as info:
        a.present(load_manifests(crd()))
    assert "CustomResourceDefinition/widgets.example.com (definition item 1)" in info.value.msg
    assert clock.sleeps == 10  # polled every 0.5 s until the deadline

    client.crd_status = [{"type": "Established", "status": "True"}]
    widget = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "ns"}}
    b = applier(client)
    b.present(load_manifests([crd(), widget]))
    assert actions(b) == ["unchanged", "created"]


def test_crd_whose_names_are_refused_fails_at_once() -> None:
    client = FakeClient()
    client.crd_status = [{"type": "NamesAccepted", "status": "False", "message": "plural in use"}]
    with pytest.raises(ApplyError, match="cannot be served: its names were not accepted: plural in use"):
        applier(client).present(load_manifests(crd()))


def test_no_wait_skips_the_crd_poll() -> None:
    client = FakeClient()
    client.crd_status = []
    a = applier(client, wait=False)
    a.present(load_manifests(crd()))
    assert actions(a) == ["created"]


def test_errors_name_the_manifest_and_keep_earlier_results() -> None:
    client = FakeClient()
    a = applier(client)
    widget = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "ns"}}
    with pytest.raises(ApplyError) as info:
        a.present(load_manifests([cm("a"), widget]))
    assert info.value.msg.startswith("Widget/w in namespace ns (definition item 2): the API server does not serve")
    assert isinstance(info.value.cause, errors.MissingResourceType)
    assert info.value.results == []  # found by discovery before the first write
    assert not [call for call in client.calls if call[0] == "apply"]

    client.apply_error_for["b"] = errors.Invalid("The API server rejected apply ConfigMap b as invalid: bad")
    with pytest.raises(ApplyError) as info:
        applier(client).present(load_manifests([cm("a"), cm("b")]))
    assert info.value.msg.startswith("ConfigMap/b in namespace ns (definition item 2): The API server rejected")
    assert [r["name"] for r in info.value.results] == ["a"]
    del client.apply_error_for["b"]

    client.apply_error = errors.Conflict("Conflict for apply ConfigMap a: field managed by kubectl")
    with pytest.raises(ApplyError, match="set force_conflicts: true"):
        applier(client).present(load_manifests(cm("a")))
    client.apply_error = errors.Invalid("The API server rejected apply ConfigMap a as invalid: bad")
    with pytest.raises(
        ApplyError, match=r"^ConfigMap/a in namespace ns \(definition item 1\): The API server rejected"
    ):
        applier(client).present(load_manifests(cm("a")))


def test_namespaced_kind_without_namespace_fails_before_any_call() -> None:
    client = FakeClient()
    nm = {"apiVersion": "maintenance.nvidia.com/v1alpha1", "kind": "NodeMaintenance", "metadata": {"name": "x"}}
    with pytest.raises(ApplyError, match=r"NodeMaintenance is namespaced: set metadata\.namespace"):
        applier(client).present(load_manifests([cm("a"), nm]))
    assert client.calls == []
    # A kind found by discovery: still checked before the first write.
    with pytest.raises(ApplyError, match="ConfigMap is namespaced"):
        applier(client).present(load_manifests([crd(), cm("a", namespace=None)]))
    assert not [call for call in client.calls if call[0] == "apply"]


def test_cluster_scoped_objects_lose_a_namespace() -> None:
    client = FakeClient()
    a = applier(client)
    a.present(load_manifests(crd(), default_namespace="ns"))
    assert a.results[0]["namespace"] is None
    assert len(client.objects) == 1
    stored = next(iter(client.objects.values()))
    assert "namespace" not in stored["metadata"]


# -- absent ----------------------------------------------------------------------------------
def test_absent_deletes_in_reverse_order_and_is_idempotent() -> None:
    client = FakeClient()
    manifests = load_manifests([crd(), cm("a"), cm("b")])
    applier(client).present(manifests)
    a = applier(client)
    a.absent(manifests)
    assert [(r["name"], r["action"]) for r in a.results] == [
        ("b", "deleted"),
        ("a", "deleted"),
        ("widgets.example.com", "deleted"),
    ]
    assert a.diffs[0]["after"] == {}
    assert client.objects == {}
    b = applier(client)
    b.absent(manifests)
    assert actions(b) == ["absent"] * 3
    assert not any(r["changed"] for r in b.results)


def test_absent_never_deletes_an_object_made_again_since_it_was_read() -> None:
    client = FakeClient()
    applier(client).present(load_manifests(cm("a")))
    client.before_delete = lambda obj: obj["metadata"].update(uid="uid-new")  # deleted and made again meanwhile
    a = applier(client)
    with pytest.raises(ApplyError, match="made again while this task ran; nothing was deleted"):
        a.absent(load_manifests(cm("a")))
    assert len(client.objects) == 1


def test_absent_of_a_kind_that_is_not_served_is_absent() -> None:
    widget = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "ns"}}
    a = applier(FakeClient())
    a.absent(load_manifests(widget))
    assert a.results == [
        {
            "apiVersion": "example.com/v1",
            "kind": "Widget",
            "name": "w",
            "namespace": "ns",
            "changed": False,
            "action": "absent",
        }
    ]


def test_absent_in_check_mode_sends_a_dry_run_delete() -> None:
    client = FakeClient()
    applier(client).present(load_manifests(cm("a")))
    a = applier(client, check_mode=True)
    a.absent(load_manifests(cm("a")))
    assert actions(a) == ["deleted"]
    assert client.dry_run_deletes == ["/api/v1/namespaces/ns/configmaps/a"]
    assert len(client.objects) == 1


def test_absent_waits_for_finalizers_and_names_them() -> None:
    client = FakeClient()
    client.deletes_are_instant = False
    applier(client).present(load_manifests(cm("a")))
    with pytest.raises(
        ApplyError, match=r"still there 3 s after the delete \(finalizers still set: example.com/hold\)"
    ):
        applier(client, wait_timeout=3).absent(load_manifests(cm("a")))
    # Already being deleted: nothing to do, not a change.
    a = applier(client, wait=False)
    a.absent(load_manifests(cm("a")))
    assert a.results[0]["action"] == "absent"
    assert a.results[0]["changed"] is False
