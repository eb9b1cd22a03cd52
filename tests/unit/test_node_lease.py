"""The per-node Lease of the medik8s operators, as a NodeHealthCheck takes, keeps and gives it up: medik8s
common's rules (who holds it, for how long, when a remediation is overdue) in the pure core, and the pass's
conditional writes of it against a fake API client."""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.node.rfc3339 import micro_time
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.remediation import nodelease
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.remediation.health import (
    TIMED_OUT_ANNOTATION,
    Code,
    evaluate,
)
from ansible_collections.nodeops.maintenance.plugins.module_utils.engines.health import (
    HealthInputError,
    evaluation_events,
    node_leases,
    offline_pass,
)
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.errors import NotFound
from unit.test_engine_health import NOW, SNRS, SPEC, cluster, node, run_pass, snr

HOLDER = "NodeHealthCheck-n"
NS = nodelease.NAMESPACE


def lease(node_name: str, holder: str, renewed: float, duration: int = 660, acquired: float | None = None) -> dict:
    """A node Lease renewed ``renewed`` seconds before NOW (acquired ``acquired`` seconds before, default the same)."""
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": f"node-{node_name}", "namespace": NS},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": duration,
            "acquireTime": micro_time(NOW - (renewed if acquired is None else acquired)),
            "renewTime": micro_time(NOW - renewed),
        },
    }


def held(*leases: dict) -> dict[str, nodelease.NodeLease]:
    return node_leases(leases)


NODES = [node("a", "True"), node("b", "Unknown")]


# -- the rules (pure core) -----------------------------------------------------------------------------------
def test_a_lease_is_held_from_its_renewal_for_its_duration() -> None:
    one = nodelease.read(lease("b", "node-maintenance", renewed=100, duration=3600))
    assert one.held_by_other(HOLDER, NOW) and not one.held_by_other("node-maintenance", NOW)
    assert not nodelease.read(lease("b", "node-maintenance", renewed=3601, duration=3600)).held_by_other(HOLDER, NOW)
    # renewed "in the future" (the holder's clock runs ahead of this host's): held all the same
    assert nodelease.read(lease("b", "other", renewed=-5)).held_by_other(HOLDER, NOW)
    empty = nodelease.read({"metadata": {"name": "node-b"}, "spec": {"holderIdentity": "other"}})
    assert not empty.held_by_other(HOLDER, NOW)
    assert nodelease.name_for("Worker-1") == "node-worker-1" and nodelease.holder_for("n") == HOLDER


def test_a_node_under_a_node_maintenance_lease_is_skipped_and_looked_at_in_a_minute() -> None:
    evaluation = evaluate(SPEC, NODES, [], NOW, (), (), held(lease("b", "node-maintenance", 10, 3600)), HOLDER)
    assert evaluation.to_remediate == () and evaluation.lease_writes == ()
    decision = evaluation.decision("b")
    assert decision.code == Code.SKIPPED_LEASE and "node-maintenance" in decision.reason
    assert evaluation.requeue_after == nodelease.TAKEN_RETRY_SECONDS
    [event] = [e for e in evaluation_events(evaluation, set()) if e["reason"] == "RemediationSkipped"]
    assert event["message"] == "Skipped remediation of node: b, because node lease is already taken"


def test_a_new_remediation_takes_the_lease_for_ten_minutes_and_one() -> None:
    evaluation = evaluate(SPEC, NODES, [], NOW, (), (), {}, HOLDER)
    assert [r.node for r in evaluation.to_remediate] == ["b"]
    [write] = evaluation.lease_writes
    assert (write.node, write.action, write.duration, write.current) == ("b", "take", 660.0, None)
    spec = nodelease.spec_after(write, NOW)
    assert spec["holderIdentity"] == HOLDER and spec["leaseDurationSeconds"] == 660
    assert spec["acquireTime"] == spec["renewTime"] == "2026-01-02T03:10:00.000000Z"
    # one that ran out is taken over: a transition, acquired now
    stale = nodelease.read(lease("b", "node-maintenance", renewed=4000, duration=3600))
    over = evaluate(SPEC, NODES, [], NOW, (), (), {"b": stale}, HOLDER)
    [takeover] = over.lease_writes
    assert takeover.current == stale and nodelease.spec_after(takeover, NOW)["leaseTransitions"] == 1


def test_an_escalation_step_takes_the_lease_for_its_own_timeout() -> None:
    ref = SPEC["remediationTemplate"]
    spec = {k: v for k, v in SPEC.items() if k != "remediationTemplate"}
    spec["escalatingRemediations"] = [
        {"remediationTemplate": ref, "order": 0, "timeout": "5m"},
        {"remediationTemplate": {**ref, "name": "second"}, "order": 1, "timeout": "20m"},
    ]
    evaluation = evaluate(spec, NODES, [], NOW, (), (), {}, HOLDER)
    [write] = evaluation.lease_writes
    assert write.duration == 300 + 60


