"""The pure NodeMaintenance scheduler and the rollout simulation."""

from __future__ import annotations

import random
from typing import Any

import pytest
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.intorpercent import IntOrPercentError
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.maintenance import scheduler as sch
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.maintenance.scheduler import (
    MaintenanceRequest,
    NodeState,
    SchedulerConfig,
    SchedulerInputError,
    schedule,
    simulate_rollout,
)
from hypothesis import given, settings
from hypothesis import strategies as st

T0 = 1_780_000_000


def nodes(count: int, down: dict[int, str] | None = None) -> list[NodeState]:
    """``count`` nodes n0..; ``down`` maps an index to "cordoned" or "notready"."""
    down = down or {}
    return [
        NodeState(f"n{i}", unschedulable=down.get(i) == "cordoned", ready=down.get(i) != "notready")
        for i in range(count)
    ]


def req(
    name: str,
    node: str,
    requestor: str = "a.example.com",
    phase: str = "Pending",
    created: int = 0,
    namespace: str = "ns",
    **kw: Any,
) -> MaintenanceRequest:
    return MaintenanceRequest(namespace, name, node, requestor, phase=phase, created=T0 + created, **kw)


def cfg(mpo: Any = 1, mu: Any = None) -> SchedulerConfig:
    return SchedulerConfig(mpo, mu)


def keys(result: sch.Schedule) -> list[str]:
    return [r.key for r in result.scheduled]


def reasons(result: sch.Schedule) -> dict[str, str]:
    return {d.request.name: d.reason for d in result.decisions}


# -- the examples of the NVIDIA operator's README ----------------------------------------------
def test_example_1_slots_limit() -> None:
    """10 nodes, maxParallelOperations 2, maxUnavailable 5, 5 pending -> 2."""
    result = schedule(nodes(10), [req(f"r{i}", f"n{i}", created=i) for i in range(5)], cfg(2, 5))
    assert (result.available_slots, result.can_become_unavailable) == (2, 5)
    assert keys(result) == ["ns/r0", "ns/r1"]
    assert [d.reason for d in result.decisions] == ["scheduled"] * 2 + ["no_slot"] * 3


def test_example_2_budget_limit() -> None:
    """10 nodes with 2 unavailable, maxParallelOperations 5, maxUnavailable 3, 3 pending on available nodes -> 1."""
    result = schedule(
        nodes(10, {8: "cordoned", 9: "notready"}), [req(f"r{i}", f"n{i}", created=i) for i in range(3)], cfg(5, 3)
    )
    assert (result.available_slots, result.can_become_unavailable) == (5, 1)
    assert keys(result) == ["ns/r0"]
    assert reasons(result) == {"r0": "scheduled", "r1": "no_budget", "r2": "no_budget"}
    assert "maxUnavailable (3) is reached" in result.decisions[1].message


def test_step_6_requests_on_unavailable_nodes_do_not_use_the_budget() -> None:
    """Slots 3 and budget 1: two requests on unavailable nodes plus one on an available node -> 3."""
    cluster = nodes(10, {0: "cordoned", 1: "notready", 2: "cordoned"})  # 3 down; maxUnavailable 4 -> budget 1
    requests = [req("on-cordoned", "n0", created=1), req("on-notready", "n1", created=2), req("avail", "n5")]
    result = schedule(cluster, requests, cfg(3, 4))
    assert (result.available_slots, result.can_become_unavailable) == (3, 1)
    assert sorted(keys(result)) == ["ns/avail", "ns/on-cordoned", "ns/on-notready"]
    assert reasons(result) == {
        "avail": "scheduled",
        "on-cordoned": "scheduled_node_unavailable",
        "on-notready": "scheduled_node_unavailable",
    }


def test_step_6_three_requests_on_available_nodes() -> None:
    cluster = nodes(10, {0: "cordoned", 1: "notready", 2: "cordoned"})
    result = schedule(cluster, [req(f"r{i}", f"n{i + 5}", created=i) for i in range(3)], cfg(3, 4))
    assert keys(result) == ["ns/r0"]


def test_max_unavailable_zero_lets_unavailable_nodes_go_on() -> None:
    cluster = nodes(4, {1: "notready", 2: "cordoned"})
    requests = [req("avail", "n0"), req("notready", "n1", created=1), req("cordoned", "n2", created=2)]
    result = schedule(cluster, requests, cfg(3, 0))
    assert result.can_become_unavailable == 0
    assert reasons(result) == {
        "avail": "no_budget",
        "notready": "scheduled_node_unavailable",
        "cordoned": "scheduled_node_unavailable",
    }


# -- upstream's tests and documented quirks (reference section 3) --------------------------------
def test_upstream_compaction_keeps_the_first_request_per_node() -> None:
    """nm-0..nm-4 on node-0,1,0,2,1 -> nm-0, nm-1, nm-3 compete; the rest wait for their node."""
    placement = ["n0", "n1", "n0", "n2", "n1"]
    result = schedule(nodes(3), [req(f"nm-{i}", n, created=i) for i, n in enumerate(placement)], cfg(10))
    assert keys(result) == ["ns/nm-0", "ns/nm-1", "ns/nm-3"]
    assert reasons(result)["nm-2"] == reasons(result)["nm-4"] == "node_taken"
    assert "ns/nm-0 ranks higher for node n0" in next(d.message for d in result.decisions if d.request.name == "nm-2")


