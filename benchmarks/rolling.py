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
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import conftest as _collection_path  # noqa: E402,F401 - makes this checkout the nodeops.maintenance collection
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.maintenance.rolling import (  # noqa: E402
    RECORD_LIMIT,
    record_name,
    record_size,
    stored_nodes,
)
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.node import rfc3339  # noqa: E402
from cluster import kwok, launcher, nvidia_operator  # noqa: E402
from cluster.launcher import Cluster, _build_bindir  # noqa: E402
from kubernetes import client as k8s  # noqa: E402
from kubernetes import watch as k8s_watch  # noqa: E402

BIN = Path(sys.executable).parent
NAMESPACE = "bench"
CONFIG_NAMESPACE = "nodeops-maintenance"


class TreeSampler(threading.Thread):
    """Samples ``/proc`` for a process and its descendants every ``interval`` seconds: the peak RSS of each
    (``VmHWM``, the kernel's own high-water mark, so a peak between two samples is not missed for a process
    seen at least once), and the largest sum of their PSS (``smaps_rollup``: shared pages shared out, so the
    fork workers' copy-on-write pages are not counted once per worker). A process that lives less than one
    interval may be missed; the main process and the fork workers live through the whole run."""

    def __init__(self, pid: int, interval: float = 1.0) -> None:
        super().__init__(daemon=True)
        self.pid, self.interval = pid, interval
        self.stop = threading.Event()
        self.hwm: dict[int, int] = {}  # pid -> peak RSS, KiB
        self.role: dict[int, str] = {}  # pid -> main / worker (a fork of the main process) / module
        self.peak_pss = 0  # KiB, the whole tree at one moment
        self.samples = 0

    @staticmethod
    def _read(path: str) -> str:
        try:
            return Path(path).read_text()
        except OSError:  # gone meanwhile
            return ""

    def _tree(self) -> list[int]:
        parent: dict[int, int] = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                stat = self._read(f"/proc/{entry}/stat")
                if stat:
                    parent[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
        tree, frontier = [self.pid], [self.pid]
        while frontier:
            frontier = [pid for pid, ppid in parent.items() if ppid in frontier]
            tree += frontier
        return tree

    def sample(self) -> None:
        main_cmd = self._read(f"/proc/{self.pid}/cmdline")
        pss = 0
        for pid in self._tree():
            status = self._read(f"/proc/{pid}/status")
            match = re.search(r"^VmHWM:\s+(\d+) kB", status, re.M)
            if not match:
                continue
            self.hwm[pid] = max(self.hwm.get(pid, 0), int(match.group(1)))
            if pid not in self.role:
                same = self._read(f"/proc/{pid}/cmdline") == main_cmd
                self.role[pid] = "main" if pid == self.pid else ("worker" if same else "module")
            rollup = re.search(r"^Pss:\s+(\d+) kB", self._read(f"/proc/{pid}/smaps_rollup"), re.M)
            pss += int(rollup.group(1)) if rollup else 0
        self.peak_pss = max(self.peak_pss, pss)
        self.samples += 1

    def run(self) -> None:
        while not self.stop.is_set():
            self.sample()
            self.stop.wait(self.interval)

    def peaks(self, role: str) -> list[int]:
        return [kib for pid, kib in self.hwm.items() if self.role.get(pid) == role]


def playbook(
    cluster: Cluster,
    name: str,
    extra: dict[str, Any],
    forks: int,
    log: Path,
    usage: dict[str, Any] | None = None,
    collections: Path | None = None,
) -> float:
    """Runs the playbook; with ``usage`` (a dict), fills it with the CPU seconds of ``ansible-playbook`` and
    every process under it (``wait4``: the process and its descendants that were waited for, which Ansible
    does for its workers and module processes) and the peak memory that :class:`TreeSampler` saw."""
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
        **({"ANSIBLE_COLLECTIONS_PATH": str(collections.resolve())} if collections else {}),
    }
    target = name if name.endswith(".yml") else f"nodeops.maintenance.{name}"
    cmd = [str(BIN / "ansible-playbook"), target, "-f", str(forks), "-e", json.dumps(extra)]
    began = time.monotonic()
    with log.open("w") as out:
        process = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
        sampler = TreeSampler(process.pid)
        if usage is not None:
            sampler.start()
        _pid, status, rusage = os.wait4(process.pid, 0)
        process.returncode = rc = os.waitstatus_to_exitcode(status)
        sampler.stop.set()
    if usage is not None:
        sampler.join()
        usage.update(
            seconds=time.monotonic() - began,
            user=rusage.ru_utime,
            system=rusage.ru_stime,
            maxrss=rusage.ru_maxrss,  # KiB: the largest single process of the tree (Linux)
            main=max(sampler.peaks("main"), default=0),
            workers=sampler.peaks("worker"),
            modules=sampler.peaks("module"),
            pss=sampler.peak_pss,
            samples=sampler.samples,
        )
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


