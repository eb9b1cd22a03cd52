# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Prometheus text exposition (format 0.0.4): the catalogue of the collection's metrics and their rendering.

Pure, standard library only, Python 3.9 syntax at run time: the node agent ships this file with the other core
files and serves its metrics with it, and the ``metrics_push`` module renders the modules' figures with it, so the
names, the escaping and the number format exist once.

``CATALOGUE`` is every metric the collection exports (name, type, help, label names); ``Exposition`` collects
samples of catalogue metrics (or of metrics a user describes, checked by ``check_metric``) and ``render()`` gives the
text. ``node_health_figures``, ``remediation_figures`` and ``rolling_figures`` turn a module's result into samples.
"""

from __future__ import annotations

import base64
import math
import re
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import NodeopsError


class MetricsError(NodeopsError, ValueError):
    """A metric, label or value that cannot be exposed; the message names it and says what is allowed."""


METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
KINDS = ("counter", "gauge")
#: Samples one exposition may hold: a bound on the size of what is served or pushed.
MAX_SAMPLES = 100_000
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(frozen=True)
class Metric:
    """A metric family: its name, type (counter or gauge), help text and label names."""

    name: str
    kind: str
    help: str
    labels: tuple[str, ...] = ()


def check_metric(metric: Metric) -> Metric:
    """``metric`` when its name, type and labels follow Prometheus' rules (counters end in ``_total``, other types
    do not); otherwise MetricsError naming what is wrong."""
    if not isinstance(metric.name, str) or not METRIC_NAME.match(metric.name):
        raise MetricsError(
            f"metric name {metric.name!r}: must match [a-zA-Z_:][a-zA-Z0-9_:]* (letters, digits, '_' and ':', "
            "not starting with a digit)."
        )
    if metric.kind not in KINDS:
        raise MetricsError(f"metric {metric.name}: type {metric.kind!r} must be one of {', '.join(KINDS)}.")
    if metric.kind == "counter" and not metric.name.endswith("_total"):
        raise MetricsError(f"metric {metric.name}: a counter's name must end in _total.")
    if metric.kind != "counter" and metric.name.endswith("_total"):
        raise MetricsError(f"metric {metric.name}: only a counter's name ends in _total; this one is a {metric.kind}.")
    for label in metric.labels:
        check_label_name(label, metric.name)
    if len(set(metric.labels)) != len(metric.labels):
        raise MetricsError(f"metric {metric.name}: a label name is given twice ({', '.join(metric.labels)}).")
    return metric


def check_label_name(label: Any, metric: str = "") -> str:
    where = f"metric {metric}: " if metric else ""
    if not isinstance(label, str) or not LABEL_NAME.match(label):
        raise MetricsError(f"{where}label name {label!r}: must match [a-zA-Z_][a-zA-Z0-9_]*.")
    if label.startswith("__"):
        raise MetricsError(f"{where}label name {label!r}: names starting with '__' are reserved for Prometheus.")
    return label


def escape_label_value(value: str) -> str:
    """A label value inside double quotes: backslash, double quote and line feed escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(text: str) -> str:
    """A HELP text: backslash and line feed escaped."""
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: Any, where: str = "value") -> str:
    """A sample value as Prometheus reads it: integers as they are, floats in their shortest exact form,
    ``+Inf``, ``-Inf`` and ``NaN``; booleans as 1 and 0."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "+Inf" if value > 0 else "-Inf"
        return repr(value)
    raise MetricsError(f"{where}: {value!r} is not a number.")


def _label_text(value: Any, metric: str, label: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    raise MetricsError(f"metric {metric}: label {label}: {value!r} must be a string or a number.")


class Exposition:
    """Samples of metric families, rendered as the text format. A family is declared by its first sample (or by
    ``declare``, which shows it with no sample); every sample of a family has exactly the family's labels."""

    def __init__(self) -> None:
        self._families: dict[str, Metric] = {}
        self._samples: dict[str, dict[tuple[str, ...], str]] = {}
        self._count = 0

    def declare(self, metric: Metric) -> None:
        known = self._families.get(metric.name)
        if known is None:
            self._families[check_metric(metric).name] = metric
            self._samples[metric.name] = {}
        elif known != metric:
            raise MetricsError(f"metric {metric.name}: declared twice with different types, help or labels.")

    def add(self, metric: Metric, value: Any, labels: Mapping[str, Any] | None = None) -> None:
        """One sample; a second sample with the same labels is an error (a series appears once)."""
        self.declare(metric)
        given = dict(labels or {})
        if set(given) != set(metric.labels):
            raise MetricsError(f"metric {metric.name}: labels {sorted(given)} given, {sorted(metric.labels)} expected.")
        key = tuple(_label_text(given[name], metric.name, name) for name in metric.labels)
        series = self._samples[metric.name]
        if key in series:
            shown = ", ".join(f"{label}={key[i]!r}" for i, label in enumerate(metric.labels))
            raise MetricsError(f"metric {metric.name}: the series {{{shown}}} is given twice.")
        if self._count >= MAX_SAMPLES:
            raise MetricsError(f"more than {MAX_SAMPLES} samples: too many series for one exposition.")
        series[key] = format_value(value, f"metric {metric.name}")
        self._count += 1

    def names(self) -> list[str]:
        return list(self._families)

    def render(self) -> str:
        """The text format: per family its HELP and TYPE lines, then its samples (label values escaped)."""
        lines: list[str] = []
        for name, metric in self._families.items():
            lines.append(f"# HELP {name} {escape_help(metric.help)}")
            lines.append(f"# TYPE {name} {metric.kind}")
            for key, value in self._samples[name].items():
                if key:
                    pairs = ",".join(f'{label}="{escape_label_value(key[i])}"' for i, label in enumerate(metric.labels))
                    lines.append(f"{name}{{{pairs}}} {value}")
                else:
                    lines.append(f"{name} {value}")
        return "\n".join(lines) + "\n" if lines else ""


