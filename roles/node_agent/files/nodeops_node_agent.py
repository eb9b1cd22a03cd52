# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""nodeops node agent: feeds the watchdog while the node is healthy, fences it when it is not.

Runs on the node's system Python 3 (3.9 or newer) with the standard library only; the decisions and
the safe-time arithmetic come from the collection's pure core (``plugins/module_utils/core/node``), which
the role installs next to this file as the package ``nodeops_core``. Run from a checkout of the
collection, the core is found there. Semantics of medik8s Self Node Remediation's agent: an API check
every apiCheckInterval; after maxApiErrorThreshold failures the peers are asked over HTTPS with mutual
TLS (TLS 1.3, one CA) whether a remediation exists for this node; the decision table is
``nodeops_core.peer``.

Fencing = write the fence marker (``fenceMarkerFile``, on tmpfs, keyed by the boot ID), stop feeding
the watchdog, then, if the node still runs after the watchdog's timeout plus a margin, the software
reboot (reboot command, then sysrq), on the schedule of ``nodeops_core.safetime.software_fallback``.
An agent that starts and finds this boot's marker carries the fence on and never opens the watchdog
(opening restarts its timer); the watchdog is first opened after a check that showed the node healthy.

Usage: ``python3 nodeops_node_agent.py --config /etc/nodeops-node-agent/config.json [--check-config]``.
The peer protocol: ``GET /v1/health`` over mutual TLS; the asking node is the common name of its
client certificate (so a peer can only ask about itself), the answer ``{"status": 1|2|3}`` (Healthy,
Unhealthy, ApiError). Connections from addresses outside the peer list are closed before any TLS; a
full server closes new connections at once, which the asker counts as "busy" (alive).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import importlib.util
import ipaddress
import json
import logging
import math
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
from datetime import datetime, timezone
from types import ModuleType
from typing import Any

LOG = logging.getLogger("nodeops-node-agent")
SNR_PATH = "/apis/self-node-remediation.medik8s.io/v1alpha1"
REBOOT_CAPABLE_ANNOTATION = "is-reboot-capable.self-node-remediation.medik8s.io"
WATCHDOG_TIMEOUT_ANNOTATION = "self-node-remediation.medik8s.io/watchdog-timeout"
PEER_PATH = "/v1/health"
WDIOC_GETTIMEOUT = 0x80045707  # _IOR('W', 7, int)
MAX_PEER_CONNECTIONS = 32
PEER_SERVER_IO_TIMEOUT = 5.0
MAX_PEER_CONNECTIONS_PER_SOURCE = 4
PEER_EXCHANGE_SECONDS = 5.0  # a peer's whole exchange, TLS handshake included (at least)
PEER_HANDSHAKE_SECONDS = 2.0  # of the exchange, for the handshake and the request before the answer's API read
MAX_REQUEST_BYTES = 8192
MAX_PEER_RESPONSE_BYTES = 4096  # a peer's answer is {"status": N} behind a few headers
MAX_API_RESPONSE_BYTES = 16 * 1024 * 1024  # a list of SelfNodeRemediations in a remediation storm
PEER_RETRY_SECONDS = 120.0  # a failed peer-list refresh is retried this often (upstream: 2 min)
METRICS_PATH = "/metrics"
MAX_METRICS_CONNECTIONS = 4  # scrapes served at once; more are closed at once
METRICS_EXCHANGE_SECONDS = 3.0  # a scrape's whole exchange, request and answer
MAX_METRICS_REQUEST_BYTES = 4096  # a scrape request is a few hundred bytes of headers


