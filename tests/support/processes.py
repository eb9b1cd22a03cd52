"""Kill a command and everything it started, for tests that kill a run half way.

``os.killpg`` on the process group of ``ansible`` / ``ansible-playbook`` is not enough: ansible-core's
worker processes call ``setsid()`` (their own session and process group), so the module a worker runs
survives a kill of the group and finishes its work behind the test's back. ``kill_tree`` finds the
processes by parentage in ``/proc``, stops them first (so that none forks or exits while the tree is
read) and then kills each one by its PID.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

PROC = Path("/proc")


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent PID) of a process, None when it is gone."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = text[text.rindex(")") + 2 :].split()  # the command name may hold spaces and parentheses
    return fields[0], int(fields[1])


def children_by_parent() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat is not None:
                tree.setdefault(stat[1], []).append(int(entry.name))
    return tree


def process_tree(pid: int) -> set[int]:
    """``pid`` and its descendants that are still running (zombies left out)."""
    tree = children_by_parent()
    found: set[int] = set()
    todo = [pid]
    while todo:
        current = todo.pop()
        stat = _stat(current)
        if current in found or stat is None or stat[0] == "Z":
            continue
        found.add(current)
        todo.extend(tree.get(current, []))
    return found


def alive(pid: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[0] != "Z"


def kill_tree(pid: int, timeout: float = 60.0) -> set[int]:
    """SIGKILL ``pid`` and all its descendants; returns their PIDs once none of them runs any more.

    The caller still reaps ``pid`` itself (``Popen.wait``); the others are reaped by init.
    """
    stopped = stop_tree(pid)  # a stopped process cannot fork
    for member in stopped:
        with contextlib.suppress(ProcessLookupError):
            os.kill(member, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while any(alive(member) for member in stopped - {pid}):
        if time.monotonic() > deadline:
            raise AssertionError(f"processes still running after SIGKILL: {sorted(p for p in stopped if alive(p))}")
        time.sleep(0.05)
    return stopped


def stop_tree(pid: int) -> set[int]:
    """SIGSTOP ``pid`` and all its descendants (until no new descendant shows up); returns their PIDs."""
    stopped: set[int] = set()
    while True:
        new = set().union(*(process_tree(member) for member in {pid} | stopped)) - stopped
        if not new:
            return stopped
        for member in new:
            with contextlib.suppress(ProcessLookupError):
                os.kill(member, signal.SIGSTOP)
        stopped |= new


def continue_tree(pids: set[int]) -> None:
    """SIGCONT every process of ``pids`` (those still there)."""
    for member in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(member, signal.SIGCONT)
