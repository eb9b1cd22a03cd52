"""The node_agent role through playbooks/deploy_agent.yml, against the real test cluster.

This machine runs no systemd (and no container engine or systemd-nspawn to boot one), so the two hosts are
local directories (``node_agent_manage_service: false``): the role creates the ServiceAccount and its
token, the peer PKI with community.crypto, installs the agent, its core files, certificates and checked
configuration; a second run changes nothing. The test then starts the installed agents the way the unit
would and checks them: healthy with the least-privilege token, peers answer only a client certificate of
the role's CA.
"""

from __future__ import annotations

import json
import re
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster import kwok
from integration.test_crds import run_role
from kubernetes import client
from support.ansible_cli import BIN, clean_env
from support.node_agent import (
    ROOT,
    AgentProcess,
    ask_peer,
    assert_own_paths_and_ports,
    issue,
    peer_client_context,
    wait_for,
)

pytestmark = pytest.mark.integration

PLAYBOOK = ROOT / "playbooks/deploy_agent.yml"
RECAP = re.compile(r"^(\S+)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.MULTILINE)


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_deploy(
    cluster: Any, inventory: Path, extra: dict[str, Any], *options: str
) -> tuple[subprocess.CompletedProcess[str], dict[str, tuple[int, ...]]]:
    cmd = [str(BIN / "ansible-playbook"), "-i", str(inventory), str(PLAYBOOK), "-e", json.dumps(extra), *options]
    env = clean_env(
        {"ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.default", "K8S_AUTH_KUBECONFIG": str(cluster.kubeconfig)}
    )
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, check=False)
    recap = {m.group(1): tuple(int(g) for g in m.groups()[1:]) for m in RECAP.finditer(proc.stdout)}
    return proc, recap


def changed_tasks(output: str) -> list[str]:
    """``TASK name: host`` for every task the default callback reported changed in ``output``."""
    changed, task = [], ""
    for line in output.splitlines():
        if line.startswith("TASK ["):
            task = line[len("TASK [") :].split("]")[0]
        elif line.startswith("changed: ["):
            changed.append(f"{task}: {line[len('changed: [') :].split(']')[0]}")
    return changed


def deploy(cluster: Any, inventory: Path, extra: dict[str, Any], *options: str) -> dict[str, tuple[int, ...]]:
    proc, recap = run_deploy(cluster, inventory, extra, *options)
    assert proc.returncode == 0 and recap, f"rc={proc.returncode}\n{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}"
    return recap


def deploy_again_unchanged(cluster: Any, inventory: Path, extra: dict[str, Any]) -> None:
    """The same deployment again changes nothing; a failure names each task that changed."""
    proc, recap = run_deploy(cluster, inventory, extra)
    assert proc.returncode == 0 and recap, f"rc={proc.returncode}\n{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}"
    assert all(counts[1] == 0 and counts[3] == 0 for counts in recap.values()), (recap, changed_tasks(proc.stdout))