def load_core(directory: str | None = None) -> dict[str, ModuleType]:
    """Import the core as the package ``nodeops_core``: next to this file (installed by the role) or
    in the collection checkout this file sits in."""
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [directory] if directory else []
    candidates += [
        os.path.join(here, "nodeops_core"),
        os.path.join(here, "..", "..", "..", "plugins", "module_utils", "core", "node"),
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
            from nodeops_core import agentconfig, metrics, peer, safetime

            return {"agentconfig": agentconfig, "metrics": metrics, "peer": peer, "safetime": safetime}
    raise SystemExit(f"nodeops-node-agent: the core files are missing (looked in {', '.join(candidates)})")


# -- name lookups off the caller's thread ---------------------------------------------------------------
RESOLVE_REFRESH_SECONDS = 60.0  # a name's addresses are looked up again, in the background, this often


class LookupTimeout(OSError):
    """A name was not resolved within the time given and no earlier lookup of it had succeeded."""


def literal_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class Resolver:
    """Name lookups that never hold up the checks or the watchdog: each runs on a thread of its own (one at a
    time per name), a caller waits for it at most the time it is given, and the last good addresses of a name
    serve while a new lookup runs or after one failed. A name never resolved, whose lookup does not end in
    time, raises LookupTimeout (a failed request)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.lock = threading.Lock()
        self.good: dict[str, tuple[float, list[str]]] = {}  # name -> (when, addresses)
        self.running: dict[str, threading.Event] = {}
        self.failures = 0
        self.timeouts = 0

    def cached(self, name: str) -> list[str]:
        if literal_address(name):
            return [name]
        with self.lock:
            entry = self.good.get(name)
        return list(entry[1]) if entry else []

    def start(self, name: str) -> threading.Event:
        """The lookup of ``name`` under way, started now if none is."""
        with self.lock:
            done = self.running.get(name)
            if done is None:
                done = self.running[name] = threading.Event()
                try:
                    threading.Thread(target=self._lookup, args=(name, done), daemon=True).start()
                except RuntimeError:  # no thread to be had: the lookup fails, the caller uses what it has
                    del self.running[name]
                    done.set()
        return done

    def _lookup(self, name: str, done: threading.Event) -> None:
        try:
            infos = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
            addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))  # in the system's order
        except (OSError, UnicodeError) as err:
            LOG.warning("cannot resolve %s: %s", name, err)
            addresses = []
            self.failures += 1
        with self.lock:
            if addresses:
                self.good[name] = (self.clock(), addresses)
            self.running.pop(name, None)
        done.set()

    def lookup(self, name: str, timeout: float) -> list[str]:
        """The addresses of ``name`` (itself when it is an IP address), waiting at most ``timeout`` seconds."""
        if literal_address(name):
            return [name]
        with self.lock:
            entry = self.good.get(name)
        if entry is not None:
            if self.clock() - entry[0] >= RESOLVE_REFRESH_SECONDS:
                self.start(name)  # refreshed in the background; the last good addresses serve meanwhile
            return list(entry[1])
        if not self.start(name).wait(max(0.0, timeout)):
            self.timeouts += 1
            raise LookupTimeout(f"looking up {name} took more than {timeout:g}s")
        addresses = self.cached(name)
        if not addresses:
            raise OSError(f"cannot resolve {name}")
        return addresses


def connect(
    host: str,
    port: int,
    resolver: Resolver,
    timeout: float,
    source: str = "",
) -> socket.socket:
    """A TCP connection to ``host`` (a name looked up through ``resolver``), lookup and connection within
    ``timeout`` seconds in all, from the address ``source`` when given."""
    deadline = time.monotonic() + timeout
    addresses = resolver.lookup(host, timeout)
    error: OSError = OSError(f"no address for {host}")
    for index, address in enumerate(addresses):
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"connecting to {host} took more than {timeout:g}s")
        # the time left shared among the addresses left, so one that drops packets does not use it all
        share = left / (len(addresses) - index)
        # from ``source`` only toward an address of its family
        bind = (source, 0) if source and (":" in source) == (":" in address) else None
        try:
            return socket.create_connection((address, port), timeout=share, source_address=bind)
        except OSError as err:
            error = err
    raise error


# -- HTTPS with a chosen TLS name ----------------------------------------------------------------
class PeerBusy(ConnectionError):
    """The peer accepted the connection and closed it before any TLS: alive, but serving others."""


def https_request(
    address: tuple[str, int],
    tls_name: str,
    context: ssl.SSLContext,
    path: str,
    timeout: float,
    headers: dict[str, str] | None = None,
    dial_timeout: float | None = None,
    max_bytes: int = MAX_API_RESPONSE_BYTES,
    method: str = "GET",
    body: bytes = b"",
    resolver: Resolver | None = None,
    source: str = "",
) -> tuple[int, bytes]:
    """One request (a GET unless told) over a new TLS connection, the certificate checked against
    ``tls_name``; the whole exchange ends within ``timeout`` seconds (after the connection, made within
    ``dial_timeout``; without one, ``timeout`` bounds the lookup and the connection too), and an answer of
    more than ``max_bytes`` bytes is refused unread. A name is looked up through ``resolver`` (never on this
    thread without a deadline); ``source`` is the local address to connect from.

    Raises PeerBusy when the server closes the connection during the TLS handshake, OSError (or
    ssl.SSLError) for any other failure, ValueError for an answer that is not well-formed HTTP."""
    started = time.monotonic()
    sock = connect(address[0], address[1], resolver or Resolver(), dial_timeout or timeout, source)
    try:
        # without a dial timeout of its own, ``timeout`` bounds the connection too
        deadline = (started if dial_timeout is None else time.monotonic()) + timeout
        sock.settimeout(max(0.001, deadline - time.monotonic()))
        tls = context.wrap_socket(sock, server_hostname=tls_name, do_handshake_on_connect=False)
        sock = tls
        try:
            tls.do_handshake()
        except (ssl.SSLEOFError, ssl.SSLZeroReturnError, ConnectionResetError, BrokenPipeError) as err:
            raise PeerBusy(f"closed during the TLS handshake: {err}") from err
        lines = [f"{method} {path} HTTP/1.1", f"Host: {tls_name}", "Connection: close", "Accept: application/json"]
        lines += [f"{key}: {value}" for key, value in (headers or {}).items()]
        if body:
            lines.append(f"Content-Length: {len(body)}")
        tls.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("ascii") + body)
        chunks: list[bytes] = []
        size = 0
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the answer took too long")
            tls.settimeout(left)
            chunk = tls.recv(16384)
            if not chunk:
                break
            size += len(chunk)
            if size > max_bytes:
                raise ValueError(f"the answer is larger than {max_bytes} bytes")
            chunks.append(chunk)
    finally:
        sock.close()
    return parse_http_answer(b"".join(chunks))


def parse_http_answer(data: bytes) -> tuple[int, bytes]:
    """(status, body) of a whole HTTP/1.1 answer; the body undone from chunked transfer encoding."""
    head, sep, body = data.partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n", 1)[0].split()
    if not sep or len(status_line) < 2 or not status_line[0].startswith(b"HTTP/"):
        raise ValueError("not an HTTP answer")
    code = status_line[1]
    if len(code) != 3 or not all(48 <= c <= 57 for c in code):
        raise ValueError("not an HTTP status code")
    if b"transfer-encoding: chunked" in head.lower():
        body = unchunk(body)
    return int(code), body


HEX_DIGITS = frozenset(b"0123456789abcdefABCDEF")


def unchunk(body: bytes) -> bytes:
    """The data of a chunked body. Every chunk size must be hexadecimal and fit in what was received,
    so the result is never larger than ``body``; anything else raises ValueError."""
    out: list[bytes] = []
    pos = 0
    while True:
        end = body.find(b"\r\n", pos)
        if end < 0:
            raise ValueError("a chunk size line is cut off")
        size_text = body[pos:end].split(b";", 1)[0].strip()
        if not size_text or len(size_text) > 8 or not set(size_text) <= HEX_DIGITS:
            raise ValueError("a chunk size is not a hexadecimal number")
        size = int(size_text, 16)
        if size == 0:
            return b"".join(out)
        start = end + 2
        if start + size + 2 > len(body):
            raise ValueError("a chunk is larger than the answer")
        out.append(body[start : start + size])
        pos = start + size + 2


class ApiClient:
    """The few Kubernetes API reads of the agent: /readyz, its own Node, SelfNodeRemediations."""

    def __init__(self, cfg: dict[str, Any], resolver: Resolver | None = None) -> None:
        self.resolver = resolver or Resolver()
        url = urllib.parse.urlsplit(cfg["apiServer"])
        self.address = (url.hostname or "", url.port or 443)
        self.tls_name = cfg["apiServerName"] or (url.hostname or "")
        self.token_file = cfg["tokenFile"]
        self.namespace = cfg["remediationNamespace"]
        self.context = ssl.create_default_context(cafile=cfg["caFile"])
        # Python 3.13 checks X.509 strictly by default (an Authority Key Identifier is required); Kubernetes'
        # own clients do not, and API server certificates without one are common
        self.context.verify_flags &= ~ssl.VERIFY_X509_STRICT

    def get(self, path: str, timeout: float) -> tuple[int, bytes]:
        return self.request("GET", path, timeout)

    def request(
        self, method: str, path: str, timeout: float, body: bytes = b"", content_type: str = ""
    ) -> tuple[int, bytes]:
        with open(self.token_file, encoding="utf-8") as handle:
            token = handle.read().strip()
        headers = {"Authorization": f"Bearer {token}"}
        if content_type:
            headers["Content-Type"] = content_type
        return https_request(
            self.address,
            self.tls_name,
            self.context,
            path,
            timeout,
            headers,
            method=method,
            body=body,
            resolver=self.resolver,
        )

    def annotate_node(self, name: str, annotations: dict[str, str], timeout: float) -> None:
        """Merge ``annotations`` into the Node's (a JSON merge patch of those keys only). Raises on any error."""
        body = json.dumps({"metadata": {"annotations": annotations}}).encode()
        status, answer = self.request(
            "PATCH", f"/api/v1/nodes/{urllib.parse.quote(name)}", timeout, body, "application/merge-patch+json"
        )
        if status != 200:
            raise PatchRefused(f"annotating node {name} answered HTTP {status}: {answer[:300]!r}")

    def ready(self, timeout: float) -> bool:
        try:
            status = self.get("/readyz?exclude=shutdown", timeout)[0]
        except (OSError, ValueError, ssl.SSLError) as err:
            LOG.debug("API check failed: %s", err)
            return False
        return status == 200

    def remediations(self, timeout: float) -> list[dict[str, Any]]:
        """Every SelfNodeRemediation (of the configured namespace, or of all). Raises ReadFailed, with the
        reason, on any error: the list is the node's remediation state, and no answer is never "none"."""
        path = (
            f"{SNR_PATH}/namespaces/{self.namespace}/selfnoderemediations"
            if self.namespace
            else (f"{SNR_PATH}/selfnoderemediations")
        )
        try:
            status, body = self.get(path, timeout)
        except (TimeoutError, socket.timeout, LookupTimeout) as err:  # noqa: UP041 (socket.timeout is not TimeoutError on 3.9)
            raise ReadFailed("timeout", str(err)) from err
        except ValueError as err:
            reason = "too_large" if "larger than" in str(err) else "error"
            raise ReadFailed(reason, str(err)) from err
        except (OSError, ssl.SSLError) as err:
            raise ReadFailed("error", str(err)) from err
        if status != 200:
            reason = READ_FAILURE_BY_STATUS.get(status, "unavailable" if status >= 500 else "error")
            raise ReadFailed(reason, f"listing SelfNodeRemediations answered HTTP {status}: {body[:200]!r}")
        try:
            data = json.loads(body)
            items = data.get("items")
        except (ValueError, AttributeError) as err:
            raise ReadFailed("error", f"the SelfNodeRemediation list is not a JSON object: {err}") from err
        if not isinstance(items, list):
            if items is not None:
                raise ReadFailed("error", "the SelfNodeRemediation list has no list of items")
            items = []
        return [item for item in items if isinstance(item, dict)]

    def node(self, name: str, timeout: float) -> dict[str, Any]:
        status, body = self.get(f"/api/v1/nodes/{urllib.parse.quote(name)}", timeout)
        if status != 200:
            raise OSError(f"reading node {name} answered HTTP {status}")
        result: dict[str, Any] = json.loads(body)
        return result


class PatchRefused(OSError):
    """The API server answered a write with an error: it was not applied."""


class ReadFailed(OSError):
    """The node's remediation state could not be read; ``reason`` is a fixed word for the metrics."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


#: The reasons of a failed read of the SelfNodeRemediations (nodeops_agent_remediation_read_failures_total).
READ_FAILURE_REASONS = ("forbidden", "not_found", "throttled", "too_large", "unavailable", "timeout", "error")
READ_FAILURE_BY_STATUS = {401: "forbidden", 403: "forbidden", 404: "not_found", 429: "throttled"}
#: the refusals that make the node publish itself not reboot-capable until a read succeeds again
LASTING_READ_FAILURES = ("forbidden", "not_found", "too_large")


# -- watchdog ------------------------------------------------------------------------------------
def boot_clock() -> float:
    """Seconds since boot (CLOCK_BOOTTIME): comparable across the agent's processes of one boot."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


class Watchdog:
    """The watchdog device: opened only once a check has passed, then fed every third of its timeout
    until fencing stops it. Opening a watchdog starts (or restarts) its timer, so it is never opened
    by an agent that carries on a fence."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.path: str = cfg["watchdogFilePath"]
        self.fallback_timeout = float(cfg["watchdogTimeoutSeconds"])
        self.softdog = cfg["softdogModule"]
        self.fd: int | None = None
        self.timeout = self.fallback_timeout
        self.feeding = False
        self.broken = False  # opened, but the first write failed
        self.last_feed = 0.0
        self.feeds = 0
        self.feed_failures = 0
        self.lock = threading.Lock()

    def available(self) -> bool:
        """Whether the device is there to be opened later (loading softdog when it is missing)."""
        if not os.path.exists(self.path) and self.softdog and self.path.startswith("/dev/"):
            LOG.info("watchdog %s is missing; loading softdog", self.path)
            try:
                subprocess.run(["modprobe", "softdog"], check=False, capture_output=True, timeout=30)
            except (OSError, subprocess.SubprocessError) as err:
                LOG.warning("cannot load softdog: %s", err)
        if not os.path.exists(self.path) or not os.access(self.path, os.W_OK):
            LOG.warning("no usable watchdog at %s", self.path)
            return False
        return True

    def open(self) -> bool:
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
        try:
            self.feed()
        except OSError as err:  # opened (its timer runs) but not writable: not a watchdog to rely on
            # its timer runs now and cannot be stopped; it is no watchdog this agent can keep fed
            LOG.error("the watchdog %s opened but cannot be written (it will reset the node): %s", self.path, err)
            with self.lock:
                self.feeding = False
                self.broken = True
            return False
        LOG.info("watchdog %s armed, timeout %gs, fed every %gs", self.path, self.timeout, self.timeout / 3)
        return True

    @property
    def armed(self) -> bool:
        return self.fd is not None and not self.broken

    def feed(self) -> None:
        with self.lock:
            if self.fd is not None and self.feeding:
                try:
                    os.write(self.fd, b"\0")
                except OSError:
                    self.feed_failures += 1
                    raise
                self.last_feed = time.monotonic()
                self.feeds += 1

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


def read_boot_id(path: str) -> str:
    """This boot's ID (the kernel's random boot_id); "" when it cannot be read."""
    try:
        with open(path, encoding="ascii") as handle:
            return handle.read().strip()
    except OSError as err:
        LOG.error("cannot read the boot ID from %s: %s", path, err)
        return ""


def write_json(path: str, data: Any, sync: bool = False) -> None:
    """Replace ``path`` with ``data`` as JSON in one step (a reader sees the old file or the new one), its
    directory made when missing; ``sync`` flushes it to the device first. Raises OSError."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    temp = f"{path}.tmp"
    with open(temp, "w", encoding="utf-8") as handle:
        json.dump(data, handle)
        if sync:
            handle.flush()
            os.fsync(handle.fileno())
    os.replace(temp, path)


