"""How long the playbooks take to refuse a wrong variable, against a one-task playbook: the checks' own cost.

    .venv/bin/python benchmarks/playbook_checks.py [--runs 7]

Not part of ``make test``; needs no cluster (every case fails in its first tasks, before any call to the API). The
script runs, ``--runs`` times each and interleaved (the order turns every round, after one warm-up round that is
not counted), each a whole ``ansible-playbook`` command timed from launch to return:

* ``baseline``: a playbook of one ``ansible.builtin.ping`` task on localhost (Ansible's own start, one play);
* ``rolling: 10pct``: ``nodeops.maintenance.rolling_maintenance`` with ``rolling_max_unavailable=10pct``
  (refused by the check of the limits, after the variables were checked against the argument spec);
* ``rolling: typo``: the same with a misspelt variable (``rolling_maxParallelOperations``, a warning) and a
  list given as text for a list variable (refused by the shape check);
* ``remediate: missing``: ``nodeops.maintenance.remediate`` with its required ``remediate_nhc_name`` misspelt.

It prints each case's median wall time and CPU seconds (user + system of the command and its children), the
ratio to the baseline, and the difference: the time the checks add before they fail. Target: under 2 s.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import conftest as _collection_path  # noqa: E402,F401 - this checkout as the collection (ANSIBLE_COLLECTIONS_PATH)
from support.ansible_cli import BIN, clean_env  # noqa: E402

ROLLING = {
    "rolling_run_id": "bench",
    "rolling_node_names": ["n0"],
    "rolling_maintenance_tasks": "maintenance.yml",
    "rolling_kubeconfig": "/nonexistent/kubeconfig",
}


def cases(baseline: Path) -> dict[str, list[str]]:
    playbook = str(BIN / "ansible-playbook")
    return {
        "baseline": [playbook, str(baseline)],
        "rolling: 10pct": [
            playbook,
            "nodeops.maintenance.rolling_maintenance",
            "-e",
            json.dumps({**ROLLING, "rolling_max_unavailable": "10pct"}),
        ],
        "rolling: typo": [
            playbook,
            "nodeops.maintenance.rolling_maintenance",
            "-e",
            json.dumps({**ROLLING, "rolling_maxParallelOperations": 3}),
            "-e",
            "rolling_node_names=n0,n1",
        ],
        "remediate: missing": [
            playbook,
            "nodeops.maintenance.remediate",
            "-e",
            json.dumps({"remediate_nhc_nme": "workers"}),
        ],
    }


def timed(command: list[str], env: dict[str, str], expect_failure: bool) -> tuple[float, float]:
    """Wall and CPU seconds of one command (its children's CPU, measured around it)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    proc = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if (proc.returncode != 0) != expect_failure:
        raise SystemExit(f"{command}: exit code {proc.returncode}\n{proc.stdout[-3000:]}{proc.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    env = clean_env({"ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.default"})
    with tempfile.TemporaryDirectory() as tmp:
        baseline = Path(tmp) / "ping.yml"
        baseline.write_text(
            json.dumps([{"hosts": "localhost", "gather_facts": False, "tasks": [{"ansible.builtin.ping": {}}]}])
        )
        commands = cases(baseline)
        names = list(commands)
        walls: dict[str, list[float]] = {n: [] for n in names}
        cpus: dict[str, list[float]] = {n: [] for n in names}
        print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        for round_ in range(args.runs + 1):
            order = names[round_ % len(names) :] + names[: round_ % len(names)]
            for name in order:
                wall, cpu = timed(commands[name], env, expect_failure=name != "baseline")
                if round_:  # the first round warms the caches and is not counted
                    walls[name].append(wall)
                    cpus[name].append(cpu)
        base_wall, base_cpu = statistics.median(walls["baseline"]), statistics.median(cpus["baseline"])
        print(f"{'case':<20} {'wall s':>8} {'cpu s':>8} {'x base':>8} {'added s':>8}")
        for name in names:
            wall, cpu = statistics.median(walls[name]), statistics.median(cpus[name])
            print(f"{name:<20} {wall:8.2f} {cpu:8.2f} {wall / base_wall:8.2f} {wall - base_wall:8.2f}")
        print(f"baseline CPU {base_cpu:.2f} s; load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print("target: each case adds under 2 s to the baseline before it fails")


if __name__ == "__main__":
    main()
