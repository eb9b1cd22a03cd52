"""A real Prometheus (or Pushgateway) for the tests, from the Debian package (tests/cluster/debian_tools.py).

``with Prometheus(tmp_path, scrape_configs=[...], rules=[...]) as prom:`` starts Prometheus on a free local port
with those scrape jobs and rule groups, waits until it is ready, and stops it at the end. ``prom.query(expr)``
runs an instant query; ``prom.wait_for(expr, deadline)`` polls until the query returns a result;
``prom.alerts()`` lists the alerts with their state. ``Pushgateway(tmp_path)`` does the same for the gateway.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml
from cluster.debian_tools import binary


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def get(url: str, timeout: float = 5.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as answer:
        return bytes(answer.read())


class _Server:
    """A local server process started from a Debian binary; ready when ``ready_path`` answers 200."""

    package = ""
    ready_path = "/-/ready"

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = workdir / f"{self.package}.log"
        self.process: subprocess.Popen[bytes] | None = None

    def args(self) -> list[str]:
        raise NotImplementedError

    def start(self, deadline_seconds: float = 60.0) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen([str(binary(self.package)), *self.args()], stdout=log, stderr=log)
        deadline = time.monotonic() + deadline_seconds
        while True:
            if self.process.poll() is not None:
                tail = self.log.read_text()[-2000:]
                raise RuntimeError(f"{self.package} exited ({self.process.returncode}):\n{tail}")
            try:
                get(self.url + self.ready_path, timeout=2)
                return
            except OSError as exc:
                if time.monotonic() > deadline:
                    tail = self.log.read_text()[-2000:]
                    raise RuntimeError(f"{self.package} not ready in {deadline_seconds} s:\n{tail}") from exc
                time.sleep(0.1)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> _Server:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


class Prometheus(_Server):
    """Prometheus with the given scrape configs and rule groups (dicts as in Prometheus' own files)."""

    package = "prometheus"

    def __init__(
        self,
        workdir: Path,
        scrape_configs: list[dict[str, Any]] | None = None,
        rules: list[dict[str, Any]] | None = None,
        interval: str = "1s",
    ) -> None:
        super().__init__(workdir)
        self.config = workdir / "prometheus.yml"
        self.rules = workdir / "rules.yml"
        workdir.mkdir(parents=True, exist_ok=True)
        self.rules.write_text(yaml.safe_dump({"groups": rules or []}))
        self.config.write_text(
            yaml.safe_dump(
                {
                    "global": {"scrape_interval": interval, "evaluation_interval": interval},
                    "rule_files": [str(self.rules)],
                    "scrape_configs": scrape_configs or [],
                }
            )
        )

    def args(self) -> list[str]:
        return [
            f"--config.file={self.config}",
            f"--storage.tsdb.path={self.workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--web.enable-lifecycle",
        ]

    def api(self, path: str, **params: str) -> Any:
        query = ("?" + urllib.parse.urlencode(params)) if params else ""
        answer = json.loads(get(f"{self.url}/api/v1/{path}{query}"))
        if answer.get("status") != "success":
            raise RuntimeError(f"Prometheus {path}: {answer}")
        return answer["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        return list(self.api("query", query=expr)["result"])

    def alerts(self) -> list[dict[str, Any]]:
        return list(self.api("alerts")["alerts"])

    def wait_for(self, expr: str, deadline_seconds: float = 60.0) -> list[dict[str, Any]]:
        """Poll until ``expr`` has a result; return it."""
        deadline = time.monotonic() + deadline_seconds
        while True:
            result = self.query(expr)
            if result:
                return result
            if time.monotonic() > deadline:
                raise AssertionError(f"no result for {expr!r} within {deadline_seconds} s")
            time.sleep(0.2)


class Pushgateway(_Server):
    """The Prometheus Pushgateway; ``metrics()`` is its /metrics text."""

    package = "prometheus-pushgateway"

    def args(self) -> list[str]:
        return [f"--web.listen-address=127.0.0.1:{self.port}"]

    def metrics(self) -> str:
        return get(self.url + "/metrics").decode()
