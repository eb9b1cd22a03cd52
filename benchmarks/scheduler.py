"""Time one pure scheduling pass at 1k and 10k nodes and requests, against a baseline of the same run.

    .venv/bin/python benchmarks/scheduler.py [--sizes 1000 10000] [--repeat 9] [--seed 1] [--rollout-sizes 10000]

Not part of ``make test``. The data are plain Kubernetes dicts, as the API returns them: N Nodes
(5 % cordoned, 2 % NotReady) and N NodeMaintenances from 20 requestors on random nodes (5 % in
progress, the rest Pending, creation times over one hour), limits ``maxParallelOperations: 10%`` and
``maxUnavailable: 20%``. Measured, each as the best and the median of ``--repeat`` runs:

* ``parse``: the dicts into the scheduler's dataclasses (``parse_nodes`` + ``parse_requests``);
* ``schedule``: one pass on the parsed inputs (``schedule``), the number the target is about
  (under 50 ms at 10k);
* ``parse+schedule``: what a reconcile pass pays after its two list calls;
* ``rollout``: the whole simulation (``simulate_rollout``): a full pass, then one incremental pass per wave
  (its cost follows the wave, not the cluster), and a full pass at the end when some request is never scheduled;
* ``baseline``: sorting the NodeMaintenance dicts by (creationTimestamp, nodeName, requestorID,
  namespace/name), the least any ranking must do. Ratios are against it, so they compare across machines.

Then, for each of ``--rollout-sizes`` (10k by default), the whole rollout simulation on the same data at
``maxParallelOperations`` 1, 10 and 10 % with ``maxUnavailable`` unset, 20 %, 8 % and 5 % (the cluster has
about 7 % of its nodes unavailable: 8 % leaves a budget of about 100 nodes per wave, 5 % none, so that only
the unavailable nodes get their turn and the rest is ``never``), each as the best and the median of
``max(1, --repeat // 3)`` runs, beside the baseline measured again for that size. The target is 2 s for
any of them at 10k; it is printed, not checked (the exit status is about the single pass only).

The API requests of one reconcile pass (the other half of the issue's benchmark) are measured by the
reconcile engine's benchmark, not here.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


sys.path.insert(0, str(ROOT / "tests"))
import conftest as _collection_path  # noqa: E402,F401 - makes this checkout the nodeops.maintenance collection
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.maintenance.scheduler import (  # noqa: E402
    SchedulerConfig,
    parse_nodes,
    parse_requests,
    schedule,
    simulate_rollout,
)

IN_PROGRESS = ("Scheduled", "Cordon", "WaitForPodCompletion", "Draining", "Ready")
TARGET_MS = 50.0
ROLLOUT_TARGET_MS = 2000.0
ROLLOUT_LIMITS = [(mpo, mu) for mpo in (1, 10, "10%") for mu in (None, "20%", "8%", "5%")]


def cluster(size: int, seed: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rnd = random.Random(seed)
    nodes = []
    for i in range(size):
        draw = rnd.random()
        ready = "False" if draw < 0.02 else "True"
        node: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": f"node-{i:05d}", "labels": {"kubernetes.io/hostname": f"node-{i:05d}"}},
            "spec": {"unschedulable": True} if 0.02 <= draw < 0.07 else {},
            "status": {
                "conditions": [
                    {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory"},
                    {"type": "Ready", "status": ready, "reason": "KubeletReady"},
                ]
            },
        }
        nodes.append(node)
    requests = []
    for i in range(size):
        second = rnd.randrange(3600)
        phase = rnd.choice(IN_PROGRESS) if rnd.random() < 0.05 else "Pending"
        requests.append(
            {
                "apiVersion": "maintenance.nvidia.com/v1alpha1",
                "kind": "NodeMaintenance",
                "metadata": {
                    "name": f"nm-{i:05d}",
                    "namespace": f"team-{i % 5}",
                    "creationTimestamp": f"2026-01-01T{second // 3600:02d}:{second // 60 % 60:02d}:{second % 60:02d}Z",
                    "finalizers": ["maintenance.nvidia.com/finalizer"] if phase != "Pending" else [],
                },
                "spec": {
                    "requestorID": f"requestor-{rnd.randrange(20)}.example.com",
                    "nodeName": f"node-{rnd.randrange(size):05d}",
                    "cordon": True,
                    "drainSpec": {"force": True, "timeoutSeconds": 300, "deleteEmptyDir": True},
                },
                "status": {
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "False",
                            "reason": phase,
                            "message": "",
                            "lastTransitionTime": "2026-01-01T01:00:00Z",
                        }
                    ]
                },
            }
        )
    return nodes, requests


def measure(fn: Callable[[], Any], repeat: int) -> tuple[float, float]:
    """Best and median wall time in milliseconds."""
    times = []
    for _run in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return min(times), statistics.median(times)


def baseline_sort(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(
        requests,
        key=lambda o: (
            o["metadata"]["creationTimestamp"],
            o["spec"]["nodeName"],
            o["spec"]["requestorID"],
            o["metadata"]["namespace"] + "/" + o["metadata"]["name"],
        ),
    )


def run_size(size: int, seed: int, repeat: int, config: SchedulerConfig) -> bool:
    """Print the rows of one size; False when the 10k pass misses the target."""
    node_objs, nm_objs = cluster(size, seed)
    nodes, requests = parse_nodes(node_objs), parse_requests(nm_objs)
    result = schedule(nodes, requests, config)
    rollout = simulate_rollout(nodes, requests, config)
    rows = [
        ("baseline", measure(lambda: baseline_sort(nm_objs), repeat)),
        ("parse", measure(lambda: (parse_nodes(node_objs), parse_requests(nm_objs)), repeat)),
        ("schedule", measure(lambda: schedule(nodes, requests, config), repeat)),
        ("parse+schedule", measure(lambda: schedule(parse_nodes(node_objs), parse_requests(nm_objs), config), repeat)),
        ("rollout", measure(lambda: simulate_rollout(nodes, requests, config), max(1, repeat // 3))),
    ]
    base = rows[0][1][0]
    for what, (best, median) in rows:
        print(f"{size:>6}  {what:<15} {best:>9.2f} {median:>10.2f} {best / base:>10.1f}x")
    print(
        f"{size:>6}  (pass: {len(result.scheduled)} scheduled, {result.available_slots} slots, budget "
        f"{result.can_become_unavailable}, {len(result.decisions)} decisions; rollout: {len(rollout.waves)} waves, "
        f"{len(rollout.never)} never)"
    )
    if size < 10000:
        return True
    best = rows[2][1][0]
    print(
        f"{size:>6}  schedule {best:.1f} ms {'meets' if best < TARGET_MS else 'MISSES'} "
        f"the target of {TARGET_MS:.0f} ms"
    )
    return best < TARGET_MS


def run_rollouts(size: int, seed: int, repeat: int) -> None:
    """Print the whole-rollout rows of one size, one per pair of limits, against the baseline of the same run."""
    node_objs, nm_objs = cluster(size, seed)
    nodes, requests = parse_nodes(node_objs), parse_requests(nm_objs)
    base, base_median = measure(lambda: baseline_sort(nm_objs), repeat)
    print(f"{size:>6}  {'baseline':<22} {base:>9.2f} {base_median:>10.2f} {1:>10.1f}x")
    slowest = 0.0
    for mpo, mu in ROLLOUT_LIMITS:
        config = SchedulerConfig(mpo, mu)
        rollout = simulate_rollout(nodes, requests, config)
        best, median = measure(lambda config=config: simulate_rollout(nodes, requests, config), max(1, repeat // 3))
        slowest = max(slowest, best)
        what = f"rollout {mpo}/{'-' if mu is None else mu}"
        print(
            f"{size:>6}  {what:<22} {best:>9.2f} {median:>10.2f} {best / base:>10.1f}x"
            f"  {len(rollout.waves):>5} waves {len(rollout.never):>5} never"
        )
    print(
        f"{size:>6}  slowest rollout {slowest:.0f} ms: {'within' if slowest <= ROLLOUT_TARGET_MS else 'OVER'} "
        f"the target of {ROLLOUT_TARGET_MS / 1000:.0f} s"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rollout-sizes", type=int, nargs="*", default=[10000])
    args = parser.parse_args()
    config = SchedulerConfig("10%", "20%")
    print(f"Python {sys.version.split()[0]}; best / median of {args.repeat} runs; ratios = best / best baseline")
    print(f"{'size':>6}  {'what':<15} {'best ms':>9} {'median ms':>10} {'x baseline':>11}")
    ok = True
    for size in args.sizes:
        ok = run_size(size, args.seed, args.repeat, config) and ok
    if args.rollout_sizes:
        runs = max(1, args.repeat // 3)
        print(f"\nwhole rollout (maxParallelOperations/maxUnavailable), best / median of {runs} runs")
        print(f"{'size':>6}  {'what':<22} {'best ms':>9} {'median ms':>10} {'x baseline':>11}")
    for size in args.rollout_sizes:
        run_rollouts(size, args.seed, args.repeat)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
