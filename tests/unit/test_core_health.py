"""NodeHealthCheck evaluation (pure core): examples for every rule, and properties over random clusters."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from typing import Any

import pytest
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.labelselector import matches
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.node.rfc3339 import LATEST_TIME, format_time
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.remediation.health import (
    CONFIRMED_HEALTHY_ANNOTATION,
    CONTROL_PLANE_CR_LABEL,
    EXCLUDE_LABEL,
    HEALTHY_DELAY_ANNOTATION,
    NODE_NAME_ANNOTATION,
    TEMPLATE_NAME_ANNOTATION,
    TIMED_OUT_ANNOTATION,
    Code,
    Evaluation,
    HealthSpecError,
    evaluate,
    min_healthy_for,
    parse_time,
)
from hypothesis import given, settings
from hypothesis import strategies as st

NOW = datetime(2026, 6, 1, 12, 0, 0, tzinfo=UTC).timestamp()
WORKER = "node-role.kubernetes.io/worker"
CONTROL_PLANE = "node-role.kubernetes.io/control-plane"
TEMPLATE = {
    "apiVersion": "self-node-remediation.medik8s.io/v1alpha1",
    "kind": "SelfNodeRemediationTemplate",
    "namespace": "ops",
    "name": "automatic",
}
REBOOT = {**TEMPLATE, "name": "reboot"}
REPLACE = {**TEMPLATE, "kind": "MachineReplacementTemplate", "name": "replace"}


def ago(seconds: float) -> str:
    return format_time(NOW - seconds)


def node(
    name: str,
    ready: str = "True",
    since: float = 3600,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    control_plane: bool = False,
) -> dict[str, Any]:
    all_labels = {CONTROL_PLANE: ""} if control_plane else {WORKER: ""}
    all_labels.update(labels or {})
    return {
        "metadata": {"name": name, "labels": all_labels, "annotations": annotations or {}},
        "status": {"conditions": [{"type": "Ready", "status": ready, "lastTransitionTime": ago(since)}]},
    }


def rem(
    node_name: str,
    created: float = 10,
    template: dict[str, str] | None = None,
    name: str | None = None,
    annotations: dict[str, str] | None = None,
    conditions: list[dict[str, str]] | None = None,
    deleting: bool = False,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    template = template or TEMPLATE
    meta: dict[str, Any] = {
        "name": name or node_name,
        "namespace": "ops",
        "creationTimestamp": ago(created),
        "annotations": {
            NODE_NAME_ANNOTATION: node_name,
            TEMPLATE_NAME_ANNOTATION: template["name"],
            **(annotations or {}),
        },
        "labels": labels or {},
    }
    if deleting:
        meta["deletionTimestamp"] = ago(1)
    return {
        "apiVersion": template["apiVersion"],
        "kind": template["kind"][: -len("Template")],
        "metadata": meta,
        "status": {"conditions": conditions or []},
    }


def spec(**extra: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "selector": {"matchExpressions": [{"key": WORKER, "operator": "Exists"}]},
        "unhealthyConditions": [
            {"type": "Ready", "status": "False", "duration": "300s"},
            {"type": "Ready", "status": "Unknown", "duration": "300s"},
        ],
        "minHealthy": "51%",
        "remediationTemplate": TEMPLATE,
    }
    base.update(extra)
    return {k: v for k, v in base.items() if v is not None}


def run(nodes: list[dict[str, Any]], rems: list[dict[str, Any]] | None = None, **kwargs: Any) -> Evaluation:
    maintenance = kwargs.pop("maintenance", ())
    return evaluate(spec(**kwargs), nodes, rems or [], NOW, maintenance)


def codes(result: Evaluation) -> dict[str, str]:
    return {d.node: d.code for d in result.decisions}


def remediated(result: Evaluation) -> list[str]:
    return [r.node for r in result.to_remediate]


# -- detection --------------------------------------------------------------------------------
def test_all_healthy() -> None:
    result = run([node("a"), node("b"), node("c")])
    assert (result.observed, result.healthy, result.min_healthy, result.min_healthy_met) == (3, 3, 2, True)
    assert set(codes(result).values()) == {Code.HEALTHY}
    assert result.to_remediate == () and result.requeue_after is None
    assert result.phase == "Enabled"


def test_unhealthy_only_strictly_after_the_duration() -> None:
    at = run([node("a", "Unknown", since=300), node("b"), node("c")])
    assert codes(at)["a"] == Code.SOON_UNHEALTHY
    assert at.to_remediate == ()
    assert at.requeue_after == 1  # 0 s left + 1 s
    after = run([node("a", "Unknown", since=301), node("b"), node("c")])
    assert codes(after)["a"] == Code.REMEDIATE
    assert remediated(after) == ["a"]
    assert after.decision("a").matched_conditions == ("Ready=Unknown",)
    assert after.unhealthy_nodes == ("a",)


def test_soon_unhealthy_is_neither_healthy_nor_cleaned_and_says_when_to_look_again() -> None:
    result = run([node("a", "False", since=100), node("b"), node("c")], [rem("a")])
    assert codes(result)["a"] == Code.SOON_UNHEALTHY
    assert result.healthy == 2
    assert result.to_delete == ()
    assert result.requeue_after == 201


def test_conditions_not_listed_do_not_count_and_a_missing_condition_is_healthy() -> None:
    bare = {"metadata": {"name": "x", "labels": {WORKER: ""}}, "status": {}}
    pressure = node("y")
    pressure["status"]["conditions"].append({"type": "DiskPressure", "status": "True", "lastTransitionTime": ago(9999)})
    result = run([bare, pressure, node("z")])
    assert set(codes(result).values()) == {Code.HEALTHY}


def test_selector_picks_the_observed_nodes() -> None:
    cp = node("cp", "Unknown", since=9999, control_plane=True)
    gpu = node("gpu", "Unknown", since=9999, labels={"pool": "gpu"})
    result = run(
        [cp, gpu, node("cpu", labels={"pool": "cpu"}), node("cpu2", labels={"pool": "cpu"})],
        selector={
            "matchLabels": {WORKER: ""},
            "matchExpressions": [{"key": "pool", "operator": "NotIn", "values": ["x"]}],
        },
    )
    assert result.observed == 3
    assert "cp" not in codes(result)
    assert remediated(result) == ["gpu"]


@pytest.mark.parametrize(
    ("selector", "labels", "ok"),
    [
        ({}, {}, True),
        (None, {"a": "1"}, True),
        ({"matchLabels": {"a": "1"}}, {"a": "1", "b": "2"}, True),
        ({"matchLabels": {"a": "1"}}, {"a": "2"}, False),
        ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "2"]}]}, {"a": "2"}, True),
        ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1"]}]}, {}, False),
        ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {}, True),
        ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {"a": "1"}, False),
        ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"a": ""}, True),
        ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"a": ""}, False),
    ],
)
def test_label_selector(selector: dict[str, Any] | None, labels: dict[str, str], ok: bool) -> None:
    assert matches(selector, labels) is ok


# -- minHealthy / maxUnhealthy ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "observed", "expected"),
    [("51%", 3, 2), ("51%", 7, 4), ("51%", 9, 5), ("75%", 10, 8), (2, 10, 2), ("0%", 5, 0), ("100%", 3, 3)],
)
def test_min_healthy_rounds_up(value: object, observed: int, expected: int) -> None:
    assert min_healthy_for({"minHealthy": value}, observed) == expected


@pytest.mark.parametrize(("value", "observed", "expected"), [("75%", 10, 2), (1, 5, 4), (7, 3, 0), ("25%", 3, 2)])
def test_max_unhealthy(value: object, observed: int, expected: int) -> None:
    assert min_healthy_for({"maxUnhealthy": value}, observed) == expected


def test_no_remediation_when_min_healthy_fails() -> None:
    nodes = [node("a", "Unknown", since=999), node("b", "False", since=999), node("c")]
    result = run(nodes)
    assert (result.healthy, result.min_healthy, result.min_healthy_met) == (1, 2, False)
    assert result.to_remediate == ()
    assert codes(result) == {"a": Code.SKIPPED_MIN_HEALTHY, "b": Code.SKIPPED_MIN_HEALTHY, "c": Code.HEALTHY}
    assert "only 1 of 3 nodes are healthy and 2 are needed" in result.decision("a").reason
    # with maxUnhealthy: 2 the same cluster may remediate both
    result = run(nodes, minHealthy=None, maxUnhealthy=2)
    assert remediated(result) == ["a", "b"]


def test_a_node_with_a_remediation_left_is_not_healthy() -> None:
    """b recovered but its remediation is still being deleted: 1 healthy of 3, so a waits."""
    nodes = [node("a", "Unknown", since=999), node("b"), node("c")]
    result = run(nodes, [rem("b", deleting=True)])
    assert codes(result)["b"] == Code.RECOVERING
    assert result.healthy == 1
    assert codes(result)["a"] == Code.SKIPPED_MIN_HEALTHY
    assert result.to_delete == ()  # already being deleted


# -- exclusions -------------------------------------------------------------------------------
def test_no_remediation_under_maintenance_or_excluded() -> None:
    nodes = [
        node("a", "Unknown", since=999),
        node("b", "Unknown", since=999, labels={EXCLUDE_LABEL: "true"}),
        node("c", "Unknown", since=999, labels={EXCLUDE_LABEL: ""}),
        node("d", "Unknown", since=999, labels={EXCLUDE_LABEL: "false"}),
        *(node(f"ok-{i}") for i in range(5)),
    ]
    result = run(nodes, maintenance={"a"})
    assert codes(result)["a"] == Code.SKIPPED_MAINTENANCE
    assert codes(result)["b"] == Code.SKIPPED_EXCLUDED
    assert remediated(result) == ["c", "d"]  # an empty or "false" label value does not exclude ...
    # ... and only the empty one is called out (InvalidNodeLabel), as upstream: "false" says what it means
    assert result.messages == (f"c: label {EXCLUDE_LABEL} is empty, not 'true', so the node is not excluded",)
    assert result.requeue_after == 60


def test_pause_requests_stop_new_remediations_and_cleanup() -> None:
    nodes = [node("a", "Unknown", since=999), node("b"), node("c"), node("d")]
    result = run(nodes, [rem("b")], pauseRequests=["upgrade by alice"])
    assert result.paused and result.phase == "Paused"
    assert codes(result)["a"] == Code.SKIPPED_PAUSED
    assert "upgrade by alice" in result.decision("a").reason
    assert result.to_remediate == () and result.to_delete == ()


# -- control plane ----------------------------------------------------------------------------
def test_one_control_plane_node_at_a_time() -> None:
    cps = [node(f"cp-{i}", "Unknown", since=999, control_plane=True) for i in range(3)]
    workers = [node(f"w-{i}") for i in range(6)]
    everything = {"matchExpressions": [{"key": "kubernetes.io/os", "operator": "DoesNotExist"}]}
    result = run(cps + workers, selector=everything, minHealthy=1)
    assert remediated(result) == ["cp-0"]
    assert codes(result)["cp-1"] == codes(result)["cp-2"] == Code.SKIPPED_CONTROL_PLANE
    assert result.to_remediate[0].control_plane is True
    # next pass: cp-0 has its remediation, the others still wait
    again = run(cps + workers, [rem("cp-0", labels={CONTROL_PLANE_CR_LABEL: ""})], selector=everything, minHealthy=1)
    assert remediated(again) == []
    assert codes(again)["cp-0"] == Code.REMEDIATING
    assert "cp-0 is being remediated" in again.decision("cp-1").reason


# -- clean-up and healthyDelay ----------------------------------------------------------------
def test_recovered_node_remediation_is_deleted() -> None:
    result = run([node("a"), node("b"), node("c")], [rem("a")])
    assert codes(result)["a"] == Code.RECOVERING
    assert [(r.node, r.name, r.kind) for r in result.to_delete] == [("a", "a", "SelfNodeRemediation")]
    assert result.healthy == 2
    assert result.phase == "Remediating"


def test_healthy_delay() -> None:
    nodes = [node("a"), node("b"), node("c")]
    first = run(nodes, [rem("a")], healthyDelay="2m")
    assert codes(first)["a"] == Code.HEALTHY_DELAYED
    assert [r.name for r in first.to_mark_healthy] == ["a"]
    assert first.to_delete == () and first.requeue_after == 121
    stamped = rem("a", annotations={HEALTHY_DELAY_ANNOTATION: ago(60)})
    waiting = run(nodes, [stamped], healthyDelay="2m")
    assert codes(waiting)["a"] == Code.HEALTHY_DELAYED and waiting.requeue_after == 61
    stamped = rem("a", annotations={HEALTHY_DELAY_ANNOTATION: ago(121)})
    done = run(nodes, [stamped], healthyDelay="2m")
    assert [r.name for r in done.to_delete] == ["a"]


def test_negative_healthy_delay_waits_for_confirmation() -> None:
    waiting = run([node("a"), node("b"), node("c")], [rem("a")], healthyDelay="-1s")
    assert codes(waiting)["a"] == Code.AWAITING_CONFIRMATION
    assert waiting.to_delete == ()
    confirmed = node("a", annotations={CONFIRMED_HEALTHY_ANNOTATION: "alice"})
    done = run([confirmed, node("b"), node("c")], [rem("a")], healthyDelay="-1s")
    assert [r.name for r in done.to_delete] == ["a"]
    assert done.confirmations_to_clear == ("a",)


def test_orphaned_remediations_are_deleted() -> None:
    result = run([node("a"), node("b")], [rem("gone")])
    assert [r.node for r in result.to_delete] == ["gone"]
    kept = rem("gone2", conditions=[{"type": "PermanentNodeDeletionExpected", "status": "True"}])
    assert run([node("a")], [kept]).to_delete == ()


# -- escalation -------------------------------------------------------------------------------
STEPS = [
    {"remediationTemplate": REPLACE, "order": 2, "timeout": "30m"},
    {"remediationTemplate": REBOOT, "order": 1, "timeout": "5m"},
]


def test_escalating_remediations_in_order_with_their_timeouts() -> None:
    nodes = [node("a", "Unknown", since=9999), node("b"), node("c")]
    first = run(nodes, remediationTemplate=None, escalatingRemediations=STEPS)
    assert [(r.node, r.template.name) for r in first.to_remediate] == [("a", "reboot")]
    assert first.to_remediate[0].template.timeout_seconds == 300
    assert first.requeue_after == 301

    running = run(
        nodes, [rem("a", created=100, template=REBOOT)], remediationTemplate=None, escalatingRemediations=STEPS
    )
    assert codes(running)["a"] == Code.REMEDIATING
    assert running.requeue_after == 201

    expired = run(
        nodes, [rem("a", created=301, template=REBOOT)], remediationTemplate=None, escalatingRemediations=STEPS
    )
    assert codes(expired)["a"] == Code.ESCALATE
    assert [r.name for r in expired.to_mark_timed_out] == ["a"]
    assert [(r.template.kind, r.template.name) for r in expired.to_remediate] == [
        ("MachineReplacementTemplate", "replace")
    ]

    failed = rem("a", created=10, template=REBOOT, conditions=[{"type": "Succeeded", "status": "False"}])
    early = run(nodes, [failed], remediationTemplate=None, escalatingRemediations=STEPS)
    assert [r.template.name for r in early.to_remediate] == ["replace"]

    both = [
        rem("a", created=3000, template=REBOOT, annotations={TIMED_OUT_ANNOTATION: ago(2000)}),
        rem("a", created=1801, template=REPLACE, name="a-replace"),
    ]
    left = run(nodes, both, remediationTemplate=None, escalatingRemediations=STEPS)
    assert codes(left)["a"] == Code.NO_TEMPLATE_LEFT
    assert [r.name for r in left.to_mark_timed_out] == ["a-replace"]
    assert left.to_remediate == ()


def test_no_escalation_while_min_healthy_fails() -> None:
    nodes = [node("a", "Unknown", since=9999), node("b", "Unknown", since=9999), node("c")]
    expired = rem("a", created=301, template=REBOOT)
    result = run(nodes, [expired], remediationTemplate=None, escalatingRemediations=STEPS)
    assert result.to_remediate == () and result.to_mark_timed_out == ()
    assert codes(result)["a"] == Code.SKIPPED_MIN_HEALTHY


# -- bad specs --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"maxUnhealthy": 1}, r"^spec: set exactly one of minHealthy and maxUnhealthy \(got both\)"),
        ({"minHealthy": None}, r"^spec: set exactly one of minHealthy and maxUnhealthy \(got neither\)"),
        ({"minHealthy": "5"}, r"^spec\.minHealthy: "),
        ({"minHealthy": -1}, r"^spec\.minHealthy: "),
        ({"escalatingRemediations": STEPS}, r"^spec: set exactly one of remediationTemplate"),
        ({"remediationTemplate": {**TEMPLATE, "kind": "SelfNodeRemediation"}}, r"^spec\.remediationTemplate\.kind"),
        (
            {"unhealthyConditions": [{"type": "Ready", "status": "False", "duration": "5 min"}]},
            r"^spec\.unhealthyConditions\[0\]\.duration: ",
        ),
        ({"healthyDelay": "later"}, r"^spec\.healthyDelay: "),
        (
            {"selector": {"matchExpressions": [{"key": "a", "operator": "In"}]}},
            r"^spec\.selector\.matchExpressions\[0\]",
        ),
        ({"selector": {"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}}, r"operator"),
        (
            {"remediationTemplate": None, "escalatingRemediations": [{**STEPS[0], "order": 1}, STEPS[1]]},
            r"order: 1 is used twice",
        ),
    ],
)
def test_bad_specs_name_the_field(extra: dict[str, Any], message: str) -> None:
    with pytest.raises(HealthSpecError, match=message):
        run([node("a")], **extra)


def test_default_conditions_and_times() -> None:
    s = spec(unhealthyConditions=None)
    result = evaluate(s, [node("a", "False", since=301), node("b"), node("c")], [], NOW)
    assert remediated(result) == ["a"]
    assert (
        parse_time("2026-06-01T12:00:00.123456789+02:00", "t")
        == datetime(
            2026,
            6,
            1,
            10,
            0,
            0,
            123456,
            tzinfo=UTC,
        ).timestamp()
    )
    with pytest.raises(HealthSpecError, match=r"^t: "):
        parse_time("yesterday", "t")


def test_as_dict_is_plain_data() -> None:
    out = run([node("a", "Unknown", since=999), node("b"), node("c")]).as_dict()
    assert out["to_remediate"][0]["node"] == "a"
    assert out["decisions"][0] == {
        "node": "a",
        "code": "Remediate",
        "reason": out["decisions"][0]["reason"],
        "control_plane": False,
        "matched_conditions": ["Ready=Unknown"],
        "remediations": [],
        "unhealthy_seconds": 999.0,
    }
    assert out["unhealthy_nodes"] == ["a"] and out["phase"] == "Enabled"
    # a healthy node has no unhealthy time
    assert out["decisions"][1]["unhealthy_seconds"] is None


# -- properties -------------------------------------------------------------------------------
@st.composite
def clusters(draw: st.DrawFn) -> dict[str, Any]:
    count = draw(st.integers(min_value=1, max_value=12))
    nodes, rems = [], []
    for i in range(count):
        name = f"n{i:02d}"
        ready = draw(st.sampled_from(["True", "False", "Unknown"]))
        since = draw(st.integers(min_value=0, max_value=900))
        labels = {}
        if draw(st.booleans()) and draw(st.booleans()):
            labels[EXCLUDE_LABEL] = draw(st.sampled_from(["true", "false", ""]))
        cp = draw(st.integers(min_value=0, max_value=3)) == 0
        nodes.append(node(name, ready, since, labels, control_plane=cp))
        if draw(st.integers(min_value=0, max_value=3)) == 0:
            rems.append(rem(name, created=draw(st.integers(min_value=0, max_value=900)), deleting=draw(st.booleans())))
    maintenance = {n["metadata"]["name"] for n in nodes if draw(st.integers(min_value=0, max_value=4)) == 0}
    threshold = draw(st.one_of(st.integers(min_value=0, max_value=count), st.integers(0, 100).map(lambda p: f"{p}%")))
    key = draw(st.sampled_from(["minHealthy", "maxUnhealthy"]))
    s = {
        "selector": {"matchExpressions": [{"key": "kubernetes.io/os", "operator": "DoesNotExist"}]},
        key: threshold,
        "remediationTemplate": TEMPLATE,
        "healthyDelay": draw(st.sampled_from(["0s", "1m", "-1s"])),
    }
    if draw(st.integers(min_value=0, max_value=5)) == 0:
        s["pauseRequests"] = ["test"]
    return {"spec": s, "nodes": nodes, "rems": rems, "maintenance": maintenance}


def evaluate_cluster(c: dict[str, Any]) -> Evaluation:
    return evaluate(c["spec"], c["nodes"], c["rems"], NOW, c["maintenance"])


@settings(max_examples=300, deadline=None)
@given(clusters())
def test_properties(c: dict[str, Any]) -> None:
    result = evaluate_cluster(c)
    by_name = {n["metadata"]["name"]: n for n in c["nodes"]}
    new = remediated(result)
    # no remediation when minHealthy fails, or while paused
    if not result.min_healthy_met or result.paused:
        assert new == [] and result.to_mark_timed_out == ()
    assert result.healthy >= result.min_healthy or new == []
    for name in new:
        labels = by_name[name]["metadata"]["labels"]
        # none for maintained or excluded nodes
        assert name not in c["maintenance"]
        assert labels.get(EXCLUDE_LABEL) != "true"
        # a node whose conditions are healthy (or not yet unhealthy long enough) is never remediated
        assert result.decision(name).unhealthy
        cond = by_name[name]["status"]["conditions"][0]
        assert cond["status"] != "True"
        assert parse_time(cond["lastTransitionTime"], "t") < NOW - 300
    for d in result.decisions:
        if d.healthy:
            assert d.node not in new
            assert not any(r["metadata"]["annotations"][NODE_NAME_ANNOTATION] == d.node for r in c["rems"])
    # never two control-plane nodes at once
    cp_with_rem = {
        r["metadata"]["annotations"][NODE_NAME_ANNOTATION]
        for r in c["rems"]
        if CONTROL_PLANE in by_name[r["metadata"]["annotations"][NODE_NAME_ANNOTATION]]["metadata"]["labels"]
    }
    cp_new = {r.node for r in result.to_remediate if r.control_plane}
    assert len(cp_new) <= 1
    if cp_with_rem:
        assert cp_new <= cp_with_rem
    # the healthy count is the number of Healthy decisions
    assert result.healthy == sum(d.healthy for d in result.decisions)
    assert result.observed == len(c["nodes"])


@settings(max_examples=100, deadline=None)
@given(clusters(), st.randoms(use_true_random=False))
def test_deterministic_and_independent_of_input_order(c: dict[str, Any], rnd: random.Random) -> None:
    first = evaluate_cluster(c)
    assert evaluate_cluster(c) == first
    shuffled = dict(c, nodes=rnd.sample(c["nodes"], len(c["nodes"])), rems=rnd.sample(c["rems"], len(c["rems"])))
    assert evaluate_cluster(shuffled) == first


# -- input checks: every time, number, selector value and node ---------------------------------
@pytest.mark.parametrize(
    ("now", "why"),
    [
        ("2026-13-45T00:00:00Z", r"is not a valid RFC 3339 timestamp \(month must be in 1\.\.12\)"),
        ("2026-02-30T00:00:00Z", r"is not a valid RFC 3339 timestamp \(day is out of range for month\)"),
        ("\u0662\u0660\u0662\u0666-06-01T12:00:00Z", r"ASCII digits"),
        ("9999-12-31T23:59:59-01:00", r"is outside the years 0001 to 9999"),
    ],
)
def test_a_bad_now_names_the_field(now: str, why: str) -> None:
    with pytest.raises(HealthSpecError, match=rf"^now: '.*' .*{why}"):
        parse_time(now, "now")


def test_an_impossible_condition_time_names_the_node_index_and_the_field() -> None:
    bad = node("b")
    bad["status"]["conditions"].append(
        {"type": "DiskPressure", "status": "False", "lastTransitionTime": "2026-02-30T00:00:00Z"}
    )
    with pytest.raises(HealthSpecError) as info:
        run([node("a"), bad, node("c")])
    assert str(info.value).startswith(
        "nodes[1].status.conditions[1].lastTransitionTime: '2026-02-30T00:00:00Z' is not a valid RFC 3339 timestamp "
        "(day is out of range for month); give a date and time that exist"
    )
    listed = node("b", "Unknown")
    listed["status"]["conditions"][0]["lastTransitionTime"] = "2026-06-31T00:00:00Z"
    with pytest.raises(HealthSpecError, match=r"^nodes\[0\]\.status\.conditions\[0\]\.lastTransitionTime: "):
        run([listed, node("c")])


@pytest.mark.parametrize(
    ("stamp", "why"),
    [
        ("9999-12-31T23:59:59-01:00", "is outside the years 0001 to 9999"),
        ("9999-12-31T23:59:59Z", "is too late"),
        ("2026-02-30T00:00:00Z", "day is out of range for month"),
        ("2026-06-01T1\uff12:00:00Z", "ASCII digits"),
    ],
)
def test_a_remediation_time_that_cannot_be_used_names_the_field(stamp: str, why: str) -> None:
    nodes = [node("a", "Unknown", since=9999), node("b"), node("c")]
    created = rem("a", template=REBOOT)
    created["metadata"]["creationTimestamp"] = stamp
    with pytest.raises(HealthSpecError, match=rf"^remediations\[0\]\.metadata\.creationTimestamp: '.*' .*{why}"):
        run(nodes, [created], remediationTemplate=None, escalatingRemediations=STEPS)
    # A healthy-delay stamp that is not a usable time counts as missing: the node's object is stamped again
    # (upstream logs it and carries on), and no other node's pass stops for it.
    delayed = rem("b", annotations={HEALTHY_DELAY_ANNOTATION: stamp})
    result = run(nodes[1:], [rem("c"), delayed], healthyDelay="1m")
    assert sorted(ref.name for ref in result.to_mark_healthy) == ["b", "c"]  # b as if it had no stamp, like c


def test_times_at_the_edges_of_the_years_work_or_name_the_field() -> None:
    old = node("a", "Unknown")
    old["status"]["conditions"][0]["lastTransitionTime"] = "0001-01-01T00:00:00Z"
    result = evaluate(spec(), [old, node("b"), node("c")], [], NOW)
    assert remediated(result) == ["a"]
    early = evaluate(
        spec(), [node("a", "Unknown"), node("b"), node("c")], [], parse_time("0001-01-01T00:00:00Z", "now")
    )
    assert codes(early)["a"] == Code.SOON_UNHEALTHY
    assert parse_time("9000-01-01T00:00:00Z", "t") == datetime(9000, 1, 1, tzinfo=UTC).timestamp()
    late = node("a", "Unknown")
    late["status"]["conditions"][0]["lastTransitionTime"] = "9999-12-31T23:59:59-01:00"
    field = r"nodes\[0\]\.status\.conditions\[0\]\.lastTransitionTime"
    with pytest.raises(
        HealthSpecError, match=rf"^{field}: '9999-12-31T23:59:59-01:00' is outside the years 0001 to 9999"
    ):
        evaluate(spec(), [late, node("b")], [], NOW)
    with pytest.raises(HealthSpecError, match=r"^now: '9999-12-31T23:59:59Z' is too late: .* give a time before 9707-"):
        parse_time("9999-12-31T23:59:59Z", "now")
    # now as the engines pass it: seconds since the epoch, within the same bounds
    assert codes(evaluate(spec(), [node("a", "Unknown"), node("b"), node("c")], [], LATEST_TIME))["a"] == Code.REMEDIATE
    with pytest.raises(HealthSpecError, match=r"^now: .* is too late: .* give a time before 9707-"):
        evaluate(spec(), [node("a"), node("b")], [], LATEST_TIME + 1)
    with pytest.raises(HealthSpecError, match=r"^now: '2026-06-01T12:00:00Z' is not a time; give seconds since"):
        evaluate(spec(), [node("a"), node("b")], [], "2026-06-01T12:00:00Z")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({}, "nodes[1]: metadata.name is missing"),
        ({"metadata": {"labels": {WORKER: ""}}}, "nodes[1]: metadata.name is missing"),
        ({"metadata": {"name": ""}}, "nodes[1]: metadata.name is missing"),
        ({"metadata": {"name": 5}}, "nodes[1]: metadata.name is missing or not a string"),
        ("b", "nodes[1]: a Node must be an object"),
        ({"metadata": {"name": "b", "labels": {"pool": 1}}}, "nodes[1].metadata.labels.pool: 1 is not a string"),
        ({"metadata": {"name": "b", "labels": ["pool"]}}, "nodes[1].metadata.labels: must be a mapping"),
        ({"metadata": {"name": "b", "annotations": {"a": 1}}}, "nodes[1].metadata.annotations.a: 1 is not a string"),
        ({"metadata": {"name": "b"}, "status": {"conditions": "Ready"}}, "nodes[1].status.conditions: must be a list"),
        ({"metadata": {"name": "b"}, "status": {"conditions": ["Ready"]}}, "nodes[1].status.conditions[0]: must be"),
        (
            {"metadata": {"name": "b"}, "status": {"conditions": [{"type": "Ready", "lastTransitionTime": 5}]}},
            "nodes[1].status.conditions[0].lastTransitionTime: 5 is not an RFC 3339 timestamp",
        ),
        (
            {"metadata": {"name": "b"}, "status": {"conditions": [{"type": "Ready", "status": True}]}},
            "nodes[1].status.conditions[0].status: True is not a string; quote it ('True')",
        ),
    ],
)
def test_a_malformed_node_names_its_index_and_the_field(bad: Any, message: str) -> None:
    """Silently observed (or not) before, or a traceback; offline data with a typo must not evaluate."""
    with pytest.raises(HealthSpecError) as info:
        run([node("a"), bad, node("c")])
    assert str(info.value).startswith(message)
    with pytest.raises(HealthSpecError):
        run([node("a"), bad, node("c")], selector=None)


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        ({"matchLabels": {"pool": 1}}, "spec.selector.matchLabels.pool: 1 is not a string; quote it ('1')"),
        ({"matchLabels": {"pool": True}}, "spec.selector.matchLabels.pool: True is not a string"),
        ({"matchLabels": {"pool": None}}, "spec.selector.matchLabels.pool: None is not a string"),
        ({"matchLabels": {7: "gpu"}}, "spec.selector.matchLabels: the key 7 is not a string"),
        (
            {"matchExpressions": [{"key": "pool", "operator": "In", "values": [1]}]},
            "spec.selector.matchExpressions[0].values[0]: 1 is not a string; quote it ('1')",
        ),
        (
            {"matchExpressions": [{"key": "pool", "operator": "NotIn", "values": ["a", 2.5]}]},
            "spec.selector.matchExpressions[0].values[1]: 2.5 is not a string",
        ),
        (
            {"matchExpressions": [{"key": "pool", "operator": "In", "values": "gpu"}]},
            "spec.selector.matchExpressions[0].values: must be a list of strings",
        ),
        (
            {"matchExpressions": [{"key": 5, "operator": "Exists"}]},
            "spec.selector.matchExpressions[0].key: 5 is not a string",
        ),
    ],
)
def test_a_selector_value_that_is_not_a_string_names_the_field(selector: dict[str, Any], message: str) -> None:
    """Label values are strings: 1 never equals the label "1", so such a selector silently observed 0 nodes."""
    with pytest.raises(HealthSpecError) as info:
        run([node("a", labels={"pool": "1"}), node("b")], selector=selector)
    assert str(info.value).startswith(message)


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"minHealthy": "\uff151%"}, "spec.minHealthy"),
        ({"minHealthy": None, "maxUnhealthy": "\u0663%"}, "spec.maxUnhealthy"),
        ({"healthyDelay": "-" + "9" * 400 + "h"}, "spec.healthyDelay"),
        (
            {"remediationTemplate": None, "escalatingRemediations": [{**STEPS[0], "timeout": "9" * 400 + "s"}]},
            r"spec.escalatingRemediations[0].timeout",
        ),
    ],
)
def test_numbers_and_durations_take_ascii_digits_and_fit(extra: dict[str, Any], field: str) -> None:
    with pytest.raises(HealthSpecError) as info:
        run([node("a", "Unknown", since=9999), node("b"), node("c")], **extra)
    assert str(info.value).startswith(field)


@given(st.characters(categories=["Nd"]).filter(lambda c: not c.isascii()), st.integers(min_value=0, max_value=13))
def test_a_condition_time_with_any_non_ascii_digit_names_the_field(digit: str, place: int) -> None:
    stamp = format_time(NOW - 3600)
    index = [i for i, c in enumerate(stamp) if c.isdigit()][place]
    bad = node("a")
    bad["status"]["conditions"][0]["lastTransitionTime"] = stamp[:index] + digit + stamp[index + 1 :]
    with pytest.raises(HealthSpecError, match=r"^nodes\[0\]\.status\.conditions\[0\]\.lastTransitionTime: .*ASCII"):
        run([bad, node("b")])
