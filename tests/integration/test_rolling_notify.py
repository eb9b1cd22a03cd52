"""Notifications of playbooks/rolling_maintenance.yml on the real cluster: a local HTTP receiver
(tests/support/http_receiver.py) records what the run posts - the start and end of each wave, the failed node and
the end of the run, in that order - in the webhook format (a body of one's own, rendered from the event) and in
the Slack format. Three simulated nodes without pods, one of them failing its maintenance."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.maintenance.rolling import record_name
from cluster import kwok
from integration.test_rolling import BUILTIN_ONLY, command, our_requests, record, run, tasks_file, unique
from kubernetes import client as k8s
from support.engines import Engine
from support.http_receiver import Receiver

pytestmark = pytest.mark.integration

TOKEN = "Bearer tok-SECRET-4711"


@pytest.fixture(scope="module")
def crds(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> None:
    from integration.test_crds import run_role

    run_role(cluster, tmp_path_factory.mktemp("notify-crds"), {})


@pytest.fixture
def small_fleet(engine: Engine, crds: None) -> Iterator[tuple[str, list[str]]]:
    """Three Ready nodes with a label of their own and no pods: (label selector, names)."""
    label = f"notify-{uuid.uuid4().hex[:6]}"
    names = kwok.add_nodes(engine.api, 3, prefix=label, labels={"rolling": label})
    try:
        kwok.wait_nodes_ready(engine.api, names, timeout=120)
        yield f"rolling={label}", names
    finally:
        kwok.delete_nodes(engine.api, names, timeout=120)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as running:
        yield running


def notified_run(
    engine: Engine,
    fleet: tuple[str, list[str]],
    tmp_path: Path,
    receiver: Receiver,
    run_id: str,
    leave: bool = False,
    **notify: Any,
) -> tuple[str, str]:
    """Run the playbook with one node failing (with ``leave``, its host leaving the play) and the notification
    settings given; (its output, the failed node)."""
    selector, names = fleet
    broken = names[1]
    tasks, _log = tasks_file(tmp_path, fail_on="" if leave else broken, leave_on=broken if leave else "")
    settings = {
        "rolling_notify_url": receiver.url("/hooks/T0/secret-path"),
        "rolling_notify_headers": {"Authorization": TOKEN},
        "rolling_max_fail_percentage": 50,
        "rolling_gather_seconds": 2,
        "rolling_simulated_reboot_seconds": 1,
        **notify,
    }
    out = run(command(engine, selector, tasks, run_id, "-e", json.dumps(settings)), 4 if leave else 2)
    assert TOKEN not in out and "tok-SECRET" not in out and "secret-path" not in out
    return out, broken


def check_order(got: list[tuple[str, int | None]], waves: dict[str, int], broken: str, out: str) -> None:
    """The events (event, wave) as sent: each admission batch (wave) started and ended once, in that order, the
    failed node's between its batch's start and end, the batches started in order, and the run's end last.
    Batches may overlap: a batch starts when a slot frees, whether the one before has ended or not. ``out``: the
    playbook's output, shown when it does not hold."""
    batches = sorted(set(waves.values()))
    why = f"{got} {waves} {out[-4000:]}"
    assert got[-1] == ("run_end", None) and got.count(("run_end", None)) == 1, why
    assert [w for e, w in got if e == "wave_start"] == batches, why
    assert sorted(w for e, w in got if e == "wave_end" and w is not None) == batches, why
    for wave in batches:
        assert got.index(("wave_start", wave)) < got.index(("wave_end", wave)), why
    failed = got.index(("node_failed", waves[broken]))
    assert got.index(("wave_start", waves[broken])) < failed < got.index(("wave_end", waves[broken])), why
    assert len(got) == 2 * len(batches) + 2, why


@BUILTIN_ONLY
def test_webhook_gets_each_event_in_order_from_a_body_template(
    engine: Engine, small_fleet: tuple[str, list[str]], tmp_path: Path, receiver: Receiver
) -> None:
    body = {
        "kind": "{{ nodeops_event.event }}",
        "run": "{{ nodeops_event.run_id }}",
        "wave": "{{ nodeops_event.wave }}",
        "nodes": "{{ nodeops_event.nodes }}",
        "failures": "{{ nodeops_event.failures }}",
        "counts": "{{ nodeops_event.counts }}",
        "text": "{{ nodeops_event.message }}",
    }
    out, broken = notified_run(engine, small_fleet, tmp_path, receiver, "hook", rolling_notify_body=body)
    state = record(engine, "hook")
    waves = {node: r["wave"] for node, r in state.items()}
    got = [r.json for r in receiver.received()]
    assert all(r.headers["Authorization"] == TOKEN for r in receiver.received())
    assert all(r.path == "/hooks/T0/secret-path" and r.method == "POST" for r in receiver.received())
    check_order([(g["kind"], g["wave"]) for g in got], waves, broken, out)
    run_id = got[0]["run"]
    assert run_id.startswith("hook-") and all(g["run"] == run_id for g in got)
    (failed,) = [g for g in got if g["kind"] == "node_failed"]
    assert failed["nodes"] == [broken] and "firmware update failed" in failed["failures"][broken]
    assert f"node {broken} failed in wave {waves[broken]}" in failed["text"]
    for g in got:
        batch = sorted(n for n, w in waves.items() if w == g["wave"])
        if g["kind"] == "wave_start":  # the node whose admission opened the batch
            assert len(g["nodes"]) == 1 and g["nodes"][0] in batch, (g, waves)
        if g["kind"] == "wave_end":
            assert sorted(g["nodes"]) == batch, (g, waves)
            assert list(g["failures"]) == ([broken] if waves[broken] == g["wave"] else [])
    end = got[-1]
    assert sorted(end["nodes"]) == sorted(waves) and list(end["failures"]) == [broken]
    assert end["counts"]["done"] == 2 and end["counts"]["failed"] == 1
    assert f"Run {run_id} ended" in end["text"]


