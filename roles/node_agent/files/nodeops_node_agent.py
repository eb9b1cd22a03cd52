# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""nodeops node agent: feeds the watchdog while the node is healthy, fences it when it is not.

Runs on the node's system Python 3 (3.9 or newer) with the standard library only; the decisions and
the safe-time arithmetic come from the collection's pure core (``plugins/module_utils/core``), which
the role installs next to this file as the package ``nodeops_core``. Run from a checkout of the
collection, the core is found there. Semantics of medik8s Self Node Remediation's agent (reference
A.2): an API check every apiCheckInterval; after maxApiErrorThreshold failures the peers are asked
over HTTPS with mutual TLS (TLS 1.3, one CA) whether a remediation exists for this node; the
decision table is ``nodeops_core.peer``. Fencing = stop feeding the watchdog, then, if the node still
runs after the watchdog's timeout plus a margin, the software reboot (reboot command, then sysrq).

Usage: ``python3 nodeops_node_agent.py --config /etc/nodeops-node-agent/config.json [--check-config]``.
The peer protocol: ``GET /v1/health`` over mutual TLS; the asking node is the common name of its
client certificate (so a peer can only ask about itself), the answer ``{"status": 1|2|3}`` (Healthy,
Unhealthy, ApiError).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import importlib.util
import json
import logging
import os
import signal
import socket
import socketserver
import ssl
import struct
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import Any

LOG = logging.getLogger("nodeops-node-agent")
SNR_PATH = "/apis/self-node-remediation.medik8s.io/v1alpha1"
PEER_PATH = "/v1/health"
WDIOC_GETTIMEOUT = 0x80045707  # _IOR('W', 7, int)
MAX_PEER_CONNECTIONS = 32
PEER_SERVER_IO_TIMEOUT = 5.0
MAX_REQUEST_BYTES = 8192
MAX_RESPONSE_BYTES = 65536
PEER_RETRY_SECONDS = 120.0  # a failed peer-list refresh is retried this often (upstream: 2 min)
SYSRQ_AFTER_COMMAND_SECONDS = 60.0  # the reboot command "worked" but the node still runs


def load_core(directory: str | None = None) -> dict[str, ModuleType]:
    """Import the core as the package ``nodeops_core``: next to this file (installed by the role) or
    in the collection checkout this file sits in."""
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [directory] if directory else []
    candidates += [
        os.path.join(here, "nodeops_core"),
        os.path.join(here, "..", "..", "..", "plugins", "module_utils", "core"),
    ]
    for path in candidates:
        init = os.path.join(path, "__init__.py")
        if os.path.isfile(init):
            if "nodeops_core" not in sys.modules:
                spec = importlib.util.spec_from_file_location(
                    "nodeops_core", init, submodule_search_locations=[os.path.abspath(path)]
                )
                if spec is None or spec.loader is None:
                    continue
                package = importlib.util.module_from_spec(spec)
                sys.modules["nodeops_core"] = package
                spec.loader.exec_module(package)
            from nodeops_core import agentconfig, peer, safetime

            return {"agentconfig": agentconfig, "peer": peer, "safetime": safetime}
    raise SystemExit(f"nodeops-node-agent: the core files are missing (looked in {', '.join(candidates)})")


# -- HTTPS with a chosen TLS name ----------------------------------------------------------------
def https_request(
    address: tuple[str, int],
    tls_name: str,
    context: ssl.SSLContext,
    path: str,
    timeout: float,
    headers: dict[str, str] | None = None,
    dial_timeout: float | None = None,
) -> tuple[int, bytes]:
    """One GET over a new TLS connection, the certificate checked against ``tls_name``; the whole
    exchange ends within ``timeout`` seconds (after the connection, made within ``dial_timeout``)."""
    sock = socket.create_connection(address, timeout=dial_timeout or timeout)
    try:
        deadline = time.monotonic() + timeout
        sock.settimeout(timeout)
        tls = context.wrap_socket(sock, server_hostname=tls_name)
        sock = tls
        lines = [f"GET {path} HTTP/1.1", f"Host: {tls_name}", "Connection: close", "Accept: application/json"]
        lines += [f"{key}: {value}" for key, value in (headers or {}).items()]
        tls.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("ascii"))
        data = b""
        while len(data) <= MAX_RESPONSE_BYTES:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the answer took too long")
            tls.settimeout(left)
            chunk = tls.recv(16384)
            if not chunk:
                break
            data += chunk
    finally:
        sock.close()
    head, _sep, body = data.partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n", 1)[0].split()
    if len(status_line) < 2 or not status_line[1].isdigit():
        raise ValueError("not an HTTP answer")
    if b"transfer-encoding: chunked" in head.lower():
        body = _unchunk(body)
    return int(status_line[1]), body


