# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Lease's guard and renewer with a fake client: when a write may be sent and retried, and what the renewer
tells when the API does not answer."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.client import Client, load_configuration
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.errors import Conflict, NotFound, Unreachable
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.lease import GuardedClient, Lease, LeaseLost


class LeaseStore:
    """Leases in memory with resourceVersions; records the retry deadline each call runs under."""

    def __init__(self) -> None:
        self.leases: dict[str, dict[str, Any]] = {}
        self.version = 0
        self.until: float | None = None
        self.calls: list[tuple[str, float | None]] = []
        self.unreachable = threading.Event()
        self.writes: list[str] = []

    @contextlib.contextmanager
    def retrying_until(self, until: float | None) -> Iterator[None]:
        before, self.until = self.until, until
        try:
            yield
        finally:
            self.until = before

    def _call(self, name: str) -> None:
        self.calls.append((name, self.until))
        if self.unreachable.is_set():
            raise Unreachable("connection refused", 0, None, transient=True)

    def get(self, _res: Any, name: str, _namespace: str | None = None) -> dict[str, Any]:
        self._call("get")
        if name not in self.leases:
            raise NotFound("not found", 404, None)
        return {**self.leases[name], "spec": dict(self.leases[name]["spec"])}

    def create(self, _res: Any, body: dict[str, Any], _namespace: str | None = None) -> dict[str, Any]:
        self._call("create")
        name = body["metadata"]["name"]
        if name in self.leases:
            raise Conflict("exists", 409, None)
        return self._store(body)

    def replace(self, _res: Any, body: dict[str, Any], *_: Any, **__: Any) -> dict[str, Any]:
        self._call("replace")
        current = self.leases[body["metadata"]["name"]]
        if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            raise Conflict("changed", 409, None)
        return self._store(body)

    def _store(self, body: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        stored = {**body, "metadata": {**body["metadata"], "resourceVersion": str(self.version)}}
        self.leases[body["metadata"]["name"]] = stored
        return stored

    def delete_pod(self, name: str, namespace: str, *, uid: str) -> None:
        self._call("delete_pod")
        self.writes.append(f"{namespace}/{name}")


def test_a_guarded_write_is_retried_only_while_the_hold_can_be_shown() -> None:
    store = LeaseStore()
    mono = [1000.0]
    lease = Lease(store, "l", "ns", "me", duration=60, monotonic=lambda: mono[0])  # type: ignore[arg-type]
    assert lease.acquire(0)
    guarded = GuardedClient(store, lease)  # type: ignore[arg-type]
    mono[0] += 30.0  # 18 s of the 48 s hold left: retries end SEND_MARGIN (10 s) before it
    before = time.monotonic()
    guarded.delete_pod("p", "ns", uid="u")
    _name, until = store.calls[-1]
    assert until is not None and before + 7.9 <= until <= time.monotonic() + 8.0
    mono[0] += 18.0  # the hold can no longer be shown: nothing is sent
    with pytest.raises(LeaseLost):
        guarded.delete_pod("q", "ns", uid="v")
    assert store.writes == ["ns/p"]


def test_a_guarded_write_never_outlasts_a_shorter_deadline_around_it() -> None:
    client = Client(load_configuration({"host": "https://h:1", "api_key": "t"}))
    with client.retrying_until(5.0), client.retrying_until(50.0):
        assert client._retry.until == 5.0
    with client.retrying_until(50.0), client.retrying_until(5.0):
        assert client._retry.until == 5.0
    assert getattr(client._retry, "until", None) is None


def test_release_tries_again_only_within_its_time() -> None:
    store = LeaseStore()
    lease = Lease(store, "l", "ns", "me", duration=60)  # type: ignore[arg-type]
    assert lease.acquire(0)
    store.unreachable.set()
    assert not lease.release(retry_for=0.3, interval=0.1)
    after = time.monotonic()
    deadlines = [until for name, until in store.calls if name == "get"][1:]
    assert deadlines and all(until is not None and until <= after + 0.3 for until in deadlines), deadlines


def test_the_renewer_renews_and_reports_what_the_api_did_not_answer() -> None:
    store = LeaseStore()
    lease = Lease(store, "l", "ns", "me", duration=3)  # type: ignore[arg-type]  # renewed every second
    assert lease.acquire(0)
    reports: list[str] = []
    first = store.leases["l"]["spec"]["renewTime"]
    with lease.kept(reports.append):
        deadline = time.monotonic() + 60
        while store.leases["l"]["spec"]["renewTime"] == first and time.monotonic() < deadline:
            time.sleep(0.05)
        assert store.leases["l"]["spec"]["renewTime"] != first, "not renewed"
        store.unreachable.set()
        while not reports and time.monotonic() < deadline:
            time.sleep(0.05)
    assert reports and reports[0].startswith("Renewing Lease ns/l failed: connection refused"), reports


def test_the_renewer_reports_any_failure_and_goes_on() -> None:
    store = LeaseStore()
    lease = Lease(store, "l", "ns", "me", duration=3)  # type: ignore[arg-type]
    assert lease.acquire(0)
    get = store.get
    failures = [ValueError("not JSON")]

    def broken_get(*args: Any) -> dict[str, Any]:
        if failures:
            raise failures.pop()
        return get(*args)

    store.get = broken_get  # type: ignore[method-assign]
    reports: list[str] = []
    first = store.leases["l"]["spec"]["renewTime"]
    with lease.kept(reports.append):
        deadline = time.monotonic() + 60
        while store.leases["l"]["spec"]["renewTime"] == first and time.monotonic() < deadline:
            time.sleep(0.05)
    assert reports == ["Renewing Lease ns/l failed: ValueError('not JSON')"]
    assert store.leases["l"]["spec"]["renewTime"] != first, "the renewer died on the first failure"


def test_the_renewer_stops_when_someone_else_took_the_lease() -> None:
    store = LeaseStore()
    lease = Lease(store, "l", "ns", "me", duration=3)  # type: ignore[arg-type]
    assert lease.acquire(0)
    store.leases["l"]["spec"]["holderIdentity"] = "them"
    reports: list[str] = []
    with lease.kept(reports.append):
        deadline = time.monotonic() + 60
        while not reports and time.monotonic() < deadline:
            time.sleep(0.05)
    assert reports == ["Lease ns/l was lost during the pass; it stopped writing."]
    assert not lease.held


def test_a_holder_hands_the_lease_straight_to_the_waiter_that_asked_and_to_no_one_else() -> None:
    store = LeaseStore()
    clock = [1000.0]
    holder = Lease(store, "l", "ns", "d1-driver", duration=60, clock=lambda: clock[0])  # type: ignore[arg-type]
    waiter = Lease(store, "l", "ns", "d2-driver", duration=60, clock=lambda: clock[0])  # type: ignore[arg-type]
    other = Lease(store, "l", "ns", "a-node-step", duration=60, clock=lambda: clock[0])  # type: ignore[arg-type]
    assert holder.acquire(0)
    assert holder.asked(10.0) is None
    assert not waiter.acquire(0, ask=True)  # busy: it asks to be next
    assert holder.renew()  # a renewal keeps the ask
    clock[0] += 4.0
    assert holder.asked(10.0) == "d2-driver" and holder.asked(3.0) is None  # asked 4 s ago
    holder.hand_over_within = 10.0
    assert holder.release()
    spec = store.leases["l"]["spec"]
    assert spec["holderIdentity"] == "d2-driver" and spec["leaseTransitions"] == 1
    assert not other.try_acquire()  # no one gets in between
    assert waiter.try_acquire() and waiter.held  # the waiter finds itself the holder and confirms it
    assert "maintenance.nodeops.io/next-holder" not in (store.leases["l"]["metadata"].get("annotations") or {})


def test_an_ask_too_old_or_its_own_hands_the_lease_to_no_one() -> None:
    store = LeaseStore()
    clock = [1000.0]
    holder = Lease(store, "l", "ns", "d1-driver", duration=60, clock=lambda: clock[0])  # type: ignore[arg-type]
    waiter = Lease(store, "l", "ns", "d2-driver", duration=60, clock=lambda: clock[0])  # type: ignore[arg-type]
    assert holder.acquire(0)
    waiter.ask()
    clock[0] += 30.0  # the waiter stopped asking (gone, say): handing it over would leave the Lease to no one
    holder.hand_over_within = 10.0
    assert holder.release()
    assert store.leases["l"]["spec"]["holderIdentity"] is None
    assert holder.acquire(0) and holder.asked(10.0) is None  # the old ask does not count
    holder.ask()  # a holder does not ask for what it holds: the note stays the waiter's old one
    assert holder.asked(float("inf")) == "d2-driver"
    clock[0] += 1.0
    waiter.ask()
    holder.renew()
    assert holder.asked(10.0) == "d2-driver"
    holder.hand_over_within = 0.0  # not handing over (the driver sets it only at the end of its turn)
    holder.release()
    assert store.leases["l"]["spec"]["holderIdentity"] is None


def test_a_waiter_that_stops_waiting_takes_its_ask_back_and_gives_up_a_lease_handed_to_it_meanwhile() -> None:
    store = LeaseStore()
    holder = Lease(store, "l", "ns", "d1-driver", duration=60)  # type: ignore[arg-type]
    waiter = Lease(store, "l", "ns", "d2-driver", duration=60)  # type: ignore[arg-type]
    assert holder.acquire(0)
    waiter.ask()
    waiter.withdraw()  # its run ended
    assert holder.asked(10.0) is None
    waiter.ask()
    holder.hand_over_within = 10.0
    assert holder.release()
    assert store.leases["l"]["spec"]["holderIdentity"] == "d2-driver"
    waiter.withdraw()  # handed over just as it stopped waiting: given up, not left to run out
    assert store.leases["l"]["spec"]["holderIdentity"] is None
    assert holder.acquire(0)
    waiter.withdraw()  # nothing of its own: the holder's Lease is left alone
    assert store.leases["l"]["spec"]["holderIdentity"] == "d1-driver"
