"""Four node agents, each in its own network namespace, against the real test cluster.

Each agent runs as a process inside a network namespace made by the test (``ip netns`` + veth on a
bridge, addresses from 198.18.0.0/15); the agents talk to each other over the bridge with mutual
TLS, and reach the API server (on the host's loopback) through a TCP forwarder of the test on the
bridge address, which can cut the API off for one agent or for all. The agents read the cluster with
a ServiceAccount token allowed only to get nodes and to read SelfNodeRemediations. The watchdog is a
file the test watches; the reboot command records its calls.

Scenarios, in order, on the same four agents: steady state; one agent loses only the API (peers healthy) → no
fence; the API is down for everybody (peers answer "API error") → nobody fences before the isolation limit; a
SelfNodeRemediation for one node → that node fences; a fully isolated worker fences within the time the
safe-time formula promises.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.node.safetime import safe_time
from cluster import kwok
from integration.test_crds import run_role
from kubernetes import client
from support.node_agent import FAST, AgentProcess, issue, wait_for

pytestmark = pytest.mark.integration

AGENTS = 4
PEER_PORT = 30001
SNR = ("self-node-remediation.medik8s.io", "v1alpha1", "selfnoderemediations")


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


class Forwarder:
    """TCP forwarder from ``listen`` to ``target``; cuts off chosen source addresses (or everybody)."""

    def __init__(self, listen: tuple[str, int], target: tuple[str, int]) -> None:
        self.target = target
        self.blocked: set[str] = set()
        self.down = False
        self.server = socket.create_server(listen)
        self.server.settimeout(0.2)
        self.stop = threading.Event()
        self.connections: list[socket.socket] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, peer = self.server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if self.down or peer[0] in self.blocked:
                conn.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                conn.close()
                continue
            for a, b in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            source.settimeout(None)
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()

    def close(self) -> None:
        self.stop.set()
        self.server.close()
        self.thread.join(5)


class NetLab:
    """A bridge on the host and one namespace per agent, all removed by ``close`` (also after a failure)."""

    def __init__(self, count: int) -> None:
        tag = secrets.token_hex(2)
        self.subnet = f"198.18.{int(tag, 16) % 250 + 1}"
        self.bridge = f"nab{tag}"
        self.host = f"{self.subnet}.1"
        self.namespaces = [f"nodeops-agent-{tag}-{i}" for i in range(count)]
        self.addresses = [f"{self.subnet}.{10 + i}" for i in range(count)]
        self.links: list[str] = []
        try:
            ip("link", "add", self.bridge, "type", "bridge")
            ip("addr", "add", f"{self.host}/24", "dev", self.bridge)
            ip("link", "set", self.bridge, "up")
            for index, (ns, address) in enumerate(zip(self.namespaces, self.addresses, strict=True)):
                ip("netns", "add", ns)
                host_end = f"na{tag}h{index}"
                self.links.append(host_end)
                ip("link", "add", host_end, "type", "veth", "peer", "name", "eth0", "netns", ns)
                ip("link", "set", host_end, "master", self.bridge, "up")
                ip("-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
                ip("-n", ns, "link", "set", "eth0", "up")
                ip("-n", ns, "link", "set", "lo", "up")
        except BaseException:
            self.close()
            raise

    def prefix(self, index: int) -> list[str]:
        return ["ip", "netns", "exec", self.namespaces[index]]

    def isolate(self, index: int) -> None:
        ip("-n", self.namespaces[index], "link", "set", "eth0", "down")

    def close(self) -> None:
        for ns in self.namespaces:
            ip("netns", "del", ns, check=False)
        for link in self.links:
            ip("link", "del", link, check=False)
        ip("link", "del", self.bridge, check=False)


def netns_available() -> str | None:
    if os.geteuid() != 0:
        return "network namespaces need root"
    probe = f"nodeops-probe-{secrets.token_hex(2)}"
    result = ip("netns", "add", probe, check=False)
    ip("netns", "del", probe, check=False)
    return None if result.returncode == 0 else f"ip netns add failed: {result.stderr.strip()}"


def agent_token(api: client.ApiClient, namespace: str) -> str:
    """A token of a ServiceAccount allowed only to get nodes and to read SelfNodeRemediations."""
    # bodies as dicts (the client accepts them; its stubs want models)
    core: Any = client.CoreV1Api(api)
    rbac: Any = client.RbacAuthorizationV1Api(api)
    name = f"node-agent-{namespace}"
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "node-agent"}})
    rbac.create_cluster_role(
        {
            "metadata": {"name": name},
            "rules": [
                {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
                {"apiGroups": [SNR[0]], "resources": [SNR[2]], "verbs": ["get", "list"]},
            ],
        }
    )
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": "node-agent", "namespace": namespace}],
        }
    )
    request = core.create_namespaced_service_account_token(
        "node-agent", namespace, {"spec": {"expirationSeconds": 3600}}
    )
    return str(request.status.token)


@pytest.fixture(scope="module")
def remediation_crds(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> None:
    run_role(cluster, tmp_path_factory.mktemp("agent-crds"), {})


@pytest.fixture
def lab(
    cluster: Any, api: client.ApiClient, namespace: str, remediation_crds: None, tmp_path: Path
) -> Iterator[dict[str, Any]]:
    reason = netns_available()
    if reason:
        pytest.fail(f"the node agent integration test needs network namespaces: {reason}")
    nodes = kwok.add_nodes(api, AGENTS, prefix="agent", labels={"node-role.kubernetes.io/worker": ""})
    net = NetLab(AGENTS)
    rbac = client.RbacAuthorizationV1Api(api)
    agents: list[AgentProcess] = []
    forwarder = None
    try:
        api_host, api_port = cluster.server.removeprefix("https://").rsplit(":", 1)
        forwarder = Forwarder((net.host, 0), (api_host, int(api_port)))
        port = forwarder.server.getsockname()[1]
        token_file = tmp_path / "token"
        token_file.write_text(agent_token(api, namespace))
        settings = {
            "apiServer": f"https://{net.host}:{port}",
            "apiServerName": api_host,
            "caFile": str(cluster.ca_file),
            "tokenFile": str(token_file),
        }
        ca = issue("nodeops-peer-ca")
        ca_file = ca.write(tmp_path / "pki", "ca")[0]
        peers = [{"name": n, "address": a} for n, a in zip(nodes, net.addresses, strict=True)]
        for index, name in enumerate(nodes):
            agent = AgentProcess.prepare(
                name,
                tmp_path / name,
                ca,
                ca_file,
                settings,
                peers,
                ips=[net.addresses[index]],
                overrides={"hostPort": PEER_PORT},
                prefix=net.prefix(index),
            )
            agents.append(agent)
        for agent in agents:
            agent.start()
        yield {"agents": agents, "net": net, "forwarder": forwarder, "nodes": nodes, "namespace": namespace}
    finally:
        for agent in agents:
            agent.stop()
        if forwarder:
            forwarder.close()
        net.close()
        kwok.delete_nodes(api, nodes, wait=False)
        for delete in (rbac.delete_cluster_role_binding, rbac.delete_cluster_role):
            with contextlib.suppress(client.ApiException):
                delete(f"node-agent-{namespace}")


def status(agent: AgentProcess) -> dict[str, Any]:
    result = agent.status()
    assert result is not None
    return result


def wait_checks(agents: list[AgentProcess], more: int, timeout: float = 90) -> None:
    """Until every agent has done ``more`` further API checks."""
    targets = {agent.name: status(agent)["checks"] + more for agent in agents}
    wait_for(lambda: all(status(a)["checks"] >= targets[a.name] for a in agents), timeout, f"{more} more API checks")


def test_agents_in_network_namespaces(lab: dict[str, Any], api: client.ApiClient) -> None:
    agents: list[AgentProcess] = lab["agents"]
    forwarder: Forwarder = lab["forwarder"]
    net: NetLab = lab["net"]
    objects = client.CustomObjectsApi(api)
    report: list[str] = []

    # 1. steady state: every agent reaches the API, feeds its watchdog, nobody fences
    wait_for(lambda: all(status(a)["state"] == "healthy" for a in agents), 90, "all agents healthy")
    fed = {a.name: a.fed_bytes() for a in agents}
    wait_checks(agents, 3)
    for agent in agents:
        assert agent.fed_bytes() > fed[agent.name], agent.log_tail()
        assert not status(agent)["fenced"] and agent.reboots() == []
    # the agents learned from the API that they are workers (least-privilege token: get nodes)
    assert all(status(a)["control_plane"] is False for a in agents)
    assert all(status(a)["peers"] == AGENTS - 1 for a in agents)

    # 2. agent 0 loses only the API; its peers answer "healthy" → no fence
    lost = agents[0]
    forwarder.blocked.add(net.addresses[0])
    wait_for(lambda: status(lost)["verdicts"].get("PeerReportsHealthy", 0) >= 2, 90, "two healthy answers from peers")
    assert not status(lost)["fenced"], lost.log_tail()
    forwarder.blocked.clear()
    wait_for(lambda: status(lost)["api_errors"] == 0 and status(lost)["state"] == "healthy", 90, "API back")

    # 3. the API is down for everybody: peers answer "API error" → control-plane outage, nobody fences before
    # the isolation limit (an outage that outlasts it is in tests/unit/test_node_agent.py)
    forwarder.down = True
    wait_for(
        lambda: all(status(a)["verdicts"].get("ApiServerOutage", 0) >= 1 for a in agents),
        60,
        "an outage verdict on every agent",
    )
    forwarder.down = False
    assert not any(status(a)["fenced"] for a in agents), [a.log_tail() for a in agents]
    wait_for(lambda: all(status(a)["state"] == "healthy" for a in agents), 90, "all agents healthy again")

    # 4. a SelfNodeRemediation for agent 1's node → that node fences, the others do not
    target = agents[1]
    objects.create_namespaced_custom_object(
        *SNR[:2],
        lab["namespace"],
        SNR[2],
        {
            "apiVersion": f"{SNR[0]}/{SNR[1]}",
            "kind": "SelfNodeRemediation",
            "metadata": {"name": target.name},
            "spec": {},
        },
    )
    created = time.monotonic()
    wait_for(lambda: status(target)["fenced"], 90, "the remediated node fencing")
    report.append(f"remediation object → fenced in {time.monotonic() - created:.1f}s")
    stopped_at = target.fed_bytes()
    wait_for(target.reboots, FAST["watchdogTimeoutSeconds"] + 20, "the software reboot after the watchdog timeout")
    assert target.fed_bytes() == stopped_at
    assert "SelfNodeRemediation" in status(target)["fence_reason"]
    # peers now answer "unhealthy" to it, and "healthy" to the others
    assert not any(status(a)["fenced"] for a in agents if a is not target)

    # 5. agent 3 is cut off from everything → it fences within the safe time
    isolated = agents[3]
    spec = {
        k: FAST[k]
        for k in (
            "apiServerTimeout",
            "apiCheckInterval",
            "maxApiErrorThreshold",
            "peerDialTimeout",
            "peerRequestTimeout",
        )
    }
    promise = safe_time(spec, AGENTS, FAST["watchdogTimeoutSeconds"])
    net.isolate(3)
    cut = time.monotonic()
    last_size = isolated.fed_bytes()
    last_feed = cut

    def fenced() -> bool:
        nonlocal last_size, last_feed
        size = isolated.fed_bytes()
        if size != last_size:
            last_size, last_feed = size, time.monotonic()
        return bool(status(isolated)["fenced"])

    wait_for(fenced, promise.effective_seconds, "the isolated node fencing", interval=0.05)
    decided = time.monotonic() - cut
    # the hardware would reset the node a watchdog timeout after the last feed
    reset_by = last_feed - cut + FAST["watchdogTimeoutSeconds"]
    # isolated (no answer for 30 s) or the isolation limit, whichever came first
    assert status(isolated)["fence_cause"] in ("Isolated", "IsolationLimit"), status(isolated)
    assert reset_by <= promise.effective_seconds, (reset_by, promise.as_dict())
    report.append(
        f"isolated → decided in {decided:.1f}s, watchdog reset by {reset_by:.1f}s,"
        f" safe time {promise.effective_seconds}s"
    )
    wait_for(isolated.reboots, FAST["watchdogTimeoutSeconds"] + 20, "the isolated node's software reboot")
    assert isolated.reboots() and agents[2].reboots() == [] and agents[0].reboots() == []
    assert not status(agents[0])["fenced"] and not status(agents[2])["fenced"]
    for agent in agents:
        assert agent.alive(), agent.log_tail()
    print("\n".join(report))


class Flood:
    """Holds as many connections as it can to each agent's peer port from a stranger's address, opening
    a new one whenever one is closed; bounded in connections and stopped by ``close``."""

    def __init__(self, source: str, targets: list[tuple[str, int]], per_target: int = 40, limit: int = 50_000) -> None:
        self.source = source
        self.stop = threading.Event()
        self.opened = 0
        self.limit = limit
        self.threads = [
            threading.Thread(target=self._hold, args=(target,), daemon=True)
            for target in targets
            for _index in range(per_target)
        ]
        for thread in self.threads:
            thread.start()

    def _hold(self, target: tuple[str, int]) -> None:
        while not self.stop.is_set() and self.opened < self.limit:
            self.opened += 1
            try:
                with socket.create_connection(target, timeout=5, source_address=(self.source, 0)) as sock:
                    sock.settimeout(1.0)
                    while not self.stop.is_set():
                        try:
                            if sock.recv(1) == b"":
                                break
                        except TimeoutError:
                            continue
            except OSError:
                self.stop.wait(0.05)

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(10)


def test_strangers_holding_connections_during_an_api_outage_fence_nobody(lab: dict[str, Any]) -> None:
    agents: list[AgentProcess] = lab["agents"]
    forwarder: Forwarder = lab["forwarder"]
    net: NetLab = lab["net"]
    wait_for(lambda: all(status(a)["state"] == "healthy" for a in agents), 60, "all agents healthy")
    # the host's bridge address is no peer's: it opens and holds connections to every agent's peer port
    flood = Flood(net.host, [(address, PEER_PORT) for address in net.addresses])
    try:
        wait_for(
            lambda: all(status(a)["peer_connections_from_strangers"] >= 100 for a in agents), 60, "the flood arriving"
        )
        forwarder.down = True
        wait_for(
            lambda: all(status(a)["verdicts"].get("ApiServerOutage", 0) >= 1 for a in agents),
            120,
            "an outage verdict on every agent, under the flood",
        )
    finally:
        forwarder.down = False  # before the isolation limit
        flood.close()
    # every agent still heard its peers ("API error"), so nobody decided it was isolated
    for agent in agents:
        assert not status(agent)["fenced"] and agent.reboots() == [], agent.log_tail()
        assert "Isolated" not in status(agent)["verdicts"]
        assert status(agent)["peer_connections_refused"] == 0  # not one TLS handshake for a stranger
