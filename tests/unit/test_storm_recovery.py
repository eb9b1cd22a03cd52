"""Storm recovery (``stormCooldownDuration``): upstream's "consecutive storms" example replayed pass by pass
through the offline pass, each pass reading the status and the remediation objects the one before would leave;
and the edges (off when unset, "0s", paused, no unhealthy node, a status that cannot be read)."""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.node.rfc3339 import format_time
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.remediation.health import (
    STORM_ACTIVE,
    STORM_COOLDOWN_ACTIVE,
    STORM_REASON,
    Code,
    HealthSpecError,
    evaluate,
)
from ansible_collections.nodeops.maintenance.plugins.module_utils.engines.health import (
    PassResult,
    offline_pass,
    pass_events,
    remediations_after,
)
from unit.test_core_health import NOW, TEMPLATE, WORKER, node, rem

COOLDOWN = 60


def spec(**extra: Any) -> dict[str, Any]:
    return {
        "selector": {"matchExpressions": [{"key": WORKER, "operator": "Exists"}]},
        "minHealthy": 4,
        "remediationTemplate": TEMPLATE,
        "stormCooldownDuration": f"{COOLDOWN}s",
        **extra,
    }


class Cluster:
    """Nodes, the remediation objects and the NodeHealthCheck status, carried from one offline pass to the next
    as a live pass would leave them."""

    def __init__(self, healthy: int, unhealthy: int, **extra: Any) -> None:
        self.spec = spec(**extra)
        self.nodes = {f"h{i}": node(f"h{i}") for i in range(healthy)}
        self.nodes.update({f"u{i}": node(f"u{i}", ready="False") for i in range(unhealthy)})
        self.rems = [rem(f"u{i}") for i in range(unhealthy)]
        self.status: dict[str, Any] = {}

    def fail(self, name: str) -> None:
        self.nodes[name] = node(name, ready="False")

    def recover(self, name: str) -> None:
        self.nodes[name] = node(name)

    def pass_at(self, seconds: float) -> PassResult:
        now = NOW + seconds
        result = offline_pass(self.spec, list(self.nodes.values()), self.rems, now, status=self.status)
        self.rems = remediations_after(self.rems, result.evaluation, now)
        assert result.status is not None
        self.status = result.status
        return result

    def condition(self, ctype: str) -> dict[str, Any] | None:
        return next((c for c in self.status.get("conditions", []) if c["type"] == ctype), None)

    def storm(self) -> tuple[str | None, str | None]:
        active, cooling = self.condition(STORM_ACTIVE), self.condition(STORM_COOLDOWN_ACTIVE)
        return (active or {}).get("status"), (cooling or {}).get("status")


def reasons(result: PassResult) -> list[str]:
    return [e["reason"] for e in result.events]


def at(seconds: float) -> str:
    return format_time(NOW + seconds)


def test_consecutive_storms_as_in_upstreams_example() -> None:
    # 7 nodes, minHealthy 4, 3 of them unhealthy and remediated
    cluster = Cluster(healthy=4, unhealthy=3)
    first = cluster.pass_at(0)
    assert cluster.storm() == (None, None) and first.status and first.status["healthyNodes"] == 4
    assert not first.created

    # first storm: a fourth node fails; only 3 healthy
    cluster.fail("h1")
    storm = cluster.pass_at(10)
    assert cluster.storm() == ("True", "False")
    assert {c["reason"] for c in cluster.status["conditions"] if c["type"].startswith("Storm")} == {STORM_REASON}
    assert "StormRecoveryStarted" in reasons(storm) and not storm.created
    assert storm.evaluation.decision("h1").code == Code.SKIPPED_MIN_HEALTHY
    # while the threshold is breached the cooldown never starts, and nothing more is recorded
    again = cluster.pass_at(40)
    assert cluster.storm() == ("True", "False") and not again.created
    assert "StormRecoveryStarted" not in reasons(again)
    assert cluster.condition(STORM_ACTIVE)["lastTransitionTime"] == at(10)  # type: ignore[index]

    # first cooldown: u1 recovers (its object goes first, then it counts healthy)
    cluster.recover("u1")
    cluster.pass_at(50)
    assert cluster.storm() == ("True", "False")
    cooling = cluster.pass_at(60)
    assert cluster.storm() == ("True", "True") and not cooling.created
    assert cluster.condition(STORM_COOLDOWN_ACTIVE)["lastTransitionTime"] == at(60)  # type: ignore[index]
    assert "StormRecoveryCooldownStarted" in reasons(cooling)
    assert cooling.evaluation.decision("h1").code == Code.SKIPPED_STORM
    skipped = [e for e in cooling.events if e["reason"] == "RemediationSkipped"]
    assert [e["message"] for e in skipped] == ["Storm recovery active: skipping creation of new remediations"]
    assert cooling.evaluation.requeue_after == COOLDOWN + 1

    # second storm during the cooldown: the cooldown is cleared
    cluster.fail("h2")
    cluster.pass_at(90)
    assert cluster.storm() == ("True", "False")
    assert cluster.condition(STORM_COOLDOWN_ACTIVE)["lastTransitionTime"] == at(90)  # type: ignore[index]

    # second cooldown, measured from its own start
    cluster.recover("u2")
    cluster.pass_at(100)
    second = cluster.pass_at(110)
    assert cluster.storm() == ("True", "True") and not second.created
    assert cluster.condition(STORM_COOLDOWN_ACTIVE)["lastTransitionTime"] == at(110)  # type: ignore[index]
    waiting = cluster.pass_at(110 + COOLDOWN - 20)
    assert cluster.storm() == ("True", "True") and not waiting.created
    assert waiting.evaluation.requeue_after == 21
    assert "StormRecoveryCooldownStarted" not in reasons(waiting)

    # the cooldown has passed: both conditions go False and this very pass remediates the nodes left waiting
    done = cluster.pass_at(110 + COOLDOWN)
    assert cluster.storm() == ("False", "False")
    assert "StormRecoveryEnded" in reasons(done)
    assert sorted(c["node"] for c in done.created) == ["h1", "h2"]
    assert {c["message"] for c in cluster.status["conditions"] if c["type"].startswith("Storm")} == {
        "Storm mode is deactivated, remediation can occur normally",
        "Storm cooldown completed",
    }