@pytest.fixture
def deployed(cluster: Any, api: client.ApiClient, namespace: str, tmp_path: Path) -> Iterator[dict[str, Any]]:
    run_role(cluster, tmp_path, {})  # the SelfNodeRemediation CRDs
    nodes = kwok.add_nodes(api, 2, prefix="role-agent", labels={"node-role.kubernetes.io/worker": ""})
    hosts: dict[str, Any] = {}
    for name in nodes:
        base = tmp_path / name
        (base).mkdir()
        (base / "watchdog").write_bytes(b"")
        hosts[name] = {
            "ansible_connection": "local",
            "ansible_python_interpreter": sys.executable,
            "node_agent_address": "127.0.0.1",
            "node_agent_python": sys.executable,
            "node_agent_install_dir": str(base / "opt"),
            "node_agent_config_dir": str(base / "etc"),
            "node_agent_status_file": str(base / "run/status.json"),
            "node_agent_reboot_command": ["true"],
            "node_agent_watchdog_timeout_seconds": 3,
            "node_agent_metrics_port": free_port(),
            "node_agent_settings": {
                "hostPort": free_port(),
                "listenAddress": "127.0.0.1",
                "apiCheckInterval": "1s",
                "watchdogFilePath": str(base / "watchdog"),
                "sysrqTriggerPath": str(base / "sysrq"),
                "softdogModule": False,
            },
        }
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    extra = {
        "node_agent_hosts": "all",
        "node_agent_become": False,
        "node_agent_health_check": False,
        "node_agent_manage_service": False,
        "node_agent_api_server": cluster.server,
        "node_agent_api_ca_file": str(cluster.ca_file),
        "node_agent_credential_namespace": namespace,
        "node_agent_pki_dir": str(tmp_path / "pki"),
    }
    agents: list[AgentProcess] = []
    extra_nodes: list[str] = []
    rbac = client.RbacAuthorizationV1Api(api)
    try:
        yield {
            "extra_nodes": extra_nodes,
            "api": api,
            "cluster": cluster,
            "inventory": inventory,
            "extra": extra,
            "hosts": hosts,
            "agents": agents,
            "pki": tmp_path / "pki",
            "tmp": tmp_path,
        }
    finally:
        for agent in agents:
            agent.stop()
        kwok.delete_nodes(api, [*nodes, *extra_nodes], wait=False)
        admission = client.AdmissionregistrationV1Api(api)
        deletes = [
            (delete, f"nodeops-node-agent:{node}")
            for node in [*nodes, *extra_nodes, "127.0.0.21", "127.0.0.22"]
            for delete in (rbac.delete_cluster_role_binding, rbac.delete_cluster_role)
        ]
        deletes += [
            (admission.delete_validating_admission_policy_binding, "nodeops-node-agent"),
            (admission.delete_validating_admission_policy, "nodeops-node-agent"),
        ]
        for delete, name in deletes:
            try:
                delete(name)
            except client.ApiException as err:
                if err.status != 404:
                    raise


def test_role_installs_agents_that_run_and_refuse_strangers(deployed: dict[str, Any]) -> None:
    cluster, inventory, extra = deployed["cluster"], deployed["inventory"], deployed["extra"]
    first = deploy(cluster, inventory, extra)
    assert all(counts[1] > 0 and counts[3] == 0 for counts in first.values()), first
    deploy_again_unchanged(cluster, inventory, extra)

    names = sorted(deployed["hosts"])
    pki: Path = deployed["pki"]
    for name in names:
        host = deployed["hosts"][name]
        etc = Path(host["node_agent_config_dir"])
        assert (etc / "token").stat().st_mode & 0o777 == 0o600
        assert (etc / "peer.key").stat().st_mode & 0o777 == 0o600
        assert {p["name"] for p in json.loads((etc / "peers.json").read_text())} == set(names)
        # the installed agent runs from its own directory (core files as nodeops_core), as the unit starts it
        agent = AgentProcess(name, deployed["tmp"] / name, json.loads((etc / "config.json").read_text()))
        agent.directory = etc.parent
        command = [sys.executable, str(Path(host["node_agent_install_dir"]) / "nodeops_node_agent.py")]
        check = subprocess.run(
            [*command, "--check-config", "--config", str(etc / "config.json")],
            capture_output=True,
            text=True,
            check=False,
        )
        assert check.returncode == 0, check.stderr
        assert_own_paths_and_ports(agent.config, etc.parent)
        log = (etc.parent / "agent.log").open("ab")
        agent.process = subprocess.Popen(
            [*command, "--config", str(etc / "config.json")], stdout=log, stderr=subprocess.STDOUT
        )
        deployed["agents"].append(agent)

    status_files = [Path(deployed["hosts"][n]["node_agent_status_file"]) for n in names]

    def healthy() -> bool:
        try:
            return all(json.loads(p.read_text())["state"] == "healthy" for p in status_files)
        except (OSError, ValueError):
            return False

    wait_for(healthy, 30, "both installed agents healthy")

    port = deployed["hosts"][names[0]]["node_agent_settings"]["hostPort"]
    ca = pki / "ca.crt"
    valid = peer_client_context(ca, pki / f"{names[1]}.crt", pki / f"{names[1]}.key")
    # a peer of the role's CA gets an answer read with the least-privilege token (1 = Healthy, not 3 = ApiError)
    assert ask_peer("127.0.0.1", port, names[0], valid) == (200, {"status": 1})
    for context in (
        peer_client_context(ca, None, None),
        peer_client_context(ca, *issue("stranger", issue("other-ca")).write(deployed["tmp"], "stranger")),
    ):
        with pytest.raises((ssl.SSLError, OSError)):
            ask_peer("127.0.0.1", port, names[0], context)

    # each agent published on its own Node that it can fence it, with its watchdog's timeout (3 s, configured)
    core = client.CoreV1Api(deployed["api"])

    def published(name: str) -> dict[str, str] | None:
        annotations = core.read_node(name).metadata.annotations or {}
        wanted = {key: annotations.get(key) for key in (CAPABLE, TIMEOUT)}
        return wanted if wanted == {CAPABLE: "true", TIMEOUT: "3"} else None

    for name in names:
        wait_for(partial(published, name), 60, f"the annotations of {name}")

    # the token can do nothing else: listing pods is forbidden
    token = (Path(deployed["hosts"][names[0]]["node_agent_config_dir"]) / "token").read_text().strip()
    assert call(cluster, token, "GET", "/api/v1/pods") == 403
    # nor read another node, nor annotate it; on its own Node only the two annotations may change
    other, own = f"/api/v1/nodes/{names[1]}", f"/api/v1/nodes/{names[0]}"
    assert call(cluster, token, "GET", other) == 403
    assert call(cluster, token, "PATCH", other, {"metadata": {"annotations": {CAPABLE: "false"}}}) == 403
    for change in (
        {"metadata": {"labels": {"node-role.kubernetes.io/control-plane": ""}}},
        {"metadata": {"annotations": {"example.com/other": "x"}}},
        {"spec": {"unschedulable": True}},
        {"spec": {"taints": [{"key": "x", "effect": "NoSchedule"}]}},
        {"metadata": {"finalizers": ["example.com/keep"]}},
    ):
        assert call(cluster, token, "PATCH", own, change) == 403, change
    node = core.read_node(names[0])
    assert (
        not node.spec.unschedulable
        and not node.spec.taints
        and "node-role.kubernetes.io/control-plane" not in (node.metadata.labels or {})
    )
    assert call(cluster, token, "PATCH", own, {"metadata": {"annotations": {TIMEOUT: "4"}}}) == 200
    assert call(cluster, token, "DELETE", own) == 403