class FenceMarker:
    """A file (on tmpfs, under /run) that says this boot is being fenced: written before the watchdog
    stops being fed, so that no later agent process of the same boot feeds it again. A marker of
    another boot is stale (the node rebooted) and is removed."""

    def __init__(self, path: str, boot_id: str) -> None:
        self.path = path
        self.boot_id = boot_id

    def load(self) -> dict[str, Any] | None:
        try:
            with open(self.path, encoding="utf-8") as handle:
                marker = json.load(handle)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as err:
            # unreadable or cut off: it was written, so a fence had begun; treat it as this boot's
            LOG.error("the fence marker %s cannot be read (%s): carrying on the fence", self.path, err)
            return {"bootId": self.boot_id, "reason": "unreadable fence marker"}
        if not isinstance(marker, dict):
            return {"bootId": self.boot_id, "reason": "unreadable fence marker"}
        if marker.get("bootId") != self.boot_id or not self.boot_id:
            if self.boot_id:
                LOG.info("removing the fence marker of an earlier boot (%s)", marker.get("bootId"))
                with contextlib.suppress(OSError):
                    os.remove(self.path)
                return None
            return marker
        return marker

    def write(self, reason: str, since: float, watchdog_timeout: float, cause: str = "") -> None:
        marker = {
            "bootId": self.boot_id,
            "reason": reason,
            "cause": cause,
            "since": since,
            "watchdogTimeout": watchdog_timeout,
            "time": datetime.now(timezone.utc).isoformat(),
        }
        try:
            write_json(self.path, marker, sync=True)
        except OSError as err:
            LOG.error("cannot write the fence marker %s: %s", self.path, err)


class Confirmation:
    """A file (on tmpfs, beside the fence marker) holding when this boot's agent last confirmed that no
    remediation is pending for its node (``CLOCK_BOOTTIME`` seconds), so that an agent that crashes and starts
    again, or is restarted, counts its time cut off from where the last one left it, instead of from its own
    start. Another boot's is ignored."""

    def __init__(self, path: str, boot_id: str) -> None:
        self.path = path
        self.boot_id = boot_id
        self.error = ""

    def load(self) -> float | None:
        try:
            with open(self.path, encoding="utf-8") as handle:
                data = json.load(handle)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as err:
            LOG.error("the confirmation file %s cannot be read (%s): counting from this agent's start", self.path, err)
            return None
        at = data.get("confirmedAt") if isinstance(data, dict) else None
        if not self.boot_id or data.get("bootId") != self.boot_id or isinstance(at, bool):
            return None
        return float(at) if isinstance(at, (int, float)) and math.isfinite(at) else None

    def write(self, at: float) -> None:
        try:
            write_json(self.path, {"bootId": self.boot_id, "confirmedAt": at})
            self.error = ""
        except OSError as err:
            if str(err) != self.error:
                LOG.error("cannot write the confirmation file %s: %s", self.path, err)
            self.error = str(err)


# -- peer server ---------------------------------------------------------------------------------
class PeerServer(socketserver.ThreadingMixIn, socketserver.TCPServer):
    """Answers ``GET /v1/health`` from peers with a client certificate of the peer CA.

    A connection from an address that is not a peer's is closed before any TLS work. A peer address
    holds at most MAX_PEER_CONNECTIONS_PER_SOURCE connections and all together MAX_PEER_CONNECTIONS;
    past that a connection is closed at once (the asker counts the peer busy, not gone). Each exchange,
    handshake included, has PEER_EXCHANGE_SECONDS in all: a reaper closes connections past that.
    """

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(
        self,
        address: tuple[str, int],
        context: ssl.SSLContext,
        answer: Callable[[str], int],
        is_peer: Callable[[str], bool],
        exchange_seconds: float = PEER_EXCHANGE_SECONDS,
    ) -> None:
        self.context = context
        self.answer = answer
        self.is_peer = is_peer
        self.exchange_seconds = exchange_seconds
        self.lock = threading.Lock()
        self.per_source: dict[str, int] = {}
        self.deadlines: dict[socket.socket, tuple[float, int]] = {}  # connection -> (deadline, descriptor)
        self.strangers = 0  # connections from addresses that are not peers'
        self.busy = 0  # connections closed because the server or the source was full
        self.rejected = 0  # failed handshakes and bad requests
        self.overdue = 0  # exchanges closed by the reaper
        self.answered = 0
        super().__init__(address, PeerHandler)
        threading.Thread(target=self._reap, daemon=True).start()

    def verify_request(self, request: Any, client_address: Any) -> bool:
        if self.is_peer(_source(client_address)):
            return True
        self.strangers += 1
        return False

    def process_request(self, request: Any, client_address: Any) -> None:
        source = _source(client_address)
        with self.lock:
            full = (
                len(self.deadlines) >= MAX_PEER_CONNECTIONS
                or self.per_source.get(source, 0) >= MAX_PEER_CONNECTIONS_PER_SOURCE
            )
            if not full:
                self.per_source[source] = self.per_source.get(source, 0) + 1
                self.deadlines[request] = (time.monotonic() + self.exchange_seconds, request.fileno())
        if full:
            self.busy += 1
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._release(request, source)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._release(request, _source(client_address))

    def _release(self, request: socket.socket, source: str) -> None:
        with self.lock:
            if self.deadlines.pop(request, None) is not None:
                left = self.per_source.get(source, 1) - 1
                if left > 0:
                    self.per_source[source] = left
                else:
                    self.per_source.pop(source, None)

    def _reap(self) -> None:
        """Ends every exchange past its deadline: a shutdown wakes the thread blocked on it. Under the
        lock, so a descriptor is never shut down after its connection was released (and reused)."""
        while True:
            time.sleep(0.25)
            now = time.monotonic()
            with self.lock:
                for sock, (deadline, fd) in list(self.deadlines.items()):
                    if deadline > now:
                        continue
                    self.deadlines[sock] = (now + 3600.0, fd)  # once
                    self.overdue += 1
                    try:
                        duplicate = socket.socket(fileno=os.dup(fd))
                    except OSError:
                        continue
                    with contextlib.suppress(OSError):
                        duplicate.shutdown(socket.SHUT_RDWR)
                    duplicate.close()

    def finish_request(self, request: Any, client_address: Any) -> None:
        # a safety net only: the reaper ends the exchange at its deadline, whatever each read waits
        request.settimeout(self.exchange_seconds + 5.0)
        tls: ssl.SSLSocket | None = None
        try:
            tls = self.context.wrap_socket(request, server_side=True, do_handshake_on_connect=False)
            tls.do_handshake()
            PeerHandler(tls, client_address, self)
        except (OSError, ValueError) as err:
            self.rejected += 1
            LOG.debug("peer exchange with %s failed: %s", client_address[0], err)
        finally:
            self._release(request, _source(client_address))  # before the descriptor is closed
            if tls is not None:
                with contextlib.suppress(OSError):
                    tls.close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        self.rejected += 1
        LOG.debug("peer request from %s failed: %s", client_address[0], sys.exc_info()[1])


