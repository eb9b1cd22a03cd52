"""The steps admit and release of rolling_maintenance on the real cluster, as the one-play flow uses them: a
start that records the targets and requests none, then one play whose hosts each drive their own node (admit,
the maintenance, release) with ``host_pinned``, while a watch checks the limits. Each host's steps update the
run's one record at the same time as the others', and run on the controller: the hosts cannot be reached."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from integration import test_rolling as rolling_tests
from integration.test_maintenance_acceptance import api_client
from integration.test_rolling import (
    BUILTIN_ONLY,
    REQUESTOR,
    cordoned,
    env,
    maintained,
    our_requests,
    record,
    tasks_file,
    unique,
)
from support import one_play
from support.ansible_cli import BIN
from support.engines import Engine
from support.monitor import Monitor

pytestmark = pytest.mark.integration

# the fixtures of test_rolling.py (a fleet of six labelled nodes with pods; the CRDs it needs)
crds = rolling_tests.crds
fleet = rolling_tests.fleet

FORKS = 3  # hosts (and so requests) at once: more than maxParallelOperations, fewer than the nodes


def playbook(engine: Engine, tmp_path: Path, selector: str, tasks: Path, run_id: str) -> Path:
    steps = {
        "run_id": unique(engine, run_id),
        "requestor": REQUESTOR,
        "namespace": engine.namespace,
        "config_namespace": engine.config_namespace,
        "engine": engine.name,
        "drain_spec": {"force": True, "timeout_seconds": 60},
        "gather_seconds": 5,
        "wave_timeout": 120,
        "node_ready_timeout": 60,
        # one failed node of six must not stop the others: with the default 0 %, a node admitted after the
        # failure would not be (the budget is checked in each admission's write), one admitted before would
        "max_fail_percentage": 50,
    }
    # a host no one can reach: the steps of each node run on the controller, and the maintenance tasks of this
    # test are delegated to it
    unreachable = {"ansible_host": "192.0.2.1", "ansible_connection": "ssh", "ansible_ssh_timeout": 1}
    path = tmp_path / "one_play.yml"
    path.write_text(
        json.dumps(
            one_play.plays(
                steps,
                {"node_selector": selector},
                str(tasks),
                limits={"maxParallelOperations": 2, "maxUnavailable": 3},
                host_vars=unreachable,
                play_vars={"rolling_simulated_reboot_seconds": 2, "rolling_node_ready_timeout": 60},
            )
        )
    )
    return path


def play(engine: Engine, path: Path) -> str:
    """ansible-playbook on ``path`` with FORKS forks; its output (the run must pass)."""
    environment = {**env(), "K8S_AUTH_KUBECONFIG": str(engine.cluster.kubeconfig)}
    cmd = [str(BIN / "ansible-playbook"), "-f", str(FORKS), str(path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=environment, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    return proc.stdout


@BUILTIN_ONLY
def test_hosts_that_drive_their_own_nodes_maintain_each_once_within_the_limits(
    engine: Engine,
    fleet: tuple[str, list[str]],
    tmp_path: Path,
) -> None:
    api, namespace = engine.api, engine.namespace
    selector, names = fleet
    tasks, log = tasks_file(tmp_path, fail_on=names[4])
    path = playbook(engine, tmp_path, selector, tasks, "per-node")
    watcher = Monitor(api_client(engine.cluster, 4), namespace)
    watcher.start()
    try:
        out = play(engine, path)
    finally:
        watcher.stop()
    assert watcher.errors == []
    assert 0 < watcher.max_in_progress <= 2, watcher.max_in_progress
    assert watcher.max_down <= 3, watcher.max_down
    assert watcher.max_requests <= FORKS, watcher.max_requests  # only the hosts at work hold a request
    assert maintained(log) == dict.fromkeys(names, 1)
    state = record(engine, "per-node")
    broken = names[4]
    assert {n: r["state"] for n, r in state.items()} == {n: "failed" if n == broken else "done" for n in names}
    assert state[broken]["message"] == "firmware update failed"
    batches = sorted({r["wave"] for r in state.values()})
    assert batches == list(range(1, len(batches) + 1)), batches
    for node, r in state.items():
        assert r["admitted"] <= r["ready"] <= r["started"] <= r["finished"], r
        if node != broken:
            assert r["started"] <= r["began"] <= r["ended"] <= r["finished"] <= r["back"], r
    assert [o["spec"]["nodeName"] for o in our_requests(api, namespace)] == [broken]  # cordoned for a person
    assert cordoned(api, names) == [broken]
    assert "failed=0" in out.replace(f"{broken} ", "")  # every other host went through

    again = play(engine, path)
    assert maintained(log) == dict.fromkeys(names, 1)
    assert "changed=0" in again
