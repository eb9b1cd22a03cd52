"""The pure drain classification, PDB matching, progress and result arithmetic."""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.maintenance import drain as d
from hypothesis import given
from hypothesis import strategies as st


def pod(
    name: str,
    namespace: str = "ns",
    owner: str | None = "ReplicaSet",
    owner_name: str = "rs",
    emptydir: bool = False,
    phase: str = "Running",
    terminating: bool = False,
    mirror: bool = False,
    requests: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"uid-{name}", "labels": labels or {}}
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": owner_name, "controller": True}]
    if terminating:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    if mirror:
        meta["annotations"] = {d.MIRROR_ANNOTATION: "abc"}
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": requests or {}}}]}
    if emptydir:
        spec["volumes"] = [{"name": "scratch", "emptyDir": {}}]
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def one(p: dict[str, Any], rules: d.DrainRules | None = None, daemonsets: Any = ()) -> d.PodPlan:
    return d.classify_pod(p, rules or d.DrainRules(), daemonsets)


GPU = d.parse_eviction_filters([{"by_resource_name_regex": "nvidia.com/gpu"}])


def test_replicated_pod_is_evicted() -> None:
    plan = one(pod("web"))
    assert (plan.action, plan.needs, plan.key, plan.uid) == (d.EVICT, (), "ns/web", "uid-web")


def test_daemonset_pod_is_left_alone() -> None:
    plan = one(pod("agent", owner="DaemonSet", owner_name="agent"), daemonsets={("ns", "agent")})
    assert (plan.action, plan.reason) == (d.SKIP, d.REASON_DAEMONSET)


def test_daemonset_in_another_namespace_does_not_count() -> None:
    plan = one(pod("agent", owner="DaemonSet", owner_name="agent"), daemonsets={("other", "agent")})
    assert plan.action == d.BLOCK


def test_orphaned_daemonset_pod_needs_force() -> None:
    orphan = pod("agent", owner="DaemonSet", owner_name="gone")
    blocked = one(orphan)
    assert (blocked.action, blocked.reason, blocked.needs) == (d.BLOCK, d.REASON_ORPHANED_DAEMONSET, (d.OPT_FORCE,))
    assert "gone" in blocked.warning
    forced = one(orphan, d.DrainRules(force=True))
    assert forced.action == d.EVICT
    assert forced.warning == "DaemonSet gone of pod ns/agent does not exist"


def test_orphaned_daemonset_pod_with_emptydir_needs_both() -> None:
    orphan = pod("agent", owner="DaemonSet", owner_name="gone", emptydir=True)
    assert one(orphan).needs == (d.OPT_FORCE, d.OPT_EMPTYDIR)
    assert one(orphan, d.DrainRules(force=True)).needs == (d.OPT_EMPTYDIR,)
    assert one(orphan, d.DrainRules(force=True, delete_emptydir_data=True)).action == d.EVICT


def test_finished_daemonset_pod_may_go_without_a_lookup() -> None:
    done = pod("agent", owner="DaemonSet", owner_name="gone", phase="Succeeded")
    assert one(done).action == d.EVICT
    assert d.daemonsets_to_check([done]) == set()
    assert d.daemonsets_to_check([pod("a", owner="DaemonSet", owner_name="x")]) == {("ns", "x")}


def test_mirror_pod_is_skipped_even_without_controller() -> None:
    plan = one(pod("kube-apiserver-n1", owner=None, mirror=True, emptydir=True))
    assert (plan.action, plan.reason) == (d.SKIP, d.REASON_MIRROR)


def test_emptydir_needs_delete_emptydir_data() -> None:
    p = pod("cache", emptydir=True)
    assert one(p).needs == (d.OPT_EMPTYDIR,)
    assert one(p, d.DrainRules(delete_emptydir_data=True)).action == d.EVICT


def test_unmanaged_pod_needs_force() -> None:
    p = pod("bare", owner=None)
    assert one(p).needs == (d.OPT_FORCE,)
    assert one(p, d.DrainRules(force=True)).action == d.EVICT


def test_unmanaged_pod_with_emptydir_needs_force_too() -> None:
    """kubernetes.core evicts it with delete_emptydir_data alone; kubectl (and we) also want force."""
    p = pod("bare-cache", owner=None, emptydir=True)
    assert one(p).needs == (d.OPT_EMPTYDIR, d.OPT_FORCE)
    assert one(p, d.DrainRules(delete_emptydir_data=True)).needs == (d.OPT_FORCE,)
    assert one(p, d.DrainRules(force=True)).needs == (d.OPT_EMPTYDIR,)
    assert one(p, d.DrainRules(force=True, delete_emptydir_data=True)).action == d.EVICT


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_finished_pods_may_always_go(phase: str) -> None:
    plan = one(pod("job", owner=None, emptydir=True, phase=phase))
    assert (plan.action, plan.reason) == (d.EVICT, d.REASON_FINISHED)


