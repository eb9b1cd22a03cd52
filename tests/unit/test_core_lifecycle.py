"""The NodeMaintenance lifecycle (core/maintenance/lifecycle.py): every transition of the NVIDIA operator's states."""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.maintenance import lifecycle as lc
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.maintenance.cordon import (
    CORDONED_BY_ANNOTATION,
    ENGINE_FIELD_MANAGER,
    cordoned_by,
)
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.maintenance.scheduler import (
    FINALIZER,
    INITIAL_UNSCHEDULABLE_ANNOTATION,
)

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def nm(
    phase: str | None = None,
    *,
    finalizer: bool = False,
    deleting: bool = False,
    annotations: dict[str, str] | None = None,
    spec: dict[str, Any] | None = None,
    status: dict[str, Any] | None = None,
    requestor_failed: bool = False,
) -> dict[str, Any]:
    conditions = []
    if phase is not None:
        conditions.append({"type": "Ready", "status": "False", "reason": phase})
    if requestor_failed:
        conditions.append({"type": "RequestorFailed", "status": "True", "reason": "FailedMaintenance"})
    meta: dict[str, Any] = {"name": "m", "namespace": "ns", "uid": "uid-m", "annotations": dict(annotations or {})}
    if finalizer:
        meta["finalizers"] = [FINALIZER]
    if deleting:
        meta["deletionTimestamp"] = "2027-01-15T07:00:00Z"
    return {
        "metadata": meta,
        "spec": {"nodeName": "n1", "requestorID": "a.example.com", **(spec or {})},
        "status": {"conditions": conditions, **(status or {})},
    }


OUR_CLAIM = "NodeMaintenance ns/m uid-m"


def node(unschedulable: bool = False, marker: str | None = None, owner: str | None = None) -> dict[str, Any]:
    """``marker``: the cordoned-by annotation; ``owner``: the field manager that owns spec.unschedulable."""
    meta: dict[str, Any] = {"name": "n1", "uid": "u1"}
    if marker is not None:
        meta["annotations"] = {CORDONED_BY_ANNOTATION: marker}
    if owner is not None:
        meta["managedFields"] = [
            {"manager": "kubelet", "operation": "Update", "subresource": "status", "fieldsV1": {"f:status": {}}},
            {"manager": owner, "operation": "Update", "fieldsV1": {"f:spec": {"f:unschedulable": {}}}},
        ]
    return {"metadata": meta, "spec": {"unschedulable": True} if unschedulable else {}}


def ours() -> dict[str, Any]:
    """n1 as our cordon left it: cordoned, our marker, our field manager owns spec.unschedulable."""
    return node(True, OUR_CLAIM, ENGINE_FIELD_MANAGER)


def reasons(step: lc.Step) -> list[str]:
    return [e.message for e in step.events if e.reason == lc.EVENT_CONDITION_CHANGED]


def test_new_request_becomes_pending_with_an_event() -> None:
    step = lc.next_step(nm(), node(), NOW)
    assert step.phase == "Pending" and reasons(step) == ["Pending"]


def test_pending_waits_for_the_scheduler() -> None:
    step = lc.next_step(nm("Pending"), node(), NOW)
    assert step.idle and "scheduler" in step.waiting


def test_scheduled_step_and_finalizer_at_scheduled() -> None:
    assert lc.scheduled_step().phase == "Scheduled" and reasons(lc.scheduled_step()) == ["Scheduled"]
    step = lc.next_step(nm("Scheduled"), node(), NOW)
    assert (step.phase, step.finalizer, step.owner) == ("Cordon", True, True)
    again = lc.next_step(nm("Scheduled", finalizer=True), node(), NOW)
    assert again.finalizer is None


def test_cordon_records_the_initial_state_and_cordons() -> None:
    step = lc.next_step(nm("Cordon", finalizer=True), node(), NOW)
    assert step.annotations == {INITIAL_UNSCHEDULABLE_ANNOTATION: "false"}
    assert step.unschedulable is True and step.phase == "WaitForPodCompletion"


def test_cordon_leaves_a_cordoned_node_and_records_true() -> None:
    step = lc.next_step(nm("Cordon", finalizer=True), node(unschedulable=True), NOW)
    assert step.annotations == {INITIAL_UNSCHEDULABLE_ANNOTATION: "true"} and step.unschedulable is None


