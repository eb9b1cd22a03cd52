"""core/maintenance/window.py: parsing, is_open, next_open and closes_at, with examples around daylight-saving
changes and properties over random windows, zones and instants."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.maintenance.window import (
    DAYS,
    Window,
    WindowError,
    parse_window,
)
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.node.errors import NodeopsError
from hypothesis import given, settings
from hypothesis import strategies as st

ZONES = (
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",  # half-hour daylight saving
    "America/Santiago",  # changes at midnight
    "Asia/Kolkata",
    "Pacific/Chatham",
)


def at(zone: str, *args: int, fold: int = 0) -> float:
    """Epoch seconds of a wall-clock time in a zone."""
    return datetime(*args, tzinfo=ZoneInfo(zone), fold=fold).timestamp()  # type: ignore[misc]


def utc(*args: int) -> float:
    return datetime(*args, tzinfo=UTC).timestamp()  # type: ignore[misc]


# ------------------------------------------------------------------------------------------ parsing
def test_no_settings_is_no_window() -> None:
    assert parse_window(None, None, None, None) is None
    assert parse_window([], "", "", "UTC") is None


def test_days_by_short_or_full_name_any_case_and_every_day_when_none() -> None:
    window = parse_window(["Sat", "SUNDAY", "mon"], "22:00", "4:00", "Europe/Berlin")
    assert window is not None
    assert window.days == frozenset({5, 6, 0})
    assert (window.start, window.end) == (time(22, 0), time(4, 0))
    assert window.describe() == "mon,sat,sun 22:00-04:00 Europe/Berlin"
    every = parse_window(None, "01:00", "02:00", "UTC")
    assert every is not None and every.days == frozenset(range(7))
    in_utc = parse_window(["mon"], "01:00", "02:00", "")
    assert in_utc is not None and in_utc.zone == "UTC"  # no zone: UTC
    whole_days = parse_window(["sat"], None, None, "UTC")
    assert whole_days is not None and whole_days.start == whole_days.end == time(0, 0)


@pytest.mark.parametrize(
    ("days", "start", "end", "zone", "says"),
    [
        (["funday"], "01:00", "02:00", "UTC", "'funday' is not a day of the week"),
        (["mon"], "25:00", "02:00", "UTC", "start '25:00' is not a time of day"),
        (["mon"], "01:00", "24:00", "UTC", "end '24:00' is not a time of day"),
        (["mon"], "1:60", "02:00", "UTC", "start '1:60'"),
        (["mon"], "noon", "02:00", "UTC", "start 'noon'"),
        (["mon"], "01:00", "02:00", "Mars/Olympus", "'Mars/Olympus' is not in the IANA time zone database"),
        (["mon"], "01:00", "02:00", "../etc/passwd", "is not in the IANA time zone database"),
        (["mon"], "01:00", "", "UTC", "give both the window's start and end"),
        (None, "", "02:00", "UTC", "give both"),
    ],
)
def test_bad_settings_are_refused_naming_what_is_wrong(
    days: list[str] | None, start: str, end: str, zone: str, says: str
) -> None:
    with pytest.raises(WindowError) as info:
        parse_window(days, start, end, zone)
    assert says in str(info.value)
    assert isinstance(info.value, NodeopsError) and isinstance(info.value, ValueError)


# ------------------------------------------------------------------------------------------ examples
def test_a_window_over_midnight_belongs_to_the_day_it_starts() -> None:
    window = parse_window(["fri"], "22:00", "04:00", "UTC")
    assert window is not None
    # Friday 2026-12-04
    assert not window.is_open(utc(2026, 12, 4, 21, 59))
    assert window.is_open(utc(2026, 12, 4, 22, 0))
    assert window.is_open(utc(2026, 12, 5, 3, 59))
    assert not window.is_open(utc(2026, 12, 5, 4, 0))  # the end is outside
    assert not window.is_open(utc(2026, 12, 5, 22, 30))  # Saturday night is not in it
    assert window.closes_at(utc(2026, 12, 5, 1, 0)) == utc(2026, 12, 5, 4, 0)
    assert window.next_open(utc(2026, 12, 5, 4, 0)) == utc(2026, 12, 11, 22, 0)
    assert window.next_open(utc(2026, 12, 4, 23, 0)) == utc(2026, 12, 4, 23, 0)  # open: now
    assert window.format(utc(2026, 12, 11, 22, 0)) == "2026-12-11T22:00+00:00 (UTC)"


def test_in_the_zone_of_the_window() -> None:
    window = parse_window(["sat"], "01:00", "03:00", "America/New_York")
    assert window is not None
    # Saturday 2026-12-05 01:00 in New York (EST, UTC-5) is 06:00 UTC
    assert window.next_open(utc(2026, 12, 5, 0, 0)) == utc(2026, 12, 5, 6, 0)
    assert window.is_open(utc(2026, 12, 5, 7, 59)) and not window.is_open(utc(2026, 12, 5, 8, 0))
    assert window.format(utc(2026, 12, 5, 6, 0)) == "2026-12-05T01:00-05:00 (America/New_York)"


def test_equal_start_and_end_is_a_whole_day() -> None:
    window = parse_window(["sun"], None, None, "UTC")
    assert window is not None
    assert window.is_open(utc(2026, 12, 6, 0, 0)) and window.is_open(utc(2026, 12, 6, 23, 59, 59))
    assert not window.is_open(utc(2026, 12, 7, 0, 0))
    always = parse_window(list(DAYS), "06:00", "06:00", "UTC")
    assert always is not None and always.is_open(utc(2026, 12, 7, 6, 0)) and always.is_open(utc(2026, 12, 7, 5, 59))


def test_start_in_the_hour_that_spring_forward_skips() -> None:
    """Europe/Berlin, Sunday 2026-03-29: 02:00 CET becomes 03:00 CEST. A start at 02:30 that day is read as
    03:30 CEST (half an hour after the change); other days it is 02:30."""
    window = parse_window(["sun"], "02:30", "05:00", "Europe/Berlin")
    assert window is not None
    opens = window.next_open(utc(2026, 3, 28, 12, 0))
    assert opens == utc(2026, 3, 29, 1, 30) == at("Europe/Berlin", 2026, 3, 29, 3, 30)
    assert window.closes_at(opens) == at("Europe/Berlin", 2026, 3, 29, 5, 0)
    assert window.closes_at(opens) - opens == 1.5 * 3600
    assert window.next_open(utc(2026, 3, 22, 0, 0)) == at("Europe/Berlin", 2026, 3, 22, 2, 30)


def test_a_window_inside_the_skipped_hour_is_left_out_that_day() -> None:
    window = parse_window(["sun"], "02:10", "02:50", "Europe/Berlin")
    assert window is not None
    # on 2026-03-29 both ends fall in the gap: 02:10 reads as 03:10 CEST, 02:50 as 03:50 CEST: still 40 minutes
    opens = window.next_open(utc(2026, 3, 28, 12, 0))
    assert opens == at("Europe/Berlin", 2026, 3, 29, 3, 10)
    reversed_by_dst = parse_window(["sun"], "02:30", "03:00", "Europe/Berlin")
    assert reversed_by_dst is not None
    # 02:30 reads as 03:30 CEST, after the end (03:00 CEST): no window that Sunday, the next one a week later
    assert reversed_by_dst.next_open(utc(2026, 3, 28, 12, 0)) == at("Europe/Berlin", 2026, 4, 5, 2, 30)


def test_fall_back_makes_a_window_over_the_repeated_hour_an_hour_longer() -> None:
    """Europe/Berlin, Sunday 2026-10-25: 03:00 CEST becomes 02:00 CET; 02:00-03:59 happen twice."""
    window = parse_window(["sun"], "02:30", "03:30", "Europe/Berlin")
    assert window is not None
    opens = window.next_open(utc(2026, 10, 24, 12, 0))
    assert opens == at("Europe/Berlin", 2026, 10, 25, 2, 30, fold=0) == utc(2026, 10, 25, 0, 30)
    assert window.closes_at(opens) == utc(2026, 10, 25, 2, 30)  # 03:30 CET
    assert window.is_open(at("Europe/Berlin", 2026, 10, 25, 2, 45, fold=1))  # the second 02:45 too


def test_overnight_window_across_a_change() -> None:
    window = parse_window(["sat"], "22:00", "04:00", "America/New_York")
    assert window is not None
    # Saturday 2026-03-07 22:00 EST to Sunday 04:00 EDT: five hours, not six
    opens = window.next_open(utc(2026, 3, 7, 12, 0))
    assert window.closes_at(opens) - opens == 5 * 3600


def test_a_window_is_a_value() -> None:
    assert Window(frozenset({0}), time(1), time(2), "UTC") == parse_window(["mon"], "01:00", "02:00", "UTC")


# ---------------------------------------------------------------------------------------- properties
windows = st.builds(
    parse_window,
    st.lists(st.sampled_from(DAYS), min_size=1, max_size=7, unique=True),
    st.builds(lambda h, m: f"{h:02d}:{m:02d}", st.integers(0, 23), st.sampled_from([0, 15, 30, 45, 59])),
    st.builds(lambda h, m: f"{h:02d}:{m:02d}", st.integers(0, 23), st.sampled_from([0, 15, 30, 45, 59])),
    st.sampled_from(ZONES),
)
# 2020-2035, to the second: covers many daylight-saving changes of every zone above
instants = st.integers(int(utc(2020, 1, 1)), int(utc(2035, 1, 1))).map(float)


@settings(max_examples=300, deadline=None)
@given(windows, instants)
def test_next_open_is_the_first_open_instant(window: Window, now: float) -> None:
    opens = window.next_open(now)
    assert opens >= now
    assert window.is_open(opens)
    assert (opens == now) == window.is_open(now)
    if opens > now:  # nothing in between is open
        for k in range(1, 12):
            assert not window.is_open(now + (opens - now) * k / 12)
        assert not window.is_open(opens - 1)
    assert opens - now <= 15 * 86400


@settings(max_examples=300, deadline=None)
@given(windows, instants)
def test_an_open_window_stays_open_until_it_closes(window: Window, now: float) -> None:
    closes = window.closes_at(now)
    if closes is None:
        assert not window.is_open(now)
        return
    assert now < closes <= now + 26 * 3600
    for k in range(12):
        assert window.is_open(now + (closes - now) * k / 12)


@settings(max_examples=300, deadline=None)
@given(windows, instants)
def test_without_daylight_saving_it_is_the_wall_clock_rule(window: Window, now: float) -> None:
    """In a zone without changes, open means: the day (of the start) is in the set and the time is between."""
    fixed = Window(window.days, window.start, window.end, "UTC")
    wall = datetime.fromtimestamp(now, tz=UTC)
    clock = wall.time()
    if fixed.end > fixed.start:
        expected = wall.weekday() in fixed.days and fixed.start <= clock < fixed.end
    else:  # over midnight (or the whole day)
        yesterday = (wall - timedelta(days=1)).weekday()
        expected = (wall.weekday() in fixed.days and clock >= fixed.start) or (
            yesterday in fixed.days and clock < fixed.end
        )
    assert fixed.is_open(now) == expected


@settings(max_examples=200, deadline=None)
@given(windows, instants)
def test_it_opens_at_the_start_wall_time_unless_a_change_skips_it(window: Window, now: float) -> None:
    opens = window.next_open(now)
    if opens == now:
        return
    local = datetime.fromtimestamp(opens, tz=UTC).astimezone(ZoneInfo(window.zone))
    written = datetime.combine(local.date(), window.start, tzinfo=ZoneInfo(window.zone))
    round_trip = datetime.fromtimestamp(written.timestamp(), tz=UTC).astimezone(ZoneInfo(window.zone))
    if round_trip.time() == window.start:  # the start exists that day
        assert local.time() == window.start
        assert local.weekday() in window.days
