# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The changes a rolling run's steps make to its record, as data: a JSON object names the change and its
arguments, so that the change a host's step asks for can be applied by whichever process of the run writes the
record next, together with the changes the other hosts asked for (one write for many, see the engine's
``update``). Every time a change needs is in it (the step's clock, read when it decided).

Pure: no I/O and no clock.

``admit``     node, now, began, gather, max_fail_percentage -> [batch or None, opened a batch, own]
``failed``    node, message, now -> None (the node failed: its Node went away, or it did not come back)
``withdraw``  nodes, stop (optional) -> None (pending nodes given back; the stop recorded when given)
``stop``      stop, now -> the stop on record
``outcome``   node, failure, timing, now -> whether the outcome was new
``released``  node, now -> None (a failed or interrupted node released)
``done``      node, now -> None (a maintained node back and released)

With ``"leave": true`` the value is ``[value, batch, own]``: the admission batch that this change ended (it took
``node`` out of ``maintaining`` and no node of its batch is maintaining any more), else None; and whether the
change was on record already, applied again (its first write went through though its answer was lost, or the
process that wrote it for the step died before it said so): its value and batch are those of its first time.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from . import rolling as core

KINDS = ("admit", "failed", "withdraw", "stop", "outcome", "released", "done")


def apply(run: core.RunRecord, change: Mapping[str, Any]) -> tuple[Any, bool]:
    """Apply ``change`` to ``run``: what it returns (JSON), and whether it changed the record. A change the record
    refuses raises RollingError and changes nothing (the rules check before they change)."""
    kind = change.get("kind")
    if kind not in KINDS:
        raise core.RollingError(f"unknown change of the record {kind!r}")
    nodes = [n for n in _nodes(change) if n in run.nodes]
    rows, stopped = [core.stored_row(run.nodes[n]) for n in nodes], copy.deepcopy(run.stopped)
    value = _apply(run, kind, change)
    return value, [core.stored_row(run.nodes[n]) for n in nodes] != rows or run.stopped != stopped


def _nodes(change: Mapping[str, Any]) -> list[str]:
    if change.get("node") is not None:
        return [str(change["node"])]
    return [str(n) for n in change.get("nodes") or ()]


def _apply(run: core.RunRecord, kind: str, change: Mapping[str, Any]) -> Any:
    node = change.get("node")
    if kind == "admit":
        return _admit(run, change)
    if kind == "withdraw":
        core.withdraw(run, change.get("nodes") or ())
        if change.get("stop") is not None:
            core.record_stop(run, change["stop"], change["now"])
        return None
    if kind == "stop":
        return core.record_stop(run, change["stop"], change["now"])
    if node not in run.nodes:
        raise core.RollingError(f"{node} is not a node of the run; a start step adds the targets first")
    if change.get("leave") and _left_already(run.nodes[node], kind, change):
        return [True if kind == "outcome" else None, _last_out(run, node), True]
    was = run.nodes[node].state
    value: Any = None
    if kind == "failed":
        core.mark_failed(run, node, change["message"], change["now"])
    elif kind == "outcome":
        value = _outcome(run, node, change)
    elif kind == "released":
        core.mark_released(run, node, change["now"])
    else:  # done
        core.mark_done(run, node, change["now"])
    if not change.get("leave"):
        return value
    record = run.nodes[node]
    out = was == core.MAINTAINING and record.state != core.MAINTAINING
    return [value, record.wave if out and core.batch_ended(run, record.wave) else None, False]


def _left_already(record: core.NodeRecord, kind: str, change: Mapping[str, Any]) -> bool:
    """Whether this change of a node's release is on record already: the node out of ``maintaining`` with this
    change's time (or message) in its row."""
    now = change.get("now")
    if kind == "done":
        return record.state == core.DONE and _same_ms(record.back, now)
    if kind == "outcome":
        return record.state != core.MAINTAINING and _same_ms(record.finished, now)
    return (
        record.state == core.FAILED
        and record.message
        == core.stored_row(core.NodeRecord(record.node, message=str(change.get("message") or "")))[-1]
    )


def _last_out(run: core.RunRecord, node: str) -> int | None:
    """The batch of ``node`` when it has ended and no node of it left after ``node`` (by the times on record)."""
    record = run.nodes[node]
    if not core.batch_ended(run, record.wave):
        return None

    def out(r: core.NodeRecord) -> float:
        return max(t for t in (r.back, r.finished, 0.0) if t is not None)

    return record.wave if all(out(r) <= out(record) for r in run.nodes.values() if r.wave == record.wave) else None


def _admit(run: core.RunRecord, change: Mapping[str, Any]) -> list[Any]:
    node, now = change["node"], change["now"]
    record = run.nodes.get(node)
    if record is not None and record.state == core.MAINTAINING and _same_ms(record.started, now):
        # the step's own admission, on record already: a write of it went through though its answer was lost (or
        # the process that wrote it for the step died before it said so), and other writes came after it
        starts = [x.started for x in run.nodes.values() if x.wave == record.wave and x.started]
        return [record.wave, min(starts) == record.started, True]
    if run.stopped is not None:  # stopped meanwhile: not admitted
        return [None, False, False]
    last = run.last_wave
    batch = core.admit(run, node, now, change["gather"], change.get("began"), change.get("max_fail_percentage"))
    return [batch, batch is not None and batch > last, False]


def _outcome(run: core.RunRecord, node: str, change: Mapping[str, Any]) -> bool:
    now = change["now"]
    started = run.nodes[node].started
    timing = change.get("timing")
    # without the tasks' own span, from the admission (the maintenance starts right after it) to now
    span = timing if timing else (None if started is None else (started, now))
    return core.node_outcome(run, node, change.get("failure"), now, span)


def _same_ms(stored: float | None, written: float | None) -> bool:
    """Whether a time read back from the record is ``written`` (the record keeps milliseconds)."""
    return stored is not None and written is not None and abs(stored - written) < 0.001
