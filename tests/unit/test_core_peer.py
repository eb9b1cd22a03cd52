"""The node agent's decision table (core/node/peer.py) and its configuration limits (core/node/agentconfig.py)."""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.node import agentconfig, safetime
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.node.peer import (
    API_ERROR,
    BUSY,
    HEALTHY,
    MAX_SECONDS_WITHOUT_PEER_ANSWER,
    REQUEST_FAILED,
    UNHEALTHY,
    Code,
    Verdict,
    control_plane_verdict,
    feeder_wait,
    limit_in_force,
    limit_verdict,
    majority,
    node_is_control_plane,
    node_verdict,
    peer_answer,
    peers_due,
    remediation_to_act_on,
    remediations_for,
    worker_verdict,
)
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.node.rfc3339 import format_time
from hypothesis import given
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
CRD = ROOT / "roles/crds/files/self-node-remediation.medik8s.io_selfnoderemediationconfigs.yaml"
H, U, E, F, B = HEALTHY, UNHEALTHY, API_ERROR, REQUEST_FAILED, BUSY


def verdict(batches: Sequence[Sequence[int]], peers: int | None = None, since: float = 0.0, **kw: Any) -> Verdict:
    count = peers if peers is not None else sum(len(b) for b in batches)
    args: dict[str, Any] = {"error_count": 3, "threshold": 3, "worker_peers": count, "min_peers": 1}
    args.update(kw)
    return worker_verdict(batches=iter(batches), seconds_since_last_answer=since, **args)


# -- worker verdict: every row of the table ---------------------------------------------------------
def test_below_threshold_asks_nobody() -> None:
    class Never:
        def __iter__(self) -> Iterator[list[int]]:
            raise AssertionError("peers asked below the threshold")

    result = worker_verdict(2, 3, 5, 1, Never(), 1000.0)
    assert (result.code, result.fence, result.reset_errors) == (Code.THRESHOLD_NOT_REACHED, False, False)


def test_too_few_peers_is_healthy_min_peers_honoured() -> None:
    result = verdict([], peers=1, min_peers=2, since=1000.0)
    assert (result.code, result.fence) == (Code.TOO_FEW_PEERS, False)
    # the default minPeersForRemediation 1 and no peer: healthy (upstream reboots)
    assert verdict([], peers=0, since=1000.0).code == Code.TOO_FEW_PEERS


def test_no_peers_with_min_peers_zero_is_isolated() -> None:
    result = verdict([], peers=0, min_peers=0)
    assert (result.code, result.fence) == (Code.NO_PEERS_ISOLATED, True)


def test_healthy_answers_of_a_majority_of_those_asked_confirm() -> None:
    result = verdict([[E, H, H]])
    assert (result.code, result.fence, result.confirmed, result.reset_errors) == (
        Code.PEER_REPORTS_HEALTHY,
        False,
        True,
        True,
    )
    assert verdict([[H]]).confirmed  # a single peer decides alone, as upstream


@pytest.mark.parametrize(
    "batches",
    [
        [[E, H, F]],  # one slow liar against silence
        [[H, F, F], [F, F, F]],
        [[H, B, B]],  # against peers that closed the connection (full, or not knowing the asker)
        [[H, E, E]],  # against peers in an outage
        [[H, F]],  # one of two
    ],
)
def test_one_healthy_answer_against_silence_confirms_nothing(batches: list[list[int]]) -> None:
    result = verdict(batches, since=0.0)
    assert not result.confirmed and not result.reset_errors
    assert not result.fence  # not yet: the isolation limit decides
    assert limit_verdict(result, 30.0, 30.0).code == Code.ISOLATION_LIMIT


def test_one_lying_peer_is_outvoted_in_either_direction() -> None:
    # a peer that always answers Unhealthy cannot fence a node its honest peers see as healthy
    assert verdict([[U, H, H]]).code == Code.PEER_REPORTS_HEALTHY
    # nor can one that always answers Healthy keep a node running that honest peers see remediated
    lied_healthy = verdict([[H, U, U]])
    assert (lied_healthy.code, lied_healthy.fence) == (Code.PEER_REPORTS_UNHEALTHY, True)


