"""The fence's liveness promise, as a property of the core's rules put together: whatever the peers answer and
however long the checks, the lookups and the peer rounds take, a node cut off from its remediation state stops
feeding its watchdog by the isolation limit after its last confirmation, and the reset that follows lands inside
the safe time the manager waits for a remediation created right after that confirmation.

The model runs the agent's two threads on a simulated clock with the core's functions (worker_verdict,
limit_verdict, past_isolation_limit, feeder_wait); the real agent's threads are tested as processes in
tests/unit/test_node_agent_liveness.py."""

from __future__ import annotations

from dataclasses import dataclass, field

from ansible_collections.nodeops.maintenance.plugins.module_utils.core.node import peer, safetime
from hypothesis import assume, given, settings
from hypothesis import strategies as st

ANSWERS = [peer.HEALTHY, peer.UNHEALTHY, peer.API_ERROR, peer.REQUEST_FAILED, peer.BUSY]
LEAD = 20.0  # asks the peers this long before the limit whatever the error count (the agent's is config-bound)


@dataclass
class Run:
    limit: float
    threshold: int
    workers: int
    feed_interval: float
    confirmed_at: float = 0.0
    fenced_at: float | None = None
    feeds: list[float] = field(default_factory=list)
    verdicts: list[str] = field(default_factory=list)

    def cut_off(self, now: float) -> float:
        return now - self.confirmed_at

    def feeder_until(self, until: float, jitter: list[float]) -> None:
        """The feeding thread from its last wake-up to ``until``; each wake-up late by a jitter of the scheduler."""
        now = self.feeds[-1] if self.feeds else 0.0
        index = 0
        while now <= until and self.fenced_at is None:
            if peer.past_isolation_limit(self.cut_off(now), self.limit):
                self.fenced_at = now
                return
            self.feeds.append(now)
            late = jitter[index % len(jitter)] if jitter else 0.0
            index += 1
            now += peer.feeder_wait(self.cut_off(now), self.limit, self.feed_interval) + late
            if now == self.feeds[-1]:  # a wait of 0 at the limit: the next look fences
                now += 1e-9


def milliseconds(low: int, high: int) -> st.SearchStrategy[str]:
    return st.integers(min_value=low, max_value=high).map(lambda ms: f"{ms}ms")


situations = st.fixed_dictionaries(
    {
        "apiCheckInterval": milliseconds(1000, 60_000),
        "apiServerTimeout": milliseconds(10, 10_000),
        "maxApiErrorThreshold": st.integers(min_value=1, max_value=5),
        "peerDialTimeout": milliseconds(10, 10_000),
        "peerRequestTimeout": milliseconds(10, 10_000),
    }
)


def seconds(text: str) -> float:
    return int(text.removesuffix("ms")) / 1000


