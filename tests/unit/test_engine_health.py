"""engines/health.py: the pure parts (the remediation object, the status, ownership, maintenance), and whole
passes against a fake client whose writes honour their preconditions as the API server does."""

from __future__ import annotations

import contextlib
import copy
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from typing import Any

import pytest
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.node.rfc3339 import format_time
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.remediation.health import evaluate
from ansible_collections.nodeops.maintenance.plugins.module_utils.engines.health import (
    REEVALUATIONS,
    Busy,
    HealthPass,
    PassResult,
    build_status,
    evaluation_events,
    offline_pass,
    owned_by,
    remediation_object,
    skipped,
    under_maintenance,
)
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.client import Resource
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.errors import (
    Conflict,
    NotFound,
    UIDMismatch,
    Unreachable,
)
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.lease import Lease

UTC = timezone.utc  # noqa: UP017
NOW = datetime(2026, 1, 2, 3, 10, 0, tzinfo=UTC).timestamp()
REF = {
    "apiVersion": "self-node-remediation.medik8s.io/v1alpha1",
    "kind": "SelfNodeRemediationTemplate",
    "namespace": "ops",
    "name": "tpl",
}
SPEC = {
    "selector": {"matchLabels": {"pool": "a"}},
    "unhealthyConditions": [{"type": "Ready", "status": "Unknown", "duration": "60s"}],
    "minHealthy": 1,
    "remediationTemplate": REF,
}
NHC = {
    "apiVersion": "remediation.medik8s.io/v1alpha1",
    "kind": "NodeHealthCheck",
    "metadata": {"name": "n", "uid": "u1"},
}
TEMPLATE = {
    "apiVersion": REF["apiVersion"],
    "kind": REF["kind"],
    "metadata": {"name": "tpl", "namespace": "ops"},
    "spec": {"template": {"spec": {"remediationStrategy": "OutOfServiceTaint"}}},
}


def node(name: str, status: str, cp: bool = False) -> dict[str, Any]:
    labels = {"pool": "a"}
    if cp:
        labels["node-role.kubernetes.io/control-plane"] = ""
    return {
        "metadata": {"name": name, "labels": labels},
        "status": {"conditions": [{"type": "Ready", "status": status, "lastTransitionTime": "2026-01-02T03:00:00Z"}]},
    }


def test_remediation_object_as_upstream_makes_it() -> None:
    evaluation = evaluate(SPEC, [node("a", "True"), node("b", "Unknown", cp=True)], [], NOW)
    [request] = evaluation.to_remediate
    body = remediation_object(request, TEMPLATE, NHC)
    assert body["kind"] == "SelfNodeRemediation"
    assert body["metadata"]["name"] == "b" and body["metadata"]["namespace"] == "ops"
    assert body["metadata"]["annotations"] == {
        "remediation.medik8s.io/node-name": "b",
        "remediation.medik8s.io/template-name": "tpl",
    }
    assert body["metadata"]["labels"] == {
        "app.kubernetes.io/part-of": "node-healthcheck-controller",
        "remediation.medik8s.io/isControlPlaneNode": "",  # upstream's value
    }
    assert body["metadata"]["ownerReferences"][0]["uid"] == "u1"
    assert body["spec"] == {"remediationStrategy": "OutOfServiceTaint"}
    multi = {**TEMPLATE, "metadata": {**TEMPLATE["metadata"], "annotations": {}}}
    multi["metadata"]["annotations"]["remediation.medik8s.io/multiple-templates-support"] = "true"
    assert remediation_object(request, multi, NHC)["metadata"]["generateName"] == "b-"


