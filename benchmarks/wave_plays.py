"""What a wave play that no wave needs costs: playbooks/rolling/waves.yml with no host in the wave group.

    .venv/bin/python benchmarks/wave_plays.py [--repeat 5]

Not part of ``make test``; needs no cluster. ``playbooks/rolling_maintenance.yml`` imports ``rolling/waves.yml``,
a fixed number of copies of the wave play (``rolling/wave.yml``); a run uses one copy per wave and the rest match
no host. This runs ``ansible-playbook`` on two playbooks in the same run, on localhost only: the baseline, one
trivial play; and the same play followed by the collection's ``rolling/waves.yml`` (every copy skipped). It prints
the best and median wall time of each over ``--repeat`` runs, and the cost per unused copy: the difference divided
by the number of copies. Target: a few ms per copy.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import conftest as _collection_path  # noqa: E402,F401 - makes this checkout the nodeops.maintenance collection

BIN = Path(sys.executable).parent
WAVES = ROOT / "playbooks" / "rolling" / "waves.yml"
TRIVIAL = """---
- name: Baseline
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Nothing
      ansible.builtin.debug:
        msg: baseline
"""


def copies(path: Path) -> int:
    """How many wave plays ``path`` holds, following its imports."""
    import yaml

    total = 0
    for entry in yaml.safe_load(path.read_text()):
        target = entry.get("ansible.builtin.import_playbook")
        total += copies(path.parent / target) if target and target != "wave.yml" else 1
    return total


def timed(playbook: Path) -> float:
    env = {**os.environ, "ANSIBLE_PYTHON_INTERPRETER": sys.executable, "ANSIBLE_LOCALHOST_WARNING": "false"}
    began = time.monotonic()
    subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", str(playbook)],
        env=env,
        stdout=subprocess.DEVNULL,
        check=True,
    )
    return time.monotonic() - began


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    count = copies(WAVES)
    with tempfile.TemporaryDirectory() as tmp:
        baseline = Path(tmp) / "baseline.yml"
        baseline.write_text(TRIVIAL)
        waves = Path(tmp) / "waves.yml"
        waves.write_text(TRIVIAL + f"- name: The waves\n  ansible.builtin.import_playbook: {WAVES}\n")
        times: dict[str, list[float]] = {"baseline": [], "waves": []}
        for _repeat in range(args.repeat):  # interleaved, so that a busy moment hits both
            times["baseline"].append(timed(baseline))
            times["waves"].append(timed(waves))
    for name, values in times.items():
        print(f"{name:>8}: best {min(values):.2f}s, median {statistics.median(values):.2f}s ({len(values)} runs)")
    per_copy = (statistics.median(times["waves"]) - statistics.median(times["baseline"])) / count * 1000
    print(f"{count} unused wave plays: {per_copy:.1f} ms each (median against median; target: a few ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
