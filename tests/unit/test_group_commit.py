"""Group commits of the workers of one ansible-playbook: each change asked for is applied once, by the holder of
the lock, together with the others queued at the time; a worker gets its own answer; a change withdrawn is never
applied; a holder that fails or dies leaves the others' changes to their own workers."""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from ansible_collections.nodeops.maintenance.plugins.plugin_utils import group_commit

KEY = "https://api.example.com ns/record"


class Ledger:
    """An object the changes are applied to: each change adds its number; a result is the sum after it."""

    def __init__(self) -> None:
        self.total = 0
        self.applied: list[int] = []
        self.calls: list[list[int]] = []
        self.lock = threading.Lock()

    def apply(self, changes: list[dict[str, Any]]) -> tuple[Any, list[dict[str, Any]]]:
        with self.lock:
            self.calls.append([c["n"] for c in changes])
            results = []
            for change in changes:
                self.total += change["n"]
                self.applied.append(change["n"])
                results.append({"after": self.total})
            return {"total": self.total}, results


@contextmanager
def holding(group: group_commit.Group) -> Iterator[None]:
    """The group's lock held by the test, as by a holder busy with its write."""
    os.makedirs(group.queue, exist_ok=True)
    fd = os.open(group.lock_path, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        os.close(fd)


def clock(sleep: Any) -> Any:
    """The time module as group_commit sees it, with ``sleep`` in place of its own."""
    return SimpleNamespace(monotonic=time.monotonic, time_ns=time.time_ns, time=time.time, sleep=sleep)


def queued(group: group_commit.Group, suffix: str) -> list[str]:
    return sorted(p for p in os.listdir(group.queue) if p.endswith(suffix))


def until(condition: Any, what: str) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.005)


def test_the_changes_queued_while_the_lock_was_held_are_applied_together_each_answered_once(tmp_path: Path) -> None:
    group = group_commit.Group(str(tmp_path), KEY)
    ledger = Ledger()
    answers: dict[int, Any] = {}

    def worker(n: int) -> None:
        answers[n] = group_commit.Group(str(tmp_path), KEY).commit({"n": n}, ledger.apply)

    with holding(group):
        threads = [threading.Thread(target=worker, args=(n,)) for n in (1, 2, 4, 8)]
        for thread in threads:
            thread.start()
        until(lambda: len(queued(group, ".op")) == 4, "the workers never queued their changes")
    for thread in threads:
        thread.join(30)
    assert not any(t.is_alive() for t in threads)
    assert len(ledger.calls) == 1 and sorted(ledger.calls[0]) == [1, 2, 4, 8]  # one holder applied them all
    # each its own result, and what they share: the total once all four were applied
    for n, (shared, result) in answers.items():
        assert shared == {"total": 15}
        assert result == {"after": sum(ledger.applied[: ledger.applied.index(n) + 1])}
    assert os.listdir(group.queue) == [p for p in os.listdir(group.queue) if p.endswith(".shared")]


def test_worker_processes_each_have_their_change_applied_exactly_once(tmp_path: Path) -> None:
    """The workers of ansible-playbook are processes: the record of what was applied is a file they all append to
    under the group's lock."""
    log = tmp_path / "applied"

    def apply(changes: list[dict[str, Any]]) -> tuple[Any, list[dict[str, Any]]]:
        with log.open("a") as handle:
            for change in changes:
                handle.write(f"{change['n']}\n")
        return None, [{"n": c["n"]} for c in changes]

    children = []
    for n in range(12):
        child = os.fork()
        if child == 0:
            code = 1
            try:
                answer = group_commit.Group(str(tmp_path), KEY).commit({"n": n}, apply)
                code = 0 if answer is not None and answer[1] == {"n": n} else 2
            finally:
                os._exit(code)
        children.append(child)
    codes = [os.waitstatus_to_exitcode(os.waitpid(c, 0)[1]) for c in children]
    assert codes == [0] * 12
    assert sorted(int(line) for line in log.read_text().split()) == list(range(12))


def test_a_worker_that_waits_past_its_wait_withdraws_its_change_and_no_holder_applies_it(tmp_path: Path) -> None:
    group = group_commit.Group(str(tmp_path), KEY)
    ledger = Ledger()
    with holding(group):
        assert group.commit({"n": 1}, ledger.apply, wait=0.05) is None  # the caller applies it alone
    assert group.commit({"n": 2}, ledger.apply) is not None
    assert ledger.applied == [2]
    assert not queued(group, ".op") and not queued(group, ".dropped")


def test_a_change_a_holder_claimed_is_not_withdrawn_its_worker_waits_for_the_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    group = group_commit.Group(str(tmp_path), KEY)
    ledger = Ledger()
    answers: list[Any] = []
    looked = threading.Event()  # the worker is past its first look (its wait over: it tried to withdraw)

    def sleep(seconds: float) -> None:
        looked.set()
        time.sleep(seconds)

    monkeypatch.setattr(group_commit, "time", clock(sleep))
    with holding(group):
        own = group._ask({"n": 1})
        os.rename(own + ".op", own + ".taken")  # claimed by the holder, which is still at work
        fd = os.open(group.lock_path, os.O_RDWR)
        worker = threading.Thread(target=lambda: answers.append(group._wait(fd, own, ledger.apply, 0.0)))
        worker.start()
        assert looked.wait(30)
        assert worker.is_alive() and not answers
        group_commit._write(os.path.join(group.queue, "s.shared"), {"total": 7})
        group_commit._write(own + ".res", {"shared": "s.shared", "result": {"after": 7}})
    worker.join(30)
    os.close(fd)
    assert answers == [({"total": 7}, {"after": 7})] and ledger.applied == []