def test_cordon_records_only_once() -> None:
    # killed after the annotation and the cordon: the rerun changes neither
    obj = nm("Cordon", finalizer=True, annotations={INITIAL_UNSCHEDULABLE_ANNOTATION: "false"})
    step = lc.next_step(obj, ours(), NOW)
    assert step.annotations == {} and step.unschedulable is None and step.phase == "WaitForPodCompletion"


@pytest.mark.parametrize(
    "cordoned",
    [
        node(True),  # kubectl cordon: no marker
        node(True, "NodeMaintenance ns/other uid-o", ENGINE_FIELD_MANAGER),  # another request's cordon
        node(True, OUR_CLAIM, "kubectl"),  # our marker, but someone else set spec.unschedulable since
    ],
)
def test_cordon_of_a_node_someone_else_cordoned_since_the_record_records_true(cordoned: dict[str, Any]) -> None:
    # the record said "false" (a killed pass, or a look before someone cordoned it): the node is not ours
    obj = nm("Cordon", finalizer=True, annotations={INITIAL_UNSCHEDULABLE_ANNOTATION: "false"})
    step = lc.next_step(obj, cordoned, NOW)
    assert step.annotations == {INITIAL_UNSCHEDULABLE_ANNOTATION: "true"} and step.unschedulable is None


def test_cordon_of_a_node_uncordoned_since_a_true_record_cordons_it() -> None:
    obj = nm("Cordon", finalizer=True, annotations={INITIAL_UNSCHEDULABLE_ANNOTATION: "true"})
    step = lc.next_step(obj, node(), NOW)
    assert step.annotations == {INITIAL_UNSCHEDULABLE_ANNOTATION: "false"} and step.unschedulable is True


def test_only_cordon_and_release_decide_on_the_node() -> None:
    assert lc.decides_on_node(nm("Cordon", finalizer=True))
    assert lc.decides_on_node(nm("Ready", finalizer=True, deleting=True))
    assert not lc.decides_on_node(nm("Ready", deleting=True))
    assert not any(lc.decides_on_node(nm(phase, finalizer=True)) for phase in ("Scheduled", "Draining", "Ready"))


def test_cordon_false_does_nothing_to_the_node() -> None:
    step = lc.next_step(nm("Cordon", finalizer=True, spec={"cordon": False}), node(), NOW)
    assert step.annotations == {} and step.unschedulable is None and step.phase == "WaitForPodCompletion"


def test_wait_without_spec_goes_on_to_draining() -> None:
    step = lc.next_step(nm("WaitForPodCompletion", finalizer=True), node(), NOW)
    assert step.phase == "Draining" and reasons(step) == ["Draining"]


def test_wait_stamps_the_start_and_asks_for_the_pods() -> None:
    obj = nm("WaitForPodCompletion", finalizer=True, spec={"waitForPodCompletion": {"podSelector": "app=x"}})
    step = lc.next_step(obj, node(), NOW)
    assert step.need == lc.NEED_PODS
    assert step.annotations == {lc.WAIT_START_ANNOTATION: "2027-01-15T08:00:00Z"}
    seen = lc.next_step(obj, node(), NOW, lc.Observation(waiting_pods=("ns/b", "ns/a")))
    assert seen.phase is None and seen.status == {"waitForCompletion": ["ns/a", "ns/b"]} and "2 pod" in seen.waiting
    done = lc.next_step(obj, node(), NOW, lc.Observation(waiting_pods=()))
    assert done.phase == "Draining"


def test_wait_timeout_continues_to_draining() -> None:
    spec = {"waitForPodCompletion": {"timeoutSeconds": 60}}
    started = {lc.WAIT_START_ANNOTATION: lc.rfc3339(NOW - 61)}
    obj = nm("WaitForPodCompletion", finalizer=True, spec=spec, annotations=started)
    step = lc.next_step(obj, node(), NOW, lc.Observation(waiting_pods=("ns/a",)))
    assert step.phase == "Draining" and step.annotations == {}
    within = lc.next_step(obj, node(), NOW - 2, lc.Observation(waiting_pods=("ns/a",)))
    assert within.phase is None
    forever = nm("WaitForPodCompletion", spec={"waitForPodCompletion": {"timeoutSeconds": 0}}, annotations=started)
    assert lc.next_step(forever, node(), NOW + 10**6, lc.Observation(waiting_pods=("ns/a",))).phase is None


