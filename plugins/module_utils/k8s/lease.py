# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A ``coordination.k8s.io/v1`` Lease as a lock between reconcile passes (DESIGN.md deviation 4).

Every write is conditional: the Lease is created (409 when another process created it first) or
replaced with the resourceVersion that was read (409 when another process wrote it in between). A
holder whose ``renewTime + leaseDurationSeconds`` has passed is taken over. Times are MicroTime
(RFC 3339 with microseconds), as client-go writes them.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from .client import LEASES, Client
from .errors import Conflict, NotFound


def default_identity() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def micro_time(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_micro_time(value: Any) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    text = value[:-1] + "+00:00" if value.endswith("Z") else value
    try:
        return datetime.datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


class Lease:
    """One named Lease held by ``identity``; ``clock`` is wall time (the Lease stores wall times)."""

    def __init__(
        self,
        client: Client,
        name: str,
        namespace: str,
        identity: str | None = None,
        duration: int = 60,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.name = name
        self.namespace = namespace
        self.identity = identity or default_identity()
        self.duration = duration
        self.clock = clock
        self.held = False
        self.holder: str | None = None  # the other holder seen by the last failed attempt
        self._stop = threading.Event()

    def _body(self, current: dict[str, Any] | None, acquire: bool) -> dict[str, Any]:
        now = micro_time(self.clock())
        spec = dict((current or {}).get("spec") or {})
        if acquire:
            spec["acquireTime"] = now
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + (1 if current else 0)
        spec.update({"holderIdentity": self.identity, "leaseDurationSeconds": self.duration, "renewTime": now})
        meta: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if current:
            meta = dict(current["metadata"])
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta, "spec": spec}

    def expired(self, lease: dict[str, Any]) -> bool:
        spec = lease.get("spec") or {}
        if not spec.get("holderIdentity"):
            return True
        renewed = parse_micro_time(spec.get("renewTime")) or parse_micro_time(spec.get("acquireTime"))
        duration = spec.get("leaseDurationSeconds") or self.duration
        return renewed is None or self.clock() > renewed + float(duration)

    def try_acquire(self) -> bool:
        """One conditional attempt; True when this identity holds the Lease afterwards."""
        try:
            current = self.client.get(LEASES, self.name, self.namespace)
        except NotFound:
            try:
                self.client.create(LEASES, self._body(None, True), self.namespace)
            except Conflict:  # another process created it first
                return False
            self.held, self.holder = True, None
            return True
        holder = (current.get("spec") or {}).get("holderIdentity")
        if holder != self.identity and not self.expired(current):
            self.held, self.holder = False, holder
            return False
        try:
            self.client.replace(LEASES, self._body(current, holder != self.identity))
        except Conflict:
            return False
        self.held, self.holder = True, None
        return True

    def acquire(self, wait: float, interval: float = 0.5) -> bool:
        """Try until held or ``wait`` seconds have passed (polling with a deadline)."""
        deadline = time.monotonic() + wait
        while True:
            if self.try_acquire():
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self._stop.wait(min(interval, remaining))

    def renew(self) -> bool:
        """Extend the hold; False (and no longer held) when someone else took the Lease."""
        if not self.held:
            return False
        try:
            current = self.client.get(LEASES, self.name, self.namespace)
        except NotFound:
            self.held = False
            return False
        if (current.get("spec") or {}).get("holderIdentity") != self.identity:
            self.held = False
            return False
        try:
            self.client.replace(LEASES, self._body(current, False))
        except Conflict:
            return self.renew()
        return True

    def release(self) -> None:
        """Give the Lease up so that the next pass need not wait for it to expire."""
        if not self.held:
            return
        self.held = False
        try:
            current = self.client.get(LEASES, self.name, self.namespace)
        except NotFound:
            return
        spec = dict(current.get("spec") or {})
        if spec.get("holderIdentity") != self.identity:
            return
        spec["holderIdentity"] = None
        spec.pop("renewTime", None)
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": current["metadata"], "spec": spec}
        with contextlib.suppress(Conflict):  # someone took it over after it expired: theirs now
            self.client.replace(LEASES, body)
