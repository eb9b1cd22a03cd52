# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A rolling maintenance run: its record, each node's admission (in admission batches), outcomes and the summary.

Pure: no I/O and no clock; times are seconds since the epoch given by the caller. The engine
(``engines/rolling.py``) keeps the record in a ConfigMap, so a run that dies at any moment is picked up
by the next one from what the cluster holds.

One record per target node, in one of these states:

``pending``      requested; waits for the scheduler and the drain, then for its admission
``maintaining``  admitted (in an admission batch, its ``wave``): its maintenance tasks were handed out (recorded
                 before they start)
``done``         maintained, back Ready in Kubernetes, its request released
``failed``       its maintenance failed or it did not come back: left cordoned (RequestorFailed) for a person
``interrupted``  a run died while the node was in its maintenance; released without running it again

A node is handed to the maintenance tasks at most once: only ``pending`` nodes are admitted, and the
record says ``maintaining`` before the tasks run. What a later run does with a node left ``maintaining``
is the interrupted policy: ``release`` (default), ``rerun`` or ``fail``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ..node import rfc3339
from ..node.errors import NodeopsError
from .lifecycle import ACTIVE_PHASES, PHASE_READY, PHASE_REQUESTOR_FAILED

PENDING = "pending"
MAINTAINING = "maintaining"
DONE = "done"
FAILED = "failed"
INTERRUPTED = "interrupted"
STATES = (PENDING, MAINTAINING, DONE, FAILED, INTERRUPTED)
# The run's state machine: the states a node's record may move to from each state. Every change of a node's state
# goes through move(), which refuses any other, so a step that finds the record changed under it (another host, a
# restarted run) fails instead of writing a state that skips one.
TRANSITIONS: Mapping[str, frozenset[str]] = {
    # admitted (its request Ready); its Node object gone before its admission
    PENDING: frozenset((MAINTAINING, FAILED)),
    # back and released; failed (its tasks, or not Ready in time); the run restarted during its maintenance (the
    # interrupted policies release, fail and rerun)
    MAINTAINING: frozenset((DONE, FAILED, INTERRUPTED, PENDING)),
    FAILED: frozenset((PENDING,)),  # queued again (retry_failed)
    INTERRUPTED: frozenset((FAILED,)),  # not Ready in time to be released
    DONE: frozenset(),
}

INTERRUPTED_POLICIES = ("release", "rerun", "fail")

# Request phases in which the node is drained and its requestor may go on.
DRAINED_PHASES = frozenset((PHASE_READY, PHASE_REQUESTOR_FAILED))

STATE_KEY = "nodes.json"
RUN_KEY = "run.json"
NAME_PREFIX = "nodeops-rolling-"
_DNS_LABEL = re.compile(r"[^a-z0-9-]+")
_TIME_FIELDS = ("requested", "admitted", "ready", "started", "began", "ended", "finished", "back")


class RollingError(NodeopsError, ValueError):
    """A record that cannot be read, or an input that cannot be used."""


@dataclass
class NodeRecord:
    node: str
    state: str = PENDING
    wave: int | None = None
    requested: float | None = None  # the request was made (or found)
    admitted: float | None = None  # first seen past Pending: the scheduler took it
    ready: float | None = None  # first seen drained (Ready)
    started: float | None = None  # handed to the maintenance tasks
    began: float | None = None  # the maintenance tasks' own start and end on the host, as the playbook reports them
    ended: float | None = None
    finished: float | None = None  # the tasks reported back
    back: float | None = None  # Ready in Kubernetes again and released (or left, when failed)
    message: str = ""

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for key in _TIME_FIELDS:
            if out[key] is not None:
                out[key] = rfc3339.milli_time(out[key])
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], epoch_times: bool = False) -> NodeRecord:
        """A record from its stored form: RFC 3339 times (the first form), or with ``epoch_times`` seconds since
        the epoch (from the table)."""
        if not isinstance(data, Mapping) or not isinstance(data.get("node"), str):
            raise RollingError(f"not a node record: {data!r}")
        state = data.get("state", PENDING)
        if state not in STATES:
            raise RollingError(f"node record {data['node']}: unknown state {state!r}")
        if epoch_times:
            times = {key: data.get(key) for key in _TIME_FIELDS}
        else:
            times = {key: rfc3339.to_epoch(data.get(key)) for key in _TIME_FIELDS}
        wave = data.get("wave")
        return cls(
            node=data["node"],
            state=state,
            wave=int(wave) if isinstance(wave, int) else None,
            message=str(data.get("message") or ""),
            **times,
        )


