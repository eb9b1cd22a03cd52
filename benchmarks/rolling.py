"""Rolling maintenance of 200 simulated nodes with 10 pods each, maxParallelOperations 20: where the time goes.

    .venv/bin/python benchmarks/rolling.py [--nodes 200] [--pods-per-node 10] [--mpo 20] [--reboot 2]

Not part of ``make test``. Starts its own control plane (``tests/cluster``) in ``.build/bench-rolling``, adds the
nodes and their pods (bare pods bound to each node, so the drain needs ``force``), installs the CRDs, and runs
``ansible-playbook nodeops.maintenance.rolling_maintenance`` with the simulated reboot as the maintenance and as
many forks as maxParallelOperations. It then reads the run's record (the ConfigMap the playbook keeps) and prints
per wave: its nodes, the drain (the slowest of the wave, from admission to Ready), the maintenance (the slowest
node's tasks), the release, and the overhead: the wave's share of the total beyond its drain and its
maintenance (release, waiting for the next admission, Ansible's own task handling). Target: at most
2 s of overhead per wave.

The baseline, measured in the same run: the sum over the waves of the drain and the maintenance alone, which a
perfect driver would need; the script prints the total against it.

``--engine operator`` runs the same maintenance with ``rolling_engine: operator`` against the real NVIDIA
Maintenance Operator (built from ``$NODEOPS_NVIDIA_OPERATOR_SRC``, see ``tests/cluster/nvidia_operator.py``);
``--engine both`` (the default when that variable is set) runs the built-in engine first, then starts the operator
on the same cluster, gives the nodes their pods again and runs the operator's, and prints both and their ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import conftest as _collection_path  # noqa: E402,F401 - makes this checkout the nodeops.maintenance collection
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.maintenance.rolling import STATE_KEY, record_name  # noqa: E402
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.node import rfc3339  # noqa: E402
from cluster import kwok, nvidia_operator  # noqa: E402
from cluster.launcher import Cluster, _build_bindir  # noqa: E402
from kubernetes import client as k8s  # noqa: E402

BIN = Path(sys.executable).parent
NAMESPACE = "bench"
CONFIG_NAMESPACE = "nodeops-maintenance"


def playbook(cluster: Cluster, name: str, extra: dict[str, Any], forks: int, log: Path) -> float:
    env = {
        **os.environ,
        "K8S_AUTH_KUBECONFIG": str(cluster.kubeconfig),
        "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.default",
        "ANSIBLE_DISPLAY_SKIPPED_HOSTS": "false",
        "ANSIBLE_HOST_KEY_CHECKING": "false",
        "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
        "ANSIBLE_LOCALHOST_WARNING": "false",
        # per-task times at the end of the log, summed by task name below (ansible.posix comes with `ansible`)
        "ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.profile_tasks",
        "PROFILE_TASKS_TASK_OUTPUT_LIMIT": "100000",
        "PROFILE_TASKS_SUMMARY_ONLY": "true",
    }
    cmd = [str(BIN / "ansible-playbook"), f"nodeops.maintenance.{name}", "-f", str(forks), "-e", json.dumps(extra)]
    began = time.monotonic()
    with log.open("w") as out:
        rc = subprocess.run(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, check=False).returncode
    if rc != 0:
        raise SystemExit(f"{name} failed (rc {rc}); see {log}")
    return time.monotonic() - began


def add_pods(api: k8s.ApiClient, nodes: list[str], per_node: int) -> None:
    core = k8s.CoreV1Api(api)

    def create(node: str) -> None:
        for index in range(per_node):
            body = {
                "metadata": {"name": f"{node}-{index}", "labels": {"app": "bench"}},
                "spec": {
                    "nodeName": node,
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "c", "image": "registry.invalid/bench:1"}],
                },
            }
            core.create_namespaced_pod(NAMESPACE, body)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(create, nodes))
    total = len(nodes) * per_node
    kwok.wait_until(
        lambda: sum(p.status.phase == "Running" for p in core.list_namespaced_pod(NAMESPACE).items) >= total or None,
        600,
        f"{total} pods Running",
    )


def task_times(log: Path) -> list[tuple[str, float, int]]:
    """The profile_tasks summary of a playbook log, summed by task name: (name, seconds, times run)."""
    pattern = re.compile(r"^(.*?) -+ (\d+\.\d+)s$")
    totals: dict[str, list[float]] = {}
    for line in log.read_text().splitlines():
        match = pattern.match(line)
        if match:
            totals.setdefault(match.group(1).strip(), []).append(float(match.group(2)))
    return sorted(((name, sum(v), len(v)) for name, v in totals.items()), key=lambda t: -t[1])


def waves(records: list[dict[str, Any]], started: float, ended: float) -> list[dict[str, Any]]:
    """Per wave: start, drain (of its own nodes), maintenance, release, and the overhead of its cycle."""
    t = {
        key: {r["node"]: rfc3339.to_epoch(r[key]) for r in records}
        for key in ("admitted", "ready", "started", "began", "ended", "finished", "back")
    }
    by_wave: dict[int, list[str]] = {}
    for r in records:
        by_wave.setdefault(r["wave"], []).append(r["node"])
    out = []
    for number in sorted(by_wave):
        nodes = by_wave[number]
        out.append(
            {
                "wave": number,
                "nodes": len(nodes),
                "start": min(t["started"][n] for n in nodes),
                "drain": max(t["ready"][n] - t["admitted"][n] for n in nodes),
                "maintenance": max(t["ended"][n] - t["began"][n] for n in nodes),
                "release": max(t["back"][n] for n in nodes) - max(t["finished"][n] for n in nodes),
                "first_admitted": min(t["admitted"][n] for n in nodes),
            }
        )
    # The cycle of wave i: from its start to the next wave's start (the end of the run for the last one). It holds
    # wave i's maintenance and the next wave's drain; the rest is overhead. The first wave's own drain and the time
    # before it (requests, the first pass) are counted as the overhead of a wave 0.
    for index, wave in enumerate(out):
        nxt = out[index + 1] if index + 1 < len(out) else None
        end = nxt["start"] if nxt else ended
        wave["cycle"] = end - wave["start"]
        wave["overhead"] = wave["cycle"] - wave["maintenance"] - (nxt["drain"] if nxt else 0.0)
    if out:
        out[0]["lead_in"] = out[0]["start"] - started - out[0]["drain"]
    return out


def run_engine(
    cluster: Cluster, api: k8s.ApiClient, engine: str, nodes: list[str], args: argparse.Namespace, workdir: Path
) -> dict[str, Any]:
    """One rolling maintenance of every node with ``engine``; prints its waves and returns its figures."""
    add_pods(api, nodes, args.pods_per_node)
    run_id = f"bench-{engine}-{int(time.time())}"
    extra = {
        "rolling_run_id": run_id,
        "rolling_engine": engine,
        "rolling_node_selector": "bench=rolling",
        "rolling_max_parallel_operations": args.mpo,
        "rolling_max_unavailable": args.mpo,
        "rolling_maintenance_tasks": "maintenance/simulated_reboot.yml",
        "rolling_simulated_reboot_seconds": args.reboot,
        "rolling_drain_spec": {"force": True, "timeout_seconds": 300},
        "rolling_gather_seconds": 5,
    }
    log = workdir / f"rolling-{engine}.log"
    began = time.time()
    total = playbook(cluster, "rolling_maintenance", extra, args.mpo, log)
    ended = time.time()
    cm = k8s.CoreV1Api(api).read_namespaced_config_map(record_name(run_id), CONFIG_NAMESPACE)
    records = json.loads(cm.data[STATE_KEY])
    assert all(r["state"] == "done" for r in records), "not every node is done"
    table = waves(records, began, ended)
    print(f"\n== engine {engine}")
    print(f"{'wave':>4} {'nodes':>5} {'drain':>7} {'maint.':>7} {'release':>7} {'cycle':>7} {'overhead':>8}")
    for w in table:
        print(
            f"{w['wave']:>4} {w['nodes']:>5} {w['drain']:>6.1f}s {w['maintenance']:>6.1f}s {w['release']:>6.1f}s "
            f"{w['cycle']:>6.1f}s {w['overhead']:>7.1f}s"
        )
    overheads = [w["overhead"] for w in table]
    ideal = sum(w["drain"] + w["maintenance"] for w in table)
    print(f"\nlead-in (start of ansible-playbook to the first wave, beyond its drain): {table[0]['lead_in']:.1f}s")
    print(
        f"overhead per wave: mean {statistics.mean(overheads):.2f}s, median {statistics.median(overheads):.2f}s, "
        f"max {max(overheads):.2f}s (target: at most 2 s)"
    )
    print(
        f"total {total:.1f}s for {len(table)} waves; drain + maintenance alone (baseline) {ideal:.1f}s; "
        f"ratio {total / ideal:.2f}x"
    )
    print("\nwhere the playbook's time goes, by task (profile_tasks; a task's time runs from its start on the")
    print("first host to its end on the last, so tasks that run beside each other overlap):")
    for name, seconds, count in task_times(log)[:15]:
        print(f"  {seconds:7.1f}s  {count:4d}x  {name}")
    print(f"playbook output: {log}")
    return {"total": total, "waves": len(table), "table": table}


def wait_pods_gone(api: k8s.ApiClient) -> None:
    """The bare pods the last run drained are deleted before the next run makes them again."""
    core = k8s.CoreV1Api(api)
    kwok.wait_until(lambda: not core.list_namespaced_pod(NAMESPACE).items or None, 600, "the drained pods gone")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--pods-per-node", type=int, default=10)
    parser.add_argument("--mpo", type=int, default=20, help="maxParallelOperations (and forks)")
    parser.add_argument("--reboot", type=float, default=2, help="seconds of each simulated reboot")
    parser.add_argument(
        "--engine",
        choices=("builtin", "operator", "both"),
        help="default: both when $NODEOPS_NVIDIA_OPERATOR_SRC is set, else builtin",
    )
    args = parser.parse_args()
    engines = {"builtin": ["builtin"], "operator": ["operator"], "both": ["builtin", "operator"]}[
        args.engine or ("both" if nvidia_operator.source() else "builtin")
    ]
    operator_binary = nvidia_operator.build() if "operator" in engines else None

    workdir = ROOT / ".build" / "bench-rolling"
    cluster = Cluster(workdir, _build_bindir()).start()
    api = kwok.api_client(cluster.kubeconfig)
    try:
        print(f"Kubernetes {cluster.k8s_version}; {args.nodes} nodes x {args.pods_per_node} pods, mpo {args.mpo}")
        k8s.CoreV1Api(api).create_namespace({"metadata": {"name": NAMESPACE}})
        nodes = kwok.add_nodes(api, args.nodes, prefix="bench", labels={"bench": "rolling"})
        kwok.wait_nodes_ready(api, nodes, timeout=300)
        kwok.wait_until(
            lambda: k8s.CoreV1Api(api).list_namespaced_service_account(NAMESPACE).items or None, 60, "ServiceAccount"
        )
        playbook(cluster, "install", {}, 5, workdir / "install.log")
        results: dict[str, dict[str, Any]] = {}
        for engine in engines:
            if engine == "operator":
                assert operator_binary is not None
                wait_pods_gone(api)
                cluster.start_nvidia_operator(operator_binary)
            results[engine] = run_engine(cluster, api, engine, nodes, args, workdir)
        if len(results) == 2:
            builtin, operator = results["builtin"], results["operator"]
            print("\n== both engines, the same maintenance of the same nodes")
            print(f"{'wave':>4} {'builtin cycle':>14} {'operator cycle':>15}")
            for index in range(max(builtin["waves"], operator["waves"])):
                cells = [
                    f"{r['table'][index]['cycle']:>13.1f}s" if index < r["waves"] else f"{'-':>14}"
                    for r in (builtin, operator)
                ]
                print(f"{index + 1:>4} {cells[0]} {cells[1]:>15}")
            print(
                f"total: builtin {builtin['total']:.1f}s, operator {operator['total']:.1f}s; "
                f"the built-in engine is {operator['total'] / builtin['total']:.2f}x faster end to end (goal: 3x)"
            )
        return 0
    finally:
        cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