def test_without_a_cooldown_no_storm_is_recorded() -> None:
    cluster = Cluster(healthy=3, unhealthy=3)
    cluster.spec.pop("stormCooldownDuration")
    result = cluster.pass_at(0)
    assert cluster.storm() == (None, None)
    assert not [r for r in reasons(result) if r.startswith("Storm")]


def test_a_zero_cooldown_holds_one_pass() -> None:
    cluster = Cluster(healthy=3, unhealthy=3, stormCooldownDuration="0s")
    cluster.fail("h0")
    cluster.pass_at(0)
    assert cluster.storm() == ("True", "False")
    cluster.recover("u0")
    cluster.pass_at(1)
    cluster.recover("u1")
    cluster.pass_at(2)
    held = cluster.pass_at(3)
    assert cluster.storm() == ("True", "True") and not held.created
    assert held.evaluation.requeue_after == 1
    released = cluster.pass_at(3)
    assert cluster.storm() == ("False", "False")
    assert [c["node"] for c in released.created] == ["h0"]


def test_storm_state_is_left_alone_while_paused_or_with_no_unhealthy_node() -> None:
    cluster = Cluster(healthy=3, unhealthy=3)
    cluster.pass_at(0)
    assert cluster.storm() == ("True", "False")
    frozen = [dict(c) for c in cluster.status["conditions"]]
    for name in ("u0", "u1", "u2"):
        cluster.recover(name)
    cluster.pass_at(10)  # the objects go
    cluster.pass_at(20)  # nothing unhealthy: the storm is not looked at
    assert [c for c in cluster.status["conditions"] if c["type"].startswith("Storm")] == [
        c for c in frozen if c["type"].startswith("Storm")
    ]
    cluster.fail("h0")
    cluster.spec["pauseRequests"] = ["upgrade"]
    cluster.pass_at(30)
    assert cluster.storm() == ("True", "False")
    # unpaused with enough healthy nodes: the cooldown starts now, and holds the node back
    cluster.spec.pop("pauseRequests")
    held = cluster.pass_at(40)
    assert cluster.storm() == ("True", "True") and not held.created


def test_a_storm_condition_whose_time_cannot_be_read_is_an_error_naming_it() -> None:
    conditions = [
        {"type": STORM_ACTIVE, "status": "True", "lastTransitionTime": at(0)},
        {"type": STORM_COOLDOWN_ACTIVE, "status": "True", "lastTransitionTime": "yesterday"},
    ]
    nodes = [node(f"h{i}") for i in range(4)] + [node("u0", ready="False")]
    with pytest.raises(HealthSpecError, match=r"status\.conditions\[StormCooldownActive\]\.lastTransitionTime"):
        evaluate(spec(), nodes, [], NOW, (), conditions)
    with pytest.raises(HealthSpecError, match="stormCooldownDuration"):
        evaluate(spec(stormCooldownDuration="-5s"), nodes, [], NOW)


def test_a_disabled_check_records_no_storm_event() -> None:
    """A missing template disables the NodeHealthCheck: its storm conditions are not changed, so no storm event
    says they were."""
    cluster = Cluster(healthy=3, unhealthy=3)
    result = cluster.pass_at(0)
    assert "StormRecoveryStarted" in reasons(result)
    result.disabled = "template SelfNodeRemediationTemplate ops/automatic not found"
    assert [e["reason"] for e in pass_events(result)] == ["Disabled"]
