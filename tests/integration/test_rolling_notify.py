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
from cluster import kwok
from integration.test_rolling import BUILTIN_ONLY, command, record, run, tasks_file
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
    engine: Engine, fleet: tuple[str, list[str]], tmp_path: Path, receiver: Receiver, run_id: str, **notify: Any
) -> tuple[str, str]:
    """Run the playbook with one node failing and the notification settings given; (its output, the failed node)."""
    selector, names = fleet
    broken = names[1]
    tasks, _log = tasks_file(tmp_path, fail_on=broken)
    settings = {
        "rolling_notify_url": receiver.url("/hooks/T0/secret-path"),
        "rolling_notify_headers": {"Authorization": TOKEN},
        "rolling_max_fail_percentage": 50,
        "rolling_gather_seconds": 2,
        "rolling_simulated_reboot_seconds": 1,
        **notify,
    }
    out = run(command(engine, selector, tasks, run_id, "-e", json.dumps(settings)), 2)
    assert TOKEN not in out and "tok-SECRET" not in out and "secret-path" not in out
    return out, broken


def expected_order(waves: dict[str, int], broken: str) -> list[tuple[str, int | None]]:
    """(event, wave) in the order the run must send them."""
    order: list[tuple[str, int | None]] = []
    for wave in sorted(set(waves.values())):
        order.append(("wave_start", wave))
        if waves[broken] == wave:
            order.append(("node_failed", wave))
        order.append(("wave_end", wave))
    return [*order, ("run_end", None)]


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
    assert [(g["kind"], g["wave"]) for g in got] == expected_order(waves, broken), out[-4000:]
    run_id = got[0]["run"]
    assert run_id.startswith("hook-") and all(g["run"] == run_id for g in got)
    (failed,) = [g for g in got if g["kind"] == "node_failed"]
    assert failed["nodes"] == [broken] and "firmware update failed" in failed["failures"][broken]
    assert f"node {broken} failed in wave {waves[broken]}" in failed["text"]
    for g in got:
        if g["kind"] in ("wave_start", "wave_end"):
            assert sorted(g["nodes"]) == sorted(n for n, w in waves.items() if w == g["wave"])
        if g["kind"] == "wave_end":
            assert list(g["failures"]) == ([broken] if waves[broken] == g["wave"] else [])
    end = got[-1]
    assert sorted(end["nodes"]) == sorted(waves) and list(end["failures"]) == [broken]
    assert end["counts"]["done"] == 2 and end["counts"]["failed"] == 1
    assert f"Run {run_id} ended" in end["text"]


@BUILTIN_ONLY
def test_slack_gets_text_and_blocks_for_each_event_in_order(
    engine: Engine, small_fleet: tuple[str, list[str]], tmp_path: Path, receiver: Receiver
) -> None:
    # all three nodes in one wave: the order across waves is the webhook test's
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
    titles = {
        "wave_start": "Wave {w} starts",
        "wave_end": "Wave {w} ended",
        "node_failed": "Node failed",
        "run_end": "Run ended",
    }
    expected = [titles[event].format(w=wave) for event, wave in expected_order(waves, broken)]
    assert [g["blocks"][0]["text"]["text"].split("*")[1] for g in got] == expected, out[-4000:]
    for g in got:
        assert g["text"] and g["blocks"][0]["text"]["type"] == "mrkdwn"
    (failed,) = [g for g in got if g["blocks"][0]["text"]["text"].split("*")[1] == "Node failed"]
    assert f"node {broken} failed" in failed["text"] and "firmware update failed" in failed["text"]
    assert "ended after" in got[-1]["text"] and f"failed: {broken}" in got[-1]["text"]