def test_terminating_pod_is_waited_for_not_evicted_again() -> None:
    for p in (pod("old", terminating=True), pod("bare", owner=None, emptydir=True, terminating=True)):
        plan = one(p)
        assert (plan.action, plan.reason) == (d.WAIT, d.REASON_TERMINATING)


def test_eviction_filter_picks_pods_by_requested_resource() -> None:
    rules = d.DrainRules(eviction_filters=GPU)
    assert one(pod("trainer", requests={"nvidia.com/gpu": "1", "cpu": "1"}), rules).action == d.EVICT
    skipped = one(pod("web", requests={"cpu": "1"}), rules)
    assert (skipped.action, skipped.reason) == (d.SKIP, d.REASON_FILTER)


def test_any_filter_entry_is_enough_and_search_is_unanchored() -> None:
    rules = d.DrainRules(
        eviction_filters=d.parse_eviction_filters(
            [{"by_resource_name_regex": "^rdma/"}, {"by_resource_name_regex": "gpu"}]
        )
    )
    assert one(pod("a", requests={"rdma/hca": "1"}), rules).action == d.EVICT
    assert one(pod("b", requests={"nvidia.com/gpu": "1"}), rules).action == d.EVICT
    assert one(pod("c", requests={"x/rdma/hca": "1"}), rules).action == d.SKIP