def test_upstream_cordoned_candidate_is_included_with_slots_2_budget_1() -> None:
    cluster = nodes(5, {2: "cordoned"})  # maxUnavailable 2 - 1 down = budget 1
    requests = [req("a", "n0"), req("c", "n2", created=1), req("b", "n1", created=2)]
    result = schedule(cluster, requests, cfg(2, 2))
    assert (result.available_slots, result.can_become_unavailable) == (2, 1)
    assert keys(result) == ["ns/a", "ns/c"]
    assert reasons(result)["b"] == "no_slot"


def test_skipped_candidate_does_not_use_up_a_slot() -> None:
    """A skipped candidate does not use up a slot: upstream would take positions a, b only and schedule a alone."""
    cluster = nodes(5, {4: "notready"})
    requests = [req("a", "n0"), req("b", "n1", created=1), req("c", "n4", created=2)]
    result = schedule(cluster, requests, cfg(2, 2))
    assert (result.available_slots, result.can_become_unavailable) == (2, 1)
    assert keys(result) == ["ns/a", "ns/c"]
    assert reasons(result)["b"] == "no_budget"


def test_zero_slots_schedule_nothing() -> None:
    result = schedule(nodes(3), [req("a", "n0")], cfg(0))
    assert result.available_slots == 0 and keys(result) == []
    assert result.decisions[0].reason == "no_slot"
    assert "maxParallelOperations allows 0" in result.decisions[0].message


def test_percentages_round_up_for_slots_and_down_for_budget() -> None:
    result = schedule(nodes(5), [], cfg("50%", "50%"))
    assert (result.max_parallel_operations, result.max_unavailable) == (3, 2)


def test_limits_already_exceeded_give_zero_not_negative() -> None:
    """upstream preSchedule: max(0, 2 - 3) = 0 for both numbers."""
    cluster = nodes(6)
    busy = [req(f"busy{i}", f"n{i}", phase="Draining") for i in range(3)]
    result = schedule(cluster, [*busy, req("p", "n5")], cfg(2, 2))
    assert (result.available_slots, result.can_become_unavailable) == (0, 0)
    assert result.in_maintenance == ("n0", "n1", "n2")


def test_unset_config_is_one_slot_no_limit_and_negative_max_unavailable_is_no_limit() -> None:
    result = schedule(nodes(3), [req("a", "n0"), req("b", "n1", created=1)])
    assert (result.available_slots, result.can_become_unavailable) == (1, None)
    assert keys(result) == ["ns/a"]
    assert schedule(nodes(3), [], cfg(3, -1)).can_become_unavailable is None


def test_slots_are_capped_at_the_node_count() -> None:
    assert schedule(nodes(2), [], cfg(5)).available_slots == 2


