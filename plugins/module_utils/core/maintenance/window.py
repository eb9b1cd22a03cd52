# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Maintenance windows: on which days, from when to when, in which time zone a rolling run may start a wave.

Pure: no clock. Times are seconds since the epoch given by the caller; the time zone is looked up in the
IANA database (``zoneinfo``: data, not the clock).

A window is a set of days, a start and an end (wall-clock times in the zone) and the zone. Each day of the set
opens one *occurrence*: from the start on that day to the end on the same day, or on the next day when the end
is not after the start (``22:00``-``04:00`` runs over midnight and belongs to the day it starts on; equal start
and end give 24 hours). An instant is inside the window when it is inside an occurrence: start included, end
excluded.

Wall-clock times that a daylight-saving change skips or repeats are read as Python reads them with ``fold=0``:
a skipped time (``02:30`` on the night clocks go forward) is the instant the same length of time after the
change (``03:30``), a repeated one (``02:30`` on the night clocks go back) its first occurrence. An occurrence
that comes out empty or reversed that way is left out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ..node.errors import NodeopsError

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")  # index = date.weekday()
_FULL = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_CLOCK = re.compile(r"^([01]?\d|2[0-3]):([0-5]\d)$")


class WindowError(NodeopsError, ValueError):
    """A maintenance window that cannot be used (unknown day, time or time zone)."""


@dataclass(frozen=True)
class Window:
    days: frozenset[int]  # date.weekday() numbers on which an occurrence starts
    start: time
    end: time
    zone: str

    @property
    def tz(self) -> ZoneInfo:
        return ZoneInfo(self.zone)

    def describe(self) -> str:
        days = ",".join(DAYS[d] for d in sorted(self.days)) if len(self.days) < 7 else "every day"
        return f"{days} {self.start:%H:%M}-{self.end:%H:%M} {self.zone}"

    # -- occurrences -------------------------------------------------------------------------
    def occurrence(self, day: date) -> tuple[float, float] | None:
        """The instants (epoch seconds) the occurrence starting on ``day`` opens and closes; None when the
        window has no occurrence that day (or daylight saving leaves it empty)."""
        if day.weekday() not in self.days:
            return None
        tz = self.tz
        opens = datetime.combine(day, self.start, tzinfo=tz).timestamp()
        end_day = day if self.end > self.start else day + timedelta(days=1)
        closes = datetime.combine(end_day, self.end, tzinfo=tz).timestamp()
        return (opens, closes) if closes > opens else None

    def _local_day(self, now: float) -> date:
        return datetime.fromtimestamp(now, tz=UTC).astimezone(self.tz).date()

    def current(self, now: float) -> tuple[float, float] | None:
        """The occurrence ``now`` is in, or None."""
        today = self._local_day(now)
        for back in (2, 1, 0):  # an occurrence lasts at most a day and an hour or two
            span = self.occurrence(today - timedelta(days=back))
            if span is not None and span[0] <= now < span[1]:
                return span
        return None

    def is_open(self, now: float) -> bool:
        return self.current(now) is not None

    def next_open(self, now: float) -> float:
        """``now`` when the window is open, otherwise when it opens next."""
        if self.is_open(now):
            return now
        today = self._local_day(now)
        for ahead in range(-1, 16):
            span = self.occurrence(today + timedelta(days=ahead))
            if span is not None and span[0] > now:
                return span[0]
        raise WindowError(f"the window {self.describe()} never opens")  # no days: refused when parsed

    def closes_at(self, now: float) -> float | None:
        """When the occurrence ``now`` is in closes (None when the window is closed)."""
        span = self.current(now)
        return None if span is None else span[1]

    def format(self, instant: float) -> str:
        """An instant as a person reads it: in the window's zone, with its UTC offset."""
        local = datetime.fromtimestamp(instant, tz=UTC).astimezone(self.tz)
        return f"{local.isoformat(timespec='minutes')} ({self.zone})"


def parse_day(value: object) -> int:
    text = str(value).strip().lower()
    if text in DAYS:
        return DAYS.index(text)
    if text in _FULL:
        return _FULL.index(text)
    raise WindowError(
        f"window day {value!r} is not a day of the week; use mon, tue, wed, thu, fri, sat, sun (or the full names)"
    )


def parse_clock(value: object, what: str) -> time:
    match = _CLOCK.match(str(value).strip())
    if match is None:
        raise WindowError(f"window {what} {value!r} is not a time of day; write it as HH:MM from 00:00 to 23:59")
    return time(int(match.group(1)), int(match.group(2)))


def parse_zone(value: object) -> str:
    name = str(value or "").strip()
    if not name:
        raise WindowError("the window needs a time zone, e.g. UTC or Europe/Berlin")
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise WindowError(
            f"window time zone {name!r} is not in the IANA time zone database; use a name like UTC, "
            "Europe/Berlin or America/New_York"
        ) from None
    return name


def parse_window(
    days: list[object] | tuple[object, ...] | None,
    start: object | None,
    end: object | None,
    zone: object | None = "UTC",
) -> Window | None:
    """The window from its settings; None when neither days nor times are given (no window: always open).

    No days means every day; a start without an end (or the reverse) is an error."""
    days = list(days or [])
    start_text = "" if start is None else str(start).strip()
    end_text = "" if end is None else str(end).strip()
    if not days and not start_text and not end_text:
        return None
    if bool(start_text) != bool(end_text):
        raise WindowError("give both the window's start and end (HH:MM), or neither for the whole day")
    parsed_days = frozenset(parse_day(d) for d in days) if days else frozenset(range(7))
    if start_text:
        opens, closes = parse_clock(start_text, "start"), parse_clock(end_text, "end")
    else:
        opens = closes = time(0, 0)
    return Window(parsed_days, opens, closes, parse_zone(zone or "UTC"))