def _unchunk(body: bytes) -> bytes:
    out = b""
    while body:
        size_text, _sep, rest = body.partition(b"\r\n")
        size = int(size_text.split(b";")[0] or b"0", 16)
        if size == 0:
            break
        out += rest[:size]
        body = rest[size + 2 :]
    return out


class ApiClient:
    """The few Kubernetes API reads of the agent: /readyz, its own Node, SelfNodeRemediations."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        url = urllib.parse.urlsplit(cfg["apiServer"])
        self.address = (url.hostname or "", url.port or 443)
        self.tls_name = cfg["apiServerName"] or (url.hostname or "")
        self.token_file = cfg["tokenFile"]
        self.namespace = cfg["remediationNamespace"]
        self.context = ssl.create_default_context(cafile=cfg["caFile"])

    def get(self, path: str, timeout: float) -> tuple[int, bytes]:
        with open(self.token_file, encoding="utf-8") as handle:
            token = handle.read().strip()
        return https_request(
            self.address, self.tls_name, self.context, path, timeout, {"Authorization": f"Bearer {token}"}
        )

    def ready(self, timeout: float) -> bool:
        try:
            status = self.get("/readyz?exclude=shutdown", timeout)[0]
        except (OSError, ValueError, ssl.SSLError) as err:
            LOG.debug("API check failed: %s", err)
            return False
        return status == 200

    def remediations(self, timeout: float) -> list[dict[str, Any]]:
        """Every SelfNodeRemediation (of the configured namespace, or of all). Raises on any error."""
        path = (
            f"{SNR_PATH}/namespaces/{self.namespace}/selfnoderemediations"
            if self.namespace
            else (f"{SNR_PATH}/selfnoderemediations")
        )
        status, body = self.get(path, timeout)
        if status != 200:
            raise OSError(f"listing SelfNodeRemediations answered HTTP {status}")
        items = json.loads(body).get("items") or []
        return [item for item in items if isinstance(item, dict)]

    def node(self, name: str, timeout: float) -> dict[str, Any]:
        status, body = self.get(f"/api/v1/nodes/{urllib.parse.quote(name)}", timeout)
        if status != 200:
            raise OSError(f"reading node {name} answered HTTP {status}")
        result: dict[str, Any] = json.loads(body)
        return result


# -- watchdog ------------------------------------------------------------------------------------
class Watchdog:
    """The watchdog device: fed every third of its timeout until fencing stops it."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.path: str = cfg["watchdogFilePath"]
        self.fallback_timeout = float(cfg["watchdogTimeoutSeconds"])
        self.softdog = cfg["softdogModule"]
        self.fd: int | None = None
        self.timeout = self.fallback_timeout
        self.feeding = False
        self.last_feed = 0.0
        self.lock = threading.Lock()

    def open(self) -> bool:
        if not os.path.exists(self.path) and self.softdog and self.path.startswith("/dev/"):
            LOG.info("watchdog %s is missing; loading softdog", self.path)
            try:
                subprocess.run(["modprobe", "softdog"], check=False, capture_output=True, timeout=30)
            except (OSError, subprocess.SubprocessError) as err:
                LOG.warning("cannot load softdog: %s", err)
        if not os.path.exists(self.path):
            LOG.warning("no watchdog at %s", self.path)
            return False
        try:
            self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
        except OSError as err:
            LOG.warning("cannot open the watchdog %s: %s", self.path, err)
            return False
        try:
            raw = fcntl.ioctl(self.fd, WDIOC_GETTIMEOUT, struct.pack("i", 0))
            seconds = struct.unpack("i", raw)[0]
            if seconds > 0:
                self.timeout = float(seconds)
        except OSError:
            LOG.info("watchdog %s reports no timeout; using %gs", self.path, self.fallback_timeout)
        self.feeding = True
        self.feed()
        LOG.info("watchdog %s armed, timeout %gs, fed every %gs", self.path, self.timeout, self.timeout / 3)
        return True

    @property
    def armed(self) -> bool:
        return self.fd is not None

    def feed(self) -> None:
        with self.lock:
            if self.fd is not None and self.feeding:
                os.write(self.fd, b"\0")
                self.last_feed = time.monotonic()

    def stop_feeding(self) -> None:
        with self.lock:
            self.feeding = False

    def disarm(self) -> None:
        """Magic close: the watchdog stops without resetting the node (only while still fed)."""
        with self.lock:
            if self.fd is not None and self.feeding:
                os.write(self.fd, b"V")
                os.close(self.fd)
                self.fd = None
                LOG.info("watchdog disarmed")


