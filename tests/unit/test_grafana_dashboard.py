"""docs/grafana/nodeops.json: valid JSON of a Grafana dashboard whose every query names metrics the code exports,
with labels those metrics have. The exported names are taken from what the code renders (the figures of sample
module results, and the agent's catalogue that tests/unit/test_node_agent_metrics.py checks against a running agent),
not from a list kept here."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ansible_collections.nodeops.maintenance.plugins.module_utils.core.node.metrics import (
    AGENT,
    CATALOGUE,
    Exposition,
    node_health_figures,
    remediation_figures,
    rolling_figures,
)
from support.exposition import parse

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "docs/grafana/nodeops.json"
ALERTS = ROOT / "docs/prometheus/nodeops-alerts.yml"
# labels Prometheus adds to every scraped series, and the Pushgateway's grouping labels
ADDED_LABELS = {"instance", "job"}


def exported() -> dict[str, set[str]]:
    """Metric name -> its label names, from what the code renders for sample results and the agent's catalogue."""
    outputs: list[Exposition] = [
        node_health_figures(
            {
                "observed": 2,
                "healthy": 1,
                "min_healthy": 1,
                "min_healthy_met": True,
                "unhealthy_nodes": ["b"],
                "phase": "Remediating",
                "decisions": [{"node": "b", "unhealthy_seconds": 3.0}],
            },
            "x",
            0.0,
        ),
        remediation_figures(
            {
                "remediations": [
                    {
                        "node": "b",
                        "phase": "Fencing-Completed",
                        "strategy": "OutOfServiceTaint",
                        "seconds_to_safe_time": 1.0,
                    }
                ],
                "waiting": [],
            },
            0.0,
        ),
        rolling_figures(
            {
                "run_id": "r",
                "counts": {},
                "waves": 1,
                "failed_percentage": 0.0,
                "complete": True,
                "abort": False,
                "nodes": [{"node": "a", "wave": 1, "outcome": "done", "drained": 1.0, "maintained": 1.0, "back": 1.0}],
            },
            0.0,
        ),
    ]
    names: dict[str, set[str]] = {}
    for out in outputs:
        for name, family in parse(out.render()).items():
            names[name] = {label for key in family["samples"] for label, _value in key}
    for name, metric in AGENT.items():
        names[name] = set(metric.labels)
    return names


def queries(dashboard: dict[str, Any]) -> list[str]:
    found: list[str] = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            found.append(target["expr"])
    for variable in dashboard["templating"]["list"]:
        query = variable.get("query")
        if isinstance(query, dict):
            found.append(query["query"])
    return found


def references(expr: str) -> list[tuple[str, set[str]]]:
    """(metric, label names in its matcher) of each nodeops metric the expression names."""
    found = []
    for match in re.finditer(r"\b(nodeops_[a-z0-9_]+)(\{([^}]*)\})?", expr):
        labels = set(re.findall(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)", match.group(3) or ""))
        found.append((match.group(1), labels))
    return found


def test_the_dashboard_is_valid_json_of_a_grafana_dashboard() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] and dashboard["title"] and dashboard["schemaVersion"] >= 30
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] != "row":
            assert panel["targets"], panel["title"]
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]


def test_every_query_names_exported_metrics_with_their_labels() -> None:
    names = exported()
    assert set(names) == set(CATALOGUE)  # the code renders every metric of its catalogue
    dashboard = json.loads(DASHBOARD.read_text())
    used: set[str] = set()
    for expr in queries(dashboard):
        for metric, labels in references(expr):
            assert metric in names, f"{metric} in {expr!r} is not exported"
            assert labels <= names[metric] | ADDED_LABELS, f"{metric}: labels {labels - names[metric]} in {expr!r}"
            used.add(metric)
        for grouped in re.findall(r"\b(?:by|without)\s*\(([^)]*)\)", expr):
            for label in (word.strip() for word in grouped.split(",") if word.strip()):
                owners = [m for m, _labels in references(expr)]
                assert any(label in names[m] | ADDED_LABELS for m in owners), f"label {label} in {expr!r}"
    # the panels the dashboard is for: each part of the collection shows
    for prefix in ("nodeops_agent_", "nodeops_nhc_", "nodeops_remediation", "nodeops_rolling_"):
        assert any(name.startswith(prefix) for name in used), prefix
    for wanted in (
        "nodeops_agent_state",
        "nodeops_agent_api_check_failures_total",
        "nodeops_agent_peer_answers_total",
        "nodeops_agent_fenced",
        "nodeops_nhc_observed_nodes",
        "nodeops_nhc_healthy_nodes",
        "nodeops_remediations",
        "nodeops_rolling_wave_duration_seconds",
        "nodeops_rolling_nodes",
    ):
        assert wanted in used, wanted


def test_the_example_alerts_name_exported_metrics() -> None:
    names = exported()
    text = ALERTS.read_text()
    for metric, labels in references(text):
        assert metric in names, metric
        assert labels <= names[metric] | ADDED_LABELS, (metric, labels)


def test_the_metrics_document_lists_every_metric() -> None:
    text = (ROOT / "docs/metrics.md").read_text()
    missing = [name for name in CATALOGUE if f"`{name}`" not in text]
    assert not missing, missing