def _source(client_address: Any) -> str:
    """The client's IP address, an IPv4-mapped IPv6 address as plain IPv4."""
    address = str(client_address[0])
    return address[7:] if address.startswith("::ffff:") and "." in address else address


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


# -- metrics -------------------------------------------------------------------------------------
class MetricsServer:
    """Prometheus metrics over plain HTTP: ``GET /metrics`` and nothing else (any other path 404, any other method
    405), read-only. The answer is rendered before anything is sent, from counters the agent keeps, without taking
    any lock the agent's threads use, so a scrape never waits for them nor they for a scrape. At most
    MAX_METRICS_CONNECTIONS exchanges at once (more are closed at once), each within METRICS_EXCHANGE_SECONDS in
    all and a request of at most MAX_METRICS_REQUEST_BYTES: a slow or hostile client holds one thread of its own
    for a few seconds, never the watchdog feeder or the checks."""

    def __init__(self, address: tuple[str, int], render: Callable[[], str]) -> None:
        family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.socket = socket.create_server(address, family=family, backlog=16)
        self.address = self.socket.getsockname()[:2]
        self.render = render
        self.slots = threading.BoundedSemaphore(MAX_METRICS_CONNECTIONS)
        self.closed = threading.Event()
        self.served = 0
        self.refused = 0

    def start(self) -> MetricsServer:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def close(self) -> None:
        self.closed.set()
        with contextlib.suppress(OSError):
            self.socket.shutdown(socket.SHUT_RDWR)
        self.socket.close()

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                conn = self.socket.accept()[0]
            except OSError:
                if self.closed.is_set():
                    return
                time.sleep(0.05)  # (out of descriptors): not a busy loop
                continue
            if not self.slots.acquire(blocking=False):
                self.refused += 1
                conn.close()
                continue
            try:
                threading.Thread(target=self._exchange, args=(conn,), daemon=True).start()
            except RuntimeError:  # no thread to be had
                self.slots.release()
                conn.close()

    def _exchange(self, conn: socket.socket) -> None:
        deadline = time.monotonic() + METRICS_EXCHANGE_SECONDS
        try:
            data = b""
            while b"\r\n\r\n" not in data:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                conn.settimeout(left)
                chunk = conn.recv(1024)
                if not chunk:
                    return
                data += chunk
                if len(data) > MAX_METRICS_REQUEST_BYTES:
                    self._send(conn, deadline, 431, "request too large\n")
                    return
            request = data.split(b"\r\n", 1)[0].split()
            if len(request) != 3 or not request[2].startswith(b"HTTP/1."):
                self._send(conn, deadline, 400, "bad request\n")
            elif request[1].split(b"?", 1)[0] != METRICS_PATH.encode():
                self._send(conn, deadline, 404, "only GET /metrics\n")
            elif request[0] != b"GET":
                self._send(conn, deadline, 405, "only GET /metrics\n", "Allow: GET\r\n")
            else:
                self._send(conn, deadline, 200, self.render(), f"Content-Type: {CONTENT_TYPE}\r\n")
                self.served += 1
        except (OSError, ValueError) as err:
            LOG.debug("metrics exchange failed: %s", err)
        finally:
            conn.close()
            self.slots.release()

    @staticmethod
    def _send(conn: socket.socket, deadline: float, code: int, text: str, headers: str = "") -> None:
        body = text.encode("utf-8")
        if not headers:
            headers = "Content-Type: text/plain; charset=utf-8\r\n"
        head = f"HTTP/1.1 {code} {HTTP_REASONS.get(code, 'X')}\r\n{headers}Content-Length: {len(body)}\r\n"
        conn.settimeout(max(0.001, deadline - time.monotonic()))
        conn.sendall(head.encode("ascii") + b"Connection: close\r\n\r\n" + body)


CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
HTTP_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 431: "Too Large"}


# -- the agent -----------------------------------------------------------------------------------
def boot_time() -> float:
    """When the node booted (from /proc/uptime), in seconds since the epoch."""
    with open("/proc/uptime", encoding="ascii") as handle:
        uptime = float(handle.read().split()[0])
    return time.time() - uptime