def test_a_tie_asks_the_next_batch_and_counts_over_batches() -> None:
    asked: list[int] = []

    def batches() -> Iterator[list[int]]:
        for index, answers in enumerate([[U, H, F], [H, H, H], [U, U, U]]):
            asked.append(index)
            yield answers

    result = worker_verdict(3, 3, 9, 1, batches(), 1000.0)
    assert (result.code, result.fence, result.peers_asked) == (Code.PEER_REPORTS_HEALTHY, False, 6)
    assert asked == [0, 1]
    # a tie to the end decides nothing: the node neither fences nor resets its count
    tie = verdict([[U, H, F]], since=1000.0)
    assert (tie.code, tie.fence, tie.reset_errors) == (Code.RECENT_PEER_ANSWER, False, False)


def test_a_busy_peer_is_alive_never_an_answer() -> None:
    result = verdict([[B, F, F], [B]], since=1000.0)
    assert (result.code, result.fence) == (Code.RECENT_PEER_ANSWER, False)
    assert result.as_dict()["answers"] == ["Busy", "RequestFailed", "RequestFailed", "Busy"]
    # busy peers count toward neither side nor the API-error majority
    assert verdict([[B, B, U]]).code == Code.PEER_REPORTS_UNHEALTHY
    assert verdict([[B, B, E]], since=1000.0).code == Code.RECENT_PEER_ANSWER


def test_unhealthy_answer_fences() -> None:
    result = verdict([[F, U, E]])
    assert (result.code, result.fence, result.reset_errors) == (Code.PEER_REPORTS_UNHEALTHY, True, False)


def test_first_deciding_batch_ends_the_round() -> None:
    asked: list[int] = []

    def batches() -> Iterator[list[int]]:
        for index, answers in enumerate([[F, F, F], [H, H, H, H], [U, U, U]]):
            asked.append(index)
            yield answers

    result = worker_verdict(3, 3, 10, 1, batches(), 0.0)
    assert result.code == Code.PEER_REPORTS_HEALTHY
    assert asked == [0, 1] and result.batches_asked == 2
    assert result.answers == (F, F, F, H, H, H, H)


def test_most_peers_with_api_errors_is_an_outage_summed_over_batches() -> None:
    # 7 peers: more than 7 // 2 = 3 API errors are needed; batch 1 has 2, batch 2 brings 4
    result = verdict([[E, E, F], [E, E, F], [F]], since=1000.0)
    assert (result.code, result.fence, result.reset_errors) == (Code.API_SERVER_OUTAGE, False, False)
    assert result.batches_asked == 2
    # exactly half is not "most"
    half = verdict([[E, E, F], [F]], since=1000.0)
    assert half.code == Code.RECENT_PEER_ANSWER


def test_no_decision_with_an_answer_this_round_is_healthy() -> None:
    result = verdict([[E, F, F], [F, F, F]], since=1000.0)
    assert (result.code, result.fence) == (Code.RECENT_PEER_ANSWER, False)


@pytest.mark.parametrize(
    ("since", "code", "fence"),
    [
        (MAX_SECONDS_WITHOUT_PEER_ANSWER, Code.RECENT_PEER_ANSWER, False),
        (MAX_SECONDS_WITHOUT_PEER_ANSWER + 0.001, Code.ISOLATED, True),
    ],
)
def test_no_answer_isolation_after_30_seconds(since: float, code: str, fence: bool) -> None:
    result = verdict([[F, F, F], [F]], since=since)
    assert (result.code, result.fence) == (code, fence)
    assert result.as_dict()["answers"] == ["RequestFailed"] * 4


