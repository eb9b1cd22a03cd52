# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A doorbell between a rolling run's driver and the steps of its nodes' hosts: processes of one
``ansible-playbook`` on the controller. The driver runs the reconcile passes; each host's step waits for what a
pass does to its node's request (made ready, or gone once given back). Without the bell each waiting step reads
its request from the API server every poll interval: with hundreds of hosts waiting that is hundreds of reads a
second, which slow the driver's own writes on the same API server. With it, a step reads its request when the
driver rang for its node, and otherwise only every few seconds.

The bell only says when to look. What a step decides, it decides on what it then reads from the API server, so
a bell that rings wrongly, late or never costs time, never safety.

A key (the API server and the requests' namespace, hashed into the name) has, in Ansible's local tmp (private to
the user, removed when ``ansible-playbook`` ends), a directory with a file per node, whose modification time the
driver sets when a pass changed that node's request, and a heartbeat file the driver touches every second while
it holds the Lease (so while the heartbeat is fresh, the steps run no pass of their own: they would find the
Lease held). Anything that cannot be set up or read means no bell: the steps poll as before."""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence

BEAT = 1.0  # seconds between two heartbeats of the driver
LIVE = 3.0  # a heartbeat at most this old says that the driver holds the Lease
TICK = 0.1  # seconds between two looks at the bell while a step waits
HEARTBEAT = ".driver"


class Bell:
    def __init__(self, directory: str, key: str) -> None:
        self.path = os.path.join(directory, "nodeops-bell-" + hashlib.sha256(key.encode()).hexdigest()[:24])

    def _file(self, node: str) -> str | None:
        # a node's name is a DNS subdomain; anything else rings nothing
        if not node or node.startswith(".") or "/" in node or "\0" in node:
            return None
        return os.path.join(self.path, node)

    def _touch(self, path: str) -> None:
        with contextlib.suppress(FileExistsError):
            os.mkdir(self.path, 0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            now = time.time_ns()
            os.utime(fd, ns=(now, now))
        finally:
            os.close(fd)

    def ring(self, node: str) -> None:
        """The driver: a pass changed the request of ``node``."""
        path = self._file(node)
        if path is not None:
            with contextlib.suppress(OSError):
                self._touch(path)

    @contextlib.contextmanager
    def beating(self, holding: Callable[[], bool] = lambda: True) -> Iterator[None]:
        """The driver, while it holds the Lease: a heartbeat every BEAT seconds from a thread, for as long as the
        block runs and ``holding`` says that the Lease is still shown to be held (a driver whose renewals fail
        stops beating, and the steps look at the Lease themselves again)."""
        stop = threading.Event()
        heartbeat = os.path.join(self.path, HEARTBEAT)

        def beat() -> None:
            while not stop.wait(BEAT):
                if holding():
                    with contextlib.suppress(OSError):
                        self._touch(heartbeat)

        with contextlib.suppress(OSError):  # the first at once: live when the block begins
            self._touch(heartbeat)

        thread = threading.Thread(target=beat, name="nodeops-bell-heartbeat", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
            with contextlib.suppress(OSError):  # the steps stop relying on the driver at once
                os.unlink(heartbeat)

    def live(self) -> bool:
        """A step: whether a driver's heartbeat is fresh (it holds the Lease and rings)."""
        try:
            beat = os.stat(os.path.join(self.path, HEARTBEAT)).st_mtime
        except OSError:
            return False
        return 0.0 <= time.time() - beat < LIVE

    def state(self, nodes: Sequence[str]) -> tuple[int, ...]:
        """A step, before it reads its requests: the bell of ``nodes`` as it is now, for :meth:`wait`."""
        out = []
        for node in nodes:
            path = self._file(node)
            try:
                out.append(os.stat(path).st_mtime_ns if path is not None else 0)
            except OSError:
                out.append(0)
        return tuple(out)

    def wait(self, nodes: Sequence[str], state: tuple[int, ...], seconds: float) -> bool:
        """A step: wait until the driver rang for one of ``nodes`` since ``state`` was taken, at most ``seconds``;
        also ends when the heartbeat goes stale (the step runs its own passes then). Whether it rang."""
        deadline = time.monotonic() + seconds
        while True:
            if self.state(nodes) != state:
                return True
            left = deadline - time.monotonic()
            if left <= 0 or not self.live():
                return False
            time.sleep(min(TICK, left))
