# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Gates before each wave of a rolling run: what blocks, given what was read.

Pure: the pods (already selected by the gate's label selector) and the alerts (Prometheus' ``/api/v1/alerts``
answer) are given by the caller. Each gate gives a list of blockers, each a short sentence for a person and the
data behind it; an empty list lets the wave start.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..node.errors import NodeopsError

POD_SCOPES = ("wave", "cluster")
FINISHED_POD_PHASES = frozenset(("Succeeded", "Failed"))


class PrometheusError(NodeopsError):
    """Prometheus did not answer, or not with the alerts."""


class GateError(NodeopsError, ValueError):
    """A gate setting that cannot be used."""


@dataclass
class Blocker:
    gate: str  # "pods", "alerts", "tasks"
    message: str
    data: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"gate": self.gate, "message": self.message, **self.data}


def compile_alert_filter(pattern: str) -> re.Pattern[str]:
    """The alert filter: a regular expression matched against the whole alert name (as Prometheus matches)."""
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise GateError(f"the alert filter {pattern!r} is not a regular expression: {exc}") from None


def blocking_pods(pods: Iterable[Mapping[str, Any]], nodes: Sequence[str] | None) -> list[Blocker]:
    """The pods that block: those not finished (Succeeded or Failed) and, when ``nodes`` is given, on one of
    them (``None``: anywhere in the cluster). A pod still being deleted blocks until it is gone."""
    wanted = None if nodes is None else set(nodes)
    out = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        node = (pod.get("spec") or {}).get("nodeName") or ""
        phase = (pod.get("status") or {}).get("phase") or ""
        if phase in FINISHED_POD_PHASES:
            continue
        if wanted is not None and node not in wanted:
            continue
        namespace, name = meta.get("namespace") or "", meta.get("name") or ""
        where = f" on {node}" if node else " (not scheduled)"
        out.append(
            Blocker(
                "pods",
                f"pod {namespace}/{name}{where}",
                {"namespace": namespace, "name": name, "node": node, "phase": phase},
            )
        )
    return sorted(out, key=lambda b: (b.data["node"], b.data["namespace"], b.data["name"]))


def blocking_alerts(
    alerts: Iterable[Mapping[str, Any]],
    alert_filter: str = ".*",
    include_pending: bool = False,
) -> list[Blocker]:
    """The alerts that block: firing (and pending ones with ``include_pending``) whose ``alertname`` the filter
    matches as a whole."""
    pattern = compile_alert_filter(alert_filter)
    states = {"firing", "pending"} if include_pending else {"firing"}
    out = []
    for alert in alerts:
        labels = {str(k): str(v) for k, v in (alert.get("labels") or {}).items()}
        state = str(alert.get("state") or "")
        name = labels.get("alertname", "")
        if state not in states or pattern.fullmatch(name) is None:
            continue
        shown = ", ".join(f"{k}={v}" for k, v in sorted(labels.items()) if k != "alertname")
        out.append(
            Blocker(
                "alerts",
                f"alert {name} ({state}){': ' + shown if shown else ''}",
                {"alertname": name, "state": state, "labels": labels},
            )
        )
    return sorted(out, key=lambda b: b.message)


def summarize(blockers: Sequence[Blocker], limit: int = 10) -> str:
    """The blockers in one line, the first ``limit`` named."""
    if not blockers:
        return "nothing blocks"
    shown = "; ".join(b.message for b in blockers[:limit])
    more = len(blockers) - limit
    return shown + (f"; and {more} more" if more > 0 else "")