class Agent:
    def __init__(self, cfg: dict[str, Any], core: dict[str, ModuleType]) -> None:
        self.cfg = cfg
        self.peer = core["peer"]
        self.safetime = core["safetime"]
        self.metrics = core["metrics"]
        self.node = cfg["nodeName"]
        self.resolver = Resolver()
        self.api = ApiClient(cfg, self.resolver)
        self.watchdog = Watchdog(cfg)
        self.watchdog_usable = False
        self.watchdog_failed = False  # the device is there but did not open
        self.published: dict[str, Any] = {}  # the two annotations as the node last showed them
        self.publish_error = ""
        self.stop = threading.Event()
        self.client_context = client_context(cfg)
        self.server: PeerServer | None = None
        self.error_count = 0
        self.last_answer = time.monotonic()  # as upstream: counted from the agent's start
        self.peers: list[dict[str, Any]] = []
        self.peer_addresses: frozenset[str] = frozenset()
        self.peers_loaded_at = -1e9
        self.peers_ok = False
        self.control_plane = False
        self.fenced = False
        self.fence_reason = ""
        self.fence_carried_over = False
        self.fenced_uids: list[str] = []
        self.fenced_at = 0.0  # boot_clock() when fencing began
        self.fence_lock = threading.Lock()  # the main thread and the feeder may both begin a fence
        self.status_lock = threading.Lock()
        self.fallback_done: set[str] = set()
        self.fallback_lock = threading.Lock()
        # the isolation limit: cut off this long from the remediation state, the node fences (core/node/peer.py)
        self.isolation_limit = self.safetime.isolation_limit_from(
            cfg["maxApiErrorThreshold"] * (cfg["apiCheckInterval"] + cfg["apiServerTimeout"])
        )
        self.read_refused = False  # the API answers, but the remediation state cannot be read
        self.read_error = ""
        self.read_failures: dict[str, int] = {}
        self.source_address = ""  # this node's address in the peer list: peer questions leave from it
        self.peers_stamp: tuple[int, int, int] | None = None
        self.node_read_tried = False  # the first peer-list refresh (which reads the Node) has ended
        self.state = "starting"
        self.last_verdict: dict[str, Any] | None = None
        self.checks = 0
        self.verdicts: dict[str, int] = {}
        # counters for the metrics (only ever increased, read without a lock)
        self.started = time.time()
        self.api_failures = 0
        self.peer_answers: dict[str, int] = {}
        self.answers_served: dict[str, int] = {}
        self.publish_failures = 0
        self.reboots_tried: dict[str, int] = {}
        self.fence_cause = ""
        self.metrics_server: MetricsServer | None = None
        self.metrics_error = ""
        self.boot = boot_time()
        boot_id = read_boot_id(cfg["bootIdFile"])
        self.marker = FenceMarker(cfg["fenceMarkerFile"], boot_id)
        self.confirmation = Confirmation(cfg["confirmationFile"], boot_id)
        # boot_clock() of the last confirmation, carried over from an earlier agent of this boot; the isolation
        # limit runs from the boot's first confirmation
        carried_confirmation = self.confirmation.load()
        self.confirmed_this_boot = carried_confirmation is not None
        self.confirmed_at = boot_clock() if carried_confirmation is None else min(carried_confirmation, boot_clock())
        self.request_timeout = self.safetime.effective_peer_request_timeout(
            cfg["peerRequestTimeout"], cfg["apiServerTimeout"]
        )
        carried = self.marker.load()
        if carried is not None:
            # a fence of this boot began in an earlier process: it goes on, and the watchdog is never
            # opened again (opening restarts its timer)
            self.fenced = True
            self.fence_carried_over = True
            self.fence_reason = str(carried.get("reason") or "fence marker")
            self.fence_cause = str(carried.get("cause") or "unknown")
            since = carried.get("since")
            self.fenced_at = float(since) if isinstance(since, (int, float)) else boot_clock()
            timeout = carried.get("watchdogTimeout")
            if isinstance(timeout, (int, float)) and timeout > 0:
                self.watchdog.timeout = float(timeout)
            self.state = "fenced"

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
        # every node asks its peers in an order of its own (str hashes differ from process to process), so
        # an outage does not send the whole fleet's questions to the first few nodes of the list
        peers.sort(key=lambda peer: hash((self.node, peer["name"])))
        self.peers = peers
        self.pin_source(entries)
        # the names are looked up all at once, off this thread; what is not resolved within apiServerTimeout is
        # taken up when its lookup ends (update_peer_addresses, every check)
        deadline = time.monotonic() + self.cfg["apiServerTimeout"]
        lookups = [self.resolver.start(p["address"]) for p in peers if not literal_address(p["address"])]
        for done in lookups:
            done.wait(max(0.0, deadline - time.monotonic()))
        self.update_peer_addresses()
        self.peers_ok = True
        try:
            node = self.api.node(self.node, self.cfg["peerApiServerTimeout"])
            self.control_plane = self.peer.node_is_control_plane(node)
            annotations = (node.get("metadata") or {}).get("annotations") or {}
            self.published = {
                key: annotations.get(key) for key in (REBOOT_CAPABLE_ANNOTATION, WATCHDOG_TIMEOUT_ANNOTATION)
            }
        except (OSError, ValueError, ssl.SSLError, AttributeError) as err:
            LOG.info("cannot read node %s (keeping role %s): %s", self.node, self._role(), err)
        LOG.info(
            "%d peers (%d workers, %d control-plane); this node is a %s",
            len(peers),
            len(self.worker_peers()),
            len(self.control_plane_peers()),
            self._role(),
        )

    def update_peer_addresses(self) -> None:
        """The addresses peer connections are accepted from: those of the peer list as last resolved."""
        self.peer_addresses = frozenset(
            address for peer in self.peers for address in self.resolver.cached(peer["address"])
        )

    def pin_source(self, entries: list[Any]) -> None:
        """Peer questions leave from this node's own address in the peer list (when it is an IP address of this
        host), the address its peers know it by: a node with several addresses is never a stranger to them."""
        own = [str(e.get("address", "")) for e in entries if isinstance(e, dict) and e.get("name") == self.node]
        address = own[0] if own and literal_address(own[0]) else ""
        if address and address != self.source_address:
            family = socket.AF_INET6 if ":" in address else socket.AF_INET
            try:
                with socket.socket(family, socket.SOCK_STREAM) as probe:
                    probe.bind((address, 0))
            except OSError as err:
                LOG.warning(
                    "peer questions cannot leave from this node's address %s (%s): the system chooses", address, err
                )
                address = ""
        if address != self.source_address:
            LOG.info("peer questions leave from %s", address or "the address the system chooses")
        self.source_address = address

    def peers_changed(self) -> bool:
        """Whether the peer list file changed since it was last read (a deployment added or removed a node)."""
        try:
            info = os.stat(self.cfg["peersFile"])
        except OSError:
            return False
        stamp = (info.st_mtime_ns, info.st_size, info.st_ino)
        changed = self.peers_stamp is not None and stamp != self.peers_stamp
        self.peers_stamp = stamp
        return changed

    def is_peer(self, address: str) -> bool:
        return address in self.peer_addresses

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
                max_bytes=MAX_PEER_RESPONSE_BYTES,
                resolver=self.resolver,
                source=self.source_address,
            )
            answer = json.loads(body).get("status") if status == 200 else None
        except PeerBusy as err:
            LOG.debug("peer %s is busy: %s", peer["name"], err)
            return int(self.peer.BUSY)
        except (OSError, ValueError, ssl.SSLError, AttributeError) as err:
            LOG.debug("peer %s did not answer: %s", peer["name"], err)
            return int(self.peer.REQUEST_FAILED)
        if not isinstance(answer, bool) and answer in (self.peer.HEALTHY, self.peer.UNHEALTHY, self.peer.API_ERROR):
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
        for answer in answers:
            name = self.peer.ANSWER_NAMES.get(answer, "RequestFailed")
            self.peer_answers[name] = self.peer_answers.get(name, 0) + 1
        if any(a != self.peer.REQUEST_FAILED for a in answers):
            self.last_answer = time.monotonic()
        return answers

    def peer_api_timeout(self) -> float:
        """How long the answer to a peer may read the API, connection included: peerApiServerTimeout, but never
        longer than apiServerTimeout, so that the answer comes within what the asker waits (at least
        apiServerTimeout + 2 s, the safe time's effective peer request timeout) and the server's deadline."""
        return float(min(self.cfg["peerApiServerTimeout"], self.cfg["apiServerTimeout"]))

    def answer_peer(self, asker: str) -> int:
        """The answer to a peer (identified by its certificate) asking about itself. While this node's own
        last API check failed, API error at once: a peer asking then is most likely in the same outage, and
        an answer that came after the asker gave up would count as none (and toward isolation)."""
        answer = self._answer_peer(asker)
        name = self.peer.ANSWER_NAMES[answer]
        self.answers_served[name] = self.answers_served.get(name, 0) + 1
        return answer

    def _answer_peer(self, asker: str) -> int:
        if self.error_count > 0:
            LOG.info("peer %s asked; this node's last API check failed: ApiError", asker)
            return int(self.peer.API_ERROR)
        try:
            items = self.api.remediations(self.peer_api_timeout())
        except (OSError, ValueError, ssl.SSLError) as err:
            LOG.info("peer %s asked; the API cannot be read: %s", asker, err)
            return int(self.peer.API_ERROR)
        answer = int(self.peer.peer_answer(items, asker))
        LOG.info("peer %s asked: %s", asker, self.peer.ANSWER_NAMES[answer])
        return answer

    # decisions
    def decide(self) -> Any:
        """The verdict after a failed API check: the peers' (a confirmed one restarts the isolation limit's clock
        from this round's start), then the isolation limit."""
        workers = self.worker_peers()
        sizes = self.safetime.peer_batches(len(workers))
        since = time.monotonic() - self.last_answer
        round_start = boot_clock()

        def batches() -> Any:
            start = 0
            for size in sizes:
                yield self.ask_all(workers[start : start + size])
                start += size

        errors = self.error_count
        if self.limit_in_force():
            errors = self.peer.peers_due(
                errors, self.cfg["maxApiErrorThreshold"], self.cut_off_seconds(), self.isolation_limit, self.peer_lead()
            )
        verdict = self.peer.worker_verdict(
            errors,
            self.cfg["maxApiErrorThreshold"],
            len(workers),
            self.cfg["minPeersForRemediation"],
            batches(),
            since,
        )
        if self.control_plane:
            cp_answers = self.ask_all(self.control_plane_peers())
            verdict = self.peer.control_plane_verdict(verdict, cp_answers, self.diagnostics_ok())
        if verdict.confirmed:
            self.confirm(round_start)
        if not self.limit_in_force():
            return verdict
        return self.peer.limit_verdict(verdict, self.cut_off_seconds(), self.isolation_limit)

    def confirm(self, at: float) -> None:
        """No remediation was pending at ``at`` (boot clock): the node's own read, or a majority of its peers."""
        if at > self.confirmed_at or not self.confirmed_this_boot:
            self.confirmed_at = max(at, self.confirmed_at) if self.confirmed_this_boot else at
            self.confirmed_this_boot = True
            self.confirmation.write(self.confirmed_at)

    def cut_off_seconds(self) -> float:
        return max(0.0, boot_clock() - self.confirmed_at)

    def limit_in_force(self) -> bool:
        return bool(
            self.peer.limit_in_force(self.confirmed_this_boot, self.published.get(REBOOT_CAPABLE_ANNOTATION) == "false")
        )

    def peer_lead(self) -> float:
        """How long before the isolation limit the peers are asked whatever the API error count: a check (its
        read after a ready answer included) and a batch of peers."""
        cfg = self.cfg
        return float(
            cfg["apiCheckInterval"] + 2 * cfg["apiServerTimeout"] + cfg["peerDialTimeout"] + self.request_timeout + 1.0
        )

    def diagnostics_ok(self) -> bool:
        """Control-plane self-diagnostics: the configured endpoint answers and the kubelet port accepts."""
        url = self.cfg["endpointHealthCheckUrl"]
        if url:
            parts = urllib.parse.urlsplit(url)
            port = parts.port or (443 if parts.scheme == "https" else 80)
            try:
                connect(parts.hostname or "", port, self.resolver, 5.0).close()
            except OSError:
                return False
        try:
            socket.create_connection(("127.0.0.1", 10250), timeout=5).close()
        except OSError:
            return False
        return True

    def check_once(self) -> bool:
        """One API check (and, after enough failures, a peer round). True when it showed the node
        healthy: the API answered and holds no remediation for it, or the peers said so."""
        self.checks += 1
        timeout = self.cfg["apiServerTimeout"]
        started = boot_clock()
        if self.api.ready(timeout):
            try:
                items = self.api.remediations(timeout)
            except ReadFailed as err:
                # fails closed: no answer about the remediations is never "none", so this is an API error (the
                # peers are asked, the isolation limit runs) and the node says it cannot be fenced on a guess
                self.read_failures[err.reason] = self.read_failures.get(err.reason, 0) + 1
                if str(err) != self.read_error:
                    LOG.warning("cannot read this node's remediation state (%s): %s", err.reason, err)
                self.read_error = str(err)
                # a refusal that lasts (no permission, no such resource) makes the node not reboot-capable; a
                # passing one (time-out, throttling, a server error) is only an API error
                self.read_refused = self.read_refused or err.reason in LASTING_READ_FAILURES
                return self.api_error()
            if self.error_count:
                LOG.info("API server reachable again after %d failed checks", self.error_count)
            if self.read_refused:
                LOG.info("this node's remediation state can be read again")
            self.error_count = 0
            self.read_refused = False
            self.read_error = ""
            self.confirm(started)
            self.state = "fenced" if self.fenced else "healthy"
            item = self.peer.remediation_to_act_on(items, self.node, self.boot, self.fenced_uids)
            if item is not None:
                meta = item.get("metadata") or {}
                self.fenced_uids.append(str(meta.get("uid", "")))
                self.fence(
                    f"SelfNodeRemediation {meta.get('namespace')}/{meta.get('name')} is for this node", "remediation"
                )
                return False
            return not self.fenced
        return self.api_error()

    def api_error(self) -> bool:
        """A failed API check: the peer decision and the isolation limit. True when the peers confirmed."""
        self.error_count += 1
        self.api_failures += 1
        if self.fenced:
            return False
        verdict = self.decide()
        self.last_verdict = verdict.as_dict()
        self.verdicts[verdict.code] = self.verdicts.get(verdict.code, 0) + 1
        # a confirmation by the peers does not reset the count (unlike upstream): while the API stays out of reach
        # the peers are asked at every check, so that one confirms the node again well before the limit
        level = logging.WARNING if verdict.fence else logging.INFO
        LOG.log(level, "API check failed (%d in a row): %s: %s", self.error_count, verdict.code, verdict.reason)
        if verdict.fence:
            self.fence(verdict.reason, verdict.code)
            return False
        self.state = "fenced" if self.fenced else "api-errors"  # (the feeder may have fenced meanwhile)
        return bool(verdict.confirmed)

    def arm_watchdog(self) -> None:
        """Open the watchdog after a check that showed the node healthy (never while fenced)."""
        with self.fence_lock:  # never opened (which feeds it) once the feeder began a fence
            if self.watchdog_usable and not self.watchdog.armed and not self.fenced:
                self.watchdog_usable = self.watchdog.open()
                self.watchdog_failed = not self.watchdog_usable

    def capability(self) -> dict[str, str] | None:
        """What the node's annotations must say about fencing it, or None to leave them: before the first
        check that passed (the watchdog is not open yet) and during a fence. Reboot-capable with an armed
        watchdog (its timeout, in whole seconds, never 0), or without a watchdog device when the reboot
        command may fence (the configured timeout); a watchdog that failed to open, or no way to fence,
        is not capable."""
        if self.fenced:
            return None
        if self.read_refused:
            # the API answers but the node cannot read its remediation state: it would not see a remediation
            capable, seconds = False, self.watchdog.timeout if self.watchdog.armed else self.watchdog.fallback_timeout
        elif self.watchdog.armed:
            capable, seconds = True, self.watchdog.timeout
        elif self.watchdog_usable:
            return None
        else:
            capable = self.cfg["isSoftwareRebootEnabled"] and not self.watchdog_failed
            seconds = self.watchdog.fallback_timeout
        return {
            REBOOT_CAPABLE_ANNOTATION: "true" if capable else "false",
            WATCHDOG_TIMEOUT_ANNOTATION: str(max(1, math.ceil(seconds))),
        }

    def publish(self, wanted: dict[str, str] | None = None) -> None:
        """Bring the node's two annotations to ``wanted`` (by default :meth:`capability`) when they differ
        from what the node last showed; a failure is retried at the next check."""
        wanted = self.capability() if wanted is None else wanted
        if wanted is None or wanted == self.published:
            return
        before = dict(self.published)
        # unknown while the write is under way: a write whose answer is lost may have been applied, so the node
        # may show either value (and the isolation limit rests only on a "false" known to be there)
        self.published = {key: None for key in wanted}
        try:
            self.api.annotate_node(self.node, wanted, self.cfg["apiServerTimeout"])
        except (OSError, ValueError, ssl.SSLError) as err:
            if isinstance(err, PatchRefused):
                self.published = before  # answered with an error: not applied
            self.publish_failures += 1
            if str(err) != self.publish_error:
                LOG.warning("cannot publish %s on node %s: %s", wanted, self.node, err)
            self.publish_error = str(err)
            return
        self.publish_error = ""
        self.published = dict(wanted)
        LOG.info("node %s annotated %s", self.node, wanted)

    def fence(self, reason: str, cause: str) -> None:
        """Begin fencing; ``cause`` is a fixed word for the metrics ("remediation" or the decision code), ``reason``
        the sentence for the log and the status file."""
        with self.fence_lock:
            if self.fenced:
                return
            if not self.watchdog.armed and self.watchdog_usable:
                # not opened yet (no check had passed): opening starts its timer, which is never fed again
                self.watchdog_usable = self.watchdog.open()
            since = boot_clock()
            if not self.watchdog.armed:
                # nothing will reset the node: the fallback's schedule starts as if the watchdog had failed
                since -= self.safetime.software_fallback(self.watchdog.timeout)[0]
            # the marker first: once the watchdog is no longer fed, no agent of this boot feeds it again
            self.marker.write(reason, since, self.watchdog.timeout, cause)
            self.watchdog.stop_feeding()
            self.fenced = True
            self.fenced_at = since
            self.fence_reason = reason
            self.fence_cause = cause
            self.state = "fenced"
        if self.watchdog.armed:
            LOG.warning("FENCING: %s; the watchdog is no longer fed (reset in %gs)", reason, self.watchdog.timeout)
        else:
            LOG.warning("FENCING: %s; no armed watchdog, software reboot now", reason)
            self.fallback()
        self.write_status()

    def fallback(self) -> None:
        """The software fallback of a fence, on the schedule of the safe time: the reboot command once
        the watchdog should have reset the node, sysrq once more after that (or at once when the reboot
        command fails)."""
        if not self.cfg["isSoftwareRebootEnabled"]:
            return
        command_at, sysrq_at = self.safetime.software_fallback(self.watchdog.timeout)
        with self.fallback_lock:  # the feeder thread and a fence on the main thread may both get here
            elapsed = boot_clock() - self.fenced_at
            if elapsed >= command_at and "command" not in self.fallback_done:
                self.fallback_done.add("command")
                LOG.warning("still running %.0fs after fencing began: software reboot", elapsed)
                if not self.software_reboot():
                    self.sysrq()
            if elapsed >= sysrq_at and "sysrq" not in self.fallback_done:
                self.sysrq()

    def software_reboot(self) -> bool:
        command = self.cfg["rebootCommand"]
        self.reboots_tried["command"] = self.reboots_tried.get("command", 0) + 1
        LOG.warning("software reboot: %s", " ".join(command))
        try:
            result = subprocess.run(command, check=False, capture_output=True, timeout=30)
        except (OSError, subprocess.SubprocessError) as err:
            LOG.error("the reboot command failed: %s", err)
            return False
        return result.returncode == 0

    def sysrq(self) -> None:
        self.fallback_done.add("sysrq")
        self.reboots_tried["sysrq"] = self.reboots_tried.get("sysrq", 0) + 1
        LOG.error("reboot through %s", self.cfg["sysrqTriggerPath"])
        try:
            with open(self.cfg["sysrqTriggerPath"], "w", encoding="ascii") as handle:
                handle.write("b")
        except OSError as err:
            LOG.error("sysrq reboot failed: %s", err)

    def write_status(self) -> None:
        with self.status_lock:  # the feeder writes it too when it fences
            self._write_status()

    def _write_status(self) -> None:
        path = self.cfg["statusFile"]
        server = self.server
        now_boot, now = boot_clock(), time.time()
        status = {
            "node": self.node,
            "state": self.state,
            "fenced": self.fenced,
            "fence_reason": self.fence_reason,
            "fence_cause": self.fence_cause,
            "fence_carried_over": self.fence_carried_over,
            "api_errors": self.error_count,
            "control_plane": self.control_plane,
            "peers": len(self.peers),
            "peer_answers_served": server.answered if server else 0,
            "peer_connections_refused": server.rejected if server else 0,
            "peer_connections_from_strangers": server.strangers if server else 0,
            "peer_connections_busy": server.busy if server else 0,
            "peer_exchanges_overdue": server.overdue if server else 0,
            "watchdog": {
                "path": self.watchdog.path,
                "usable": self.watchdog_usable,
                "armed": self.watchdog.armed,
                "feeding": self.watchdog.armed and self.watchdog.feeding,
                "timeout": self.watchdog.timeout,
            },
            "software_fallback": sorted(self.fallback_done),
            # the isolation limit: when this node last confirmed no remediation was pending (Unix time), how
            # long ago, and how long it may be cut off before it fences
            "confirmed_at": round(now - (now_boot - self.confirmed_at), 3),
            "cut_off_seconds": round(max(0.0, now_boot - self.confirmed_at), 3),
            "isolation_limit_seconds": self.isolation_limit,
            "isolation_limit_in_force": self.limit_in_force(),
            "fenced_at": round(now - (now_boot - self.fenced_at), 3) if self.fenced else None,
            "remediation_read_error": self.read_error,
            "remediation_read_failures": dict(self.read_failures),
            "source_address": self.source_address,
            "published": self.published,
            "publish_error": self.publish_error,
            "last_verdict": self.last_verdict,
            "verdicts": dict(self.verdicts),
            "checks": self.checks,
            "pid": os.getpid(),
            "time": datetime.now(timezone.utc).isoformat(),
        }
        try:
            write_json(path, status)
        except OSError as err:
            LOG.debug("cannot write the status file: %s", err)

    def metrics_text(self) -> str:
        """The metrics in Prometheus' text format. Only counts, states and fixed words: no peer name or address,
        no remediation object's name, nothing from a file the agent reads (token, keys)."""
        catalogue = self.metrics.AGENT
        out = self.metrics.Exposition()

        def add(name: str, value: Any, **labels: Any) -> None:
            out.add(catalogue[name], value, labels)

        add("nodeops_agent_info", 1, node=self.node, python=".".join(str(v) for v in sys.version_info[:3]))
        state = self.state
        for each in self.metrics.AGENT_STATES:
            add("nodeops_agent_state", each == state, state=each)
        add("nodeops_agent_start_time_seconds", self.started)
        add("nodeops_agent_api_checks_total", self.checks)
        add("nodeops_agent_api_check_failures_total", self.api_failures)
        add("nodeops_agent_api_consecutive_failures", self.error_count)
        failures = dict(self.read_failures)
        for reason in READ_FAILURE_REASONS:
            add("nodeops_agent_remediation_read_failures_total", failures.get(reason, 0), reason=reason)
        add("nodeops_agent_name_lookup_failures_total", self.resolver.failures, reason="error")
        add("nodeops_agent_name_lookup_failures_total", self.resolver.timeouts, reason="timeout")
        add("nodeops_agent_cut_off_seconds", round(self.cut_off_seconds(), 3))
        add("nodeops_agent_isolation_limit_seconds", self.isolation_limit)
        out.declare(catalogue["nodeops_agent_verdicts_total"])
        for code, count in sorted(dict(self.verdicts).items()):
            add("nodeops_agent_verdicts_total", count, code=code)
        kinds = sorted(set(self.peer.ANSWER_NAMES.values()))
        asked, served = dict(self.peer_answers), dict(self.answers_served)
        for kind in kinds:
            add("nodeops_agent_peer_answers_total", asked.get(kind, 0), answer=kind)
        for kind in ("Healthy", "Unhealthy", "ApiError"):
            add("nodeops_agent_peer_answers_served_total", served.get(kind, 0), answer=kind)
        server = self.server
        refused = {
            "stranger": server.strangers if server else 0,
            "busy": server.busy if server else 0,
            "failed": server.rejected if server else 0,
            "overdue": server.overdue if server else 0,
        }
        for reason, count in refused.items():
            add("nodeops_agent_peer_connections_refused_total", count, reason=reason)
        peers = list(self.peers)
        add("nodeops_agent_peers", sum(1 for p in peers if p["worker"]), role="worker")
        add("nodeops_agent_peers", sum(1 for p in peers if p["controlPlane"]), role="control_plane")
        add("nodeops_agent_peer_list_ok", self.peers_ok)
        watchdog = self.watchdog
        armed = watchdog.armed
        add("nodeops_agent_watchdog_armed", armed)
        add("nodeops_agent_watchdog_feeding", armed and watchdog.feeding)
        add("nodeops_agent_watchdog_timeout_seconds", float(watchdog.timeout))
        add("nodeops_agent_watchdog_feeds_total", watchdog.feeds)
        add("nodeops_agent_watchdog_feed_failures_total", watchdog.feed_failures)
        out.declare(catalogue["nodeops_agent_watchdog_last_feed_age_seconds"])
        if armed and watchdog.last_feed:
            add("nodeops_agent_watchdog_last_feed_age_seconds", round(time.monotonic() - watchdog.last_feed, 3))
        add("nodeops_agent_reboot_capable", self.published.get(REBOOT_CAPABLE_ANNOTATION) == "true")
        add("nodeops_agent_publish_failures_total", self.publish_failures)
        fenced = self.fenced
        add("nodeops_agent_fenced", fenced)
        out.declare(catalogue["nodeops_agent_fence_info"])
        out.declare(catalogue["nodeops_agent_fence_start_time_seconds"])
        if fenced:
            add(
                "nodeops_agent_fence_info",
                1,
                cause=self.fence_cause or "unknown",
                carried_over=self.fence_carried_over,
            )
            add("nodeops_agent_fence_start_time_seconds", round(time.time() - (boot_clock() - self.fenced_at), 3))
        tried = dict(self.reboots_tried)
        for method in ("command", "sysrq"):
            add("nodeops_agent_software_reboots_total", tried.get(method, 0), method=method)
        text: str = out.render()
        return text

    def start_metrics(self) -> None:
        """Serve the metrics on metricsAddress:metricsPort (0: not at all). A port that cannot be bound is tried
        again at every check, logged once: the metrics never keep the agent from its work."""
        port = self.cfg["metricsPort"]
        if not port or self.metrics_server is not None:
            return
        address = (self.cfg["metricsAddress"], port)
        try:
            self.metrics_server = MetricsServer(address, self.metrics_text).start()
        except Exception as err:  # nothing of the metrics may stop the checks or the watchdog
            if str(err) != self.metrics_error:
                LOG.error("cannot serve the metrics on %s:%d: %s (tried again at every check)", *address, err)
            self.metrics_error = str(err)
            return
        self.metrics_error = ""
        LOG.info("metrics on http://%s:%d%s", address[0], port, METRICS_PATH)

    # threads
    def feeder(self) -> None:
        """Feeds the watchdog every third of its timeout, and holds the isolation limit: it looks again no later
        than the moment the limit is reached and fences then, whatever the main thread is waiting for (a
        lookup, a read, a peer round), so the node never feeds past it."""
        while not self.stop.is_set():
            wait = min(self.watchdog.timeout / 3, 1.0)
            try:
                wait = self.feed_once()
            except Exception as err:  # the feeder never dies: it holds the limit and runs the fallback
                LOG.error("the watchdog feeder failed (it goes on): %r", err)
            self.stop.wait(wait)

    def feed_once(self) -> float:
        """One turn of the feeder; returns how long to wait before the next."""
        # not before this process has read its Node once (what it shows, when it can be read): a restart while
        # the node shows itself not capable must not fence it before the agent knows that
        in_force = self.limit_in_force() and self.node_read_tried
        if not self.fenced and in_force:
            cut_off = self.cut_off_seconds()
            if self.peer.past_isolation_limit(cut_off, self.isolation_limit):
                self.fence(
                    f"cut off from this node's remediation state for {cut_off:.1f}s (the isolation limit is"
                    f" {self.isolation_limit:g}s) without a read of it or a majority of the peers asked saying Healthy",
                    self.peer.Code.ISOLATION_LIMIT,
                )
        if self.fenced:
            self.fallback()
            return float(min(self.watchdog.timeout / 3, 1.0))
        if self.watchdog.armed:
            try:
                self.watchdog.feed()  # (counts its failures for the metrics)
            except OSError as err:
                LOG.error("feeding the watchdog failed: %s", err)
        if not in_force:
            return float(self.watchdog.timeout / 3)
        return float(self.peer.feeder_wait(self.cut_off_seconds(), self.isolation_limit, self.watchdog.timeout / 3))

    def run(self) -> int:
        if self.fenced:
            LOG.warning(
                "FENCING goes on from an earlier agent process of this boot (%s); the watchdog stays unfed",
                self.fence_reason,
            )
        else:
            self.watchdog_usable = self.watchdog.available()
            if not self.watchdog_usable and not self.cfg["isSoftwareRebootEnabled"]:
                LOG.error("no usable watchdog and isSoftwareRebootEnabled is false: this node cannot be fenced")
                self.publish()  # not reboot-capable, so that nothing is remediated on a guess
                return 3
        # the feeder first: it holds the isolation limit while the rest starts (a port held by another process
        # keeps the peer server from starting for as long as it is held)
        threading.Thread(target=self.feeder, daemon=True).start()
        # the peer list before the port opens: a peer's connection is never closed as a stranger's because
        # the agent was still starting
        self.peers_loaded_at = time.monotonic()
        self.peers_changed()
        self.refresh_peers()
        self.node_read_tried = True  # (bounded: its lookups and its read of the Node have time-outs)
        while True:
            try:
                self.server = PeerServer(
                    (self.cfg["listenAddress"], self.cfg["hostPort"]),
                    server_context(self.cfg),
                    self.answer_peer,
                    self.is_peer,
                    # the handshake and the request, then the answer's API read
                    exchange_seconds=max(PEER_EXCHANGE_SECONDS, self.peer_api_timeout() + PEER_HANDSHAKE_SECONDS),
                )
                break
            except OSError as err:
                # (a port still held by something else): retried, never a crash loop
                LOG.error("cannot listen on %s:%d: %s", self.cfg["listenAddress"], self.cfg["hostPort"], err)
                if self.stop.wait(5.0):
                    return 0
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 1.0}, daemon=True).start()
        LOG.info("node agent for %s started; peers on port %d", self.node, self.cfg["hostPort"])
        self.start_metrics()
        if not self.cfg["remediationNamespace"]:
            LOG.warning(
                "remediationNamespace is empty: a SelfNodeRemediation in any namespace fences this node;"
                " set it to the namespace of the SelfNodeRemediationConfig"
            )
        while not self.stop.is_set():
            now = time.monotonic()
            interval = (
                self.cfg["peerUpdateInterval"]
                if self.peers_ok
                else min(PEER_RETRY_SECONDS, self.cfg["peerUpdateInterval"])
            )
            if self.peers_changed() or now - self.peers_loaded_at >= interval:
                self.peers_loaded_at = now
                self.refresh_peers()
            else:
                self.update_peer_addresses()
            if self.check_once():
                self.arm_watchdog()
            self.publish()
            self.write_status()
            self.start_metrics()
            self.stop.wait(self.cfg["apiCheckInterval"])
        self.server.shutdown()
        self.server.server_close()
        if self.metrics_server is not None:
            self.metrics_server.close()
        self.watchdog.disarm()
        LOG.info("node agent stopped")
        return 0


