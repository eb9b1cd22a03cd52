"""RFC 3339 timestamps (core/node/rfc3339.py): impossible dates, the edges of the years 0001-9999, ASCII digits only."""

from __future__ import annotations

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
    assert rfc3339.parse(value) is None
    assert rfc3339.to_epoch(value) is None
    with pytest.raises(rfc3339.TimeError) as info:
        rfc3339.parse_field(value, "nodes[0].status.conditions[1].lastTransitionTime")
    message = str(info.value)
    assert message.startswith(f"nodes[0].status.conditions[1].lastTransitionTime: {value!r} is not a valid RFC 3339")
    assert why in message and "2026-01-31T12:00:00Z" in message


@pytest.mark.parametrize(
    "value", ["9999-12-31T23:59:59-01:00", "0001-01-01T00:00:00+01:00", "9999-12-31T23:30:00-00:31"]
)
def test_times_outside_the_years_0001_to_9999_in_utc_are_refused(value: str) -> None:
    assert rfc3339.parse(value) is None
    with pytest.raises(rfc3339.TimeError, match=r"^metadata\.creationTimestamp: .* outside the years 0001 to 9999"):
        rfc3339.parse_field(value, "metadata.creationTimestamp")
    west = datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone(timedelta(hours=-1)))
    assert rfc3339.parse(west) is None
    with pytest.raises(rfc3339.TimeError, match="outside the years 0001 to 9999"):
        rfc3339.parse_field(west, "now")


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
    moment = rfc3339.parse_field(value, "t")
    assert moment.tzinfo == UTC and moment == rfc3339.parse(value)
    assert rfc3339.to_epoch(value) == epoch
    assert rfc3339.parse(rfc3339.format_time(epoch)) == moment


def test_non_strings_and_garbage_name_the_field() -> None:
    for value in (None, 1767225600, "yesterday", "2026-01-01", "2026-01-01T00:00"):
        with pytest.raises(rfc3339.TimeError, match=r"^t: .* RFC 3339 timestamp"):
            rfc3339.parse_field(value, "t")


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
    assert rfc3339.parse(value) is None
    with pytest.raises(rfc3339.TimeError, match=r"^t: .*ASCII digits"):
        rfc3339.parse_field(value, "t")
