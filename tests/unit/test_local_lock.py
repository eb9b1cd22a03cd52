"""The lock the workers of one ansible-playbook share: held by one holder at a time, per key, let go of when its
holder ends, however it ends, and never in the way: a caller that cannot get it goes on without it."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from ansible_collections.nodeops.maintenance.plugins.plugin_utils import local_lock


def taken(path: Path) -> bool:
    """Whether the lock file ``path`` is held by someone else now (a look that does not wait)."""
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def test_a_held_lock_keeps_out_the_next_holder_of_its_key_only_until_its_block_ends(tmp_path: Path) -> None:
    with local_lock.held(str(tmp_path), "ns/record") as got:
        assert got is True
        (path,) = tmp_path.iterdir()
        assert taken(path) and path.stat().st_mode & 0o077 == 0  # the user's only
        with local_lock.held(str(tmp_path), "ns/other") as other:  # another key: another file, not kept out
            assert other is True and len(list(tmp_path.iterdir())) == 2
        with local_lock.held(str(tmp_path), "ns/record", wait=0.0) as second:  # the same key: kept out
            assert second is False
    assert not taken(path)


def test_the_lock_is_let_go_of_when_its_holder_dies_in_its_block(tmp_path: Path) -> None:
    child = os.fork()
    if child == 0:  # a worker killed while it holds the lock
        try:
            with local_lock.held(str(tmp_path), "ns/record"):
                os._exit(3)
        finally:
            os._exit(4)
    _pid, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 3
    (path,) = tmp_path.iterdir()
    assert not taken(path)
    with local_lock.held(str(tmp_path), "ns/record", wait=0.0) as got:
        assert got is True and taken(path)


def test_a_symlink_in_place_of_the_lock_file_is_not_followed_and_the_caller_goes_on(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("keep")
    locks = tmp_path / "locks"
    locks.mkdir()
    with local_lock.held(str(locks), "ns/record"):
        pass
    (lock,) = locks.iterdir()
    lock.unlink()
    lock.symlink_to(target)
    with local_lock.held(str(locks), "ns/record") as got:
        assert got is False
    assert target.read_text() == "keep"


def test_a_directory_that_is_gone_lets_the_caller_go_on_without_the_lock(tmp_path: Path) -> None:
    with local_lock.held(str(tmp_path / "gone"), "ns/record") as got:
        assert got is False