def test_status_of_a_remediating_pass_and_its_stability() -> None:
    rem = {
        "apiVersion": "self-node-remediation.medik8s.io/v1alpha1",
        "kind": "SelfNodeRemediation",
        "metadata": {
            "name": "b",
            "namespace": "ops",
            "uid": "r1",
            "creationTimestamp": "2026-01-02T03:05:00Z",
            "annotations": {"remediation.medik8s.io/template-name": "tpl"},
        },
    }
    evaluation = evaluate(SPEC, [node("a", "True"), node("b", "Unknown")], [rem], NOW)
    status = build_status({}, evaluation, [rem], NOW)
    assert (status["observedNodes"], status["healthyNodes"], status["phase"]) == (2, 1, "Remediating")
    assert status["inFlightRemediations"] == {"b": "2026-01-02T03:05:00Z"}
    assert status["unhealthyNodes"][0]["remediations"][0]["templateName"] == "tpl"
    assert status["conditions"][0]["reason"] == "NodeHealthCheckEnabled"
    later = datetime(2026, 1, 2, 3, 11, 0, tzinfo=UTC).timestamp()
    assert build_status(status, evaluation, [rem], later) == status  # nothing changed: same times

    skipped_eval = evaluate({**SPEC, "minHealthy": 2}, [node("a", "True"), node("b", "Unknown")], [], NOW)
    assert skipped(skipped_eval)["b"]["code"] == "SkippedMinHealthy"
    disabled = build_status(status, skipped_eval, [], later, "RemediationTemplateNotFound", "template missing")
    assert disabled["phase"] == "Disabled"
    assert disabled["conditions"][0]["status"] == "True"
    assert disabled["lastUpdateTime"] == "2026-01-02T03:11:00Z"


def test_ownership_and_maintenance() -> None:
    mine = {"metadata": {"ownerReferences": [{"kind": "NodeHealthCheck", "name": "n", "uid": "u1"}]}}
    other = {"metadata": {"ownerReferences": [{"kind": "NodeHealthCheck", "name": "n", "uid": "u2"}]}}
    assert owned_by(mine, NHC) and not owned_by(other, NHC) and not owned_by({"metadata": {}}, NHC)
    nms = [
        {
            "metadata": {"name": f"m{i}", "namespace": "x"},
            "spec": {"nodeName": n, "requestorID": "r"},
            "status": {"conditions": [{"type": "Ready", "reason": reason}]},
        }
        for i, (n, reason) in enumerate([("a", "Draining"), ("b", "Pending")])
    ]
    assert under_maintenance(nms) == {"a"}


# -- whole passes against a fake API server -----------------------------------------------------------------------
CONFIRMED = "remediation.medik8s.io/manually-confirmed-healthy"
HEALTHY_DELAY = "remediation.medik8s.io/healthy-delay"
SNRS = "selfnoderemediations"
Key = tuple[str, str, str]  # (plural, namespace, name)


