"""What a read-only module task costs against ``ansible.builtin.ping``: module start-up, imports, connection.

    .venv/bin/python benchmarks/module_start.py [--runs 15] [--module node_info] [--exec] [--compare DIR]

Not part of ``make test``. A tiny HTTPS stand-in for the API server on 127.0.0.1 (its own CA, made with
``cryptography``) answers the one call ``node_info`` makes (``GET /api/v1/nodes``: one Node) when the bearer
token is right. The script then runs, ``--runs`` times each and interleaved (the order turns every round, after
one warm-up round that is not counted):

* ``ping`` (the baseline): ``ansible localhost -m ansible.builtin.ping``;
* ``host+api_key``: ``ansible localhost -m nodeops.maintenance.node_info`` with ``host``, ``api_key`` and
  ``ca_cert`` in the arguments;
* ``kubeconfig``: the same module with ``kubeconfig`` naming a file (``certificate-authority-data``, ``token``);
* ``kubeconfig, exec`` (with ``--exec``): the same with an ``exec`` user (a small Python script prints the
  token), which still goes through the official ``kubernetes`` loader; the plugin's own start is in its time.

Each run is a whole command (``-c local -i localhost,``, the same interpreter), timed from launch to return;
its CPU seconds (user + system of the command and its children) are printed too, as they vary less than wall
time on a busy machine. It prints the medians and the ratios module / ping of the medians, and the load
average before and after. Target: a module task at most 1.3x ping.

``--compare DIR`` adds the two module commands with the collection found in DIR (a directory holding
``ansible_collections/nodeops/maintenance``, for example an export of an earlier commit), interleaved with the
others, so that two versions compare in the same conditions:

    mkdir -p /tmp/before/ansible_collections/nodeops/maintenance
    git archive <commit> | tar -x -C /tmp/before/ansible_collections/nodeops/maintenance
    .venv/bin/python benchmarks/module_start.py --compare /tmp/before
"""

from __future__ import annotations

import argparse
import base64
import http.server
import json
import os
import resource
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import conftest  # noqa: E402 - this checkout as the collection (ANSIBLE_COLLECTIONS_PATH)
from support.ansible_cli import BIN, clean_env  # noqa: E402
from support.node_agent import issue  # noqa: E402

TOKEN = "bench-token"
NODE = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {"name": "w1", "uid": "u-w1", "resourceVersion": "1", "labels": {"kubernetes.io/hostname": "w1"}},
    "spec": {},
    "status": {
        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
        "nodeInfo": {"bootID": "boot-1"},
        "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
    },
}


def start_api(directory: Path) -> tuple[http.server.ThreadingHTTPServer, Path, list[str]]:
    """The stand-in API server: GET /api/v1/nodes with the right token gives one Node, anything else 401/404."""
    ca = issue("bench-ca")
    cert, key = issue("127.0.0.1", ca, ips=["127.0.0.1"]).write(directory, "api")
    ca_file = ca.write(directory, "ca")[0]
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.path)
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                return self.send_json(401, {"kind": "Status", "code": 401, "reason": "Unauthorized"})
            if self.path.split("?")[0] == "/api/v1/nodes":
                return self.send_json(200, {"kind": "NodeList", "metadata": {"resourceVersion": "1"}, "items": [NODE]})
            return self.send_json(404, {"kind": "Status", "code": 404, "reason": "NotFound"})

        def send_json(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cert), str(key))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, ca_file, seen


