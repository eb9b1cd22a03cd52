# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""RFC 3339 timestamps as Kubernetes writes them, read and written in one place.

Pure and standard library only; works on Python 3.9, whose ``datetime.fromisoformat`` takes neither a
``Z`` nor a fraction of other than 3 or 6 digits (the node agent runs there).
"""

from __future__ import annotations

import re
from datetime import datetime, timezone

from .errors import NodeopsError

#: UTC; ``datetime.UTC`` needs Python 3.11.
UTC = timezone.utc  # noqa: UP017

# [0-9], not \d: \d (like int() and str.isdigit()) takes every Unicode decimal digit, such as "٣" (U+0663).
_STAMP = re.compile(
    r"([0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2})(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})?"
)
#: The example the messages give.
EXAMPLE = "2026-01-31T12:00:00Z"


class TimeError(NodeopsError, ValueError):
    """A value that is not a usable RFC 3339 time; the message names the field and says how to fix it."""


def _read(value: object) -> datetime | str:
    """``value`` as an aware UTC datetime, or why it is not one (the end of a message)."""
    if isinstance(value, datetime):
        moment = value if value.tzinfo else value.replace(tzinfo=UTC)
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
        return moment.astimezone(UTC)
    except (OverflowError, ValueError):  # 9999-12-31T23:59:59-01:00 is in the year 10000 in UTC
        return "is outside the years 0001 to 9999 once converted to UTC; give a time within them"


def parse(value: object) -> datetime | None:
    """An aware UTC datetime for ``2026-01-02T03:04:05Z`` (fractions and offsets allowed, no zone = UTC)
    or a datetime (a naive one taken as UTC); None for anything else: not a string, not RFC 3339 with ASCII
    digits, a date or time that does not exist, or a time outside the years 0001-9999 in UTC. Never raises."""
    moment = _read(value)
    return moment if isinstance(moment, datetime) else None


def parse_field(value: object, field: str) -> datetime:
    """:func:`parse`, with a TimeError naming ``field`` that says what is wrong and how to fix it."""
    moment = _read(value)
    if isinstance(moment, str):
        raise TimeError(f"{field}: {value!r} {moment}.")
    return moment


def to_epoch(value: object) -> float | None:
    """Seconds since the epoch, or None when ``value`` is not a timestamp."""
    moment = parse(value)
    return None if moment is None else moment.timestamp()


def format_time(moment: datetime | float) -> str:
    """RFC 3339 in UTC with whole seconds and a Z, as Kubernetes writes it (a number is epoch seconds)."""
    if not isinstance(moment, datetime):
        moment = datetime.fromtimestamp(int(moment), UTC)
    utc = moment.astimezone(UTC)
    # not strftime("%Y"): glibc writes the year 1 as "1", not "0001"
    return f"{utc.year:04d}-{utc.month:02d}-{utc.day:02d}T{utc.hour:02d}:{utc.minute:02d}:{utc.second:02d}Z"
