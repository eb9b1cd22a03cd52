"""playbooks/rolling_maintenance.yml through more admission batches in one run than the wave plays once held (100):
102 nodes, one at a time. The maintenance only leaves a file per node, so what is timed is the run's own steps.

The longest test file (about 3 minutes on a quiet machine, much more on a busy one): its name sorts it first, so
that pytest-xdist starts it first and the other files fill the other workers meanwhile."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster import kwok
from integration.test_rolling import REQUESTOR, maintained, run
from kubernetes import client as k8s
from support.ansible_cli import BIN

pytestmark = pytest.mark.integration

NODES = 102


@pytest.fixture
def many_nodes(
    cluster: Any, api: k8s.ApiClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, list[str]]]:
    """(label selector, names) of the nodes."""
    from integration.test_crds import run_role

    run_role(cluster, tmp_path_factory.mktemp("waves-crds"), {})
    label = f"waves-{uuid.uuid4().hex[:6]}"
    names = kwok.add_nodes(api, NODES, prefix=label, labels={"waves": label})
    try:
        kwok.wait_nodes_ready(api, names, timeout=300)
        yield f"waves={label}", names
    finally:
        kwok.delete_nodes(api, names, timeout=300)


def test_more_waves_than_a_hundred_in_one_run(
    cluster: Any, namespace: str, many_nodes: tuple[str, list[str]], tmp_path: Path
) -> None:
    selector, names = many_nodes
    log = tmp_path / "maintained"
    log.mkdir()
    tasks = tmp_path / "maintenance.yml"
    tasks.write_text(
        json.dumps(
            [
                {
                    "name": "Log the maintenance",
                    "ansible.builtin.tempfile": {"path": str(log), "prefix": "{{ nodeops_node_name }}."},
                    "delegate_to": "localhost",
                }
            ]
        )
    )
    variables = {
        "rolling_run_id": "many-waves",
        "rolling_requestor": REQUESTOR,
        "rolling_node_selector": selector,
        "rolling_maintenance_tasks": str(tasks),
        "rolling_namespace": namespace,
        "rolling_config_namespace": namespace,
        "rolling_max_parallel_operations": 1,
        "rolling_kubeconfig": str(cluster.kubeconfig),
        "rolling_gather_seconds": 0,
        "rolling_poll_interval": 0.2,
        "rolling_drain_spec": {"force": True, "timeout_seconds": 60},
        "rolling_wave_timeout": 120,
        "rolling_node_ready_timeout": 60,
    }
    cmd = [str(BIN / "ansible-playbook"), "nodeops.maintenance.rolling_maintenance", "-e", json.dumps(variables)]
    out = run(cmd, timeout=3000)
    assert maintained(log) == dict.fromkeys(names, 1)
    assert f"Wave {NODES}:" in out and f"Wave {NODES + 1}:" not in out
    assert "run it again" not in out
