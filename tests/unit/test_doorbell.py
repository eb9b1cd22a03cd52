"""The doorbell between a rolling run's driver and its nodes' steps: a ring for a node is seen by a step that took
the bell's state before it, whenever the ring came; the heartbeat says that a driver holds the Lease only while it
beats; nothing outside the bell's own directory is touched; without a directory there is no bell (polling)."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest
from ansible_collections.nodeops.maintenance.plugins.plugin_utils import doorbell

KEY = "https://api.example.com default"


def test_a_ring_after_the_state_was_taken_ends_the_wait_also_when_it_came_before_the_wait(tmp_path: Path) -> None:
    bell = doorbell.Bell(str(tmp_path), KEY)
    before = bell.state(["n1", "n2"])
    bell.ring("n2")  # between the step's look and its wait: not lost
    with bell.beating():
        assert bell.wait(["n1", "n2"], before, 60.0) is True
        # nothing rang since this state: the wait ends at its bound
        assert bell.wait(["n1", "n2"], bell.state(["n1", "n2"]), 0.0) is False


def test_a_ring_from_another_process_wakes_a_waiting_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doorbell, "LIVE", 600.0)  # a heartbeat thread starved on a busy machine does not end the wait
    bell = doorbell.Bell(str(tmp_path), KEY)
    rung = threading.Event()
    with bell.beating():
        state = bell.state(["n1"])
        waiter = threading.Thread(target=lambda: rung.set() if bell.wait(["n1"], state, 60.0) else None)
        waiter.start()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child rings and leaves
            doorbell.Bell(str(tmp_path), KEY).ring("n1")
            os._exit(0)
        os.waitpid(pid, 0)
        waiter.join(60)
    assert rung.is_set()


def test_a_ring_for_another_node_does_not_end_the_wait(tmp_path: Path) -> None:
    bell = doorbell.Bell(str(tmp_path), KEY)
    state = bell.state(["n1"])
    bell.ring("n2")
    with bell.beating():
        assert bell.wait(["n1"], state, 0.0) is False


def test_the_heartbeat_is_live_only_while_the_driver_beats(tmp_path: Path) -> None:
    bell = doorbell.Bell(str(tmp_path), KEY)
    assert bell.live() is False
    with bell.beating():
        assert bell.live() is True
    assert bell.live() is False  # at once, not when the beat goes stale
    other = doorbell.Bell(str(tmp_path), "https://api.example.com other-namespace")
    with bell.beating():
        assert other.live() is False  # a bell per key


def test_a_stale_heartbeat_is_not_live_and_ends_a_wait(tmp_path: Path) -> None:
    bell = doorbell.Bell(str(tmp_path), KEY)
    bell.ring("n1")  # makes the directory
    beat = Path(bell.path) / doorbell.HEARTBEAT
    beat.touch()
    os.utime(beat, (1.0, 1.0))  # a driver killed long ago
    assert bell.live() is False
    assert bell.wait(["n1"], bell.state(["n1"]), 60.0) is False  # at once: the step runs its own passes


def test_the_bell_is_private_and_a_name_that_is_not_a_node_rings_nothing(tmp_path: Path) -> None:
    bell = doorbell.Bell(str(tmp_path), KEY)
    for name in ("../escape", "/etc/passwd", ".driver", "", "a\0b"):
        bell.ring(name)
        assert bell.state([name]) == (0,)
    assert not (tmp_path / "escape").exists() and sorted(os.listdir(tmp_path)) in ([], [Path(bell.path).name])
    bell.ring("node-1.example.com")
    assert stat.S_IMODE(os.stat(bell.path).st_mode) == 0o700
    assert os.listdir(bell.path) == ["node-1.example.com"]


def test_without_its_directory_there_is_no_bell_and_nothing_fails(tmp_path: Path) -> None:
    bell = doorbell.Bell(str(tmp_path / "gone"), KEY)  # Ansible's local tmp removed under it
    bell.ring("n1")
    with bell.beating():
        assert bell.live() is False
    assert bell.state(["n1"]) == (0,)


@pytest.mark.parametrize("nodes", [[], ["n1"], ["n1", "n2", "n3"]])
def test_the_state_has_one_entry_per_node(tmp_path: Path, nodes: list[str]) -> None:
    assert len(doorbell.Bell(str(tmp_path), KEY).state(nodes)) == len(nodes)


def test_a_driver_that_cannot_show_its_lease_stops_beating(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doorbell, "BEAT", 0.01)
    bell = doorbell.Bell(str(tmp_path), KEY)
    showing = threading.Event()
    showing.set()
    with bell.beating(showing.is_set):
        beat = Path(bell.path) / doorbell.HEARTBEAT
        showing.clear()  # its renewals fail from now on
        os.utime(beat, (1.0, 1.0))  # the last beat long ago
        touched = threading.Event()
        # however many beats go by, the heartbeat is not touched again
        for _beat in range(20):
            touched.wait(0.01)
            assert beat.stat().st_mtime == 1.0
        assert bell.live() is False