def test_node_without_ready_condition_counts_as_ready() -> None:
    node = NodeState.from_dict({"metadata": {"name": "x"}})
    assert node.available
    not_ready = NodeState.from_dict(
        {"metadata": {"name": "y"}, "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}}
    )
    assert not not_ready.available
    # the first Ready condition counts, as everywhere in the collection (core/node/nodes.py)
    twice = NodeState.from_dict(
        {
            "metadata": {"name": "z"},
            "status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "Ready", "status": "True"}]},
        }
    )
    assert not twice.available
    # a Ready condition without a status is not a missing one
    blank = NodeState.from_dict({"metadata": {"name": "b"}, "status": {"conditions": [{"type": "Ready"}]}})
    assert not blank.available


# -- ranking ------------------------------------------------------------------------------------
def test_requestor_with_a_request_in_progress_goes_first() -> None:
    requests = [
        req("early", "n0", requestor="other.example.com", created=0),
        req("late", "n1", requestor="busy.example.com", created=100),
        req("running", "n2", requestor="busy.example.com", phase="Ready"),
    ]
    result = schedule(nodes(4), requests, cfg(2))
    assert keys(result) == ["ns/late"]
    assert [(d.request.name, d.rank) for d in result.decisions] == [("late", 1099), ("early", 99)]


def test_requestor_with_fewer_pending_requests_goes_first() -> None:
    requests = [req(f"many{i}", f"n{i}", requestor="many.example.com", created=i) for i in range(3)]
    requests.append(req("few", "n3", requestor="few.example.com", created=50))
    result = schedule(nodes(4), requests, cfg(1))
    assert keys(result) == ["ns/few"]


def test_a_new_request_for_a_missing_node_does_not_count_in_its_requestors_ranking() -> None:
    """The pass never marks it Pending (the operator neither), so it is not one of the requestor's pending
    requests: a has one pending (rank 99), as b does, and a's is older. A Pending request whose node went since
    still counts."""
    requests = [
        req("a-n0", "n0", requestor="a.example.com", created=1, phase=""),
        req("a-gone", "gone", requestor="a.example.com", created=0, phase=""),
        req("b-n1", "n1", requestor="b.example.com", created=2),
    ]
    result = schedule(nodes(2), requests, cfg(1), unknown_nodes="skip")
    assert keys(result) == ["ns/a-n0"]
    assert {d.request.name: d.rank for d in result.decisions} == {"a-n0": 99, "b-n1": 99, "a-gone": None}
    assert reasons(result)["a-gone"] == "node_not_found"
    requests[1] = req("a-gone", "gone", requestor="a.example.com", created=0)  # Pending before its node went
    result = schedule(nodes(2), requests, cfg(1), unknown_nodes="skip")
    assert keys(result) == ["ns/b-n1"]


def test_pending_count_is_capped_at_100() -> None:
    """upstream ranker: 110 pending -> rank 0, so requestors with 110 and 150 are equal; creation time decides."""
    cluster = nodes(300)
    requests = [req(f"a{i}", f"n{i}", requestor="a.example.com", created=10) for i in range(110)]
    requests += [req(f"b{i}", f"n{200 + i % 100}", requestor="b.example.com", created=5) for i in range(150)]
    result = schedule(cluster, requests, cfg(1), unknown_nodes="skip")
    assert {d.rank for d in result.decisions if d.rank is not None} == {0}
    assert keys(result)[0].startswith("ns/b")


def test_ties_break_on_creation_node_requestor_then_namespace_name() -> None:
    r1, r2 = "r1.example.com", "r2.example.com"  # four pending each: the same rank
    requests = [
        req("z", "n1", requestor=r1, created=5),
        req("y", "n0", requestor=r2, created=5),
        req("x", "n0", requestor=r1, created=5, namespace="b"),
        req("w", "n0", requestor=r1, created=5, namespace="a"),
        req("v", "n2", requestor=r1, created=4),
        req("y4", "n2", requestor=r2, created=9),
        req("y3", "n1", requestor=r2, created=9),
        req("y2", "n1", requestor=r2, created=9),
    ]
    result = schedule(nodes(3), requests, cfg(3))
    order = [d.request.key for d in result.decisions]
    assert order == ["ns/v", "a/w", "b/x", "ns/y", "ns/z", "ns/y2", "ns/y3", "ns/y4"]
    assert {d.rank for d in result.decisions} == {96}
    assert keys(result) == ["ns/v", "a/w", "ns/z"]


def test_one_request_per_node_and_none_on_a_node_under_maintenance() -> None:
    requests = [
        req("running", "n0", phase="Cordon"),
        req("waits", "n0", requestor="b.example.com"),
        req("first", "n1", created=1),
        req("second", "n1", requestor="b.example.com", created=2),
    ]
    result = schedule(nodes(3), requests, cfg(5))
    assert keys(result) == ["ns/first"]
    assert reasons(result) == {"first": "scheduled", "second": "node_taken", "waits": "node_in_maintenance"}


# -- in progress, deletion, new requests -------------------------------------------------------
def test_in_progress_request_being_deleted_holds_its_slot_while_it_has_the_finalizer() -> None:
    holding = req("leaving", "n0", phase="Ready", deleting=True, finalizer=True)
    result = schedule(nodes(3), [holding, req("p", "n1")], cfg(1))
    assert result.available_slots == 0 and keys(result) == []
    released = req("leaving", "n0", phase="Ready", deleting=True, finalizer=False)
    assert keys(schedule(nodes(3), [released, req("p", "n1")], cfg(1))) == ["ns/p"]


def test_pending_request_being_deleted_is_not_scheduled() -> None:
    requests = [req("gone", "n0", deleting=True), req("next", "n0", requestor="b.example.com", created=9)]
    result = schedule(nodes(2), requests, cfg(2))
    assert keys(result) == ["ns/next"]
    assert reasons(result)["gone"] == "being_deleted"


def test_request_without_a_ready_condition_counts_as_pending() -> None:
    obj = {
        "kind": "NodeMaintenance",
        "metadata": {"name": "fresh", "namespace": "ops", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"requestorID": "a.example.com", "nodeName": "n0"},
    }
    request = MaintenanceRequest.from_dict(obj)
    assert request.phase == "" and request.waiting
    assert keys(schedule(nodes(1), [request])) == ["ops/fresh"]


def test_unknown_reason_counts_as_in_progress() -> None:
    result = schedule(nodes(2), [req("odd", "n0", phase="SomethingNew"), req("p", "n1")], cfg(1))
    assert result.in_maintenance == ("n0",) and keys(result) == []


# -- parsing and errors -------------------------------------------------------------------------
def nm_dict(**over: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "maintenance.nvidia.com/v1alpha1",
        "kind": "NodeMaintenance",
        "metadata": {
            "name": "upgrade",
            "namespace": "ops",
            "creationTimestamp": "2026-01-01T00:00:05Z",
            "finalizers": [sch.FINALIZER],
            "annotations": {sch.INITIAL_UNSCHEDULABLE_ANNOTATION: "false"},
        },
        "spec": {"requestorID": "gpu.example.com", "nodeName": "n0", "additionalRequestors": ["net.example.com"]},
        "status": {"conditions": [{"type": "Ready", "status": "False", "reason": "Draining"}]},
    }
    obj.update(over)
    return obj


def test_node_maintenance_from_dict() -> None:
    request = MaintenanceRequest.from_dict(nm_dict())
    assert request == MaintenanceRequest(
        namespace="ops",
        name="upgrade",
        node_name="n0",
        requestor_id="gpu.example.com",
        phase="Draining",
        created=1767225605,
        deleting=False,
        finalizer=True,
        cordon=True,
        initial_unschedulable="false",
        additional_requestors=("net.example.com",),
    )
    assert request.holds_node


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        (nm_dict(spec={"nodeName": "n0"}), "NodeMaintenance ops/upgrade: spec.requestorID is missing"),
        (nm_dict(spec={"requestorID": "a.example.com"}), "NodeMaintenance ops/upgrade: spec.nodeName is missing"),
        (nm_dict(spec=None), "NodeMaintenance ops/upgrade: spec is missing"),
        (nm_dict(metadata={"namespace": "ops"}), "node_maintenances[0]: metadata.name is missing"),
        (nm_dict(kind="NodeMaintenanceList"), "kind is 'NodeMaintenanceList'"),
        ("upgrade", "node_maintenances[0]: a NodeMaintenance must be an object"),
        (
            nm_dict(metadata={"name": "x", "creationTimestamp": "yesterday"}),
            "NodeMaintenance default/x: metadata.creationTimestamp: 'yesterday' is not an RFC 3339 timestamp",
        ),
        (
            nm_dict(status={"conditions": "Ready"}),
            "NodeMaintenance ops/upgrade: status.conditions must be a list",
        ),
        (
            nm_dict(spec={"requestorID": "a.example.com", "nodeName": "n0", "cordon": "yes"}),
            "spec.cordon must be true or false",
        ),
    ],
)
def test_malformed_node_maintenance_names_object_and_field(obj: Any, message: str) -> None:
    with pytest.raises(SchedulerInputError) as info:
        sch.parse_requests([obj])
    assert message in str(info.value)