# -- the catalogue -------------------------------------------------------------------------------------------------
def _m(name: str, kind: str, text: str, *labels: str) -> Metric:
    return check_metric(Metric(name, kind, text, labels))


#: The node agent's metrics (served on its metrics address; Prometheus adds ``instance`` and ``job``).
AGENT = {
    m.name: m
    for m in (
        _m(
            "nodeops_agent_info",
            "gauge",
            "Always 1; the node the agent serves and the Python it runs on.",
            "node",
            "python",
        ),
        _m(
            "nodeops_agent_state",
            "gauge",
            "1 for the agent's current state (starting, healthy, api-errors, fenced), 0 for the others.",
            "state",
        ),
        _m("nodeops_agent_start_time_seconds", "gauge", "When this agent process started (Unix time)."),
        _m("nodeops_agent_api_checks_total", "counter", "API-server checks made."),
        _m("nodeops_agent_api_check_failures_total", "counter", "API-server checks that failed (no ready answer)."),
        _m(
            "nodeops_agent_api_consecutive_failures",
            "gauge",
            "API-server checks failed in a row now (0 when the last passed).",
        ),
        _m(
            "nodeops_agent_remediation_read_failures_total",
            "counter",
            "Reads of this node's SelfNodeRemediations that failed while the API server answered ready, by reason"
            " (forbidden, not_found, throttled, too_large, unavailable, timeout, error); each counts as a failed API"
            " check.",
            "reason",
        ),
        _m(
            "nodeops_agent_name_lookup_failures_total",
            "counter",
            "Name lookups (API server, peers) that failed or did not end in time, by reason (error, timeout).",
            "reason",
        ),
        _m(
            "nodeops_agent_cut_off_seconds",
            "gauge",
            "Seconds since this node last confirmed that no remediation is pending for it (its own read, or a"
            " majority of the peers asked); it fences when this reaches the isolation limit.",
        ),
        _m(
            "nodeops_agent_isolation_limit_seconds",
            "gauge",
            "How long this node may be cut off from its remediation state before it fences.",
        ),
        _m(
            "nodeops_agent_verdicts_total",
            "counter",
            "Decisions taken after failed API checks, by the decision table's code.",
            "code",
        ),
        _m(
            "nodeops_agent_peer_answers_total",
            "counter",
            "Answers this agent got when it asked its peers, by kind (Healthy, Unhealthy, ApiError, Busy,"
            " RequestFailed).",
            "answer",
        ),
        _m(
            "nodeops_agent_peer_answers_served_total",
            "counter",
            "Answers this agent gave to peers that asked about themselves, by kind.",
            "answer",
        ),
        _m(
            "nodeops_agent_peer_connections_refused_total",
            "counter",
            "Peer-port connections ended without an answer, by reason (stranger: not a peer's address; busy: the"
            " server or the address was full; failed: TLS or request refused; overdue: past the exchange deadline).",
            "reason",
        ),
        _m("nodeops_agent_peers", "gauge", "Peers in the peer list, by role (worker, control_plane).", "role"),
        _m("nodeops_agent_peer_list_ok", "gauge", "1 when the peer list was read at its last refresh, 0 when not."),
        _m("nodeops_agent_watchdog_armed", "gauge", "1 when the watchdog is open (its timer runs), 0 when not."),
        _m("nodeops_agent_watchdog_feeding", "gauge", "1 while the agent feeds an armed watchdog, 0 when not."),
        _m("nodeops_agent_watchdog_timeout_seconds", "gauge", "The watchdog's timeout."),
        _m("nodeops_agent_watchdog_feeds_total", "counter", "Writes that fed the watchdog."),
        _m("nodeops_agent_watchdog_feed_failures_total", "counter", "Writes to the watchdog that failed."),
        _m(
            "nodeops_agent_watchdog_last_feed_age_seconds",
            "gauge",
            "Seconds since the watchdog was last fed (only while it is armed).",
        ),
        _m(
            "nodeops_agent_reboot_capable",
            "gauge",
            "1 when the node's published annotation says reboot-capable, 0 when not.",
        ),
        _m("nodeops_agent_publish_failures_total", "counter", "Failed writes of the node's two annotations."),
        _m("nodeops_agent_fenced", "gauge", "1 once fencing began in this boot (it lasts until the reboot), else 0."),
        _m(
            "nodeops_agent_fence_info",
            "gauge",
            "1 while fenced: why (remediation: a SelfNodeRemediation for this node; otherwise the peer decision code)"
            " and whether an earlier agent process began it.",
            "cause",
            "carried_over",
        ),
        _m("nodeops_agent_fence_start_time_seconds", "gauge", "When fencing began (Unix time); only while fenced."),
        _m(
            "nodeops_agent_software_reboots_total",
            "counter",
            "Software fallback reboots tried while fenced, by method (command, sysrq).",
            "method",
        ),
    )
}