CAPABLE = "is-reboot-capable.self-node-remediation.medik8s.io"
TIMEOUT = "self-node-remediation.medik8s.io/watchdog-timeout"


def call(cluster: Any, token: str, method: str, path: str, body: dict[str, Any] | None = None) -> int:
    """The HTTP status of one request to the API server with ``token``."""
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/merge-patch+json"}
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"{cluster.server}{path}", data=data, headers=headers, method=method)
    context = ssl.create_default_context(cafile=str(cluster.ca_file))
    try:
        with urllib.request.urlopen(request, context=context, timeout=30) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as err:
        return int(err.code)


def test_agents_named_by_ip_address_verify_each_other(deployed: dict[str, Any]) -> None:
    """Nodes named by their IP address get an IP entry in their certificate, so peers can check it."""
    cluster, extra, tmp = deployed["cluster"], deployed["extra"], deployed["tmp"]
    hosts: dict[str, Any] = {}
    for index, template in enumerate(deployed["hosts"].values()):
        address = f"127.0.0.{21 + index}"
        base = tmp / address
        hosts[address] = {
            **template,
            "node_agent_address": address,
            "node_agent_install_dir": str(base / "opt"),
            "node_agent_config_dir": str(base / "etc"),
            "node_agent_status_file": str(base / "run/status.json"),
            "node_agent_settings": {**template["node_agent_settings"], "listenAddress": address},
            "node_agent_metrics_port": free_port(),
        }
    inventory = tmp / "inventory-ip.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    deploy(cluster, inventory, extra)
    names = sorted(hosts)
    for name in names:
        etc = Path(hosts[name]["node_agent_config_dir"])
        agent = AgentProcess(name, etc.parent, json.loads((etc / "config.json").read_text()))
        command = [sys.executable, str(Path(hosts[name]["node_agent_install_dir"]) / "nodeops_node_agent.py")]
        assert_own_paths_and_ports(agent.config, etc.parent)
        with (etc.parent / "agent.log").open("ab") as log:
            agent.process = subprocess.Popen(
                [*command, "--config", str(etc / "config.json")], stdout=log, stderr=subprocess.STDOUT
            )
        deployed["agents"].append(agent)
    pki: Path = deployed["pki"]
    for asker, asked in ((names[0], names[1]), (names[1], names[0])):
        # the agent checks the peer's certificate against the peer's name, here an IP address
        context = peer_client_context(pki / "ca.crt", pki / f"{asker}.crt", pki / f"{asker}.key")
        port = hosts[asked]["node_agent_settings"]["hostPort"]
        answer = wait_for(partial(answered, asker, asked, port, context), 60, f"{asked} answering {asker}")
        assert answer == (200, {"status": 1})