# A pause of each host's own in its worker, without a module process: a debug task tried again once after the delay
# (ansible.builtin.pause runs once for all hosts, which the one-play design's host_pinned strategy refuses)
PAUSE = """---
- name: The maintenance, a pause of {seconds:g}s in the controller (no module process, no reboot)
  ansible.builtin.debug:
    msg: paused
  register: _bench_pause
  until: _bench_pause.attempts | default(1) > 1
  retries: 1
  delay: {seconds:g}
"""


def maintenance_tasks(args: argparse.Namespace, workdir: Path) -> str:
    """The simulated reboot (three module calls a node: a realistic share of the controller's CPU), or with
    ``--maintenance pause`` a pause, which leaves the driver's own cost: the waves, the steps, Ansible's tasks."""
    if args.maintenance == "reboot":
        return "maintenance/simulated_reboot.yml"
    path = workdir / "pause.yml"
    path.write_text(PAUSE.format(seconds=args.reboot))
    return str(path)


def slot_idle(records: list[dict[str, Any]], key: str = "admitted") -> list[float]:
    """For each node released while others were still to come: from its release to the next admission (the
    scheduler's slot standing idle, as the run saw it), or with ``key="started"`` to the next node handed to its
    maintenance tasks (in waves, an admitted node waits for its wave)."""
    backs = sorted(rfc3339.to_epoch(r["back"]) for r in records if r.get("back"))
    admissions = sorted(rfc3339.to_epoch(r[key]) for r in records if r.get(key))
    out = []
    for back in backs:
        later = [a for a in admissions if a >= back]
        if later:
            out.append(later[0] - back)
    return out


class SlotWatch:
    """Watches the NodeMaintenances of the run's namespace from this process: when each was first seen past Pending
    (its slot taken: Scheduled, or further along when the watch saw no Scheduled) and when each was gone (its slot
    given back). Either engine's requests are seen the same way; the times are when this process heard of them."""

    def __init__(self, api: k8s.ApiClient, namespace: str) -> None:
        self.taken: dict[str, float] = {}
        self.gone: list[float] = []
        self._watch = k8s_watch.Watch()
        self._stopped = threading.Event()
        self._custom = k8s.CustomObjectsApi(api)
        self._namespace = namespace
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        version = ""
        while not self._stopped.is_set():
            try:
                for event in self._watch.stream(
                    self._custom.list_namespaced_custom_object,
                    "maintenance.nvidia.com",
                    "v1alpha1",
                    self._namespace,
                    "nodemaintenances",
                    resource_version=version,
                    timeout_seconds=300,
                ):
                    obj = event["object"]
                    meta = obj.get("metadata") or {}
                    version = meta.get("resourceVersion", version)
                    if event["type"] == "DELETED":
                        self.gone.append(time.time())
                        continue
                    reasons = [c.get("reason") for c in (obj.get("status") or {}).get("conditions") or []]
                    if any(r not in (None, "", "Pending") for r in reasons) and meta.get("uid") not in self.taken:
                        self.taken[meta["uid"]] = time.time()
            except Exception:  # a watch that failed is started again, from a new list (taken is kept by uid)
                version = ""
                if self._stopped.wait(1):
                    return

    def stop(self) -> None:
        self._stopped.set()
        self._watch.stop()

    def free(self) -> list[float]:
        """For each request gone while others were still to come: seconds until a request took the slot it freed
        (the releases and the takes after them paired in their order: each take fills one freed slot)."""
        taken = sorted(self.taken.values())
        out: list[float] = []
        index = 0
        for gone in sorted(self.gone):
            while index < len(taken) and taken[index] < gone:
                index += 1  # taken before this release: a slot that was free already
            if index == len(taken):
                break
            out.append(taken[index] - gone)
            index += 1
        return out


