"""The fence's liveness, on real agent processes: a node cut off from its remediation state fences within the
isolation limit, and the watchdog reset lands inside the safe time, whatever its peers, its DNS or the API's
answers do. Each test first lets the node confirm (healthy, watchdog armed), then cuts it off, and reads the
product's own clocks: the agent's ``confirmed_at`` and ``fenced_at`` (status file) and the fake watchdog's
last write (its mtime).

The lab settings (tests/support/node_agent.py FAST) give an isolation limit of 2 x (1 s + 0.5 s) + 25 s = 28 s
and, with a 3 s watchdog, a safe time of 66 s.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.node.safetime import (
    LIVENESS_MARGIN_SECONDS,
    safe_time,
)
from support.node_agent import (
    FAST,
    AgentProcess,
    FakeApi,
    FakePeer,
    free_port,
    issue,
    json_answer,
    make_agent,
    wait_for,
)

SPEC = {
    key: FAST[key]
    for key in ("apiServerTimeout", "apiCheckInterval", "maxApiErrorThreshold", "peerDialTimeout", "peerRequestTimeout")
}
WATCHDOG = int(FAST["watchdogTimeoutSeconds"])


def healthy_and_fed(agent: AgentProcess) -> None:
    """Until the agent has confirmed, armed its watchdog and fed it."""
    wait_for(
        lambda: (s := agent.status()) and s["state"] == "healthy" and s["watchdog"]["armed"] and agent.fed_bytes() > 1,
        60,
        f"{agent.name} healthy and feeding its watchdog",
    )


def fenced_in_time(
    agent: AgentProcess, workers: int, what: str, cut: float, *, reboot: bool = False, spec: dict[str, Any] = SPEC
) -> dict[str, Any]:
    """Waits for the fence, then checks it against the isolation limit and the safe time on the product's own
    clocks, and prints the margins. ``cut`` is when the test cut the node off (Unix time, taken before): the
    last confirmation must come before it (order, not duration)."""
    status: dict[str, Any] = wait_for(lambda: (s := agent.status()) and s["fenced"] and s, 150, f"{agent.name} fencing")
    promise = safe_time(spec, workers + 1, WATCHDOG)
    assert status["isolation_limit_seconds"] == promise.isolation_limit_seconds
    confirmed, fenced = status["confirmed_at"], status["fenced_at"]
    assert confirmed <= cut + 0.01, "a confirmation after the node was cut off"
    last_feed = agent.watchdog.stat().st_mtime
    decided = fenced - confirmed
    reset_by = last_feed + WATCHDOG - confirmed
    print(
        f"\n{what}: fenced ({status['fence_cause']}) {decided:.1f}s after the last confirmation (limit"
        f" {promise.isolation_limit_seconds:g}s), watchdog reset by {reset_by:.1f}s, safe time"
        f" {promise.minimum_seconds}s: margin {promise.minimum_seconds - reset_by:.1f}s"
    )
    assert decided <= promise.isolation_limit_seconds + LIVENESS_MARGIN_SECONDS, status
    assert last_feed <= fenced + 0.5, "fed after the fence"
    assert reset_by <= promise.minimum_seconds, (reset_by, promise.as_dict(), agent.log_tail())
    if reboot:
        # the software fallback (the reboot command, later sysrq) comes inside the safe time too
        wait_for(agent.reboots, WATCHDOG + 30, f"{agent.name}'s software reboot")
        assert float(agent.reboots()[0].split()[0]) - confirmed <= promise.minimum_seconds
    return status


def answers(agent: AgentProcess) -> set[str]:
    status = agent.status() or {}
    return set((status.get("last_verdict") or {}).get("answers") or [])


# -- 1. a node its peers do not know ----------------------------------------------------------------------------
def test_a_node_missing_from_its_peers_lists_fences_in_time(
    tmp_path: Path, pki: dict[str, Any], agents: list[AgentProcess]
) -> None:
    """Its peers close its connections before TLS (a stranger's close looks like Busy): Busy keeps it from
    counting as isolated, never past the isolation limit. Its peers can read the API and hold a remediation
    for it, but never get to say so."""
    new_api, peers_api = FakeApi(tmp_path / "new-api").start(), FakeApi(tmp_path / "peers-api").start()
    try:
        ports = {name: free_port() for name in ("w1", "w2", "new")}
        old = [{"name": n, "address": f"127.0.0.{i + 2}", "port": ports[n]} for i, n in enumerate(("w1", "w2"))]
        for entry in old:
            agents.append(
                make_agent(
                    entry["name"],
                    tmp_path,
                    pki,
                    peers_api,
                    old,
                    hostPort=entry["port"],
                    listenAddress=entry["address"],
                ).start()
            )
        # the new node knows the old ones; they were deployed before it and do not know it
        mine = [*old, {"name": "new", "address": "127.0.0.9", "port": ports["new"]}]
        node = make_agent("new", tmp_path, pki, new_api, mine, hostPort=ports["new"], listenAddress="127.0.0.9")
        agents.append(node.start())
        healthy_and_fed(node)
        assert (node.status() or {})["source_address"] == "127.0.0.9"
        peers_api.remediations = [{"metadata": {"name": "new", "uid": "u-new", "namespace": "ops"}}]
        cut = time.time()
        new_api.up = False
        fenced_in_time(node, 2, "a node its peers do not know", cut, reboot=True)
        assert "Busy" in answers(node) and "Unhealthy" not in answers(node)
        assert all(not (a.status() or {})["fenced"] for a in agents if a is not node)
    finally:
        new_api.stop()
        peers_api.stop()


# -- 2. a listener that accepts and closes -----------------------------------------------------------------
def test_a_listener_that_accepts_and_closes_keeps_nobody_alive(
    tmp_path: Path, pki: dict[str, Any], fake_api: FakeApi, agents: list[AgentProcess]
) -> None:
    stop = threading.Event()
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    closed = 0

    def accept_and_close() -> None:
        nonlocal closed
        while not stop.is_set() and closed < 10_000:
            try:
                conn, _peer = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.close()
            closed += 1

    thread = threading.Thread(target=accept_and_close, daemon=True)
    thread.start()
    try:
        port = free_port()
        peers = [
            {"name": "w1", "address": "127.0.0.1", "port": port},
            {"name": "closer", "address": "127.0.0.1", "port": listener.getsockname()[1]},
            {"name": "gone-1", "address": "127.0.0.1", "port": free_port()},
            {"name": "gone-2", "address": "127.0.0.1", "port": free_port()},
        ]
        node = make_agent("w1", tmp_path, pki, fake_api, peers, hostPort=port)
        agents.append(node.start())
        healthy_and_fed(node)
        cut = time.time()
        fake_api.up = False
        fenced_in_time(node, 3, "a listener that accepts and closes", cut)
        assert closed > 0 and "Busy" in answers(node)
    finally:
        stop.set()
        listener.close()
        thread.join(5)


# -- 3. a slow lying peer -------------------------------------------------------------------------------------
def slow_healthy(tls: Any) -> None:
    time.sleep(2.7)  # well within what the asker waits here (peerRequestTimeout 6 s)
    tls.sendall(json_answer({"status": 1}))


SLOW_PEERS = {"peerRequestTimeout": "6s"}  # the lie always arrives, also on a busy machine


@pytest.mark.parametrize("honest", [False, True], ids=["against-silence", "against-one-honest-peer"])
def test_a_slow_peer_lying_healthy_cannot_keep_a_node_running(
    tmp_path: Path, pki: dict[str, Any], fake_api: FakeApi, agents: list[AgentProcess], honest: bool
) -> None:
    """One peer with a valid certificate answers Healthy slowly: against silence (1-0) or against one honest
    peer (a 1-1 tie) it confirms nothing, and the node fences at the isolation limit."""
    liar = FakePeer("liar", issue("liar", pki["ca"]), tmp_path / "liar", slow_healthy).start()
    peers_api = FakeApi(tmp_path / "peers-api").start()
    try:
        port, honest_port = free_port(), free_port()
        peers = [{"name": "w1", "address": "127.0.0.1", "port": port}, liar.entry()]
        if honest:
            peers.append({"name": "honest", "address": "127.0.0.1", "port": honest_port})
        else:
            peers.append({"name": "gone", "address": "127.0.0.1", "port": free_port()})
        node = make_agent("w1", tmp_path, pki, fake_api, peers, hostPort=port, **SLOW_PEERS)
        agents.append(node.start())
        if honest:
            peers_api.remediations = [{"metadata": {"name": "w1", "uid": "u-w1", "namespace": "ops"}}]
            agents.append(
                make_agent("honest", tmp_path, pki, peers_api, peers, hostPort=honest_port, **SLOW_PEERS).start()
            )
        healthy_and_fed(node)
        cut = time.time()
        fake_api.up = False
        status = fenced_in_time(
            node,
            2,
            f"a slow lying peer {'against one honest peer' if honest else 'against silence'}",
            cut,
            spec={**SPEC, **SLOW_PEERS},
        )
        # the lie was heard, and outweighed nothing: only the limit fenced the node
        assert liar.asked > 0 and status["fence_cause"] == "IsolationLimit", status
        assert "PeerReportsHealthy" not in status["verdicts"], status
        heard = status["last_verdict"]["answers"]
        assert "Healthy" in heard and ("Unhealthy" in heard) == honest, status
    finally:
        liar.stop()
        peers_api.stop()


# -- 4. DNS down with the network ---------------------------------------------------------------------------------
DNS_SERVER = r"""
import json, os, socket, struct, sys
table, down = sys.argv[1], sys.argv[2]
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sock.bind(("127.0.0.1", 53))
for _ in range(100000):
    data, client = sock.recvfrom(512)
    if os.path.exists(down) or len(data) < 17:
        continue  # silent: the lookup waits for its timeout
    end = data.index(b"\0", 12)
    labels, i = [], 12
    while i < end:
        labels.append(data[i + 1 : i + 1 + data[i]].decode().lower())
        i += 1 + data[i]
    qtype = struct.unpack(">H", data[end + 1 : end + 3])[0]
    question = data[12 : end + 5]
    address = json.load(open(table)).get(".".join(labels))
    record = b""
    if address and qtype == 1:
        record = b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 5, 4) + socket.inet_aton(address)
    head = struct.pack(">HHHHHH", struct.unpack(">H", data[:2])[0], 0x8180 | (0 if address else 3), 1,
                       1 if record else 0, 0, 0)
    sock.sendto(head + question + record, client)
