# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A process of its own for work that outlives the task that starts it (a rolling run's driver): forked twice from
the action's worker, in a session of its own, with its standard streams on /dev/null. Ansible ends the worker with
the task; the detached process goes on until its work ends, and looks at ``alive`` for when to stop early."""

from __future__ import annotations

import os
from collections.abc import Callable


def alive(pid: int) -> bool:
    """Whether process ``pid`` (the ``ansible-playbook`` that started the work) is still there."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # there, under another user
        return True
    return True


def start(work: Callable[[], None]) -> int:
    """Run ``work`` in a detached process; its process ID. The process ends with ``work`` (whatever it raises),
    never returning into the caller's code."""
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
    try:
        os.waitpid(child, 0)
        with os.fdopen(read_end, "rb") as reader:
            return int(reader.read() or b"0")
    except ValueError:
        return 0