def test_wait_with_an_unparseable_start_starts_now() -> None:
    obj = nm("WaitForPodCompletion", spec={"waitForPodCompletion": {}}, annotations={lc.WAIT_START_ANNOTATION: "x"})
    assert lc.next_step(obj, node(), NOW).annotations == {lc.WAIT_START_ANNOTATION: lc.rfc3339(NOW)}


def test_draining_without_spec_is_ready() -> None:
    step = lc.next_step(nm("Draining", finalizer=True), node(), NOW)
    assert step.phase == "Ready" and reasons(step) == ["Ready"]


DRAIN = {"drainSpec": {"force": True}}
PROGRESS = {"totalPods": 3, "evictionPods": 2, "drainProgress": 50, "waitForEviction": ["ns/a"]}


def test_draining_asks_for_a_drain_and_records_its_start() -> None:
    step = lc.next_step(nm("Draining", spec=DRAIN), node(), NOW)
    assert step.need == lc.NEED_DRAIN and step.annotations == {lc.DRAIN_START_ANNOTATION: lc.rfc3339(NOW)}


def test_draining_in_progress_writes_the_progress() -> None:
    obj = nm("Draining", spec=DRAIN, annotations={lc.DRAIN_START_ANNOTATION: lc.rfc3339(NOW)})
    step = lc.next_step(obj, node(), NOW, lc.Observation(drain=lc.DrainReport(False, PROGRESS)))
    assert step.phase is None and step.status == {"drain": PROGRESS} and step.events == []
    same = nm("Draining", spec=DRAIN, annotations=obj["metadata"]["annotations"], status={"drain": PROGRESS})
    assert lc.next_step(same, node(), NOW, lc.Observation(drain=lc.DrainReport(False, PROGRESS))).idle


def test_drain_done_is_ready() -> None:
    obj = nm("Draining", spec=DRAIN, annotations={lc.DRAIN_START_ANNOTATION: lc.rfc3339(NOW)})
    final = {**PROGRESS, "drainProgress": 100, "waitForEviction": []}
    step = lc.next_step(obj, node(), NOW, lc.Observation(drain=lc.DrainReport(True, final)))
    assert step.phase == "Ready" and step.status == {"drain": final}
    assert step.annotations == {lc.DRAIN_START_ANNOTATION: None}


def test_pdb_blocked_drain_warns_once_and_shows_the_blockers() -> None:
    obj = nm("Draining", spec=DRAIN, annotations={lc.DRAIN_START_ANNOTATION: lc.rfc3339(NOW)})
    report = lc.DrainReport(False, PROGRESS, blocking_pods=("ns/a",), blocking_pdbs=("ns/pdb",))
    step = lc.next_step(obj, node(), NOW, lc.Observation(drain=report))
    assert step.status["drain"]["blockingPods"] == ["ns/a"] and step.status["drain"]["blockingPDBs"] == ["ns/pdb"]
    assert [(e.reason, e.type) for e in step.events] == [("EvictionBlocked", "Warning")]
    assert "ns/pdb" in step.events[0].message
    again = nm("Draining", spec=DRAIN, annotations=obj["metadata"]["annotations"], status=step.status)
    assert lc.next_step(again, node(), NOW, lc.Observation(drain=report)).events == []


def test_drain_timeout_warns_and_starts_a_new_attempt() -> None:
    obj = nm("Draining", spec=DRAIN, annotations={lc.DRAIN_START_ANNOTATION: lc.rfc3339(NOW - 400)})
    report = lc.DrainReport(False, PROGRESS, timed_out=True, message="Drain of node n1 timed out")
    step = lc.next_step(obj, node(), NOW, lc.Observation(drain=report))
    assert step.phase is None  # the reason stays Draining (docs/design-notes.md: what blocks a drain)
    assert step.annotations == {lc.DRAIN_START_ANNOTATION: lc.rfc3339(NOW)}
    assert [(e.reason, e.type) for e in step.events] == [("DrainTimeout", "Warning")]


