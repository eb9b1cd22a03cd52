"""core/node/metrics.py: names, escaping and numbers of the text format (property tests, read back by an independent
reader), the catalogue's conventions, and the figures of node_health, remediation and rolling_maintenance."""

from __future__ import annotations

import math
import re

import pytest
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.node import metrics
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.node.errors import NodeopsError
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.node.metrics import (
    CATALOGUE,
    Exposition,
    Metric,
    MetricsError,
    check_metric,
    custom_figures,
    node_health_figures,
    remediation_figures,
    rolling_figures,
)
from hypothesis import given
from hypothesis import strategies as st
from support.exposition import parse, value

NAMES = st.from_regex(r"\A[a-zA-Z_:][a-zA-Z0-9_:]{0,30}\Z", fullmatch=True).filter(lambda n: not n.endswith("_total"))
LABELS = st.from_regex(r"\A[a-zA-Z][a-zA-Z0-9_]{0,20}\Z", fullmatch=True)


@given(
    name=NAMES,
    help_text=st.text(max_size=80),
    series=st.dictionaries(
        st.tuples(st.text(max_size=30), st.text(max_size=30)),
        st.one_of(st.integers(-(2**62), 2**62), st.floats(allow_nan=True, allow_infinity=True)),
        max_size=8,
    ),
)
def test_any_label_value_and_number_reads_back(name: str, help_text: str, series: dict) -> None:
    metric = Metric(name, "gauge", help_text, ("a", "b"))
    out = Exposition()
    out.declare(metric)
    for (first, second), number in series.items():
        out.add(metric, number, {"a": first, "b": second})
    family = parse(out.render())[name]
    assert family["type"] == "gauge" and family["help"] == help_text
    assert len(family["samples"]) == len(series)
    for (first, second), number in series.items():
        got = family["samples"][frozenset({("a", first), ("b", second)})]
        assert (math.isnan(got) and math.isnan(number)) or got == float(number)  # Prometheus keeps float64


@given(st.text(min_size=1, max_size=20))
def test_a_name_outside_the_rules_is_refused_with_the_rule(name: str) -> None:
    valid = re.fullmatch(r"[a-zA-Z_:][a-zA-Z0-9_:]*", name) is not None
    if valid:
        assert check_metric(Metric(name + "_x", "gauge", "h")).name == name + "_x"
    else:
        with pytest.raises(MetricsError, match="must match"):
            check_metric(Metric(name, "gauge", "h"))


@pytest.mark.parametrize(
    ("metric", "message"),
    [
        (Metric("a_count", "counter", "h"), "must end in _total"),
        (Metric("a_total", "gauge", "h"), "only a counter's name ends in _total"),
        (Metric("a", "histogram", "h"), "must be one of counter, gauge"),
        (Metric("a", "gauge", "h", ("__name",)), "reserved"),
        (Metric("a", "gauge", "h", ("1x",)), "label name '1x'"),
        (Metric("a", "gauge", "h", ("x", "x")), "given twice"),
    ],
)
def test_conventions_are_enforced(metric: Metric, message: str) -> None:
    with pytest.raises(MetricsError, match=message):
        check_metric(metric)


def test_metrics_error_is_a_nodeops_error_and_a_value_error() -> None:
    assert issubclass(MetricsError, NodeopsError) and issubclass(MetricsError, ValueError)


def test_a_series_twice_wrong_labels_and_non_numbers_are_refused() -> None:
    out = Exposition()
    metric = Metric("x", "gauge", "h", ("a",))
    out.add(metric, 1, {"a": "1"})
    with pytest.raises(MetricsError, match="given twice"):
        out.add(metric, 2, {"a": "1"})
    with pytest.raises(MetricsError, match="expected"):
        out.add(metric, 2, {"b": "1"})
    with pytest.raises(MetricsError, match="not a number"):
        out.add(metric, "3", {"a": "2"})
    with pytest.raises(MetricsError, match="declared twice"):
        out.add(Metric("x", "counter", "h"), 1)


def test_the_catalogue_follows_the_conventions() -> None:
    for name, metric in CATALOGUE.items():
        assert name == metric.name and check_metric(metric) is metric
        assert name.startswith("nodeops_")
        assert metric.help.endswith(".") or metric.help.endswith(")"), name
        # base units in the name, as Prometheus' naming guide asks
        assert not re.search(r"_(milliseconds|minutes|hours|percent)\b", name), name


def test_empty_exposition_is_empty_and_a_declared_family_shows_without_samples() -> None:
    assert Exposition().render() == ""
    out = Exposition()
    out.declare(Metric("x", "gauge", "h"))
    assert out.render() == "# HELP x h\n# TYPE x gauge\n"


# -- figures of the modules' results --------------------------------------------------------------------------------
HEALTH_RESULT = {
    "observed": 5,
    "healthy": 3,
    "min_healthy": 3,
    "min_healthy_met": True,
    "unhealthy_nodes": ["w4", "w5"],
    "phase": "Remediating",
    "created": [{"node": "w5"}],
    "deleted": [],
    "decisions": [
        {"node": "w1", "code": "Healthy", "unhealthy_seconds": None},
        {"node": "w4", "code": "Remediate", "unhealthy_seconds": 401.5},
        {"node": "w5", "code": "Remediate", "unhealthy_seconds": 320},
    ],
}


