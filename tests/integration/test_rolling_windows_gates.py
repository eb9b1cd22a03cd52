"""playbooks/rolling_maintenance.yml with a maintenance window and gates, on the real cluster (built-in engine), run
as users run it: a closed window, a blocking pod, a firing alert in a real Prometheus, and a gate tasks file.

Each run targets one or two nodes of the fleet, so that every test holds at most a wave or two. The end of a
window during a run is tested in tests/unit/test_rolling_windows_gates.py with a fake clock.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import integration.test_rolling as rolling_tests
import pytest
from cluster import kwok
from integration.test_rolling import (
    BUILTIN_ONLY,
    command,
    cordoned,
    maintained,
    our_requests,
    record,
    run,
    running_pod,
    tasks_file,
)
from kubernetes import client as k8s
from support.engines import Engine
from support.prometheus import Prometheus

pytestmark = [pytest.mark.integration, BUILTIN_ONLY]

# the six labelled nodes with pods of test_rolling.py (and the CRDs they need)
crds = rolling_tests.crds
fleet = rolling_tests.fleet

FAST_GATES = {"rolling_gate_timeout": 2, "rolling_gate_interval": 0.5}


def with_vars(cmd: list[str], variables: dict[str, Any]) -> list[str]:
    return [*cmd, "-e", json.dumps(variables)]


def blocking_pod(engine: Engine, name: str, label: str, node: str) -> None:
    """A pod ``name`` on ``node`` in the test's namespace, labelled ``nodeops-test-block=<label>`` (what the runs'
    rolling_gate_pod_selector matches), once it runs."""
    running_pod(engine, name, node, {"nodeops-test-block": label})


def test_a_closed_window_changes_nothing_and_the_same_command_goes_on_once_it_is_open(
    engine: Engine, fleet: tuple[str, list[str]], tmp_path: Path
) -> None:
    api, namespace = engine.api, engine.namespace
    _selector, names = fleet
    targets = names[:2]
    tasks, log = tasks_file(tmp_path)
    # a whole day three days from now (UTC): closed now, however long the test takes
    later = datetime.now(UTC) + timedelta(days=3)
    day = later.strftime("%a").lower()
    closed = {"rolling_node_names": targets, "rolling_window_days": [day], "rolling_window_time_zone": "UTC"}
    out = run(with_vars(command(engine, "", tasks, "window"), closed))
    assert f"it opens at {later:%Y-%m-%d}T00:00+00:00 (UTC)" in out.replace("\n", " ")
    assert "Nothing was changed" in out
    assert our_requests(api, namespace) == [] and cordoned(api, names) == [] and maintained(log) == {}
    with pytest.raises(k8s.ApiException) as info:
        record(engine, "window")
    assert info.value.status == 404  # no record either

    every_day = {**closed, "rolling_window_days": [], "rolling_window_start": "00:00", "rolling_window_end": "00:00"}
    run(with_vars(command(engine, "", tasks, "window"), every_day))
    assert maintained(log) == dict.fromkeys(targets, 1)
    assert {n: r["state"] for n, r in record(engine, "window").items()} == dict.fromkeys(targets, "done")
    assert our_requests(api, namespace) == [] and cordoned(api, names) == []


def test_the_gates_block_the_first_wave_each_named_and_nothing_is_cordoned(
    engine: Engine, fleet: tuple[str, list[str]], tmp_path: Path
) -> None:
    """One run with all three gates blocking (a pod on the node, an alert firing in a real Prometheus, a gate
    tasks file that fails): the run stops before its first wave, names each, and gives its requests back. Each
    gate on its own, the pod gate's scope and the alert filter are in tests/unit/test_rolling_windows_gates.py."""
    api, namespace = engine.api, engine.namespace
    _selector, names = fleet
    tasks, log = tasks_file(tmp_path)
    label = f"block-{uuid.uuid4().hex[:6]}"
    blocking_pod(engine, "trainer", label, names[0])
    gate = tmp_path / "gate.yml"
    gate.write_text(json.dumps([{"name": "Check the storage", "ansible.builtin.fail": {"msg": "ceph is HEALTH_WARN"}}]))
    rules = [
        {
            "name": "nodeops-test",
            "rules": [
                {"alert": "NodeopsTestStorageDegraded", "expr": "vector(1)", "labels": {"severity": "page"}},
                {"alert": "NodeopsOtherAlert", "expr": "vector(1)"},  # filtered out
            ],
        }
    ]
    with Prometheus(tmp_path / "prometheus", rules=rules) as prom:
        prom.wait_for('ALERTS{alertstate="firing"}', 60)  # at the first rule evaluation
        variables = {
            "rolling_node_names": names[:1],
            "rolling_gate_pod_selector": f"nodeops-test-block={label}",
            "rolling_gate_prometheus_url": prom.url,
            "rolling_gate_alert_filter": "NodeopsTest.*",
            "rolling_gate_tasks": str(gate),
            **FAST_GATES,
            # time for a second check of the gate tasks on a busy machine, where one check may take seconds (the
            # failure of the gate tasks stops the run at the node's admit step at once, whatever this says)
            "rolling_gate_timeout": 10,
        }
        out = run(with_vars(command(engine, "", tasks, "gates"), variables), expect_rc=2)
    assert "checking again in 0.5s" in out  # the gate tasks ran more than once
    assert "the gate tasks failed: Check the storage: ceph is HEALTH_WARN" in out
    assert f"pod {namespace}/trainer on {names[0]}" in out
    assert "alert NodeopsTestStorageDegraded (firing): severity=page" in out
    assert "NodeopsOtherAlert" not in out
    assert cordoned(api, names) == [] and our_requests(api, namespace) == [] and maintained(log) == {}
    assert record(engine, "gates")[names[0]]["state"] == "pending"


