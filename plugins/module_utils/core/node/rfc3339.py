# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Time in one form: every instant core takes or returns is a float of seconds since the epoch (UTC), every
duration a float of seconds. This module is the one place where those seconds meet the strings of the API: it
reads RFC 3339 timestamps and writes them as Kubernetes does (whole seconds and a Z), the MicroTime of
Leases (six fraction digits), and the times of the rolling runs' record (three fraction digits).

Pure and standard library only; works on Python 3.9, whose ``datetime.fromisoformat`` takes neither a
``Z`` nor a fraction of other than 3 or 6 digits (the node agent runs there). The datetimes below never leave
this module.
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta, timezone

from .duration import MAX_SECONDS
from .errors import NodeopsError

#: UTC; ``datetime.UTC`` needs Python 3.11.
_UTC = timezone.utc  # noqa: UP017
_EPOCH = datetime(1970, 1, 1, tzinfo=_UTC)

# [0-9], not \d: \d (like int() and str.isdigit()) takes every Unicode decimal digit, such as "٣" (U+0663).
_STAMP = re.compile(
    r"([0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2})(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})?"
)
#: The example the messages give.
EXAMPLE = "2026-01-31T12:00:00Z"

#: The latest time read where durations are added to it: durations up to Go's longest (about 292 years) are
#: added to the times read, and the years end with 9999 (a later time fails naming its field instead).
_LATEST = datetime(9999, 12, 31, 23, 59, 59, tzinfo=_UTC) - timedelta(seconds=math.ceil(MAX_SECONDS))
LATEST_TIME = (_LATEST - _EPOCH).total_seconds()
#: 0001-01-01T00:00:00Z, the earliest time there is.
EARLIEST_TIME = (datetime(1, 1, 1, tzinfo=_UTC) - _EPOCH).total_seconds()


class TimeError(NodeopsError, ValueError):
    """A value that is not a usable RFC 3339 time; the message names the field and says how to fix it."""


def _read(value: object) -> datetime | str:
    """``value`` as an aware UTC datetime, or why it is not one (the end of a message)."""
    if isinstance(value, datetime):  # as YAML loaders give a timestamp
        moment = value if value.tzinfo else value.replace(tzinfo=_UTC)
    elif not isinstance(value, str):
        return f"is not an RFC 3339 timestamp; give a string such as '{EXAMPLE}'"
    else:
        match = _STAMP.fullmatch(value.strip())
        if not match:
            return (
                f"is not an RFC 3339 timestamp; write it as '{EXAMPLE}', with ASCII digits "
                "(a fraction such as .5 and an offset such as +02:00 are allowed)"
            )
        base, fraction, zone = match.groups()
        micro = (fraction or ".0")[1:7].ljust(6, "0")
        zone = "+00:00" if zone in (None, "Z", "z") else zone
        try:
            moment = datetime.fromisoformat(f"{base[:10]}T{base[11:]}.{micro}{zone}")
        except ValueError as err:  # 2026-02-30, month 13, hour 24, second 60, offset +25:00
            return f"is not a valid RFC 3339 timestamp ({err}); give a date and time that exist, such as '{EXAMPLE}'"
    try:
        return moment.astimezone(_UTC)
    except (OverflowError, ValueError):  # 9999-12-31T23:59:59-01:00 is in the year 10000 in UTC
        return "is outside the years 0001 to 9999 once converted to UTC; give a time within them"


def _too_late(field: str, value: object) -> TimeError:
    return TimeError(
        f"{field}: {value!r} is too late: durations of up to about 292 years are added to the times read, "
        f"which would pass the year 9999; give a time before {format_time(LATEST_TIME)}."
    )


def to_epoch(value: object) -> float | None:
    """Seconds since the epoch for ``2026-01-02T03:04:05Z`` (fractions and offsets allowed, no zone = UTC) or a
    datetime (a naive one taken as UTC); None for anything else: not a string, not RFC 3339 with ASCII digits, a
    date or time that does not exist, or a time outside the years 0001-9999 in UTC. Never raises."""
    moment = _read(value)
    return None if isinstance(moment, str) else moment.timestamp()


def parse_time(value: object, field: str, latest: bool = False) -> float:
    """:func:`to_epoch`, with a TimeError naming ``field`` that says what is wrong and how to fix it.

    With ``latest``, a time after LATEST_TIME is refused too (to the microsecond, which the float of such a time
    does not hold): where durations are added to the time read.
    """
    moment = _read(value)
    if isinstance(moment, str):
        raise TimeError(f"{field}: {value!r} {moment}.")
    if latest and moment > _LATEST:
        raise _too_late(field, value)
    return moment.timestamp()


def check_time(seconds: object, field: str) -> float:
    """``seconds`` (since the epoch) as a time that durations are added to, such as a ``now``: a number from the
    year 0001 to LATEST_TIME; otherwise a TimeError naming ``field``."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds):
        raise TimeError(f"{field}: {seconds!r} is not a time; give seconds since the epoch (UTC) as a number.")
    if seconds > LATEST_TIME:
        raise _too_late(field, seconds)
    if seconds < EARLIEST_TIME:
        raise TimeError(f"{field}: {seconds!r} is before the year 0001; give a time within the years 0001 to 9999.")
    return float(seconds)


def past_year_9999(value: object, seconds: float) -> bool:
    """Whether the time ``value`` plus ``seconds`` (0 or more) is after the year 9999 in UTC, to the microsecond
    (which the float of such a time does not hold). False for a value that is not a time."""
    moment = _read(value)
    if isinstance(moment, str):
        return False
    try:
        moment + timedelta(seconds=seconds)
    except OverflowError:
        return True
    return False


def _utc(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, _UTC)


def _whole(utc: datetime) -> str:
    # not strftime("%Y"): glibc writes the year 1 as "1", not "0001"
    return f"{utc.year:04d}-{utc.month:02d}-{utc.day:02d}T{utc.hour:02d}:{utc.minute:02d}:{utc.second:02d}"


def format_time(seconds: float) -> str:
    """RFC 3339 in UTC with whole seconds and a Z, as Kubernetes writes it: the second ``seconds`` falls in."""
    return _whole(_utc(math.floor(seconds))) + "Z"


def micro_time(seconds: float) -> str:
    """A MicroTime as Kubernetes writes it (a Lease's acquireTime and renewTime): RFC 3339 in UTC with six fraction
    digits and a Z, ``seconds`` rounded to the microsecond."""
    utc = _utc(seconds)
    return f"{_whole(utc)}.{utc.microsecond:06d}Z"


def milli_time(seconds: float) -> str:
    """RFC 3339 in UTC with three fraction digits and a Z, ``seconds`` rounded to the millisecond: the times of a
    rolling run's record (which older releases read back, so the text must not change), whose summary's durations
    keep their precision."""
    whole = math.floor(seconds)
    millis = round((seconds - whole) * 1000)
    if millis == 1000:
        whole, millis = whole + 1, 0
    return f"{_whole(_utc(whole))}.{millis:03d}Z"