def answered(asker: str, asked: str, port: int, context: ssl.SSLContext) -> tuple[int, Any] | None:
    """The answer of ``asked`` (its name is its address) to ``asker`` (from its own address)."""
    try:
        return ask_peer(asked, port, asked, context, source=asker)
    except ConnectionRefusedError:
        return None  # not listening yet


def test_a_second_peer_ca_is_refused_and_check_mode_works_on_a_new_controller(deployed: dict[str, Any]) -> None:
    cluster, inventory, extra, tmp = deployed["cluster"], deployed["inventory"], deployed["extra"], deployed["tmp"]
    # the settings without a default are checked before anything is done
    for wrong in (
        {"node_agent_api_server": ""},
        {"node_agent_api_server": "http://x:6443"},
        {"node_agent_api_ca_file": ""},
    ):
        proc, recap = run_deploy(cluster, inventory, {**extra, **wrong})
        assert proc.returncode != 0 and "Set node_agent_api_server to the API server's URL" in proc.stdout, proc.stdout
        assert all(counts[1] == 0 for counts in recap.values()), recap
    # check mode on a controller that has no CA yet: says what it would do, changes nothing
    fresh = {**extra, "node_agent_pki_dir": str(tmp / "fresh-pki")}
    proc, _recap = run_deploy(cluster, inventory, fresh, "--check")
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert "does not exist yet" in proc.stdout and not (tmp / "fresh-pki").exists()
    deploy(cluster, inventory, extra)
    trusted = {
        name: (Path(host["node_agent_config_dir"]) / "peer-ca.crt").read_bytes()
        for name, host in deployed["hosts"].items()
    }
    # a run with another PKI directory (another controller, a typo) would split the fleet: refused, nothing changed
    other = {**extra, "node_agent_pki_dir": str(tmp / "other-pki")}
    proc, _recap = run_deploy(cluster, inventory, other)
    assert proc.returncode != 0 and "node_agent_pki_replace_ca" in proc.stdout, proc.stdout[-4000:]
    assert not (tmp / "other-pki" / "ca.key").exists()
    for name, host in deployed["hosts"].items():
        assert (Path(host["node_agent_config_dir"]) / "peer-ca.crt").read_bytes() == trusted[name]
    # unless asked for
    deploy(cluster, inventory, {**other, "node_agent_pki_replace_ca": True})
    for name, host in deployed["hosts"].items():
        assert (Path(host["node_agent_config_dir"]) / "peer-ca.crt").read_bytes() != trusted[name]


def start_installed(deployed: dict[str, Any], name: str, host: dict[str, Any]) -> AgentProcess:
    """The agent the role installed on ``host``, started as its unit would start it."""
    etc = Path(host["node_agent_config_dir"])
    agent = AgentProcess(name, etc.parent, json.loads((etc / "config.json").read_text()))
    assert_own_paths_and_ports(agent.config, etc.parent)
    command = [sys.executable, str(Path(host["node_agent_install_dir"]) / "nodeops_node_agent.py")]
    with (etc.parent / "agent.log").open("ab") as log:
        agent.process = subprocess.Popen(
            [*command, "--config", str(etc / "config.json")], stdout=log, stderr=subprocess.STDOUT
        )
    deployed["agents"].append(agent)
    return agent