def test_malformed_node_names_the_field() -> None:
    with pytest.raises(SchedulerInputError, match=r"Node gpu-1: spec.unschedulable must be true or false"):
        sch.parse_nodes([{"metadata": {"name": "gpu-1"}, "spec": {"unschedulable": "yes"}}])
    with pytest.raises(SchedulerInputError, match=r"nodes\[1\]: metadata.name is missing"):
        sch.parse_nodes([{"metadata": {"name": "a"}}, {"metadata": {}}])


def test_request_for_an_unknown_node_is_an_error_unless_skipped() -> None:
    requests = [req("typo", "n9"), req("ok", "n0", created=1)]
    with pytest.raises(SchedulerInputError, match=r"NodeMaintenance ns/typo: spec.nodeName 'n9' is not one of"):
        schedule(nodes(2), requests)
    result = schedule(nodes(2), requests, unknown_nodes="skip")
    assert reasons(result) == {"ok": "scheduled", "typo": "node_not_found"}


def test_duplicates_are_errors() -> None:
    with pytest.raises(SchedulerInputError, match="Node n0: given twice"):
        schedule([*nodes(1), *nodes(1)], [])
    with pytest.raises(SchedulerInputError, match="NodeMaintenance ns/a: given twice"):
        schedule(nodes(1), [req("a", "n0"), req("a", "n0")])


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"maxUnavailable": "10.5%"}, "MaintenanceOperatorConfig: spec.maxUnavailable: '10.5%' is not an integer"),
        (
            {"maxParallelOperations": "5"},
            "spec.maxParallelOperations: '5' is a number in quotes, which the API server takes as text; write it "
            "without quotes (5).",
        ),
        ({"maxParallelOperations": True}, "spec.maxParallelOperations: True is a boolean"),
        ({"maxParallelOperation": 3}, "unknown field(s) maxParallelOperation"),
    ],
)
def test_bad_config_names_the_field(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as info:
        SchedulerConfig.from_spec(spec)
    assert message in str(info.value)
    assert isinstance(info.value, IntOrPercentError | SchedulerInputError)


def test_config_from_object_and_defaults() -> None:
    whole = {"kind": "MaintenanceOperatorConfig", "metadata": {"name": "default"}, "spec": {"maxUnavailable": "20%"}}
    config = SchedulerConfig.from_spec(whole)
    assert (config.max_parallel_operations, config.max_unavailable) == (1, "20%")
    assert SchedulerConfig.from_spec(None) == SchedulerConfig()


# -- rollout simulation ---------------------------------------------------------------------------
def wave_keys(rollout: sch.Rollout) -> list[list[str]]:
    return [[r.key for r in w.requests] for w in rollout.waves]


def test_upstream_e2e_two_at_a_time_on_distinct_nodes() -> None:
    """1 control plane + 3 workers, maxParallelOperations 2, two requestors per worker."""
    cluster = [NodeState("cp"), NodeState("w1"), NodeState("w2"), NodeState("w3")]
    requests = [
        req(f"{who}-{w}", w, requestor=f"{who}.example.com", created=i)
        for i, (who, w) in enumerate((who, w) for who in ("a", "b") for w in ("w1", "w2", "w3"))
    ]
    rollout = simulate_rollout(cluster, requests, cfg(2))
    assert [len(w.requests) for w in rollout.waves] == [2, 2, 2]
    for wave in rollout.waves:
        assert len({r.node_name for r in wave.requests}) == 2
    assert not rollout.never


def test_rollout_waits_for_in_progress_and_uncordons_what_maintenance_cordoned() -> None:
    """A node cordoned by a request in progress is available again after its release, so the budget grows."""
    cluster = nodes(4, {0: "cordoned"})
    running = req("running", "n0", phase="Draining", finalizer=True, initial_unschedulable="false")
    requests = [running, req("p1", "n1", created=1), req("p2", "n2", created=2), req("p0", "n0", created=3)]
    rollout = simulate_rollout(cluster, requests, cfg(1, 1))
    assert rollout.first.available_slots == 0
    assert [r.key for r in rollout.in_progress] == ["ns/running"]
    assert wave_keys(rollout) == [["ns/p1"], ["ns/p2"], ["ns/p0"]]


def test_rollout_reports_what_can_never_be_scheduled() -> None:
    stuck = simulate_rollout(nodes(3), [req("a", "n0")], cfg(0))
    assert stuck.waves == () and [(d.request.name, d.reason) for d in stuck.never] == [("a", "no_slot")]

    # 2 nodes stay NotReady and maxUnavailable is 2: available nodes never get a turn, the NotReady ones do.
    cluster = nodes(5, {3: "notready", 4: "notready"})
    requests = [req("avail", "n0"), req("down", "n3", created=1)]
    rollout = simulate_rollout(cluster, requests, cfg(2, 2))
    assert wave_keys(rollout) == [["ns/down"]]
    assert [(d.request.name, d.reason) for d in rollout.never] == [("avail", "no_budget")]


def test_rollout_as_dict() -> None:
    rollout = simulate_rollout(nodes(2), [req("a", "n0"), req("b", "n1", created=1)], cfg(1))
    assert rollout.as_dict() == {
        "in_progress": [],
        "waves": [
            {"wave": 1, "requests": ["ns/a"], "nodes": ["n0"]},
            {"wave": 2, "requests": ["ns/b"], "nodes": ["n1"]},
        ],
        "never": [],
    }


# -- properties over random clusters ---------------------------------------------------------------
PHASES = ["", "Pending", "Pending", "Pending", "Scheduled", "Cordon", "Draining", "Ready", "RequestorFailed"]


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[NodeState], list[MaintenanceRequest], SchedulerConfig]:
    count = draw(st.integers(1, 12))
    cluster = [
        NodeState(f"n{i}", unschedulable=draw(st.booleans()) and draw(st.booleans()), ready=draw(st.integers(0, 4)) > 0)
        for i in range(count)
    ]
    requests = []
    for i in range(draw(st.integers(0, 20))):
        deleting = draw(st.integers(0, 6)) == 0
        requests.append(
            MaintenanceRequest(
                namespace=draw(st.sampled_from(["a", "b"])),
                name=f"r{i}",
                node_name=f"n{draw(st.integers(0, count - 1))}",
                requestor_id=draw(st.sampled_from(["x.example.com", "y.example.com", "z.example.com"])),
                phase=draw(st.sampled_from(PHASES)),
                created=draw(st.integers(0, 3)),
                deleting=deleting,
                finalizer=draw(st.booleans()),
                initial_unschedulable=draw(st.sampled_from([None, "true", "false"])),
            )
        )
    mpo = draw(st.one_of(st.integers(-1, 6), st.sampled_from(["0%", "25%", "50%", "100%"])))
    mu = draw(st.one_of(st.none(), st.integers(-1, 6), st.sampled_from(["0%", "20%", "50%"])))
    return cluster, requests, SchedulerConfig(mpo, mu)


