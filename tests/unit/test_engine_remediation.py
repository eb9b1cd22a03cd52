"""engines/remediation.py with a fake client: the steps of a pass, check mode, the safe time's inputs."""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import pytest
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.node.rfc3339 import to_epoch
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.remediation.steps import (
    FINALIZER,
    NO_SCHEDULE_TAINT_KEY,
    OUT_OF_SERVICE_TAINT_KEY,
    PHASES,
)
from ansible_collections.nodeops.maintenance.plugins.module_utils.engines import remediation as engine
from ansible_collections.nodeops.maintenance.plugins.module_utils.engines.remediation import (
    RETRIES,
    RemediationManager,
)
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.client import Resource
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.errors import Conflict, NotFound, UIDMismatch
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.lease import Lease
from hypothesis import given, settings
from hypothesis import strategies as st

UTC = timezone.utc  # noqa: UP017
T0 = datetime(2026, 1, 2, 3, 0, 0, tzinfo=UTC).timestamp()


class FakeClient:
    """Objects by (plural, namespace, name); records every write.

    Every object has a resourceVersion, and a replace is conditional on it as on the API server: 409 (Conflict) when
    the object changed since the body's version was read, 404 when it is gone; a replace without a resourceVersion
    (an unconditional write) fails the test. As for the API server, a replace of the ``status`` subresource changes
    only the status and a replace of the object everything but its status. ``meanwhile`` makes someone else write
    an object just before our next replace of it, which then meets a Conflict once. ``phases`` holds the phase of
    every SelfNodeRemediation after each write to it, ours and the others'.

    A pod deletion acts on the pod that has the name now, as the API server does: one that carries a UID is
    refused with 409 when that pod has another UID (the precondition), one without deletes whatever pod has the
    name. ``after_pod_list`` runs after each list of pods: what happens between the list and the deletions.
    """

    def __init__(self, objects: list[tuple[str, dict[str, Any]]]) -> None:
        self.store: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.version = 0
        for plural, obj in objects:
            meta = obj["metadata"]
            self.version += 1
            meta["resourceVersion"] = str(self.version)
            self.store[(plural, meta.get("namespace", ""), meta["name"])] = obj
        self.writes: list[tuple[str, str, str]] = []
        self.after_pod_list: list[Callable[[], None]] = []
        self.before_replace: dict[tuple[str, str, str], list[Callable[[], None]]] = {}
        self.phases: list[tuple[str, str]] = []  # (who: "us" or "other", phase after the write)

    def _stored(self, key: tuple[str, str, str], obj: dict[str, Any], who: str) -> None:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        self.store[key] = obj
        if key[0] == "selfnoderemediations":
            self.phases.append((who, (obj.get("status") or {}).get("phase") or "Fencing-Started"))

    def other_writes(
        self, plural: str, name: str, change: Callable[[dict[str, Any]], None], namespace: str = ""
    ) -> None:
        """Someone else applies ``change`` to the object now (the object gets a new resourceVersion)."""
        key = (plural, namespace, name)
        obj = copy.deepcopy(self.store[key])
        change(obj)
        self._stored(key, obj, "other")

    def meanwhile(self, plural: str, name: str, change: Callable[[dict[str, Any]], None], namespace: str = "") -> None:
        """Just before our next replace of that object, someone else applies ``change`` to it, so our replace,
        decided on the version before, meets a Conflict once."""
        key = (plural, namespace, name)
        self.before_replace.setdefault(key, []).append(lambda: self.other_writes(plural, name, change, namespace))

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

    def create(self, res: Resource, body: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
        """Only the nodes' Leases are created here."""
        key = (res.plural, namespace or "", body["metadata"]["name"])
        if key in self.store:
            raise Conflict(f"{res.plural} {key[2]} already exists", 409)
        obj = copy.deepcopy(body)
        obj["metadata"]["namespace"] = namespace or ""
        self._stored(key, obj, "us")
        return copy.deepcopy(obj)

    def replace(self, res: Resource, body: dict[str, Any], subresource: str | None = None) -> dict[str, Any]:
        meta = body["metadata"]
        key = (res.plural, meta.get("namespace", ""), meta["name"])
        if self.before_replace.get(key):
            self.before_replace[key].pop(0)()
        version = meta.get("resourceVersion")
        assert version, f"unconditional replace of {key}: the body has no resourceVersion"
        if key not in self.store:
            raise NotFound(f"{res.plural} {meta['name']} not found", 404)
        stored = self.store[key]
        if version != stored["metadata"]["resourceVersion"]:
            raise Conflict(f"{res.plural} {meta['name']}: the object has been modified", 409)
        if subresource == "status":
            new = copy.deepcopy(stored)
            new["status"] = copy.deepcopy(body.get("status"))
        else:
            new = copy.deepcopy(body)
            new.pop("status", None)
            if "status" in stored:
                new["status"] = copy.deepcopy(stored["status"])
        self._stored(key, new, "us")
        if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers"):
            del self.store[key]  # as the API server does
        if res.plural != "leases":  # the run's own bookkeeping, not a write to the cluster's objects
            self.writes.append(("replace" + (f"/{subresource}" if subresource else ""), res.plural, meta["name"]))
        return copy.deepcopy(new)

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

    def delete(
        self, res: Resource, name: str, namespace: str | None = None, *, uid: str | None = None, **_: Any
    ) -> None:
        self.writes.append(("delete", res.plural, name))
        key = (res.plural, namespace or "", name)
        if key not in self.store:
            raise NotFound(f"{res.plural} {name} not found", 404)
        current = self.store[key]["metadata"].get("uid")
        if uid is not None and uid != current:
            message = f"Precondition failed: UID in precondition: {uid}, UID in object meta: {current}"
            raise UIDMismatch(message, 409, {"message": message})
        del self.store[key]

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
        ("volumeattachments", {"metadata": {"name": "va-1", "uid": "va-uid-1"}, "spec": {"nodeName": "w1"}}),
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

    clock[0] = T0 + 129
    [early] = manager.run("ops", None, wait_timeout=0)
    assert early.code == "WaitingSafeTime" and ("pods", "app", "db-0") in fake.store

    clock[0] = T0 + 130
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


def test_a_volume_attachment_replaced_between_the_list_and_the_deletion_is_left_alone() -> None:
    fake = FakeClient(objects())
    manager = rebooted(fake)
    new = {"metadata": {"name": "va-1", "uid": "va-uid-new"}, "spec": {"nodeName": "w2"}}

    delete_pod = fake.delete_pod

    def and_replace(*args: Any, **kwargs: Any) -> None:
        delete_pod(*args, **kwargs)
        # meanwhile va-1 was detached and a new attachment of that name made for the healthy node w2
        fake.store[("volumeattachments", "", "va-1")] = new

    fake.delete_pod = and_replace  # type: ignore[method-assign]
    [outcome] = manager.run("ops", None, wait_timeout=0)
    assert fake.store.get(("volumeattachments", "", "va-1")) is new, "the new attachment was deleted"
    assert outcome.attachments_deleted == [] and outcome.pods_deleted == ["app/db-0"]


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


@pytest.mark.parametrize("published", ["abc", "\u0663\u0666\u0660\u0660", "1e999", "300s"])
def test_a_watchdog_timeout_that_is_not_a_number_keeps_the_pods(published: str) -> None:
    """Capable, but the watchdog timeout it published is not a number of seconds: the safe time cannot count
    it, so nothing is tainted or deleted (assuming 60 s could delete pods before a longer watchdog fired)."""
    fake = FakeClient(objects())
    fake.store[("nodes", "", "w1")]["metadata"]["annotations"]["self-node-remediation.medik8s.io/watchdog-timeout"] = (
        published
    )
    manager = RemediationManager(fake, lambda: T0 + 100_000)  # type: ignore[arg-type]
    [outcome] = manager.run("ops", None, wait_timeout=0)
    assert (
        outcome.code == "NotRebootCapable"
        and "watchdog-timeout" in outcome.reason
        and repr(published) in outcome.reason
    )
    assert ("pods", "app", "db-0") in fake.store and not fake.store[("nodes", "", "w1")]["spec"].get("taints")


@pytest.mark.parametrize("published", [None, "0", "-5"])
def test_a_missing_or_zero_watchdog_timeout_counts_as_60_seconds(published: str | None) -> None:
    fake = FakeClient(objects())
    annotations = fake.store[("nodes", "", "w1")]["metadata"]["annotations"]
    annotations.pop("self-node-remediation.medik8s.io/watchdog-timeout")
    if published is not None:
        annotations["self-node-remediation.medik8s.io/watchdog-timeout"] = published
    manager = RemediationManager(fake, lambda: T0, check_mode=True)  # type: ignore[arg-type]
    [outcome] = manager.run("ops", None, wait_timeout=0)
    assert outcome.code != "NotRebootCapable" and outcome.safe_time is not None
    assert outcome.safe_time["watchdog_seconds"] == 60


def test_a_node_without_an_agent_keeps_its_pods_and_says_why() -> None:
    fake = FakeClient(objects())
    del fake.store[("nodes", "", "w1")]["metadata"]["annotations"]["is-reboot-capable.self-node-remediation.medik8s.io"]
    clock = [T0]
    manager = RemediationManager(fake, lambda: clock[0])  # type: ignore[arg-type]
    for elapsed in (0, 130, 100_000):
        clock[0] = T0 + elapsed
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
    manager.now = lambda: T0 + 130
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


# -- two writers at once: a Conflict makes the step be decided again on what is there now --------------------------
SNR = ("selfnoderemediations", "ops", "w1")
NODE = ("nodes", "", "w1")


def assert_phase_never_moved_back(fake: FakeClient) -> None:
    order = [PHASES.index(phase) for _who, phase in fake.phases]
    assert order == sorted(order), f"the phase moved back: {fake.phases}"


def past_safe_time(fake: FakeClient, strategy: str = "ResourceDeletion") -> RemediationManager:
    """The object fenced at T0 (Pre-Reboot-Completed, assumed rebooted at T0 + 130 s) and a manager at T0 + 130 s."""
    fake.store[SNR]["spec"]["remediationStrategy"] = strategy
    manager = RemediationManager(fake, lambda: T0)  # type: ignore[arg-type]
    [fenced] = manager.run("ops", None, wait_timeout=0)
    assert fenced.phase == "Pre-Reboot-Completed" and fenced.time_assumed_rebooted == "2026-01-02T03:02:10Z"
    manager.now = lambda: T0 + 130
    return manager


def set_ready(status: str) -> Callable[[dict[str, Any]], None]:
    def change(node: dict[str, Any]) -> None:
        node["status"] = {"conditions": [{"type": "Ready", "status": status}]}

    return change


def test_a_step_decided_before_another_run_completed_the_remediation_is_not_written() -> None:
    fake = FakeClient(objects())
    manager = past_safe_time(fake, "OutOfServiceTaint")
    finished = {
        "type": "Succeeded",
        "status": "True",
        "reason": "RemediationFinishedSuccessfully",
        "message": "remediation finished",
        "lastTransitionTime": "2026-01-02T03:02:15Z",
    }

    def completed_by_another_run(snr: dict[str, Any]) -> None:
        # the other run tainted the node out-of-service, saw its pods and attachments go, completed the object;
        # the node is Ready again since
        snr["status"]["phase"] = "Fencing-Completed"
        snr["status"]["conditions"] = [
            {**finished, "type": "Processing", "status": "False"},
            finished,
        ]
        fake.other_writes(
            "nodes",
            "w1",
            lambda node: node["spec"]["taints"].append({"key": OUT_OF_SERVICE_TAINT_KEY, "effect": "NoExecute"}),
        )
        fake.other_writes("nodes", "w1", set_ready("True"))
        fake.store.pop(("pods", "app", "db-0"))
        fake.store.pop(("volumeattachments", "", "va-1"))

    # our step (Reboot-Completed) was decided on Pre-Reboot-Completed; its status write meets the other run's
    fake.meanwhile("selfnoderemediations", "w1", completed_by_another_run, "ops")
    before = len(fake.writes)
    [outcome] = manager.run("ops", None, wait_timeout=0)
    theirs = fake.store[SNR]["status"]
    assert_phase_never_moved_back(fake)
    assert ("us", "Reboot-Completed") not in fake.phases, "the stale step was written"
    assert theirs["phase"] == "Fencing-Completed" and finished in theirs["conditions"]
    assert theirs["timeAssumedRebooted"] == "2026-01-02T03:02:10Z"
    # the decision on the object as it is now: the node is Ready again, its out-of-service taint goes
    assert [t["key"] for t in fake.store[NODE]["spec"]["taints"]] == [NO_SCHEDULE_TAINT_KEY]
    assert outcome.taints_removed == [OUT_OF_SERVICE_TAINT_KEY] and outcome.rereads == 1
    assert outcome.phase == "Fencing-Completed" and outcome.code == "Completed"
    assert [e["reason"] for e in outcome.events] == ["RemoveOutOfService"]
    assert [w for w in fake.writes[before:] if w[0] == "event"] == [("event", "RemoveOutOfService", "w1")]


def test_time_assumed_rebooted_set_by_another_run_meanwhile_is_never_set_again() -> None:
    fake = FakeClient(objects())
    manager = RemediationManager(fake, lambda: T0)  # type: ignore[arg-type]
    # a run that started 5 s earlier fences the object between our read and our first write
    earlier = FakeClient(objects())
    RemediationManager(earlier, lambda: T0 - 5).run("ops", None, wait_timeout=0)  # type: ignore[arg-type]
    theirs = earlier.store[SNR]
    assert theirs["status"]["timeAssumedRebooted"] == "2026-01-02T03:02:05Z"

    def fenced_by_another_run(snr: dict[str, Any]) -> None:
        snr["metadata"]["finalizers"] = [FINALIZER]
        snr["status"] = copy.deepcopy(theirs["status"])
        fake.other_writes("nodes", "w1", lambda node: node["spec"].update(taints=[{"key": NO_SCHEDULE_TAINT_KEY}]))

    fake.meanwhile("selfnoderemediations", "w1", fenced_by_another_run, "ops")
    [outcome] = manager.run("ops", None, wait_timeout=0)
    status = fake.store[SNR]["status"]
    assert status == theirs["status"], "the status the other run wrote was overwritten"
    assert [who for who, _phase in fake.phases] == ["other"], "a write of the stale step went through"
    assert outcome.time_assumed_rebooted == "2026-01-02T03:02:05Z" and outcome.code == "WaitingSafeTime"
    assert outcome.rereads == 1 and outcome.taints_added == [] and not outcome.changed
    assert not [w for w in fake.writes if w[0] == "event"], "an event of the stale step was recorded"


def test_a_write_of_someone_else_to_another_field_does_not_stop_the_step() -> None:
    fake = FakeClient(objects())
    manager = past_safe_time(fake)

    def unrelated(snr: dict[str, Any]) -> None:
        snr["metadata"].setdefault("annotations", {})["example.com/seen-by"] = "someone"
        snr["status"]["lastError"] = "peer w2 did not answer"

    fake.meanwhile("selfnoderemediations", "w1", unrelated, "ops")
    [outcome] = manager.run("ops", None, wait_timeout=0)
    assert ("us", "Reboot-Completed") in fake.phases and outcome.phase == "Fencing-Completed"
    assert outcome.pods_deleted == ["app/db-0"] and outcome.attachments_deleted == ["va-1"]
    snr = fake.store[SNR]
    assert snr["status"]["lastError"] == "peer w2 did not answer", "the other writer's status field was lost"
    assert snr["metadata"]["annotations"]["example.com/seen-by"] == "someone"
    assert snr["status"]["timeAssumedRebooted"] == "2026-01-02T03:02:10Z"
    assert_phase_never_moved_back(fake)
    assert outcome.rereads == 1


def completed_with_out_of_service_taint(fake: FakeClient) -> RemediationManager:
    """Fencing-Completed (OutOfServiceTaint), the node Ready again and still tainted out-of-service."""
    snr = fake.store[SNR]
    snr["spec"]["remediationStrategy"] = "OutOfServiceTaint"
    snr["metadata"]["finalizers"] = [FINALIZER]
    snr["status"] = {"phase": "Fencing-Completed", "timeAssumedRebooted": "2026-01-02T03:02:10Z"}
    node = fake.store[NODE]
    node["spec"]["taints"] = [
        {"key": NO_SCHEDULE_TAINT_KEY, "effect": "NoSchedule"},
        {"key": OUT_OF_SERVICE_TAINT_KEY, "value": "nodeshutdown", "effect": "NoExecute"},
    ]
    node["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
    return RemediationManager(fake, lambda: T0 + 300)  # type: ignore[arg-type]


def test_a_taint_decided_on_a_node_that_changed_meanwhile_is_decided_again() -> None:
    fake = FakeClient(objects())
    manager = completed_with_out_of_service_taint(fake)
    # the out-of-service taint is to go because the node is Ready; before that write the node goes NotReady again
    fake.meanwhile("nodes", "w1", set_ready("False"))
    [outcome] = manager.run("ops", None, wait_timeout=0)
    keys = [t["key"] for t in fake.store[NODE]["spec"]["taints"]]
    assert keys == [NO_SCHEDULE_TAINT_KEY, OUT_OF_SERVICE_TAINT_KEY], "the taint went from a node that is not Ready"
    assert outcome.rereads == 1 and outcome.taints_removed == [] and outcome.events == []
    assert not [w for w in fake.writes if w[1] == "nodes"]


def test_a_taint_goes_through_when_the_node_changed_only_elsewhere() -> None:
    fake = FakeClient(objects())
    manager = completed_with_out_of_service_taint(fake)
    theirs = {"key": "example.com/disk", "effect": "NoSchedule"}
    fake.meanwhile("nodes", "w1", lambda node: node["spec"]["taints"].append(theirs))
    [outcome] = manager.run("ops", None, wait_timeout=0)
    assert fake.store[NODE]["spec"]["taints"] == [{"key": NO_SCHEDULE_TAINT_KEY, "effect": "NoSchedule"}, theirs]
    assert outcome.taints_removed == [OUT_OF_SERVICE_TAINT_KEY] and outcome.rereads == 1


def test_an_object_that_keeps_changing_stops_after_a_bounded_number_of_new_decisions() -> None:
    fake = FakeClient(objects())
    manager = past_safe_time(fake)
    for i in range(RETRIES + 3):
        fake.meanwhile(
            "selfnoderemediations", "w1", lambda snr, i=i: snr["metadata"].update(labels={"touched": str(i)}), "ops"
        )
    with pytest.raises(Conflict, match="kept changing"):
        manager.run("ops", None, wait_timeout=0)
    assert len(fake.before_replace[SNR]) == 2, "not one new decision per Conflict, or more than RETRIES + 1"
    assert [who for who, _phase in fake.phases[-(RETRIES + 1) :]] == ["other"] * (RETRIES + 1)
    assert fake.store[SNR]["status"]["phase"] == "Pre-Reboot-Completed"


def test_a_node_whose_lease_another_run_holds_is_left_to_that_run() -> None:
    fake = FakeClient(objects())
    other = Lease(fake, "nodeops-remediation-w1", "ops", "other-run")  # type: ignore[arg-type]
    assert other.try_acquire()
    manager = RemediationManager(fake, lambda: T0)  # type: ignore[arg-type]
    [outcome] = manager.run("ops", None, wait_timeout=0)
    assert outcome.code == "Busy" and "other-run" in outcome.reason
    assert fake.writes == [] and not fake.store[("nodes", "", "w1")]["spec"].get("taints")
    other.release()
    [outcome] = manager.run("ops", None, wait_timeout=0)
    assert outcome.phase == "Pre-Reboot-Completed"
    lease = fake.store[("leases", "ops", "nodeops-remediation-w1")]
    assert lease["spec"]["holderIdentity"] is None  # given up after the run


def test_a_run_with_a_wait_timeout_waits_for_a_node_lease_and_then_goes_on() -> None:
    fake = FakeClient(objects())
    other = Lease(fake, "nodeops-remediation-w1", "ops", "other-run")  # type: ignore[arg-type]
    assert other.try_acquire()
    manager = RemediationManager(fake, lambda: T0)  # type: ignore[arg-type]
    pauses: list[float] = []

    def sleep(seconds: float) -> None:
        pauses.append(seconds)
        if len(pauses) == 3:
            other.release()  # the holder gives the node up while this run waits

    [outcome] = manager.run("ops", None, wait_timeout=60, sleep=sleep)
    assert len(pauses) >= 3 and all(0 < p <= 2.0 for p in pauses[:3]), pauses
    assert outcome.code != "Busy" and outcome.phase == "Pre-Reboot-Completed"
    assert outcome.phase_before == "Fencing-Started"  # the phase read when the node was first found busy


def test_a_node_lease_left_by_a_dead_run_is_waited_for_until_its_hold_runs_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeClient(objects())
    dead = Lease(fake, "nodeops-remediation-w1", "ops", "dead-run", duration=60)  # type: ignore[arg-type]
    assert dead.try_acquire()  # and never given up
    renewed = to_epoch(fake.store[("leases", "ops", "nodeops-remediation-w1")]["spec"]["renewTime"])
    assert renewed is not None
    clock = [renewed + 59.5]  # half a second of the dead run's hold left
    monkeypatch.setattr(engine, "Lease", lambda *args, **kwargs: Lease(*args, **kwargs, clock=lambda: clock[0]))
    manager = RemediationManager(fake, lambda: T0)  # type: ignore[arg-type]
    [outcome] = manager.run("ops", None, wait_timeout=0)
    assert outcome.code == "Busy" and outcome.wait_until == T0 + 0.5
    clock[0] += 1.0  # its hold ran out: the next look takes the node
    [outcome] = manager.run("ops", None, wait_timeout=0)
    assert outcome.phase == "Pre-Reboot-Completed"


def test_while_a_run_waits_for_a_busy_node_the_others_get_each_event_once() -> None:
    """w2's object waits for the Lease another run holds (a pass every 2 s); w1 is excluded from remediation, so
    each pass decides RemediationSkipped again: one event for it in the run, not one per pass."""
    fake = FakeClient(objects())
    w1 = fake.store[("nodes", "", "w1")]
    w1["metadata"]["labels"] = {**w1["metadata"]["labels"], "remediation.medik8s.io/exclude-from-remediation": "true"}
    fake.store[("selfnoderemediations", "ops", "w1")]["status"] = {"phase": "Fencing-Started"}
    fake.store[("nodes", "", "w2")]["metadata"]["annotations"] = dict(w1["metadata"]["annotations"])
    fake.store[("selfnoderemediations", "ops", "w2")] = {
        "metadata": {"name": "w2", "namespace": "ops", "resourceVersion": "1"},
        "spec": {"remediationStrategy": "ResourceDeletion"},
    }
    other = Lease(fake, "nodeops-remediation-w2", "ops", "other-run")  # type: ignore[arg-type]
    assert other.try_acquire()
    manager = RemediationManager(fake, lambda: T0)  # type: ignore[arg-type]
    pauses: list[float] = []

    def sleep(seconds: float) -> None:
        pauses.append(seconds)
        if len(pauses) == 4:
            other.release()

    outcomes = {o.name: o for o in manager.run("ops", None, wait_timeout=60, sleep=sleep)}
    assert len(pauses) == 4, pauses  # then w2 waits for its safe time, past the wait_timeout
    skipped = [w for w in fake.writes if w[:2] == ("event", "RemediationSkipped")]
    assert skipped == [("event", "RemediationSkipped", "w1")], fake.writes
    assert outcomes["w1"].code == "Excluded" and outcomes["w2"].phase == "Pre-Reboot-Completed"


def test_a_busy_pass_keeps_what_an_earlier_pass_of_the_run_found() -> None:
    fake = FakeClient(objects())
    manager = RemediationManager(fake, lambda: T0)  # type: ignore[arg-type]
    [first] = manager.run("ops", None, wait_timeout=0)
    assert first.time_assumed_rebooted and first.strategy
    other = Lease(fake, "nodeops-remediation-w1", "ops", "other-run")  # type: ignore[arg-type]
    assert other.try_acquire()
    busy = manager.run_one(fake.store[("selfnoderemediations", "ops", "w1")])
    assert busy.code == "Busy"
    merged = engine._merge(first, busy)
    assert (merged.code, merged.strategy, merged.time_assumed_rebooted, merged.phase) == (
        "Busy",
        first.strategy,
        first.time_assumed_rebooted,
        first.phase,
    )


def offline(fake: FakeClient, now: float, config_namespace: str | None = None) -> list[dict[str, Any]]:
    """The offline what-if over the objects the fake API server holds now."""

    def of(plural: str) -> list[dict[str, Any]]:
        return [copy.deepcopy(o) for (p, _ns, _n), o in sorted(fake.store.items()) if p == plural]

    outcomes, _ignored = engine.offline_outcomes(
        of("selfnoderemediations"),
        of("nodes"),
        of("pods"),
        of("volumeattachments"),
        of("selfnoderemediationconfigs"),
        "v1.36.3",
        now,
        of("nodemaintenances"),
        None,
        config_namespace,
    )
    return [o.as_dict() for o in outcomes]


def test_offline_reports_what_a_check_mode_pass_reports_at_every_stage() -> None:
    """Fresh, fenced and waiting, at the safe time, completed: the offline what-if over the objects as they are
    then is the check-mode pass over the same cluster, field for field, the time left to the safe time included."""
    fake = FakeClient(objects())
    for seconds, write in ((0, True), (129, False), (130, True), (140, False)):
        now = T0 + seconds
        checked = RemediationManager(fake, lambda now=now: now, check_mode=True)  # type: ignore[arg-type]
        live = [o.as_dict() for o in checked.run("ops", None, wait_timeout=0)]
        assert offline(fake, now) == live, seconds
        if write:  # the real pass at that moment moves the object on
            RemediationManager(fake, lambda now=now: now).run("ops", None, wait_timeout=0)  # type: ignore[arg-type]
    [fresh] = offline(FakeClient(objects()), T0)
    assert (fresh["strategy"], fresh["seconds_to_safe_time"]) == ("ResourceDeletion", 130.0)
    [waiting] = offline(fake, T0)  # (already fenced at T0 by the pass above)
    assert waiting["time_assumed_rebooted"] == "2026-01-02T03:02:10Z"
    assert offline(fake, T0, config_namespace="elsewhere") == []


@pytest.mark.parametrize(
    ("broken", "message"),
    [
        ({"spec": {}}, r"remediations\[0\]: not a SelfNodeRemediation"),
        ({"metadata": {"name": "w1"}, "spec": "fast"}, r"remediations\[0\] \(w1\): spec and status must be mappings"),
    ],
)
def test_offline_input_that_is_not_an_object_is_named(broken: dict[str, Any], message: str) -> None:
    with pytest.raises(engine.RemediationInputError, match=message):
        engine.offline_outcomes([broken], [], [], [], [], "v1.36.3", T0, [])
    with pytest.raises(engine.RemediationInputError, match=r"nodes\[0\]: not a Kubernetes object"):
        engine.offline_outcomes([], ["w1"], [], [], [], "v1.36.3", T0, [])  # type: ignore[list-item]


def test_a_run_hands_its_wait_back_after_the_given_time_and_the_next_goes_on() -> None:
    """hand_back_after: a run that waits (here for a node Lease another run holds) stops after that many seconds
    of its own, never sleeping past it; a run with the time left then goes on and gets the node."""
    fake = FakeClient(objects())
    other = Lease(fake, "nodeops-remediation-w1", "ops", "other-run")  # type: ignore[arg-type]
    assert other.try_acquire()
    manager = RemediationManager(fake, lambda: T0)  # type: ignore[arg-type]
    monotonic = [0.0]
    pauses: list[float] = []

    def sleep(seconds: float) -> None:
        pauses.append(seconds)
        monotonic[0] += seconds

    [busy] = manager.run("ops", None, wait_timeout=60, sleep=sleep, hand_back_after=5, clock=lambda: monotonic[0])
    assert manager.handed_back and busy.code == "Busy"
    assert sum(pauses) == pytest.approx(5.0) and all(p <= 2.0 for p in pauses), pauses
    other.release()
    [done] = manager.run("ops", None, wait_timeout=55, sleep=sleep, hand_back_after=5, clock=lambda: monotonic[0])
    assert not manager.handed_back and done.phase == "Pre-Reboot-Completed"


def test_outcomes_merged_as_dicts_add_up_as_the_runs_do() -> None:
    before = {
        "phase_before": "Fencing-Started",
        "phase": "A",
        "changed": True,
        "pods_deleted": ["ns/a"],
        "events": [{"reason": "X"}],
        "rereads": 1,
        "steps": [{"code": "c1"}],
        "safe_time": {"seconds": 5},
    }
    after = {
        "phase_before": "A",
        "phase": "B",
        "changed": False,
        "pods_deleted": ["ns/b"],
        "events": [{"reason": "X"}, {"reason": "Y"}],
        "rereads": 2,
        "steps": [{"code": "c2"}],
        "safe_time": None,
    }
    merged = engine.merge_outcomes(before, after)
    assert merged["phase_before"] == "Fencing-Started" and merged["phase"] == "B" and merged["changed"] is True
    assert merged["pods_deleted"] == ["ns/a", "ns/b"] and merged["events"] == [{"reason": "X"}, {"reason": "Y"}]
    assert merged["rereads"] == 3 and merged["steps"] == [{"code": "c1"}, {"code": "c2"}]
    assert merged["safe_time"] == {"seconds": 5}


def test_the_events_of_earlier_calls_are_not_recorded_again() -> None:
    """A task that goes on with a wait over several calls records each event once: the next call's manager takes the
    events of the earlier ones (the module carries them in resume)."""
    fake = FakeClient(objects())
    w1 = fake.store[("nodes", "", "w1")]
    w1["metadata"]["labels"] = {**w1["metadata"]["labels"], "remediation.medik8s.io/exclude-from-remediation": "true"}
    first = RemediationManager(fake, lambda: T0)  # type: ignore[arg-type]
    first.run("ops", None, wait_timeout=0)
    skipped = [w for w in fake.writes if w[:2] == ("event", "RemediationSkipped")]
    assert skipped == [("event", "RemediationSkipped", "w1")] and first.emitted
    carried = first.emitted
    assert {e["reason"] for e in carried} >= {"RemediationSkipped"} and all(e["name"] == "w1" for e in carried)
    second = RemediationManager(fake, lambda: T0)  # type: ignore[arg-type]
    second.emitted = carried
    second.run("ops", None, wait_timeout=0)
    assert [w for w in fake.writes if w[:2] == ("event", "RemediationSkipped")] == skipped  # not again
    fresh = RemediationManager(fake, lambda: T0)  # type: ignore[arg-type]
    fresh.run("ops", None, wait_timeout=0)  # a new task records it again
    assert len([w for w in fake.writes if w[:2] == ("event", "RemediationSkipped")]) == 2


TOLERATES_OUT_OF_SERVICE = [{"key": OUT_OF_SERVICE_TAINT_KEY, "operator": "Exists", "effect": "NoExecute"}]


@st.composite
def cluster_states(draw: st.DrawFn) -> tuple[list[tuple[str, dict[str, Any]]], float]:
    """A SelfNodeRemediation at any phase, deleted or not, on a node that is capable or not, tainted or not, with
    pods (terminating, tolerating the out-of-service taint, or neither) and VolumeAttachments; and a moment."""
    states = objects()
    node, snr = states[0][1], states[3][1]
    phase = draw(st.sampled_from([None, *PHASES]))
    strategy = draw(st.sampled_from(["ResourceDeletion", "OutOfServiceTaint", "Automatic"]))
    snr["spec"]["remediationStrategy"] = strategy
    if phase is not None:
        snr["status"] = {"phase": phase}
        if draw(st.booleans()):
            snr["status"]["timeAssumedRebooted"] = "2026-01-02T03:02:10Z"
    if draw(st.booleans()):
        snr["metadata"]["finalizers"] = [FINALIZER]
        if draw(st.booleans()):
            snr["metadata"]["deletionTimestamp"] = "2026-01-02T03:00:00Z"
    if not draw(st.booleans()):
        node["metadata"]["annotations"]["is-reboot-capable.self-node-remediation.medik8s.io"] = "false"
    taints = draw(st.sets(st.sampled_from([NO_SCHEDULE_TAINT_KEY, OUT_OF_SERVICE_TAINT_KEY])))
    node["spec"]["taints"] = [{"key": k, "effect": "NoSchedule"} for k in sorted(taints)]
    if draw(st.booleans()):
        node["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    states = [s for s in states if s[0] not in ("pods", "volumeattachments")]
    for index in range(draw(st.integers(0, 3))):
        pod: dict[str, Any] = {
            "metadata": {"name": f"p{index}", "namespace": "app", "uid": f"u-p{index}"},
            "spec": {"nodeName": draw(st.sampled_from(["w1", "w2"]))},
        }
        if draw(st.booleans()):
            pod["metadata"]["deletionTimestamp"] = "2026-01-02T03:00:00Z"
        if draw(st.booleans()):
            pod["spec"]["tolerations"] = TOLERATES_OUT_OF_SERVICE
        states.append(("pods", pod))
    for index in range(draw(st.integers(0, 2))):
        states.append(
            (
                "volumeattachments",
                {"metadata": {"name": f"va{index}", "uid": f"va-u{index}"}, "spec": {"nodeName": "w1"}},
            )
        )
    if draw(st.booleans()):
        states = [s for s in states if not (s[0] == "nodes" and s[1]["metadata"]["name"] == "w1")]
    return states, T0 + draw(st.sampled_from([0, 129, 130, 200, 400]))


@settings(max_examples=300, deadline=None)
@given(cluster_states())
def test_offline_and_check_mode_report_what_the_live_run_does(
    state: tuple[list[tuple[str, dict[str, Any]]], float],
) -> None:
    """For any state, the offline what-if over the objects and a check-mode run over the cluster report, field for
    field, what a live run at that moment then does (its phase, conditions, taints, deletions and events), and
    the check-mode run writes nothing."""
    objs, now = state
    live_cluster = FakeClient(copy.deepcopy(objs))
    checked_cluster = FakeClient(copy.deepcopy(objs))
    expected_offline = offline(FakeClient(copy.deepcopy(objs)), now)
    checked = RemediationManager(checked_cluster, lambda: now, check_mode=True)  # type: ignore[arg-type]
    checked_outcomes = [o.as_dict() for o in checked.run("ops", None, wait_timeout=0)]
    manager = RemediationManager(live_cluster, lambda: now)  # type: ignore[arg-type]
    live = [o.as_dict() for o in manager.run("ops", None, wait_timeout=0)]
    assert checked_cluster.writes == []
    assert checked_outcomes == live
    assert expected_offline == live
