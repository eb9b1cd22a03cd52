"""The lock the workers of one ansible-playbook share: held by one holder at a time, per key, and let go of when
its holder ends, however it ends."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest
from ansible_collections.nodeops.maintenance.plugins.plugin_utils import local_lock


def taken(directory: Path) -> bool:
    """Whether a lock file in ``directory`` is held by someone else now (a look that does not wait)."""
    for path in directory.iterdir():
        fd = os.open(path, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
    return False


def test_a_held_lock_keeps_out_the_next_holder_of_its_key_until_its_block_ends(tmp_path: Path) -> None:
    with local_lock.held(str(tmp_path), "ns/record"):
        assert taken(tmp_path)
        with local_lock.held(str(tmp_path / ".."), "elsewhere"):  # another key, another file: not kept out
            pass
    assert not taken(tmp_path)
    assert [p.stat().st_mode & 0o777 for p in tmp_path.iterdir()] == [0o600]


def test_the_lock_is_let_go_of_when_its_holder_dies_in_its_block(tmp_path: Path) -> None:
    child = os.fork()
    if child == 0:  # a worker killed while it holds the lock
        with local_lock.held(str(tmp_path), "ns/record"):
            os._exit(3)
    _pid, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 3
    assert not taken(tmp_path)
    with local_lock.held(str(tmp_path), "ns/record"):
        assert taken(tmp_path)


def test_a_symlink_in_place_of_the_lock_file_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("keep")
    (tmp_path / "locks").mkdir()
    with local_lock.held(str(tmp_path / "locks"), "ns/record"):
        pass
    (lock,) = (tmp_path / "locks").iterdir()
    lock.unlink()
    lock.symlink_to(target)
    with pytest.raises(OSError), local_lock.held(str(tmp_path / "locks"), "ns/record"):
        pass
    assert target.read_text() == "keep"
