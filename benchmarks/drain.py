"""Drain a node running 100 pods three ways, on the real test control plane, and compare the times.

The three ways, each on its own fresh node (same labels, same Deployment of ``--pods`` pods, all Running):

1. ``nodeops.maintenance.drain`` (this checkout);
2. ``kubectl drain --ignore-daemonsets --delete-emptydir-data`` built from the same Kubernetes release as the
   control plane, with its default flags (what users run; see the README for its client-side rate limit);
3. ``kubernetes.core.k8s_drain`` from the ``ansible`` package installed in the project venv (its version is
   printed), with ``delete_options.wait_timeout`` so that it, too, returns only once the pods are gone
   (without it, it returns right after its last eviction call), and ``wait_sleep: 1``.

Both Ansible modules run with the project venv's ``ansible``/``ansible-playbook`` and the same Python.
Every round measures, on five fresh nodes:

* whole commands: ``ansible localhost -m <module>`` for each module, and ``kubectl drain``; each wall time
  is from launch to return (process start-up included) with every pod gone;
* in-process task times: ONE ``ansible-playbook`` process drains two more nodes, one with each module;
  the ``ansible.posix.json`` callback times each drain task (task start to result, so the module's own
  process start and imports are in, the ``ansible-playbook`` start-up is not). A ``ping`` task runs first,
  and the two drains swap places every round.

Each drained Deployment is scaled to 0 right after its drain, outside the timings, and its pods are waited
for, so that its Pending replacements (created, then deleted, by the ReplicaSet controller) do not load the
control plane during the next drain. A watch on the pods records, for every drain, when the last eviction
landed (last pod terminating), when the node was empty, and how long kwok took from "terminating" to
"gone" (its deletion throughput bounds the fastest drain). For the whole commands it also prints the CPU
seconds of the command and of the control plane meanwhile, and each round starts with the load average:
other jobs on the machine slow our drain (CPU-bound) far more than the other two (which mostly wait), so
compare the ratios of quiet rounds.

    .venv/bin/python benchmarks/drain.py [--pods 100] [--rounds 1]

Not a test, and not part of ``make test``. Needs the control-plane binaries (``make binaries``).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.metadata
import json
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import conftest as _collection_path  # noqa: E402,F401 - makes this checkout the nodeops.maintenance collection
from cluster import kwok  # noqa: E402
from cluster.build import build  # noqa: E402
from cluster.launcher import Cluster  # noqa: E402
from kubernetes import client as k8s  # noqa: E402
from kubernetes.watch.watch import iter_resp_lines  # noqa: E402
from support.ansible_cli import clean_env  # noqa: E402

WORKDIR = ROOT / ".build" / "bench-cluster"
BIN = Path(sys.executable).parent
# Quiet time before each drain, after the previous drain's Deployment is scaled to 0 (and after populating).
SETTLE_SECONDS = 1
OURS, KUBECTL, K8S_DRAIN = "nodeops.maintenance.drain", "kubectl drain", "kubernetes.core.k8s_drain"


def versions() -> dict[str, str]:
    """Versions of the ansible package (and its kubernetes.core), ansible-core and the kubernetes client."""
    manifest = importlib.metadata.distribution("ansible").locate_file(
        "ansible_collections/kubernetes/core/MANIFEST.json"
    )
    return {
        "ansible": importlib.metadata.version("ansible"),
        "ansible-core": importlib.metadata.version("ansible-core"),
        "kubernetes.core": json.loads(Path(str(manifest)).read_text())["collection_info"]["version"],
        "kubernetes": importlib.metadata.version("kubernetes"),
    }


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


def scale_to_zero(api: k8s.ApiClient, namespace: str, node: str) -> None:
    """Scale the node's Deployment to 0 and wait until its pods are gone, then let the control plane settle.

    The drained pods' replacements are Pending (their node is cordoned); the ReplicaSet controller creates
    and then deletes them at its own client rate (20 requests/s by default), which would overlap the next
    drain if it were not waited for.
    """
    k8s.AppsV1Api(api).patch_namespaced_deployment_scale(f"bench-{node}", namespace, {"spec": {"replicas": 0}})
    core = k8s.CoreV1Api(api)
    kwok.wait_until(
        lambda: not core.list_namespaced_pod(namespace, label_selector=f"app=bench-{node}", limit=1).items,
        120,
        f"the pods of bench-{node} gone",
    )
    time.sleep(SETTLE_SECONDS)


class Timeline:
    """Watches the namespace's pods: per pod, its node, when it became terminating and when it was gone.

    Raw JSON lines (no generated models), so that it costs little CPU beside the drains. Times are
    ``time.time()`` (the same clock as the timestamps of the ansible.posix.json callback).
    """

    def __init__(self, api: k8s.ApiClient, namespace: str) -> None:
        core = k8s.CoreV1Api(api)
        listing = json.loads(core.list_namespaced_pod(namespace, _preload_content=False).data)
        self.terminating: dict[str, tuple[str, float]] = {}
        self.gone: dict[str, tuple[str, float]] = {}
        self._resp = core.list_namespaced_pod(
            namespace,
            watch=True,
            resource_version=listing["metadata"]["resourceVersion"],
            timeout_seconds=3600,
            _preload_content=False,
        )
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for line in iter_resp_lines(self._resp):
                now = time.time()
                event = json.loads(line)
                obj = event.get("object") or {}
                uid, node = obj["metadata"].get("uid"), (obj.get("spec") or {}).get("nodeName") or ""
                if obj["metadata"].get("deletionTimestamp") or event["type"] == "DELETED":
                    self.terminating.setdefault(uid, (node, now))
                if event["type"] == "DELETED":
                    self.gone[uid] = (node, now)
        except Exception:  # closed by stop(), or the watch ended: the summaries say what was seen
            return

    def stop(self) -> None:
        # Not close(): it would wait for the reading thread's lock, i.e. for the next pod event.
        try:
            self._resp.shutdown()  # urllib3 >= 2.3: ends the blocked read
        except (AttributeError, RuntimeError, ValueError):
            return  # the daemon thread stays until the process exits
        self._thread.join(5)

    def summary(self, node: str, start: float) -> str:
        """When, after ``start``, the node's last pod became terminating and was gone, and kwok's lag."""
        time.sleep(0.3)  # let the watch deliver the last events
        gone = {uid: t for uid, (n, t) in list(self.gone.items()) if n == node}
        if not gone:
            return "no deletion seen"
        last_terminating = max(t for n, t in list(self.terminating.values()) if n == node)
        lags = [gone[uid] - self.terminating[uid][1] for uid in gone if uid in self.terminating]
        return (
            f"last eviction landed +{last_terminating - start:.2f}s, node empty +{max(gone.values()) - start:.2f}s, "
            f"kwok terminating->gone median {statistics.median(lags):.2f}s max {max(lags):.2f}s"
        )


class CpuMeter:
    """CPU seconds used by the control-plane processes (``pids.json``) and by this script's finished children.

    Our drain keeps both CPUs busy for its whole length while the other two mostly wait (on a client-side
    rate limit, on one eviction at a time), so this shows how much other jobs on the machine can slow it.
    """

    def __init__(self, workdir: Path) -> None:
        data = json.loads((workdir / "pids.json").read_text())
        self.pids = [p["pid"] for p in data["processes"]]
        self.tick = os.sysconf("SC_CLK_TCK")

    def sample(self) -> tuple[float, float]:
        plane = 0.0
        for pid in self.pids:
            with contextlib.suppress(OSError):
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                plane += (int(fields[11]) + int(fields[12])) / self.tick  # utime + stime
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return usage.ru_utime + usage.ru_stime, plane


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float, subprocess.CompletedProcess[str]]:
    """(wall-clock start, seconds, process)."""
    wall, started = time.time(), time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900, check=False)
    return wall, time.monotonic() - started, proc


def check_drained(core: k8s.CoreV1Api, node: str, how: str, proc: subprocess.CompletedProcess[str]) -> None:
    left = [p.metadata.name for p in pods_on(core, node) if not p.metadata.deletion_timestamp]
    if proc.returncode != 0 or left:
        raise SystemExit(
            f"[bench] {how} did not drain {node}: rc={proc.returncode}, {len(left)} pods left\n"
            f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
        )


def module_args(module: str, node: str, kubeconfig: str) -> dict[str, Any]:
    args: dict[str, Any] = {"name": node, "kubeconfig": kubeconfig}
    if module == K8S_DRAIN:
        args["delete_options"] = {"wait_timeout": 300, "wait_sleep": 1}
    return args


def whole_commands(
    cluster: Cluster, api: k8s.ApiClient, namespace: str, nodes: dict[str, str], order: list[str], timeline: Timeline
) -> tuple[dict[str, float], float | None]:
    """Each way as its own command; returns the wall times and our module's own ``seconds``."""
    core, kubeconfig = k8s.CoreV1Api(api), str(cluster.kubeconfig)
    meter = CpuMeter(cluster.workdir)
    times: dict[str, float] = {}
    engine = None
    for how in order:
        node = nodes[how]
        if how == KUBECTL:
            cmd = [str(cluster.bindir / "kubectl"), "--kubeconfig", kubeconfig, "drain", node]
            cmd += ["--ignore-daemonsets", "--delete-emptydir-data", "--timeout=300s"]
        else:
            cmd = [str(BIN / "ansible"), "localhost", "-c", "local", "-i", "localhost,", "-m", how]
            cmd += ["-a", json.dumps(module_args(how, node, kubeconfig))]
        before = meter.sample()
        wall, times[how], proc = timed(cmd, clean_env())
        own, plane = (after - first for after, first in zip(meter.sample(), before, strict=True))
        check_drained(core, node, how, proc)
        if how == OURS:
            line = next((x for x in proc.stdout.splitlines() if x.startswith("{")), "{}")
            engine = json.loads(line).get("result", {}).get("seconds")
        print(
            f"[bench]   command {how:26} {times[how]:6.2f}s  ({timeline.summary(node, wall)}; "
            f"CPU: command {own:.2f}s, control plane {plane:.2f}s)",
            flush=True,
        )
        scale_to_zero(api, namespace, node)
    return times, engine


