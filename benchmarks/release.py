"""The driver's share of a wave at fleet scale, without Ansible: where ``finish`` + ``next_wave`` spend their time.

    .venv/bin/python benchmarks/release.py [--nodes 2000] [--wave 200] [--waves 4] [--profile]

Not part of ``make test``. Starts its own control plane (``tests/cluster``) in ``.build/bench-release``, adds the
nodes (no pods: the drain is not what is measured here), installs the CRDs and a MaintenanceOperatorConfig
(``maxParallelOperations`` and ``maxUnavailable`` the wave size), and runs the rolling engine in this process,
as the module runs it: ``start`` over every node, the first ``next_wave``, then per wave ``finish`` (the release
of the wave: its requests deleted, its nodes uncordoned) followed by ``next_wave`` (the next wave admitted,
cordoned and Ready), which is what the playbook's driver does between two waves. It prints per wave the time of
each, the API calls by verb and resource, and with ``--profile`` the functions that took the time.

The baseline, measured in the same run with the same client and workers: the API writes a release and an
admission cannot do without (per node of a wave: delete the request, uncordon, cordon, create the next request
is already done by ``start``), done directly, and one list of the Nodes; the script prints each step against it.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import io
import os
import pstats
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
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator  # noqa: E402
from ansible_collections.nodeops.maintenance.plugins.module_utils import rolling_steps as module  # noqa: E402
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.client import (  # noqa: E402
    MAINTENANCE_CONFIGS,
    NODE_MAINTENANCES,
    NODES,
    Client,
)
from cluster import kwok, launcher  # noqa: E402
from cluster.launcher import Cluster, _build_bindir  # noqa: E402

NAMESPACE = "nodeops-maintenance"
LABEL = "bench=release"
REQUESTOR = "bench.nodeops.io"


class Counting(Client):
    """The collection's client, counting its calls by verb and resource."""

    calls: collections.Counter[str]

    def request(self, method: str, path: str, *args: Any, **kwargs: Any) -> Any:
        self.calls[f"{method} {_resource(path, method)}"] += 1
        return super().request(method, path, *args, **kwargs)


def _resource(path: str, method: str) -> str:
    parts = [p for p in path.split("?")[0].split("/") if p]
    parts = parts[3:] if parts[0] == "apis" else parts[2:]  # drop api/v1 or apis/group/version
    if parts and parts[0] == "namespaces" and len(parts) > 2:
        parts = parts[2:]
    kind = parts[0] if parts else "?"
    sub = parts[2] if len(parts) > 2 else ""
    named = len(parts) > 1
    return kind + (f"/{sub}" if sub else "") + ("" if named or method == "POST" else " (list)")


def client(kubeconfig: Path, workers: int) -> Counting:
    params = {"kubeconfig": str(kubeconfig)}
    made = Counting.from_params(params, pool_size=workers + 4)
    made.calls = collections.Counter()
    return made  # type: ignore[return-value]


def params(run_id: str, workers: int) -> dict[str, Any]:
    given = {
        "run_id": run_id,
        "step": "start",
        "requestor": REQUESTOR,
        "node_selector": LABEL,
        "workers": workers,
        "drain_spec": {"force": True, "timeout_seconds": 300},
        "gather_seconds": 0,
    }
    result = ArgumentSpecValidator(module.ARGUMENT_SPEC).validate(given)
    if result.error_messages:
        raise SystemExit("; ".join(result.error_messages))
    return result.validated_parameters


def baseline(c: Counting, nodes: list[str], workers: int) -> float:
    """Cordon and uncordon each node of a wave once each, and list the Nodes once: a floor for a wave change."""
    began = time.monotonic()

    def flip(node: str) -> None:
        for value in (True, False):
            c.patch(NODES, node, {"spec": {"unschedulable": value}})

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(flip, nodes))
    c.list(NODES)
    return time.monotonic() - began


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--wave", type=int, default=200, help="maxParallelOperations and maxUnavailable")
    parser.add_argument("--waves", type=int, default=4, help="wave changes measured")
    parser.add_argument("--workers", type=int, default=8, help="the module's workers option")
    parser.add_argument("--lease-seconds", type=int, default=120, help="the simulated nodes' Lease (see rolling.py)")
    parser.add_argument("--profile", action="store_true", help="cProfile each finish and next_wave")
    parser.add_argument(
        "--compare",
        type=Path,
        help="first the same measurement with the checkout in this directory (it must have this script), then "
        "with this one, on the same cluster",
    )
    parser.add_argument(
        "--rounds", type=int, default=1, help="measure this many times (with --compare, alternately: the cluster fills)"
    )
    parser.add_argument("--kubeconfig", type=Path, help=argparse.SUPPRESS)  # a measurement on the caller's cluster
    args = parser.parse_args()

    launcher.KWOK_NODE_LEASE_SECONDS = args.lease_seconds
    launcher.NODE_MONITOR_GRACE_SECONDS = args.lease_seconds * 3 // 2
    workdir = ROOT / ".build" / "bench-release"
    cluster: Cluster | None = None
    if args.kubeconfig:
        kubeconfig = args.kubeconfig
    else:
        cluster = Cluster(workdir, _build_bindir()).start()
        kubeconfig = cluster.kubeconfig
    try:
        c = client(kubeconfig, args.workers)
        if cluster is not None:
            install(kubeconfig, c, args.wave)
            add_nodes(kubeconfig, args.nodes)
            # each measurement in its own process, on this cluster (see measure)
            for checkout in [*([args.compare] if args.compare else []), ROOT] * args.rounds:
                print(f"\n== {checkout}", flush=True)
                command = [sys.executable, str(checkout / "benchmarks" / "release.py"), "--kubeconfig", str(kubeconfig)]
                for name in ("waves", "workers"):
                    command += [f"--{name}", str(getattr(args, name))]
                subprocess.run(command + (["--profile"] if args.profile else []), check=True)
            return 0
        measure(c, args)
        return 0
    finally:
        if cluster is not None:
            cluster.stop()
        else:
            clean_up(c)


