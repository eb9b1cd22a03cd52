"""Time ``maintenance_plan`` offline through ``ansible-playbook`` with the objects passed as arguments and read
from a snapshot file, against the module alone on the same input, in one run.

    .venv/bin/python benchmarks/offline.py [--size 10000] [--repeat 3] [--seed 1]

Not part of ``make test``. The cluster is the one of ``benchmarks/scheduler.py`` (N Nodes, N NodeMaintenances),
written once as a ``kubectl get -o json`` List. Measured, each as the best and the median of ``--repeat`` runs,
as wall time of the whole command:

* ``module alone`` (the baseline): the module's process with its arguments on stdin, as Ansible runs it on the
  host, with the objects in the arguments;
* ``playbook, arguments``: ``ansible-playbook`` with one task passing the objects as ``nodes`` and
  ``node_maintenances`` (read from the file with ``lookup('file') | from_json``);
* ``playbook, snapshot``: the same task with ``snapshot: <file>``.

Ratios are against the baseline.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))
from scheduler import cluster  # noqa: E402 - the same data as the scheduler's benchmark
from support.ansible_cli import BIN, clean_env  # noqa: E402

MODULE = ROOT / "plugins" / "modules" / "maintenance_plan.py"


def timed(command: list[str], env: dict[str, str], stdin: str | None = None) -> float:
    start = time.perf_counter()
    proc = subprocess.run(command, input=stdin, capture_output=True, text=True, env=env, check=False)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command[:3])} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=10000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    nodes, requests = cluster(args.size, args.seed)
    config = {"max_parallel_operations": "10%", "max_unavailable": "20%"}
    env = clean_env({"ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.default"})
    with tempfile.TemporaryDirectory(prefix="nodeops-offline-bench-") as tmp:
        snapshot = Path(tmp) / "cluster.json"
        snapshot.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": nodes + requests}))
        nodes_file, nms_file = Path(tmp) / "nodes.json", Path(tmp) / "nms.json"
        nodes_file.write_text(json.dumps(nodes))
        nms_file.write_text(json.dumps(requests))
        play = [
            {
                "hosts": "localhost",
                "connection": "local",
                "gather_facts": False,
                "tasks": [
                    {
                        "name": "plan",
                        "nodeops.maintenance.maintenance_plan": {"config": config, **task},
                    }
                ],
            }
            for task in (
                {
                    "nodes": f"{{{{ lookup('ansible.builtin.file', '{nodes_file}') | from_json }}}}",
                    "node_maintenances": f"{{{{ lookup('ansible.builtin.file', '{nms_file}') | from_json }}}}",
                },
                {"snapshot": [str(snapshot)]},
            )
        ]
        books = []
        for index, one in enumerate(play):
            book = Path(tmp) / f"play{index}.yml"
            book.write_text(json.dumps([one]))
            books.append(book)
        module_args = json.dumps(
            {"ANSIBLE_MODULE_ARGS": {"nodes": nodes, "node_maintenances": requests, "config": config}}
        )
        module_env = {**env, "PYTHONPATH": os.pathsep.join(filter(None, [env.get("PYTHONPATH"), str(ROOT / "tests")]))}
        runs: dict[str, list[float]] = {"module alone": [], "playbook, arguments": [], "playbook, snapshot": []}
        for _round in range(args.repeat):
            runs["module alone"].append(timed([sys.executable, "-c", BOOT, str(MODULE)], module_env, stdin=module_args))
            for name, book in zip(("playbook, arguments", "playbook, snapshot"), books, strict=True):
                runs[name].append(timed([str(BIN / "ansible-playbook"), "-i", "localhost,", str(book)], env))
    base = min(runs["module alone"])
    load = os.getloadavg()[0]
    print(f"{args.size} nodes and {args.size} NodeMaintenances, best and median of {args.repeat}, load {load:.1f}")
    for name, times in runs.items():
        best, median = min(times), statistics.median(times)
        print(f"  {name:22s} best {best:7.2f} s  median {median:7.2f} s  ({best / base:.1f}x the baseline)")
    return 0


# Runs the module file as Ansible would, with this checkout importable as the collection.
BOOT = "import runpy, sys; import conftest; sys.argv = [sys.argv[1]]; runpy.run_path(sys.argv[0], run_name='__main__')"

if __name__ == "__main__":
    sys.exit(main())
