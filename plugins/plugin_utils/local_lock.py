# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A lock that the worker processes of one ``ansible-playbook`` share: an exclusive ``flock`` on a file in the
run's own temporary directory (Ansible's local tmp, made private to the user by ``ansible-playbook`` when it
starts and removed when it ends). The kernel lets go of it when its holder dies, so a killed worker leaves no
lock behind.

It only saves work (what it guards must be right without it, as the record's conditional writes are): a holder
that takes longer than ``wait`` (a slow API server) or a lock file that cannot be opened lets the caller go on
without it."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import time
from collections.abc import Iterator

# Seconds a caller waits for the lock before it goes on without it. Long: one that goes on without it meets the
# others' Conflicts, each a read and a write of the whole record (at 2,000 nodes, most of 400 waiters went on
# after 10 s, and Conflicts outnumbered the writes that went through a hundred to one).
WAIT = 300.0
PAUSE = 0.005, 0.2  # the first and the longest pause between two tries (it doubles)


@contextlib.contextmanager
def held(directory: str, key: str, wait: float = WAIT) -> Iterator[bool]:
    """Hold the lock named ``key`` (any text: it is hashed into a file name) in ``directory`` until the block
    ends; yields whether it got it (False: the block runs without it)."""
    name = "nodeops-" + hashlib.sha256(key.encode()).hexdigest()[:24] + ".lock"
    try:
        fd = os.open(os.path.join(directory, name), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError:
        yield False
        return
    try:
        deadline, pause = time.monotonic() + wait, PAUSE[0]
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    break
                time.sleep(pause)
                pause = min(pause * 2, PAUSE[1])
                continue
            yield True
            return
        yield False
    finally:
        os.close(fd)  # closing the file lets go of the lock
