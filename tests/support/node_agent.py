"""Helpers for the node agent tests: a peer PKI, a small fake API server, the agent as a process.

The agent runs as a real process (``python roles/node_agent/files/nodeops_node_agent.py``) with a
configuration file; ``prefix`` runs it inside a network namespace (``ip netns exec``).
"""

from __future__ import annotations

import datetime
import http.server
import ipaddress
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

ROOT = Path(__file__).resolve().parents[2]
AGENT = ROOT / "roles/node_agent/files/nodeops_node_agent.py"
T = TypeVar("T")


def wait_for(check: Callable[[], T | None], timeout: float, what: str, interval: float = 0.1) -> T:
    """Poll ``check`` until it returns something other than None/False, or fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


# -- PKI -------------------------------------------------------------------------------------------
@dataclass
class Identity:
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    def write(self, directory: Path, name: str) -> tuple[Path, Path]:
        directory.mkdir(parents=True, exist_ok=True)
        cert, key = directory / f"{name}.crt", directory / f"{name}.key"
        cert.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))
        key.write_bytes(
            self.key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
        key.chmod(0o600)
        return cert, key


def issue(
    name: str,
    ca: Identity | None = None,
    *,
    ips: Sequence[str] = (),
    expired: bool = False,
) -> Identity:
    """A CA (``ca=None``) or a leaf for node ``name`` (client and server use, DNS SAN = name)."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    start, end = (
        (now - datetime.timedelta(days=10), now - datetime.timedelta(days=1))
        if expired
        else (
            now - datetime.timedelta(hours=1),
            now + datetime.timedelta(days=30),
        )
    )
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject if ca is None else ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=ca is None, path_length=None), critical=True)
    )
    if ca is not None:
        builder = builder.add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
        names: list[x509.GeneralName] = [x509.DNSName(name)]
        names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return Identity(key, builder.sign(key if ca is None else ca.key, hashes.SHA256()))


def peer_client_context(ca_file: Path, cert: Path | None, key: Path | None) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    context.load_verify_locations(cafile=str(ca_file))
    if cert and key:
        context.load_cert_chain(str(cert), str(key))
    return context


def ask_peer(
    address: str, port: int, name: str, context: ssl.SSLContext, timeout: float = 30.0, source: str | None = None
) -> tuple[int, Any]:
    """``GET /v1/health`` as a peer (from the address ``source`` if given): (HTTP status, JSON body).
    Raises on a refused handshake."""
    bind = (source, 0) if source else None
    with (
        socket.create_connection((address, port), timeout=timeout, source_address=bind) as raw,
        context.wrap_socket(raw, server_hostname=name) as tls,
    ):
        tls.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := tls.recv(4096):
            data += chunk
    head, _sep, body = data.partition(b"\r\n\r\n")
    if not head:
        raise ConnectionError("no answer")
    return int(head.split()[1]), json.loads(body) if body else None


# -- a fake API server (unit tests only; integration tests use the real one) ------------------------------
@dataclass
class FakeApi:
    """HTTPS on 127.0.0.1 (or ``bind``): /readyz, SelfNodeRemediations, Nodes; ``up`` False answers 500;
    ``remediations_status`` other than 200 refuses the SelfNodeRemediation list with that status (a lost
    RoleBinding: 403) while /readyz still answers 200."""

    directory: Path
    token: str = "test-token"
    up: bool = True
    remediations_status: int = 200
    patch_status: int = 200
    bind: str = "127.0.0.1"
    remediations: list[dict[str, Any]] = field(default_factory=list)
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[str] = field(default_factory=list)
    patches: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def start(self) -> FakeApi:
        ca = issue("fake-api-ca")
        server = issue("127.0.0.1", ca, ips=["127.0.0.1"])
        self.ca_file = ca.write(self.directory, "api-ca")[0]
        cert, key = server.write(self.directory, "api")
        self.token_file = self.directory / "token"
        self.token_file.write_text(self.token + "\n")
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            timeout = 30  # a client that stops talking (its network cut) ends its handler thread, not the server

            def do_GET(self) -> None:
                fake.requests.append(self.path)
                if self.headers.get("Authorization") != f"Bearer {fake.token}":
                    return self._send(401, {"kind": "Status", "code": 401})
                if not fake.up:
                    return self._send(500, {"kind": "Status", "code": 500})
                if self.path.startswith("/readyz"):
                    return self._send(200, "ok")
                if "selfnoderemediations" in self.path:
                    if fake.remediations_status != 200:
                        return self._send(
                            fake.remediations_status, {"kind": "Status", "code": fake.remediations_status}
                        )
                    return self._send(200, {"items": fake.remediations})
                name = self.path.rsplit("/", 1)[-1]
                if self.path.startswith("/api/v1/nodes/") and name in fake.nodes:
                    return self._send(200, fake.nodes[name])
                return self._send(404, {"kind": "Status", "code": 404})

            def do_PATCH(self) -> None:
                if self.headers.get("Authorization") != f"Bearer {fake.token}":
                    return self._send(401, {"kind": "Status", "code": 401})
                length = int(self.headers.get("Content-Length") or 0)
                patch = json.loads(self.rfile.read(length))
                name = self.path.rsplit("/", 1)[-1]
                if not fake.up or not self.path.startswith("/api/v1/nodes/"):
                    return self._send(500 if not fake.up else 404, {"kind": "Status"})
                if fake.patch_status != 200:
                    return self._send(fake.patch_status, {"kind": "Status", "code": fake.patch_status})
                fake.patches.append((name, patch))
                node = fake.nodes.setdefault(name, {"metadata": {"name": name}})
                node["metadata"].setdefault("annotations", {}).update(patch["metadata"]["annotations"])
                return self._send(200, node)

            def _send(self, code: int, body: Any) -> None:
                data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(cert), str(key))
        self.httpd = http.server.ThreadingHTTPServer((self.bind, 0), Handler)
        # the TLS handshake in each request's thread (on its first read), not in accept(): a client cut off in the
        # middle of a handshake would block the server's loop, and stop() with it
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True, do_handshake_on_connect=False)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
        return self

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