def test_a_gate_that_blocks_for_good_stops_the_run_once_not_once_per_group_of_hosts(
    engine: Engine, fleet: tuple[str, list[str]], tmp_path: Path
) -> None:
    """Four nodes, two hosts at a time (-f 2), gate tasks that always fail: the first hosts check until the gate
    timeout and stop the run on record; the hosts after them check once, find the stop and leave, instead of
    waiting a gate timeout of their own."""
    api, namespace = engine.api, engine.namespace
    _selector, names = fleet
    targets = names[:4]
    tasks, log = tasks_file(tmp_path)
    checks = tmp_path / "checks"
    checks.mkdir()
    gate = tmp_path / "gate.yml"
    gate.write_text(
        json.dumps(
            [
                {
                    "name": "Count the check",
                    "ansible.builtin.tempfile": {"path": str(checks), "prefix": "{{ nodeops_node_name }}."},
                },
                {"name": "Check the storage", "ansible.builtin.fail": {"msg": "ceph is HEALTH_ERR"}},
            ]
        )
    )
    # a timeout far above one check (each several tasks, seconds on a busy machine), so that the first hosts
    # check more than once while the later ones, finding the stop, check once
    variables = {
        "rolling_node_names": targets,
        "rolling_gate_tasks": str(gate),
        "rolling_gate_timeout": 40,
        "rolling_gate_interval": 0.5,
    }
    out = run(with_vars(command(engine, "", tasks, "gate-once", "-f", "2"), variables), expect_rc=2)
    per_node = Counter(p.name.rsplit(".", 1)[0] for p in checks.iterdir())
    assert sorted(per_node) == sorted(targets), out[-3000:]
    first, later = sorted(per_node.values(), reverse=True)[:2], sorted(per_node.values())[:2]
    assert later == [1, 1] and min(first) > 1, (per_node, out[-3000:])
    assert "the gate tasks failed: Check the storage: ceph is HEALTH_ERR" in out
    assert cordoned(api, names) == [] and our_requests(api, namespace) == [] and maintained(log) == {}
    assert {n: r["state"] for n, r in record(engine, "gate-once").items()} == dict.fromkeys(targets, "pending")


