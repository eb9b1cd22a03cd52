"""Four rolling runs at once over disjoint parts of the fleet, as an AWX sliced job template (or jobs on several
execution nodes) runs them: each slice its own run ID and its own nodes, one MaintenanceOperatorConfig for all.
The NodeMaintenance objects and the reconcile Lease are what the slices share, so the cluster-wide limits hold
across them; a watch-based monitor checks it."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster import kwok
from integration.test_maintenance_acceptance import api_client
from integration.test_rolling import REQUESTOR, cordoned, env, maintained, our_requests
from kubernetes import client as k8s
from support.ansible_cli import BIN
from support.monitor import Monitor

pytestmark = pytest.mark.integration

SLICES = 4
PER_SLICE = 3
MAX_PARALLEL = 2
MAX_UNAVAILABLE = 3
REBOOT = Path(__file__).resolve().parents[2] / "playbooks" / "maintenance" / "simulated_reboot.yml"


@pytest.fixture
def fleet(cluster: Any, api: k8s.ApiClient, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    from integration.test_crds import run_role

    run_role(cluster, tmp_path_factory.mktemp("slices-crds"), {})
    names = kwok.add_nodes(api, SLICES * PER_SLICE, prefix=f"slice-{uuid.uuid4().hex[:6]}")
    try:
        kwok.wait_nodes_ready(api, names, timeout=120)
        yield names
    finally:
        kwok.delete_nodes(api, names, timeout=120)


def test_four_slices_at_once_share_the_cluster_wide_limits(
    cluster: Any, api: k8s.ApiClient, namespace: str, fleet: list[str], tmp_path: Path
) -> None:
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
                },
                {"name": "Simulated reboot", "ansible.builtin.include_tasks": str(REBOOT)},
            ]
        )
    )
    # the limits once, as the install playbook or an administrator sets them; the slices leave them alone
    k8s.CustomObjectsApi(api).create_namespaced_custom_object(
        "maintenance.nvidia.com",
        "v1alpha1",
        namespace,
        "maintenanceoperatorconfigs",
        {
            "apiVersion": "maintenance.nvidia.com/v1alpha1",
            "kind": "MaintenanceOperatorConfig",
            "metadata": {"name": "default"},
            "spec": {"maxParallelOperations": MAX_PARALLEL, "maxUnavailable": MAX_UNAVAILABLE},
        },
    )
    slices = [fleet[i * PER_SLICE : (i + 1) * PER_SLICE] for i in range(SLICES)]
    watcher = Monitor(api_client(cluster, 4), namespace)
    watcher.start()
    procs: list[tuple[subprocess.Popen[str], Path]] = []
    try:
        for index, nodes in enumerate(slices):
            variables = {
                "rolling_run_id": f"chg-1-slice-{index}",
                "rolling_requestor": REQUESTOR,
                "rolling_node_names": nodes,
                "rolling_maintenance_tasks": str(tasks),
                "rolling_namespace": namespace,
                "rolling_config_namespace": namespace,
                "rolling_kubeconfig": str(cluster.kubeconfig),
                "rolling_gather_seconds": 2,
                "rolling_simulated_reboot_seconds": 2,
                "rolling_drain_spec": {"force": True, "timeout_seconds": 60},
                "rolling_wave_timeout": 600,  # a slice waits while the others hold the slots
                "rolling_node_ready_timeout": 120,
            }
            output = tmp_path / f"slice-{index}.out"
            cmd = [str(BIN / "ansible-playbook"), "nodeops.maintenance.rolling_maintenance"]
            cmd += ["-e", json.dumps(variables)]
            with output.open("w") as out:
                procs.append(
                    (subprocess.Popen(cmd, env=env(), stdout=out, stderr=subprocess.STDOUT, text=True), output)
                )
        for proc, output in procs:
            assert proc.wait(timeout=1800) == 0, output.read_text()[-6000:]
    finally:
        for proc, _output in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=60)
        watcher.stop()
    assert watcher.errors == []
    assert 0 < watcher.max_in_progress <= MAX_PARALLEL, watcher.max_in_progress
    assert watcher.max_down <= MAX_UNAVAILABLE, watcher.max_down
    assert maintained(log) == dict.fromkeys(fleet, 1)
    assert our_requests(api, namespace) == []
    assert cordoned(api, fleet) == []