def unusable_file(cfg: dict[str, Any]) -> str:
    """What is wrong with the files the configuration names ("" when nothing): each must be readable,
    and the certificates and key must load (a configuration error exits 2 and is not restarted, so a
    broken file never turns into a crash loop)."""
    for name in ("caFile", "tokenFile", "peerCaFile", "peerCertFile", "peerKeyFile", "peersFile"):
        if not os.access(cfg[name], os.R_OK):
            return f"{name}: {cfg[name]} is not readable"
    try:
        ssl.create_default_context(cafile=cfg["caFile"])
    except (OSError, ssl.SSLError, ValueError) as err:
        return f"caFile: {cfg['caFile']} is not a CA certificate: {err}"
    try:
        server_context(cfg)
        client_context(cfg)
    except (OSError, ssl.SSLError, ValueError) as err:
        return f"peerCaFile, peerCertFile, peerKeyFile: the peer certificates do not load: {err}"
    return ""


def read_config(path: str, core: dict[str, ModuleType]) -> dict[str, Any]:
    with open(path, encoding="utf-8") as handle:
        raw = json.load(handle)
    result: dict[str, Any] = core["agentconfig"].validate(raw)
    return result


def decide_from(path: str, core: dict[str, ModuleType]) -> int:
    """``--decide``: the peer decision for a situation given as JSON, printed as JSON (exit 0), or why the input
    cannot be used (exit 2)."""
    peer = core["peer"]
    try:
        if path == "-":
            data = json.load(sys.stdin)
        else:
            with open(path, encoding="utf-8") as handle:
                data = json.load(handle)
        verdict = peer.decide(data)
    except (OSError, ValueError) as err:  # peer.DecideError and json's errors are ValueErrors
        print(f"nodeops-node-agent: --decide {path}: {err}", file=sys.stderr)
        return 2
    print(json.dumps(verdict.as_dict(), indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="nodeops node agent (self node remediation)")
    parser.add_argument("--config", default="/etc/nodeops-node-agent/config.json")
    parser.add_argument("--check-config", action="store_true", help="validate the configuration and exit")
    parser.add_argument("--core-dir", default=None, help="where the nodeops_core package is")
    parser.add_argument(
        "--decide",
        metavar="FILE",
        help="print the verdict (JSON) for the situation in FILE ('-': standard input) and exit; no configuration,"
        " network or watchdog is used",
    )
    args = parser.parse_args(argv)
    core = load_core(args.core_dir)
    if args.decide is not None:
        return decide_from(args.decide, core)
    try:
        cfg = read_config(args.config, core)
    except (OSError, ValueError) as err:
        print(f"nodeops-node-agent: configuration {args.config}: {err}", file=sys.stderr)
        return 2
    problem = unusable_file(cfg)
    if problem:
        print(f"nodeops-node-agent: configuration {args.config}: {problem}", file=sys.stderr)
        return 2
    if args.check_config:
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
