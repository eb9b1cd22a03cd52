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

With ``"leave": true`` the value is ``[value, batch]``: the admission batch that this change ended (it took
``node`` out of ``maintaining`` and no node of its batch is maintaining any more), else None.
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
    before = [copy.copy(run.nodes[n]) for n in nodes], copy.deepcopy(run.stopped)
    value = _apply(run, kind, change)
    return value, [run.nodes[n] for n in nodes] != before[0] or run.stopped != before[1]


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
    return [value, record.wave if out and core.batch_ended(run, record.wave) else None]


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


def _same_ms(stored: float | None, written: float) -> bool:
    """Whether a time read back from the record is ``written`` (the record keeps milliseconds)."""
    return stored is not None and abs(stored - written) < 0.001
