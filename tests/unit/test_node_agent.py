"""The node agent as a process on loopback: --check-config, the mutual-TLS peer channel and its refusals,
the watchdog (a file) and fencing, against a small fake API server.

The agent runs as a real process; the scenarios with several agents and the real API server are in
tests/integration/test_node_agent.py.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from support.node_agent import (
    AGENT,
    AgentProcess,
    FakeApi,
    FakePeer,
    Identity,
    ask_peer,
    free_port,
    issue,
    json_answer,
    make_agent,
    peer_client_context,
    rss_kib,
    wait_for,
)

HEALTHY, UNHEALTHY, API_ERROR = 1, 2, 3


def client(pki: dict[str, Any], name: str, ca: Identity | None = None, expired: bool = False) -> ssl.SSLContext:
    cert, key = issue(name, ca or pki["ca"], expired=expired).write(pki["dir"], f"client-{name}-{expired}")
    return peer_client_context(pki["ca_file"], cert, key)


# -- --check-config ------------------------------------------------------------------------------------
def check_config(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(AGENT), "--check-config", "--config", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )


def test_check_config_accepts_a_valid_file(tmp_path: Path, pki: dict[str, Any], fake_api: FakeApi) -> None:
    agent = make_agent("w1", tmp_path, pki, fake_api, [])
    result = check_config(agent.directory / "config.json")
    assert result.returncode == 0, result.stderr
    assert "is valid" in result.stdout


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("apiCheckInterval", "500ms", "apiCheckInterval: '500ms' is below the minimum of 1s"),
        ("hostPort", 0, "hostPort: 0 is below the minimum of 1"),
        ("maxApiErrorThreshold", 0, "maxApiErrorThreshold: 0 is below the minimum of 1"),
        ("peerUpdateInterval", "1m30", "peerUpdateInterval: '1m30' is not a duration"),
        ("tokenFile", "/nonexistent/token", "tokenFile: /nonexistent/token is not readable"),
        ("metricsPort", 70000, "metricsPort: 70000 is above the maximum of 65535"),
        ("metricsAddress", "", "metricsAddress: must not be empty while metricsPort is set"),
    ],
)
def test_check_config_names_the_field(
    tmp_path: Path, pki: dict[str, Any], fake_api: FakeApi, field: str, value: Any, message: str
) -> None:
    agent = make_agent("w1", tmp_path, pki, fake_api, [], **{field: value})
    result = check_config(agent.directory / "config.json")
    assert result.returncode == 2
    assert message in result.stderr


def test_check_config_of_a_file_that_is_not_json(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text("nodeName: w1\n")
    result = check_config(path)
    assert result.returncode == 2 and "config.json" in result.stderr


# -- the peer channel ------------------------------------------------------------------------------------
#: a peer list that lets the tests ask from 127.0.0.1 (nothing listens on port 9: never asked while the API is up)
ASKERS = [{"name": "w2", "address": "127.0.0.1", "port": 9}]


def test_peer_answers_about_the_asker_only(
    tmp_path: Path, pki: dict[str, Any], fake_api: FakeApi, agents: list[AgentProcess]
) -> None:
    agent = make_agent("w1", tmp_path, pki, fake_api, ASKERS)
    agents.append(agent.start())
    port = agent.config["hostPort"]
    assert ask_peer("127.0.0.1", port, "w1", client(pki, "w2")) == (200, {"status": HEALTHY})
    fake_api.remediations = [{"metadata": {"name": "w2", "namespace": "ops", "uid": "a"}}]
    assert ask_peer("127.0.0.1", port, "w1", client(pki, "w2")) == (200, {"status": UNHEALTHY})
    assert ask_peer("127.0.0.1", port, "w1", client(pki, "w3")) == (200, {"status": HEALTHY})
    fake_api.up = False
    assert ask_peer("127.0.0.1", port, "w1", client(pki, "w2")) == (200, {"status": API_ERROR})
    # the server's certificate is checked against the node name the client expects
    with pytest.raises(ssl.SSLCertVerificationError):
        ask_peer("127.0.0.1", port, "w9", client(pki, "w2"))


def refused(port: int, context: ssl.SSLContext) -> bool:
    try:
        ask_peer("127.0.0.1", port, "w1", context)
    except (OSError, ssl.SSLError, ConnectionError, ValueError, IndexError):
        return True
    return False


def test_peer_refuses_unauthenticated_and_random_clients(
    tmp_path: Path, pki: dict[str, Any], fake_api: FakeApi, agents: list[AgentProcess]
) -> None:
    fake_api.remediations = [{"metadata": {"name": "intruder", "namespace": "ops", "uid": "a"}}]
    agent = make_agent("w1", tmp_path, pki, fake_api, ASKERS)
    agents.append(agent.start())
    port = agent.config["hostPort"]

    no_cert = peer_client_context(pki["ca_file"], None, None)
    assert refused(port, no_cert)
    assert refused(port, client(pki, "intruder", ca=issue("other-ca")))
    assert refused(port, client(pki, "intruder", expired=True))
    # TLS 1.2 is refused too
    old = client(pki, "intruder")
    old.minimum_version = old.maximum_version = ssl.TLSVersion.TLSv1_2
    assert refused(port, old)

    # 10,000 random payloads, 8 senders at a time
    rng = random.Random(7)
    payloads = [rng.randbytes(rng.randint(1, 2048)) for _index in range(10_000)]
    answered: list[bytes] = []

    def send(chunk: list[bytes]) -> None:
        for payload in chunk:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
                try:
                    sock.sendall(payload)
                    sock.shutdown(socket.SHUT_WR)
                    data = sock.recv(65536)
                except OSError:
                    continue
                if b"status" in data:
                    answered.append(data)

    threads = [threading.Thread(target=send, args=(payloads[i::8],)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert answered == []
    assert agent.alive()
    # nothing unauthenticated got an answer (so nothing read the API for it), the agent counted every refusal
    # (a failed handshake, or, past the per-address cap, a connection closed at once)
    status = wait_for(
        lambda: (s := agent.status()) and s["peer_connections_refused"] + s["peer_connections_busy"] >= 10_004 and s,
        60,
        "the refusals counted",
    )
    assert status["peer_answers_served"] == 0
    assert status["fenced"] is False
    # and it still answers a real peer
    assert ask_peer("127.0.0.1", port, "w1", client(pki, "w2")) == (200, {"status": HEALTHY})
    # an authenticated peer with a bad request gets an error, not an answer
    with (
        socket.create_connection(("127.0.0.1", port)) as raw,
        client(pki, "w2").wrap_socket(raw, server_hostname="w1") as tls,
    ):
        tls.sendall(b"POST /fence HTTP/1.1\r\n\r\n")
        assert tls.recv(4096).startswith(b"HTTP/1.1 404")


# -- the watchdog and fencing --------------------------------------------------------------------------------
def test_feeds_the_watchdog_and_disarms_on_a_clean_stop(
    tmp_path: Path, pki: dict[str, Any], fake_api: FakeApi, agents: list[AgentProcess]
) -> None:
    agent = make_agent("w1", tmp_path, pki, fake_api, [])
    agents.append(agent.start())
    first = wait_for(agent.fed_bytes, 60, "a first feed")
    wait_for(lambda: agent.fed_bytes() >= first + 2, 60, "two more feeds (every second with a 3 s timeout)")
    assert agent.stop() == 0
    data = agent.watchdog.read_bytes()
    assert data.endswith(b"V") and set(data[:-1]) == {0}
    assert agent.reboots() == []


def test_remediation_for_this_node_fences_once(
    tmp_path: Path, pki: dict[str, Any], fake_api: FakeApi, agents: list[AgentProcess]
) -> None:
    agent = make_agent("w1", tmp_path, pki, fake_api, [])
    agents.append(agent.start())
    wait_for(lambda: agent.fed_bytes() >= 2, 60, "feeding")
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 1))
    fake_api.remediations = [
        {"metadata": {"name": "w1", "namespace": "ops", "uid": "u1", "creationTimestamp": created}}
    ]
    status = wait_for(lambda: (s := agent.status()) and s["fenced"] and s, 60, "fencing")
    assert "SelfNodeRemediation ops/w1" in status["fence_reason"]
    fed = agent.fed_bytes()
    # software fallback after the watchdog timeout (3 s) + 10 s; no feed meanwhile
    wait_for(agent.reboots, 60, "the recorded software reboot")
    assert agent.fed_bytes() == fed
    assert len(agent.reboots()) == 1
    # a stop while fenced must not disarm the watchdog
    agent.stop()
    assert not agent.watchdog.read_bytes().endswith(b"V")


def test_old_remediation_served_by_the_last_boot_does_not_fence(
    tmp_path: Path, pki: dict[str, Any], fake_api: FakeApi, agents: list[AgentProcess]
) -> None:
    fake_api.remediations = [
        {"metadata": {"name": "w1", "namespace": "ops", "uid": "u1", "creationTimestamp": "2000-01-01T00:00:00Z"}}
    ]
    agent = make_agent("w1", tmp_path, pki, fake_api, [])
    agents.append(agent.start())
    wait_for(lambda: len([p for p in fake_api.requests if "selfnoderemediations" in p]) >= 2, 60, "two checks")
    assert agent.status()["fenced"] is False


def test_without_a_watchdog_fences_through_the_reboot_command_at_once(
    tmp_path: Path, pki: dict[str, Any], fake_api: FakeApi, agents: list[AgentProcess]
) -> None:
    agent = make_agent("w1", tmp_path, pki, fake_api, [], watchdogFilePath=str(tmp_path / "missing"))
    agents.append(agent.start())
    fake_api.remediations = [{"metadata": {"name": "w1", "namespace": "ops", "uid": "u1"}}]
    wait_for(agent.reboots, 60, "the software reboot")


def test_without_a_watchdog_and_without_software_reboot_refuses_to_run(
    tmp_path: Path, pki: dict[str, Any], fake_api: FakeApi
) -> None:
    agent = make_agent(
        "w1", tmp_path, pki, fake_api, [], watchdogFilePath=str(tmp_path / "missing"), isSoftwareRebootEnabled=False
    )
    result = subprocess.run(
        [sys.executable, str(AGENT), "--config", str(agent.directory / "config.json")],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 3
    assert "cannot be fenced" in result.stderr
    # and it said on its Node, before it exited, that the node is not reboot-capable
    capable = "is-reboot-capable.self-node-remediation.medik8s.io"
    assert [patch["metadata"]["annotations"][capable] for _name, patch in fake_api.patches] == ["false"]


def test_failed_reboot_command_falls_back_to_sysrq(
    tmp_path: Path, pki: dict[str, Any], fake_api: FakeApi, agents: list[AgentProcess]
) -> None:
    agent = make_agent(
        "w1", tmp_path, pki, fake_api, [], watchdogFilePath=str(tmp_path / "missing"), rebootCommand=["false"]
    )
    agents.append(agent.start())
    fake_api.remediations = [{"metadata": {"name": "w1", "namespace": "ops", "uid": "u1"}}]
    sysrq = Path(agent.config["sysrqTriggerPath"])
    wait_for(lambda: sysrq.exists() and sysrq.read_text() == "b", 60, "the sysrq write")


# -- decisions with two agents on loopback -------------------------------------------------------------------
def test_api_lost_with_a_healthy_peer_does_not_fence_and_isolated_does(
    tmp_path: Path, pki: dict[str, Any], fake_api: FakeApi, agents: list[AgentProcess]
) -> None:
    ports = [free_port(), free_port()]
    peers = [{"name": f"w{i + 1}", "address": "127.0.0.1", "port": ports[i]} for i in range(2)]
    down_api = FakeApi(tmp_path / "down").start()
    down_api.up = False
    try:
        lost = make_agent("w1", tmp_path, pki, down_api, peers, hostPort=ports[0])
        helper = make_agent("w2", tmp_path, pki, fake_api, peers, hostPort=ports[1])
        agents.extend([helper.start(), lost.start()])
        status = wait_for(
            lambda: (
                (s := lost.status()) and s["last_verdict"] and s["last_verdict"]["code"] == "PeerReportsHealthy" and s
            ),
            15,
            "a verdict from the peer",
        )
        assert not status["fenced"]
        # the helper stops: no peer answers; the node fences, isolated (30 s after the last answer) or at the
        # isolation limit after its last confirmation, whichever comes first
        helper.stop()
        status = wait_for(lambda: (s := lost.status()) and s["fenced"] and s, 60, "isolation")
        assert status["fence_cause"] in ("Isolated", "IsolationLimit"), status
        assert status["fenced_at"] - status["confirmed_at"] <= status["isolation_limit_seconds"] + 1, status
    finally:
        down_api.stop()


# -- attacks on the peer channel -----------------------------------------------------------------------------
def connect_from(source: str, port: int) -> socket.socket:
    """A TCP connection to the agent on 127.0.0.1 from another loopback address."""
    sock = socket.socket()
    sock.bind((source, 0))
    sock.settimeout(60)
    sock.connect(("127.0.0.1", port))
    return sock


def closed_by_server(sock: socket.socket) -> bool:
    """Blocks until the server closes the connection (EOF or reset); False if it sends data instead."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_connections_from_strangers_are_closed_before_tls_and_peers_are_still_answered(
    tmp_path: Path, pki: dict[str, Any], fake_api: FakeApi, agents: list[AgentProcess]
) -> None:
    agent = make_agent("w1", tmp_path, pki, fake_api, ASKERS)
    agents.append(agent.start())
    port = agent.config["hostPort"]
    strangers = [connect_from("127.0.0.2", port) for _index in range(64)]
    try:
        # every one of them is closed by the agent without a byte of TLS, however many there are
        assert all(closed_by_server(sock) for sock in strangers)
        assert ask_peer("127.0.0.1", port, "w1", client(pki, "w2")) == (200, {"status": HEALTHY})
    finally:
        for sock in strangers:
            sock.close()
    status = wait_for(lambda: (s := agent.status()) and s["peer_connections_from_strangers"] >= 64 and s, 60, "count")
    assert status["peer_connections_refused"] == 0  # no handshake was even tried