#: node_health's figures of one NodeHealthCheck (label ``nhc``).
HEALTH = {
    m.name: m
    for m in (
        _m("nodeops_nhc_observed_nodes", "gauge", "Nodes the NodeHealthCheck's selector picks.", "nhc"),
        _m("nodeops_nhc_healthy_nodes", "gauge", "Observed nodes that count healthy.", "nhc"),
        _m(
            "nodeops_nhc_unhealthy_nodes",
            "gauge",
            "Observed nodes whose listed conditions held past their duration.",
            "nhc",
        ),
        _m("nodeops_nhc_min_healthy_nodes", "gauge", "Healthy nodes needed before remediating.", "nhc"),
        _m("nodeops_nhc_min_healthy_met", "gauge", "1 when the healthy nodes reach min_healthy, 0 when not.", "nhc"),
        _m("nodeops_nhc_phase", "gauge", "1 for the NodeHealthCheck's phase after the pass.", "nhc", "phase"),
        _m(
            "nodeops_nhc_node_unhealthy_seconds",
            "gauge",
            "How long the listed condition has held on an unhealthy node (the longest one that matches).",
            "nhc",
            "node",
        ),
        _m("nodeops_nhc_remediations_created", "gauge", "Remediation objects the last pass created.", "nhc"),
        _m("nodeops_nhc_remediations_deleted", "gauge", "Remediation objects the last pass deleted.", "nhc"),
        _m("nodeops_nhc_last_pass_timestamp_seconds", "gauge", "When the last pass ended (Unix time).", "nhc"),
    )
}

