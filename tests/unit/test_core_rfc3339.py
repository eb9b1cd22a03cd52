"""RFC 3339 timestamps (core/node/rfc3339.py): impossible dates, the edges of the years 0001-9999, ASCII digits only;
times are seconds since the epoch, and are written back as Kubernetes writes them."""

from __future__ import annotations

import math
import unicodedata
from datetime import datetime, timedelta, timezone

import pytest
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.node import rfc3339
from hypothesis import given
from hypothesis import strategies as st

UTC = timezone.utc  # noqa: UP017


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("2026-02-30T00:00:00Z", "day is out of range for month"),
        ("2026-13-45T00:00:00Z", "month must be in 1..12"),
        ("2026-01-01T24:00:00Z", "hour must be in 0..23"),
        ("2026-01-01T00:00:60Z", "second must be in 0..59"),
        ("0000-01-01T00:00:00Z", "year 0 is out of range"),
    ],
)
def test_impossible_dates_are_refused_naming_the_field(value: str, why: str) -> None:
    assert rfc3339.to_epoch(value) is None
    with pytest.raises(rfc3339.TimeError) as info:
        rfc3339.parse_time(value, "nodes[0].status.conditions[1].lastTransitionTime")
    message = str(info.value)
    assert message.startswith(f"nodes[0].status.conditions[1].lastTransitionTime: {value!r} is not a valid RFC 3339")
    assert why in message and "2026-01-31T12:00:00Z" in message


@pytest.mark.parametrize(
    "value", ["9999-12-31T23:59:59-01:00", "0001-01-01T00:00:00+01:00", "9999-12-31T23:30:00-00:31"]
)
def test_times_outside_the_years_0001_to_9999_in_utc_are_refused(value: str) -> None:
    assert rfc3339.to_epoch(value) is None
    with pytest.raises(rfc3339.TimeError, match=r"^metadata\.creationTimestamp: .* outside the years 0001 to 9999"):
        rfc3339.parse_time(value, "metadata.creationTimestamp")
    west = datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone(timedelta(hours=-1)))
    assert rfc3339.to_epoch(west) is None
    with pytest.raises(rfc3339.TimeError, match="outside the years 0001 to 9999"):
        rfc3339.parse_time(west, "now")


@pytest.mark.parametrize(
    ("value", "epoch"),
    [
        ("0001-01-01T00:00:00Z", -62135596800),
        ("0001-01-01T00:30:00+00:30", -62135596800),
        ("9999-12-31T23:59:59Z", 253402300799),
        ("9999-12-31T22:59:59-01:00", 253402300799),
    ],
)
def test_the_edges_of_the_range_work(value: str, epoch: int) -> None:
    moment = rfc3339.parse_time(value, "t")
    assert moment == epoch and isinstance(moment, float)
    assert rfc3339.to_epoch(value) == epoch
    assert rfc3339.parse_time(rfc3339.format_time(epoch), "t") == moment


def test_non_strings_and_garbage_name_the_field() -> None:
    for value in (None, 1767225600, 1767225600.0, "yesterday", "2026-01-01", "2026-01-01T00:00"):
        assert rfc3339.to_epoch(value) is None
        with pytest.raises(rfc3339.TimeError, match=r"^t: .* RFC 3339 timestamp"):
            rfc3339.parse_time(value, "t")


def test_a_datetime_as_yaml_loaders_give_it_is_read_a_naive_one_as_utc() -> None:
    assert rfc3339.parse_time(datetime(2026, 1, 2, 3, 4, 5), "t") == 1767323045
    assert rfc3339.to_epoch(datetime(2026, 1, 2, 4, 4, 5, tzinfo=timezone(timedelta(hours=1)))) == 1767323045


def test_fractions_and_offsets_are_read_to_the_microsecond() -> None:
    assert rfc3339.to_epoch("2026-01-02T03:04:05.5Z") == 1767323045.5
    assert rfc3339.to_epoch("2026-01-02T05:04:05.123456789+02:00") == 1767323045.123456
    assert rfc3339.to_epoch("2026-01-02t03:04:05z") == rfc3339.to_epoch("2026-01-02 03:04:05") == 1767323045


def test_formats_as_kubernetes_writes_them() -> None:
    assert rfc3339.format_time(1767323045) == "2026-01-02T03:04:05Z"
    assert rfc3339.format_time(1767323045.999999) == "2026-01-02T03:04:05Z"  # the second it falls in
    assert rfc3339.format_time(-62135596800) == "0001-01-01T00:00:00Z"  # not "1-01-01" (glibc's %Y)
    assert rfc3339.format_time(-62135596799.5) == "0001-01-01T00:00:00Z"  # before the epoch too
    assert rfc3339.format_time(253402300799.5) == "9999-12-31T23:59:59Z"
    assert rfc3339.micro_time(1767323045) == "2026-01-02T03:04:05.000000Z"
    assert rfc3339.micro_time(1767323045.123456) == "2026-01-02T03:04:05.123456Z"
    assert rfc3339.micro_time(1767323045.0000004) == "2026-01-02T03:04:05.000000Z"  # to the nearest microsecond