@BUILTIN_ONLY
def test_a_node_whose_host_left_the_play_is_notified_failed_and_ends_its_wave(
    engine: Engine, small_fleet: tuple[str, list[str]], tmp_path: Path, receiver: Receiver
) -> None:
    """A host that cannot be reached during its maintenance leaves the play (Ansible rescues no unreachable host):
    the run's last play records its node failed; that is when its failure and the end of its admission batch are
    notified, before the end of the run. (Three slots: the node holds its own until then.)"""
    out, left = notified_run(
        engine, small_fleet, tmp_path, receiver, "left", leave=True, rolling_max_parallel_operations=3
    )
    state = record(engine, "left")
    assert state[left]["state"] == "failed" and "left the play" in state[left]["message"], state[left]
    waves = {node: r["wave"] for node, r in state.items()}
    got = [r.json for r in receiver.received()]
    check_order([(g["event"], g["wave"]) for g in got], waves, left, out)
    (failed,) = [g for g in got if g["event"] == "node_failed"]
    assert failed["nodes"] == [left] and "left the play" in failed["failures"][left]
    (ended,) = [g for g in got if g["event"] == "wave_end" and g["wave"] == waves[left]]
    assert left in ended["nodes"] and list(ended["failures"]) == [left]


@BUILTIN_ONLY
def test_slack_gets_text_and_blocks_for_each_event_in_order(
    engine: Engine, small_fleet: tuple[str, list[str]], tmp_path: Path, receiver: Receiver
) -> None:
    out, broken = notified_run(
        engine,
        small_fleet,
        tmp_path,
        receiver,
        "slack",
        rolling_notify_format="slack",
        rolling_max_parallel_operations=3,
    )
    waves = {node: r["wave"] for node, r in record(engine, "slack").items()}
    got = [r.json for r in receiver.received()]
    events: list[tuple[str, int | None]] = []
    for title in [g["blocks"][0]["text"]["text"].split("*")[1] for g in got]:
        if title.startswith("Wave "):
            _word, wave, verb = title.split(" ")
            events.append(("wave_start" if verb == "starts" else "wave_end", int(wave)))
        else:
            assert title in ("Node failed", "Run ended"), (title, out[-4000:])
            events.append(("node_failed", waves[broken]) if title == "Node failed" else ("run_end", None))
    check_order(events, waves, broken, out)
    for g in got:
        assert g["text"] and g["blocks"][0]["text"]["type"] == "mrkdwn"
    (failed,) = [g for g in got if g["blocks"][0]["text"]["text"].split("*")[1] == "Node failed"]
    assert f"node {broken} failed" in failed["text"] and "firmware update failed" in failed["text"]
    assert "ended after" in got[-1]["text"] and f"failed: {broken}" in got[-1]["text"]


@BUILTIN_ONLY
def test_a_fatal_notification_records_the_failure_first_and_stops_the_waiting_nodes(
    engine: Engine, small_fleet: tuple[str, list[str]], tmp_path: Path, receiver: Receiver
) -> None:
    """The node_failed notification cannot be sent and rolling_notify_fatal is set: the failed node is on record as
    failed before it (not left maintaining, to be released as interrupted by the next run), the stop is on record,
    and no node that was waiting for its turn keeps a request."""
    path = "/hooks/fatal"
    receiver.answers(path, [500] * 20)
    out, broken = notified_run(
        engine,
        small_fleet,
        tmp_path,
        receiver,
        "fatal",
        rolling_notify_url=receiver.url(path),
        rolling_notify_events=["node_failed"],
        rolling_notify_fatal=True,
        rolling_notify_retries=0,
    )
    assert "The node_failed notification could not be sent (rolling_notify_fatal)" in out.replace("\n", " ")
    state = record(engine, "fatal")
    assert state[broken]["state"] == "failed" and "firmware update failed" in state[broken]["message"]
    name = record_name(unique(engine, "fatal"))
    data = k8s.CoreV1Api(engine.api).read_namespaced_config_map(name, engine.config_namespace).data
    assert json.loads(data["run.json"])["stopped"]["reason"] == "asked"
    left = {o["spec"]["nodeName"] for o in our_requests(engine.api, engine.namespace)}
    assert not left & {n for n, r in state.items() if r["state"] == "pending"}, (state, left)
    assert [r.json["event"] for r in receiver.received()] == ["node_failed"]
