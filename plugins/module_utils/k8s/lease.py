# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A ``coordination.k8s.io/v1`` Lease as a lock between reconcile passes (upstream relies on one leader;
here passes may run from many processes at once, and the Lease serialises them).

Every write is conditional: the Lease is created (409 when another process created it first) or
replaced with the resourceVersion that was read (409 when another process wrote it in between). A
holder whose ``renewTime + leaseDurationSeconds`` has passed is taken over. Times are MicroTime
(RFC 3339 with microseconds), as client-go writes them.

A holder can show that it holds the Lease only until ``VALID_FRACTION`` of the duration has passed
since the start of its last successful acquire or renewal (on this process's monotonic clock, which
keeps running while the process is stopped). :class:`GuardedClient` checks that before every write, so
a pass whose renewal failed, or that was paused past that time, writes nothing more.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from ..core.node.rfc3339 import micro_time, to_epoch
from .client import LEASES, Client, within_deadline
from .errors import Conflict, K8sError, NotFound

#: Share of the Lease's duration during which a holder counts on it after its last acquire or renewal; the
#: rest is the margin for other processes' clocks and for a write already under way.
VALID_FRACTION = 0.8
# A waiter that wants the Lease handed to it when its holder gives it up (see Lease.ask): "<identity> <epoch>"
NEXT_HOLDER = "maintenance.nodeops.io/next-holder"
#: Seconds one attempt of a write may take to connect (the client's connect timeout): a guarded write is not
#: tried again later than this before the hold runs out. The rest of the margin (``1 - VALID_FRACTION`` of the
#: duration, 12 s of 60) covers other processes' clocks.
SEND_MARGIN = 10.0
#: Attempts of one renewal when other writers keep changing the Lease (each a fresh read).
RENEW_ATTEMPTS = 3
#: The client methods that write; GuardedClient checks the Lease before each.
WRITES = frozenset({"create", "replace", "create_event", "patch", "apply", "delete", "evict", "delete_pod"})


class LeaseLost(K8sError):
    """This process can no longer show that it holds the Lease: it must not write."""

    reason = "lease_lost"


def lease_name(prefix: str, name: str) -> str:
    """``prefix-name`` as a Lease name (a DNS subdomain of at most 253 characters): a name too long for that is
    replaced by a digest of it."""
    full = f"{prefix}-{name}"
    if len(full) <= 253:
        return full
    return f"{prefix}-{hashlib.sha256(name.encode()).hexdigest()[:16]}"