@given(st.lists(st.lists(st.sampled_from([H, U, E, F, B]), min_size=1, max_size=5), min_size=1, max_size=6))
def test_properties(batches: list[list[int]]) -> None:
    flat = [a for b in batches for a in b]
    result = verdict(batches, since=1000.0)
    seen = list(result.answers)
    assert seen == flat[: len(seen)]
    # the answers the verdict saw decide by majority: never a fence while Healthy answers are as many
    if result.fence and result.code == Code.PEER_REPORTS_UNHEALTHY:
        assert seen.count(U) > seen.count(H)
    if result.reset_errors:
        assert seen.count(H) > seen.count(U)
        # confirmed only by a majority of the peers asked, the silent ones included
        assert seen.count(H) >= majority(len(seen)) and result.confirmed
    # one lying peer added to a first batch whose Healthy answers stay a majority with it fences nothing
    if batches[0].count(H) >= majority(len(batches[0]) + 1) and U not in batches[0]:
        assert not verdict([[*batches[0], U], *batches[1:]], since=1000.0).fence
    # only peers that never showed a sign of life make a node isolated
    if set(flat) == {F}:
        assert result.code == Code.ISOLATED
    if result.code == Code.ISOLATED:
        assert set(seen) == {F}
    assert result.fence == (result.code in (Code.PEER_REPORTS_UNHEALTHY, Code.ISOLATED))


# -- control-plane verdict ---------------------------------------------------------------------------
def w(code: str) -> Verdict:
    fence = code in (Code.PEER_REPORTS_UNHEALTHY, Code.ISOLATED, Code.NO_PEERS_ISOLATED)
    return Verdict(code, fence, code == Code.PEER_REPORTS_HEALTHY, code)


@pytest.mark.parametrize(
    ("worker", "cp", "diag", "code", "fence"),
    [
        (Code.PEER_REPORTS_HEALTHY, [U], True, Code.CONTROL_PLANE_PEER_REPORTS_UNHEALTHY, True),
        (Code.PEER_REPORTS_HEALTHY, [U, H, H], True, Code.PEER_REPORTS_HEALTHY, False),
        (Code.ISOLATED, [B, F], True, Code.CONTROL_PLANE_PEERS_REACHABLE, False),
        (Code.PEER_REPORTS_UNHEALTHY, [H], True, Code.PEER_REPORTS_UNHEALTHY, True),
        (Code.ISOLATED, [E, F], True, Code.CONTROL_PLANE_PEERS_REACHABLE, False),
        (Code.ISOLATED, [F, F], True, Code.CONTROL_PLANE_PEERS_UNREACHABLE, True),
        (Code.NO_PEERS_ISOLATED, [], True, Code.CONTROL_PLANE_PEERS_UNREACHABLE, True),
        (Code.NO_PEERS_ISOLATED, [H], True, Code.CONTROL_PLANE_PEERS_REACHABLE, False),
        (Code.API_SERVER_OUTAGE, [F], True, Code.DIAGNOSTICS_PASSED, False),
        (Code.API_SERVER_OUTAGE, [H], False, Code.DIAGNOSTICS_FAILED, True),
        (Code.TOO_FEW_PEERS, [E], True, Code.DIAGNOSTICS_PASSED, False),
        (Code.TOO_FEW_PEERS, [E], False, Code.DIAGNOSTICS_FAILED, True),
        (Code.TOO_FEW_PEERS, [F], True, Code.CONTROL_PLANE_PEERS_UNREACHABLE, True),
        (Code.THRESHOLD_NOT_REACHED, [F], False, Code.THRESHOLD_NOT_REACHED, False),
        (Code.PEER_REPORTS_HEALTHY, [F], False, Code.PEER_REPORTS_HEALTHY, False),
        (Code.RECENT_PEER_ANSWER, [], False, Code.RECENT_PEER_ANSWER, False),
    ],
)
def test_control_plane_table(worker: str, cp: list[int], diag: bool, code: str, fence: bool) -> None:
    result = control_plane_verdict(w(worker), cp, diag)
    assert (result.code, result.fence) == (code, fence)
    assert node_verdict(True, w(worker), cp, diag) == result


def test_control_plane_keeps_the_reset_of_a_healthy_worker_answer() -> None:
    healthy = verdict([[H]])
    assert control_plane_verdict(healthy, [F], True).reset_errors
    assert not control_plane_verdict(healthy, [U], True).reset_errors


