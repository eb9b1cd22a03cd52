"""engines/remediation.py with a fake client: the steps of a pass, check mode, the safe time's inputs."""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

from ansible_collections.nodeops.maintenance.plugins.module_utils.core.remediation import (
    FINALIZER,
    NO_SCHEDULE_TAINT_KEY,
)
from ansible_collections.nodeops.maintenance.plugins.module_utils.engines.remediation import RemediationManager
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.client import Resource
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.errors import NotFound, UIDMismatch

UTC = timezone.utc  # noqa: UP017
T0 = datetime(2026, 1, 2, 3, 0, 0, tzinfo=UTC)


class FakeClient:
    """Objects by (plural, namespace, name); records every write.

    A pod deletion acts on the pod that has the name now, as the API server does: one that carries a UID is
    refused with 409 when that pod has another UID (the precondition), one without deletes whatever pod has the
    name. ``after_pod_list`` runs after each list of pods: what happens between the list and the deletions.
    """

    def __init__(self, objects: list[tuple[str, dict[str, Any]]]) -> None:
        self.store: dict[tuple[str, str, str], dict[str, Any]] = {}
        for plural, obj in objects:
            meta = obj["metadata"]
            self.store[(plural, meta.get("namespace", ""), meta["name"])] = obj
        self.writes: list[tuple[str, str, str]] = []
        self.after_pod_list: list[Callable[[], None]] = []

    def server_version(self) -> dict[str, Any]:
        return {"gitVersion": "v1.36.3"}

    def get(self, res: Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        key = (res.plural, namespace or "", name)
        if key not in self.store:
            raise NotFound(f"{res.plural} {name} not found", 404)
        return copy.deepcopy(self.store[key])

    def list(self, res: Resource, namespace: str | None = None, label_selector: str | None = None, **_: Any) -> Any:
        items = [
            copy.deepcopy(o)
            for (plural, ns, _name), o in self.store.items()
            if plural == res.plural and (namespace is None or ns == namespace)
        ]
        if label_selector:
            items = [o for o in items if label_selector in (o["metadata"].get("labels") or {})]
        node = (_.get("field_selector") or "").removeprefix("spec.nodeName=")
        if res.plural == "pods" and node:
            items = [o for o in items if o["spec"].get("nodeName") == node]
            while self.after_pod_list:
                self.after_pod_list.pop(0)()
        return {"items": items}

    def replace(self, res: Resource, body: dict[str, Any], subresource: str | None = None) -> dict[str, Any]:
        meta = body["metadata"]
        key = (res.plural, meta.get("namespace", ""), meta["name"])
        self.store[key] = copy.deepcopy(body)
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            del self.store[key]  # as the API server does
        self.writes.append(("replace" + (f"/{subresource}" if subresource else ""), res.plural, meta["name"]))
        return copy.deepcopy(body)

    # grace_period may come by position, as older callers sent it
    def delete_pod(self, name: str, namespace: str, grace_period: int | None = None, *, uid: str | None = None) -> None:
        self.writes.append(("delete", "pods", f"{name} uid={uid}"))
        key = ("pods", namespace, name)
        if key not in self.store:
            raise NotFound(f"pods {name} not found", 404)
        current = self.store[key]["metadata"]["uid"]
        if uid is not None and uid != current:
            message = f"Precondition failed: UID in precondition: {uid}, UID in object meta: {current}"
            raise UIDMismatch(message, 409, {"message": message})
        del self.store[key]

    def delete(self, res: Resource, name: str, namespace: str | None = None, **_: Any) -> None:
        self.store.pop((res.plural, namespace or "", name))
        self.writes.append(("delete", res.plural, name))

    def create_event(self, involved: dict[str, Any], reason: str, message: str, event_type: str = "Normal") -> None:
        self.writes.append(("event", reason, involved["metadata"]["name"]))


def objects() -> list[tuple[str, dict[str, Any]]]:
    worker = {"node-role.kubernetes.io/worker": ""}
    return [
        (
            "nodes",
            {
                "metadata": {
                    "name": "w1",
                    "labels": worker,
                    "annotations": {
                        "self-node-remediation.medik8s.io/watchdog-timeout": "10",
                        "is-reboot-capable.self-node-remediation.medik8s.io": "true",
                    },
                },
                "spec": {},
                "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]},
            },
        ),
        ("nodes", {"metadata": {"name": "w2", "labels": worker}, "spec": {}}),
        ("selfnoderemediationconfigs", {"metadata": {"name": "self-node-remediation-config", "namespace": "ops"}}),
        (
            "selfnoderemediations",
            {"metadata": {"name": "w1", "namespace": "ops"}, "spec": {"remediationStrategy": "ResourceDeletion"}},
        ),
        ("pods", {"metadata": {"name": "db-0", "namespace": "app", "uid": "u-db-0"}, "spec": {"nodeName": "w1"}}),
        ("volumeattachments", {"metadata": {"name": "va-1"}, "spec": {"nodeName": "w1"}}),
    ]


def test_check_mode_writes_nothing() -> None:
    fake = FakeClient(objects())
    manager = RemediationManager(fake, lambda: T0, check_mode=True)  # type: ignore[arg-type]
    [outcome] = manager.run("ops", None, wait_timeout=0)
    assert fake.writes == []
    assert outcome.changed and outcome.taints_added == [NO_SCHEDULE_TAINT_KEY]
    assert outcome.safe_time is not None and outcome.safe_time["effective_seconds"] == 130  # 2 workers, watchdog 10


def test_a_pass_fences_then_a_later_one_recovers() -> None:
    fake = FakeClient(objects())
    clock = [T0]
    manager = RemediationManager(fake, lambda: clock[0])  # type: ignore[arg-type]
    [first] = manager.run("ops", None, wait_timeout=0)
    assert first.phase == "Pre-Reboot-Completed" and first.time_assumed_rebooted == "2026-01-02T03:02:10Z"
    snr = fake.store[("selfnoderemediations", "ops", "w1")]
    assert FINALIZER in snr["metadata"]["finalizers"]
    assert [t["key"] for t in fake.store[("nodes", "", "w1")]["spec"]["taints"]] == [NO_SCHEDULE_TAINT_KEY]
    assert ("pods", "app", "db-0") in fake.store

    clock[0] = T0 + timedelta(seconds=129)
    [early] = manager.run("ops", None, wait_timeout=0)
    assert early.code == "WaitingSafeTime" and ("pods", "app", "db-0") in fake.store

    clock[0] = T0 + timedelta(seconds=130)
    [done] = manager.run("ops", None, wait_timeout=0)
    assert done.phase == "Fencing-Completed"
    assert done.pods_deleted == ["app/db-0"] and done.attachments_deleted == ["va-1"]
    assert done.pods_already_gone == []
    assert ("pods", "app", "db-0") not in fake.store
    assert ("delete", "pods", "db-0 uid=u-db-0") in fake.writes, "the deletion carries the UID listed"

    snr = fake.store[("selfnoderemediations", "ops", "w1")]
    snr["metadata"]["deletionTimestamp"] = "2026-01-02T03:10:00Z"
    [gone] = manager.run("ops", None, wait_timeout=0)
    assert gone.phase == "Deleted"
    assert not fake.store[("nodes", "", "w1")]["spec"]["taints"]


def test_the_published_watchdog_timeout_is_never_shortened_by_the_module_setting() -> None:
    fake = FakeClient(objects())
    fake.store[("nodes", "", "w1")]["metadata"]["annotations"]["self-node-remediation.medik8s.io/watchdog-timeout"] = (
        "300"
    )
    shorter = RemediationManager(fake, lambda: T0, check_mode=True, watchdog_timeout=10)  # type: ignore[arg-type]
    [outcome] = shorter.run("ops", None, wait_timeout=0)
    assert outcome.safe_time is not None and outcome.safe_time["watchdog_seconds"] == 300
    longer = RemediationManager(fake, lambda: T0, check_mode=True, watchdog_timeout=400)  # type: ignore[arg-type]
    [outcome] = longer.run("ops", None, wait_timeout=0)
    assert outcome.safe_time is not None and outcome.safe_time["watchdog_seconds"] == 400


def test_a_node_without_an_agent_keeps_its_pods_and_says_why() -> None:
    fake = FakeClient(objects())
    del fake.store[("nodes", "", "w1")]["metadata"]["annotations"]["is-reboot-capable.self-node-remediation.medik8s.io"]
    clock = [T0]
    manager = RemediationManager(fake, lambda: clock[0])  # type: ignore[arg-type]
    for elapsed in (0, 130, 100_000):
        clock[0] = T0 + timedelta(seconds=elapsed)
        [outcome] = manager.run("ops", None, wait_timeout=0)
        assert outcome.code == "NotRebootCapable" and "is-reboot-capable" in outcome.reason
        assert ("pods", "app", "db-0") in fake.store and ("volumeattachments", "", "va-1") in fake.store
        assert not fake.store[("nodes", "", "w1")]["spec"].get("taints")
    status = fake.store[("selfnoderemediations", "ops", "w1")]["status"]
    assert {c["type"]: c["reason"] for c in status["conditions"]}["Processing"] == "NodeNotRebootCapable"


def test_objects_outside_the_config_namespace_are_ignored() -> None:
    stranger = {"metadata": {"name": "w1", "namespace": "team-a"}, "spec": {"remediationStrategy": "ResourceDeletion"}}
    fake = FakeClient([*objects(), ("selfnoderemediations", stranger)])
    manager = RemediationManager(fake, lambda: T0, config_namespace="ops")  # type: ignore[arg-type]
    outcomes = manager.run(None, None, wait_timeout=0)
    assert [(o.namespace, o.name) for o in outcomes] == [("ops", "w1")]
    assert manager.ignored == {"team-a/w1"}
    assert "status" not in fake.store[("selfnoderemediations", "team-a", "w1")]


def rebooted(fake: FakeClient) -> RemediationManager:
    """A manager whose next pass finds the object past its safe time (Reboot-Completed): it deletes the pods."""
    manager = RemediationManager(fake, lambda: T0)  # type: ignore[arg-type]
    manager.run("ops", None, wait_timeout=0)
    manager.now = lambda: T0 + timedelta(seconds=130)
    return manager


def test_a_pod_replaced_between_the_list_and_the_deletion_is_left_alone() -> None:
    fake = FakeClient(objects())
    manager = rebooted(fake)
    new = {"metadata": {"name": "db-0", "namespace": "app", "uid": "u-new"}, "spec": {"nodeName": "w2"}}

    def replace() -> None:  # someone deleted db-0 and its StatefulSet re-created it on the healthy node w2
        fake.store[("pods", "app", "db-0")] = new

    fake.after_pod_list.append(replace)
    [outcome] = manager.run("ops", None, wait_timeout=0)
    assert fake.store.get(("pods", "app", "db-0")) is new, "the new pod on a healthy node was deleted"
    assert [w for w in fake.writes if w[:2] == ("delete", "pods")] == [("delete", "pods", "db-0 uid=u-db-0")]
    assert outcome.pods_deleted == [] and outcome.pods_already_gone == ["app/db-0"]
    assert outcome.phase == "Fencing-Completed"  # the later steps list w1's pods again: none left
    # a second run (another pass, as a second run at once would) does not touch the new pod either
    [again] = manager.run("ops", None, wait_timeout=0)
    assert fake.store.get(("pods", "app", "db-0")) is new and again.pods_deleted == []


def test_a_pod_deleted_between_the_list_and_the_deletion_is_not_reported_as_deleted() -> None:
    fake = FakeClient(objects())
    manager = rebooted(fake)
    fake.after_pod_list.append(lambda: fake.store.pop(("pods", "app", "db-0")))
    [outcome] = manager.run("ops", None, wait_timeout=0)
    assert outcome.pods_deleted == [] and outcome.pods_already_gone == ["app/db-0"]
    assert outcome.as_dict()["pods_already_gone"] == ["app/db-0"]
    assert ["app/db-0"] in [s["pods_to_delete"] for s in outcome.steps]  # the step as planned, readable