#: The remediation module's figures (one run over the SelfNodeRemediation objects).
REMEDIATION = {
    m.name: m
    for m in (
        _m(
            "nodeops_remediations",
            "gauge",
            "SelfNodeRemediation objects still in progress after the run, by phase and strategy.",
            "phase",
            "strategy",
        ),
        _m("nodeops_remediations_waiting", "gauge", "Remediation objects waiting for something due later."),
        _m(
            "nodeops_remediation_seconds_to_safe_time",
            "gauge",
            "Seconds until the node can be assumed rebooted (0 once passed), per remediated node.",
            "node",
        ),
        _m("nodeops_remediation_pods_deleted", "gauge", "Pods the last run force-deleted."),
        _m("nodeops_remediation_last_run_timestamp_seconds", "gauge", "When the last run ended (Unix time)."),
    )
}

#: rolling_maintenance's figures of one run (label ``run_id``).
ROLLING = {
    m.name: m
    for m in (
        _m(
            "nodeops_rolling_nodes",
            "gauge",
            "The run's nodes by state (pending, maintaining, done, failed, interrupted).",
            "run_id",
            "state",
        ),
        _m("nodeops_rolling_waves", "gauge", "Waves the run has had.", "run_id"),
        _m("nodeops_rolling_failed_ratio", "gauge", "Failed nodes over all the run's nodes (0 to 1).", "run_id"),
        _m("nodeops_rolling_complete", "gauge", "1 when no node is pending or in its maintenance, else 0.", "run_id"),
        _m(
            "nodeops_rolling_aborted",
            "gauge",
            "1 when too many nodes failed for a new wave to start, else 0.",
            "run_id",
        ),
        _m(
            "nodeops_rolling_wave_duration_seconds",
            "gauge",
            "A wave's length: its slowest node's drain, maintenance and return to Ready.",
            "run_id",
            "wave",
        ),
        _m(
            "nodeops_rolling_wave_nodes",
            "gauge",
            "A wave's nodes by outcome (done, failed, interrupted, maintaining).",
            "run_id",
            "wave",
            "outcome",
        ),
        _m(
            "nodeops_rolling_last_push_timestamp_seconds",
            "gauge",
            "When these figures were taken (Unix time).",
            "run_id",
        ),
    )
}

#: Every metric the collection exports, by name.
CATALOGUE: dict[str, Metric] = {**AGENT, **HEALTH, **REMEDIATION, **ROLLING}

AGENT_STATES = ("starting", "healthy", "api-errors", "fenced")
ROLLING_STATES = ("pending", "maintaining", "done", "failed", "interrupted")


# -- figures of the modules' results ---------------------------------------------------------------------------------
def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise MetricsError(f"{where}: {value!r} is not a number; give the registered result of that module.")
    return value


def _require(result: Mapping[str, Any], keys: Iterable[str], source: str) -> None:
    if not isinstance(result, Mapping):
        raise MetricsError(f"the {source} result must be a mapping (the task's registered result).")
    missing = [key for key in keys if key not in result]
    if missing:
        raise MetricsError(
            f"the {source} result lacks {', '.join(missing)}: give the registered result of a "
            f"nodeops.maintenance.{source} task that succeeded."
        )