def test_control_plane_peers_confirm_by_a_majority_of_them() -> None:
    outage = w(Code.API_SERVER_OUTAGE)
    assert control_plane_verdict(outage, [H, H, F], True).confirmed
    assert not control_plane_verdict(outage, [H, F, F], True).confirmed
    assert not control_plane_verdict(outage, [], True).confirmed


# -- the isolation limit ------------------------------------------------------------------------------
LIMIT = safetime.isolation_limit({})


@pytest.mark.parametrize(
    "code",
    [
        Code.THRESHOLD_NOT_REACHED,
        Code.TOO_FEW_PEERS,
        Code.API_SERVER_OUTAGE,
        Code.RECENT_PEER_ANSWER,
        Code.DIAGNOSTICS_PASSED,
        Code.CONTROL_PLANE_PEERS_REACHABLE,
    ],
)
def test_no_verdict_that_keeps_a_node_running_outlasts_the_isolation_limit(code: str) -> None:
    before = limit_verdict(w(code), LIMIT - 0.001, LIMIT)
    assert before.code == code and not before.fence
    after = limit_verdict(w(code), LIMIT, LIMIT)
    assert (after.code, after.fence, after.confirmed) == (Code.ISOLATION_LIMIT, True, False)
    assert code in after.reason


def test_a_confirmed_or_fencing_verdict_is_left_as_it_is() -> None:
    for code in (Code.PEER_REPORTS_HEALTHY, Code.PEER_REPORTS_UNHEALTHY, Code.ISOLATED):
        assert limit_verdict(w(code), 10 * LIMIT, LIMIT) == w(code)


def test_the_limit_runs_from_the_first_confirmation_and_rests_while_not_capable() -> None:
    assert limit_in_force(True, False)
    assert not limit_in_force(False, False)  # nothing confirmed in this boot yet (a cold start)
    assert not limit_in_force(True, True)  # the node shows itself not reboot-capable: the manager leaves it


def test_the_peers_are_asked_before_the_limit_whatever_the_error_count() -> None:
    assert peers_due(1, 3, 10.0, 85.0, 30.0) == 1
    assert peers_due(1, 3, 55.0, 85.0, 30.0) == 3
    assert peers_due(4, 3, 80.0, 85.0, 30.0) == 4


def test_the_default_isolation_limit() -> None:
    # 3 x (15 s + 5 s) + 30 s - 5 s
    assert LIMIT == 85.0
    assert safetime.safe_time({}, 6).isolation_limit_seconds == LIMIT


@given(
    cut_off=st.floats(min_value=0, max_value=1e6, allow_nan=False),
    limit=st.floats(min_value=1, max_value=1e5, allow_nan=False),
    interval=st.floats(min_value=0.001, max_value=1200, allow_nan=False),
)
def test_the_feeder_never_sleeps_past_the_limit(cut_off: float, limit: float, interval: float) -> None:
    wait = feeder_wait(cut_off, limit, interval)
    assert 0 <= wait <= interval
    assert cut_off + wait <= max(cut_off, limit) + 1e-9


def test_a_worker_node_uses_the_worker_verdict() -> None:
    isolated = w(Code.ISOLATED)
    assert node_verdict(False, isolated, [H], True) is isolated


def test_node_role() -> None:
    assert node_is_control_plane({"metadata": {"labels": {"node-role.kubernetes.io/control-plane": ""}}})
    assert node_is_control_plane({"metadata": {"labels": {"node-role.kubernetes.io/master": ""}}})
    assert not node_is_control_plane({"metadata": {"labels": {"node-role.kubernetes.io/worker": ""}}})


# -- remediation objects -------------------------------------------------------------------------
BOOT = datetime(2026, 1, 1, 12, 0, tzinfo=UTC).timestamp()