def run_engine(
    cluster: Cluster,
    api: k8s.ApiClient,
    engine: str,
    nodes: list[str],
    args: argparse.Namespace,
    workdir: Path,
    collections: Path | None = None,
) -> dict[str, Any]:
    """One rolling maintenance of every node with ``engine`` and the rolling playbook of the collection in
    ``collections`` (by default this checkout); prints its waves (admission batches) and returns its figures."""
    add_pods(api, nodes, args.pods_per_node)
    run_id = f"bench-{engine}-{int(time.time())}"
    extra = {
        "rolling_run_id": run_id,
        "rolling_engine": engine,
        "rolling_node_selector": "bench=rolling",
        "rolling_max_parallel_operations": args.mpo,
        "rolling_max_unavailable": args.mpo,
        "rolling_maintenance_tasks": maintenance_tasks(args, workdir),
        "rolling_simulated_reboot_seconds": args.reboot,
        "rolling_drain_spec": {"force": True, "timeout_seconds": 300},
        "rolling_gather_seconds": 5,
    }
    log = workdir / f"rolling-{engine}{'-compared' if collections else ''}.log"
    usage: dict[str, Any] | None = {} if args.rusage else None
    load_before = os.getloadavg()
    slots = SlotWatch(api, "default")
    began = time.time()
    total = playbook(cluster, "rolling_maintenance", extra, forks(args), log, usage, collections)
    ended = time.time()
    slots.stop()
    load_after = os.getloadavg()
    cm = k8s.CoreV1Api(api).read_namespaced_config_map(record_name(run_id), CONFIG_NAMESPACE)
    records = list(stored_nodes(cm.data).values())
    size = record_size(cm.data)
    assert all(r["state"] == "done" for r in records), "not every node is done"
    table = waves(records, began, ended)
    print(f"\n== engine {engine}" + (f", the collection in {collections}" if collections else ", this checkout"))
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
    print(f"the record: {size} bytes, {size / len(records):.0f} a node ({size / RECORD_LIMIT:.0%} of a ConfigMap)")
    print(f"playbook output: {log}")
    print(f"load average (1, 5, 15 min) before the run {fmt_load(load_before)}, after {fmt_load(load_after)}")
    if usage is not None:
        print_usage(usage, len(records))
    idle = slot_idle(records) or [0.0]
    unused = slot_idle(records, "started") or [0.0]
    print(
        f"slot idle (a release to the next admission): median {statistics.median(idle):.2f}s, max {max(idle):.2f}s; "
        f"to the next maintenance start: median {statistics.median(unused):.2f}s, max {max(unused):.2f}s"
    )
    free = slots.free() or [0.0]
    print(
        f"slot free (a request gone to the next request scheduled, either engine, as a watch saw them): median "
        f"{statistics.median(free):.2f}s, max {max(free):.2f}s"
    )
    overhead = [w["overhead"] for w in table]
    return {
        "total": total,
        "waves": len(table),
        "table": table,
        "overhead": overhead,
        "usage": usage,
        "idle": idle,
        "unused": unused,
        "free": free,
    }


def fmt_load(load: tuple[float, float, float]) -> str:
    return "/".join(f"{x:.1f}" for x in load)


def print_usage(usage: dict[str, Any], nodes: int) -> None:
    """CPU and memory of ansible-playbook and its processes, per 1000 nodes (see ``playbook``)."""
    cpu = usage["user"] + usage["system"]
    per = 1000 / nodes
    workers, modules = usage["workers"] or [0], usage["modules"] or [0]
    print(f"\nansible-playbook and every process under it ({nodes} nodes, {usage['seconds']:.0f}s):")
    print(
        f"  CPU: user {usage['user']:.0f}s + system {usage['system']:.0f}s = {cpu:.0f}s; "
        f"{cpu * per:.0f} CPU-s per 1000 nodes ({cpu / usage['seconds']:.2f} cores on average)"
    )
    print(
        f"  peak RSS: main process {usage['main'] / 1024:.0f} MiB; fork workers ({len(usage['workers'])}): "
        f"max {max(workers) / 1024:.0f} MiB, median {statistics.median(workers) / 1024:.0f} MiB; module processes "
        f"seen ({len(usage['modules'])}): max {max(modules) / 1024:.0f} MiB; largest single process (wait4) "
        f"{usage['maxrss'] / 1024:.0f} MiB"
    )
    print(
        f"  peak PSS of the whole tree at one moment: {usage['pss'] / 1024:.0f} MiB "
        f"({usage['samples']} samples, 1 s apart)"
    )


def cpu_per_thousand(run: dict[str, Any], nodes: int) -> str:
    """``; N CPU-s per 1000 nodes`` for a run measured with ``--rusage``, else nothing."""
    if not run["usage"]:
        return ""
    cpu = run["usage"]["user"] + run["usage"]["system"]
    return f"; {cpu * 1000 / nodes:.0f} CPU-s per 1000 nodes"