"""


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


@pytest.fixture
def dns_lab(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A network namespace whose DNS is a server of the test (on the namespace's loopback), with a veth to the
    host for the API; /etc/netns/NAME/resolv.conf points the namespace's lookups at that server."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    tag = secrets.token_hex(3)
    ns, host_end = f"nodeops-dns-{tag}", f"nd{tag}"
    subnet = f"198.19.{int(tag[:2], 16) % 250 + 1}"
    etc = Path("/etc/netns") / ns
    server: subprocess.Popen[bytes] | None = None
    try:
        ip("netns", "add", ns)
        ip("link", "add", host_end, "type", "veth", "peer", "name", "eth0", "netns", ns)
        ip("addr", "add", f"{subnet}.1/24", "dev", host_end)
        ip("link", "set", host_end, "up")
        ip("-n", ns, "addr", "add", f"{subnet}.2/24", "dev", "eth0")
        ip("-n", ns, "link", "set", "eth0", "up")
        ip("-n", ns, "link", "set", "lo", "up")
        etc.mkdir(parents=True)
        (etc / "resolv.conf").write_text("nameserver 127.0.0.1\noptions timeout:3 attempts:3\n")
        table, down = tmp_path / "dns.json", tmp_path / "dns-down"
        table.write_text("{}")
        script = tmp_path / "dns.py"
        script.write_text(DNS_SERVER)
        server = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, str(script), str(table), str(down)])
        yield {"ns": ns, "host": f"{subnet}.1", "table": table, "down": down}
    finally:
        if server is not None:
            server.kill()
            server.wait(10)
        ip("netns", "del", ns, check=False)
        ip("link", "del", host_end, check=False)
        for name in ("resolv.conf",):
            (etc / name).unlink(missing_ok=True)
        if etc.exists():
            etc.rmdir()


def test_dns_down_with_the_network_does_not_delay_the_fence(
    tmp_path: Path, pki: dict[str, Any], dns_lab: dict[str, Any], agents: list[AgentProcess]
) -> None:
    """Every address is a name (the API server's and the peers'); the network and DNS go down together (a
    lookup then waits 3 x 3 s per server for nothing): the node still fences within the isolation limit."""
    api = FakeApi(tmp_path / "api", bind=dns_lab["host"]).start()
    try:
        ports = {name: free_port() for name in ("w1", "w2", "w3")}
        names = {name: f"{name}.nodeops.test" for name in ports}
        dns_lab["table"].write_text(
            json.dumps({"api.nodeops.test": dns_lab["host"], **dict.fromkeys(names.values(), "127.0.0.1")})
        )
        peers = [{"name": name, "address": names[name], "port": ports[name]} for name in ports]
        settings = {
            "apiServer": f"https://api.nodeops.test:{api.port}",
            "apiServerName": "127.0.0.1",  # the fake API's certificate
            "caFile": str(api.ca_file),
            "tokenFile": str(api.token_file),
        }
        prefix = ["ip", "netns", "exec", dns_lab["ns"]]
        started = [
            AgentProcess.prepare(
                name,
                tmp_path / name,
                pki["ca"],
                pki["ca_file"],
                settings,
                peers,
                overrides={"hostPort": ports[name], "listenAddress": "127.0.0.1"},
                prefix=prefix,
            ).start()
            for name in ports
        ]
        agents.extend(started)
        for agent in started:
            healthy_and_fed(agent)
        node = started[0]
        # the network goes, and DNS with it
        cut = time.time()
        dns_lab["down"].write_text("")
        ip("-n", dns_lab["ns"], "link", "set", "eth0", "down")
        for agent in started:
            fenced_in_time(agent, 2, f"DNS down with the network ({agent.name})", cut)
        assert "ApiError" in answers(node) or "RequestFailed" in answers(node) or "Busy" in answers(node)
    finally:
        api.stop()


# -- 5. the API answers, but the remediation list is refused -----------------------------------------------------
def test_a_refused_remediation_read_fails_closed(
    tmp_path: Path, pki: dict[str, Any], fake_api: FakeApi, agents: list[AgentProcess]
) -> None:
    """/readyz answers 200, the SelfNodeRemediation list 403 (a lost RoleBinding): that is an API error, the
    node says it is not reboot-capable while it cannot read its remediation state, asks its peers, and an
    honest peer's Unhealthy fences it."""
    peers_api = FakeApi(tmp_path / "peers-api").start()
    try:
        port, honest_port = free_port(), free_port()
        peers = [
            {"name": "w1", "address": "127.0.0.1", "port": port},
            {"name": "honest", "address": "127.0.0.1", "port": honest_port},
        ]
        node = make_agent("w1", tmp_path, pki, fake_api, peers, hostPort=port)
        agents.append(node.start())
        agents.append(make_agent("honest", tmp_path, pki, peers_api, peers, hostPort=honest_port).start())
        healthy_and_fed(node)
        capable = "is-reboot-capable.self-node-remediation.medik8s.io"
        assert fake_api.nodes["w1"]["metadata"]["annotations"][capable] == "true"
        fake_api.remediations_status = 403
        wait_for(
            lambda: fake_api.nodes["w1"]["metadata"]["annotations"][capable] == "false",
            30,
            "the node published not reboot-capable",
        )
        # the status file is written once a loop: it may lag the annotation by one loop
        status = wait_for(
            lambda: (s := node.status()) and s["remediation_read_failures"].get("forbidden", 0) >= 1 and s,
            30,
            "the refused read counted in the status",
        )
        assert not status["fenced"], status
        assert 'nodeops_agent_remediation_read_failures_total{reason="forbidden"}' in node.metrics()
        # a remediation is created; the node cannot see it, its peer can
        cut = time.time()
        peers_api.remediations = [{"metadata": {"name": "w1", "uid": "u-w1", "namespace": "ops"}}]
        status = fenced_in_time(node, 1, "a refused remediation read, an honest peer", cut)
        assert status["fence_cause"] == "PeerReportsUnhealthy"
    finally:
        peers_api.stop()