def _utc(stamp: str) -> float:
    return datetime.datetime.fromisoformat(stamp.rstrip("Z")).replace(tzinfo=datetime.UTC).timestamp()


def playbook_tasks(
    cluster: Cluster, api: k8s.ApiClient, namespace: str, nodes: dict[str, str], order: list[str], timeline: Timeline
) -> tuple[dict[str, float], float | None]:
    """Both modules in ONE ansible-playbook process; returns each drain task's time and our ``seconds``."""
    core, kubeconfig = k8s.CoreV1Api(api), str(cluster.kubeconfig)
    kubectl = str(cluster.bindir / "kubectl")
    tasks: list[dict[str, Any]] = [{"name": "warm-up", "ansible.builtin.ping": {}}]
    for how in order:
        tasks.append({"name": f"drain {how}", how: module_args(how, nodes[how], kubeconfig)})
        # untimed, as scale_to_zero(): keep the drained Deployment's replacements out of the next drain
        base = [kubectl, "--kubeconfig", kubeconfig, "-n", namespace]
        scale = [*base, "scale", f"deployment/bench-{nodes[how]}", "--replicas=0"]
        pods_left = [*base, "get", "pods", "-l", f"app=bench-{nodes[how]}", "-o", "name"]
        tasks += [
            {"name": f"scale {how}", "ansible.builtin.command": {"argv": scale}},
            {
                "name": f"wait for the pods of {how}",
                "ansible.builtin.command": {"argv": pods_left},
                "register": "left",
                "until": "left.stdout == ''",
                "retries": 120,
                "delay": 1,
                "changed_when": False,
            },
            {"name": f"settle after {how}", "ansible.builtin.wait_for": {"timeout": SETTLE_SECONDS}},
        ]
    play = [{"name": "drain", "hosts": "localhost", "gather_facts": False, "tasks": tasks}]
    playbook = WORKDIR / "drain-playbook.yml"
    playbook.write_text(json.dumps(play, indent=1))  # JSON is YAML
    env = clean_env({"ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json"})
    cmd = [str(BIN / "ansible-playbook"), "-c", "local", "-i", "localhost,", str(playbook)]
    _started, seconds, proc = timed(cmd, env)
    try:
        results = {t["task"]["name"]: t for t in json.loads(proc.stdout)["plays"][0]["tasks"]}
    except (ValueError, KeyError, IndexError):
        results = {}
    times: dict[str, float] = {}
    engine = None
    for how in order:
        check_drained(core, nodes[how], f"{how} (playbook)", proc)
        task = results[f"drain {how}"]
        duration = task["task"]["duration"]
        start = _utc(duration["start"])
        times[how] = _utc(duration["end"]) - start
        if how == OURS:
            engine = task["hosts"]["localhost"].get("seconds")
        print(f"[bench]   task    {how:26} {times[how]:6.2f}s  ({timeline.summary(nodes[how], start)})", flush=True)
    print(f"[bench]   (the whole ansible-playbook run, ping and scale tasks included: {seconds:.2f}s)")
    return times, engine