def test_filters_look_at_requests_of_regular_containers_only() -> None:
    p = pod("limits-only")
    p["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    p["spec"]["initContainers"] = [{"name": "i", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]
    assert one(p, d.DrainRules(eviction_filters=GPU)).action == d.SKIP


def test_rules_run_before_eviction_filters() -> None:
    """kubectl's order: an unmanaged or emptyDir pod the filter would skip still blocks the drain."""
    rules = d.DrainRules(eviction_filters=GPU)
    assert one(pod("bare", owner=None), rules).needs == (d.OPT_FORCE,)
    assert one(pod("cache", emptydir=True), rules).needs == (d.OPT_EMPTYDIR,)
    forced = d.DrainRules(force=True, delete_emptydir_data=True, eviction_filters=GPU)
    assert one(pod("bare", owner=None, emptydir=True), forced).action == d.SKIP
    # and the DaemonSet rule comes before the filters too
    assert (
        one(pod("agent", owner="DaemonSet", owner_name="a", requests={"nvidia.com/gpu": "1"}), rules).action == d.BLOCK
    )


@pytest.mark.parametrize(
    ("entries", "text"),
    [
        ([{"by_resource_name_regex": "("}], r"pod_eviction_filters\[0\].by_resource_name_regex '\(' is not a valid"),
        ([{"by_resource_name_regex": "gpu"}, {}], r"pod_eviction_filters\[1\].by_resource_name_regex is required"),
        ([{"by_resource_name_regex": ""}], r"pod_eviction_filters\[0\].by_resource_name_regex is required"),
    ],
)
def test_bad_filters_are_named(entries: list[dict[str, Any]], text: str) -> None:
    with pytest.raises(ValueError, match=text):
        d.parse_eviction_filters(entries)


def test_classify_sorts_and_block_message_names_every_pod_and_option() -> None:
    pods = [pod("z-bare", owner=None, emptydir=True), pod("a-web"), pod("m-orphan", owner="DaemonSet", owner_name="x")]
    plans = d.classify(pods, d.DrainRules())
    assert [p.name for p in plans] == ["a-web", "m-orphan", "z-bare"]
    msg = d.block_message("n1", plans)
    assert msg.startswith("Cannot drain node n1: ")
    assert "ns/z-bare uses emptyDir (set delete_emptydir_data: true" in msg
    assert "ns/z-bare uses emptyDir (set delete_emptydir_data: true to lose its data) and has no controller" in msg
    assert "ns/m-orphan belongs to a DaemonSet that no longer exists (set force: true)" in msg
    assert "a-web" not in msg
    assert d.block_message("n1", [p for p in plans if p.action != d.BLOCK]) == ""


def test_pdbs_for_pod_only_in_its_namespace() -> None:
    p = pod("web-1", labels={"app": "web"})
    pdbs = [
        {"metadata": {"name": "web-pdb", "namespace": "ns"}, "spec": {"selector": {"matchLabels": {"app": "web"}}}},
        {"metadata": {"name": "all", "namespace": "ns"}, "spec": {"selector": {}}},
        {"metadata": {"name": "web-pdb", "namespace": "other"}, "spec": {"selector": {}}},
        {"metadata": {"name": "db", "namespace": "ns"}, "spec": {"selector": {"matchLabels": {"app": "db"}}}},
        {"metadata": {"name": "null-selects-none", "namespace": "ns"}, "spec": {}},
        {
            "metadata": {"name": "front", "namespace": "ns"},
            "spec": {"selector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["web", "api"]}]}},
        },
    ]
    assert d.pdbs_for_pod(p, pdbs) == ["all", "front", "web-pdb"]


def test_pdbs_from_eviction_refusal() -> None:
    body = {
        "reason": "TooManyRequests",
        "details": {
            "causes": [
                {
                    "reason": "DisruptionBudget",
                    "message": "The disruption budget web-pdb needs 2 healthy pods and has 2",
                }
            ]
        },
    }
    assert d.pdbs_from_status(body) == ["web-pdb"]
    assert d.pdbs_from_status({}) == []


def test_retry_delay_doubles_to_a_cap() -> None:
    assert [d.retry_delay(n) for n in (1, 2, 3, 4, 5, 9)] == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]


def test_bypass_due() -> None:
    assert not d.bypass_due(100.0, 1000.0, None)
    assert not d.bypass_due(100.0, 129.9, 30)
    assert d.bypass_due(100.0, 130.0, 30)
    assert d.bypass_due(100.0, 100.0, 0)


@given(st.integers(min_value=0, max_value=10_000), st.integers(min_value=-5, max_value=20_000))
def test_progress_is_a_bounded_truncated_percent(total: int, remaining: int) -> None:
    value = d.progress_percent(total, remaining)
    assert 0 <= value <= 100
    if total == 0 or remaining <= 0:
        assert value == 100
    elif remaining >= total:
        assert value == 0


def test_progress_matches_the_operator_numbers() -> None:
    assert d.progress_percent(3, 2) == 33
    assert d.progress_percent(3, 1) == 66
    plans = d.classify(
        [pod("a"), pod("b"), pod("c", terminating=True), pod("ds", owner="DaemonSet", owner_name="x")],
        d.DrainRules(),
        {("ns", "x")},
    )
    progress = d.progress_of(4, plans, gone={"uid-a"})
    assert progress.as_status() == {
        "totalPods": 4,
        "evictionPods": 3,
        "drainProgress": 33,
        "waitForEviction": ["ns/b", "ns/c"],
    }


def test_outcomes_totals_and_failure_message() -> None:
    outcomes = [
        d.PodOutcome("ns", "a", d.EVICTED, seconds=0.12345),
        d.PodOutcome("ns", "b", d.BLOCKED, pdbs=["web-pdb"]),
        d.PodOutcome("ns", "c", d.TERMINATING),
        d.PodOutcome("ns", "e", d.FAILED, error="boom"),
        d.PodOutcome("ns", "ds", d.SKIPPED, d.REASON_DAEMONSET),
    ]
    assert outcomes[0].as_dict() == {"namespace": "ns", "name": "a", "action": "evicted", "seconds": 0.123}
    assert outcomes[1].as_dict()["pdbs"] == ["web-pdb"]
    assert d.totals(outcomes) == {
        "evicted": 1,
        "deleted": 0,
        "gone": 0,
        "skipped": 1,
        "blocked": 1,
        "terminating": 1,
        "failed": 1,
    }
    msg = d.failure_message("n1", outcomes, 300, timed_out=True)
    assert msg.startswith("Drain of node n1 timed out after 300s: ")
    assert "eviction refused by PodDisruptionBudget web-pdb for ns/b" in msg
    assert "still terminating: ns/c" in msg
    assert "ns/e: boom" in msg
    assert d.pdb_names(outcomes) == ["ns/web-pdb"]


def test_a_failure_message_names_each_cause_once_with_its_pods() -> None:
    def unreachable(name: str) -> str:
        return f"Cannot reach the Kubernetes API at https://k:6443: POST /api/v1/namespaces/ns/pods/{name}/eviction."

    outcomes = [d.PodOutcome("ns", f"web-{i}", d.FAILED, error=unreachable(f"web-{i}")) for i in range(40)]
    outcomes += [d.PodOutcome("ns", f"db-{i}", d.BLOCKED, pdbs=["db"]) for i in range(3)]
    msg = d.failure_message("n1", outcomes, 180, timed_out=True)
    assert msg.count("Cannot reach the Kubernetes API") == 1 and msg.count("PodDisruptionBudget") == 1
    assert all(f"ns/web-{i}" in msg for i in range(40)) and "ns/db-2" in msg
    assert "pods/<pod>/eviction" in msg and len(msg) < 1500


def test_initial_outcomes() -> None:
    plans = d.classify([pod("bare", owner=None), pod("old", terminating=True), pod("m", mirror=True)], d.DrainRules())
    got = {p.name: d.initial_outcome(p).as_dict() for p in plans}
    assert got["bare"]["action"] == d.BLOCKED and got["bare"]["needs"] == [d.OPT_FORCE]
    assert got["old"]["action"] == d.TERMINATING
    assert got["m"] == {"namespace": "ns", "name": "m", "action": "skipped", "reason": "mirror", "seconds": 0.0}