# -- the agent as a process ---------------------------------------------------------------------------
FAST = {
    "apiServerTimeout": "500ms",
    "apiCheckInterval": "1s",
    "maxApiErrorThreshold": 2,
    "peerDialTimeout": "500ms",
    "peerRequestTimeout": "3s",
    "peerUpdateInterval": "10s",
    "watchdogTimeoutSeconds": 3,
    "logLevel": "debug",
}


@dataclass
class AgentProcess:
    """One agent: its directory (config, certificates, fake watchdog, recorded reboots) and process."""

    name: str
    directory: Path
    config: dict[str, Any]
    prefix: Sequence[str] = ()
    process: subprocess.Popen[bytes] | None = None

    @classmethod
    def prepare(
        cls,
        name: str,
        directory: Path,
        ca: Identity,
        ca_file: Path,
        api: dict[str, str],
        peers: list[dict[str, Any]],
        *,
        ips: Sequence[str] = ("127.0.0.1",),
        overrides: dict[str, Any] | None = None,
        prefix: Sequence[str] = (),
    ) -> AgentProcess:
        directory.mkdir(parents=True, exist_ok=True)
        cert, key = issue(name, ca, ips=ips).write(directory, "peer")
        watchdog = directory / "watchdog"
        watchdog.write_bytes(b"")
        recorder = directory / "reboot.sh"
        recorder.write_text(f'#!/bin/sh\necho "$(date +%s.%N) $*" >> {directory / "reboots"}\n')
        recorder.chmod(0o755)
        (directory / "peers.json").write_text(json.dumps(peers))
        boot_id = directory / "boot_id"
        if not boot_id.exists():
            boot_id.write_text(f"{uuid.uuid4()}\n")
        config: dict[str, Any] = {
            "nodeName": name,
            **api,
            "peerCaFile": str(ca_file),
            "peerCertFile": str(cert),
            "peerKeyFile": str(key),
            "peersFile": str(directory / "peers.json"),
            "statusFile": str(directory / "status.json"),
            "fenceMarkerFile": str(directory / "run" / "fence.json"),
            "confirmationFile": str(directory / "run" / "confirmed.json"),
            "bootIdFile": str(boot_id),
            "watchdogFilePath": str(watchdog),
            "rebootCommand": [str(recorder), "reboot"],
            "sysrqTriggerPath": str(directory / "sysrq"),
            "softdogModule": False,
            # each agent its own metrics port (on loopback, as the default address)
            "metricsPort": free_port(),
            **FAST,
            **(overrides or {}),
        }
        (directory / "config.json").write_text(json.dumps(config, indent=2))
        return cls(name, directory, config, prefix)

    @property
    def watchdog(self) -> Path:
        return Path(self.config["watchdogFilePath"])

    @property
    def log(self) -> Path:
        return self.directory / "agent.log"

    def start(self) -> AgentProcess:
        assert_own_paths_and_ports(self.config, self.directory, in_namespace=bool(self.prefix))
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [*self.prefix, sys.executable, str(AGENT), "--config", str(self.directory / "config.json")],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        wait_for(lambda: self.status() is not None, 20, f"the status file of {self.name}")
        return self

    def status(self) -> dict[str, Any] | None:
        try:
            result: dict[str, Any] = json.loads(Path(self.config["statusFile"]).read_text())
        except (OSError, ValueError):
            if self.process is not None and self.process.poll() is not None:
                raise AssertionError(f"agent {self.name} exited:\n{self.log.read_text()[-3000:]}") from None
            return None
        return result

    @property
    def metrics_url(self) -> str:
        return f"http://{self.config.get('metricsAddress', '127.0.0.1')}:{self.config['metricsPort']}/metrics"

    def metrics(self, timeout: float = 10.0) -> str:
        """The agent's /metrics text (raises while it does not answer)."""
        with urllib.request.urlopen(self.metrics_url, timeout=timeout) as answer:
            return str(answer.read().decode("utf-8"))

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def reboots(self) -> list[str]:
        path = self.directory / "reboots"
        return path.read_text().splitlines() if path.exists() else []

    def fed_bytes(self) -> int:
        return self.watchdog.stat().st_size

    def stop(self, timeout: float = 10.0) -> int | None:
        if self.process is None:
            return None
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout)
        return self.process.returncode

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text().splitlines()[-lines:])
        except OSError:
            return ""