def test_node_health_figures() -> None:
    families = parse(node_health_figures(HEALTH_RESULT, "workers", 1700000000.0).render())
    assert value(families, "nodeops_nhc_observed_nodes", nhc="workers") == 5
    assert value(families, "nodeops_nhc_healthy_nodes", nhc="workers") == 3
    assert value(families, "nodeops_nhc_unhealthy_nodes", nhc="workers") == 2
    assert value(families, "nodeops_nhc_min_healthy_met", nhc="workers") == 1
    assert value(families, "nodeops_nhc_phase", nhc="workers", phase="Remediating") == 1
    assert value(families, "nodeops_nhc_node_unhealthy_seconds", nhc="workers", node="w4") == 401.5
    assert value(families, "nodeops_nhc_node_unhealthy_seconds", nhc="workers", node="w1") is None
    assert value(families, "nodeops_nhc_remediations_created", nhc="workers") == 1


def test_remediation_figures_count_objects_in_progress_by_phase_and_strategy() -> None:
    result = {
        "remediations": [
            {"node": "a", "phase": "Fencing-Completed", "strategy": "OutOfServiceTaint", "seconds_to_safe_time": 0},
            {
                "node": "b",
                "phase": "Pre-Reboot-Completed",
                "strategy": "OutOfServiceTaint",
                "seconds_to_safe_time": 40.5,
            },
            {"node": "c", "phase": "Pre-Reboot-Completed", "strategy": "OutOfServiceTaint", "pods_deleted": ["x", "y"]},
            {"node": "d", "phase": "Deleted", "strategy": "ResourceDeletion"},
        ],
        "waiting": ["ns/b"],
    }
    families = parse(remediation_figures(result, 1.0).render())
    assert value(families, "nodeops_remediations", phase="Pre-Reboot-Completed", strategy="OutOfServiceTaint") == 2
    assert value(families, "nodeops_remediations", phase="Deleted", strategy="ResourceDeletion") is None
    assert value(families, "nodeops_remediation_seconds_to_safe_time", node="b") == 40.5
    assert value(families, "nodeops_remediations_waiting") == 1
    assert value(families, "nodeops_remediation_pods_deleted") == 2


def test_rolling_figures_of_a_release_and_of_the_summary() -> None:
    release = {"run_id": "CHG-1", "counts": {"pending": 4, "done": 2}, "waves": 1, "failed_percentage": 12.5,
               "complete": False, "abort": False, "node": "n3", "batch_ended": None}  # fmt: skip
    families = parse(rolling_figures(release, 5.0).render())
    assert value(families, "nodeops_rolling_nodes", run_id="CHG-1", state="pending") == 4
    assert value(families, "nodeops_rolling_nodes", run_id="CHG-1", state="failed") == 0
    assert value(families, "nodeops_rolling_failed_ratio", run_id="CHG-1") == 0.125
    assert "nodeops_rolling_wave_duration_seconds" not in families  # only the summary has the nodes' rows
    summary = {
        "run_id": "CHG-1",
        "counts": {"done": 3, "failed": 1},
        "waves": 2,
        "nodes": [
            {"node": "a", "wave": 1, "outcome": "done", "drained": 2.0, "maintained": 10.0, "back": 3.0},
            {"node": "b", "wave": 1, "outcome": "failed", "drained": 1.0, "maintained": 20.0, "back": None},
            {"node": "c", "wave": 2, "outcome": "done", "drained": 1.0, "maintained": 5.0, "back": 1.0},
            {"node": "d", "wave": None, "outcome": "pending", "drained": None, "maintained": None, "back": None},
        ],
    }
    families = parse(rolling_figures(summary, 5.0).render())
    assert value(families, "nodeops_rolling_wave_duration_seconds", run_id="CHG-1", wave="1") == 21.0
    assert value(families, "nodeops_rolling_wave_duration_seconds", run_id="CHG-1", wave="2") == 7.0
    assert value(families, "nodeops_rolling_wave_nodes", run_id="CHG-1", wave="1", outcome="failed") == 1


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: node_health_figures({"observed": 1}, "x", 0.0), "lacks healthy"),
        (lambda: remediation_figures([], 0.0), "must be a mapping"),  # type: ignore[arg-type]
        (lambda: rolling_figures({"run_id": "r", "counts": {"done": "2"}, "waves": 1}, 0.0), "counts.done"),
        (lambda: rolling_figures({"run_id": "r", "counts": {}, "waves": 1, "nodes": ["n3"]}, 0.0), "nodes: every"),
        (lambda: custom_figures([{"name": "a b", "value": 1}]), r"metrics\[0\]: metric name 'a b'"),
        (lambda: custom_figures([{"name": "x", "value": 1, "color": 2}]), "unknown key color"),
        (lambda: custom_figures([{"name": "x_total", "value": 1, "type": "gauge"}]), "only a counter"),
        (lambda: custom_figures([{"name": "nodeops_rolling_waves", "value": 1}]), "takes the labels"),
    ],
)
def test_bad_input_names_what_is_wrong(call: object, message: str) -> None:
    with pytest.raises(MetricsError, match=message):
        call()  # type: ignore[operator]


def test_custom_figures() -> None:
    out = custom_figures(
        [
            {"name": "backup_age_seconds", "value": 12, "labels": {"site": 'a"b\\c'}},
            {"name": "jobs_total", "value": 3},
        ]
    )
    families = parse(out.render())
    assert families["jobs_total"]["type"] == "counter"
    assert value(families, "backup_age_seconds", site='a"b\\c') == 12


def test_the_agent_ships_this_file() -> None:
    assert metrics.__name__.endswith("core.node.metrics")