def snr(name: str, created: float | None, node: str | None = None, uid: str = "u1", **ann: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ops", "uid": uid, "annotations": dict(ann)}
    if node:
        meta["annotations"]["remediation.medik8s.io/node-name"] = node
    if created is not None:
        meta["creationTimestamp"] = format_time(created)
    return {"metadata": meta}


def test_peer_answer_matches_by_annotation_or_name() -> None:
    items = [snr("w1", BOOT), snr("w2-abcde", BOOT, node="w2")]
    assert peer_answer(items, "w1") == UNHEALTHY
    assert peer_answer(items, "w2") == UNHEALTHY
    assert peer_answer(items, "w2-abcde") == HEALTHY  # the annotation wins over the name
    assert peer_answer(items, "w3") == HEALTHY
    assert [i["metadata"]["name"] for i in remediations_for(items, "w2")] == ["w2-abcde"]


def test_remediation_newer_than_boot_fences_once() -> None:
    later = snr("w1", BOOT + 60)
    assert remediation_to_act_on([later], "w1", BOOT) is later
    assert remediation_to_act_on([later], "w1", BOOT, ["u1"]) is None
    assert remediation_to_act_on([later], "w2", BOOT) is None


def test_remediation_older_than_boot_was_served_by_that_reboot() -> None:
    assert remediation_to_act_on([snr("w1", BOOT - 1)], "w1", BOOT) is None


def test_remediation_without_a_timestamp_fences_and_timed_out_does_not() -> None:
    assert remediation_to_act_on([snr("w1", None)], "w1", BOOT) is not None
    timed_out = snr("w1", BOOT + 60, **{"remediation.medik8s.io/nhc-timed-out": "x"})
    assert remediation_to_act_on([timed_out], "w1", BOOT) is None
    bad = snr("w1", None)
    bad["metadata"]["creationTimestamp"] = "yesterday"
    assert remediation_to_act_on([bad], "w1", BOOT) is bad


# -- configuration limits: one table, checked against the CRD ------------------------------------------
def crd_spec_properties() -> dict[str, Any]:
    crd = yaml.safe_load(CRD.read_text(encoding="utf-8"))
    props: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    return props


def test_limits_table_matches_the_crd() -> None:
    props = crd_spec_properties()
    for name, spec in agentconfig.SNR_FIELDS.items():
        prop = props[name]
        assert prop.get("default") == spec["default"] or (spec["default"] == "" and "default" not in prop), name
        if spec["kind"] == "duration":
            rule = prop["x-kubernetes-validations"][0]["rule"]
            text = re.search(r"duration\('([^']+)'\)", rule)
            assert text is not None
            from ansible_collections.nodeops.maintenance.plugins.module_utils.core.node.duration import parse_duration

            assert parse_duration(text.group(1), name) == spec["minimum"], name
        elif spec["kind"] == "integer":
            assert prop["type"] == "integer"
            assert prop.get("minimum") == spec.get("minimum"), name
            assert prop.get("maximum") == spec.get("maximum"), name
        else:
            assert prop["type"] == spec["kind"], name
    # the safe-time arithmetic uses the same defaults and minimums
    for name, value in safetime.DEFAULTS.items():
        assert agentconfig.SNR_FIELDS[name]["default"] == value
    for name, value in safetime.MINIMUM_SECONDS.items():
        assert agentconfig.SNR_FIELDS[name]["minimum"] == value


REQUIRED = {
    "nodeName": "w1",
    "apiServer": "https://127.0.0.1:6443",
    "caFile": "/ca",
    "tokenFile": "/token",
    "peerCaFile": "/pca",
    "peerCertFile": "/pcert",
    "peerKeyFile": "/pkey",
    "peersFile": "/peers",
}


def test_defaults_applied() -> None:
    cfg = agentconfig.validate(REQUIRED)
    assert cfg["apiCheckInterval"] == 15.0 and cfg["peerUpdateInterval"] == 900.0
    assert cfg["hostPort"] == 30001 and cfg["minPeersForRemediation"] == 1
    assert cfg["watchdogFilePath"] == "/dev/watchdog" and cfg["isSoftwareRebootEnabled"] is True


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("apiCheckInterval", "999ms", "apiCheckInterval: '999ms' is below the minimum of 1s"),
        ("apiServerTimeout", "9ms", "below the minimum of 0.01s"),
        ("peerUpdateInterval", "9s", "peerUpdateInterval"),
        ("peerDialTimeout", "5", "peerDialTimeout: '5' is not a duration"),
        ("maxApiErrorThreshold", 0, "maxApiErrorThreshold: 0 is below the minimum of 1"),
        ("hostPort", 65536, "hostPort: 65536 is above the maximum of 65535"),
        ("hostPort", "30001", "hostPort: '30001' must be a whole number"),
        ("minPeersForRemediation", -1, "minPeersForRemediation: -1 is below"),
        ("isSoftwareRebootEnabled", "yes", "isSoftwareRebootEnabled: 'yes' must be true or false"),
        ("logLevel", "loud", "logLevel: 'loud' must be one of"),
        ("rebootCommand", "reboot", "rebootCommand: 'reboot' must be a list"),
        ("rebootCommand", [], "rebootCommand: must not be empty"),
        ("apiServer", "http://x", "apiServer: 'http://x' must be an https:// URL"),
        ("nodeName", "", "nodeName: must not be empty"),
        ("bogus", 1, "bogus: unknown field"),
        ("watchdogFilePath", 3, "watchdogFilePath: 3 must be a string"),
    ],
)
def test_bad_values_name_the_field(field: str, value: Any, message: str) -> None:
    with pytest.raises(agentconfig.AgentConfigError, match=re.escape(message)):
        agentconfig.validate({**REQUIRED, field: value})


