"""The detached process of a rolling run's driver: started apart from the worker, ended by SIGTERM through its own
clean-up, and the playbook it watches told apart from a zombie or another process under the same ID."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

from ansible_collections.nodeops.maintenance.plugins.plugin_utils import detach


def poll(condition: object, what: str, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        threading.Event().wait(0.02)


def test_a_running_process_is_alive_and_one_that_ended_is_not_even_as_a_zombie() -> None:
    assert detach.Process.of(os.getpid()).alive()
    child = os.fork()
    if child == 0:
        os._exit(0)
    process = detach.Process.of(child)
    poll(lambda: not process.alive(), "an ended child (a zombie until reaped) still counts as alive")
    os.waitpid(child, 0)
    assert not process.alive()


def test_another_process_under_the_same_id_is_not_taken_for_the_one_named() -> None:
    me = detach.Process.of(os.getpid())
    assert me.started is not None and detach.Process.of(os.getpid()) == me  # the test machines have /proc
    assert not detach.Process(os.getpid(), "0").alive()
    # the start time read is the process's own: a child started later (a clock tick is 10 ms) has a later one
    threading.Event().wait(0.05)
    child = os.fork()
    if child == 0:
        threading.Event().wait(30)
        os._exit(0)
    try:
        later = detach.Process.of(child)
        assert later.started is not None and int(later.started) > int(me.started)
        assert later.alive()
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)


def test_detached_work_runs_apart_and_sigterm_ends_it_through_its_clean_up(tmp_path: Path) -> None:
    began, cleaned = tmp_path / "began", tmp_path / "cleaned"

    def work() -> None:
        try:
            ready = began.with_suffix(".part")
            ready.write_text(f"{os.getpid()} {os.getsid(0)}")
            ready.rename(began)  # whole when it is there
            threading.Event().wait(600)
        finally:
            cleaned.write_text("given back")

    pid = detach.start(work)
    poll(began.exists, "the detached work never started")
    worker, session = (int(x) for x in began.read_text().split())
    assert worker == pid and session != os.getsid(0)  # a session of its own: no terminal signal reaches it
    os.kill(pid, signal.SIGTERM)
    poll(cleaned.exists, "SIGTERM did not end the work through its clean-up")
    assert cleaned.read_text() == "given back"
