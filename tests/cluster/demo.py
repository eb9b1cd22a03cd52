"""`make demo`: a rolling maintenance of 24 simulated nodes on the local control plane, start to finish.

1. starts the control plane (``launcher.py``) in ``.build/demo``, with 24 kwok nodes;
2. runs a few Deployments and a StatefulSet with a PodDisruptionBudget (maxUnavailable 1) on them;
3. installs the CRDs with ``ansible-playbook nodeops.maintenance.install``;
4. runs ``ansible-playbook nodeops.maintenance.rolling_maintenance`` with maxParallelOperations 4,
   maxUnavailable "25%" and the simulated reboot, showing each wave as it starts and ends, and the summary;
5. prints what a watch on the cluster saw (the most requests in progress and nodes unavailable at once),
   and stops the control plane.

The whole playbook output is kept in ``.build/demo/rolling.log``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

import conftest as _collection_path  # noqa: E402,F401 - makes this checkout the nodeops.maintenance collection
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.client import Client  # noqa: E402
from kubernetes import client as k8s  # noqa: E402
from support.monitor import Monitor  # noqa: E402

from cluster import kwok  # noqa: E402
from cluster.launcher import Cluster, _build_bindir  # noqa: E402

NODES = 24
NAMESPACE = "demo"
IMAGE = "registry.invalid/demo:1"
BIN = Path(sys.executable).parent
# What the demo prints of the playbook's output: the waves, the summary, failures and the recap.
SHOWN = re.compile(r'"msg": "Wave |^TASK \[Show the summary\]|^PLAY RECAP|fatal:|FAILED!|^\S+\s+: ok=')


def say(text: str) -> None:
    print(f"[demo {time.strftime('%H:%M:%S')}] {text}", flush=True)


def workloads(api: k8s.ApiClient) -> int:
    apps, core, policy = k8s.AppsV1Api(api), k8s.CoreV1Api(api), k8s.PolicyV1Api(api)
    core.create_namespace({"metadata": {"name": NAMESPACE}})
    kwok.wait_until(
        lambda: core.list_namespaced_service_account(NAMESPACE, field_selector="metadata.name=default").items or None,
        60,
        "the demo namespace's default ServiceAccount",
    )

    def template(app: str) -> dict[str, Any]:
        return {
            "metadata": {"labels": {"app": app}},
            "spec": {
                "nodeSelector": {"demo": "fleet"},
                "terminationGracePeriodSeconds": 0,
                "containers": [{"name": app, "image": IMAGE}],
            },
        }

    replicas = {"web": 24, "api": 12, "worker": 12}
    for app, count in replicas.items():
        body = {
            "metadata": {"name": app},
            "spec": {"replicas": count, "selector": {"matchLabels": {"app": app}}, "template": template(app)},
        }
        apps.create_namespaced_deployment(NAMESPACE, body)
    statefulset = {
        "metadata": {"name": "db"},
        "spec": {
            "replicas": 3,
            "serviceName": "db",
            "selector": {"matchLabels": {"app": "db"}},
            "template": template("db"),
        },
    }
    apps.create_namespaced_stateful_set(NAMESPACE, statefulset)
    pdb = {"metadata": {"name": "db"}, "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "db"}}}}
    policy.create_namespaced_pod_disruption_budget(NAMESPACE, pdb)
    total = sum(replicas.values()) + 3

    def running() -> bool | None:
        pods = core.list_namespaced_pod(NAMESPACE).items
        return sum(p.status.phase == "Running" for p in pods) >= total or None

    kwok.wait_until(running, 180, f"{total} pods Running")
    return total


def playbook(name: str, cluster: Cluster, extra: dict[str, Any], log: Path | None = None) -> int:
    env = {
        **os.environ,
        "K8S_AUTH_KUBECONFIG": str(cluster.kubeconfig),
        "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.default",
        "ANSIBLE_DISPLAY_SKIPPED_HOSTS": "false",
        "ANSIBLE_LOCALHOST_WARNING": "false",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false",
        "ANSIBLE_HOST_KEY_CHECKING": "false",
        "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
        "ANSIBLE_FORCE_COLOR": "false",
    }
    cmd = [str(BIN / "ansible-playbook"), f"nodeops.maintenance.{name}", "-f", "8", "-e", json.dumps(extra)]
    if log is None:
        return subprocess.run(cmd, env=env, check=False, stdout=subprocess.DEVNULL).returncode
    say("$ ansible-playbook nodeops.maintenance.rolling_maintenance -f 8 -e '" + json.dumps(extra) + "'")
    showing = False
    with log.open("w") as out, subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            out.write(line)
            if line.startswith("TASK [Show the summary]"):
                showing = True
            elif line.startswith("TASK [") or line.startswith("PLAY RECAP"):
                showing = False
            if showing or SHOWN.search(line):
                print("    " + line.rstrip().replace('"msg": ', ""), flush=True)
    return proc.returncode


def main() -> int:
    began = time.monotonic()
    workdir = ROOT / ".build" / "demo"
    say("control plane: building or reusing the binaries")
    cluster = Cluster(workdir, _build_bindir()).start()
    api = kwok.api_client(cluster.kubeconfig)
    try:
        say(f"Kubernetes {cluster.k8s_version} up in {cluster.startup_seconds:.0f}s; adding {NODES} kwok nodes")
        nodes = kwok.add_nodes(api, NODES, prefix="gpu", labels={"demo": "fleet"}, capacity={"nvidia.com/gpu": "8"})
        kwok.wait_nodes_ready(api, nodes, timeout=120)
        pods = workloads(api)
        say(f"{pods} pods Running: Deployments web, api, worker; StatefulSet db with a PDB (maxUnavailable 1)")
        if playbook("install", cluster, {}) != 0:
            say("the install playbook failed")
            return 1
        say("CRDs and the default MaintenanceOperatorConfig installed (nodeops.maintenance.install)")
        monitor = Monitor(Client.from_params({"kubeconfig": str(cluster.kubeconfig)}, pool_size=4), "default")
        monitor.start()
        log = workdir / "rolling.log"
        extra = {
            "rolling_run_id": f"demo-{time.strftime('%Y%m%d-%H%M%S')}",
            "rolling_node_selector": "demo=fleet",
            "rolling_max_parallel_operations": 4,
            "rolling_max_unavailable": "25%",
            "rolling_maintenance_tasks": "maintenance/simulated_reboot.yml",
            "rolling_gather_seconds": 5,
        }
        try:
            rc = playbook("rolling_maintenance", cluster, extra, log)
        finally:
            monitor.stop()
        say(
            f"a watch on the cluster saw at most {monitor.max_in_progress} requests in progress (limit 4) and "
            f"{monitor.max_down} of {NODES} nodes unavailable (limit 25% = {NODES // 4})"
        )
        cordoned = [n.metadata.name for n in k8s.CoreV1Api(api).list_node().items if n.spec.unschedulable]
        say(f"nodes left cordoned: {', '.join(cordoned) or 'none'}; full playbook output: {log}")
        say(f"{'done' if rc == 0 else f'the playbook failed (rc {rc})'} in {time.monotonic() - began:.0f}s")
        return rc
    finally:
        say("stopping the control plane")
        cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