def test_required_and_mapping() -> None:
    with pytest.raises(agentconfig.AgentConfigError, match=r"^tokenFile: required"):
        agentconfig.validate({k: v for k, v in REQUIRED.items() if k != "tokenFile"})
    with pytest.raises(agentconfig.AgentConfigError, match="mapping"):
        agentconfig.validate([])


# -- the files the role ships to the nodes stay Python 3.9 syntax ----------------------------------------
# The same list the role copies (node_agent_core_files in roles/node_agent/vars/main.yml), and the agent.
SHIPPED_CORE = yaml.safe_load((ROOT / "roles/node_agent/vars/main.yml").read_text(encoding="utf-8"))[
    "node_agent_core_files"
]


@pytest.mark.parametrize("name", SHIPPED_CORE)
def test_agent_core_files_parse_as_python_3_9(name: str) -> None:
    path = ROOT / "plugins/module_utils/core/node" / name
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source, feature_version=(3, 9))
    assert "from __future__ import annotations" in source or name == "__init__.py"
    imports = {n.names[0].name.partition(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)}
    imports |= {
        n.module.partition(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module and not n.level
    }
    # the standard library only (imports of each other are relative)
    assert imports <= set(sys.stdlib_module_names), imports - set(sys.stdlib_module_names)


def test_the_agent_itself_parses_as_python_3_9() -> None:
    path = ROOT / "roles/node_agent/files/nodeops_node_agent.py"
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source, feature_version=(3, 9))
    assert "from __future__ import annotations" in source
    modules = {n.names[0].name.partition(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)}
    modules |= {str(n.module).partition(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert modules <= set(sys.stdlib_module_names) | {"nodeops_core"}, modules - set(sys.stdlib_module_names)


@pytest.mark.parametrize("address", ["localhost", "node-1.example", "127.0.0.1\x00", "::1]"])
def test_the_metrics_address_must_be_an_ip_address(address: str) -> None:
    """A name or a broken address fails the configuration check, not the agent's start of its metrics."""
    with pytest.raises(agentconfig.AgentConfigError, match=r"metricsAddress: .* is not an IP address"):
        agentconfig.validate({**REQUIRED, "metricsAddress": address, "metricsPort": 9737})
    assert agentconfig.validate({**REQUIRED, "metricsAddress": "::1", "metricsPort": 9737})["metricsAddress"] == "::1"