#: The agent's defaults that a test must never share with the host or with another test.
HOST_DEFAULTS = {
    "statusFile": "/run/nodeops-node-agent/status.json",
    "fenceMarkerFile": "/run/nodeops-node-agent/fence.json",
    "confirmationFile": "/run/nodeops-node-agent/confirmed.json",
    "metricsPort": 9737,
    "hostPort": 30001,
}


def assert_own_paths_and_ports(config: dict[str, Any], directory: Path, *, in_namespace: bool = False) -> None:
    """A test's agent has a run directory, fence marker, status file and watchdog of its own under the test's
    ``directory``, and no default port of the host (in a network namespace of its own the peer port is its own)."""
    root = directory.resolve()
    for key in ("statusFile", "fenceMarkerFile", "confirmationFile"):
        value = config.get(key)
        assert value and root in Path(value).resolve().parents, f"{key} {value!r} is not under the test's {root}"
    assert not str(config.get("watchdogFilePath", "/dev/watchdog")).startswith("/dev/"), "the host's watchdog"
    for key in ("metricsPort", "hostPort"):
        if key == "hostPort" and in_namespace:
            continue
        assert config.get(key) not in (None, HOST_DEFAULTS[key]), f"{key} {config.get(key)!r} is the host's default"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def api_settings(api: FakeApi) -> dict[str, str]:
    return {"apiServer": api.url, "caFile": str(api.ca_file), "tokenFile": str(api.token_file)}


def make_agent(
    name: str, tmp_path: Path, pki: dict[str, Any], api: FakeApi, peers: list[dict[str, Any]], **overrides: Any
) -> AgentProcess:
    port = overrides.pop("hostPort") if "hostPort" in overrides else free_port()
    return AgentProcess.prepare(
        name,
        tmp_path / name,
        pki["ca"],
        pki["ca_file"],
        api_settings(api),
        peers,
        overrides={"hostPort": port, "listenAddress": "127.0.0.1", **overrides},
    )


# -- a peer that misbehaves ------------------------------------------------------------------------------
@dataclass
class FakePeer:
    """A TLS server on 127.0.0.1 with a valid peer certificate that answers every peer question with
    ``reply`` (bytes, or a callable that writes to the TLS socket itself): a lying or hostile peer."""

    name: str
    identity: Identity
    directory: Path
    reply: bytes | Callable[[ssl.SSLSocket], None]
    asked: int = 0

    def start(self) -> FakePeer:
        cert, key = self.identity.write(self.directory, f"fake-{self.name}")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_3
        context.load_cert_chain(str(cert), str(key))
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.server.getsockname()[1])
        self.context = context
        threading.Thread(target=self._serve, daemon=True).start()
        return self

    def _serve(self) -> None:
        while True:
            try:
                raw, _peer = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(raw,), daemon=True).start()

    def _one(self, raw: socket.socket) -> None:
        try:
            with self.context.wrap_socket(raw, server_side=True) as tls:
                tls.settimeout(30)
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = tls.recv(4096)
                    if not chunk:
                        return
                    data += chunk
                self.asked += 1
                if callable(self.reply):
                    self.reply(tls)
                else:
                    tls.sendall(self.reply)
        except (OSError, ssl.SSLError):
            return

    def stop(self) -> None:
        self.server.close()

    def entry(self) -> dict[str, Any]:
        return {"name": self.name, "address": "127.0.0.1", "port": self.port}


def json_answer(body: Any) -> bytes:
    text = json.dumps(body).encode()
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(text), text)


def rss_kib(pid: int) -> int:
    """The resident memory of a process, in KiB (VmRSS of /proc/PID/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for process {pid}")
