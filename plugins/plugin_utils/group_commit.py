# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Group commits for the worker processes of one ``ansible-playbook``: many workers each ask for a change of one
shared object (a rolling run's record), and whichever of them holds the lock applies every change asked for so
far, in one write, and hands each its result. With hundreds of hosts in a run, one write for each change (a read
and a write of the whole record, one worker after the other) was the bound of the whole run.

A key (any text, hashed into the names) has, in Ansible's local tmp (private to the user, removed when
``ansible-playbook`` ends):

- a lock file: an exclusive ``flock``, let go of by the kernel when its holder dies;
- a queue directory: a change is a file ``<time>-<pid>-<random>.op``; the holder claims it by renaming it to
  ``.taken`` (one rename wins), applies it and writes ``.res`` next to it; what the changes share (the record as
  written) is written once, in a ``.shared`` file each result names.

A worker that finds its result goes on with it. One that waits ``wait`` seconds without it withdraws its change
(renaming it away, which fails once a holder claimed it: then it waits for the answer) and applies it alone; a
worker whose step ends in its wait (an error, the task's timeout, an interrupt) withdraws its change, and a
holder drops the change of a worker that is gone. A change claimed by a holder that died before answering is
applied again by its own worker (what the changes do must recognise their own effect, as the record's do). A
holder whose ``apply`` fails puts the others' changes back in the queue for the next holder and fails alone. A
group that cannot be set up (no directory, say) means no group: the caller applies its change alone."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

# seconds a worker waits for its result or the lock before it applies its change alone (long: a change applied
# alone meets the writes of the holders, each a Conflict and a read and a write of the whole record again)
WAIT = 300.0
PAUSE = 0.005, 0.1  # the first and the longest pause between two looks (it doubles)
SHARED_KEPT = 300.0  # seconds a shared file is kept for the workers that have not read their result yet

Apply = Callable[[list[dict[str, Any]]], tuple[Any, list[dict[str, Any]]]]


class Group:
    def __init__(self, directory: str, key: str) -> None:
        name = "nodeops-" + hashlib.sha256(key.encode()).hexdigest()[:24]
        self.lock_path = os.path.join(directory, name + ".lock")
        self.queue = os.path.join(directory, name + ".d")

    def commit(self, change: dict[str, Any], apply: Apply, wait: float = WAIT) -> tuple[Any, dict[str, Any]] | None:
        """Have ``change`` applied, with the changes the other workers asked for: ``apply(changes)`` (run by the
        holder, in its own process) returns what they share and a result for each change (JSON, in their order).
        Returns the shared part (None when its file is gone) and this change's result; None when the change was
        not applied, to be applied by the caller alone (no group, or none came within ``wait`` seconds)."""
        try:
            with contextlib.suppress(FileExistsError):
                os.mkdir(self.queue, 0o700)  # not its parents: Ansible's local tmp is there while the run goes on
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError:
            return None
        try:
            own = self._ask(change)
        except OSError:
            os.close(fd)
            return None
        try:
            return self._wait(fd, own, apply, time.monotonic() + wait)
        except BaseException:
            # the step ends here (an error of its own, the task's timeout, an interrupt): its change must not be
            # applied after it gave up, unless a holder claimed it already (then it may be on record, as a write
            # whose answer was lost may be)
            _withdraw(own)
            raise
        finally:
            os.close(fd)  # closing the file lets go of the lock

    def _ask(self, change: dict[str, Any]) -> str:
        stem = os.path.join(self.queue, f"{time.time_ns():020d}-{os.getpid()}-{os.urandom(4).hex()}")
        _write(stem + ".op", change)
        return stem

    def _wait(self, fd: int, own: str, apply: Apply, deadline: float) -> tuple[Any, dict[str, Any]] | None:
        pause = PAUSE[0]
        while True:
            answer = self._answer(own)
            if answer is not None:
                return answer
            if _try_lock(fd):
                try:
                    answer = self._answer(own)  # answered while the lock was on its way
                    if answer is not None:
                        return answer
                    return self._hold(own, apply)
                finally:
                    fcntl.flock(fd, fcntl.LOCK_UN)
            if time.monotonic() >= deadline and _withdraw(own):
                return None  # not claimed: no holder applies it now
            # claimed (it waits for the answer, or for the lock of a holder that died) or not due yet
            time.sleep(pause)
            pause = min(pause * 2, PAUSE[1])

    def _answer(self, own: str) -> tuple[Any, dict[str, Any]] | None:
        try:
            with open(own + ".res", encoding="utf-8") as handle:
                answer = json.load(handle)
        except FileNotFoundError:
            return None
        os.unlink(own + ".res")
        shared = None
        with (
            contextlib.suppress(OSError, ValueError),
            open(os.path.join(self.queue, answer["shared"]), encoding="utf-8") as handle,
        ):
            shared = json.load(handle)
        return shared, answer["result"]

    def _hold(self, own: str, apply: Apply) -> tuple[Any, dict[str, Any]]:
        """Under the lock: claim every change asked for (this worker's own too, claimed before by a holder that
        died), apply them in the order they were asked for, answer each."""
        if not os.path.exists(own + ".taken"):  # else claimed by a holder that died before it answered
            os.rename(own + ".op", own + ".taken")
        stems = [own]
        for name in os.listdir(self.queue):
            stem = os.path.join(self.queue, name[: -len(".op")])
            if not name.endswith(".op") or stem == own:
                continue
            if not _alive(name):  # its worker was killed before it withdrew it
                _withdraw(stem)
                continue
            with contextlib.suppress(OSError):  # withdrawn by its worker meanwhile
                os.rename(stem + ".op", stem + ".taken")
                stems.append(stem)
        stems.sort(key=os.path.basename)  # the names start with the time they were asked at
        changes: list[dict[str, Any]] = []
        claimed: list[str] = []
        try:
            for stem in stems:
                try:
                    with open(stem + ".taken", encoding="utf-8") as handle:
                        changes.append(json.load(handle))
                    claimed.append(stem)
                except (OSError, ValueError):  # another's: not this holder's to judge, left for its worker
                    if stem == own:
                        raise
            shared, results = apply(changes)
        except BaseException:
            for stem in stems:  # the others' changes back in the queue, for the next holder
                if stem != own:
                    with contextlib.suppress(OSError):
                        os.rename(stem + ".taken", stem + ".op")
            with contextlib.suppress(OSError):
                os.unlink(own + ".taken")
            raise
        # the answers, as far as they can be written: a worker left without one applies its change again alone
        shared_name = os.path.basename(own) + ".shared"
        with contextlib.suppress(OSError):
            _write(os.path.join(self.queue, shared_name), shared)
        mine: dict[str, Any] = {}
        for stem, result in zip(claimed, results, strict=True):
            if stem == own:
                mine = result
                continue
            with contextlib.suppress(OSError):
                _write(stem + ".res", {"shared": shared_name, "result": result})
                os.unlink(stem + ".taken")
        with contextlib.suppress(OSError):
            os.unlink(own + ".taken")
        self._sweep()
        return shared, mine

    def _sweep(self) -> None:
        """Files no worker reads any more: shared records and answers past SHARED_KEPT, parts of failed writes."""
        before = time.time() - SHARED_KEPT
        for entry in os.scandir(self.queue):
            with contextlib.suppress(OSError):
                if entry.name.endswith((".shared", ".res", ".part")) and entry.stat().st_mtime < before:
                    os.unlink(entry.path)


def _withdraw(stem: str) -> bool:
    """Take a change out of the queue before a holder claims it (one rename wins); False: claimed already."""
    try:
        os.rename(stem + ".op", stem + ".dropped")
    except OSError:
        return False
    with contextlib.suppress(OSError):
        os.unlink(stem + ".dropped")
    return True


def _alive(name: str) -> bool:
    """Whether the worker that asked for a change (its pid is in the name) is still there."""
    try:
        os.kill(int(name.split("-")[1]), 0)
    except ProcessLookupError:
        return False
    except (ValueError, IndexError, OSError):
        return True  # not ours to judge
    return True


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _write(path: str, value: Any) -> None:
    """Write JSON whole or not at all (a reader never sees a part of it)."""
    part = path + ".part"
    with _opened(part) as handle:
        json.dump(value, handle, separators=(",", ":"))
    os.replace(part, path)


@contextlib.contextmanager
def _opened(path: str) -> Iterator[Any]:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        yield handle