def test_a_single_templates_remediation_is_overdue_after_thirty_minutes() -> None:
    rems = [snr("b")]
    rems[0]["metadata"]["creationTimestamp"] = "2026-01-02T02:30:00Z"
    # renewed 5 minutes ago, taken 29 minutes ago: kept, renewed since it runs out within 10 minutes
    fresh = held(lease("b", HOLDER, renewed=300, acquired=29 * 60))
    keep = evaluate(SPEC, NODES, rems, NOW, (), (), fresh, HOLDER)
    assert keep.decision("b").code == Code.REMEDIATING and keep.to_mark_timed_out == ()
    [renew] = keep.lease_writes
    assert (renew.action, renew.duration) == ("renew", 660.0)
    assert nodelease.spec_after(renew, NOW)["acquireTime"] == micro_time(NOW - 29 * 60)
    assert keep.requeue_after is not None and keep.requeue_after <= 61
    # taken 30 minutes and one second ago: overdue, the Lease goes and the object is marked timed out
    late = held(lease("b", HOLDER, renewed=60, acquired=30 * 60 + 1))
    overdue = evaluate(SPEC, NODES, rems, NOW, (), (), late, HOLDER)
    assert [w.action for w in overdue.lease_writes] == ["release"]
    assert [r.name for r in overdue.to_mark_timed_out] == ["b"]
    assert overdue.decision("b").code == Code.REMEDIATING and "overdue" in overdue.decision("b").reason
    # once marked, the single template's object stays in progress: no NoTemplateLeft, nothing more to do
    rems[0]["metadata"]["annotations"][TIMED_OUT_ANNOTATION] = "2026-01-02T03:10:00Z"
    after = evaluate(SPEC, NODES, rems, NOW, (), (), {}, HOLDER)
    assert after.decision("b").code == Code.REMEDIATING and after.to_remediate == () and after.lease_writes == ()


def test_a_new_remediation_is_timed_from_now_even_under_a_lease_left_from_an_earlier_one() -> None:
    """The node flapped (or its object was deleted to retry) before a pass gave its Lease up: the new remediation
    takes the Lease afresh, so it is not overdue on the earlier one's acquire time."""
    old = held(lease("b", HOLDER, renewed=2 * 3600, acquired=3 * 3600))
    evaluation = evaluate(SPEC, NODES, [], NOW, (), (), old, HOLDER)
    [take] = evaluation.lease_writes
    assert take.fresh
    spec = nodelease.spec_after(take, NOW)
    assert spec["acquireTime"] == micro_time(NOW) and spec["leaseTransitions"] == 1
    # the next pass keeps it: not overdue
    taken = nodelease.NodeLease("b", HOLDER, NOW, NOW, 660.0)
    later = NOW + 30
    rems = [snr("b")]
    rems[0]["metadata"]["creationTimestamp"] = "2026-01-02T03:10:00Z"
    after = evaluate(SPEC, NODES, rems, later, (), (), {"b": taken}, HOLDER)
    assert after.lease_writes == () and after.to_mark_timed_out == ()


def test_lease_fields_out_of_range_are_named() -> None:
    for duration in (0, 2**31, 10**15):
        with pytest.raises(HealthInputError, match="leaseDurationSeconds"):
            node_leases([lease("b", HOLDER, renewed=60, duration=duration)])
    late = lease("b", HOLDER, renewed=60, duration=2**31 - 1)
    late["spec"]["renewTime"] = "9999-12-31T00:00:00.000000Z"
    with pytest.raises(HealthInputError, match="past the year 9999"):
        node_leases([late])
    with pytest.raises(HealthInputError, match="leases: give name too"):
        offline_pass(SPEC, NODES, [], NOW, leases=[lease("b", HOLDER, renewed=60)])


def test_someone_elses_lease_over_a_remediation_in_progress_is_left_alone() -> None:
    theirs = held(lease("b", "node-maintenance", renewed=60, acquired=7200, duration=3600))
    evaluation = evaluate(SPEC, NODES, [snr("b")], NOW, (), (), theirs, HOLDER)
    assert evaluation.lease_writes == () and evaluation.to_mark_timed_out == ()


def test_the_lease_of_a_node_healthy_again_is_given_up_and_no_one_elses() -> None:
    leases = held(lease("a", HOLDER, renewed=60), lease("b", "node-maintenance", renewed=60, duration=3600))
    nodes = [node("a", "True"), node("b", "True")]
    evaluation = evaluate(SPEC, nodes, [], NOW, (), (), leases, HOLDER)
    assert [(w.node, w.action) for w in evaluation.lease_writes] == [("a", "release")]


def test_leases_that_cannot_be_read_name_the_field() -> None:
    bad = lease("b", HOLDER, renewed=60)
    bad["spec"]["renewTime"] = "soon"
    with pytest.raises(HealthInputError, match=r"Lease node-b: spec\.renewTime"):
        offline_pass(SPEC, NODES, [], NOW, leases=[bad], name="n")
    bad = lease("b", HOLDER, renewed=60)
    bad["spec"]["leaseDurationSeconds"] = "660"
    with pytest.raises(HealthInputError, match="leaseDurationSeconds"):
        offline_pass(SPEC, NODES, [], NOW, leases=[bad], name="n")
    # other Leases of the namespace are not node Leases, and are not read
    other = {"metadata": {"name": "something-else"}, "spec": {"renewTime": "soon"}}
    assert offline_pass(SPEC, NODES, [], NOW, leases=[other], name="n").leases == [
        {"node": "b", "lease": "node-b", "action": "take", "duration_seconds": 660}
    ]


