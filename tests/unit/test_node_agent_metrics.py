"""The node agent's metrics endpoint, the agent as a process on loopback against the small fake API server: what
it serves, that it serves nothing else, that it tells nothing secret, and that slow or many clients cost the agent
nothing (the watchdog keeps being fed). Prometheus itself scrapes it in tests/integration/test_node_agent_metrics.py.
"""

from __future__ import annotations

import contextlib
import socket
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.node.metrics import AGENT
from support.exposition import parse, value
from support.node_agent import AgentProcess, FakeApi, free_port, make_agent, wait_for


def scrape(agent: AgentProcess) -> dict[str, Any]:
    return parse(agent.metrics())


def raw(agent: AgentProcess, request: bytes, timeout: float = 20.0) -> bytes:
    """What the metrics port answers to ``request`` (until it closes the connection)."""
    with socket.create_connection(("127.0.0.1", agent.config["metricsPort"]), timeout=timeout) as conn:
        conn.sendall(request)
        data = b""
        while chunk := conn.recv(65536):
            data += chunk
    return data


def test_a_healthy_agent_serves_every_metric_of_the_catalogue_and_nothing_secret(
    tmp_path: Path, pki: dict[str, Any], fake_api: FakeApi, agents: list[AgentProcess]
) -> None:
    peers = [{"name": "secret-peer-name", "address": "127.0.0.9", "port": free_port()}]
    agent = make_agent("w1", tmp_path, pki, fake_api, peers)
    agents.append(agent.start())
    families = wait_for(
        lambda: (f := scrape(agent)) and (value(f, "nodeops_agent_watchdog_feeds_total") or 0) >= 2 and f,
        60,
        "two watchdog feeds in the metrics",
    )
    assert value(families, "nodeops_agent_state", state="healthy") == 1
    assert value(families, "nodeops_agent_state", state="fenced") == 0
    assert value(families, "nodeops_agent_watchdog_armed") == 1
    assert value(families, "nodeops_agent_fenced") == 0
    assert value(families, "nodeops_agent_peers", role="worker") == 1
    assert value(families, "nodeops_agent_api_check_failures_total") == 0
    assert value(families, "nodeops_agent_peer_answers_total", answer="Healthy") == 0
    # every family of the catalogue, with its type and help; nothing else
    assert set(families) == set(AGENT)
    for name, family in families.items():
        assert family["type"] == AGENT[name].kind and family["help"] == AGENT[name].help
    text = agent.metrics()
    for secret in (fake_api.token, "secret-peer-name", "127.0.0.9", "PRIVATE KEY", str(pki["ca_file"])):
        assert secret not in text
    for path in (agent.config["peerKeyFile"], agent.config["tokenFile"]):
        assert Path(path).read_text().strip()[:40] not in text


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", b"405"),
        (b"PUT /metrics HTTP/1.1\r\nHost: x\r\n\r\n", b"405"),
        (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", b"404"),
        (b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n", b"404"),
        (b"GET /metrics/../status.json HTTP/1.1\r\nHost: x\r\n\r\n", b"404"),
        (b"hello\r\n\r\n", b"400"),
        (b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 5000 + b"\r\n\r\n", b"431"),
        (b"GET /metrics?name[]=nodeops_agent_fenced HTTP/1.1\r\nHost: x\r\n\r\n", b"200"),
    ],
)
def test_only_get_metrics_is_answered(
    tmp_path: Path,
    pki: dict[str, Any],
    fake_api: FakeApi,
    agents: list[AgentProcess],
    request_bytes: bytes,
    status: bytes,
) -> None:
    agent = make_agent("w1", tmp_path, pki, fake_api, [])
    agents.append(agent.start())
    wait_for(lambda: scrape(agent), 60, "the metrics endpoint")
    answer = raw(agent, request_bytes)
    assert answer.split(b" ", 2)[1] == status, answer[:200]
    if status != b"200":
        assert b"nodeops_agent" not in answer
    assert agent.alive()


def test_slow_and_many_clients_do_not_stop_the_watchdog_feeding(
    tmp_path: Path, pki: dict[str, Any], fake_api: FakeApi, agents: list[AgentProcess]
) -> None:
    agent = make_agent("w1", tmp_path, pki, fake_api, [])
    agents.append(agent.start())
    wait_for(lambda: agent.fed_bytes() >= 1, 60, "the watchdog armed")
    port = agent.config["metricsPort"]
    # clients that send part of a request and then nothing, more than the server serves at once
    slow = [socket.create_connection(("127.0.0.1", port), timeout=30) for _i in range(12)]
    try:
        for conn in slow:
            conn.sendall(b"GET /metr")
        fed = agent.fed_bytes()
        # the watchdog is fed every timeout/3 (1 s here): three more feeds while the clients hang
        wait_for(lambda: agent.fed_bytes() >= fed + 3, 60, "three feeds while slow clients hold the metrics port")
        # the server ends each of them (after its exchange deadline, or at once past the limit) without an answer
        # (one closed before it was read is reset rather than ended)
        for conn in slow:
            with contextlib.suppress(ConnectionResetError):
                assert conn.recv(1024) == b""
    finally:
        for conn in slow:
            conn.close()
    families = wait_for(lambda: scrape(agent), 60, "the metrics again")
    assert value(families, "nodeops_agent_state", state="healthy") == 1
    assert agent.alive() and agent.status()["watchdog"]["feeding"]


def test_a_fenced_agent_says_why_in_fixed_words(
    tmp_path: Path, pki: dict[str, Any], fake_api: FakeApi, agents: list[AgentProcess]
) -> None:
    agent = make_agent("w1", tmp_path, pki, fake_api, [], watchdogFilePath=str(tmp_path / "missing"))
    agents.append(agent.start())
    fake_api.remediations = [
        {
            "metadata": {
                "name": "w1-secret-object",
                "namespace": "ops",
                "uid": "u1",
                "annotations": {"remediation.medik8s.io/node-name": "w1"},
            }
        }
    ]
    families = wait_for(
        lambda: (f := scrape(agent)) and value(f, "nodeops_agent_fenced") == 1 and f, 60, "the fence in the metrics"
    )
    assert value(families, "nodeops_agent_state", state="fenced") == 1
    assert value(families, "nodeops_agent_fence_info", cause="remediation", carried_over="false") == 1
    assert (value(families, "nodeops_agent_software_reboots_total", method="command") or 0) >= 1
    assert (value(families, "nodeops_agent_fence_start_time_seconds") or 0) > 1e9
    assert "w1-secret-object" not in agent.metrics()


def test_metrics_port_zero_serves_nothing_and_a_taken_port_does_not_stop_the_agent(
    tmp_path: Path, pki: dict[str, Any], fake_api: FakeApi, agents: list[AgentProcess]
) -> None:
    off = make_agent("w1", tmp_path, pki, fake_api, [], metricsPort=0)
    agents.append(off.start())
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = make_agent("w2", tmp_path, pki, fake_api, [], metricsPort=taken.getsockname()[1])
        agents.append(busy.start())
        wait_for(lambda: busy.fed_bytes() >= 2 and off.fed_bytes() >= 2, 60, "both agents feeding")
        wait_for(lambda: "cannot serve the metrics" in busy.log.read_text(), 60, "the error in the log")
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(off.metrics_url, timeout=5)