def test_a_change_claimed_by_a_holder_that_died_before_answering_is_applied_by_its_own_worker(tmp_path: Path) -> None:
    group = group_commit.Group(str(tmp_path), KEY)
    ledger = Ledger()
    answers: list[Any] = []
    with holding(group):
        worker = threading.Thread(target=lambda: answers.append(group.commit({"n": 5}, ledger.apply)))
        worker.start()
        until(lambda: queued(group, ".op"), "the worker never queued its change")
        (name,) = queued(group, ".op")
        stem = os.path.join(group.queue, name[: -len(".op")])
        os.rename(stem + ".op", stem + ".taken")  # claimed; then the holder dies (its lock let go of)
    worker.join(30)
    assert answers == [({"total": 5}, {"after": 5})] and ledger.applied == [5]
    assert not queued(group, ".taken")


def test_a_holder_that_fails_fails_alone_and_puts_the_others_changes_back_for_their_workers(tmp_path: Path) -> None:
    group = group_commit.Group(str(tmp_path), KEY)
    os.mkdir(group.queue)
    others = [group._ask({"n": n}) for n in (2, 3)]  # two workers waiting for the lock

    def failing(changes: list[dict[str, Any]]) -> tuple[Any, list[dict[str, Any]]]:
        assert [c["n"] for c in changes] == [2, 3, 1]  # in the order they were asked for
        raise RuntimeError("the API server is away")

    with pytest.raises(RuntimeError):
        group.commit({"n": 1}, failing)
    assert sorted(os.path.join(group.queue, p) for p in queued(group, ".op")) == sorted(s + ".op" for s in others)
    assert not queued(group, ".taken")
    ledger = Ledger()
    assert group.commit({"n": 4}, ledger.apply) == ({"total": 9}, {"after": 9})
    assert ledger.applied == [2, 3, 4]
    for stem, after in zip(others, (2, 5), strict=True):  # their answers wait for them
        assert json.loads(Path(stem + ".res").read_text())["result"] == {"after": after}


def test_a_worker_interrupted_while_it_waits_withdraws_its_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The task's timeout or an interrupt ends the step in its wait: its change is not applied after that."""
    group = group_commit.Group(str(tmp_path), KEY)

    class Interrupted(BaseException):
        pass

    def sleep(seconds: float) -> None:
        raise Interrupted

    ledger = Ledger()
    with holding(group):
        monkeypatch.setattr(group_commit, "time", clock(sleep))
        with pytest.raises(Interrupted):
            group.commit({"n": 1}, ledger.apply)
        monkeypatch.undo()
        assert not queued(group, ".op")
    assert group.commit({"n": 2}, ledger.apply) == ({"total": 2}, {"after": 2})
    assert ledger.applied == [2]


def test_the_change_of_a_worker_killed_before_it_withdrew_it_is_not_applied(tmp_path: Path) -> None:
    group = group_commit.Group(str(tmp_path), KEY)
    child = os.fork()
    if child == 0:  # a worker, gone (as if killed while it waited) once reaped
        os._exit(0)
    os.waitpid(child, 0)
    os.mkdir(group.queue)
    stem = os.path.join(group.queue, f"{time.time_ns():020d}-{child}-dead")
    group_commit._write(stem + ".op", {"n": 1})
    ledger = Ledger()
    assert group.commit({"n": 2}, ledger.apply) == ({"total": 2}, {"after": 2})
    assert ledger.applied == [2] and not queued(group, ".op")


def test_no_group_without_its_directory_the_caller_applies_its_change_alone(tmp_path: Path) -> None:
    ledger = Ledger()
    assert group_commit.Group(str(tmp_path / "gone"), KEY).commit({"n": 1}, ledger.apply) is None
    assert ledger.applied == [] and not (tmp_path / "gone").exists()


def test_a_symlink_in_place_of_the_lock_file_is_not_followed_and_the_caller_applies_its_change_alone(
    tmp_path: Path,
) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("keep")
    group = group_commit.Group(str(tmp_path), KEY)
    Path(group.lock_path).symlink_to(target)
    ledger = Ledger()
    assert group.commit({"n": 1}, ledger.apply) is None
    assert target.read_text() == "keep" and ledger.applied == []


def test_files_are_the_users_only(tmp_path: Path) -> None:
    group = group_commit.Group(str(tmp_path), KEY)
    group.commit({"n": 1}, Ledger().apply)
    assert os.stat(group.queue).st_mode & 0o077 == 0 and os.stat(group.lock_path).st_mode & 0o077 == 0
    for name in os.listdir(group.queue):
        assert os.stat(os.path.join(group.queue, name)).st_mode & 0o077 == 0
