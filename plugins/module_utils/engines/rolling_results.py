# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the steps of a rolling maintenance run return (``engines/rolling.py``), as typed results; the module
renders each with :meth:`StepResult.as_dict` into the values its documentation lists (RETURN of
``rolling_maintenance``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar


@dataclass(frozen=True)
class RunStatus:
    """Where the run stands: every step's result carries it (but a start that the window stopped before it wrote
    anything)."""

    run_id: str
    record: str  # namespace/name of the run's ConfigMap
    waves: int  # admission batches so far
    counts: dict[str, int]  # state -> nodes
    need_a_look: list[str]  # failed or interrupted
    failed_nodes: list[str]
    interrupted_nodes: list[str]
    failed_percentage: float
    complete: bool  # no node pending or in its maintenance


@dataclass(frozen=True)
class Waiting:
    """A wait a step hands back with ``progress_after``: what it waits for and since when; the same step called
    with its ``resume`` goes on with the same deadline."""

    phase: str  # one of engines.rolling.WAIT_PHASES: the resume token's phase
    since: float  # when the wait began (seconds since the epoch)
    waited: float
    timeout: float
    message: str
    resume_nodes: list[str] | None = None  # the nodes the next call waits for (None: not part of the token)
    details: Mapping[str, Any] = field(default_factory=dict)  # nodes_not_ready, blockers

    def resume(self) -> dict[str, Any]:
        token: dict[str, Any] = {"phase": self.phase, "since": self.since}
        if self.resume_nodes is not None:
            token["nodes"] = list(self.resume_nodes)
        return token

    def as_dict(self) -> dict[str, Any]:
        return {
            "phase": self.phase,
            "since": self.since,
            "waited": self.waited,
            "timeout": self.timeout,
            "message": self.message,
            **self.details,
        }


@dataclass
class StepResult:
    """What every step returns: whether it changed something, the run's status, and the wait it handed back.
    A field listed in ``OMITTED_WHEN_NONE`` is left out of the rendered result while it is None (the module's
    documentation says when it is returned); any other field is always there."""

    changed: bool = False
    status: RunStatus | None = None
    waiting: Waiting | None = None

    OMITTED_WHEN_NONE: ClassVar[frozenset[str]] = frozenset()

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"changed": self.changed}
        for f in fields(self):
            if f.name in ("changed", "status", "waiting"):
                continue
            value = getattr(self, f.name)
            if value is None and f.name in self.OMITTED_WHEN_NONE:
                continue
            out[f.name] = value
        if self.waiting is not None:
            out["waiting"] = self.waiting.as_dict()
            out["resume"] = self.waiting.resume()
        if self.status is not None:
            out.update(vars(self.status))
        return out


@dataclass
class StartResult(StepResult):
    requested: list[dict[str, Any]] = field(default_factory=list)  # the requests made (or given back, deferred)
    added: list[str] = field(default_factory=list)
    interrupted: list[str] = field(default_factory=list)
    requeued: list[str] = field(default_factory=list)
    released: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    window: dict[str, Any] | None = None
    stopped: dict[str, Any] | None = None
    overrides: list[str] | None = None  # the module's: limits given as variables over the config's

    OMITTED_WHEN_NONE = frozenset(("window", "stopped", "overrides"))


@dataclass
class AdmitResult(StepResult):
    node: str = ""
    admitted: bool = False  # this call handed the node to its maintenance tasks
    opened: bool = False  # ... in a new admission batch
    wave: int | None = None  # the admission batch it joined
    state: str | None = None  # the node's state on record
    done: bool = False  # no node of the run is left pending
    abort: bool = False  # the failures are over max_fail_percentage
    gates: dict[str, Any] | None = None  # what the gates did before the admission
    stopped: dict[str, Any] | None = None  # why the run stopped (nothing admitted)
    withdrawn: list[str] | None = None  # with a stop: the node, when its request was given back
    window: dict[str, Any] | None = None
    failure: str | None = None  # its Node object is gone

    OMITTED_WHEN_NONE = frozenset(("gates", "stopped", "withdrawn", "window", "failure"))


@dataclass
class ReleaseResult(StepResult):
    node: str = ""
    wave: int | None = None  # the node's admission batch
    batch_ended: dict[str, Any] | None = None  # the batch this call ended: wave, nodes, failures
    state: str | None = None
    failure: str | None = None  # why the node failed, as the record has it
    released: list[str] = field(default_factory=list)
    abort: bool = False

    OMITTED_WHEN_NONE = frozenset(("wave", "state"))


@dataclass
class DriveResult(StepResult):
    passes: int = 0
    errors: list[str] = field(default_factory=list)


@dataclass
class StopResult(StepResult):
    stopped: dict[str, Any] | None = None


@dataclass
class SummaryResult(StepResult):
    nodes: list[dict[str, Any]] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    stopped: dict[str, Any] | None = None