def test_drain_blocked_by_rules_warns_once() -> None:
    obj = nm("Draining", spec=DRAIN, annotations={lc.DRAIN_START_ANNOTATION: lc.rfc3339(NOW)})
    report = lc.DrainReport(False, {"totalPods": 1}, blocked_by_rules="pod ns/a needs force")
    step = lc.next_step(obj, node(), NOW, lc.Observation(drain=report))
    assert step.status["drain"]["blockedByRules"] == "pod ns/a needs force"
    assert [e.reason for e in step.events] == ["EvictionBlocked"] and step.waiting == "pod ns/a needs force"
    again = nm("Draining", spec=DRAIN, annotations=obj["metadata"]["annotations"], status=step.status)
    assert lc.next_step(again, node(), NOW, lc.Observation(drain=report)).events == []


def test_ready_stamps_the_ready_time_once() -> None:
    step = lc.next_step(nm("Ready", finalizer=True), node(), NOW)
    assert step.annotations == {lc.READY_TIME_ANNOTATION: "2027-01-15T08:00:00Z"} and step.phase is None
    stamped = nm("Ready", finalizer=True, annotations={lc.READY_TIME_ANNOTATION: lc.rfc3339(NOW)})
    assert lc.next_step(stamped, node(), NOW).idle


def test_requestor_failed_is_mirrored_both_ways() -> None:
    stamped = {lc.READY_TIME_ANNOTATION: lc.rfc3339(NOW)}
    failed = lc.next_step(nm("Ready", annotations=stamped, requestor_failed=True), node(), NOW)
    assert failed.phase == "RequestorFailed" and reasons(failed) == ["RequestorFailed"]
    back = lc.next_step(nm("RequestorFailed", annotations=stamped), node(), NOW)
    assert back.phase == "Ready" and reasons(back) == ["Ready"]


@pytest.mark.parametrize("phase", ["Ready", "RequestorFailed"])
def test_garbage_collection_after_the_max_time(phase: str) -> None:
    old = {lc.READY_TIME_ANNOTATION: lc.rfc3339(NOW - 3601)}
    assert lc.next_step(nm(phase, finalizer=True, annotations=old), node(), NOW).delete
    assert not lc.next_step(
        nm(phase, finalizer=True, annotations=old), node(), NOW, max_maintenance_seconds=7200
    ).delete
    kept = {**old, lc.GC_IGNORE_ANNOTATION: "true"}
    assert not lc.next_step(nm(phase, annotations=kept), node(), NOW).delete
    recent = {lc.READY_TIME_ANNOTATION: lc.rfc3339(NOW - 10)}
    assert not lc.next_step(nm(phase, annotations=recent), node(), NOW).delete


def test_deletion_uncordons_what_we_cordoned_and_drops_the_finalizer() -> None:
    record = {INITIAL_UNSCHEDULABLE_ANNOTATION: "false"}
    step = lc.next_step(nm("Draining", finalizer=True, deleting=True, annotations=record), ours(), NOW)
    assert step.unschedulable is False and step.finalizer is False and step.released
    assert step.annotations == {INITIAL_UNSCHEDULABLE_ANNOTATION: None}
    assert not step.left_cordoned and step.events == []


@pytest.mark.parametrize(
    ("cordoned", "clue"),
    [
        (node(True, OUR_CLAIM, "kubectl"), "spec.unschedulable set by kubectl"),  # uncordoned and cordoned again
        (node(True, None, "kubectl"), "=(none)"),  # and our marker removed
        (node(True, "someone", ENGINE_FIELD_MANAGER), "cordoned-by='someone'"),  # another claim
        (node(True, OUR_CLAIM), "can no longer be shown"),  # managedFields cleared: ownership cannot be shown
    ],
)
def test_deletion_leaves_a_node_cordoned_again_by_someone_else_cordoned_and_says_so(
    cordoned: dict[str, Any], clue: str
) -> None:
    record = {INITIAL_UNSCHEDULABLE_ANNOTATION: "false"}
    step = lc.next_step(nm("Ready", finalizer=True, deleting=True, annotations=record), cordoned, NOW)
    assert step.unschedulable is None and step.finalizer is False and step.released
    assert step.forget_claim is (cordoned_by(cordoned) == OUR_CLAIM)
    assert clue in step.left_cordoned and step.left_cordoned.endswith("it stays cordoned")
    assert [(e.reason, e.type) for e in step.events] == [(lc.EVENT_LEFT_CORDONED, "Warning")]