COLUMNS = ("node", "state", "wave", *_TIME_FIELDS, "message")
RECORD_FORMAT = 2  # the table of to_data; a list of node objects (as_dict) is the first form, still read
MESSAGE_LIMIT = 300  # characters of a node's message kept in the record (the request's condition has 1024)
# What a ConfigMap holds (the API server refuses more: the keys and values of data and binaryData together).
RECORD_LIMIT = 1024 * 1024
# Room kept at the start for the messages of failed nodes: a run whose record, every node done, would need more
# than RECORD_LIMIT - MESSAGE_ROOM is refused before anything is written.
MESSAGE_ROOM = 128 * 1024


def move(record: NodeRecord, state: str) -> None:
    """Set the state of a node's record, when :data:`TRANSITIONS` allows it (staying in its state always is)."""
    if state != record.state and state not in TRANSITIONS[record.state]:
        raise RollingError(f"{record.node} is {record.state}; it cannot become {state}")
    record.state = state


def stored_row(record: NodeRecord) -> tuple[Any, ...]:
    """A node's record as the record stores it (times in milliseconds, the message cut)."""
    times = (_millis(getattr(record, key)) for key in _TIME_FIELDS)
    return (record.node, record.state, record.wave, *times, _short(record.message))


def _millis(seconds: float | None) -> int | None:
    return None if seconds is None else round(seconds * 1000)


def _short(message: str) -> str:
    return message if len(message) <= MESSAGE_LIMIT else message[: MESSAGE_LIMIT - 3] + "..."