def run_round(cluster: Cluster, api: k8s.ApiClient, pods: int, index: int) -> dict[str, float]:
    core = k8s.CoreV1Api(api)
    tag = uuid.uuid4().hex[:6]
    capacity = {"pods": str(max(110, pods))}  # kwok's default node capacity is 110 pods
    names = kwok.add_nodes(api, 5, prefix=f"bench-{tag}", labels={"bench": tag}, capacity=capacity)
    namespace = f"bench-{tag}"
    core.create_namespace({"metadata": {"name": namespace}})
    timeline = None
    try:
        kwok.wait_nodes_ready(api, names, timeout=60)
        populate(api, namespace, names, pods)
        time.sleep(2 * SETTLE_SECONDS)
        timeline = Timeline(api, namespace)
        row: dict[str, float] = {}
        ways = [OURS, KUBECTL, K8S_DRAIN]
        order = ways[index % 3 :] + ways[: index % 3]  # a different order every round
        times, engine = whole_commands(cluster, api, namespace, dict(zip(ways, names, strict=False)), order, timeline)
        row.update({f"command {k}": v for k, v in times.items()})
        if engine is not None:
            row[f"command {OURS}, module's own seconds"] = engine
        pair = [OURS, K8S_DRAIN] if index % 2 == 0 else [K8S_DRAIN, OURS]
        times, engine = playbook_tasks(cluster, api, namespace, {OURS: names[3], K8S_DRAIN: names[4]}, pair, timeline)
        row.update({f"task {k}": v for k, v in times.items()})
        if engine is not None:
            row[f"task {OURS}, module's own seconds"] = engine
        return row
    finally:
        if timeline is not None:
            timeline.stop()
        core.delete_namespace(namespace)
        kwok.delete_nodes(api, names, wait=False)