def node_health_figures(result: Mapping[str, Any], nhc: str, now: float) -> Exposition:
    """node_health's figures of the NodeHealthCheck ``nhc``; ``now`` (Unix time) is when the pass ended."""
    needed = ("observed", "healthy", "min_healthy", "min_healthy_met", "unhealthy_nodes", "phase")
    _require(result, needed, "node_health")
    out = Exposition()
    label = {"nhc": nhc}
    out.add(HEALTH["nodeops_nhc_observed_nodes"], _number(result["observed"], "observed"), label)
    out.add(HEALTH["nodeops_nhc_healthy_nodes"], _number(result["healthy"], "healthy"), label)
    out.add(HEALTH["nodeops_nhc_unhealthy_nodes"], len(result["unhealthy_nodes"] or []), label)
    out.add(HEALTH["nodeops_nhc_min_healthy_nodes"], _number(result["min_healthy"], "min_healthy"), label)
    out.add(HEALTH["nodeops_nhc_min_healthy_met"], bool(result["min_healthy_met"]), label)
    out.add(HEALTH["nodeops_nhc_phase"], 1, {"nhc": nhc, "phase": str(result["phase"])})
    out.declare(HEALTH["nodeops_nhc_node_unhealthy_seconds"])
    unhealthy = set(result["unhealthy_nodes"] or [])
    for decision in result.get("decisions") or []:
        seconds = decision.get("unhealthy_seconds") if isinstance(decision, Mapping) else None
        if decision.get("node") in unhealthy and seconds is not None:
            out.add(
                HEALTH["nodeops_nhc_node_unhealthy_seconds"],
                _number(seconds, f"decisions[{decision.get('node')}].unhealthy_seconds"),
                {"nhc": nhc, "node": decision["node"]},
            )
    out.add(HEALTH["nodeops_nhc_remediations_created"], len(result.get("created") or []), label)
    out.add(HEALTH["nodeops_nhc_remediations_deleted"], len(result.get("deleted") or []), label)
    out.add(HEALTH["nodeops_nhc_last_pass_timestamp_seconds"], float(now), label)
    return out


def remediation_figures(result: Mapping[str, Any], now: float) -> Exposition:
    """The remediation module's figures: objects still in progress by phase and strategy (those gone are not
    counted), the waiting ones, each node's time to its safe time and the pods deleted."""
    _require(result, ("remediations", "waiting"), "remediation")
    out = Exposition()
    counts: dict[tuple[str, str], int] = {}
    pods = 0
    out.declare(REMEDIATION["nodeops_remediations"])
    out.declare(REMEDIATION["nodeops_remediation_seconds_to_safe_time"])
    for item in result["remediations"] or []:
        if not isinstance(item, Mapping):
            raise MetricsError("remediations: every entry must be a mapping (the registered result of the module).")
        pods += len(item.get("pods_deleted") or [])
        phase = str(item.get("phase") or "Unknown")
        if phase == "Deleted":
            continue
        key = (phase, str(item.get("strategy") or "Unknown"))
        counts[key] = counts.get(key, 0) + 1
        seconds = item.get("seconds_to_safe_time")
        if seconds is not None and item.get("node"):
            out.add(
                REMEDIATION["nodeops_remediation_seconds_to_safe_time"],
                _number(seconds, f"remediations[{item['node']}].seconds_to_safe_time"),
                {"node": item["node"]},
            )
    for (phase, strategy), count in sorted(counts.items()):
        out.add(REMEDIATION["nodeops_remediations"], count, {"phase": phase, "strategy": strategy})
    out.add(REMEDIATION["nodeops_remediations_waiting"], len(result["waiting"] or []))
    out.add(REMEDIATION["nodeops_remediation_pods_deleted"], pods)
    out.add(REMEDIATION["nodeops_remediation_last_run_timestamp_seconds"], float(now))
    return out