def test_the_port_opens_only_once_the_peers_are_known(
    tmp_path: Path, pki: dict[str, Any], fake_api: FakeApi, agents: list[AgentProcess]
) -> None:
    # A peer that reaches a starting agent is answered, never closed as a stranger: the peer list is a FIFO
    # here, so the agent is held in its first read of it for as long as the test wants.
    agent = make_agent("w1", tmp_path, pki, fake_api, ASKERS)
    peers_file = Path(agent.config["peersFile"])
    peers = peers_file.read_text()
    peers_file.unlink()
    os.mkfifo(peers_file)
    agents.append(agent)
    with agent.log.open("ab") as log:
        agent.process = subprocess.Popen(
            [sys.executable, str(AGENT), "--config", str(agent.directory / "config.json")],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    port = agent.config["hostPort"]

    def reading() -> int | None:
        # a writer's non-blocking open succeeds once a reader waits in its open of the FIFO (ENXIO before)
        try:
            return os.open(peers_file, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            assert agent.process is not None and agent.process.poll() is None, agent.log.read_text()[-3000:]
            return None

    fd = wait_for(reading, 30, "the agent reading its peer list")
    # the agent is in its first read of the peer list: its port is not open yet
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    os.set_blocking(fd, True)
    os.write(fd, peers.encode())
    os.close(fd)

    def answer() -> tuple[int, Any] | None:
        try:
            return ask_peer("127.0.0.1", port, "w1", client(pki, "w2"))
        except ConnectionRefusedError:
            return None

    # the first connection that the port accepts is a peer's exchange, answered
    assert wait_for(answer, 30, "the agent's port") == (200, {"status": HEALTHY})


def test_a_peer_address_holds_few_connections_and_each_exchange_has_a_deadline(
    tmp_path: Path, pki: dict[str, Any], fake_api: FakeApi, agents: list[AgentProcess]
) -> None:
    peers = [*ASKERS, {"name": "w3", "address": "127.0.0.3", "port": 9}]
    agent = make_agent("w1", tmp_path, pki, fake_api, peers)
    agents.append(agent.start())
    port = agent.config["hostPort"]
    # a peer address that opens 10 idle connections: the agent keeps 4, closes the rest at once
    idle = [connect_from("127.0.0.3", port) for _index in range(10)]
    try:
        status = wait_for(lambda: (s := agent.status()) and s["peer_connections_busy"] >= 6 and s, 60, "busy")
        assert status["peer_connections_busy"] == 6
        # another peer is answered meanwhile
        assert ask_peer("127.0.0.1", port, "w1", client(pki, "w2")) == (200, {"status": HEALTHY})
        # the 4 it kept are closed when their exchange's time is up
        assert all(closed_by_server(sock) for sock in idle)
    finally:
        for sock in idle:
            sock.close()
    status = wait_for(lambda: (s := agent.status()) and s["peer_exchanges_overdue"] >= 4 and s, 60, "overdue")
    assert status["peer_answers_served"] == 1


def test_a_slow_client_with_a_valid_certificate_is_cut_off(
    tmp_path: Path, pki: dict[str, Any], fake_api: FakeApi, agents: list[AgentProcess]
) -> None:
    agent = make_agent("w1", tmp_path, pki, fake_api, ASKERS)
    agents.append(agent.start())
    port = agent.config["hostPort"]
    request = b"GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    sent = 0
    with (
        socket.create_connection(("127.0.0.1", port), timeout=60) as raw,
        client(pki, "w2").wrap_socket(raw, server_hostname="w1") as tls,
    ):
        # one byte at a time, each before the per-read timeout: only the whole exchange's deadline ends it
        cut = threading.Event()
        try:
            while sent < len(request):
                tls.sendall(request[sent : sent + 1])
                sent += 1
                if cut.wait(1.0):
                    break
                with contextlib.suppress(TimeoutError, ssl.SSLWantReadError):
                    tls.settimeout(0.001)
                    if tls.recv(1) == b"":
                        break
                tls.settimeout(60)
        except (OSError, ssl.SSLError):
            pass
    assert sent < len(request), "the agent read the whole slow request"
    status = wait_for(lambda: (s := agent.status()) and s["peer_exchanges_overdue"] >= 1 and s, 60, "overdue")
    assert status["peer_answers_served"] == 0


def test_a_peer_answering_garbage_or_endless_chunks_cannot_grow_the_askers_memory(
    tmp_path: Path, pki: dict[str, Any], agents: list[AgentProcess]
) -> None:
    def endless_chunks(tls: ssl.SSLSocket) -> None:
        tls.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        block = b"FFFFFF\r\n" + b"x" * 65536
        while True:
            tls.sendall(block)

    def endless_body(tls: ssl.SSLSocket) -> None:
        tls.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n")
        while True:
            tls.sendall(b"{" * 65536)

    replies: dict[str, Any] = {
        "bomb": endless_chunks,
        "flood": endless_body,
        "negative": b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-5\r\n{"status": 1}\r\n0\r\n\r\n',
    }
    fakes = [
        FakePeer(name, issue(name, pki["ca"]), tmp_path / "fakes", reply).start() for name, reply in replies.items()
    ]
    down_api = FakeApi(tmp_path / "down").start()
    down_api.up = False
    try:
        agent = make_agent("w1", tmp_path, pki, down_api, [fake.entry() for fake in fakes])
        agents.append(agent.start())
        assert agent.process is not None
        wait_for(lambda: all(fake.asked >= 3 for fake in fakes), 120, "three rounds of questions")
        status = agent.status()
        assert status is not None and agent.alive()
        assert set(status["last_verdict"]["answers"]) == {"RequestFailed"}
        assert rss_kib(agent.process.pid) < 40 * 1024
    finally:
        down_api.stop()
        for fake in fakes:
            fake.stop()


@pytest.mark.parametrize(
    ("lie", "honest_api_has_remediation", "code", "fenced"),
    [(UNHEALTHY, False, "PeerReportsHealthy", False), (HEALTHY, True, "PeerReportsUnhealthy", True)],
    ids=["lies-unhealthy", "lies-healthy"],
)
def test_one_lying_peer_is_outvoted_by_two_honest_ones(
    tmp_path: Path,
    pki: dict[str, Any],
    fake_api: FakeApi,
    agents: list[AgentProcess],
    lie: int,
    honest_api_has_remediation: bool,
    code: str,
    fenced: bool,
) -> None:
    if honest_api_has_remediation:
        fake_api.remediations = [{"metadata": {"name": "w1", "namespace": "ops", "uid": "u1"}}]
    liar = FakePeer("liar", issue("liar", pki["ca"]), tmp_path / "fakes", json_answer({"status": lie})).start()
    ports = [free_port(), free_port(), free_port()]
    peers = [{"name": f"w{i + 1}", "address": "127.0.0.1", "port": ports[i]} for i in range(3)] + [liar.entry()]
    down_api = FakeApi(tmp_path / "down").start()
    down_api.up = False
    try:
        asker = make_agent("w1", tmp_path, pki, down_api, peers, hostPort=ports[0])
        honest = [make_agent(f"w{i + 1}", tmp_path, pki, fake_api, peers, hostPort=ports[i]) for i in (1, 2)]
        agents.extend([*(agent.start() for agent in honest), asker.start()])
        status = wait_for(
            lambda: (s := asker.status()) and s["last_verdict"] and s["last_verdict"]["code"] == code and s,
            60,
            f"the verdict {code}",
        )
        assert sorted(status["last_verdict"]["answers"]) == sorted(
            [{HEALTHY: "Healthy", UNHEALTHY: "Unhealthy"}[lie]] + [{True: "Unhealthy", False: "Healthy"}[fenced]] * 2
        )
        assert liar.asked >= 1
        final = wait_for(lambda: (s := asker.status()) and s["checks"] >= status["checks"] + 2 and s, 60, "more checks")
        assert final["fenced"] is fenced
    finally:
        down_api.stop()
        liar.stop()


def test_an_api_server_that_hangs_is_an_outage_not_isolation(
    tmp_path: Path, pki: dict[str, Any], agents: list[AgentProcess]
) -> None:
    """The API does not answer at all, not even the connection (a powered-off control plane behind an address
    that drops packets): the peers answer ApiError in time, so nobody counts as isolated. The agents started
    without the API (a cold start of the cluster): none confirmed in this boot, so the isolation limit does not
    run and nobody fences (nobody reboots again and again while the control plane comes up)."""
    # a listening socket that never accepts, its backlog full: new connections get no answer at all
    blackhole = socket.socket()
    blackhole.bind(("127.0.0.1", 0))
    blackhole.listen(0)
    held: list[socket.socket] = []
    while len(held) < 8:  # fill the backlog until a connection is no longer answered
        try:
            held.append(socket.create_connection(blackhole.getsockname(), timeout=1))
        except TimeoutError:
            break
    assert len(held) < 8, "the backlog did not fill"
    hung = FakeApi(tmp_path / "hung").start()
    hung.port = int(blackhole.getsockname()[1])  # its token and CA, the black hole's port
    ports = [free_port() for _index in range(3)]
    peers = [{"name": f"w{i + 1}", "address": "127.0.0.1", "port": ports[i]} for i in range(3)]
    try:
        # upstream's default API timeouts: an answer that read the hung API would come after the exchange's end
        slow = {"apiServerTimeout": "5s", "peerApiServerTimeout": "5s"}
        started = [
            make_agent(f"w{i + 1}", tmp_path, pki, hung, peers, hostPort=ports[i], **slow).start() for i in range(3)
        ]
        agents.extend(started)
        for agent in started:
            wait_for(
                lambda agent=agent: (s := agent.status()) and s["verdicts"].get("ApiServerOutage", 0) >= 3,
                120,
                f"three outage verdicts of {agent.name}",
            )
        for agent in started:
            # past the limit on the agent's own clock, and still running
            status = wait_for(
                lambda agent=agent: (s := agent.status()) and s["cut_off_seconds"] > s["isolation_limit_seconds"] and s,
                120,
                f"{agent.name} cut off past the limit",
            )
            assert not status["fenced"] and "Isolated" not in status["verdicts"], status
            assert not status["isolation_limit_in_force"], status
    finally:
        blackhole.close()
        for sock in held:
            sock.close()
        hung.stop()


# -- a fence lasts until the reboot ---------------------------------------------------------------------------
def test_the_watchdog_is_first_fed_after_a_check_that_passed(
    tmp_path: Path, pki: dict[str, Any], fake_api: FakeApi, agents: list[AgentProcess]
) -> None:
    fake_api.up = False
    agent = make_agent("w1", tmp_path, pki, fake_api, [])
    agents.append(agent.start())
    # the API is down and no peer can say the node is healthy: checks run, the watchdog stays closed
    status = wait_for(lambda: (s := agent.status()) and s["checks"] >= 3 and s, 60, "three checks")
    assert status["watchdog"]["armed"] is False and agent.fed_bytes() == 0
    fake_api.up = True
    wait_for(agent.fed_bytes, 60, "the first feed after a passing check")


def test_a_remediation_seen_before_any_check_passed_starts_the_watchdog_and_never_feeds_it(
    tmp_path: Path, pki: dict[str, Any], fake_api: FakeApi, agents: list[AgentProcess]
) -> None:
    fake_api.remediations = [{"metadata": {"name": "w1", "namespace": "ops", "uid": "u1"}}]
    agent = make_agent("w1", tmp_path, pki, fake_api, [])
    agents.append(agent.start())
    status = wait_for(lambda: (s := agent.status()) and s["fenced"] and s, 60, "fencing")
    # opened to start its timer (the one write of the open), then never fed: the node resets on its timeout
    assert status["watchdog"]["armed"] is True and status["watchdog"]["feeding"] is False
    assert agent.fed_bytes() == 1
    wait_for(agent.reboots, 60, "the software fallback after the watchdog's timeout")
    assert agent.fed_bytes() == 1


def test_a_fence_survives_sigkill_and_restarts_until_the_boot_changes(
    tmp_path: Path, pki: dict[str, Any], fake_api: FakeApi, agents: list[AgentProcess]
) -> None:
    agent = make_agent("w1", tmp_path, pki, fake_api, [])
    agents.append(agent.start())
    wait_for(agent.fed_bytes, 60, "feeding")
    fake_api.remediations = [{"metadata": {"name": "w1", "namespace": "ops", "uid": "u1"}}]
    wait_for(lambda: (s := agent.status()) and s["fenced"], 60, "fencing")
    fed = agent.fed_bytes()
    assert agent.process is not None
    for _restart in range(3):
        # killed without a chance to clean up, as by the OOM killer, then started again as systemd would
        os.kill(agent.process.pid, signal.SIGKILL)
        agent.process.wait(30)
        (agent.directory / "status.json").unlink()
        agent.start()
        status = wait_for(lambda: (s := agent.status()) and s["checks"] >= 1 and s, 60, "a check after the restart")
        assert status["fenced"] is True and status["fence_carried_over"] is True
        assert status["watchdog"]["armed"] is False
    # the software fallback goes on from when fencing began; the watchdog was never fed again
    wait_for(agent.reboots, 60, "the software reboot")
    assert agent.fed_bytes() == fed
    # a clean stop of a fenced agent leaves the watchdog running
    agent.stop()
    assert not agent.watchdog.read_bytes().endswith(b"V")
    # after a reboot (a new boot ID) the marker is stale: a healthy node is fed again
    fake_api.remediations = []
    (agent.directory / "boot_id").write_text("another-boot\n")
    (agent.directory / "status.json").unlink()
    agent.start()
    wait_for(lambda: agent.fed_bytes() > fed, 60, "feeding in the new boot")
    assert not Path(agent.config["fenceMarkerFile"]).exists()


# -- what the agent publishes on its Node ----------------------------------------------------------------------
CAPABLE = "is-reboot-capable.self-node-remediation.medik8s.io"
TIMEOUT = "self-node-remediation.medik8s.io/watchdog-timeout"


def test_the_node_is_reboot_capable_only_once_the_watchdog_is_armed(
    tmp_path: Path, pki: dict[str, Any], fake_api: FakeApi, agents: list[AgentProcess]
) -> None:
    fake_api.up = False
    agent = make_agent("w1", tmp_path, pki, fake_api, [])
    agents.append(agent.start())
    wait_for(lambda: (s := agent.status()) and s["checks"] >= 3, 60, "three checks")
    assert fake_api.patches == []  # nothing is claimed before a check passed
    fake_api.up = True
    wait_for(lambda: fake_api.patches, 60, "the annotations")
    assert agent.fed_bytes() > 0
    # a fake watchdog reports no timeout: the configured 3 s, in whole seconds
    assert fake_api.patches == [("w1", {"metadata": {"annotations": {CAPABLE: "true", TIMEOUT: "3"}}})]
    # someone removes them: put back at the next peer-list refresh (every peerUpdateInterval, 10 s here)
    fake_api.nodes["w1"]["metadata"]["annotations"] = {}
    wait_for(lambda: len(fake_api.patches) >= 2, 60, "the annotations put back")
    # fencing leaves them as they are
    fake_api.remediations = [{"metadata": {"name": "w1", "namespace": "ops", "uid": "u1"}}]
    wait_for(lambda: (s := agent.status()) and s["fenced"], 60, "fencing")
    fake_api.nodes["w1"]["metadata"]["annotations"] = {}
    base = agent.status()["checks"]
    # past a peer-list refresh (10 s, a check every second) that saw them gone
    wait_for(lambda: (s := agent.status()) and s["checks"] >= base + 12, 60, "more checks")
    assert len(fake_api.patches) == 2


def test_a_watchdog_that_fails_to_open_makes_the_node_not_capable(
    tmp_path: Path, pki: dict[str, Any], fake_api: FakeApi, agents: list[AgentProcess]
) -> None:
    watchdog = tmp_path / "watchdog-dir"
    watchdog.mkdir()  # there and writable, but a directory cannot be opened for writing
    agent = make_agent("w1", tmp_path, pki, fake_api, [], watchdogFilePath=str(watchdog))
    agents.append(agent.start())
    wait_for(lambda: fake_api.patches, 60, "the annotations")
    assert fake_api.patches[0][1]["metadata"]["annotations"][CAPABLE] == "false"


# -- footprint -----------------------------------------------------------------------------------------------


def test_the_role_ships_every_core_file_the_agent_imports() -> None:
    """The role copies a fixed list of core files: it must hold the package, every core module the agent
    imports, and everything those import from each other."""
    import ast

    import yaml

    root = Path(__file__).resolve().parents[2]
    core = root / "plugins" / "module_utils" / "core" / "node"
    shipped = set(
        yaml.safe_load((root / "roles" / "node_agent" / "vars" / "main.yml").read_text())["node_agent_core_files"]
    )
    assert "__init__.py" in shipped
    agent = ast.parse((root / "roles" / "node_agent" / "files" / "nodeops_node_agent.py").read_text())
    imported: list[str] = []  # the core modules the agent imports, nodeops_core.<module>
    for node in ast.walk(agent):
        if isinstance(node, ast.ImportFrom) and node.module == "nodeops_core":
            imported.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("nodeops_core."):
            imported.append(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            imported.extend(a.name.split(".")[1] for a in node.names if a.name.startswith("nodeops_core."))
    assert imported, "the agent imports no core module: is this still the agent's import of nodeops_core?"
    todo = [f for f in shipped if f != "__init__.py"] + [f"{module}.py" for module in imported]
    needed: set[str] = set()
    while todo:
        name = todo.pop()
        if name in needed:
            continue
        needed.add(name)
        for node in ast.walk(ast.parse((core / name).read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                modules = [node.module] if node.module else [alias.name for alias in node.names]
                todo.extend(f"{module}.py" for module in modules)
    assert needed <= shipped, f"add to node_agent_core_files: {sorted(needed - shipped)}"
