"""A local HTTP server that records what it receives: the other end of the notify module in the tests.

with Receiver() as receiver:
    receiver.answers("/hook", [503, 503])    # the next two requests to /hook get 503, then 200 again
    ... send to receiver.url("/hook") ...
    receiver.wait_for(3, timeout=30)          # polls until three requests arrived
    receiver.requests                         # [Received(method, path, headers, body, json), ...]
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DROP = 0  # an "answer" that closes the connection without any


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    host: str = "127.0.0.1"
    requests: list[Received] = field(default_factory=list)
    _planned: dict[str, list[int]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    def url(self, path: str = "/hook") -> str:
        assert self._server is not None, "the receiver is not started"
        return f"http://{self.host}:{self._server.server_address[1]}{path}"

    def answers(self, path: str, statuses: Iterable[int]) -> None:
        """The statuses of the next requests to ``path`` (DROP: close the connection); 200 after them."""
        with self._lock:
            self._planned.setdefault(path, []).extend(statuses)

    def received(self) -> list[Received]:
        with self._lock:
            return list(self.requests)

    def wait_for(self, count: int, timeout: float = 30) -> list[Received]:
        """The requests once at least ``count`` arrived; fails after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            got = self.received()
            if len(got) >= count or time.monotonic() > deadline:
                assert len(got) >= count, f"{len(got)} of {count} requests arrived: {got}"
                return got
            time.sleep(0.05)

    def _next_status(self, path: str) -> int:
        with self._lock:
            planned = self._planned.get(path) or []
            return planned.pop(0) if planned else 200

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                with receiver._lock:
                    receiver.requests.append(Received(self.command, self.path, dict(self.headers.items()), body))
                status = receiver._next_status(self.path)
                if status == DROP:
                    self.close_connection = True
                    return
                answer = b"ok" if status < 400 else b"no luck"
                self.send_response(status)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            do_POST = _handle
            do_PUT = _handle

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer((self.host, 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="http-receiver", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> Receiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
