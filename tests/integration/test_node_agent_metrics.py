"""The node agent's metrics scraped by a real Prometheus, with the agents against the real API server.

Two agents on loopback, peers of each other, with a least-privilege token; Prometheus (Debian's package) scrapes
both every second and loads the example alerting rules of docs/prometheus/nodeops-alerts.yml. The test waits in
Prometheus for both agents healthy and feeding their watchdogs, then creates a SelfNodeRemediation for one node
and waits for its fence in the metrics and for the fence alert. promtool, from the same package, lints what the
agent serves.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster import kwok
from cluster.debian_tools import binary
from integration.test_crds import run_role
from integration.test_node_agent import SNR, agent_token
from kubernetes import client
from support.node_agent import AgentProcess, free_port, issue, wait_for
from support.prometheus import Prometheus

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "docs/prometheus/nodeops-alerts.yml"


@pytest.fixture
def agents(
    cluster: Any, api: client.ApiClient, namespace: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[AgentProcess]]:
    run_role(cluster, tmp_path_factory.mktemp("metrics-crds"), {})
    nodes = kwok.add_nodes(api, 2, prefix="metrics", labels={"node-role.kubernetes.io/worker": ""})
    started: list[AgentProcess] = []
    rbac = client.RbacAuthorizationV1Api(api)
    try:
        token_file = tmp_path / "token"
        token_file.write_text(agent_token(api, namespace))
        settings = {"apiServer": cluster.server, "caFile": str(cluster.ca_file), "tokenFile": str(token_file)}
        ca = issue("nodeops-peer-ca")
        ca_file = ca.write(tmp_path / "pki", "ca")[0]
        ports = [free_port() for _node in nodes]
        peers = [{"name": n, "address": "127.0.0.1", "port": p} for n, p in zip(nodes, ports, strict=True)]
        for name, port in zip(nodes, ports, strict=True):
            agent = AgentProcess.prepare(
                name,
                tmp_path / name,
                ca,
                ca_file,
                settings,
                peers,
                overrides={"hostPort": port, "listenAddress": "127.0.0.1", "remediationNamespace": namespace},
            )
            started.append(agent.start())
        yield started
    finally:
        for agent in started:
            agent.stop()
        kwok.delete_nodes(api, nodes, wait=False)
        for delete in (rbac.delete_cluster_role_binding, rbac.delete_cluster_role):
            with contextlib.suppress(client.ApiException):
                delete(f"node-agent-{namespace}")


def test_prometheus_scrapes_the_agents_and_sees_a_fence(
    agents: list[AgentProcess], api: client.ApiClient, namespace: str, tmp_path: Path
) -> None:
    targets = [agent.metrics_url.removeprefix("http://").removesuffix("/metrics") for agent in agents]
    rules = yaml.safe_load(ALERTS.read_text())["groups"]
    with Prometheus(
        tmp_path / "prometheus",
        scrape_configs=[{"job_name": "nodeops-agent", "static_configs": [{"targets": targets}]}],
        rules=rules,
    ) as prom:
        prom.wait_for('count(nodeops_agent_state{job="nodeops-agent",state="healthy"} == 1) == 2')
        prom.wait_for("count(increase(nodeops_agent_watchdog_feeds_total[10s]) > 0) == 2")
        prom.wait_for("sum(nodeops_agent_peers{role='worker'}) == 2")
        # every rule of the example file loaded and evaluates
        groups = prom.api("rules")["groups"]
        loaded = [rule for group in groups for rule in group["rules"]]
        assert len(loaded) == sum(len(group["rules"]) for group in rules)
        wait_for(
            lambda: all(r.get("health") == "ok" for g in prom.api("rules")["groups"] for r in g["rules"]),
            60,
            "every rule evaluated",
        )

        target = agents[1]
        client.CustomObjectsApi(api).create_namespaced_custom_object(
            *SNR[:2],
            namespace,
            SNR[2],
            {
                "apiVersion": f"{SNR[0]}/{SNR[1]}",
                "kind": "SelfNodeRemediation",
                "metadata": {"name": target.name},
                "spec": {},
            },
        )
        fenced = prom.wait_for('nodeops_agent_fence_info{cause="remediation"} == 1', 90)
        assert [sample["metric"]["instance"] for sample in fenced] == [targets[1]]
        prom.wait_for(f'nodeops_agent_state{{instance="{targets[1]}",state="fenced"}} == 1')
        prom.wait_for(f'nodeops_agent_state{{instance="{targets[0]}",state="healthy"}} == 1')
        wait_for(
            lambda: any(a["labels"].get("alertname") == "NodeopsAgentFenced" for a in prom.alerts()),
            60,
            "the NodeopsAgentFenced alert",
        )

    # Prometheus' own linter on what the agent serves (names, HELP, TYPE, counters' _total)
    lint = subprocess.run(
        [str(binary("prometheus").parent / "promtool"), "check", "metrics"],
        input=agents[0].metrics(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr
