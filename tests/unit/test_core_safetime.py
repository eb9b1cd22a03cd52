"""Safe-time arithmetic, peer batches, strategy choice and Go-style durations (pure core)."""

from __future__ import annotations

import pytest
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.node.duration import (
    DurationError,
    parse_duration,
)
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.node.safetime import (
    SafeTimeError,
    effective_peer_request_timeout,
    peer_batches,
    safe_time,
    software_fallback,
    watchdog_seconds,
)
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.remediation.strategy import (
    StrategyError,
    parse_version,
    resolve_strategy,
)
from hypothesis import given
from hypothesis import strategies as st


# -- peer batches -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("workers", "sizes"),
    [
        (0, []),
        (1, [1]),
        (2, [2]),
        (3, [3]),
        (4, [3, 1]),
        (6, [3, 3]),
        (10, [3, 3, 3, 1]),
        (20, [3, 3, 3, 3, 3, 3, 2]),
        (53, [3] + [5] * 10),
        (100, [3] + [9] * 10 + [7]),
    ],
)
def test_peer_batches(workers: int, sizes: list[int]) -> None:
    assert peer_batches(workers) == sizes


@given(st.integers(min_value=0, max_value=5000))
def test_peer_batches_cover_every_peer_once(workers: int) -> None:
    sizes = peer_batches(workers)
    assert sum(sizes) == workers
    assert all(size > 0 for size in sizes)
    if sizes:
        assert sizes[0] == min(3, workers)
        later = max(3, (workers - 3) // 10)
        assert all(size == later for size in sizes[1:-1])


@pytest.mark.parametrize("bad", [-1, True, 2.5, "3"])
def test_peer_batches_refuse_bad_counts(bad: object) -> None:
    with pytest.raises(SafeTimeError, match="worker_nodes"):
        peer_batches(bad)  # type: ignore[arg-type]


# -- safe time --------------------------------------------------------------------------------
def test_defaults_give_180_seconds_up_to_6_workers() -> None:
    """The worked example of the module docstring."""
    for workers in range(7):
        result = safe_time({}, workers)
        assert result.minimum_seconds == 180, workers
        assert result.effective_seconds == 180
        assert result.api_check_seconds == 60
        assert result.peer_check_seconds == 30
        assert result.watchdog_seconds == 60
        assert result.reboot_seconds == 90
        assert result.peer_request_timeout_seconds == 7
    assert safe_time(None, 6).peer_batches == 2


@pytest.mark.parametrize(
    ("workers", "batches", "peer_part", "minimum", "minimum_wd10"),
    [
        (2, 1, 30, 180, 130),
        (4, 2, 30, 180, 130),
        (9, 3, 36, 186, 136),
        (10, 4, 48, 198, 148),
        (20, 7, 84, 234, 184),
        (53, 11, 132, 282, 232),
        (100, 12, 144, 294, 244),
    ],
)
def test_reference_table(workers: int, batches: int, peer_part: int, minimum: int, minimum_wd10: int) -> None:
    result = safe_time({}, workers)
    assert (result.peer_batches, result.peer_check_seconds, result.minimum_seconds) == (batches, peer_part, minimum)
    assert safe_time({}, workers, watchdog_timeout=10).minimum_seconds == minimum_wd10


def test_custom_config() -> None:
    """Upstream's non-default case: 4 x (25 + 7) + 7 x (11 + 13) + 25 + 30 = 351."""
    spec = {
        "apiCheckInterval": "25s",
        "apiServerTimeout": "7s",
        "maxApiErrorThreshold": 4,
        "peerDialTimeout": "11s",
        "peerRequestTimeout": "13s",
    }
    result = safe_time(spec, 20, watchdog_timeout=25)
    assert (result.api_check_seconds, result.peer_check_seconds, result.reboot_seconds) == (128, 168, 55)
    assert result.minimum_seconds == 351


def test_effective_peer_request_timeout_is_deviation_5() -> None:
    """A peer request timeout below apiServerTimeout + 2 s counts as apiServerTimeout + 2 s."""
    assert effective_peer_request_timeout(3, 10) == 12
    spec = {"apiServerTimeout": "10s", "peerRequestTimeout": "3s"}
    result = safe_time(spec, 20)
    assert result.peer_request_timeout_seconds == 12
    # upstream would count 7 x (5 + 3) = 56; the agent really waits 7 x (5 + 12) = 119
    assert result.peer_check_seconds == 7 * (5 + 12)
    assert result.minimum_seconds == 3 * (15 + 10) + 119 + 90


def test_configured_value_is_used_only_when_not_below_the_minimum() -> None:
    assert safe_time({"safeTimeToAssumeNodeRebootedSeconds": 300}, 3).effective_seconds == 300
    assert safe_time({"safeTimeToAssumeNodeRebootedSeconds": 180}, 3).configured_used is True
    low = safe_time({"safeTimeToAssumeNodeRebootedSeconds": 120}, 3)
    assert (low.effective_seconds, low.configured_seconds, low.configured_used) == (180, 120, False)


def test_fractional_durations_round_the_minimum_up() -> None:
    spec = {"apiCheckInterval": "1.5s", "apiServerTimeout": "100ms", "maxApiErrorThreshold": 1}
    result = safe_time(spec, 0, watchdog_timeout=1)
    assert result.api_check_seconds == pytest.approx(1.6)
    assert result.minimum_seconds == 63  # 1.6 + 30 + 31 = 62.6, rounded up to whole seconds
    assert result.as_dict()["api_check_seconds"] == 1.6


@pytest.mark.parametrize(
    ("value", "seconds"), [(None, 60), (0, 60), ("0", 60), ("abc", 60), (-5, 60), ("10", 10), (45, 45)]
)
def test_unknown_watchdog_counts_60(value: object, seconds: float) -> None:
    assert watchdog_seconds(value) == seconds


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"apiCheckInterval": "15"}, "spec.apiCheckInterval"),
        ({"apiServerTimeout": 5}, "spec.apiServerTimeout"),
        ({"peerDialTimeout": "five seconds"}, "spec.peerDialTimeout"),
        ({"peerRequestTimeout": "-7s"}, "spec.peerRequestTimeout"),
        ({"apiCheckInterval": "500ms"}, "spec.apiCheckInterval"),  # below the 1s minimum
        ({"maxApiErrorThreshold": 0}, "spec.maxApiErrorThreshold"),
        ({"maxApiErrorThreshold": "three"}, "spec.maxApiErrorThreshold"),
        ({"safeTimeToAssumeNodeRebootedSeconds": -1}, "spec.safeTimeToAssumeNodeRebootedSeconds"),
    ],
)
def test_bad_values_name_the_field(spec: dict[str, object], field: str) -> None:
    with pytest.raises(SafeTimeError, match=rf"^{field}: "):
        safe_time(spec, 3)


@given(
    st.integers(min_value=0, max_value=500),
    st.integers(min_value=1, max_value=10),
    st.integers(min_value=1, max_value=120),
    st.integers(min_value=1, max_value=60),
    st.integers(min_value=1, max_value=60),
    st.one_of(st.none(), st.integers(min_value=1, max_value=600)),
)
def test_minimum_is_never_below_the_agents_decision_time(
    workers: int, threshold: int, interval: int, api_timeout: int, request: int, watchdog: int | None
) -> None:
    spec = {
        "maxApiErrorThreshold": threshold,
        "apiCheckInterval": f"{interval}s",
        "apiServerTimeout": f"{api_timeout}s",
        "peerRequestTimeout": f"{request}s",
    }
    result = safe_time(spec, workers, watchdog)
    waited = len(peer_batches(workers)) * (5 + max(request, api_timeout + 2))
    assert result.minimum_seconds >= threshold * (interval + api_timeout) + max(waited, 30) + (watchdog or 60) + 30
    assert result.effective_seconds >= result.minimum_seconds


def test_batch_count_is_not_monotonic_in_the_worker_count() -> None:
    """A quirk of the formula, kept (the agent asks in exactly these batches): 52 workers take 14
    batches of 3 + 4 x 12 + 1, 53 workers only 11 of 3 + 5 x 10."""
    assert len(peer_batches(52)) == 14
    assert len(peer_batches(53)) == 11
    assert safe_time({}, 52).minimum_seconds > safe_time({}, 53).minimum_seconds


# -- durations --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("300s", 300),
        ("5m", 300),
        ("1h30m", 5400),
        ("1.5h", 5400),
        ("500ms", 0.5),
        ("10us", 1e-5),
        ("10µs", 1e-5),
        ("2h45m30.5s", 9930.5),
        ("0", 0),
        ("0s", 0),
    ],
)
def test_go_durations(text: str, seconds: float) -> None:
    assert parse_duration(text, "f") == pytest.approx(seconds)


@pytest.mark.parametrize("bad", ["", "5", "5 m", "m", "1d", "1h-5m", "abc", 5, None, "1.5.5s"])
def test_bad_durations_name_the_field(bad: object) -> None:
    with pytest.raises(DurationError, match=r"^spec\.healthyDelay: "):
        parse_duration(bad, "spec.healthyDelay")


def test_negative_durations_only_when_allowed() -> None:
    assert parse_duration("-1m", "f", allow_negative=True) == -60
    with pytest.raises(DurationError, match="negative"):
        parse_duration("-1m", "f")


# -- strategy ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("git_version", "expected"),
    [("v1.36.3", (1, 36)), ("v1.28.2-eks-abc", (1, 28)), ("1.27+", (1, 27)), ("v1.26.0-rc.1+k3s1", (1, 26))],
)
def test_parse_version(git_version: str, expected: tuple[int, int]) -> None:
    assert parse_version(git_version) == expected


@pytest.mark.parametrize("bad", ["", "latest", "vx.28", None])
def test_parse_version_refuses_garbage(bad: object) -> None:
    with pytest.raises(StrategyError, match="Kubernetes version"):
        parse_version(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("requested", "version", "expected"),
    [
        ("Automatic", "v1.28.0", "OutOfServiceTaint"),
        (None, "v1.36.3", "OutOfServiceTaint"),
        ("Automatic", "v1.27.9", "ResourceDeletion"),
        ("Automatic", "v1.24.0", "ResourceDeletion"),
        ("ResourceDeletion", "v1.36.3", "ResourceDeletion"),
        ("ResourceDeletion", "v1.20.0", "ResourceDeletion"),
        ("OutOfServiceTaint", "v1.26.0", "OutOfServiceTaint"),
        ("OutOfServiceTaint", "v1.28.2-eks-abc", "OutOfServiceTaint"),
    ],
)
def test_resolve_strategy(requested: str | None, version: str, expected: str) -> None:
    assert resolve_strategy(requested, version) == expected


def test_out_of_service_taint_refused_below_1_26() -> None:
    with pytest.raises(StrategyError, match=r"OutOfServiceTaint needs Kubernetes 1\.26 or newer.*runs 1\.25"):
        resolve_strategy("OutOfServiceTaint", "v1.25.16")
    with pytest.raises(StrategyError, match="is not one of"):
        resolve_strategy("NodeDeletion", "v1.30.0")


@given(st.integers(min_value=1, max_value=3600), st.integers(min_value=0, max_value=60))
def test_software_fallback_fires_inside_the_safe_times_reboot_part(watchdog: int, workers: int) -> None:
    """The agent's reboot command and sysrq reboot both fire before the safe time's reboot part is over."""
    command_at, sysrq_at = software_fallback(float(watchdog))
    part = safe_time({}, workers, watchdog).reboot_seconds
    assert watchdog < command_at < sysrq_at < part


# -- ASCII digits only, no overflow ------------------------------------------------------------
NON_ASCII_DIGITS = st.characters(categories=["Nd"]).filter(lambda c: not c.isascii())


@given(st.lists(NON_ASCII_DIGITS, min_size=1, max_size=4), st.sampled_from(["s", "m", "h", "ms"]))
def test_numbers_and_durations_with_non_ascii_digits_are_refused(digits: list[str], unit: str) -> None:
    """``str.isdigit()`` and ``int()`` take every Unicode decimal digit; the durations' grammar already took 0-9
    only, the whole numbers did not."""
    number = "".join(digits)
    for field in ("maxApiErrorThreshold", "safeTimeToAssumeNodeRebootedSeconds"):
        with pytest.raises(SafeTimeError, match=rf"^spec\.{field}: .*ASCII digits"):
            safe_time({field: number}, 3)
        with pytest.raises(SafeTimeError, match=rf"^spec\.{field}: .*ASCII digits"):
            safe_time({field: "1" + number}, 3)
    for text in (number + unit, "1" + number + unit):
        with pytest.raises(DurationError, match=r"^spec\.healthyDelay: "):
            parse_duration(text, "spec.healthyDelay")
        with pytest.raises(SafeTimeError, match=r"^spec\.apiCheckInterval: "):
            safe_time({"apiCheckInterval": text}, 3)


@pytest.mark.parametrize("text", ["1" + "0" * 400 + "s", "9" * 400 + "h", "2562048h", "9223372037s", "1000000h" * 3])
def test_a_duration_longer_than_go_allows_is_refused(text: str) -> None:
    """Go's time.Duration ends at 2562047h47m16.854775807s (about 292 years); beyond it the operators cannot
    read the value, and the arithmetic here overflowed (a float infinity, then a timedelta OverflowError)."""
    with pytest.raises(DurationError, match=r"^spec\.escalatingRemediations\[0\]\.timeout: .* longer than"):
        parse_duration(text, "spec.escalatingRemediations[0].timeout")
    with pytest.raises(DurationError, match="longer than"):
        parse_duration("-" + text, "f", allow_negative=True)
    assert parse_duration("2562047h", "f") == 2562047 * 3600
    assert parse_duration("9223372036s", "f") == 9223372036


@pytest.mark.parametrize("value", ["\u0663", "\uff15", "\uff11\uff10", "²", " \u0663 ", "\u0663\u0660\u0660"])
def test_whole_numbers_take_ascii_digits_only(value: str) -> None:
    for field in ("maxApiErrorThreshold", "safeTimeToAssumeNodeRebootedSeconds"):
        with pytest.raises(SafeTimeError, match=rf"^spec\.{field}: {value!r} .*ASCII digits"):
            safe_time({field: value}, 3)
    assert (
        safe_time({"maxApiErrorThreshold": "4", "safeTimeToAssumeNodeRebootedSeconds": " 300 "}, 3).effective_seconds
        == 300
    )


@pytest.mark.parametrize("value", ["\u0663\u0666\u0660\u0660", "\uff11\uff12\uff10", "1\u0660", "1_000"])
def test_a_watchdog_timeout_that_is_not_an_ascii_number_counts_as_unknown(value: str) -> None:
    assert watchdog_seconds(value) == 60
    assert watchdog_seconds("inf") == 60 and watchdog_seconds("1e400") == 60
    assert watchdog_seconds("120") == 120 and watchdog_seconds(" 30.5 ") == 30.5


@pytest.mark.parametrize(
    ("spec", "watchdog", "field", "why"),
    [
        (
            {"safeTimeToAssumeNodeRebootedSeconds": 10**12},
            None,
            "spec.safeTimeToAssumeNodeRebootedSeconds",
            "above the maximum of 9223372036 seconds, the longest duration Go allows",
        ),
        ({"maxApiErrorThreshold": 10**400}, None, "spec.maxApiErrorThreshold", "above the maximum of"),
        ({"maxApiErrorThreshold": 2**62, "apiCheckInterval": "2562047h"}, None, "spec", "longer than"),
        ({}, 1e300, "spec", "longer than"),
    ],
)
def test_a_safe_time_longer_than_go_allows_is_refused(
    spec: dict[str, object], watchdog: float | None, field: str, why: str
) -> None:
    """A safe time is added to the current time (timeAssumedRebooted): one that ends after the year 9999 raised
    OverflowError there, and a huge maxApiErrorThreshold an OverflowError here (an int too large for a float)."""
    with pytest.raises(SafeTimeError, match=rf"^{field}: .*{why}"):
        safe_time(spec, 3, watchdog)
    assert safe_time({"safeTimeToAssumeNodeRebootedSeconds": 9223372036}, 3).effective_seconds == 9223372036