def test_writes_the_rolling_records_times_with_milliseconds() -> None:
    assert rfc3339.milli_time(1767323045) == "2026-01-02T03:04:05.000Z"
    assert rfc3339.milli_time(1767323045.25) == "2026-01-02T03:04:05.250Z"
    assert rfc3339.milli_time(1767323045.0004) == "2026-01-02T03:04:05.000Z"  # to the nearest millisecond
    assert rfc3339.milli_time(1767323045.9996) == "2026-01-02T03:04:06.000Z"  # into the next second
    assert rfc3339.milli_time(-0.25) == "1969-12-31T23:59:59.750Z"  # before the epoch too
    assert rfc3339.milli_time(-62135596800) == "0001-01-01T00:00:00.000Z"
    assert rfc3339.milli_time(253402300799.5) == "9999-12-31T23:59:59.500Z"


def _stamp_before(seconds: float) -> str:
    """How core/maintenance/rolling.py wrote its record's times before milli_time, which older releases read."""
    whole = int(seconds)
    millis = round((seconds - whole) * 1000)
    if millis == 1000:
        whole, millis = whole + 1, 0
    return f"{rfc3339.format_time(whole)[:-1]}.{millis:03d}Z"


@given(st.floats(min_value=0, max_value=253402300799.4))
def test_milli_time_writes_what_the_rolling_record_wrote_and_reads_back(seconds: float) -> None:
    text = rfc3339.milli_time(seconds)
    assert text == _stamp_before(seconds)
    assert abs(rfc3339.parse_time(text, "started") - seconds) <= 0.0005 + 1e-4


@given(st.datetimes(min_value=datetime(1970, 1, 1), max_value=datetime(2200, 12, 31)))
def test_a_microtime_read_and_written_again_is_the_same(moment: datetime) -> None:
    """A Lease's acquireTime, kept from the Lease as read, is written back unchanged."""
    text = moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    seconds = rfc3339.parse_time(text, "spec.acquireTime")
    assert rfc3339.micro_time(seconds) == text
    assert rfc3339.format_time(seconds) == text[:19] + "Z"


def test_the_latest_time_is_refused_after_it_to_the_microsecond() -> None:
    """Where durations of up to about 292 years are added (``latest``): LATEST_TIME, and not a microsecond later,
    which the float of a time of those years cannot tell apart."""
    latest = rfc3339.format_time(rfc3339.LATEST_TIME)
    assert (
        latest.startswith("9707-")
        and rfc3339.to_epoch("9999-12-31T23:59:59Z") - math.ceil(9223372036.854775807) == rfc3339.LATEST_TIME
    )
    assert rfc3339.parse_time(latest, "now", latest=True) == rfc3339.LATEST_TIME
    for later in (latest[:-1] + ".000001Z", "9999-12-31T23:59:59Z"):
        assert rfc3339.parse_time(later, "now") > rfc3339.LATEST_TIME - 1  # without latest: read
        with pytest.raises(rfc3339.TimeError, match=rf"^now: '{later}' is too late: .* give a time before {latest}\.$"):
            rfc3339.parse_time(later, "now", latest=True)


def test_a_time_given_as_seconds_is_checked_naming_the_field() -> None:
    assert rfc3339.check_time(1767323045, "now") == 1767323045.0
    assert rfc3339.check_time(rfc3339.LATEST_TIME, "now") == rfc3339.LATEST_TIME
    assert rfc3339.check_time(rfc3339.EARLIEST_TIME, "now") == -62135596800
    for value in (None, "2026-01-02T03:04:05Z", True, math.nan, math.inf):
        with pytest.raises(rfc3339.TimeError, match=r"^now: .* is not a time; give seconds since the epoch"):
            rfc3339.check_time(value, "now")
    with pytest.raises(rfc3339.TimeError, match=r"^now: .* is too late: .* give a time before 9707-"):
        rfc3339.check_time(rfc3339.LATEST_TIME + 1, "now")
    with pytest.raises(rfc3339.TimeError, match=r"^now: .* is before the year 0001"):
        rfc3339.check_time(rfc3339.EARLIEST_TIME - 1, "now")


def test_past_the_year_9999_is_told_to_the_microsecond() -> None:
    """renewTime + leaseDurationSeconds: the last microsecond of the year 9999 is within it, the next one is not."""
    assert not rfc3339.past_year_9999("9999-12-31T23:59:58.999999Z", 1)
    assert rfc3339.past_year_9999("9999-12-31T23:59:59.000000Z", 1)
    assert not rfc3339.past_year_9999("9931-01-01T00:00:00.000000Z", 2**31 - 1)
    assert rfc3339.past_year_9999("9999-12-31T00:00:00.000000Z", 2**31 - 1)
    assert not rfc3339.past_year_9999("soon", 1)


NON_ASCII_DIGITS = [
    c
    for c in map(chr, range(0x80, 0x30000))
    if unicodedata.category(c) == "Nd" and unicodedata.digit(c, None) is not None
]


@given(st.sampled_from(NON_ASCII_DIGITS), st.integers(min_value=0, max_value=18))
def test_a_non_ascii_digit_anywhere_is_refused(digit: str, place: int) -> None:
    """``\\d`` and ``int()`` accept every Unicode decimal digit; a timestamp takes 0-9 only."""
    stamp = "2026-01-02T03:04:05Z"
    places = [i for i, c in enumerate(stamp) if c.isdigit()]
    index = places[place % len(places)]
    value = stamp[:index] + digit + stamp[index + 1 :]
    assert rfc3339.to_epoch(value) is None
    with pytest.raises(rfc3339.TimeError, match=r"^t: .*ASCII digits"):
        rfc3339.parse_time(value, "t")