def measure(c: Counting, args: argparse.Namespace) -> None:
    """A rolling run's start and first wave, then ``args.waves`` wave changes, each timed and counted."""
    nodes = sorted(n["metadata"]["name"] for n in c.list(NODES, label_selector=LABEL)["items"])
    p = params(f"bench-release-{int(time.time())}", args.workers)
    options, _overrides = module.run_options(p)
    rolling = module.Rolling(c, options)
    rolling.start(module.targets(_Module(c, p)), p["interrupted"], p["retry_failed"])
    first = rolling.next_wave()
    wave = first["nodes"]
    print(f"wave 1: {len(wave)} nodes")
    rows = []
    for _change in range(args.waves):
        size = len(wave)
        base = baseline(c, [n for n in nodes if n not in wave][:size], args.workers)
        row: dict[str, Any] = {"baseline": base}
        for step, call in (
            ("finish", lambda w=wave: rolling.finish(w, {})),
            ("next_wave", rolling.next_wave),
        ):
            c.calls = collections.Counter()
            profiler = cProfile.Profile() if args.profile else None
            t0 = time.monotonic()
            if profiler:
                profiler.enable()
            result = call()
            if profiler:
                profiler.disable()
            row[step] = time.monotonic() - t0
            row[step + " calls"] = dict(c.calls)
            if profiler:
                out = io.StringIO()
                pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(25)
                row[step + " profile"] = out.getvalue()
            if step == "next_wave":
                wave = result["nodes"]
        rows.append(row)
        print(
            f"wave change: finish {row['finish']:.2f}s, next_wave {row['next_wave']:.2f}s; "
            f"baseline (cordon+uncordon {size} nodes, one Node list) {base:.2f}s"
        )
        for step in ("finish", "next_wave"):
            print(f"  {step} calls: " + ", ".join(f"{k} {v}" for k, v in sorted(row[step + " calls"].items())))
            if args.profile:
                print(_trim(row[step + " profile"]))
        if not wave:
            break
    for step in ("finish", "next_wave"):
        values = [r[step] for r in rows]
        print(f"{step}: median {statistics.median(values):.2f}s (of {len(values)})")
    print(f"baseline: median {statistics.median(r['baseline'] for r in rows):.2f}s")


def add_nodes(kubeconfig: Path, count: int) -> None:
    api = kwok.api_client(kubeconfig)
    began = time.monotonic()
    chunks = [count // 8 + (1 if i < count % 8 else 0) for i in range(8)]
    with ThreadPoolExecutor(8) as pool:
        made = pool.map(
            lambda ic: kwok.add_nodes(api, ic[1], prefix=f"rel{ic[0]}", labels={"bench": "release"}),
            [(i, n) for i, n in enumerate(chunks) if n],
        )
        nodes = sorted(n for part in made for n in part)
    print(f"{len(nodes)} nodes created in {time.monotonic() - began:.0f}s", flush=True)
    kwok.wait_nodes_ready(api, nodes, timeout=max(300, count / 2))
    print(f"{len(nodes)} nodes Ready in {time.monotonic() - began:.0f}s", flush=True)


def clean_up(c: Client) -> None:
    """After a measurement: every request of the benchmark's requestor gone (finalizers and all), every node of the
    benchmark uncordoned, for the next one."""
    began = time.monotonic()
    items = [o for o in c.list(NODE_MAINTENANCES)["items"] if (o.get("spec") or {}).get("requestorID") == REQUESTOR]

    def drop(obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        c.patch(NODE_MAINTENANCES, meta["name"], {"metadata": {"finalizers": None}}, namespace=meta["namespace"])
        c.delete(NODE_MAINTENANCES, meta["name"], meta["namespace"])

    def uncordon(node: dict[str, Any]) -> None:
        if (node.get("spec") or {}).get("unschedulable"):
            c.patch(NODES, node["metadata"]["name"], {"spec": {"unschedulable": None}})

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(drop, items))
        list(pool.map(uncordon, c.list(NODES, label_selector=LABEL)["items"]))
    print(f"cleaned up {len(items)} requests in {time.monotonic() - began:.0f}s")


class _Module:
    """What ``targets`` reads of a module."""

    def __init__(self, c: Client, p: dict[str, Any]) -> None:
        self.client, self.params = c, p


def install(kubeconfig: Path, c: Client, wave: int) -> None:
    env = {**os.environ, "K8S_AUTH_KUBECONFIG": str(kubeconfig), "ANSIBLE_PYTHON_INTERPRETER": sys.executable}
    subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "nodeops.maintenance.install"],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    c.apply(
        MAINTENANCE_CONFIGS,
        {
            "apiVersion": MAINTENANCE_CONFIGS.api_version,
            "kind": MAINTENANCE_CONFIGS.kind,
            "metadata": {"name": "default", "namespace": NAMESPACE},
            "spec": {"maxParallelOperations": wave, "maxUnavailable": wave},
        },
        field_manager="bench",
    )


def _trim(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines() if re.search(r"\d", line))


if __name__ == "__main__":
    sys.exit(main())
