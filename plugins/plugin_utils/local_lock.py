# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A lock that the worker processes of one ``ansible-playbook`` share: an exclusive ``flock`` on a file in the
run's own temporary directory (Ansible's local tmp, made private to the user by ``ansible-playbook`` when it
starts and removed when it ends). The kernel lets go of it when its holder dies, so a killed worker leaves no
lock behind."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
from collections.abc import Iterator


@contextlib.contextmanager
def held(directory: str, key: str) -> Iterator[None]:
    """Hold the lock named ``key`` (any text: it is hashed into a file name) in ``directory`` until the block
    ends."""
    name = "nodeops-" + hashlib.sha256(key.encode()).hexdigest()[:24] + ".lock"
    fd = os.open(os.path.join(directory, name), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the file lets go of the lock