def rolling_figures(result: Mapping[str, Any], now: float) -> Exposition:
    """rolling_maintenance's figures of one run, from any step's result: the nodes by state and the waves; with the
    summary step's per-node rows (``nodes``) also each wave's length and its nodes by outcome."""
    _require(result, ("run_id", "counts", "waves"), "rolling_maintenance")
    out = Exposition()
    run = {"run_id": str(result["run_id"])}
    counts = result["counts"] or {}
    if not isinstance(counts, Mapping):
        raise MetricsError("counts: must be a mapping of state to a number of nodes.")
    for state in sorted(set(ROLLING_STATES) | set(counts)):
        count = _number(counts.get(state, 0), f"counts.{state}")
        out.add(ROLLING["nodeops_rolling_nodes"], count, {**run, "state": state})
    out.add(ROLLING["nodeops_rolling_waves"], _number(result["waves"], "waves"), run)
    if "failed_percentage" in result:
        ratio = _number(result["failed_percentage"], "failed_percentage") / 100.0
        out.add(ROLLING["nodeops_rolling_failed_ratio"], ratio, run)
    if "complete" in result:
        out.add(ROLLING["nodeops_rolling_complete"], bool(result["complete"]), run)
    if "abort" in result:
        out.add(ROLLING["nodeops_rolling_aborted"], bool(result["abort"]), run)
    lengths: dict[int, float] = {}
    outcomes: dict[tuple[int, str], int] = {}
    for row in result.get("nodes") or []:  # the summary step's rows
        if not isinstance(row, Mapping):
            raise MetricsError("nodes: every entry must be a mapping (the summary step's rows).")
        wave = row.get("wave")
        if wave is None:
            continue
        spans = [row.get(key) for key in ("drained", "maintained", "back")]
        length = sum(_number(span, f"nodes[{row.get('node')}]") for span in spans if span is not None)
        lengths[wave] = max(lengths.get(wave, 0.0), float(length))
        key = (wave, str(row.get("outcome")))
        outcomes[key] = outcomes.get(key, 0) + 1
    for wave, length in sorted(lengths.items()):
        out.add(ROLLING["nodeops_rolling_wave_duration_seconds"], length, {**run, "wave": wave})
    for (wave, outcome), count in sorted(outcomes.items()):
        out.add(ROLLING["nodeops_rolling_wave_nodes"], count, {**run, "wave": wave, "outcome": outcome})
    out.add(ROLLING["nodeops_rolling_last_push_timestamp_seconds"], float(now), run)
    return out


def custom_figures(metrics: Iterable[Mapping[str, Any]]) -> Exposition:
    """Figures a user describes: each ``{name, value, type (gauge), help, labels}``; names and labels checked."""
    out = Exposition()
    for index, item in enumerate(metrics):
        where = f"metrics[{index}]"
        if not isinstance(item, Mapping) or "name" not in item or "value" not in item:
            raise MetricsError(f"{where}: must be a mapping with at least name and value.")
        unknown = sorted(set(item) - {"name", "value", "type", "help", "labels"})
        if unknown:
            raise MetricsError(f"{where}: unknown key {unknown[0]} (known: name, value, type, help, labels).")
        labels = item.get("labels") or {}
        if not isinstance(labels, Mapping):
            raise MetricsError(f"{where}.labels: must be a mapping of label names to values.")
        name = item["name"]
        known = CATALOGUE.get(name) if isinstance(name, str) else None
        metric = known or Metric(
            name,
            str(item.get("type") or ("counter" if isinstance(name, str) and name.endswith("_total") else "gauge")),
            str(item.get("help") or f"{name} (given to nodeops.maintenance.metrics_push)"),
            tuple(sorted(labels)),
        )
        if known is not None and set(labels) != set(known.labels):
            raise MetricsError(f"{where}: {name} takes the labels {list(known.labels)}, not {sorted(labels)}.")
        try:
            out.add(metric, _number(item["value"], f"{where}.value"), labels)
        except MetricsError as err:
            raise MetricsError(f"{where}: {err}") from err
    return out


def push_path(job: str, grouping: Mapping[str, Any]) -> str:
    """The Pushgateway path of a group: ``/metrics/job/<job>{/<label>/<value>}``. A value that is empty or holds a
    ``/`` goes in the gateway's base64 form (``<label>@base64/<urlsafe base64>``); others are percent-encoded."""
    if not isinstance(job, str) or not job:
        raise MetricsError("job: must be a non-empty string (the Pushgateway's job label).")
    parts = ["/metrics", *_path_pair("job", job)]
    for label, given in sorted(grouping.items()):
        if label == "job":
            raise MetricsError("grouping: job is given by the job option, not as a grouping label.")
        check_label_name(label)
        parts += _path_pair(label, _label_text(given, "grouping", label))
    return "/".join(parts)


def _path_pair(label: str, value: str) -> list[str]:
    if value and "/" not in value:
        return [label, urllib.parse.quote(value, safe="")]
    return [f"{label}@base64", base64.urlsafe_b64encode(value.encode("utf-8")).decode("ascii") or "="]