def test_a_refused_remediation_read_without_peers_fences_at_the_limit_unless_it_says_not_capable(
    tmp_path: Path, pki: dict[str, Any], fake_api: FakeApi, agents: list[AgentProcess]
) -> None:
    """No peer to ask (minPeersForRemediation 1, none listed: TooFewPeers keeps it from fencing early). While the
    node can publish itself not reboot-capable the manager touches nothing of it and the limit rests; when it
    cannot (its Node's patch refused too), the isolation limit fences it."""
    node = make_agent("w1", tmp_path, pki, fake_api, [])
    agents.append(node.start())
    healthy_and_fed(node)
    capable = "is-reboot-capable.self-node-remediation.medik8s.io"
    fake_api.remediations_status = 403
    wait_for(lambda: fake_api.nodes["w1"]["metadata"]["annotations"][capable] == "false", 30, "not reboot-capable")
    # past the limit on the agent's own clock, and still running
    status = wait_for(
        lambda: (s := node.status()) and s["cut_off_seconds"] > s["isolation_limit_seconds"] + 3 and s,
        90,
        "the cut-off past the limit",
    )
    assert not status["fenced"] and not status["isolation_limit_in_force"], status
    # it can read again: capable, confirmed, the limit runs again
    fake_api.remediations_status = 200
    wait_for(lambda: fake_api.nodes["w1"]["metadata"]["annotations"][capable] == "true", 30, "reboot-capable again")
    wait_for(lambda: (s := node.status()) and s["isolation_limit_in_force"], 30, "the limit in force again")
    # now its Node cannot be patched either: it stays capable on its Node, so the limit fences it
    fake_api.patch_status = 403
    cut = time.time()
    fake_api.remediations_status = 403
    status = fenced_in_time(node, 0, "a refused remediation read and patch, no peers", cut)
    assert status["fence_cause"] == "IsolationLimit"
    assert status["verdicts"].get("TooFewPeers", 0) >= 1