def default_identity() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


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
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.monotonic = monotonic
        self.name = name
        self.namespace = namespace
        self.identity = identity or default_identity()
        self.duration = duration
        self.clock = clock
        self.held = False
        self.holder: str | None = None  # the other holder seen by the last failed attempt
        #: wall time at which the other holder's hold seen by the last failed attempt runs out, unless renewed
        self.holder_expires: float | None = None
        self.valid_until = 0.0  # self.monotonic() until which the hold is shown
        # when it gives the Lease up: hand it to the waiter that asked within this many seconds (0: to no one)
        self.hand_over_within = 0.0
        self._stop = threading.Event()

    def _confirmed(self, started: float) -> None:
        """The acquire or renewal sent at monotonic time ``started`` succeeded."""
        self.held, self.holder = True, None
        self.valid_until = started + self.duration * VALID_FRACTION

    def check(self) -> None:
        """Raise LeaseLost unless this process can still show that it holds the Lease."""
        if not self.held or self.monotonic() >= self.valid_until:
            raise LeaseLost(
                f"Lease {self.namespace}/{self.name} is not shown to be held by {self.identity} any more"
                " (renewal failed or its time is up): this pass stopped writing."
            )

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
            if self.asker(current, float("inf")) == self.identity:  # its own ask is answered
                meta["annotations"] = {k: v for k, v in meta["annotations"].items() if k != NEXT_HOLDER}
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta, "spec": spec}

    def asker(self, lease: dict[str, Any], within: float) -> str | None:
        """The identity that asked for ``lease`` (see :meth:`ask`) at most ``within`` seconds ago, if any."""
        note = ((lease.get("metadata") or {}).get("annotations") or {}).get(NEXT_HOLDER) or ""
        identity, _sep, at = note.rpartition(" ")
        try:
            asked = float(at)
        except ValueError:
            return None
        return identity if identity and self.clock() - asked <= within else None

    def ask(self) -> None:
        """As a waiter: note on the Lease that this identity wants it next, for a holder that hands it over (see
        :meth:`asked`). One conditional write, at most; a holder's renewal in between, or an error, leaves it for
        the next ask."""
        try:
            current = self.client.get(LEASES, self.name, self.namespace)
            if (current.get("spec") or {}).get("holderIdentity") in (None, "", self.identity):
                return
            meta = dict(current["metadata"])
            meta["annotations"] = {**(meta.get("annotations") or {}), NEXT_HOLDER: f"{self.identity} {self.clock()}"}
            self.client.replace(LEASES, {**current, "metadata": meta})
        except K8sError:  # Conflict, NotFound, the API away: asked again later
            return

    def withdraw(self) -> None:
        """As a waiter that stops waiting (its run ended): take its ask back, and give up the Lease if a holder
        handed it over meanwhile, so that no one waits for the Lease of a process that is going away."""
        for _attempt in range(RENEW_ATTEMPTS):
            try:
                current = self.client.get(LEASES, self.name, self.namespace)
            except NotFound:
                return
            meta, spec = dict(current["metadata"]), dict(current.get("spec") or {})
            changed = False
            if self.asker(current, float("inf")) == self.identity:
                meta["annotations"] = {k: v for k, v in meta["annotations"].items() if k != NEXT_HOLDER}
                changed = True
            if spec.get("holderIdentity") == self.identity and not self.held:  # handed over as it stopped
                spec["holderIdentity"] = None
                spec.pop("renewTime", None)
                changed = True
            if not changed:
                return
            try:
                self.client.replace(LEASES, {**current, "metadata": meta, "spec": spec})
            except Conflict:
                continue
            return

    def asked(self, within: float) -> str | None:
        """As the holder: the identity of another that asked for the Lease within ``within`` seconds (one read)."""
        current = self.client.get(LEASES, self.name, self.namespace)
        asker = self.asker(current, within)
        return asker if asker != self.identity else None

    def expires(self, lease: dict[str, Any]) -> float | None:
        """The wall time at which ``lease``'s hold runs out unless renewed (None: no holder, or no time)."""
        spec = lease.get("spec") or {}
        if not spec.get("holderIdentity"):
            return None
        renewed = to_epoch(spec.get("renewTime")) or to_epoch(spec.get("acquireTime"))
        if renewed is None:
            return None
        return renewed + float(spec.get("leaseDurationSeconds") or self.duration)

    def expired(self, lease: dict[str, Any]) -> bool:
        expires = self.expires(lease)
        return expires is None or self.clock() > expires

    def try_acquire(self) -> bool:
        """One conditional attempt; True when this identity holds the Lease afterwards."""
        started = self.monotonic()
        try:
            current = self.client.get(LEASES, self.name, self.namespace)
        except NotFound:
            try:
                self.client.create(LEASES, self._body(None, True), self.namespace)
            except Conflict:  # another process created it first
                return False
            self._confirmed(started)
            return True
        holder = (current.get("spec") or {}).get("holderIdentity")
        if holder != self.identity and not self.expired(current):
            self.held, self.holder = False, holder
            self.holder_expires = self.expires(current)
            return False
        try:
            self.client.replace(LEASES, self._body(current, holder != self.identity))
        except Conflict:
            return False
        self._confirmed(started)
        return True

    def acquire(self, wait: float, interval: float = 0.5, ask: bool = False) -> bool:
        """Try until held or ``wait`` seconds have passed (polling with a deadline); with ``ask``, once another
        holds it, ask to be handed it next (see :meth:`ask`)."""
        deadline = time.monotonic() + wait
        while True:
            if self.try_acquire():
                return True
            if ask:
                self.ask()
                ask = False
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self._stop.wait(min(interval, remaining))

    def renew(self) -> bool:
        """Extend the hold; False (and no longer held) when someone else took the Lease or other writers
        kept changing it for RENEW_ATTEMPTS attempts. API errors propagate (the hold is then not
        extended and runs out at ``valid_until``)."""
        for _attempt in range(RENEW_ATTEMPTS):
            if not self.held:
                return False
            started = self.monotonic()
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
                continue
            self._confirmed(started)
            return True
        self.held = False
        return False

    def release(self, retry_for: float = 0.0, interval: float = 1.0) -> bool:
        """Give the Lease up so that the next pass need not wait for it to expire. When the API cannot be
        reached, try again for up to ``retry_for`` seconds (never past the Lease's own expiry, after which
        there is nothing to give up). True when given up, or nothing was held."""
        if not self.held:
            return True
        self.held = False
        deadline = time.monotonic() + min(retry_for, max(0.0, self.valid_until - self.monotonic()))
        while True:
            try:
                with within_deadline(self.client, deadline):  # the client's own retries end there too
                    self._give_up()
                return True
            except K8sError:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._stop.wait(min(interval, remaining))

    @contextlib.contextmanager
    def kept(self, report: Callable[[str], None]) -> Iterator[None]:
        """Within the block, renew the hold every third of its duration from a thread. A renewal the API did
        not answer is told to ``report`` and tried again at the next turn; a Lease someone else took ends the
        renewals. Either way the writes stop on their own once the hold can no longer be shown
        (:class:`GuardedClient`)."""
        stop = threading.Event()

        def renew() -> None:
            while not stop.wait(max(1.0, self.duration / 3)):
                try:
                    if not self.renew():
                        report(f"Lease {self.namespace}/{self.name} was lost during the pass; it stopped writing.")
                        return
                except K8sError as exc:
                    report(f"Renewing Lease {self.namespace}/{self.name} failed: {exc.msg}")
                except Exception as exc:  # the renewer must not die silently (writes stop anyway)
                    report(f"Renewing Lease {self.namespace}/{self.name} failed: {exc!r}")

        renewer = threading.Thread(target=renew, name=f"renew-{self.name}", daemon=True)
        renewer.start()
        try:
            yield
        finally:
            stop.set()
            renewer.join()

    def _give_up(self) -> None:
        try:
            current = self.client.get(LEASES, self.name, self.namespace)
        except NotFound:
            return
        spec = dict(current.get("spec") or {})
        if spec.get("holderIdentity") != self.identity:
            return
        meta = dict(current["metadata"])
        nxt = self.asker(current, self.hand_over_within) if self.hand_over_within > 0 else None
        if nxt is not None and nxt != self.identity:
            # handed over: the waiter finds itself the holder at its next try, and no one else gets in between
            now = micro_time(self.clock())
            spec.update(holderIdentity=nxt, acquireTime=now, renewTime=now)
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
            meta["annotations"] = {k: v for k, v in (meta.get("annotations") or {}).items() if k != NEXT_HOLDER}
        else:
            spec["holderIdentity"] = None
            spec.pop("renewTime", None)
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta, "spec": spec}
        with contextlib.suppress(Conflict):  # someone took it over after it expired: theirs now
            self.client.replace(LEASES, body)


class GuardedClient:
    """``client`` for a pass that holds ``lease``: reads go through, and every write first checks that
    the Lease is still shown to be held (else LeaseLost, and nothing is sent) and retries a transient
    failure only until the hold can no longer be shown."""

    def __init__(self, client: Client, lease: Lease) -> None:
        self._client = client
        self._lease = lease

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._client, name)
        if name not in WRITES:
            return attribute

        def guarded(*args: Any, **kwargs: Any) -> Any:
            self._lease.check()
            # A transient failure is retried only while the hold can be shown, less the time one attempt may
            # take to connect, so that no attempt reaches the server after the hold ran out.
            left = self._lease.valid_until - self._lease.monotonic() - SEND_MARGIN
            with within_deadline(self._client, time.monotonic() + max(0.0, left)):
                return attribute(*args, **kwargs)

        return guarded
