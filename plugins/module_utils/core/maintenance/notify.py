# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Notifications of a rolling maintenance run: the event, its default text, the payloads and the retry rule.

Pure: no I/O and no clock. The notify module sends what these functions build.

An event is a mapping with these fields (all optional except ``event``):

``event``     ``wave_start``, ``wave_end``, ``node_failed``, ``run_end`` (or any other word, for a caller's own)
``run_id``    the run
``wave``      the wave's number (none for ``run_end``)
``nodes``     the nodes of the wave (``node_failed``: the failed node)
``failures``  node to message for the nodes that failed (of the wave, or of the run for ``run_end``)
``counts``    how many of the run's nodes are in each state (pending, maintaining, done, failed, interrupted)
``message``   a sentence for a person; :func:`default_text` makes one when it is missing
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from ..node.errors import NodeopsError

EVENTS = ("wave_start", "wave_end", "node_failed", "run_end")
FORMATS = ("webhook", "slack")

# Slack's limits: a section's text 3000 characters, a field's 2000, at most 10 fields, 50 blocks.
SLACK_TEXT_LIMIT = 3000
SLACK_FIELD_LIMIT = 2000
SLACK_MAX_FIELDS = 10
# How many node names a text lists before it says "and N more".
MAX_LISTED = 20

_TITLES = {
    "wave_start": "Wave {wave} starts",
    "wave_end": "Wave {wave} ended",
    "node_failed": "Node failed",
    "run_end": "Run ended",
}
_ICONS = {
    "wave_start": ":arrow_forward:",
    "wave_end": ":white_check_mark:",
    "node_failed": ":x:",
    "run_end": ":checkered_flag:",
}


class NotifyError(NodeopsError, ValueError):
    """A notification that cannot be built from what was given."""


def check_event(event: Any) -> dict[str, Any]:
    """The event as a dict, checked: a mapping with a non-empty text ``event`` and fields of the right shape."""
    if not isinstance(event, Mapping):
        raise NotifyError(f"event must be a mapping of the event's fields, got {type(event).__name__}")
    name = event.get("event")
    if not isinstance(name, str) or not name.strip():
        raise NotifyError(f"event.event must name the event (one of {', '.join(EVENTS)}), got {name!r}")
    nodes = event.get("nodes")
    if nodes is not None and (isinstance(nodes, (str, bytes)) or not isinstance(nodes, (list, tuple))):
        raise NotifyError(f"event.nodes must be a list of node names, got {type(nodes).__name__}")
    for key in ("failures", "counts"):
        value = event.get(key)
        if value is not None and not isinstance(value, Mapping):
            raise NotifyError(f"event.{key} must be a mapping, got {type(value).__name__}")
    return dict(event)


def listed(names: Any, limit: int = MAX_LISTED) -> str:
    """Node names joined by commas, at most ``limit`` of them and then how many more."""
    items = [str(n) for n in names or ()]
    if not items:
        return "-"
    shown = ", ".join(items[:limit])
    return shown if len(items) <= limit else f"{shown} and {len(items) - limit} more"


def counts_text(counts: Mapping[str, Any] | None) -> str:
    """``done 4, failed 1, pending 7`` (the states with a count other than 0, in a fixed order)."""
    order = ("pending", "maintaining", "done", "failed", "interrupted")
    counts = counts or {}
    keys = [k for k in order if k in counts] + sorted(k for k in counts if k not in order)
    return ", ".join(f"{k} {counts[k]}" for k in keys if counts[k]) or "-"


def default_text(event: Mapping[str, Any]) -> str:
    """One sentence for a person, from the event's fields."""
    event = check_event(event)
    name = event["event"]
    run = event.get("run_id") or "-"
    wave = event.get("wave")
    nodes = event.get("nodes") or []
    failures = event.get("failures") or {}
    counts = counts_text(event.get("counts"))
    if name == "wave_start":
        return f"Run {run}: wave {wave} starts: {listed(nodes)} (nodes: {counts})."
    if name == "wave_end":
        ok = [n for n in nodes if n not in failures]
        return (
            f"Run {run}: wave {wave} ended: maintained {listed(ok)}; failed {listed(list(failures))} (nodes: {counts})."
        )
    if name == "node_failed":
        node = nodes[0] if nodes else (next(iter(failures), "-"))
        why = failures.get(node) or "failed"
        return f"Run {run}: node {node} failed in wave {wave}: {why}"
    if name == "run_end":
        failed = f"; failed: {listed(list(failures))}" if failures else ""
        return f"Run {run} ended (nodes: {counts}){failed}."
    return f"Run {run}: {name}."


def message(event: Mapping[str, Any]) -> str:
    """The event's own message, or the default text."""
    text = event.get("message")
    return text.strip() if isinstance(text, str) and text.strip() else default_text(event)


def _escape(text: str) -> str:
    """Text for Slack's mrkdwn: &, < and > would start an entity or a link."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def slack_payload(event: Mapping[str, Any]) -> dict[str, Any]:
    """A Slack incoming-webhook payload: ``text`` (the notification's text and the fallback) and ``blocks``."""
    event = check_event(event)
    name = event["event"]
    text = _escape(message(event))
    title = _TITLES.get(name, name).format(wave=event.get("wave"))
    header = f"{_ICONS.get(name, ':information_source:')} *{_escape(title)}*"
    fields = [f"*Run*\n{_escape(str(event.get('run_id') or '-'))}"]
    if event.get("wave") is not None:
        fields.append(f"*Wave*\n{event['wave']}")
    if event.get("nodes"):
        fields.append(f"*Nodes*\n{_escape(listed(event['nodes']))}")
    if event.get("counts"):
        fields.append(f"*Counts*\n{_escape(counts_text(event['counts']))}")
    failures = event.get("failures") or {}
    shown = list(failures)[:MAX_LISTED]
    lines = [f"• {_escape(str(n))}: {_escape(str(failures[n]))}" for n in shown]
    if len(failures) > len(shown):
        lines.append(f"… and {len(failures) - len(shown)} more")
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": _cut(f"{header}\n{text}", SLACK_TEXT_LIMIT)}},
        {
            "type": "section",
            "fields": [{"type": "mrkdwn", "text": _cut(f, SLACK_FIELD_LIMIT)} for f in fields[:SLACK_MAX_FIELDS]],
        },
    ]
    if lines:
        blocks.append(
            {
                "type": "section",
                "text": {"type": "mrkdwn", "text": _cut("*Failures*\n" + "\n".join(lines), SLACK_TEXT_LIMIT)},
            }
        )
    return {"text": _cut(text, SLACK_TEXT_LIMIT), "blocks": blocks}


def payload(fmt: str, event: Mapping[str, Any] | None, body: Any = None) -> Any:
    """What to send: the caller's ``body`` when given (a mapping or list, or text that is JSON), otherwise the
    event (``webhook``, with its ``message`` filled in) or its Slack payload (``slack``)."""
    if fmt not in FORMATS:
        raise NotifyError(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if body is not None and body != "" and body != {}:
        if isinstance(body, (str, bytes)):
            try:
                return json.loads(body)
            except ValueError as exc:
                raise NotifyError(f"body is text but not JSON ({exc}); give a mapping, a list or JSON text") from exc
        if not isinstance(body, (Mapping, list)):
            raise NotifyError(f"body must be a mapping, a list or JSON text, got {type(body).__name__}")
        return body
    if not event:
        raise NotifyError("give the event (its fields, at least event.event) or a body to send")
    if fmt == "slack":
        return slack_payload(event)
    checked = check_event(event)
    checked["message"] = message(checked)
    return checked


def display_url(url: str) -> str:
    """The URL as it may be shown: host, port and first path segment, then the scheme in brackets
    (``hooks.slack.com/services/… (https)``). A webhook URL often holds its secret in the path (Slack's) or the
    query, and user information never belongs in a log. The text never holds ``://``, so it never contains the
    URL itself, which Ansible masks in the output as a secret."""
    try:
        parts = urlsplit(str(url))
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "<an invalid URL>"
    segments = [s for s in parts.path.split("/") if s]
    path = "/" + segments[0] if segments else "/"
    if len(segments) > 1 or parts.query or parts.fragment:
        path += "/…" if segments else "…"
    if ":" in host:
        host = f"[{host}]"
    return f"{host}{port}{path} ({parts.scheme or 'no scheme'})"


def check_url(url: Any) -> str:
    """The URL, if it is an http(s) URL with a host."""
    if not isinstance(url, str) or not url:
        raise NotifyError("url must be the http:// or https:// URL to send the notification to")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is no number
    except ValueError as exc:
        raise NotifyError(f"url is not a valid URL ({exc}): {display_url(url)}") from exc
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise NotifyError(f"url must be an http:// or https:// URL with a host, got {display_url(url)}")
    return url


def retryable(status: int | None) -> bool:
    """Whether an answer is worth another try: no answer (a connection error or a timeout, None), 408, 429 or a
    5xx. Any other status is final, success or not."""
    return status is None or status in (408, 429) or 500 <= status <= 599


def backoff(attempt: int, delay: float, cap: float = 30.0) -> float:
    """Seconds to wait before try number ``attempt + 1`` (``attempt`` counts from 1): ``delay`` doubled each
    time, at most ``cap``."""
    if attempt < 1 or delay <= 0:
        return 0.0
    return float(min(cap, delay * 2 ** (attempt - 1)))