def _from_table(table: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The node objects of a stored table (as :meth:`NodeRecord.as_dict` gives them, times as epoch seconds)."""
    columns, base, rows = table.get("columns"), table.get("base"), table.get("rows")
    if not isinstance(columns, list) or not isinstance(base, int) or not isinstance(rows, list):
        raise RollingError("the run record has the wrong shape")
    out = []
    for row in rows:
        if not isinstance(row, list) or len(row) != len(columns):
            raise RollingError(f"not a node record: {row!r}")
        item = dict(zip(columns, row, strict=True))
        for key in _TIME_FIELDS:
            ms = item.get(key)
            item[key] = (base + ms) / 1000 if isinstance(ms, int) and not isinstance(ms, bool) else None
        out.append(item)
    return out


def record_size(data: Mapping[str, str]) -> int:
    """Bytes of ConfigMap data as the API server counts them against RECORD_LIMIT."""
    return sum(len(key.encode()) + len(value.encode()) for key, value in data.items())


def check_size(data: Mapping[str, str], nodes: int) -> None:
    """RollingError when the record no longer fits in its ConfigMap (the write would be refused)."""
    size = record_size(data)
    if size > RECORD_LIMIT:
        raise RollingError(
            f"the record of the run's {nodes} nodes needs {size} bytes, more than the {RECORD_LIMIT} a ConfigMap "
            "holds (long failure messages take room); nothing more was written"
        )


def full_size(run: RunRecord) -> int:
    """Bytes of the run's record once every node has every time set (without messages)."""
    start = run.started or 0.0
    full = RunRecord(run.run_id, run.requestor, run.started)
    for name in run.nodes:
        record = full.nodes[name] = NodeRecord(name, INTERRUPTED, len(run.nodes), requested=start)
        for key in _TIME_FIELDS[1:]:
            setattr(record, key, start + 400 * 86400.0)  # the other times more than a year after the start
    return record_size(full.to_data())


def check_capacity(run: RunRecord) -> None:
    """RollingError when the record of this many nodes, each done with every time set, would leave less than
    MESSAGE_ROOM bytes of the ConfigMap for messages: the run is refused before its first write."""
    if not run.nodes:
        return
    need = full_size(run)
    room = RECORD_LIMIT - MESSAGE_ROOM
    if need > room:
        fit = len(run.nodes) * room // need
        raise RollingError(
            f"the record of {len(run.nodes)} nodes would need about {need} bytes once they are done, and a ConfigMap "
            f"holds {RECORD_LIMIT} ({MESSAGE_ROOM} of them kept for failure messages): split the targets into runs "
            f"of at most about {fit} nodes, each with its own run ID"
        )


@dataclass
class RunRecord:
    run_id: str
    requestor: str
    started: float | None = None
    nodes: dict[str, NodeRecord] = field(default_factory=dict)
    # why the run stopped before its last node (see :func:`record_stop`); None while it goes on
    stopped: dict[str, Any] | None = None

    # -- storage -----------------------------------------------------------------------------
    def to_data(self) -> dict[str, str]:
        """The ConfigMap data: the run, and the nodes as a table (:data:`COLUMNS`, one row a line, times in
        milliseconds after ``base``), about 110 bytes a node where one object a node took 400."""
        run: dict[str, Any] = {"runID": self.run_id, "requestor": self.requestor}
        if self.started is not None:
            run["started"] = rfc3339.milli_time(self.started)
        if self.stopped is not None:
            run["stopped"] = self.stopped
        records = [self.nodes[name] for name in sorted(self.nodes)]
        stamps = [[_millis(getattr(r, key)) for key in _TIME_FIELDS] for r in records]
        base = min((ms for row in stamps for ms in row if ms is not None), default=0)
        rows = [
            json.dumps(
                [r.node, r.state, r.wave, *(None if ms is None else ms - base for ms in row), _short(r.message)],
                separators=(",", ":"),
            )
            for r, row in zip(records, stamps, strict=True)
        ]
        head = json.dumps({"format": RECORD_FORMAT, "columns": list(COLUMNS), "base": base})[:-1]
        table = head + ', "rows": [\n' + ",\n".join(rows) + "\n]}"
        return {RUN_KEY: json.dumps(run, sort_keys=True), STATE_KEY: table}

    @classmethod
    def from_data(cls, data: Mapping[str, str] | None, run_id: str, requestor: str) -> RunRecord:
        """The record in a ConfigMap's data, or a new one when ``data`` is empty."""
        if not data:
            return cls(run_id, requestor)
        try:
            run = json.loads(data.get(RUN_KEY) or "{}")
            nodes = json.loads(data.get(STATE_KEY) or "[]")
        except json.JSONDecodeError as exc:
            raise RollingError(f"the run record is not JSON ({exc})") from None
        table = isinstance(nodes, dict) and nodes.get("format") == RECORD_FORMAT
        if table:
            nodes = _from_table(nodes)
        if not isinstance(run, dict) or not isinstance(nodes, list):
            raise RollingError("the run record has the wrong shape")
        if run.get("runID", run_id) != run_id:
            raise RollingError(f"the record belongs to run {run.get('runID')!r}, not {run_id!r}")
        if run.get("requestor", requestor) != requestor:
            raise RollingError(
                f"run {run_id!r} was started by requestor {run.get('requestor')!r}; use that requestor "
                "or another run ID"
            )
        records = [NodeRecord.from_dict(item, epoch_times=table) for item in nodes]
        stopped = run.get("stopped")
        if stopped is not None and not (isinstance(stopped, dict) and isinstance(stopped.get("reason"), str)):
            raise RollingError("the run record's stop has the wrong shape")
        return cls(run_id, requestor, rfc3339.to_epoch(run.get("started")), {r.node: r for r in records}, stopped)

    # -- queries -----------------------------------------------------------------------------
    def in_state(self, *states: str) -> list[str]:
        return sorted(n for n, r in self.nodes.items() if r.state in states)

    @property
    def last_wave(self) -> int:
        return max((r.wave or 0 for r in self.nodes.values()), default=0)


def stored_nodes(data: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """node -> its record as :meth:`NodeRecord.as_dict` gives it (RFC 3339 times), from a record's ConfigMap data
    in either form: for tools, tests and people, who need not know how it is stored."""
    try:
        run = json.loads(data.get(RUN_KEY) or "{}")
    except json.JSONDecodeError as exc:
        raise RollingError(f"the run record is not JSON ({exc})") from None
    if not isinstance(run, dict):
        raise RollingError("the run record has the wrong shape")
    record = RunRecord.from_data(data, str(run.get("runID", "")), str(run.get("requestor", "")))
    return {name: node.as_dict() for name, node in record.nodes.items()}


def record_name(run_id: str) -> str:
    """The ConfigMap name of a run: ``nodeops-rolling-<run id as a DNS label>``, with a hash when the run ID
    had to be changed to fit, so two run IDs never share a record."""
    if not run_id or not run_id.strip():
        raise RollingError("the run ID is empty; give one, e.g. the change ticket")
    label = _DNS_LABEL.sub("-", run_id.lower()).strip("-")
    if label == run_id and len(NAME_PREFIX) + len(label) <= 63:
        return NAME_PREFIX + label
    digest = hashlib.sha256(run_id.encode()).hexdigest()[:10]
    return f"{NAME_PREFIX}{label[: 63 - len(NAME_PREFIX) - 11].strip('-')}-{digest}".replace("--", "-")


# ----------------------------------------------------------------------------------------- start
@dataclass
class StartPlan:
    request: list[str]  # pending: make sure a request exists
    release: list[str]  # interrupted, to release (policy release)
    fail: list[str]  # interrupted, to mark failed (policy fail)
    rerun: list[str]  # interrupted or failed nodes given back to the queue
    finished: list[str]  # done, failed or interrupted earlier: left alone
    added: list[str]  # targets new to the record


def plan_start(
    run: RunRecord,
    targets: Sequence[str],
    now: float,
    interrupted: str = "release",
    retry_failed: bool = False,
) -> StartPlan:
    """Bring the record in line with the targets at the start (or restart) of a run; mutates ``run``."""
    if interrupted not in INTERRUPTED_POLICIES:
        raise RollingError(f"interrupted policy must be one of {', '.join(INTERRUPTED_POLICIES)}")
    if run.started is None:
        run.started = now
    run.stopped = None  # a start goes on with a stopped run
    plan = StartPlan([], [], [], [], [], [])
    for node in dict.fromkeys(targets):
        record = run.nodes.get(node)
        if record is None:
            run.nodes[node] = NodeRecord(node, requested=now)
            plan.added.append(node)
            plan.request.append(node)
            continue
        if record.state == MAINTAINING:
            if interrupted == "rerun":
                _requeue(record, "interrupted; queued again (interrupted policy rerun)", now)
                plan.rerun.append(node)
                plan.request.append(node)
            elif interrupted == "fail":
                move(record, FAILED)
                record.finished = now
                record.message = "the run stopped during its maintenance (interrupted policy fail)"
                plan.fail.append(node)
            else:
                move(record, INTERRUPTED)
                record.finished = now
                record.message = "the run stopped during its maintenance; released without running it again"
                plan.release.append(node)
        elif _unreleased(record):
            plan.release.append(node)  # a run stopped before it was released
        elif record.state == FAILED and retry_failed:
            _requeue(record, "", now)
            plan.rerun.append(node)
            plan.request.append(node)
        elif record.state == PENDING:
            plan.request.append(node)
        else:
            plan.finished.append(node)
    return plan


def awaiting_release(run: RunRecord, targets: Sequence[str]) -> list[str]:
    """The targets interrupted during their maintenance and not released yet (what a start releases once they
    are Ready)."""
    return [node for node in dict.fromkeys(targets) if node in run.nodes and _unreleased(run.nodes[node])]


def _unreleased(record: NodeRecord) -> bool:
    return record.state == INTERRUPTED and record.back is None


def _requeue(record: NodeRecord, message: str, now: float) -> None:
    """Back to pending, timed afresh from ``now``."""
    move(record, PENDING)
    record.wave, record.message, record.requested = None, message, now
    record.admitted = record.ready = record.started = record.finished = record.back = None
    record.began = record.ended = None


# ------------------------------------------------------------------------------------- admissions
def observe(run: RunRecord, phases: Mapping[str, str | None], now: float, since: float | None = None) -> None:
    """Note when each pending node was first seen admitted and drained (``phases``: node -> Ready reason,
    "" before the first pass, None when the node has no request).

    ``since`` is when the pass (or look) that found ``phases`` began: a node admitted in it was admitted then,
    as the scheduler acts first in a pass; its drain ended by ``now``."""
    for node in run.in_state(PENDING):
        record = run.nodes[node]
        phase = phases.get(node)
        if phase in ACTIVE_PHASES or phase in DRAINED_PHASES:
            record.admitted = record.admitted or (now if since is None else min(since, now))
        if phase in DRAINED_PHASES:
            record.ready = record.ready or now


STOP_BLOCKERS_KEPT = 5  # the blockers a recorded stop keeps


def record_stop(run: RunRecord, stopped: Mapping[str, Any], now: float) -> dict[str, Any]:
    """Record why the run stops before its last node (``reason``, ``message``, ``blockers``), so that every step
    of the run sees it: no node is admitted any more until a start goes on with the run. The first stop on record
    stays (the others are what it caused); returns the stop on record."""
    if run.stopped is None:
        blockers = list(stopped.get("blockers") or [])[:STOP_BLOCKERS_KEPT]
        run.stopped = {
            "reason": str(stopped["reason"]),
            "message": _short(str(stopped.get("message") or "")),
            "blockers": blockers,
            "at": rfc3339.milli_time(now),
            **({"opens_at": stopped["opens_at"]} if stopped.get("opens_at") else {}),
        }
    return run.stopped


def withdraw(run: RunRecord, nodes: Iterable[str]) -> None:
    """The run stopped before their admission (window closed, gate blocked) and gave their requests back: they stay
    pending, to be requested, admitted and drained afresh when the run goes on."""
    for node in nodes:
        record = run.nodes.get(node)
        if record is not None and record.state == PENDING:
            record.admitted = record.ready = None


def admit(
    run: RunRecord,
    node: str,
    now: float,
    gather: float,
    since: float | None = None,
    max_fail_percentage: float | None = None,
) -> int | None:
    """Record ``node``, whose request the scheduler made Ready, as handed to its maintenance tasks, in an admission
    batch (the record's ``wave``): the latest one while its first node started at most ``gather`` seconds ago and
    one of its nodes is still maintaining, else a new one (so a batch, once ended, never grows). Returns the
    batch; None, and nothing changed, when the node is not pending (admitted already: a node is handed to its
    tasks once) or the run's failures are over ``max_fail_percentage``. ``since``: when the pass (or look) that
    found the request Ready began (see :func:`observe`)."""
    record = run.nodes.get(node)
    if record is None:
        raise RollingError(f"{node} is not a node of the run; a start step adds the targets first")
    if record.state != PENDING:
        return None
    if max_fail_percentage is not None and fail_budget(run, max_fail_percentage).exceeded:
        return None
    observe(run, {node: PHASE_READY}, now, since)
    last = run.last_wave
    firsts = [r.started for r in run.nodes.values() if last and r.wave == last and r.started is not None]
    joins = bool(firsts) and now - min(firsts) <= gather and not batch_ended(run, last)
    batch = last if joins else last + 1
    move(record, MAINTAINING)
    record.wave, record.started = batch, now
    return batch


def batch_ended(run: RunRecord, batch: int | None) -> bool:
    """Whether no node of admission batch ``batch`` is maintaining any more."""
    return batch is not None and not any(r.state == MAINTAINING for r in run.nodes.values() if r.wave == batch)


def batch_of(run: RunRecord, batch: int) -> tuple[list[str], dict[str, str]]:
    """The nodes of an admission batch, and why those that failed failed."""
    nodes = sorted(n for n, r in run.nodes.items() if r.wave == batch)
    return nodes, {n: run.nodes[n].message or "failed" for n in nodes if run.nodes[n].state == FAILED}


def node_outcome(
    run: RunRecord, node: str, failure: str | None, now: float, timing: Sequence[float] | None = None
) -> bool:
    """Record what the maintenance tasks of one admitted node reported: ``failure`` (its message; None when they
    passed). A node that passed stays ``maintaining``, with ``finished`` set, until it is Ready and released.
    Returns False when its outcome is on record already (a report again changes nothing: a release that failed
    after recording it is tried again)."""
    record = run.nodes.get(node)
    if record is None:
        raise RollingError(f"{node} is not a node of the run; a start step adds the targets first")
    if record.state != MAINTAINING:
        if record.state in (DONE, FAILED) and record.finished is not None:
            return False
        after = (
            " (a start of the run since took it over as interrupted during its maintenance)"
            if record.state == INTERRUPTED
            else ""
        )
        raise RollingError(f"{node} is {record.state}; only an admitted node has an outcome{after}")
    if record.finished is not None:
        return False
    if timing is not None and len(timing) == 2 and timing[0] <= timing[1]:
        record.began, record.ended = float(timing[0]), float(timing[1])
    record.finished = now
    if failure is not None:
        mark_failed(run, node, failure or "the maintenance failed", now)
    return True


# --------------------------------------------------------------------------------------- outcomes
def mark_done(run: RunRecord, node: str, now: float) -> None:
    record = run.nodes[node]
    move(record, DONE)
    record.back = now
    if not record.message.startswith("interrupted"):
        record.message = ""


def mark_failed(run: RunRecord, node: str, message: str, now: float) -> None:
    record = run.nodes[node]
    move(record, FAILED)
    record.message = message
    record.finished = record.finished or now


def mark_released(run: RunRecord, node: str, now: float) -> None:
    """An interrupted node is back and released."""
    run.nodes[node].back = now


@dataclass
class FailBudget:
    failed: int
    total: int
    percentage: float
    exceeded: bool


def fail_budget(run: RunRecord, max_fail_percentage: float) -> FailBudget:
    """Ansible's rule: stop when more than ``max_fail_percentage`` of the nodes failed."""
    if not 0 <= max_fail_percentage <= 100:
        raise RollingError(f"max_fail_percentage must be between 0 and 100, not {max_fail_percentage:g}")
    failed = len(run.in_state(FAILED))
    total = len(run.nodes)
    percentage = 100.0 * failed / total if total else 0.0
    return FailBudget(failed, total, round(percentage, 2), percentage > max_fail_percentage)


# ---------------------------------------------------------------------------------------- summary
def _span(start: float | None, end: float | None) -> float | None:
    return None if start is None or end is None else round(max(0.0, end - start), 3)


def summary_rows(run: RunRecord) -> list[dict[str, Any]]:
    """Per node, in the order of the admission batches: its batch (``wave``), how long it waited for the
    scheduler, drained, was maintained and took to come back, and the outcome."""
    rows = []
    for record in sorted(run.nodes.values(), key=lambda r: (r.wave or 1 << 30, r.node)):
        rows.append(
            {
                "node": record.node,
                "wave": record.wave,
                "outcome": record.state,
                "waited": _span(record.requested, record.admitted),
                "drained": _span(record.admitted, record.ready),
                "maintained": _span(record.began, record.ended)
                if record.ended is not None
                else _span(record.started, record.finished),
                "back": _span(record.ended or record.finished, record.back),
                "message": record.message,
            }
        )
    return rows


def render_summary(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The rows as a fixed-width table, one string a line (for a debug task's ``msg``)."""
    head = ("node", "wave", "waited", "drained", "maintained", "back", "outcome")

    def cell(value: Any) -> str:
        if value is None:
            return "-"
        return f"{value:.1f}s" if isinstance(value, float) else str(value)

    table = [head] + [tuple(cell(r[k]) for k in head) for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in table]
    lines += [f"{r['node']}: {r['message']}" for r in rows if r["message"] and r["outcome"] != DONE]
    return lines