# -- peer server ---------------------------------------------------------------------------------
class PeerServer(socketserver.ThreadingMixIn, socketserver.TCPServer):
    """Answers ``GET /v1/health`` from peers with a client certificate of the peer CA."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64

    def __init__(self, address: tuple[str, int], context: ssl.SSLContext, answer: Callable[[str], int]) -> None:
        self.context = context
        self.answer = answer
        self.slots = threading.BoundedSemaphore(MAX_PEER_CONNECTIONS)
        self.rejected = 0
        self.answered = 0
        super().__init__(address, PeerHandler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            self.shutdown_request(request)
            self.rejected += 1
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def finish_request(self, request: Any, client_address: Any) -> None:
        request.settimeout(PEER_SERVER_IO_TIMEOUT)
        try:
            tls = self.context.wrap_socket(request, server_side=True)
        except (OSError, ValueError) as err:
            self.rejected += 1
            LOG.debug("peer connection from %s refused: %s", client_address[0], err)
            return
        try:
            PeerHandler(tls, client_address, self)
        finally:
            with contextlib.suppress(OSError):
                tls.close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        self.rejected += 1
        LOG.debug("peer request from %s failed: %s", client_address[0], sys.exc_info()[1])


class PeerHandler(socketserver.BaseRequestHandler):
    server: PeerServer

    def handle(self) -> None:
        tls: ssl.SSLSocket = self.request
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = tls.recv(4096)
            if not chunk:
                return
            data += chunk
            if len(data) > MAX_REQUEST_BYTES:
                self._send(431, {"error": "request too large"})
                return
        request_line = data.split(b"\r\n", 1)[0].split()
        if len(request_line) != 3 or request_line[0] != b"GET" or request_line[1] != PEER_PATH.encode():
            self._send(404, {"error": "only GET /v1/health"})
            return
        asker = _common_name(tls.getpeercert())
        if not asker:
            self._send(403, {"error": "no node name in the certificate"})
            return
        status = self.server.answer(asker)
        self.server.answered += 1
        self._send(200, {"status": status})

    def _send(self, code: int, body: dict[str, Any]) -> None:
        text = json.dumps(body).encode()
        head = f"HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {len(text)}\r\n"
        self.request.sendall(head.encode() + b"Connection: close\r\n\r\n" + text)


def _common_name(cert: Any) -> str:
    for rdn in (cert or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return ""


def server_context(cfg: dict[str, Any]) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    context.verify_mode = ssl.CERT_REQUIRED
    context.load_verify_locations(cafile=cfg["peerCaFile"])
    context.load_cert_chain(cfg["peerCertFile"], cfg["peerKeyFile"])
    return context


def client_context(cfg: dict[str, Any]) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    context.load_verify_locations(cafile=cfg["peerCaFile"])
    context.load_cert_chain(cfg["peerCertFile"], cfg["peerKeyFile"])
    return context


# -- the agent -----------------------------------------------------------------------------------
def boot_time() -> datetime:
    """When the node booted (from /proc/uptime), timezone-aware."""
    with open("/proc/uptime", encoding="ascii") as handle:
        uptime = float(handle.read().split()[0])
    return datetime.now(UTC) - timedelta(seconds=uptime)


class Agent:
    def __init__(self, cfg: dict[str, Any], core: dict[str, ModuleType]) -> None:
        self.cfg = cfg
        self.peer = core["peer"]
        self.safetime = core["safetime"]
        self.node = cfg["nodeName"]
        self.api = ApiClient(cfg)
        self.watchdog = Watchdog(cfg)
        self.stop = threading.Event()
        self.client_context = client_context(cfg)
        self.server: PeerServer | None = None
        self.error_count = 0
        self.last_answer = time.monotonic()  # as upstream: counted from the agent's start
        self.peers: list[dict[str, Any]] = []
        self.peers_loaded_at = -1e9
        self.peers_ok = False
        self.control_plane = False
        self.fenced = False
        self.fence_reason = ""
        self.fenced_uids: list[str] = []
        self.fenced_at = 0.0
        self.software_reboot_done = False
        self.state = "starting"
        self.last_verdict: dict[str, Any] | None = None
        self.checks = 0
        self.verdicts: dict[str, int] = {}
        self.boot = boot_time()
        self.request_timeout = self.safetime.effective_peer_request_timeout(
            cfg["peerRequestTimeout"], cfg["apiServerTimeout"]
        )

    # peers
    def refresh_peers(self) -> None:
        try:
            with open(self.cfg["peersFile"], encoding="utf-8") as handle:
                entries = json.load(handle)
            peers = [
                {
                    "name": str(entry["name"]),
                    "address": str(entry["address"]),
                    "port": int(entry.get("port", self.cfg["hostPort"])),
                    "worker": bool(entry.get("worker", True)),
                    "controlPlane": bool(entry.get("controlPlane", False)),
                }
                for entry in entries
                if entry.get("name") != self.node
            ]
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
            LOG.warning("cannot read the peer list %s: %s", self.cfg["peersFile"], err)
            self.peers_ok = False
            return
        self.peers = peers
        self.peers_ok = True
        try:
            node = self.api.node(self.node, self.cfg["peerApiServerTimeout"])
            self.control_plane = self.peer.node_is_control_plane(node)
        except (OSError, ValueError, ssl.SSLError) as err:
            LOG.info("cannot read node %s (keeping role %s): %s", self.node, self._role(), err)
        LOG.info(
            "%d peers (%d workers, %d control-plane); this node is a %s",
            len(peers),
            len(self.worker_peers()),
            len(self.control_plane_peers()),
            self._role(),
        )

    def _role(self) -> str:
        return "control-plane node" if self.control_plane else "worker"

    def worker_peers(self) -> list[dict[str, Any]]:
        return [p for p in self.peers if p["worker"]]

    def control_plane_peers(self) -> list[dict[str, Any]]:
        return [p for p in self.peers if p["controlPlane"]]

    def ask(self, peer: dict[str, Any]) -> int:
        try:
            status, body = https_request(
                (peer["address"], peer["port"]),
                peer["name"],
                self.client_context,
                PEER_PATH,
                self.request_timeout,
                dial_timeout=self.cfg["peerDialTimeout"],
            )
            answer = json.loads(body).get("status") if status == 200 else None
        except (OSError, ValueError, ssl.SSLError, AttributeError) as err:
            LOG.debug("peer %s did not answer: %s", peer["name"], err)
            return int(self.peer.REQUEST_FAILED)
        if answer in (self.peer.HEALTHY, self.peer.UNHEALTHY, self.peer.API_ERROR):
            return int(answer)
        return int(self.peer.REQUEST_FAILED)

    def ask_all(self, peers: list[dict[str, Any]]) -> list[int]:
        results = [int(self.peer.REQUEST_FAILED)] * len(peers)

        def one(index: int) -> None:
            results[index] = self.ask(peers[index])

        threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(len(peers))]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + self.cfg["peerDialTimeout"] + self.request_timeout + 0.5
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        answers = list(results)
        if any(a != self.peer.REQUEST_FAILED for a in answers):
            self.last_answer = time.monotonic()
        return answers

    def answer_peer(self, asker: str) -> int:
        """The answer to a peer (identified by its certificate) asking about itself."""
        try:
            items = self.api.remediations(self.cfg["apiServerTimeout"])
        except (OSError, ValueError, ssl.SSLError) as err:
            LOG.info("peer %s asked; the API cannot be read: %s", asker, err)
            return int(self.peer.API_ERROR)
        answer = int(self.peer.peer_answer(items, asker))
        LOG.info("peer %s asked: %s", asker, self.peer.ANSWER_NAMES[answer])
        return answer

    # decisions
    def decide(self) -> Any:
        workers = self.worker_peers()
        sizes = self.safetime.peer_batches(len(workers))
        since = time.monotonic() - self.last_answer

        def batches() -> Any:
            start = 0
            for size in sizes:
                yield self.ask_all(workers[start : start + size])
                start += size

        verdict = self.peer.worker_verdict(
            self.error_count,
            self.cfg["maxApiErrorThreshold"],
            len(workers),
            self.cfg["minPeersForRemediation"],
            batches(),
            since,
        )
        if self.control_plane:
            cp_answers = self.ask_all(self.control_plane_peers())
            verdict = self.peer.control_plane_verdict(verdict, cp_answers, self.diagnostics_ok())
        return verdict

    def diagnostics_ok(self) -> bool:
        """Control-plane self-diagnostics: the configured endpoint answers and the kubelet port accepts."""
        url = self.cfg["endpointHealthCheckUrl"]
        if url:
            parts = urllib.parse.urlsplit(url)
            port = parts.port or (443 if parts.scheme == "https" else 80)
            try:
                socket.create_connection((parts.hostname or "", port), timeout=5).close()
            except OSError:
                return False
        try:
            socket.create_connection(("127.0.0.1", 10250), timeout=5).close()
        except OSError:
            return False
        return True

    def check_once(self) -> None:
        self.checks += 1
        timeout = self.cfg["apiServerTimeout"]
        if self.api.ready(timeout):
            if self.error_count:
                LOG.info("API server reachable again after %d failed checks", self.error_count)
            self.error_count = 0
            self.state = "fenced" if self.fenced else "healthy"
            try:
                items = self.api.remediations(timeout)
            except (OSError, ValueError, ssl.SSLError) as err:
                LOG.info("cannot list SelfNodeRemediations: %s", err)
                return
            item = self.peer.remediation_to_act_on(items, self.node, self.boot, self.fenced_uids)
            if item is not None:
                meta = item.get("metadata") or {}
                self.fenced_uids.append(str(meta.get("uid", "")))
                self.fence(f"SelfNodeRemediation {meta.get('namespace')}/{meta.get('name')} is for this node")
            return
        self.error_count += 1
        if self.fenced:
            return
        verdict = self.decide()
        self.last_verdict = verdict.as_dict()
        self.verdicts[verdict.code] = self.verdicts.get(verdict.code, 0) + 1
        if verdict.reset_errors:
            self.error_count = 0
        level = logging.WARNING if verdict.fence else logging.INFO
        LOG.log(level, "API check failed (%d in a row): %s: %s", self.error_count, verdict.code, verdict.reason)
        self.state = "api-errors"
        if verdict.fence:
            self.fence(verdict.reason)

    def fence(self, reason: str) -> None:
        if self.fenced:
            return
        self.fenced = True
        self.fenced_at = time.monotonic()
        self.fence_reason = reason
        self.state = "fenced"
        if self.watchdog.armed:
            self.watchdog.stop_feeding()
            LOG.warning("FENCING: %s; the watchdog is no longer fed (reset in %gs)", reason, self.watchdog.timeout)
        else:
            LOG.warning("FENCING: %s; no watchdog, software reboot now", reason)
            self.software_reboot()
        self.write_status()

    def software_reboot(self) -> None:
        if self.software_reboot_done or not self.cfg["isSoftwareRebootEnabled"]:
            return
        self.software_reboot_done = True
        command = self.cfg["rebootCommand"]
        LOG.warning("software reboot: %s", " ".join(command))
        try:
            result = subprocess.run(command, check=False, capture_output=True, timeout=30)
            ok = result.returncode == 0
        except (OSError, subprocess.SubprocessError) as err:
            LOG.error("the reboot command failed: %s", err)
            ok = False
        if not ok:
            self.sysrq()

    def sysrq(self) -> None:
        LOG.error("reboot through %s", self.cfg["sysrqTriggerPath"])
        try:
            with open(self.cfg["sysrqTriggerPath"], "w", encoding="ascii") as handle:
                handle.write("b")
        except OSError as err:
            LOG.error("sysrq reboot failed: %s", err)

    def write_status(self) -> None:
        path = self.cfg["statusFile"]
        status = {
            "node": self.node,
            "state": self.state,
            "fenced": self.fenced,
            "fence_reason": self.fence_reason,
            "api_errors": self.error_count,
            "control_plane": self.control_plane,
            "peers": len(self.peers),
            "peer_answers_served": self.server.answered if self.server else 0,
            "peer_connections_refused": self.server.rejected if self.server else 0,
            "watchdog": {"path": self.watchdog.path, "armed": self.watchdog.armed, "timeout": self.watchdog.timeout},
            "last_verdict": self.last_verdict,
            "verdicts": self.verdicts,
            "checks": self.checks,
            "pid": os.getpid(),
            "time": datetime.now(UTC).isoformat(),
        }
        try:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            temp = f"{path}.tmp"
            with open(temp, "w", encoding="utf-8") as handle:
                json.dump(status, handle)
            os.replace(temp, path)
        except OSError as err:
            LOG.debug("cannot write the status file: %s", err)

    # threads
    def feeder(self) -> None:
        while not self.stop.is_set():
            if self.watchdog.armed and not self.fenced:
                try:
                    self.watchdog.feed()
                except OSError as err:
                    LOG.error("feeding the watchdog failed: %s", err)
            elif self.fenced and not self.software_reboot_done:
                wait = self.watchdog.timeout + self.peer.SOFTWARE_REBOOT_MARGIN_SECONDS
                if time.monotonic() - self.fenced_at >= wait:
                    LOG.warning("still running %gs after fencing: the watchdog did not reset the node", wait)
                    self.software_reboot()
            elif self.software_reboot_done and time.monotonic() - self.fenced_at > (
                self.watchdog.timeout + self.peer.SOFTWARE_REBOOT_MARGIN_SECONDS + SYSRQ_AFTER_COMMAND_SECONDS
            ):
                self.sysrq()
                self.fenced_at = time.monotonic()
            self.stop.wait(min(self.watchdog.timeout / 3, 1.0) if self.fenced else self.watchdog.timeout / 3)

    def run(self) -> int:
        if not self.watchdog.open() and not self.cfg["isSoftwareRebootEnabled"]:
            LOG.error("no usable watchdog and isSoftwareRebootEnabled is false: this node cannot be fenced")
            return 3
        self.server = PeerServer(
            (self.cfg["listenAddress"], self.cfg["hostPort"]), server_context(self.cfg), self.answer_peer
        )
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 1.0}, daemon=True).start()
        threading.Thread(target=self.feeder, daemon=True).start()
        LOG.info("node agent for %s started; peers on port %d", self.node, self.cfg["hostPort"])
        while not self.stop.is_set():
            now = time.monotonic()
            interval = (
                self.cfg["peerUpdateInterval"]
                if self.peers_ok
                else min(PEER_RETRY_SECONDS, self.cfg["peerUpdateInterval"])
            )
            if now - self.peers_loaded_at >= interval:
                self.peers_loaded_at = now
                self.refresh_peers()
            self.check_once()
            self.write_status()
            self.stop.wait(self.cfg["apiCheckInterval"])
        self.server.shutdown()
        self.server.server_close()
        self.watchdog.disarm()
        LOG.info("node agent stopped")
        return 0


def read_config(path: str, core: dict[str, ModuleType]) -> dict[str, Any]:
    with open(path, encoding="utf-8") as handle:
        raw = json.load(handle)
    result: dict[str, Any] = core["agentconfig"].validate(raw)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="nodeops node agent (self node remediation)")
    parser.add_argument("--config", default="/etc/nodeops-node-agent/config.json")
    parser.add_argument("--check-config", action="store_true", help="validate the configuration and exit")
    parser.add_argument("--core-dir", default=None, help="where the nodeops_core package is")
    args = parser.parse_args(argv)
    core = load_core(args.core_dir)
    try:
        cfg = read_config(args.config, core)
    except (OSError, ValueError) as err:
        print(f"nodeops-node-agent: configuration {args.config}: {err}", file=sys.stderr)
        return 2
    if args.check_config:
        for name in ("caFile", "tokenFile", "peerCaFile", "peerCertFile", "peerKeyFile"):
            if not os.access(cfg[name], os.R_OK):
                print(
                    f"nodeops-node-agent: configuration {args.config}: {name}: {cfg[name]} is not readable",
                    file=sys.stderr,
                )
                return 2
        print(f"nodeops-node-agent: configuration {args.config} is valid")
        return 0
    logging.basicConfig(
        level=getattr(logging, cfg["logLevel"].upper()), format="%(levelname)s %(message)s", stream=sys.stderr
    )
    agent = Agent(cfg, core)

    def on_signal(signum: int, frame: Any) -> None:
        agent.stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return agent.run()


if __name__ == "__main__":
    sys.exit(main())