def check_pass(cluster: list[NodeState], requests: list[MaintenanceRequest], result: sch.Schedule) -> None:
    by_name = {n.name: n for n in cluster}
    holding = {r.node_name for r in requests if r.holds_node and r.node_name in by_name}
    unavailable = {n.name for n in cluster if not n.available}
    chosen = result.scheduled
    chosen_nodes = [r.node_name for r in chosen]
    # never more than maxParallelOperations in progress (what was already there is not ours to undo)
    assert len(chosen) <= result.available_slots
    assert len(holding) + len(chosen) <= max(result.max_parallel_operations, len(holding))
    # one per node, never on a node under maintenance, only waiting requests
    assert len(set(chosen_nodes)) == len(chosen_nodes)
    assert not holding & set(chosen_nodes)
    assert all(r.waiting and not r.deleting and r.node_name in by_name for r in chosen)
    # never more unavailable nodes than maxUnavailable because of our scheduling
    newly_down = {n for n in chosen_nodes if n not in unavailable}
    if result.max_unavailable is not None:
        before = len(unavailable | holding)
        assert len(unavailable | holding | newly_down) <= max(result.max_unavailable, before)
        assert len(newly_down) <= result.can_become_unavailable
    # requests on unavailable nodes are never blocked by the budget
    for d in result.decisions:
        if d.reason == sch.NO_BUDGET:
            assert by_name[d.request.node_name].available
    # no slot left empty while an eligible candidate exists
    if len(chosen) < result.available_slots:
        assert all(d.reason != sch.NO_SLOT for d in result.decisions)
        for d in result.decisions:
            if not d.scheduled and d.reason == sch.NO_BUDGET:
                assert result.can_become_unavailable is not None
                assert len(newly_down) == result.can_become_unavailable
    # every waiting request gets exactly one decision with a known reason and a message
    waiting = sorted(r.key for r in requests if r.waiting)
    assert sorted(d.request.key for d in result.decisions) == waiting
    assert all(d.reason in sch.REASONS and d.message for d in result.decisions)