def print_comparison(compared: dict[str, Any], this: dict[str, Any], nodes: int) -> None:
    print("\n== the same maintenance of the same nodes, the collection compared (first) and this checkout")
    for label, run in (("compared", compared), ("this checkout", this)):
        o = run["overhead"]
        line = (
            f"{label:>14}: overhead per wave mean {statistics.mean(o):.2f}s, median {statistics.median(o):.2f}s, "
            f"max {max(o):.2f}s; total {run['total']:.1f}s; slot idle median {statistics.median(run['idle']):.2f}s, "
            f"max {max(run['idle']):.2f}s; slot free median {statistics.median(run['free']):.2f}s, "
            f"max {max(run['free']):.2f}s"
        )
        print(line + cpu_per_thousand(run, nodes))
    print(f"this checkout against the compared collection: {compared['total'] / this['total']:.2f}x faster end to end")


def forks(args: argparse.Namespace) -> int:
    """Ansible's forks: as the playbook recommends, twice maxParallelOperations (the next nodes wait for a slot with
    their requests made), unless --forks says otherwise."""
    return args.forks or 2 * args.mpo


def wait_pods_gone(api: k8s.ApiClient) -> None:
    """The bare pods the last run drained are deleted before the next run makes them again."""
    core = k8s.CoreV1Api(api)
    kwok.wait_until(lambda: not core.list_namespaced_pod(NAMESPACE).items or None, 600, "the drained pods gone")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--pods-per-node", type=int, default=10)
    parser.add_argument("--mpo", type=int, default=20, help="maxParallelOperations")
    parser.add_argument("--forks", type=int, help="Ansible's forks (default: twice --mpo)")
    parser.add_argument("--reboot", type=float, default=2, help="seconds of each simulated reboot (or pause)")
    parser.add_argument("--maintenance", choices=("reboot", "pause"), default="reboot", help="see maintenance_tasks")
    parser.add_argument(
        "--rusage", action="store_true", help="also the CPU seconds and peak memory of ansible-playbook's processes"
    )
    parser.add_argument(
        "--lease-seconds",
        type=int,
        help="the simulated nodes' Lease duration (renewed every quarter of it; Unknown after 1.5 times it without "
        "one); default: the test control plane's 20 s",
    )
    parser.add_argument(
        "--compare",
        type=Path,
        help="first the same run (built-in engine) with the collection in this directory (it holds "
        "ansible_collections/nodeops/maintenance), then with this checkout, on the same cluster",
    )
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
    if args.lease_seconds:
        # The test control plane's nodes renew their Leases every 5 s and turn Unknown after 20 s without one,
        # for quick tests of a few nodes; thousands of them at that rate (400 writes/s at 2,000) overload a small
        # machine and its nodes flap. Real kubelets renew every 10 s (a 40 s Lease) and turn Unknown after 40-50 s.
        launcher.KWOK_NODE_LEASE_SECONDS = args.lease_seconds
        launcher.NODE_MONITOR_GRACE_SECONDS = args.lease_seconds * 3 // 2
    cluster = Cluster(workdir, _build_bindir()).start()
    api = kwok.api_client(cluster.kubeconfig)
    try:
        print(
            f"Kubernetes {cluster.k8s_version}; {args.nodes} nodes x {args.pods_per_node} pods, mpo {args.mpo}, "
            f"forks {forks(args)}, reboot {args.reboot:g}s; load average {fmt_load(os.getloadavg())}"
        )
        k8s.CoreV1Api(api).create_namespace({"metadata": {"name": NAMESPACE}})
        nodes = kwok.add_nodes(api, args.nodes, prefix="bench", labels={"bench": "rolling"})
        kwok.wait_nodes_ready(api, nodes, timeout=max(300, args.nodes / 2))  # kwok on a busy machine
        kwok.wait_until(
            lambda: k8s.CoreV1Api(api).list_namespaced_service_account(NAMESPACE).items or None, 60, "ServiceAccount"
        )
        playbook(cluster, "install", {}, 5, workdir / "install.log")
        results: dict[str, dict[str, Any]] = {}
        if args.compare:  # the other version first, then this checkout, on the same cluster
            compared = run_engine(cluster, api, "builtin", nodes, args, workdir, args.compare)
            wait_pods_gone(api)
        for engine in engines:
            if engine == "operator":
                assert operator_binary is not None
                wait_pods_gone(api)
                cluster.start_nvidia_operator(operator_binary)
            results[engine] = run_engine(cluster, api, engine, nodes, args, workdir)
        if args.compare:
            print_comparison(compared, results["builtin"], args.nodes)
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
