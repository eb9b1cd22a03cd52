# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A process of its own for work that outlives the task that starts it (a rolling run's driver): forked twice from
the action's worker, in a session of its own, with its standard streams on /dev/null. Ansible ends the worker with
the task; the detached process goes on until its work ends, and looks at ``alive`` for when to stop early."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Process:
    """A process as it was when it was named: its ID and, where the system shows it, when it started, so that a
    process that ended and left its ID to another is not taken for it."""

    pid: int
    started: str | None

    @classmethod
    def of(cls, pid: int) -> Process:
        return cls(pid, _stat(pid)[1])

    def alive(self) -> bool:
        """Whether the process is still there: not gone, not a zombie, not another one under the same ID."""
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # there, under another user
            pass
        state, started = _stat(self.pid)
        if state is None:  # no /proc: the signal's answer is all there is
            return True
        return state not in ("Z", "X") and started == self.started


def _stat(pid: int) -> tuple[str | None, str | None]:
    """The state letter and start time (clock ticks after boot) of ``pid`` from /proc; Nones without it."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()  # after the command, which may hold spaces
    except (OSError, IndexError):
        return None, None
    return (fields[0], fields[19]) if len(fields) > 19 else (None, None)


def _leave_on_term(_signum: int, _frame: object) -> None:
    sys.exit(0)  # through the work's own clean-up (a held Lease is given back)


def start(work: Callable[[], None]) -> int:
    """Run ``work`` in a detached process; its process ID. The process ends with ``work`` (whatever it raises),
    never returning into the caller's code; SIGTERM ends it through ``work``'s clean-up. OSError when it could not
    be started."""
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child's own lines are seen by the test through what it does
        code = 0
        try:
            os.close(read_end)
            os.setsid()  # no signal of the terminal (Ctrl-C) reaches it; alive() tells it when to end
            worker = os.fork()
            if worker:
                os.write(write_end, str(worker).encode())
            else:
                os.close(write_end)
                # not the handlers of the worker it was forked from (Ansible's, which end the worker)
                signal.signal(signal.SIGTERM, _leave_on_term)
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                null = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(null, fd)
                try:
                    work()
                except BaseException:  # nothing to report to: the work ends, what depends on it goes on without it
                    code = 1
        finally:
            os._exit(code)
    os.close(write_end)
    os.waitpid(child, 0)
    with os.fdopen(read_end, "rb") as reader:
        answer = reader.read()
    if not answer.isdigit() or int(answer) == 0:
        raise OSError("the detached process could not be forked")
    return int(answer)
