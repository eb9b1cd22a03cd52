"""module_utils/prometheus.py against a local HTTP server: the alerts, and a clear error for every way the answer
can go wrong (the alert gate turns each into a blocker)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from ansible_collections.nodeops.maintenance.plugins.module_utils.prometheus import PrometheusError, alerts, check_url

ANSWERS: dict[str, tuple[int, bytes]] = {
    "/ok/api/v1/alerts": (
        200,
        json.dumps(
            {"status": "success", "data": {"alerts": [{"labels": {"alertname": "A"}, "state": "firing"}]}}
        ).encode(),
    ),
    "/html/api/v1/alerts": (200, b"<html>login</html>"),
    "/error/api/v1/alerts": (503, b"unavailable"),
}


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        code, body = ANSWERS.get(self.path, (404, b"no"))
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_the_alerts(server: str) -> None:
    assert alerts(server + "/ok/") == [{"labels": {"alertname": "A"}, "state": "firing"}]


@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("/html", "did not answer with a list of alerts"),
        ("/error", "answered 503"),
    ],
)
def test_a_wrong_answer_is_an_error_naming_prometheus(server: str, path: str, says: str) -> None:
    with pytest.raises(PrometheusError, match=says) as info:
        alerts(server + path)
    assert f"Prometheus at {server}{path}" in str(info.value)


def test_prometheus_out_of_reach() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(PrometheusError, match="did not answer"):
        alerts(f"http://127.0.0.1:{port}", timeout=5)


@pytest.mark.parametrize("url", ["prometheus:9090", "ftp://p", "http://", ""])
def test_a_url_that_is_not_http_is_refused(url: str) -> None:
    with pytest.raises(ValueError, match="not an http:// or https:// URL"):
        check_url(url)


def test_messages_never_show_the_user_information_of_the_url() -> None:
    from ansible_collections.nodeops.maintenance.plugins.module_utils import prometheus

    with pytest.raises(prometheus.PrometheusError) as caught:
        prometheus.alerts("http://user:secret@127.0.0.1:9/?token=x", timeout=2)
    assert "secret" not in str(caught.value) and "token" not in str(caught.value)
    assert "127.0.0.1:9" in str(caught.value)
