"""metrics_push through the ``ansible`` command into a real Pushgateway that a real Prometheus scrapes (both from
Debian's packages), and into a node-exporter textfile.

The figures come from real module runs that need no cluster: node_health's offline pass and a rolling_maintenance
summary-shaped result; the dashboard's queries are checked against them in Prometheus.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from support.ansible_cli import run_module
from support.exposition import parse, value
from support.prometheus import Prometheus, Pushgateway

pytestmark = pytest.mark.integration

NOW = "2026-01-02T03:10:00Z"
SPEC = {
    "selector": {"matchLabels": {"pool": "gpu"}},
    "unhealthyConditions": [{"type": "Ready", "status": "Unknown", "duration": "60s"}],
    "minHealthy": "50%",
    "remediationTemplate": {
        "apiVersion": "self-node-remediation.medik8s.io/v1alpha1",
        "kind": "SelfNodeRemediationTemplate",
        "namespace": "ops",
        "name": "snr",
    },
}


def node(name: str, status: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"pool": "gpu"}},
        "status": {"conditions": [{"type": "Ready", "status": status, "lastTransitionTime": "2026-01-02T03:00:00Z"}]},
    }


SUMMARY = {
    "run_id": "CHG/42",
    "counts": {"pending": 1, "maintaining": 0, "done": 2, "failed": 1, "interrupted": 0},
    "waves": 2,
    "failed_percentage": 25.0,
    "complete": False,
    "nodes": [
        {"node": "a", "wave": 1, "outcome": "done", "drained": 2.0, "maintained": 30.0, "back": 5.0},
        {"node": "b", "wave": 1, "outcome": "failed", "drained": 3.0, "maintained": 10.0, "back": None},
        {"node": "c", "wave": 2, "outcome": "done", "drained": 1.0, "maintained": 12.5, "back": 4.0},
        {"node": "d", "wave": None, "outcome": "pending", "drained": None, "maintained": None, "back": None},
    ],
}


def test_pushes_reach_prometheus_through_the_pushgateway(tmp_path: Path) -> None:
    health = run_module("node_health", {"spec": SPEC, "nodes": [node("a", "True"), node("b", "Unknown")], "now": NOW})
    assert not health.failed, health.result
    with Pushgateway(tmp_path / "gateway") as gateway:
        address = gateway.url.removeprefix("http://")
        scrape = [{"job_name": "pushgateway", "honor_labels": True, "static_configs": [{"targets": [address]}]}]
        with Prometheus(tmp_path / "prometheus", scrape_configs=scrape) as prom:
            # check mode renders and checks, and sends nothing
            dry = run_module(
                "metrics_push",
                {"source": "node_health", "result": health.result, "nhc": "gpu", "pushgateway_url": gateway.url},
                check=True,
            )
            assert not dry.failed and dry.result["changed"], dry.result
            assert "nodeops_nhc_healthy_nodes" not in gateway.metrics()

            pushed = run_module(
                "metrics_push",
                {"source": "node_health", "result": health.result, "nhc": "gpu", "pushgateway_url": gateway.url},
            )
            assert not pushed.failed and pushed.result["changed"], pushed.result
            assert pushed.result["url"] == f"{gateway.url}/metrics/job/nodeops/nhc/gpu"
            rolled = run_module(
                "metrics_push",
                {"source": "rolling_maintenance", "result": SUMMARY, "pushgateway_url": gateway.url},
            )
            assert not rolled.failed, rolled.result
            assert rolled.result["url"].endswith("/metrics/job/nodeops/run_id@base64/Q0hHLzQy")

            prom.wait_for('nodeops_nhc_healthy_nodes{nhc="gpu",job="nodeops"} == 1')
            prom.wait_for('nodeops_nhc_min_healthy_met{nhc="gpu"} == 1')
            prom.wait_for('nodeops_nhc_node_unhealthy_seconds{nhc="gpu",node="b"} == 600')
            prom.wait_for('nodeops_rolling_nodes{run_id="CHG/42",state="failed"} == 1')
            prom.wait_for('nodeops_rolling_wave_duration_seconds{run_id="CHG/42",wave="1"} == 37')

            # a push that the gateway refuses (a name taken with another type) fails the task, and says so
            clash = run_module(
                "metrics_push",
                {
                    "metrics": [{"name": "nodeops_nhc_healthy_nodes_x_total", "value": 1}],
                    "pushgateway_url": gateway.url,
                    "job": "nodeops",
                    "grouping": {"nhc": "gpu"},
                    "method": "post",
                },
            )
            assert not clash.failed, clash.result  # a new name is fine
            bad = run_module(
                "metrics_push",
                {"metrics": [{"name": "1bad", "value": 1}], "pushgateway_url": gateway.url},
            )
            assert bad.failed and "metric name '1bad'" in bad.result["msg"]
            unreachable = run_module(
                "metrics_push",
                {"metrics": [{"name": "x", "value": 1}], "pushgateway_url": "http://127.0.0.1:9", "request_timeout": 5},
            )
            assert (
                unreachable.failed and "pushing to http://127.0.0.1:9/metrics/job/nodeops" in unreachable.result["msg"]
            )


def test_textfile_is_written_atomically_once_and_not_in_check_mode(tmp_path: Path) -> None:
    path = tmp_path / "nodeops.prom"
    args = {"source": "rolling_maintenance", "result": {**SUMMARY, "run_id": "r1"}, "textfile": str(path)}
    dry = run_module("metrics_push", args, check=True, diff=True)
    assert not dry.failed and dry.result["changed"] and not path.exists(), dry.result
    first = run_module("metrics_push", args)
    assert not first.failed and first.result["changed"], first.result
    families = parse(path.read_text())
    assert value(families, "nodeops_rolling_waves", run_id="r1") == 2
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    assert [p.name for p in tmp_path.iterdir()] == ["nodeops.prom"]  # no temporary file left
    # figures without a timestamp: the same text a second time changes nothing
    own = {
        "metrics": [{"name": "nodeops_rolling_waves", "value": 3, "labels": {"run_id": "r1"}}],
        "textfile": str(path),
    }
    assert run_module("metrics_push", own).result["changed"]
    second = run_module("metrics_push", own, diff=True)
    assert not second.failed and second.result["changed"] is False, second.result
    wrong = run_module("metrics_push", {**args, "textfile": str(tmp_path / "nodeops.txt")})
    assert wrong.failed and "must end in .prom" in wrong.result["msg"]
    missing = run_module("metrics_push", {**args, "textfile": str(tmp_path / "no" / "x.prom")})
    assert missing.failed and "does not exist" in missing.result["msg"]
    assert os.listdir(tmp_path) == ["nodeops.prom"]