@settings(max_examples=300, deadline=None)
@given(clusters(), st.randoms(use_true_random=False))
def test_property_pass_limits_and_determinism(
    data: tuple[list[NodeState], list[MaintenanceRequest], SchedulerConfig], rnd: random.Random
) -> None:
    cluster, requests, config = data
    result = schedule(cluster, requests, config)
    check_pass(cluster, requests, result)
    shuffled_nodes, shuffled_requests = list(cluster), list(requests)
    rnd.shuffle(shuffled_nodes)
    rnd.shuffle(shuffled_requests)
    assert schedule(shuffled_nodes, shuffled_requests, config) == result


@settings(max_examples=200, deadline=None)
@given(clusters())
def test_property_rollout_ends_and_places_every_schedulable_request_once(
    data: tuple[list[NodeState], list[MaintenanceRequest], SchedulerConfig],
) -> None:
    cluster, requests, config = data
    rollout = simulate_rollout(cluster, requests, config)
    waiting = {r.key for r in requests if r.waiting}
    placed = [r.key for w in rollout.waves for r in w.requests]
    never = [d.request.key for d in rollout.never]
    assert len(placed) == len(set(placed))
    assert sorted(placed + never) == sorted(waiting)
    assert [r.key for r in rollout.first.scheduled] == (
        [r.key for r in rollout.waves[0].requests] if rollout.first.scheduled else []
    )
    for wave in rollout.waves:
        assert wave.requests
        nodes_in_wave = [r.node_name for r in wave.requests]
        assert len(set(nodes_in_wave)) == len(nodes_in_wave)
        assert len(wave.requests) <= max(0, rollout.first.max_parallel_operations)
    for d in rollout.never:
        assert not d.scheduled


# -- timestamps and numbers: every one checked, ASCII digits only ----------------------------------
@pytest.mark.parametrize(
    ("stamp", "why"),
    [
        ("2026-02-30T00:00:00Z", "is not a valid RFC 3339 timestamp (day is out of range for month)"),
        ("2026-13-45T00:00:00Z", "is not a valid RFC 3339 timestamp (month must be in 1..12)"),
        ("9999-12-31T23:59:59-01:00", "is outside the years 0001 to 9999"),
        ("0001-01-01T00:00:00+01:00", "is outside the years 0001 to 9999"),
        ("\u0662\u0660\u0662\u0666-01-01T00:00:00Z", "ASCII digits"),
        ("2026-01-0\uff15T00:00:00Z", "ASCII digits"),
    ],
)
def test_an_impossible_creation_timestamp_names_the_object_and_the_field(stamp: str, why: str) -> None:
    obj = nm_dict(metadata={"name": "x", "namespace": "ops", "creationTimestamp": stamp})
    with pytest.raises(SchedulerInputError) as info:
        sch.parse_requests([obj])
    assert str(info.value).startswith(f"NodeMaintenance ops/x: metadata.creationTimestamp: {stamp!r} ")
    assert why in str(info.value)


def test_creation_timestamps_at_the_edges_of_the_years_work_and_never_leave_them() -> None:
    import datetime

    for stamp, epoch in (
        ("0001-01-01T00:00:00Z", -62135596800),
        ("9999-12-31T23:59:59Z", 253402300799),
        ("9999-12-31T22:59:59.999-01:00", 253402300799),
    ):
        assert (
            MaintenanceRequest.from_dict(nm_dict(metadata={"name": "x", "creationTimestamp": stamp})).created == epoch
        )
    west = datetime.datetime(9999, 12, 31, 23, 59, 59, tzinfo=datetime.timezone(datetime.timedelta(hours=-1)))
    with pytest.raises(SchedulerInputError, match=r"metadata\.creationTimestamp: .* outside the years 0001 to 9999"):
        MaintenanceRequest.from_dict(nm_dict(metadata={"name": "x", "creationTimestamp": west}))