# -- the pass's writes (fake API client) ---------------------------------------------------------------------
def test_the_lease_is_taken_before_the_remediation_object_is_created() -> None:
    fake = cluster(SPEC, [node("a", "True"), node("b", "Unknown")], [])
    fake.store[("nodes", "", "b")]["metadata"]["uid"] = "node-b-uid"
    result = run_pass(fake)
    writes = [w for w in fake.writes if w[1] in ("leases", SNRS) and w[2] != "nodeops-health-n"]
    assert writes[:2] == [("create", "leases", "node-b"), ("create", SNRS, "b")], fake.writes
    stored = fake.store[("leases", NS, "node-b")]
    assert stored["spec"]["holderIdentity"] == HOLDER and stored["spec"]["leaseDurationSeconds"] == 660
    assert stored["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": "b", "uid": "node-b-uid"}
    ]
    assert result.leases == [{"node": "b", "lease": "node-b", "action": "take", "duration_seconds": 660}]


def test_a_lease_taken_by_someone_else_meanwhile_means_no_remediation() -> None:
    """A node maintenance takes the Lease between our read and our create: the create is refused (the name is
    taken), the pass reads again, finds the Lease held and creates nothing for the node."""
    fake = cluster(SPEC, [node("a", "True"), node("b", "Unknown")], [])
    key = ("leases", NS, "node-b")

    def maintenance_takes_it() -> None:
        fake.put("leases", lease("b", "node-maintenance", renewed=0, duration=3600), new=True)

    fake.before("create", key, maintenance_takes_it)
    result = run_pass(fake)
    assert result.rereads == 1 and result.created == [] and result.leases == []
    assert not [k for k in fake.store if k[0] == SNRS]
    assert fake.store[key]["spec"]["holderIdentity"] == "node-maintenance"
    assert result.evaluation.decision("b").code == Code.SKIPPED_LEASE


def test_renewal_and_release_are_conditional_on_the_lease_as_read() -> None:
    fake = cluster(SPEC, [node("a", "True"), node("b", "Unknown")], [snr("b")])
    fake.put("leases", lease("b", HOLDER, renewed=300, acquired=600), new=True)
    key = ("leases", NS, "node-b")
    listed = fake.store[key]["metadata"]["resourceVersion"]
    fake.change(key, lambda obj: obj["metadata"].update(ownerReferences=[{"kind": "Node", "name": "b", "uid": "n"}]))
    listed = fake.store[key]["metadata"]["resourceVersion"]
    result = run_pass(fake)
    assert result.leases == [{"node": "b", "lease": "node-b", "action": "renew", "duration_seconds": 660}]
    renewed = fake.store[key]
    assert renewed["metadata"]["ownerReferences"] == [{"kind": "Node", "name": "b", "uid": "n"}]
    assert renewed["metadata"]["resourceVersion"] != listed
    assert renewed["spec"]["renewTime"] == micro_time(NOW)
    assert renewed["spec"]["acquireTime"] == micro_time(NOW - 600)

    # the node is healthy again and its object gone: the Lease is deleted on its uid and version
    fake = cluster(SPEC, [node("a", "True"), node("b", "True")], [])
    fake.put("leases", lease("b", HOLDER, renewed=60), new=True)
    meta = fake.store[key]["metadata"]
    result = run_pass(fake)
    assert key not in fake.store and result.leases == [{"node": "b", "lease": "node-b", "action": "release"}]
    assert ("delete", "node-b", {"uid": meta["uid"], "resourceVersion": meta["resourceVersion"]}) in fake.preconditions


def test_check_mode_shows_the_lease_writes_and_makes_none() -> None:
    fake = cluster(SPEC, [node("a", "True"), node("b", "Unknown")], [])
    result = run_pass(fake, check_mode=True)
    assert result.leases == [{"node": "b", "lease": "node-b", "action": "take", "duration_seconds": 660}]
    assert ("leases", NS, "node-b") not in fake.store


def test_a_missing_lease_namespace_is_made() -> None:
    fake = cluster(SPEC, [node("a", "True"), node("b", "Unknown")], [])
    create = fake.create
    made: list[str] = []

    def create_needing_the_namespace(res: Any, body: dict[str, Any], namespace: str | None = None) -> Any:
        if res.plural == "leases" and namespace == NS and not made:
            raise NotFound(f'namespaces "{NS}" not found', 404, {"details": {"name": NS}})
        if res.plural == "namespaces":
            made.append(body["metadata"]["name"])
        return create(res, body, namespace)

    fake.create = create_needing_the_namespace  # type: ignore[method-assign]
    result = run_pass(fake)
    assert made == [NS] and ("leases", NS, "node-b") in fake.store
    assert [c["node"] for c in result.created] == ["b"]
