"""The node agent's footprint: resident memory and idle CPU, against a bare Python in the same run.

A script for people, never part of `make test`. It starts one agent on loopback (fake API server,
mutual-TLS PKI and watchdog file as in tests/unit/test_node_agent.py) with the default check interval,
lets it idle, and prints its RSS and CPU share beside those of an idle `python3 -c` process.
Targets: at most 25 MB resident and 0.5 % CPU.

    .venv/bin/python benchmarks/agent.py [--seconds 20]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from support.node_agent import FakeApi, issue, make_agent, wait_for  # noqa: E402


def rss_kb(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    return next(int(line.split()[1]) for line in status if line.startswith("VmRSS"))


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def idle_share(pid: int, seconds: float) -> float:
    start_cpu, start = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)  # the measured idle period itself
    return (cpu_seconds(pid) - start_cpu) / (time.monotonic() - start)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=20.0, help="idle period measured")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="agent-bench-") as tmp:
        tmp_path = Path(tmp)
        api = FakeApi(tmp_path / "api").start()
        bare = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
        try:
            ca = issue("nodeops-peer-ca")
            pki = {"ca": ca, "ca_file": ca.write(tmp_path / "pki", "ca")[0], "dir": tmp_path / "pki"}
            agent = make_agent("w1", tmp_path, pki, api, [], watchdogTimeoutSeconds=60).start()
            try:
                assert agent.process is not None
                wait_for(agent.fed_bytes, 10, "a first watchdog feed")
                agent_cpu = idle_share(agent.process.pid, args.seconds)
                bare_cpu = idle_share(bare.pid, 1.0)
                agent_rss, bare_rss = rss_kb(agent.process.pid), rss_kb(bare.pid)
            finally:
                agent.stop()
        finally:
            bare.kill()
            api.stop()
    print(f"{'process':<22}{'RSS MiB':>10}{'idle CPU %':>12}")
    print(f"{'bare python3':<22}{bare_rss / 1024:>10.1f}{bare_cpu * 100:>12.2f}")
    print(f"{'node agent':<22}{agent_rss / 1024:>10.1f}{agent_cpu * 100:>12.2f}")
    print(f"agent / bare RSS: {agent_rss / bare_rss:.2f}x; targets: <= 25 MiB, <= 0.5 % CPU")
    return 0 if agent_rss <= 25 * 1024 and agent_cpu <= 0.005 else 1


if __name__ == "__main__":
    sys.exit(main())