def test_a_long_gate_wait_says_what_it_waits_for_and_the_run_goes_on_once_it_clears(
    engine: Engine, fleet: tuple[str, list[str]], tmp_path: Path
) -> None:
    """A blocking pod holds the first wave back for a while: the playbook says what it waits for at least every
    rolling_progress_interval seconds, the wait goes on across those calls, and the wave starts once the pod is
    gone."""
    api, namespace = engine.api, engine.namespace
    _selector, names = fleet
    tasks, log = tasks_file(tmp_path)
    label = f"hold-{uuid.uuid4().hex[:6]}"
    blocking_pod(engine, "holder", label, names[1])
    variables = {
        "rolling_node_names": names[1:2],
        "rolling_gate_pod_selector": f"nodeops-test-block={label}",
        "rolling_gate_timeout": 600,
        "rolling_gate_interval": 0.5,
        "rolling_progress_interval": 1,
    }
    output = tmp_path / "playbook.out"
    progress = "the next admission waits for its gates"
    with output.open("w") as out_file:
        proc = subprocess.Popen(
            with_vars(command(engine, "", tasks, "progress"), variables),
            stdout=out_file,
            stderr=subprocess.STDOUT,
            env=rolling_tests.env(),
        )
        try:
            kwok.wait_until(lambda: output.read_text().count(progress) >= 2 or None, 180, "two progress lines")
            assert cordoned(api, names) == [], "nothing is cordoned while the gate blocks"
            k8s.CoreV1Api(api).delete_namespaced_pod("holder", namespace, grace_period_seconds=0)
            assert proc.wait(timeout=300) == 0, output.read_text()[-5000:]
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    out = output.read_text()
    lines = [line for line in out.splitlines() if progress in line]
    assert all(f"pod {namespace}/holder on {names[1]}" in line and "of at most 600s)" in line for line in lines)
    # one wait across the calls: the time waited grows from line to line (each call went on with the same wait)
    waited = [int(line.split("(waiting ")[1].split("s")[0]) for line in lines]
    assert waited == sorted(waited) and waited[-1] > waited[0]
    assert out.index(progress) < out.index(f"Wave 1: {names[1]}")
    assert record(engine, "progress")[names[1]]["state"] == "done" and maintained(log) == {names[1]: 1}


def test_a_gate_that_blocks_after_the_first_wave_holds_the_next_one_with_progress_lines(
    engine: Engine, fleet: tuple[str, list[str]], tmp_path: Path
) -> None:
    """A gate that starts to block while a node waits its turn: with one node at a time, the second node's host
    waits in its admit step while the first node's maintenance runs (until a file the test writes once the
    blocking pod runs); the gate now blocks, so its request is given back and the playbook says so at every
    progress interval; wave 2 starts once the pod is gone."""
    api, namespace = engine.api, engine.namespace
    _selector, names = fleet
    go = tmp_path / "go"
    log = tmp_path / "maintained"
    log.mkdir()
    tasks = tmp_path / "maintenance.yml"
    tasks.write_text(
        json.dumps(
            [
                {
                    "name": "Wait for the test",
                    "ansible.builtin.wait_for": {"path": str(go), "timeout": 300},
                    "delegate_to": "localhost",
                },
                {
                    "name": "Log the maintenance",
                    "ansible.builtin.tempfile": {"path": str(log), "prefix": "{{ nodeops_node_name }}."},
                    "delegate_to": "localhost",
                },
            ]
        )
    )
    label = f"later-{uuid.uuid4().hex[:6]}"
    variables = {
        "rolling_node_names": names[1:3],
        "rolling_max_parallel_operations": 1,
        "rolling_gate_pod_selector": f"nodeops-test-block={label}",
        "rolling_gate_pod_scope": "cluster",
        "rolling_gate_timeout": 600,
        "rolling_gate_interval": 0.5,
        "rolling_progress_interval": 1,
    }
    output = tmp_path / "playbook.out"
    progress = "the next admission waits for its gates"
    with output.open("w") as out_file:
        proc = subprocess.Popen(
            with_vars(command(engine, "", tasks, "later"), variables),
            stdout=out_file,
            stderr=subprocess.STDOUT,
            env=rolling_tests.env(),
        )
        try:
            kwok.wait_until(lambda: "Wave 1: " in output.read_text() or None, 180, "wave 1")
            blocking_pod(engine, "latecomer", label, names[0])
            go.write_text("go")
            kwok.wait_until(lambda: output.read_text().count(progress) >= 2 or None, 180, "two progress lines")
            k8s.CoreV1Api(api).delete_namespaced_pod("latecomer", namespace, grace_period_seconds=0)
            assert proc.wait(timeout=300) == 0, output.read_text()[-5000:]
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    out = output.read_text()
    lines = [line for line in out.splitlines() if progress in line]
    assert all(f"pod {namespace}/latecomer on {names[0]}" in line for line in lines), lines
    # the lines come from the second node's admit step, before it is admitted (in wave 2, or in wave 1 when its
    # admission comes within rolling_gather_seconds of the first node's, while that one is being released)
    assert all("Wait until the scheduler has made the node ready" in line for line in lines), lines
    admissions = [out.index(f"{name} admitted") for name in names[1:3]]  # either node may go first
    assert min(admissions) < out.index(progress) < max(admissions)
    assert maintained(log) == dict.fromkeys(names[1:3], 1)
    assert {n: r["state"] for n, r in record(engine, "later").items()} == dict.fromkeys(names[1:3], "done")