@settings(max_examples=300, deadline=None)
@given(
    spec=situations,
    workers=st.integers(min_value=0, max_value=40),
    watchdog=st.integers(min_value=1, max_value=120),
    min_peers=st.integers(min_value=0, max_value=3),
    # each check: how long it takes (a hanging lookup or read included), the peers' answers if asked, and how
    # long the round takes
    checks=st.lists(
        st.tuples(
            st.floats(min_value=0, max_value=400),
            st.lists(st.sampled_from(ANSWERS), max_size=40),
            st.floats(min_value=0, max_value=200),
        ),
        min_size=1,
        max_size=30,
    ),
    jitter=st.lists(st.floats(min_value=0, max_value=safetime.LIVENESS_MARGIN_SECONDS / 2), max_size=5),
)
def test_a_cut_off_node_stops_feeding_in_time_whatever_its_peers_answer(
    spec: dict[str, str],
    workers: int,
    watchdog: int,
    min_peers: int,
    checks: list[tuple[float, list[int], float]],
    jitter: list[float],
) -> None:
    promise = safetime.safe_time(spec, workers + 1, watchdog)
    run = Run(safetime.isolation_limit(spec), int(spec["maxApiErrorThreshold"]), workers, watchdog / 3)
    assert run.limit == promise.isolation_limit_seconds
    now, last_answer = 0.0, 0.0
    for errors, (duration, answers, round_seconds) in enumerate(checks, start=1):
        now += duration  # the check, however long it hangs; the feeder runs meanwhile
        run.feeder_until(now, jitter)
        round_start = now
        due = peer.peers_due(errors, run.threshold, run.cut_off(now), run.limit, LEAD)
        sizes = safetime.peer_batches(workers)
        padded = (answers + [peer.REQUEST_FAILED] * workers)[:workers]
        batches, start = [], 0
        for size in sizes:
            batches.append(padded[start : start + size])
            start += size
        verdict = peer.worker_verdict(due, run.threshold, workers, min_peers, iter(batches), now - last_answer)
        now += round_seconds if due >= run.threshold and workers >= max(min_peers, 1) else 0.0
        run.feeder_until(now, jitter)
        if any(answer != peer.REQUEST_FAILED for answer in verdict.answers):
            last_answer = round_start
        if verdict.confirmed and run.fenced_at is None:
            # a majority of the peers asked said Healthy (liars among them or not): the clock restarts at the
            # round's start, never later
            assert verdict.answers.count(peer.HEALTHY) >= peer.majority(len(verdict.answers))
            run.confirmed_at = round_start
        verdict = peer.limit_verdict(verdict, run.cut_off(now), run.limit)
        run.verdicts.append(verdict.code)
        if verdict.fence and run.fenced_at is None:
            run.fenced_at = now
        if run.fenced_at is not None:
            break
    run.feeder_until(now + 10 * run.limit, jitter)  # nothing confirms any more
    assert run.fenced_at is not None
    last_feed = run.feeds[-1] if run.feeds else 0.0
    # fed only before the limit (each wake-up may be late by the scheduler, never by more than the margin)
    assert last_feed - run.confirmed_at < run.limit + safetime.LIVENESS_MARGIN_SECONDS / 2
    # the watchdog resets the node, or the software fallback's sysrq does, inside the safe time counted from a
    # remediation created just after the last confirmation
    reset_by = last_feed - run.confirmed_at + watchdog
    fallback_by = run.fenced_at - run.confirmed_at + safetime.software_fallback(watchdog)[1]
    assert reset_by + safetime.REBOOT_MARGIN_SECONDS <= promise.minimum_seconds
    assert fallback_by <= promise.minimum_seconds


@settings(max_examples=200, deadline=None)
@given(
    spec=situations,
    workers=st.integers(min_value=1, max_value=40),
    checks=st.lists(st.tuples(st.floats(min_value=0, max_value=1), st.floats(min_value=0, max_value=1)), max_size=60),
)
def test_a_node_its_peers_keep_confirming_never_fences(
    spec: dict[str, str], workers: int, checks: list[tuple[float, float]]
) -> None:
    """Cut off from the API but not from its peers, who all answer Healthy: however slow each check (up to its
    interval and two API time-outs: the ready probe and the read) and each round (an honest answer reads the API
    within apiServerTimeout, plus 2 s for the exchange), the peers are asked in time and confirm the node before
    every limit, so it never fences. The room this needs after a confirmation, two rounds and a check, is there
    with maxApiErrorThreshold 2 or more, or an apiServerTimeout under 7 s (docs/design-notes.md)."""
    interval, timeout = seconds(spec["apiCheckInterval"]), seconds(spec["apiServerTimeout"])
    threshold = int(spec["maxApiErrorThreshold"])
    assume(threshold >= 2 or timeout < 7)
    request = safetime.effective_peer_request_timeout(seconds(spec["peerRequestTimeout"]), timeout)
    batch = timeout + safetime.PEER_REQUEST_MARGIN_SECONDS  # what an honest peer's answer takes at most
    lead = interval + 2 * timeout + seconds(spec["peerDialTimeout"]) + request + 1.0  # as the agent's peer_lead
    limit = safetime.isolation_limit(spec)
    confirmed, now = 0.0, 0.0
    for errors, (check_part, round_part) in enumerate(checks, start=1):
        now += interval + 2 * timeout * check_part  # the wait between checks, then a failed check
        due = peer.peers_due(errors, threshold, now - confirmed, limit, lead)
        verdict = peer.worker_verdict(due, threshold, workers, 1, iter([[peer.HEALTHY] * 3] * workers), 0.0)
        round_start = now
        if due >= threshold:
            now += batch * round_part  # the first batch confirms
            assert verdict.confirmed
        assert not peer.past_isolation_limit(now - confirmed, limit), (now, confirmed, limit)
        if verdict.confirmed:
            confirmed = round_start