def test_deletion_says_a_node_cordoned_before_stays_cordoned() -> None:
    record = {INITIAL_UNSCHEDULABLE_ANNOTATION: "true"}
    step = lc.next_step(nm("Ready", finalizer=True, deleting=True, annotations=record), node(True), NOW)
    assert step.unschedulable is None and not step.forget_claim and "cordoned before" in step.left_cordoned
    assert [(e.reason, e.type) for e in step.events] == [(lc.EVENT_LEFT_CORDONED, "Normal")]


@pytest.mark.parametrize(
    ("annotations", "spec", "unschedulable"),
    [
        ({INITIAL_UNSCHEDULABLE_ANNOTATION: "true"}, {}, True),  # cordoned before: stays cordoned
        ({INITIAL_UNSCHEDULABLE_ANNOTATION: "false"}, {}, False),  # someone uncordoned it meanwhile
        ({INITIAL_UNSCHEDULABLE_ANNOTATION: "false"}, {"cordon": False}, True),  # we did not cordon
        ({INITIAL_UNSCHEDULABLE_ANNOTATION: "false"}, {}, True),  # cordoned, but not by us (no marker)
        ({}, {}, True),  # deleted before the Cordon step
    ],
)
def test_deletion_leaves_the_node_alone(annotations: dict[str, str], spec: dict[str, Any], unschedulable: bool) -> None:
    step = lc.next_step(
        nm("Ready", finalizer=True, deleting=True, annotations=annotations, spec=spec), node(unschedulable), NOW
    )
    assert step.unschedulable is None and step.finalizer is False


def test_deletion_holds_for_additional_requestors_in_ready_only() -> None:
    spec = {"additionalRequestors": ["b.example.com"]}
    record = {INITIAL_UNSCHEDULABLE_ANNOTATION: "false"}
    for phase in ("Ready", "RequestorFailed"):
        held = lc.next_step(nm(phase, finalizer=True, deleting=True, spec=spec, annotations=record), ours(), NOW)
        assert held.idle and "b.example.com" in held.waiting
    draining = lc.next_step(nm("Draining", finalizer=True, deleting=True, spec=spec, annotations=record), ours(), NOW)
    assert draining.finalizer is False and draining.unschedulable is False


def test_deletion_without_our_finalizer_and_node_gone() -> None:
    assert lc.next_step(nm("Pending", deleting=True), node(), NOW).idle
    gone = lc.next_step(nm("Draining", finalizer=True, deleting=True), None, NOW)
    assert gone.finalizer is False and gone.unschedulable is None
    missing = lc.next_step(nm("Ready", finalizer=True), None, NOW)
    assert missing.finalizer is False and missing.released and "does not exist" in missing.waiting
    assert lc.next_step(nm("Pending"), None, NOW).idle


def test_condition_keeps_the_transition_time_while_the_status_stays() -> None:
    other = {"type": "Other", "status": "True", "reason": "x", "message": "", "lastTransitionTime": "t"}
    conditions: list[dict[str, Any]] = [other]
    assert lc.set_ready(conditions, "Cordon", 2, NOW)
    first = {
        "type": "Ready",
        "status": "False",
        "reason": "Cordon",
        "message": "",
        "lastTransitionTime": "2027-01-15T08:00:00Z",
        "observedGeneration": 2,
    }
    assert conditions == [other, first]
    assert lc.set_ready(conditions, "Draining", 2, NOW + 60)
    assert conditions[1] == {**first, "reason": "Draining"}
    assert not lc.set_ready(conditions, "Draining", 2, NOW + 120)
    assert lc.set_ready(conditions, "Ready", 3, NOW + 60)
    assert conditions[1] == {
        **first,
        "reason": "Ready",
        "status": "True",
        "observedGeneration": 3,
        "lastTransitionTime": lc.rfc3339(NOW + 60),
    }