def test_a_node_added_with_limit_is_its_peers_peer_and_fences_in_time(deployed: dict[str, Any]) -> None:
    """A node deployed with --limit to it alone: the role lists the old nodes in its peer list and writes it on
    the old nodes too, whose agents read it without a restart. Cut off from the API with a remediation pending,
    the new node hears it from them (they no longer close it as a stranger) and fences within the isolation
    limit."""
    from integration.test_node_agent import Forwarder

    cluster, inventory, extra, tmp = deployed["cluster"], deployed["inventory"], deployed["extra"], deployed["tmp"]
    api = deployed["api"]
    deploy(cluster, inventory, extra)
    old = sorted(deployed["hosts"])
    old_agents = [start_installed(deployed, name, deployed["hosts"][name]) for name in old]
    for agent in old_agents:
        wait_for(lambda agent=agent: (s := agent.status()) and s["state"] == "healthy", 60, f"{agent.name} healthy")

    new = kwok.add_nodes(api, 1, prefix="role-agent-new", labels={"node-role.kubernetes.io/worker": ""})[0]
    deployed["extra_nodes"].append(new)
    template = deployed["hosts"][old[0]]
    base = tmp / new
    base.mkdir()
    (base / "watchdog").write_bytes(b"")
    address = "127.0.0.31"  # an address no old node's list has yet: a stranger to them until the role lists it
    host = {
        **template,
        "node_agent_address": address,
        "node_agent_install_dir": str(base / "opt"),
        "node_agent_config_dir": str(base / "etc"),
        "node_agent_status_file": str(base / "run/status.json"),
        "node_agent_metrics_port": free_port(),
        "node_agent_settings": {
            **template["node_agent_settings"],
            "hostPort": free_port(),
            "listenAddress": address,
            "watchdogFilePath": str(base / "watchdog"),
            "sysrqTriggerPath": str(base / "sysrq"),
        },
    }
    hosts = {**deployed["hosts"], new: host}
    grown = tmp / "inventory-grown.yml"
    grown.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    recap = deploy(cluster, grown, extra, "--limit", new)
    assert set(recap) == {new}, recap
    for name in [*old, new]:
        listed = json.loads((Path(hosts[name]["node_agent_config_dir"]) / "peers.json").read_text())
        assert {p["name"] for p in listed} == {*old, new}, (name, listed)
    # the old agents read their new list at their next check, without a restart
    for agent in old_agents:
        wait_for(lambda agent=agent: (agent.status() or {}).get("peers") == 2, 60, f"{agent.name} reading its new list")
        assert agent.alive()

    # the new node reaches the API through a forwarder the test can cut
    server_host, server_port = cluster.server.removeprefix("https://").rsplit(":", 1)
    forwarder = Forwarder(("127.0.0.1", 0), (server_host, int(server_port)))
    try:
        config_file = Path(host["node_agent_config_dir"]) / "config.json"
        config = json.loads(config_file.read_text())
        config.update(apiServer=f"https://127.0.0.1:{forwarder.server.getsockname()[1]}", apiServerName=server_host)
        config_file.write_text(json.dumps(config))
        node = start_installed(deployed, new, host)
        wait_for(lambda: (s := node.status()) and s["state"] == "healthy", 60, "the new agent healthy")
        assert (node.status() or {})["source_address"] == address
        forwarder.down = True
        client.CustomObjectsApi(api).create_namespaced_custom_object(
            "self-node-remediation.medik8s.io",
            "v1alpha1",
            extra["node_agent_credential_namespace"],
            "selfnoderemediations",
            {
                "apiVersion": "self-node-remediation.medik8s.io/v1alpha1",
                "kind": "SelfNodeRemediation",
                "metadata": {"name": new},
                "spec": {},
            },
        )
        status: dict[str, Any] = wait_for(
            lambda: (s := node.status()) and s["fenced"] and s, 120, "the new node fencing"
        )
        # its peers told it: they knew it
        assert status["fence_cause"] == "PeerReportsUnhealthy", status
        assert status["fenced_at"] - status["confirmed_at"] <= status["isolation_limit_seconds"], status
        wait_for(
            lambda: sum((a.status() or {}).get("peer_answers_served", 0) for a in old_agents) > 0,
            30,
            "the old agents' status showing the answers they served",
        )
        assert not any((a.status() or {})["fenced"] for a in old_agents)
    finally:
        forwarder.close()