TARGETS = {"ours / kubectl drain": "(target <= 1.1x)", "k8s_drain / ours": "(target >= 10x)"}


def ratios(row: dict[str, float]) -> dict[str, float]:
    """The two ratios against kubectl drain, for whole commands and for in-process task times."""
    out = {}
    for what in ("command", "task"):
        ours = row[f"{what} {OURS}"]
        out[f"{what}: ours / kubectl drain"] = ours / row[f"command {KUBECTL}"]
        out[f"{what}: k8s_drain / ours"] = row[f"{what} {K8S_DRAIN}"] / ours
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=100, help="pods on each drained node (default 100)")
    parser.add_argument("--rounds", type=int, default=1, help="repeat on fresh nodes; medians are printed")
    args = parser.parse_args()

    found = versions()
    cluster = Cluster(WORKDIR, build()).start()
    results: dict[str, list[float]] = {}
    round_ratios: dict[str, list[float]] = {}
    try:
        print(f"[bench] Kubernetes {cluster.k8s_version}; kubectl from {cluster.bindir}")
        print(
            f"[bench] kubernetes.core {found['kubernetes.core']} (ansible {found['ansible']}, "
            f"ansible-core {found['ansible-core']}, kubernetes client {found['kubernetes']}; project venv)"
        )
        api = kwok.api_client(cluster.kubeconfig_token)
        for index in range(args.rounds):
            load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
            busy = " - busy machine, expect noise" if os.getloadavg()[0] > (os.cpu_count() or 1) else ""
            print(f"[bench] round {index + 1} (load average {load} on {os.cpu_count()} CPUs{busy})", flush=True)
            row = run_round(cluster, api, args.pods, index)
            for key, value in row.items():
                results.setdefault(key, []).append(value)
            for key, value in ratios(row).items():
                round_ratios.setdefault(key, []).append(value)
            print("[bench]   ratios: " + ", ".join(f"{k} {v:.2f}x" for k, v in ratios(row).items()), flush=True)
            print(f"[bench]   (load average {os.getloadavg()[0]:.1f} at the end of the round)", flush=True)
    finally:
        cluster.stop()

    median = {key: statistics.median(values) for key, values in results.items()}
    core_version = found["kubernetes.core"]
    print(f"\nDrain of a node with {args.pods} pods, median of {args.rounds} round(s), kubernetes.core {core_version}:")
    for key, value in median.items():
        print(f"  {key:58} {value:7.2f} s")
    of_medians = ratios(median)
    per_round = {key: statistics.median(values) for key, values in round_ratios.items()}
    print("Ratios (of the medians; median of the per-round ratios in brackets):")
    for key, value in of_medians.items():
        print(f"  {key:58} {value:6.2f}x  [{per_round[key]:5.2f}x]  {TARGETS[key.split(':')[1].strip()]}")
    print(
        "  (kubectl has one measurement, its whole command, used in both: as a Go binary it starts in about 0.04 s;\n"
        "   a task time has the module's own process start and imports, not ansible-playbook's start-up)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