def merge(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """RFC 7386 JSON merge patch."""
    out = dict(target)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


class FakeClient:
    """Objects by (plural, namespace, name), each with a uid and a resourceVersion; records every write.

    The writes honour their preconditions as the API server does: a delete with ``uid`` raises UIDMismatch when
    the object of that name is another one now, with ``resource_version`` Conflict when it changed since; a merge
    patch that holds ``metadata.resourceVersion`` raises Conflict when the object changed since; a replace needs
    the resourceVersion; a create of a name taken raises Conflict (409 AlreadyExists); a write to an object gone
    raises NotFound. Without a precondition a write acts on whatever object has the name now.

    ``before(verb, key, action)`` makes someone else act just before our next ``verb`` (create, delete, patch,
    replace) of that object: what happens between our read and our write. ``preconditions`` records what each
    of our deletes and patches carried.
    """

    def __init__(self, objects: list[tuple[str, dict[str, Any]]]) -> None:
        self.store: dict[Key, dict[str, Any]] = {}
        self.version = 0
        self.uids = 0
        for plural, obj in objects:
            self.put(plural, copy.deepcopy(obj), new=True)
        self.writes: list[tuple[str, str, str]] = []
        self.preconditions: list[tuple[str, str, dict[str, str]]] = []
        self.events: list[tuple[str, str]] = []
        self.hooks: dict[tuple[str, Key], list[Callable[[], None]]] = {}
        self.until: float | None = None
        self.create_untils: list[float | None] = []  # the retry deadline each remediation create was sent under

    # someone else --------------------------------------------------------------------------------------------
    def put(self, plural: str, obj: dict[str, Any], new: bool = False) -> dict[str, Any]:
        """Store ``obj`` (as someone else, or our write): a new resourceVersion, and a new uid when ``new``."""
        meta = obj["metadata"]
        if new or not meta.get("uid"):
            self.uids += 1
            meta["uid"] = f"uid-{self.uids}"
            meta.setdefault("creationTimestamp", "2026-01-02T03:05:00Z")
        self.version += 1
        meta["resourceVersion"] = str(self.version)
        self.store[(plural, meta.get("namespace", ""), meta["name"])] = obj
        return obj

    def change(self, key: Key, change: Callable[[dict[str, Any]], None]) -> None:
        """Someone else changes the object now: it gets a new resourceVersion."""
        obj = copy.deepcopy(self.store[key])
        change(obj)
        self.put(key[0], obj)

    def before(self, verb: str, key: Key, action: Callable[[], None], times: int = 1) -> None:
        self.hooks.setdefault((verb, key), []).extend([action] * times)

    def _hook(self, verb: str, key: Key) -> None:
        if self.hooks.get((verb, key)):
            self.hooks[(verb, key)].pop(0)()

    # the client's calls --------------------------------------------------------------------------------------
    def resource_for(self, api_version: str, kind: str) -> Resource:
        return Resource(api_version, kind.lower() + "s", True, kind)

    def get(self, res: Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        key = (res.plural, namespace or "", name)
        if key not in self.store:
            raise NotFound(f"{res.plural} {name} not found", 404)
        return copy.deepcopy(self.store[key])

    def list(self, res: Resource, namespace: str | None = None, **_: Any) -> dict[str, Any]:
        items = [
            copy.deepcopy(obj)
            for (plural, ns, _name), obj in sorted(self.store.items())
            if plural == res.plural and (namespace is None or ns == namespace)
        ]
        return {"items": items}

    @contextlib.contextmanager
    def retrying_until(self, until: float | None) -> Iterator[None]:
        """The real client retries transient failures until ``until`` (never past a deadline around it); this one
        records it."""
        before = self.until
        self.until = until if before is None or until is None else min(before, until)
        try:
            yield
        finally:
            self.until = before

    def create(self, res: Resource, body: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
        if res.plural == SNRS:
            self.create_untils.append(self.until)
        obj = copy.deepcopy(body)
        meta = obj["metadata"]
        meta["namespace"] = namespace or ""
        if not meta.get("name"):
            meta["name"] = f"{meta['generateName']}{self.uids + 1:05d}"
        key = (res.plural, meta["namespace"], meta["name"])
        self._hook("create", key)
        self.writes.append(("create", res.plural, meta["name"]))
        if key in self.store:
            message = f'{res.plural} "{meta["name"]}" already exists'
            raise Conflict(message, 409, {"reason": "AlreadyExists", "message": message})
        meta.pop("creationTimestamp", None)
        return copy.deepcopy(self.put(res.plural, obj, new=True))

    def delete(
        self,
        res: Resource,
        name: str,
        namespace: str | None = None,
        dry_run: bool = False,
        propagation_policy: str | None = None,
        *,
        uid: str | None = None,
        resource_version: str | None = None,
    ) -> dict[str, Any]:
        key = (res.plural, namespace or "", name)
        self._hook("delete", key)
        self.writes.append(("delete", res.plural, name))
        given = {k: v for k, v in (("uid", uid), ("resourceVersion", resource_version)) if v}
        self.preconditions.append(("delete", name, given))
        if key not in self.store:
            raise NotFound(f"{res.plural} {name} not found", 404)
        meta = self.store[key]["metadata"]
        if uid and uid != meta["uid"]:
            message = f"Precondition failed: UID in precondition: {uid}, UID in object meta: {meta['uid']}"
            raise UIDMismatch(message, 409, {"message": message})
        if resource_version and resource_version != meta["resourceVersion"]:
            message = (
                f"Precondition failed: ResourceVersion in precondition: {resource_version}, "
                f"ResourceVersion in object meta: {meta['resourceVersion']}"
            )
            raise Conflict(message, 409, {"message": message})
        if meta.get("finalizers"):  # as the API server: marked deleted, kept until its finalizers go
            meta.setdefault("deletionTimestamp", format_time(NOW))
            return copy.deepcopy(self.store[key])
        return copy.deepcopy(self.store.pop(key))

    def patch(
        self, res: Resource, name: str, patch: dict[str, Any], namespace: str | None = None, **_: Any
    ) -> dict[str, Any]:
        key = (res.plural, namespace or "", name)
        self._hook("patch", key)
        self.writes.append(("patch", res.plural, name))
        version = (patch.get("metadata") or {}).get("resourceVersion")
        self.preconditions.append(("patch", name, {"resourceVersion": version} if version else {}))
        if key not in self.store:
            raise NotFound(f"{res.plural} {name} not found", 404)
        stored = self.store[key]
        if version and version != stored["metadata"]["resourceVersion"]:
            message = f'Operation cannot be fulfilled on {res.plural} "{name}": the object has been modified'
            raise Conflict(message, 409, {"message": message})
        return copy.deepcopy(self.put(res.plural, merge(stored, patch)))

    def replace(self, res: Resource, body: dict[str, Any], subresource: str | None = None) -> dict[str, Any]:
        meta = body["metadata"]
        key = (res.plural, meta.get("namespace", ""), meta["name"])
        self._hook("replace", key)
        self.writes.append(("replace" + (f"/{subresource}" if subresource else ""), res.plural, meta["name"]))
        assert meta.get("resourceVersion"), f"unconditional replace of {key}"
        if key not in self.store:
            raise NotFound(f"{res.plural} {meta['name']} not found", 404)
        stored = self.store[key]
        if meta["resourceVersion"] != stored["metadata"]["resourceVersion"]:
            message = f'Operation cannot be fulfilled on {res.plural} "{meta["name"]}": the object has been modified'
            raise Conflict(message, 409, {"message": message})
        new = copy.deepcopy(stored)
        if subresource == "status":
            new["status"] = copy.deepcopy(body.get("status"))
        else:
            new = {**copy.deepcopy(body), "status": stored.get("status")}
        return copy.deepcopy(self.put(res.plural, new))

    def create_event(self, involved: dict[str, Any], reason: str, message: str, event_type: str = "Normal") -> None:
        self.events.append((reason, message))


def snr(node_name: str, **annotations: str) -> dict[str, Any]:
    """The SelfNodeRemediation of ``node_name`` that NodeHealthCheck n made."""
    return {
        "apiVersion": REF["apiVersion"],
        "kind": "SelfNodeRemediation",
        "metadata": {
            "name": node_name,
            "namespace": "ops",
            "annotations": {
                "remediation.medik8s.io/node-name": node_name,
                "remediation.medik8s.io/template-name": "tpl",
                **annotations,
            },
            "ownerReferences": [{"kind": "NodeHealthCheck", "name": "n", "uid": "nhc-uid"}],
        },
        "spec": {"remediationStrategy": "OutOfServiceTaint"},
    }


def cluster(spec: dict[str, Any], nodes: list[dict[str, Any]], rems: list[dict[str, Any]]) -> FakeClient:
    nhc = {**NHC, "metadata": {"name": "n"}, "spec": spec}
    fake = FakeClient(
        [("nodehealthchecks", nhc), ("selfnoderemediationtemplates", TEMPLATE)]
        + [("nodes", n) for n in nodes]
        + [(SNRS, r) for r in rems]
    )
    fake.store[("nodehealthchecks", "", "n")]["metadata"]["uid"] = "nhc-uid"
    return fake


def run_pass(fake: FakeClient, check_mode: bool = False) -> PassResult:
    return HealthPass(fake, check_mode=check_mode).run("n", None, lambda: NOW)  # type: ignore[arg-type]


def annotations(fake: FakeClient, key: Key) -> dict[str, str]:
    return dict(fake.store[key]["metadata"].get("annotations") or {})


def test_every_write_carries_its_precondition_and_check_mode_writes_nothing() -> None:
    """One pass that creates (node b, unhealthy), deletes (node a, healthy and confirmed by hand; node c is not
    confirmed yet, so its object stays; node d is healthy) and removes the confirmation: the deletion carries the
    uid and version of the object as listed, the patch of the Node its version as read."""
    spec = {**SPEC, "healthyDelay": "-1s"}
    confirmed = node("a", "True")
    confirmed["metadata"]["annotations"] = {CONFIRMED: "true"}
    nodes = [confirmed, node("b", "Unknown"), node("c", "True"), node("d", "True")]
    fake = cluster(spec, nodes, [snr("a"), snr("c")])
    before = copy.deepcopy(fake.store)

    checked = run_pass(fake, check_mode=True)
    assert fake.store == before and fake.writes == [] and fake.events == []
    assert [c["node"] for c in checked.created] == ["b"] and [d["name"] for d in checked.deleted] == ["a"]
    assert {"RemediationCreated", "RemediationRemoved"} <= {e["reason"] for e in checked.events}

    result = run_pass(fake)
    assert result.rereads == 0
    assert [c["name"] for c in result.created] == ["b"] and [d["name"] for d in result.deleted] == ["a"]
    listed = before[(SNRS, "ops", "a")]["metadata"]
    assert fake.preconditions == [
        ("delete", "a", {"uid": listed["uid"], "resourceVersion": listed["resourceVersion"]}),
        ("patch", "a", {"resourceVersion": before[("nodes", "", "a")]["metadata"]["resourceVersion"]}),
    ]
    assert CONFIRMED not in annotations(fake, ("nodes", "", "a"))
    assert (SNRS, "ops", "a") not in fake.store and (SNRS, "ops", "b") in fake.store


def test_a_remediation_replaced_between_list_and_delete_is_not_deleted() -> None:
    """Node a is healthy and its object's healthy delay is over: delete. Meanwhile the object is deleted and made
    again (same name, new uid, no healthy-delay stamp). The deletion, decided on the old object, is refused
    (UIDMismatch); the pass reads again and decides on the new object: its healthy delay starts (marked)."""
    spec = {**SPEC, "healthyDelay": "2m"}
    fake = cluster(spec, [node("a", "True"), node("b", "True")], [snr("a", **{HEALTHY_DELAY: "2026-01-02T03:00:00Z"})])
    key = (SNRS, "ops", "a")
    listed = fake.store[key]["metadata"]["uid"]
    fake.before("delete", key, lambda: fake.put(SNRS, snr("a"), new=True))

    result = run_pass(fake)

    assert key in fake.store, "the new object of that name was deleted by a deletion decided on the old one"
    assert fake.store[key]["metadata"]["uid"] != listed
    assert result.deleted == [] and not any(e["reason"] == "RemediationRemoved" for e in result.events)
    assert result.rereads == 1
    assert result.marked == [{"node": "a", "name": "a", "annotation": HEALTHY_DELAY}]
    assert annotations(fake, key)[HEALTHY_DELAY] == "2026-01-02T03:10:00Z"
    assert result.evaluation.decision("a").code == "HealthyDelayed"


def test_a_remediation_deleted_by_someone_else_meanwhile_is_not_reported_as_deleted() -> None:
    fake = cluster(SPEC, [node("a", "True"), node("b", "True")], [snr("a")])
    key = (SNRS, "ops", "a")
    fake.before("delete", key, lambda: fake.store.pop(key) and None)

    result = run_pass(fake)

    assert result.rereads == 0  # NotFound: already gone, nothing to decide again
    assert result.deleted == [] and not any(e["reason"] == "RemediationRemoved" for e in result.events)


def test_an_annotation_patch_on_an_old_version_meets_conflict_and_the_pass_decides_again() -> None:
    """Node a is healthy again and healthyDelay is 2m: its object is to be stamped now. Meanwhile another pass
    stamped it a minute ago: our patch, on the old version, is refused; the fresh object already has its stamp,
    so the new decision is to wait (and the other pass's stamp is not overwritten)."""
    spec = {**SPEC, "healthyDelay": "2m"}
    fake = cluster(spec, [node("a", "True"), node("b", "True")], [snr("a")])
    key = (SNRS, "ops", "a")
    stamp = "2026-01-02T03:09:00Z"
    fake.before(
        "patch", key, lambda: fake.change(key, lambda o: o["metadata"]["annotations"].update({HEALTHY_DELAY: stamp}))
    )

    result = run_pass(fake)

    assert annotations(fake, key)[HEALTHY_DELAY] == stamp
    assert result.rereads == 1
    assert result.marked == [] and result.deleted == []
    assert result.evaluation.decision("a").code == "HealthyDelayed"
    assert result.evaluation.requeue_after == 61
    assert [w for w in fake.writes if w[0] == "patch"] == [("patch", SNRS, "a")]  # one refused, none after


def test_a_node_whose_annotation_changed_meanwhile_is_decided_again() -> None:
    """healthyDelay is negative and node a was confirmed healthy by hand: its object is deleted, then the
    confirmation is to be removed. Meanwhile someone confirms it again: the removal, decided on the old Node, is
    refused; the fresh read shows a healthy node without a remediation object, so nothing more is written.
    The deletion made before the Conflict stays in the result."""
    spec = {**SPEC, "healthyDelay": "-1s"}
    confirmed = node("a", "True")
    confirmed["metadata"]["annotations"] = {CONFIRMED: "true"}
    fake = cluster(spec, [confirmed, node("b", "True")], [snr("a")])
    key = ("nodes", "", "a")
    fake.before(
        "patch", key, lambda: fake.change(key, lambda o: o["metadata"]["annotations"].update({CONFIRMED: "again"}))
    )

    result = run_pass(fake)

    assert annotations(fake, key)[CONFIRMED] == "again"
    assert result.rereads == 1
    assert [d["name"] for d in result.deleted] == ["a"] and (SNRS, "ops", "a") not in fake.store
    assert [e["reason"] for e in result.events].count("RemediationRemoved") == 1
    assert result.evaluation.decision("a").code == "Healthy" and result.changed


def test_a_by_name_create_that_meets_an_existing_object_decides_again() -> None:
    """Node b is unhealthy; meanwhile another pass makes its object. Our create by name meets 409: the pass
    reads again, sees the remediation in progress and writes nothing more (no failure, nothing reported created)."""
    fake = cluster(SPEC, [node("a", "True"), node("b", "Unknown")], [])
    key = (SNRS, "ops", "b")
    fake.before("create", key, lambda: fake.put(SNRS, snr("b"), new=True) and None)

    result = run_pass(fake)

    assert result.rereads == 1
    assert result.created == [] and not any(e["reason"] == "RemediationCreated" for e in result.events)
    assert result.evaluation.decision("b").code == "Remediating"
    assert result.status is not None and result.status["phase"] == "Remediating"


def test_a_status_conflict_re_evaluates_on_the_fresh_nodehealthcheck() -> None:
    """Meanwhile the NodeHealthCheck is paused: the status, built on the old spec, is refused and the pass
    evaluates the new spec (nothing is created while paused)."""
    fake = cluster(SPEC, [node("a", "True"), node("b", "Unknown")], [snr("b")])
    key = ("nodehealthchecks", "", "n")
    fake.before("replace", key, lambda: fake.change(key, lambda o: o["spec"].update({"pauseRequests": ["upgrade"]})))

    result = run_pass(fake)

    assert result.rereads == 1
    assert fake.store[key]["status"]["phase"] == "Paused"
    assert result.evaluation.paused


def test_an_object_that_keeps_changing_fails_the_pass_after_bounded_re_evaluations() -> None:
    """Someone changes the object before each of our patches: after REEVALUATIONS new reads and evaluations the
    pass fails, naming the write refused and how often; the object was never patched on a stale version."""
    spec = {**SPEC, "healthyDelay": "2m"}
    fake = cluster(spec, [node("a", "True"), node("b", "True")], [snr("a")])
    key = (SNRS, "ops", "a")

    def relabel(obj: dict[str, Any]) -> None:
        obj["metadata"].setdefault("labels", {})["touched"] = str(len(fake.writes))

    fake.before("patch", key, lambda: fake.change(key, relabel), times=REEVALUATIONS + 1)

    with pytest.raises(Conflict) as caught:
        run_pass(fake)

    assert f"annotate SelfNodeRemediation ops/a ({HEALTHY_DELAY}) ({REEVALUATIONS + 1}x)" in caught.value.msg
    assert "kept changing" in caught.value.msg
    assert [w for w in fake.writes if w[0] == "patch"] == [("patch", SNRS, "a")] * (REEVALUATIONS + 1)
    assert HEALTHY_DELAY not in annotations(fake, key)


def test_the_timed_out_mark_carries_the_version_and_the_escalation_creates_by_generated_name() -> None:
    """Escalation with templates for multiple objects per node: node b's first object timed out; it is marked
    (conditional on its version as listed) and the next template's object is created with generateName."""
    multi = {"remediation.medik8s.io/multiple-templates-support": "true"}
    first = copy.deepcopy(TEMPLATE)
    first["metadata"]["annotations"] = multi
    second = copy.deepcopy(first)
    second["metadata"]["name"] = "tpl2"
    spec = {
        "selector": SPEC["selector"],
        "unhealthyConditions": SPEC["unhealthyConditions"],
        "minHealthy": 1,
        "escalatingRemediations": [
            {"remediationTemplate": REF, "order": 1, "timeout": "60s"},
            {"remediationTemplate": {**REF, "name": "tpl2"}, "order": 2, "timeout": "60s"},
        ],
    }
    old = snr("b")
    old["metadata"]["name"] = "b-00001"
    fake = cluster(spec, [node("a", "True"), node("b", "Unknown")], [old])
    fake.put("selfnoderemediationtemplates", first)
    fake.put("selfnoderemediationtemplates", second, new=True)
    key = (SNRS, "ops", "b-00001")
    listed = fake.store[key]["metadata"]["resourceVersion"]

    result = run_pass(fake)

    assert result.rereads == 0
    assert [(c["node"], c["name"]) for c in result.created] == [("b", f"b-{fake.uids:05d}")]
    assert result.marked == [{"node": "b", "name": "b-00001", "annotation": "remediation.medik8s.io/nhc-timed-out"}]
    assert fake.preconditions == [("patch", "b-00001", {"resourceVersion": listed})]
    assert "remediation.medik8s.io/nhc-timed-out" in annotations(fake, key)


def test_a_create_by_generated_name_is_sent_once_and_a_lost_answer_is_read_again() -> None:
    """The object is made but the answer is lost: a retry would make a second one for the node, so the create
    goes out with no retry and the pass reads again, finds it and makes no other."""
    multi = {"remediation.medik8s.io/multiple-templates-support": "true"}
    template = copy.deepcopy(TEMPLATE)
    template["metadata"]["annotations"] = multi
    fake = cluster(SPEC, [node("a", "True"), node("b", "Unknown")], [])
    fake.put("selfnoderemediationtemplates", template)
    create = fake.create
    lost = [True]

    def create_then_lose_the_answer(res: Resource, body: dict[str, Any], namespace: str | None = None) -> Any:
        made = create(res, body, namespace)
        if res.plural == SNRS and lost:
            lost.pop()
            raise Unreachable("Cannot reach the Kubernetes API: connection reset", transient=True)
        return made

    fake.create = create_then_lose_the_answer  # type: ignore[method-assign]
    before = time.monotonic()
    result = run_pass(fake)
    made = [key for key in fake.store if key[0] == SNRS]
    assert len(made) == 1, made
    assert result.rereads == 1 and result.created == []  # read again: already there, nothing more to create
    snr_untils = [u for u in fake.create_untils if u is not None]
    assert snr_untils and all(u <= time.monotonic() and u >= before for u in snr_untils), fake.create_untils


def test_a_pass_that_writes_holds_the_nodehealthchecks_lease_and_gives_it_up() -> None:
    fake = cluster(SPEC, [node("a", "True"), node("b", "Unknown")], [])
    result = run_pass(fake)
    assert result.created, "the pass had something to write"
    lease_writes = [i for i, w in enumerate(fake.writes) if w[1] == "leases"]
    other_writes = [i for i, w in enumerate(fake.writes) if w[1] != "leases"]
    assert lease_writes[0] < other_writes[0] and lease_writes[-1] > other_writes[-1], fake.writes
    lease = fake.store[("leases", "ops", "nodeops-health-n")]  # the template's namespace
    assert lease["spec"]["holderIdentity"] is None


def test_a_pass_while_another_holds_the_lease_writes_nothing_and_says_who() -> None:
    fake = cluster(SPEC, [node("a", "True"), node("b", "Unknown")], [])
    other = Lease(fake, "nodeops-health-n", "ops", "other-pass")  # type: ignore[arg-type]
    assert other.try_acquire()
    before = list(fake.writes)
    with pytest.raises(Busy, match=r"other-pass\) holds Lease ops/nodeops-health-n"):
        HealthPass(fake, lease_wait=0).run("n", None, lambda: NOW)  # type: ignore[arg-type]
    assert fake.writes == before and fake.events == []
    other.release()
    assert run_pass(fake).created  # given up: the next pass goes on


def test_check_mode_and_a_spec_given_as_data_take_no_lease() -> None:
    fake = cluster(SPEC, [node("a", "True"), node("b", "Unknown")], [])
    run_pass(fake, check_mode=True)
    HealthPass(fake).run(None, SPEC, lambda: NOW)  # type: ignore[arg-type]
    assert not [w for w in fake.writes if w[1] == "leases"] and ("leases", "ops", "nodeops-health-n") not in fake.store


def test_events_and_status_tokens_as_upstream_records_them() -> None:
    """An excluded unhealthy node gets a Warning RemediationSkipped, and the Paused reason names the requests."""
    excluded = node("b", "Unknown")
    excluded["metadata"]["labels"]["remediation.medik8s.io/exclude-from-remediation"] = "true"
    evaluation = evaluate(SPEC, [node("a", "True"), excluded, node("c", "True")], [], NOW)
    events = evaluation_events(evaluation, set())
    assert [(e["reason"], e["type"]) for e in events] == [("RemediationSkipped", "Warning")]
    assert "Node b:" in events[0]["message"]
    paused = evaluate({**SPEC, "pauseRequests": ["upgrade by alice", "ticket 42"]}, [node("a", "True")], [], NOW)
    status = build_status({}, paused, [], NOW, None, "")
    assert (status["phase"], status["reason"]) == ("Paused", "NHC is paused: upgrade by alice, ticket 42")


def test_escalation_steps_of_one_kind_without_the_multiple_templates_annotation_disable_the_check() -> None:
    """Both steps' objects would be named after the node: the second could never be made (the pass would be
    refused again and again); the NodeHealthCheck is disabled naming the template and the annotation instead."""
    spec = {k: v for k, v in SPEC.items() if k != "remediationTemplate"}
    spec["escalatingRemediations"] = [
        {"remediationTemplate": REF, "order": 0, "timeout": "5m"},
        {"remediationTemplate": {**REF, "name": "tpl2"}, "order": 1, "timeout": "10m"},
    ]
    fake = cluster(spec, [node("a", "True"), node("b", "Unknown")], [])
    fake.put(
        "selfnoderemediationtemplates", {**copy.deepcopy(TEMPLATE), "metadata": {"name": "tpl2", "namespace": "ops"}}
    )
    result = run_pass(fake)
    assert result.created == [] and not [k for k in fake.store if k[0] == SNRS]
    assert result.disabled and "remediation.medik8s.io/multiple-templates-support" in result.disabled
    status = fake.store[("nodehealthchecks", "", "n")]["status"]
    [disabled] = [c for c in status["conditions"] if c["type"] == "Disabled"]
    assert (disabled["status"], disabled["reason"]) == ("True", "RemediationTemplateInvalid")
    # with the annotation on both, the objects get generated names and the pass goes on
    for name in ("tpl", "tpl2"):
        fake.change(
            ("selfnoderemediationtemplates", "ops", name),
            lambda obj: (
                obj["metadata"]
                .setdefault("annotations", {})
                .update({"remediation.medik8s.io/multiple-templates-support": "true"})
            ),
        )
    again = run_pass(fake)
    assert again.disabled is None and [c["node"] for c in again.created] == ["b"]


def test_a_paused_check_leaves_what_its_status_says_of_the_nodes_as_it_was() -> None:
    """As upstream: a paused check stops before it looks at the nodes; its status does not list the unhealthy node
    it leaves alone, and the counts stay those of the last pass that was not paused."""
    old = {"observedNodes": 3, "healthyNodes": 3, "unhealthyNodes": []}
    nodes = [node("a", "True"), node("b", "True"), node("c", "Unknown")]
    paused = offline_pass({**SPEC, "pauseRequests": ["upgrade"]}, nodes, [], NOW, status=old)
    assert not paused.created
    assert paused.status is not None
    assert (paused.status["phase"], paused.status["reason"]) == ("Paused", "NHC is paused: upgrade")
    assert {k: paused.status.get(k) for k in old} == old
    assert "inFlightRemediations" not in paused.status
    resumed = offline_pass(SPEC, nodes, [], NOW, status=paused.status)
    assert resumed.status is not None and [u["name"] for u in resumed.status["unhealthyNodes"]] == ["c"]
    assert (resumed.status["observedNodes"], resumed.status["healthyNodes"]) == (3, 2)


def test_a_remediation_a_finalizer_holds_keeps_its_node_in_the_status_offline_as_live() -> None:
    """The node is healthy again: its remediation is deleted, but the remediator's finalizer holds it, so the node
    stays in unhealthyNodes with its remediation (phase Remediating) until the object is gone, offline and live."""
    held = snr("c")
    held["metadata"]["finalizers"] = ["self-node-remediation.medik8s.io/snr-finalizer"]
    nodes = [node("a", "True"), node("b", "True"), node("c", "True")]
    offline = offline_pass(SPEC, nodes, [copy.deepcopy(held)], NOW, status={})
    fake = cluster(SPEC, copy.deepcopy(nodes), [copy.deepcopy(held)])
    live = run_pass(fake)
    for result in (offline, live):
        assert [d["name"] for d in result.deleted] == ["c"]
        assert result.status is not None and result.status["phase"] == "Remediating"
        [entry] = result.status["unhealthyNodes"]
        assert entry["name"] == "c" and len(entry["remediations"]) == 1 and entry["conditionsHealthyTimestamp"]
