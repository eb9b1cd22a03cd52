"""Drain a node running 100 pods three ways, on the real test control plane, and compare wall times.

1. ``nodeops.maintenance.drain`` through the ``ansible`` command (this checkout, project venv);
2. ``kubectl drain`` built from the same Kubernetes release as the control plane;
3. ``kubernetes.core.k8s_drain`` from the ``ansible`` package on PyPI (installed into
   ``.build/bench-venv``; the version of kubernetes.core is printed). It is run with
   ``delete_options.wait_timeout`` so that it, too, returns only once the pods are gone
   (without it, it returns right after its last eviction call), and ``wait_sleep: 1``.

Every way drains its own fresh node (same labels, same Deployment of ``--pods`` pods, all Running).
Each wall time covers the whole command, start-up included, from launch to "every pod is gone".

    .venv/bin/python benchmarks/drain.py [--pods 100] [--rounds 1]

Not a test, and not part of ``make test``. Needs the control-plane binaries (``make binaries``) and,
for the third way, network access to PyPI the first time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import conftest as _collection_path  # noqa: E402,F401 - makes this checkout the nodeops.maintenance collection
from cluster import kwok  # noqa: E402
from cluster.build import build  # noqa: E402
from cluster.launcher import Cluster  # noqa: E402
from kubernetes import client as k8s  # noqa: E402
from support.ansible_cli import clean_env  # noqa: E402

BENCH_VENV = ROOT / ".build" / "bench-venv"
WORKDIR = ROOT / ".build" / "bench-cluster"
ANSIBLE_SPEC = "ansible>=12,<13"  # the ansible package that goes with ansible-core 2.19


def ensure_bench_venv() -> Path:
    python = BENCH_VENV / "bin" / "python"
    if not (BENCH_VENV / "bin" / "ansible").exists():
        print(f"[bench] installing {ANSIBLE_SPEC} and kubernetes into {BENCH_VENV}", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(BENCH_VENV)], check=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", ANSIBLE_SPEC, "kubernetes"],
            check=True,
        )
    return python


def bench_versions(python: Path) -> dict[str, str]:
    code = (
        "import json, pathlib, ansible_collections, importlib.metadata as m\n"
        "root = pathlib.Path(ansible_collections.__path__[0])\n"
        "manifest = json.loads((root / 'kubernetes/core/MANIFEST.json').read_text())\n"
        "print(json.dumps({'ansible': m.version('ansible'), 'ansible-core': m.version('ansible-core'),\n"
        "  'kubernetes.core': manifest['collection_info']['version'], 'kubernetes': m.version('kubernetes')}))\n"
    )
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def pods_on(core: k8s.CoreV1Api, node: str) -> list[k8s.V1Pod]:
    return core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items


def populate(api: k8s.ApiClient, namespace: str, nodes: list[str], pods: int) -> None:
    """One Deployment of ``pods`` replicas pinned to each node; returns once all are Running."""
    apps, core = k8s.AppsV1Api(api), k8s.CoreV1Api(api)
    for node in nodes:
        labels = {"app": f"bench-{node}"}
        apps.create_namespaced_deployment(
            namespace,
            {
                "metadata": {"name": f"bench-{node}"},
                "spec": {
                    "replicas": pods,
                    "selector": {"matchLabels": labels},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {
                            "nodeSelector": {"kubernetes.io/hostname": node},
                            "containers": [{"name": "app", "image": "registry.invalid/app:1"}],
                        },
                    },
                },
            },
        )
    for node in nodes:

        def running(node: str = node) -> bool:
            items = pods_on(core, node)
            return sum(1 for p in items if p.status.phase == "Running") >= pods

        kwok.wait_until(running, 300, f"{pods} pods Running on {node}")


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900, check=False)
    return time.monotonic() - started, proc


def check_drained(core: k8s.CoreV1Api, node: str, how: str, proc: subprocess.CompletedProcess[str]) -> None:
    left = [p.metadata.name for p in pods_on(core, node) if not p.metadata.deletion_timestamp]
    if proc.returncode != 0 or left:
        raise SystemExit(
            f"[bench] {how} did not drain {node}: rc={proc.returncode}, {len(left)} pods left\n"
            f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
        )


def run_round(cluster: Cluster, api: k8s.ApiClient, bench_python: Path, pods: int) -> dict[str, float]:
    core = k8s.CoreV1Api(api)
    tag = uuid.uuid4().hex[:6]
    nodes = kwok.add_nodes(api, 3, prefix=f"bench-{tag}", labels={"bench": tag})
    namespace = f"bench-{tag}"
    core.create_namespace({"metadata": {"name": namespace}})
    try:
        kwok.wait_nodes_ready(api, nodes, timeout=60)
        populate(api, namespace, nodes, pods)
        kubeconfig = str(cluster.kubeconfig)
        times: dict[str, float] = {}

        ours_env = clean_env()
        args = json.dumps({"name": nodes[0], "kubeconfig": kubeconfig})
        cmd = [str(Path(sys.executable).parent / "ansible"), "localhost", "-c", "local", "-i", "localhost,"]
        times["nodeops.maintenance.drain"], proc = timed(
            [*cmd, "-m", "nodeops.maintenance.drain", "-a", args], ours_env
        )
        check_drained(core, nodes[0], "nodeops.maintenance.drain", proc)
        line = next((x for x in proc.stdout.splitlines() if x.startswith("{")), "{}")
        engine = json.loads(line).get("result", {}).get("seconds")
        if engine is not None:
            print(f"[bench] nodeops.maintenance.drain: {engine:.2f}s of it inside the module (cordon, evict, wait)")

        kubectl = [str(cluster.bindir / "kubectl"), "--kubeconfig", kubeconfig, "drain", nodes[1]]
        kubectl += ["--ignore-daemonsets", "--delete-emptydir-data", "--timeout=300s"]
        times["kubectl drain"], proc = timed(kubectl, dict(os.environ))
        check_drained(core, nodes[1], "kubectl drain", proc)

        bench_env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "K8S_AUTH_"))}
        bench_env.update(
            {
                "ANSIBLE_PYTHON_INTERPRETER": str(bench_python),
                "ANSIBLE_LOCALHOST_WARNING": "0",
                "ANSIBLE_INVENTORY_UNPARSED_WARNING": "0",
            }
        )
        args = json.dumps(
            {
                "name": nodes[2],
                "kubeconfig": kubeconfig,
                "delete_options": {"wait_timeout": 300, "wait_sleep": 1},
            }
        )
        cmd = [str(BENCH_VENV / "bin" / "ansible"), "localhost", "-c", "local", "-i", "localhost,"]
        times["kubernetes.core.k8s_drain"], proc = timed(
            [*cmd, "-m", "kubernetes.core.k8s_drain", "-a", args], bench_env
        )
        check_drained(core, nodes[2], "kubernetes.core.k8s_drain", proc)
        return times
    finally:
        core.delete_namespace(namespace)
        kwok.delete_nodes(api, nodes, wait=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=100, help="pods on each drained node (default 100)")
    parser.add_argument("--rounds", type=int, default=1, help="repeat on fresh nodes; medians are printed")
    args = parser.parse_args()

    bench_python = ensure_bench_venv()
    versions = bench_versions(bench_python)
    cluster = Cluster(WORKDIR, build()).start()
    try:
        print(f"[bench] Kubernetes {cluster.k8s_version}; kubectl from {cluster.bindir}")
        print(
            f"[bench] kubernetes.core {versions['kubernetes.core']} (ansible {versions['ansible']}, "
            f"ansible-core {versions['ansible-core']}, kubernetes client {versions['kubernetes']})"
        )
        api = kwok.api_client(cluster.kubeconfig_token)
        results: dict[str, list[float]] = {}
        for index in range(args.rounds):
            times = run_round(cluster, api, bench_python, args.pods)
            print(f"[bench] round {index + 1}: " + ", ".join(f"{k} {v:.2f}s" for k, v in times.items()), flush=True)
            for key, value in times.items():
                results.setdefault(key, []).append(value)
    finally:
        cluster.stop()

    median = {key: statistics.median(values) for key, values in results.items()}
    ours, kubectl, anchor = (
        median["nodeops.maintenance.drain"],
        median["kubectl drain"],
        median["kubernetes.core.k8s_drain"],
    )
    print(f"\nDrain of a node with {args.pods} pods (median of {args.rounds} round(s), wall time incl. start-up):")
    for key, value in median.items():
        print(f"  {key:28} {value:8.2f} s")
    print(f"  ours / kubectl drain          {ours / kubectl:8.2f}x   (target <= 1.1x)")
    print(f"  k8s_drain / ours              {anchor / ours:8.2f}x   (target >= 10x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
