"""Client additions for the drain: eviction, pod delete, watch (410 relist, bookmarks, stop), parallel calls.

A small HTTP server on loopback plays the API server, so the real urllib3 code paths run.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s import errors
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.client import (
    AUTH_ARG_SPEC,
    NODES,
    PDBS,
    PODS,
    Client,
    load_configuration,
)

Handler = Callable[[BaseHTTPRequestHandler, str, dict[str, list[str]], Any], None]


class FakeApi:
    """Records requests; ``handler(request, path, query, body)`` answers them."""

    def __init__(self, handler: Handler) -> None:
        self.requests: list[tuple[str, str, dict[str, list[str]], Any]] = []
        api = self

        class Request(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                url = urlsplit(self.path)
                query = parse_qs(url.query)
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                api.requests.append((self.command, url.path, query, body))
                handler(self, url.path, query, body)

            do_GET = do_POST = do_DELETE = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Request)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()
        self.host = f"http://127.0.0.1:{self.server.server_address[1]}"

    def client(self, pool_size: int = 10) -> Client:
        params: dict[str, Any] = dict.fromkeys(AUTH_ARG_SPEC)
        return Client(load_configuration(params | {"host": self.host, "api_key": "t"}), pool_size=pool_size)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake() -> Iterator[Callable[[Handler], FakeApi]]:
    made: list[FakeApi] = []

    def make(handler: Handler) -> FakeApi:
        made.append(FakeApi(handler))
        return made[-1]

    yield make
    for api in made:
        api.close()


def reply(req: BaseHTTPRequestHandler, status: int, body: Any) -> None:
    data = json.dumps(body).encode()
    req.send_response(status)
    req.send_header("Content-Type", "application/json")
    req.send_header("Content-Length", str(len(data)))
    req.end_headers()
    req.wfile.write(data)


def stream(
    req: BaseHTTPRequestHandler,
    events: list[dict[str, Any]],
    hold: float = 0.0,
    release: threading.Event | None = None,
) -> None:
    """A chunked watch response: one JSON line per chunk, then (after ``hold`` s, or once ``release`` is
    set) the end."""
    req.send_response(200)
    req.send_header("Content-Type", "application/json")
    req.send_header("Transfer-Encoding", "chunked")
    req.end_headers()
    for event in events:
        line = json.dumps(event).encode() + b"\n"
        req.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
        req.wfile.flush()
    if release is not None:
        release.wait(600)
    else:
        time.sleep(hold)
    req.wfile.write(b"0\r\n\r\n")


def pod(name: str, version: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}", "resourceVersion": version}}


def test_evict_posts_a_policy_v1_eviction_with_the_uid_precondition(fake: Callable[[Handler], FakeApi]) -> None:
    api = fake(lambda req, path, query, body: reply(req, 201, {"kind": "Status", "status": "Success"}))
    client = api.client()
    client.evict("p1", "ns", uid="u-1")
    client.evict("p2", "ns", uid="u-2", grace_period=0, dry_run=True)
    (m1, path1, q1, body1), second = api.requests
    q2, body2 = second[2], second[3]
    assert (m1, path1, q1) == ("POST", "/api/v1/namespaces/ns/pods/p1/eviction", {})
    assert body1 == {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "p1", "namespace": "ns"},
        "deleteOptions": {"preconditions": {"uid": "u-1"}},
    }
    assert q2 == {"dryRun": ["All"]}
    assert body2["deleteOptions"] == {"preconditions": {"uid": "u-2"}, "gracePeriodSeconds": 0}
    with pytest.raises(ValueError, match="UID of the pod decided on is required"):
        client.evict("p3", "ns", uid="")


def test_eviction_refusal_and_gone_pod_are_typed(fake: Callable[[Handler], FakeApi]) -> None:
    def handler(req: BaseHTTPRequestHandler, path: str, query: Any, body: Any) -> None:
        if "/blocked/" in path:
            reply(req, 429, {"reason": "TooManyRequests", "message": "Cannot evict pod", "details": {"causes": []}})
        else:
            reply(req, 404, {"reason": "NotFound", "details": {"name": "gone", "kind": "pods"}})

    client = fake(handler).client()
    with pytest.raises(errors.TooManyRequests) as refused:
        client.evict("blocked", "ns", uid="u")
    assert refused.value.body["message"] == "Cannot evict pod"
    with pytest.raises(errors.NotFound, match="evict pod ns/gone"):
        client.evict("gone", "ns", uid="u")


def test_delete_pod_sends_its_options_and_the_uid_precondition_in_the_body(fake: Callable[[Handler], FakeApi]) -> None:
    # with a body the API server ignores the query's options, so all of them are in the body
    api = fake(lambda req, path, query, body: reply(req, 200, {}))
    api.client().delete_pod("p", "ns", uid="u-1", grace_period=0)
    api.client().delete_pod("p", "ns", uid="u-1", dry_run=True)
    base = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": "u-1"}}
    assert api.requests == [
        ("DELETE", "/api/v1/namespaces/ns/pods/p", {}, {**base, "gracePeriodSeconds": 0}),
        ("DELETE", "/api/v1/namespaces/ns/pods/p", {}, {**base, "dryRun": ["All"]}),
    ]


@pytest.mark.parametrize(
    "message",
    [
        # DELETE (the storage layer's precondition check)
        'Operation cannot be fulfilled on pods "db-0": Precondition failed: UID in precondition: u-1, '
        "UID in object meta: u-2",
        # the eviction subresource
        'Operation cannot be fulfilled on Pod "db-0": the UID in the precondition (u-1) does not match the UID in '
        "record (u-2). The object might have been deleted and then recreated",
    ],
)
def test_a_failed_uid_precondition_is_told_apart_from_other_conflicts_and_from_not_found(
    fake: Callable[[Handler], FakeApi], message: str
) -> None:
    def handler(req: BaseHTTPRequestHandler, path: str, query: Any, body: Any) -> None:
        if "/other" in path:
            reply(req, 409, {"reason": "Conflict", "message": "the object has been modified"})
        elif "/gone" in path:
            reply(req, 404, {"reason": "NotFound", "details": {"name": "gone", "kind": "pods"}})
        else:
            reply(req, 409, {"reason": "Conflict", "message": message, "details": {"name": "db-0", "kind": "pods"}})

    client = fake(handler).client()
    for call in (client.evict, client.delete_pod):
        with pytest.raises(errors.UIDMismatch, match="not the one the call was decided on") as replaced:
            call("db-0", "ns", uid="u-1")
        assert isinstance(replaced.value, errors.OBJECT_GONE) and isinstance(replaced.value, errors.Conflict)
        assert replaced.value.status == 409 and replaced.value.reason == "uid_mismatch"
        with pytest.raises(errors.NotFound) as gone:
            call("gone", "ns", uid="u-1")
        assert isinstance(gone.value, errors.OBJECT_GONE) and not isinstance(gone.value, errors.UIDMismatch)
        with pytest.raises(errors.Conflict) as other:
            call("other", "ns", uid="u-1")
        assert not isinstance(other.value, errors.OBJECT_GONE)


def test_watch_skips_bookmarks_resumes_and_relists_on_410(fake: Callable[[Handler], FakeApi]) -> None:
    calls: list[dict[str, list[str]]] = []

    def handler(req: BaseHTTPRequestHandler, path: str, query: dict[str, list[str]], body: Any) -> None:
        if "watch" not in query:  # the relist
            reply(req, 200, {"kind": "PodList", "metadata": {"resourceVersion": "50"}, "items": [pod("b", "49")]})
            return
        calls.append(query)
        if len(calls) == 1:
            stream(req, [{"type": "ADDED", "object": pod("a", "11")}, {"type": "BOOKMARK", "object": pod("", "12")}])
        elif len(calls) == 2:
            stream(req, [{"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}])
        else:
            stream(req, [{"type": "DELETED", "object": pod("b", "51")}], hold=5)

    api = fake(handler)
    watch = api.client().watch(PODS, field_selector="spec.nodeName=n1", resource_version="10", timeout=30)
    seen: list[tuple[str, Any]] = []
    for event in watch:
        seen.append((event["type"], event["object"].get("metadata", {}).get("name")))
        if event["type"] == "DELETED":
            watch.stop()
    assert seen == [("ADDED", "a"), ("RELIST", None), ("DELETED", "b")]
    assert [q["resourceVersion"] for q in calls] == [["10"], ["12"], ["50"]]
    assert calls[0]["fieldSelector"] == ["spec.nodeName=n1"]
    assert calls[0]["allowWatchBookmarks"] == ["true"]
    assert int(calls[0]["timeoutSeconds"][0]) <= 30


def test_watch_stop_from_another_thread_unblocks_it(fake: Callable[[Handler], FakeApi]) -> None:
    # The server never ends the response (until the test is over): only stop() can end the read.
    release = threading.Event()
    api = fake(lambda req, path, query, body: stream(req, [], release=release))
    try:
        watch = api.client().watch(PODS, resource_version="1", timeout=600)
        events: list[Any] = []
        thread = threading.Thread(target=lambda: events.extend(watch), daemon=True)
        thread.start()
        deadline = time.monotonic() + 60  # stop() has to interrupt a read that is already blocked
        while not api.requests and time.monotonic() < deadline:
            time.sleep(0.01)
        assert api.requests
        watch.stop()
        thread.join(120)
        assert not thread.is_alive(), "stop() did not end the blocked read"
        assert not release.is_set()
        assert events == []
    finally:
        release.set()


def test_watch_error_status_is_raised(fake: Callable[[Handler], FakeApi]) -> None:
    api = fake(lambda req, path, query, body: reply(req, 403, {"message": "pods is forbidden"}))
    with pytest.raises(errors.Forbidden):
        list(api.client().watch(PODS, timeout=5))


def test_parallel_calls_share_the_pool(fake: Callable[[Handler], FakeApi]) -> None:
    active = 0
    peak = 0
    lock = threading.Lock()
    # Calls wait here until 8 are in flight at once: a pool that allowed fewer would time out
    # (no timing luck involved), one that allowed more would raise the peak above 8.
    barrier = threading.Barrier(8, timeout=120)
    broken: list[bool] = []

    def handler(req: BaseHTTPRequestHandler, path: str, query: Any, body: Any) -> None:
        nonlocal active, peak
        with lock:
            active += 1
            peak = max(peak, active)
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            broken.append(True)
        with lock:
            active -= 1
        reply(req, 200, {"kind": "PodDisruptionBudgetList", "items": []})

    client = fake(handler).client(pool_size=8)
    with ThreadPoolExecutor(max_workers=16) as pool:
        results = list(pool.map(lambda _: client.list(PDBS, "ns"), range(16)))
    assert all(r["items"] == [] for r in results)
    assert not broken, "8 calls were never in flight at once"
    assert peak == 8, "the pool allows as many calls in flight as it has connections"


# -- transient failures are retried in the client layer, within the operation's deadline ---------------------
def test_transient_answers_and_dropped_connections_are_retried(fake: Callable[[Handler], FakeApi]) -> None:
    script = ["reset", 503, 429, "ok"]

    def handler(req: BaseHTTPRequestHandler, path: str, query: Any, body: Any) -> None:
        step = script.pop(0)
        if step == "reset":  # the server goes away mid-request (a restart)
            req.close_connection = True
            req.connection.shutdown(socket.SHUT_RDWR)
            return
        if step == 429:
            req.send_response(429)
            req.send_header("Retry-After", "0")
            req.send_header("Content-Length", "2")
            req.end_headers()
            req.wfile.write(b"{}")
            return
        reply(req, 200 if step == "ok" else int(step), {"metadata": {"name": "n1"}} if step == "ok" else {})

    api = fake(handler)
    client = api.client()
    with client.retrying_until(time.monotonic() + 120):
        assert client.get(NODES, "n1")["metadata"]["name"] == "n1"
    assert client.retried == 3 and script == []


def test_a_transient_failure_past_the_deadline_is_raised_and_a_definite_answer_at_once(
    fake: Callable[[Handler], FakeApi],
) -> None:
    def handler(req: BaseHTTPRequestHandler, path: str, query: Any, body: Any) -> None:
        if path.endswith("/n1"):
            reply(req, 503, {"message": "restarting"})
        elif path.endswith("/eviction"):
            reply(req, 429, {"message": "Cannot evict pod as it would violate the pod's disruption budget."})
        else:
            reply(req, 404, {"message": "not found", "details": {"name": "n2"}})

    api = fake(handler)
    client = api.client()
    with client.retrying_until(time.monotonic()), pytest.raises(errors.K8sError, match="HTTP 503"):
        client.get(NODES, "n1")
    with client.retrying_until(time.monotonic() + 120):
        with pytest.raises(errors.NotFound):
            client.get(NODES, "n2")
        # a PodDisruptionBudget's 429 is the eviction's answer, left to the drain
        with pytest.raises(errors.TooManyRequests):
            client.evict("p", "ns", uid="u1")
    assert client.retried == 0


def test_an_answer_to_a_repeat_after_a_lost_answer_says_so(fake: Callable[[Handler], FakeApi]) -> None:
    """The first eviction gets no answer (the server goes away); the repeat meets 404: the error says that an
    earlier attempt may have done it. A 404 at the first attempt does not."""
    script = ["reset", 404, 404]

    def handler(req: BaseHTTPRequestHandler, path: str, query: Any, body: Any) -> None:
        step = script.pop(0)
        if step == "reset":
            req.close_connection = True
            req.connection.shutdown(socket.SHUT_RDWR)
            return
        reply(req, 404, {"message": 'pods "p" not found', "details": {"name": "p"}})

    client = fake(handler).client()
    with client.retrying_until(time.monotonic() + 120):
        with pytest.raises(errors.NotFound) as repeated:
            client.evict("p", "ns", uid="u1")
        with pytest.raises(errors.NotFound) as first:
            client.evict("p", "ns", uid="u1")
    assert repeated.value.after_lost_answer is True and first.value.after_lost_answer is False
    assert script == []


@pytest.mark.parametrize(
    ("first", "maybe"),
    [
        (errors.Unreachable("connection refused", transient=True, sent=False), False),
        (errors.Unreachable("connection reset", transient=True, sent=True), True),
        (503, False),
        (429, False),
        (504, True),
    ],
    ids=["refused", "reset", "503", "429", "504"],
)
def test_only_an_attempt_that_may_have_been_done_marks_the_answer_to_its_repeat(
    fake: Callable[[Handler], FakeApi], first: Any, maybe: bool
) -> None:
    """A refused connection, a 503 or a 429 did nothing; a reset after sending, or a 504, may have."""
    statuses = [first] if isinstance(first, int) else []

    def handler(req: BaseHTTPRequestHandler, path: str, query: Any, body: Any) -> None:
        if statuses:
            status = statuses.pop(0)
            req.send_response(status)
            req.send_header("Retry-After", "0")
            req.send_header("Content-Length", "2")
            req.end_headers()
            req.wfile.write(b"{}")
            return
        reply(req, 404, {"message": 'pods "p" not found', "details": {"name": "p"}})

    client = fake(handler).client()
    if isinstance(first, errors.Unreachable):
        send = client._send
        raised: list[bool] = []

        def first_fails(*args: Any, **kwargs: Any) -> Any:
            if not raised:
                raised.append(True)
                raise first
            return send(*args, **kwargs)

        client._send = first_fails  # type: ignore[method-assign]
    with client.retrying_until(time.monotonic() + 120), pytest.raises(errors.NotFound) as answer:
        client.delete_pod("p", "ns", uid="u1")
    assert answer.value.after_lost_answer is maybe


def test_a_retry_window_is_per_call_and_an_operations_deadline_comes_first(fake: Callable[[Handler], FakeApi]) -> None:
    """retrying_for gives each call its own window from its own start; retrying_until (an operation's deadline,
    such as a Lease's) still bounds the calls made inside it."""
    script: list[Any] = []

    def handler(req: BaseHTTPRequestHandler, path: str, query: Any, body: Any) -> None:
        step = script.pop(0) if script else "ok"
        reply(req, 200 if step == "ok" else int(step), {"metadata": {"name": "n1"}} if step == "ok" else {})

    api = fake(handler)
    client = api.client()
    client.retry_seconds = 0.0  # the default window: no second attempt
    script[:] = [503, "ok"]
    with pytest.raises(errors.K8sError, match="HTTP 503"):
        client.get(NODES, "n1")
    with client.retrying_for(120.0):
        script[:] = [503, "ok"]
        assert client.get(NODES, "n1")["metadata"]["name"] == "n1"
        script[:] = [503, "ok"]  # a later call gets a window of its own
        assert client.get(NODES, "n1")["metadata"]["name"] == "n1"
        with client.retrying_until(time.monotonic()), pytest.raises(errors.K8sError, match="HTTP 503"):
            script[:] = [503, "ok"]
            client.get(NODES, "n1")
        with client.retrying_for(None):  # the default again
            script[:] = [503, "ok"]
            with pytest.raises(errors.K8sError, match="HTTP 503"):
                client.get(NODES, "n1")
    assert client.retried == 2