def kubeconfig(server: str, ca_file: Path, user: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "bench", "cluster": {"server": server, "certificate-authority-data": b64(ca_file.read_bytes())}}
        ],
        "users": [{"name": "bench", "user": user}],
        "contexts": [{"name": "bench", "context": {"cluster": "bench", "user": "bench"}}],
        "current-context": "bench",
    }


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def timed(command: list[str], expect: str, env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds (user + system of the finished children) of one command, which must succeed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, env=env, check=False, timeout=300)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0 or expect not in proc.stdout:
        raise SystemExit(f"{' '.join(command[:5])} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="counted runs of each command")
    parser.add_argument("--module", default="node_info", help="module of nodeops.maintenance (read-only)")
    parser.add_argument("--exec", action="store_true", help="also an exec user (the official loader)")
    parser.add_argument("--compare", type=Path, help="also the module commands with the collection in this directory")
    args = parser.parse_args()

    env = clean_env({"ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.minimal"})
    env["ANSIBLE_COLLECTIONS_PATH"] = str(conftest.COLLECTIONS_ROOT)
    base = [str(BIN / "ansible"), "localhost", "-c", "local", "-i", "localhost,", "-m"]
    ok = '"boot_id": "boot-1"'
    with tempfile.TemporaryDirectory(prefix="nodeops-module-start-") as tmp:
        directory = Path(tmp)
        server, ca_file, seen = start_api(directory)
        url = f"https://127.0.0.1:{server.server_address[1]}"
        kc = directory / "kubeconfig"
        kc.write_text(json.dumps(kubeconfig(url, ca_file, {"token": TOKEN})))
        module = f"nodeops.maintenance.{args.module}"
        with_options = [*base, module, "-a", json.dumps({"host": url, "api_key": TOKEN, "ca_cert": str(ca_file)})]
        with_kubeconfig = [*base, module, "-a", json.dumps({"kubeconfig": str(kc)})]
        commands: dict[str, tuple[list[str], str, dict[str, str]]] = {
            "ping": ([*base, "ansible.builtin.ping"], '"ping": "pong"', env),
            "host+api_key": (with_options, ok, env),
            "kubeconfig": (with_kubeconfig, ok, env),
        }
        if args.compare:
            other = env | {"ANSIBLE_COLLECTIONS_PATH": str(args.compare.resolve())}
            commands["host+api_key (compared)"] = (with_options, ok, other)
            commands["kubeconfig (compared)"] = (with_kubeconfig, ok, other)
        if args.exec:
            plugin = directory / "plugin.py"
            credential = {"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential"}
            plugin.write_text(f"import json\nprint(json.dumps({credential | {'status': {'token': TOKEN}}!r}))\n")
            user = {"exec": {"apiVersion": credential["apiVersion"], "command": sys.executable, "args": [str(plugin)]}}
            user["exec"]["interactiveMode"] = "Never"
            exec_kc = directory / "kubeconfig-exec"
            exec_kc.write_text(json.dumps(kubeconfig(url, ca_file, user)))
            commands["kubeconfig, exec"] = ([*base, module, "-a", json.dumps({"kubeconfig": str(exec_kc)})], ok, env)
        names = list(commands)
        wall: dict[str, list[float]] = {name: [] for name in names}
        cpu: dict[str, list[float]] = {name: [] for name in names}
        load_before = os.getloadavg()
        try:
            for name in names:  # warm-up: byte-code caches, the stand-in's first handshake
                timed(*commands[name])
            for round_ in range(args.runs):
                shift = round_ % len(names)
                for name in names[shift:] + names[:shift]:
                    seconds, cpu_seconds = timed(*commands[name])
                    wall[name].append(seconds)
                    cpu[name].append(cpu_seconds)
        finally:
            server.shutdown()
        load_after = os.getloadavg()

    print(f"{args.runs} runs each, interleaved; this checkout: {conftest.COLLECTIONS_ROOT}", end="")
    print(f"; compared: {args.compare}" if args.compare else "")
    before, after = (f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}" for load in (load_before, load_after))
    print(f"load average (1, 5, 15 min) before {before}, after {after}")
    print(f"API requests answered: {len(seen)} ({', '.join(sorted({path.split('?')[0] for path in seen}))})")
    base_wall, base_cpu = statistics.median(wall["ping"]), statistics.median(cpu["ping"])
    print(f"{'command':<26}{'wall median':>13}{'wall min':>10}{'ratio':>8}{'CPU median':>13}{'ratio':>8}")
    worst = 0.0
    for name in names:
        w, c = statistics.median(wall[name]), statistics.median(cpu[name])
        print(
            f"{name:<26}{w * 1000:>10.0f} ms{min(wall[name]) * 1000:>7.0f} ms{w / base_wall:>7.2f}x"
            f"{c * 1000:>10.0f} ms{c / base_cpu:>7.2f}x"
        )
        if name in ("host+api_key", "kubeconfig"):
            worst = max(worst, w / base_wall)
    print(f"target: module / ping <= 1.30x (wall medians); worst of host+api_key and kubeconfig: {worst:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