@pytest.mark.parametrize("stamp", ["2026-02-30T00:00:00Z", "now", 5])
def test_a_bad_deletion_timestamp_names_the_field(stamp: object) -> None:
    obj = nm_dict(metadata={"name": "x", "namespace": "ops", "deletionTimestamp": stamp})
    with pytest.raises(SchedulerInputError, match=r"^NodeMaintenance ops/x: metadata\.deletionTimestamp"):
        MaintenanceRequest.from_dict(obj)
    deleting = nm_dict(metadata={"name": "x", "deletionTimestamp": "2026-01-01T00:00:00Z", "finalizers": []})
    assert MaintenanceRequest.from_dict(deleting).deleting


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"maxParallelOperations": "\u0663%"}, "spec.maxParallelOperations: '\u0663%' is not an integer"),
        ({"maxUnavailable": "\uff150%"}, "spec.maxUnavailable: '\uff150%' is not an integer"),
        (
            {"maxNodeMaintenanceTimeSeconds": "\u0663"},
            "spec.maxNodeMaintenanceTimeSeconds: '\u0663' must be a whole number",
        ),
        ({"maxNodeMaintenanceTimeSeconds": True}, "spec.maxNodeMaintenanceTimeSeconds: True must be a whole number"),
        ({"maxNodeMaintenanceTimeSeconds": -1}, "spec.maxNodeMaintenanceTimeSeconds: -1 is below 0"),
        ({"maxNodeMaintenanceTimeSeconds": 10**400}, "spec.maxNodeMaintenanceTimeSeconds: 1000"),
    ],
)
def test_bad_config_numbers_name_the_field(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as info:
        SchedulerConfig.from_spec(spec)
    assert message in str(info.value)
    assert isinstance(info.value, IntOrPercentError | SchedulerInputError)
    assert SchedulerConfig.from_spec({"maxNodeMaintenanceTimeSeconds": 0, "logLevel": "info"}) == SchedulerConfig()


# -- the rollout against a reference: one full pass per wave ---------------------------------------
def reference_rollout(
    cluster: list[NodeState], requests: list[MaintenanceRequest], config: SchedulerConfig, unknown_nodes: str = "skip"
) -> sch.Rollout:
    """simulate_rollout as it was before its passes after the first became incremental: a full ``_schedule`` on
    the released cluster and the requests still waiting, once per wave. Kept here as the reference."""
    node_map = sch._node_map(cluster)
    reqs = sch._request_list(requests, node_map, unknown_nodes)
    first = sch._schedule(node_map, reqs, config)
    holding = [reqs[key] for key in sorted(reqs) if reqs[key].in_progress]
    released = dict(node_map)
    for r in holding:
        node = released.get(r.node_name)
        if node is not None and r.holds_node and r.cordon and r.initial_unschedulable == "false" and node.unschedulable:
            released[r.node_name] = NodeState(node.name, False, node.ready)
    waiting = {key: r for key, r in reqs.items() if r.waiting}
    waves: list[sch.Wave] = []
    current = first
    state = node_map
    while True:
        chosen = current.scheduled
        if chosen:
            waves.append(sch.Wave(len(waves) + 1, chosen))
            for r in chosen:
                del waiting[r.key]
        elif state is released:
            break
        if not waiting:
            break
        state = released
        current = sch._schedule(state, waiting, config)
    never = tuple(d for d in current.decisions if d.request.key in waiting)
    return sch.Rollout(first, tuple(holding), tuple(waves), never)


LIMITS = st.one_of(st.integers(-1, 4), st.sampled_from(["0%", "1%", "10%", "34%", "50%", "100%"]))


@st.composite
def rollout_inputs(
    draw: st.DrawFn, bulk: bool = False
) -> tuple[list[NodeState], list[MaintenanceRequest], SchedulerConfig]:
    """Random clusters for the comparison with the reference: nodes cordoned and NotReady, requests in all
    phases (new, Pending, in progress, being deleted, with or without the finalizer, cordoned by the maintenance
    or not) from several requestors, some on a node that does not exist (n<count>). With ``bulk``, one more
    requestor has 95-110 requests, so that its pending count crosses PENDING_CAP during the rollout."""
    count = draw(st.integers(0, 10))
    cluster = [
        NodeState(f"n{i}", unschedulable=draw(st.integers(0, 3)) == 0, ready=draw(st.integers(0, 4)) > 0)
        for i in range(count)
    ]
    requestors = draw(st.integers(1, 4))
    requests = [
        MaintenanceRequest(
            namespace=draw(st.sampled_from(["a", "b"])),
            name=f"r{i}",
            node_name=f"n{draw(st.integers(0, count))}",
            requestor_id=f"q{draw(st.integers(0, requestors - 1))}.example.com",
            phase=draw(st.sampled_from(PHASES)),
            created=draw(st.integers(0, 3)),
            deleting=draw(st.integers(0, 5)) == 0,
            finalizer=draw(st.booleans()),
            cordon=draw(st.booleans()),
            initial_unschedulable=draw(st.sampled_from([None, "true", "false"])),
        )
        for i in range(draw(st.integers(0, 25)))
    ]
    if bulk:
        rnd = draw(st.randoms(use_true_random=False))
        requests += [
            MaintenanceRequest(
                "bulk",
                f"b{i}",
                f"n{rnd.randrange(count + 1)}",
                "bulk.example.com",
                phase=rnd.choice(["", "Pending", "Pending", "Ready"]),
                created=rnd.randrange(4),
                deleting=rnd.random() < 0.05,
            )
            for i in range(draw(st.integers(95, 110)))
        ]
    return cluster, requests, SchedulerConfig(draw(LIMITS), draw(st.one_of(st.none(), LIMITS)))


@settings(max_examples=500, deadline=None)
@given(rollout_inputs(), st.randoms(use_true_random=False))
def test_property_rollout_is_the_reference_rollout(
    data: tuple[list[NodeState], list[MaintenanceRequest], SchedulerConfig], rnd: random.Random
) -> None:
    """The same waves in the same order, the same never decisions (reason, message, position, rank) and the
    same first pass as one full pass per wave, whatever the order of the inputs."""
    cluster, requests, config = data
    expected = reference_rollout(cluster, requests, config)
    shuffled_nodes, shuffled_requests = list(cluster), list(requests)
    rnd.shuffle(shuffled_nodes)
    rnd.shuffle(shuffled_requests)
    assert simulate_rollout(shuffled_nodes, shuffled_requests, config, unknown_nodes="skip") == expected


@settings(max_examples=100, deadline=None)
@given(rollout_inputs(bulk=True))
def test_property_rollout_is_the_reference_rollout_across_the_pending_cap(
    data: tuple[list[NodeState], list[MaintenanceRequest], SchedulerConfig],
) -> None:
    cluster, requests, config = data
    assert simulate_rollout(cluster, requests, config, unknown_nodes="skip") == reference_rollout(
        cluster, requests, config
    )


def test_rollout_rank_that_rises_takes_a_shared_node_from_another_requestor() -> None:
    """After c0 (wave 1), a and b have two pending each (rank 98): b1 is oldest, then a0 comes first on n0. Once
    b1 is done, b has one pending (rank 99) and its b0 now comes before a0 on n0, and before a's requests."""
    requests = [
        req("c0", "n5", requestor="c.example.com", created=0),
        req("a0", "n0", requestor="a.example.com", created=5),
        req("a1", "n1", requestor="a.example.com", created=6),
        req("b1", "n2", requestor="b.example.com", created=1),
        req("b0", "n0", requestor="b.example.com", created=7),
    ]
    rollout = simulate_rollout(nodes(6), requests, cfg(1))
    assert wave_keys(rollout) == [["ns/c0"], ["ns/b1"], ["ns/b0"], ["ns/a0"], ["ns/a1"]]
    assert rollout == reference_rollout(nodes(6), requests, cfg(1))


def test_rollout_budget_and_unavailable_nodes_over_many_waves() -> None:
    """maxUnavailable 3 with 2 nodes NotReady: one available node per wave, requests on the NotReady nodes use
    slots only; a node with three requests takes three waves; the never list is the last full pass."""
    cluster = nodes(6, {4: "notready", 5: "notready"})
    requests = [
        *(req(f"n0-{i}", "n0", requestor=f"r{i}.example.com", created=i) for i in range(3)),
        req("n1", "n1", created=3),
        req("n2", "n2", created=4),
        req("down4", "n4", requestor="z.example.com", created=9),
        req("down5", "n5", requestor="z.example.com", created=10),
        req("gone", "n9", created=0),
        req("leaving", "n3", deleting=True),
    ]
    rollout = simulate_rollout(cluster, requests, cfg(2, 3), unknown_nodes="skip")
    assert rollout == reference_rollout(cluster, requests, cfg(2, 3))
    assert wave_keys(rollout) == [
        ["ns/n0-0", "ns/down4"],
        ["ns/n0-1", "ns/down5"],
        ["ns/n0-2"],
        ["ns/n1"],
        ["ns/n2"],
    ]
    assert [(d.request.name, d.reason) for d in rollout.never] == [
        ("gone", "node_not_found"),
        ("leaving", "being_deleted"),
    ]


@pytest.mark.parametrize(
    ("mpo", "mu"), [(1, None), (3, None), ("10%", None), (1, 0), (4, "5%"), ("10%", "20%"), (0, None)]
)
def test_rollout_of_a_larger_cluster_is_the_reference_rollout(mpo: Any, mu: Any) -> None:
    """300 nodes (5 % cordoned, 3 % NotReady) and 400 requests from 8 requestors, one of them with 150 (so its
    rank changes only once it has fewer than 100 left), 5 % in progress, several per node."""
    rnd = random.Random(7)
    cluster = [NodeState(f"n{i:03d}", rnd.random() < 0.05, rnd.random() > 0.03) for i in range(300)]
    requests = [
        req(
            f"r{i:03d}",
            f"n{rnd.randrange(200 if i % 2 else 300):03d}",
            requestor="big.example.com" if i < 150 else f"r{rnd.randrange(7)}.example.com",
            phase=rnd.choice(["Draining", "Ready"]) if rnd.random() < 0.05 else rnd.choice(["", "Pending"]),
            created=rnd.randrange(60),
            finalizer=True,
            initial_unschedulable="false",
        )
        for i in range(400)
    ]
    config = cfg(mpo, mu)
    assert simulate_rollout(cluster, requests, config) == reference_rollout(cluster, requests, config, "error")
