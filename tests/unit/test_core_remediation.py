"""core/remediation/steps.py: the Self Node Remediation manager's steps, with time as a parameter."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.node.rfc3339 import format_time
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.remediation.steps import (
    FENCING_COMPLETED,
    FINALIZER,
    NO_SCHEDULE_TAINT_KEY,
    OUT_OF_SERVICE_TAINT_KEY,
    PRE_REBOOT_COMPLETED,
    REBOOT_CAPABLE_ANNOTATION,
    REBOOT_COMPLETED,
    Code,
    Step,
    assumed_rebooted,
    no_schedule_taint,
    plan_step,
    taints_after,
)
from hypothesis import given
from hypothesis import strategies as st

UTC = timezone.utc  # noqa: UP017
T0 = datetime(2026, 1, 2, 3, 0, 0, tzinfo=UTC).timestamp()
SAFE = 180.0
RD, OOS = "ResourceDeletion", "OutOfServiceTaint"


CAPABLE = {REBOOT_CAPABLE_ANNOTATION: "true"}


def node(
    name: str = "w1",
    taints: tuple[str, ...] = (),
    ready: str = "Unknown",
    annotations: dict[str, str] | None = None,
    **labels: str,
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "labels": dict(labels),
            "annotations": CAPABLE if annotations is None else annotations,
        },
        "spec": {"taints": [{"key": k, "effect": "NoSchedule"} for k in taints]},
        "status": {"conditions": [{"type": "Ready", "status": ready}]},
    }


def snr(
    phase: str | None = None,
    assumed: float | None = None,
    deleting: bool = False,
    finalizer: bool = True,
    **ann: str,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "w1", "namespace": "ns", "annotations": dict(ann)}
    if phase:
        meta["finalizers"] = [FINALIZER] if finalizer else []
    if deleting:
        meta["deletionTimestamp"] = "2026-01-02T03:00:00Z"
    status: dict[str, Any] = {}
    if phase:
        status["phase"] = phase
    if assumed is not None:
        status["timeAssumedRebooted"] = format_time(assumed)
    return {"metadata": meta, "spec": {"remediationStrategy": "Automatic"}, "status": status}


POD = {"metadata": {"namespace": "app", "name": "db-0", "uid": "u-db-0"}}
TERMINATING = {
    "metadata": {"namespace": "app", "name": "web-1", "uid": "u-web-1", "deletionTimestamp": "2026-01-02T03:04:00Z"}
}
VA = {"metadata": {"name": "va-1", "uid": "va-uid-1"}, "spec": {"nodeName": "w1"}}


def test_first_step_taints_adds_the_finalizer_and_records_the_safe_time() -> None:
    step = plan_step(snr(), node(), T0, SAFE, RD, pods=[POD])
    assert step.code == Code.FENCING
    assert step.add_finalizer
    assert step.taints_to_add == [no_schedule_taint()]
    assert not step.pods_to_delete
    assert step.status is not None
    assert step.status["phase"] == PRE_REBOOT_COMPLETED
    assert step.status["timeAssumedRebooted"] == "2026-01-02T03:03:00Z"
    conditions = {c["type"]: (c["status"], c["reason"]) for c in step.status["conditions"]}
    assert conditions == {"Processing": ("True", "RemediationStarted"), "Succeeded": ("Unknown", "RemediationStarted")}
    assert step.wait_until == T0 + SAFE
    assert [(e.reason, e.on) for e in step.events] == [
        ("RemediationStarted", "SelfNodeRemediation"),
        ("AddFinalizer", "SelfNodeRemediation"),
        ("AddNoScheduleTaint", "Node"),
        ("UpdateTimeAssumedRebooted", "SelfNodeRemediation"),
        ("NodeReboot", "Node"),
    ]


@given(
    st.sampled_from([None, PRE_REBOOT_COMPLETED, REBOOT_COMPLETED]),
    st.floats(min_value=0, max_value=SAFE - 0.001),
    st.sampled_from([RD, OOS]),
    st.booleans(),
)
def test_nothing_is_recovered_before_the_safe_time(
    phase: str | None, elapsed: float, strategy: str, dying: bool
) -> None:
    """No pod deleted, no VolumeAttachment deleted, no out-of-service taint before timeAssumedRebooted."""
    assumed = T0 + SAFE
    obj = snr(phase, assumed if phase else None, deleting=dying and phase is not None)
    step = plan_step(obj, node(), T0 + elapsed, SAFE, strategy, pods=[POD, TERMINATING], attachments=[VA])
    assert not step.pods_to_delete
    assert not step.attachments_to_delete
    assert OUT_OF_SERVICE_TAINT_KEY not in [t["key"] for t in step.taints_to_add]
    if step.status is not None:
        assert step.status.get("phase") in (None, PRE_REBOOT_COMPLETED)


@given(
    st.sampled_from([None, PRE_REBOOT_COMPLETED, REBOOT_COMPLETED, FENCING_COMPLETED]),
    st.floats(min_value=0, max_value=10 * SAFE),
    st.sampled_from([RD, OOS]),
)
def test_a_node_under_maintenance_is_never_touched(phase: str | None, elapsed: float, strategy: str) -> None:
    assumed = T0 + SAFE
    step = plan_step(
        snr(phase, assumed if phase else None),
        node(taints=(OUT_OF_SERVICE_TAINT_KEY,), ready="True"),
        T0 + elapsed,
        SAFE,
        strategy,
        under_maintenance=True,
        pods=[POD],
        attachments=[VA],
    )
    assert step.code == Code.MAINTENANCE
    assert not step.writes


def test_excluded_node_is_skipped() -> None:
    step = plan_step(snr(), node(**{"remediation.medik8s.io/exclude-from-remediation": "true"}), T0, SAFE, RD)
    assert step.code == Code.EXCLUDED and not step.writes
    assert [e[1] for e in step.events] == ["RemediationSkipped"]


def test_waiting_then_reboot_completed_at_the_safe_time() -> None:
    assumed = T0 + SAFE
    obj = snr(PRE_REBOOT_COMPLETED, assumed)
    tainted = node(taints=(NO_SCHEDULE_TAINT_KEY,))
    wait = plan_step(obj, tainted, assumed - 1, SAFE, RD)
    assert wait.code == Code.WAITING_SAFE_TIME and wait.wait_until == assumed
    assert wait.status is not None  # the conditions are set once
    go = plan_step(obj, tainted, assumed, SAFE, RD)
    assert go.status is not None and go.status["phase"] == REBOOT_COMPLETED


def test_resource_deletion_deletes_pods_and_attachments_then_completes() -> None:
    assumed = T0 + SAFE
    obj = snr(REBOOT_COMPLETED, assumed)
    later = assumed + 1
    step = plan_step(
        obj, node(taints=(NO_SCHEDULE_TAINT_KEY,)), later, SAFE, RD, pods=[POD, TERMINATING], attachments=[VA]
    )
    # each with the UID it was listed with, for the deletion's precondition; the result shows namespace/name
    assert step.pods_to_delete == [("app", "db-0", "u-db-0"), ("app", "web-1", "u-web-1")]
    assert step.as_dict()["pods_to_delete"] == ["app/db-0", "app/web-1"]
    assert step.attachments_to_delete == [("va-1", "va-uid-1")]
    assert step.status is None
    done = plan_step(obj, node(taints=(NO_SCHEDULE_TAINT_KEY,)), later, SAFE, RD)
    assert done.code == Code.COMPLETED
    assert done.status is not None and done.status["phase"] == FENCING_COMPLETED
    conditions = {c["type"]: (c["status"], c["reason"]) for c in done.status["conditions"]}
    assert conditions["Succeeded"] == ("True", "RemediationFinishedSuccessfully")
    assert conditions["Processing"] == ("False", "RemediationFinishedSuccessfully")


def test_out_of_service_taint_flow() -> None:
    assumed = T0 + SAFE
    obj = snr(REBOOT_COMPLETED, assumed)
    later = assumed + 1
    first = plan_step(obj, node(taints=(NO_SCHEDULE_TAINT_KEY,)), later, SAFE, OOS, pods=[POD], attachments=[VA])
    assert [t["key"] for t in first.taints_to_add] == [OUT_OF_SERVICE_TAINT_KEY]
    assert first.taints_to_add[0]["value"] == "nodeshutdown" and first.taints_to_add[0]["effect"] == "NoExecute"
    assert not first.pods_to_delete
    tainted = node(taints=(NO_SCHEDULE_TAINT_KEY, OUT_OF_SERVICE_TAINT_KEY))
    waiting = plan_step(obj, tainted, later, SAFE, OOS, pods=[POD], attachments=[VA])
    assert not waiting.writes and waiting.wait_until is not None  # the taint evicts it
    evicted = plan_step(obj, tainted, later, SAFE, OOS, pods=[POD, TERMINATING], attachments=[VA])
    assert evicted.pods_to_delete == [("app", "web-1", "u-web-1")]  # finished as the pod GC would
    assert not evicted.attachments_to_delete
    detach = plan_step(obj, tainted, later, SAFE, OOS, attachments=[VA])
    assert detach.attachments_to_delete == [("va-1", "va-uid-1")]
    done = plan_step(obj, tainted, later, SAFE, OOS)
    assert done.status is not None and done.status["phase"] == FENCING_COMPLETED
    assert not done.taints_to_remove  # the node is not back yet

    completed = snr(FENCING_COMPLETED, assumed)
    dead = plan_step(completed, tainted, later, SAFE, OOS)
    assert not dead.writes
    back = node(taints=(NO_SCHEDULE_TAINT_KEY, OUT_OF_SERVICE_TAINT_KEY), ready="True")
    removed = plan_step(completed, back, later, SAFE, OOS)
    assert removed.taints_to_remove == [OUT_OF_SERVICE_TAINT_KEY]


def test_a_pod_that_tolerates_the_out_of_service_taint_does_not_hold_the_remediation() -> None:
    """As upstream: with OutOfServiceTaint the wait is for terminating pods and VolumeAttachments; a pod that
    tolerates the taint stays on the node and the remediation completes (it waited forever before)."""
    assumed = T0 + SAFE
    obj = snr(REBOOT_COMPLETED, assumed)
    tainted = node(taints=(NO_SCHEDULE_TAINT_KEY, OUT_OF_SERVICE_TAINT_KEY))
    key = OUT_OF_SERVICE_TAINT_KEY
    for toleration in (
        {"key": key, "operator": "Exists", "effect": "NoExecute"},
        {"key": key, "operator": "Equal", "value": "nodeshutdown"},
        {"operator": "Exists"},
    ):
        stays = {**POD, "spec": {"tolerations": [toleration]}}
        done = plan_step(obj, tainted, assumed + 1, SAFE, OOS, pods=[stays])
        assert done.code == Code.COMPLETED and not done.pods_to_delete, toleration
        assert done.status is not None and done.status["phase"] == FENCING_COMPLETED
    for toleration in (
        {"key": key, "operator": "Equal", "value": "other"},
        {"key": key, "operator": "Exists", "effect": "NoSchedule"},
        {"key": "another", "operator": "Exists"},
    ):
        evicted = {**POD, "spec": {"tolerations": [toleration]}}
        waits = plan_step(obj, tainted, assumed + 1, SAFE, OOS, pods=[evicted])
        assert waits.code == Code.RECOVERING and not waits.writes and waits.wait_until is not None, toleration


def test_deleted_object_cleans_up_after_fencing() -> None:
    assumed = T0 + SAFE
    obj = snr(FENCING_COMPLETED, assumed, deleting=True)
    step = plan_step(obj, node(taints=(NO_SCHEDULE_TAINT_KEY, OUT_OF_SERVICE_TAINT_KEY)), assumed, SAFE, OOS)
    assert step.code == Code.CLEANING_UP
    assert step.taints_to_remove == [OUT_OF_SERVICE_TAINT_KEY, NO_SCHEDULE_TAINT_KEY]
    assert step.remove_finalizer
    assert [(e.reason, e.on) for e in step.events] == [
        ("RemoveOutOfService", "Node"),
        ("RemoveNoScheduleTaint", "Node"),
        ("RemoveFinalizer", "SelfNodeRemediation"),
        ("RemediationFinished", "SelfNodeRemediation"),
    ]


def test_deleted_mid_fencing_completes_the_phases_first() -> None:
    assumed = T0 + SAFE
    obj = snr(PRE_REBOOT_COMPLETED, assumed, deleting=True)
    step = plan_step(obj, node(taints=(NO_SCHEDULE_TAINT_KEY,)), T0, SAFE, RD)
    assert step.code == Code.WAITING_SAFE_TIME and not step.remove_finalizer


def test_out_of_service_expiry_for_a_deleted_object() -> None:
    assumed = T0 + SAFE
    obj = snr(REBOOT_COMPLETED, assumed, deleting=True)
    tainted = node(taints=(NO_SCHEDULE_TAINT_KEY, OUT_OF_SERVICE_TAINT_KEY))
    early = plan_step(obj, tainted, assumed + 30, SAFE, OOS, pods=[TERMINATING])
    assert not early.taints_to_remove
    late = plan_step(obj, tainted, assumed + 61, SAFE, OOS, pods=[TERMINATING])
    assert late.taints_to_remove == [OUT_OF_SERVICE_TAINT_KEY, NO_SCHEDULE_TAINT_KEY]
    assert "OutOfServiceTimestampExpired" in [e[1] for e in late.events]


def test_timed_out_by_nhc_stops() -> None:
    obj = snr(PRE_REBOOT_COMPLETED, T0, **{"remediation.medik8s.io/nhc-timed-out": "2026-01-02T03:00:00Z"})
    step = plan_step(obj, node(), T0, SAFE, RD, pods=[POD])
    assert step.code == Code.STOPPED and step.status is not None
    conditions = {c["type"]: (c["status"], c["reason"]) for c in step.status["conditions"]}
    assert conditions["Succeeded"] == ("False", "RemediationTimeoutByNHC")
    assert not step.pods_to_delete


def test_node_not_found_and_config_missing() -> None:
    missing = plan_step(snr(), None, T0, SAFE, RD)
    assert missing.code == Code.NODE_NOT_FOUND and missing.status is not None
    assert [e[:2] for e in missing.events] == [("Warning", "RemediationCannotStart")]
    disabled = plan_step(snr(), node(), T0, SAFE, RD, config_found=False)
    assert disabled.code == Code.DISABLED and not disabled.taints_to_add
    assert disabled.status is not None
    assert disabled.status["conditions"][0]["reason"] == "ConfigurationNotFound"


def test_status_is_unchanged_when_nothing_differs() -> None:
    assumed = T0 + SAFE
    obj = snr(PRE_REBOOT_COMPLETED, assumed)
    first = plan_step(obj, node(taints=(NO_SCHEDULE_TAINT_KEY,)), T0, SAFE, RD)
    assert first.status is not None
    obj["status"] = first.status
    second = plan_step(obj, node(taints=(NO_SCHEDULE_TAINT_KEY,)), T0 + 5, SAFE, RD)
    assert second.status is None and not second.writes


@pytest.mark.parametrize(
    ("before", "add", "remove", "after"),
    [
        ((), [no_schedule_taint()], [], [NO_SCHEDULE_TAINT_KEY]),
        ((NO_SCHEDULE_TAINT_KEY,), [no_schedule_taint()], [], None),
        (("a", NO_SCHEDULE_TAINT_KEY), [], [NO_SCHEDULE_TAINT_KEY], ["a"]),
    ],
)
def test_taints_after(
    before: tuple[str, ...], add: list[dict[str, Any]], remove: list[str], after: list[str] | None
) -> None:
    step = Step("x", "y", taints_to_add=add, taints_to_remove=remove)
    result = taints_after(node(taints=before), step)
    assert (None if result is None else [t["key"] for t in result]) == after


def test_the_recorded_time_is_rounded_up_never_down() -> None:
    step = plan_step(snr(), node(), T0 + 0.000001, SAFE, RD)
    assert step.status is not None
    assert step.status["timeAssumedRebooted"] == "2026-01-02T03:03:01Z"
    # counted to the microsecond: a whole second is not rounded up
    assert assumed_rebooted(T0 + 0.9, 0.1) == T0 + 1 and assumed_rebooted(T0 + 0.5, 0.500001) == T0 + 2


@pytest.mark.parametrize("annotations", [{}, {REBOOT_CAPABLE_ANNOTATION: "false"}, {REBOOT_CAPABLE_ANNOTATION: "True"}])
@pytest.mark.parametrize(
    ("phase", "elapsed"),
    [(None, 0.0), (PRE_REBOOT_COMPLETED, 10.0), (PRE_REBOOT_COMPLETED, 1e6), (REBOOT_COMPLETED, 1e6)],
)
@pytest.mark.parametrize("strategy", [RD, OOS])
def test_a_node_not_shown_reboot_capable_is_never_fenced_or_emptied(
    annotations: dict[str, str], phase: str | None, elapsed: float, strategy: str
) -> None:
    """However long after the safe time: no taint, no finalizer, no deletion, no phase change; the reason
    is in the status and an event."""
    target = node(annotations=annotations)
    step = plan_step(
        snr(phase, T0 if phase else None),
        target,
        T0 + elapsed,
        SAFE,
        strategy,
        pods=[POD, TERMINATING],
        attachments=[VA],
    )
    assert step.code == Code.NOT_REBOOT_CAPABLE
    assert not (step.add_finalizer or step.taints_to_add or step.pods_to_delete or step.attachments_to_delete)
    assert step.status is not None and step.status.get("phase") == phase
    conditions = {c["type"]: c for c in step.status["conditions"]}
    assert conditions["Processing"]["reason"] == "NodeNotRebootCapable"
    assert REBOOT_CAPABLE_ANNOTATION in conditions["Processing"]["message"]
    assert [e[1] for e in step.events] == ["RemediationCannotStart"]


def test_a_node_that_becomes_capable_is_fenced_and_a_deleted_object_still_cleans_up() -> None:
    assert plan_step(snr(), node(), T0, SAFE, RD).code == Code.FENCING
    # the taints and the finalizer of a deleted object go, capable or not
    cleanup = plan_step(
        snr(FENCING_COMPLETED, T0, deleting=True), node(taints=(NO_SCHEDULE_TAINT_KEY,), annotations={}), T0, SAFE, RD
    )
    assert cleanup.code == Code.CLEANING_UP and cleanup.remove_finalizer


@pytest.mark.parametrize(
    ("stamp", "why"),
    [
        ("2026-02-30T00:00:00Z", "day is out of range for month"),
        ("9999-12-31T23:59:59-01:00", "is outside the years 0001 to 9999"),
        ("9999-12-31T23:59:30Z", "is too late"),
        ("2026-01-0\uff12T03:03:00Z", "ASCII digits"),
    ],
)
def test_a_time_assumed_rebooted_that_cannot_be_used_names_the_field(stamp: str, why: str) -> None:
    """A ValueError or OverflowError (timeAssumedRebooted + the 60 s out-of-service expiry) before; the module
    turns HealthSpecError into a failure with this message."""
    from ansible_collections.nodeops.maintenance.plugins.module_utils.core.remediation.health import HealthSpecError

    obj = snr(REBOOT_COMPLETED)
    obj["status"]["timeAssumedRebooted"] = stamp
    tainted = node(taints=(NO_SCHEDULE_TAINT_KEY, OUT_OF_SERVICE_TAINT_KEY))
    with pytest.raises(HealthSpecError, match=rf"^SelfNodeRemediation w1: status\.timeAssumedRebooted: '.*' .*{why}"):
        plan_step(obj, tainted, T0, SAFE, OOS, pods=[TERMINATING])