def test_of_several_ready_conditions_the_last_one_is_kept_and_set() -> None:
    first = {"type": "Ready", "status": "False", "reason": "Cordon", "message": "", "lastTransitionTime": "a"}
    last = {"type": "Ready", "status": "False", "reason": "Draining", "message": "", "lastTransitionTime": "b"}
    conditions: list[dict[str, Any]] = [first, {"type": "Other"}, last]
    assert lc.set_ready(conditions, "Draining", None, NOW)  # nothing new but the duplicate dropped
    assert conditions == [{"type": "Other"}, last]


def test_unknown_reason_is_left_alone() -> None:
    step = lc.next_step(nm("Paused"), node(), NOW)
    assert step.idle and "Paused" in step.waiting


def test_a_drain_over_several_passes_keeps_the_counts_of_its_start() -> None:
    earlier = {"totalPods": 100, "evictionPods": 90, "drainProgress": 40, "waitForEviction": ["x"] * 54}
    this_pass = {"totalPods": 12, "evictionPods": 9, "drainProgress": 0, "waitForEviction": ["x"] * 9}
    kept = lc.drain_counts_of_the_attempt(earlier, this_pass)
    assert kept == {"totalPods": 100, "evictionPods": 90, "drainProgress": 90}
    # a first pass, or one that sees more pods than before, keeps its own numbers
    assert lc.drain_counts_of_the_attempt({}, this_pass) == {}
    assert lc.drain_counts_of_the_attempt(this_pass, earlier) == {}


# -- times and numbers read from the object -----------------------------------------------------
@pytest.mark.parametrize(
    "stamp", ["2027-02-30T00:00:00Z", "9999-12-31T23:59:59-01:00", "\uff12\uff10\uff12\uff17-01-15T08:00:00Z"]
)
def test_an_annotation_time_that_does_not_parse_starts_again_now(stamp: str) -> None:
    """Our own annotations: a value that is not a usable time (an impossible date, past the year 9999 in UTC,
    non-ASCII digits) is treated as missing, as any unparseable value, instead of raising."""
    wait = nm("WaitForPodCompletion", spec={"waitForPodCompletion": {}}, annotations={lc.WAIT_START_ANNOTATION: stamp})
    assert lc.next_step(wait, node(), NOW).annotations == {lc.WAIT_START_ANNOTATION: lc.rfc3339(NOW)}
    ready = nm("Ready", finalizer=True, annotations={lc.READY_TIME_ANNOTATION: stamp})
    assert lc.next_step(ready, node(), NOW).annotations == {lc.READY_TIME_ANNOTATION: lc.rfc3339(NOW)}
    assert lc.drain_started_at({"metadata": {"annotations": {lc.DRAIN_START_ANNOTATION: stamp}}}, NOW) == NOW


@pytest.mark.parametrize("value", ["\u0663", "60", True, 1.5, -1, 2**31, 10**400])
def test_a_timeout_that_is_not_a_whole_number_of_seconds_names_the_field(value: object) -> None:
    """The CRD's timeoutSeconds are int32 of 0 or more; int() took "\u0663" as 3 and "x" raised a bare ValueError."""
    spec = {"waitForPodCompletion": {"timeoutSeconds": value}}
    started = {lc.WAIT_START_ANNOTATION: lc.rfc3339(NOW - 61)}
    obj = nm("WaitForPodCompletion", finalizer=True, spec=spec, annotations=started)
    step = lc.next_step(obj, node(), NOW, lc.Observation(waiting_pods=("ns/a",)))
    assert step.idle and step.phase is None
    assert step.waiting.startswith(f"spec.waitForPodCompletion.timeoutSeconds: {value!r} ")
    with pytest.raises(lc.LifecycleInputError, match=r"^spec\.drainSpec\.timeoutSeconds: "):
        lc.drain_timeout({"timeoutSeconds": value})
    assert lc.drain_timeout({"timeoutSeconds": 0}) == 0 and lc.drain_timeout({}) == lc.DEFAULT_DRAIN_TIMEOUT
