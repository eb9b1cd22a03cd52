# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""RFC 3339 timestamps as Kubernetes writes them, read and written in one place.

Pure and standard library only; works on Python 3.9, whose ``datetime.fromisoformat`` takes neither a
``Z`` nor a fraction of other than 3 or 6 digits (the node agent runs there).
"""

from __future__ import annotations

import re
from datetime import datetime, timezone

#: UTC; ``datetime.UTC`` needs Python 3.11.
UTC = timezone.utc  # noqa: UP017

_STAMP = re.compile(r"^(\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})?$")


def parse(value: object) -> datetime | None:
    """An aware UTC datetime for ``2026-01-02T03:04:05Z`` (fractions and offsets allowed, no zone = UTC),
    a datetime as it is (made aware), None for anything else."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if not isinstance(value, str):
        return None
    match = _STAMP.match(value.strip())
    if not match:
        return None
    base, fraction, zone = match.groups()
    micro = (fraction or ".0")[1:7].ljust(6, "0")
    zone = "+00:00" if zone in (None, "Z", "z") else zone
    return datetime.fromisoformat(f"{base[:10]}T{base[11:]}.{micro}{zone}").astimezone(UTC)


def to_epoch(value: object) -> float | None:
    """Seconds since the epoch, or None when ``value`` is not a timestamp."""
    moment = parse(value)
    return None if moment is None else moment.timestamp()


def format_time(moment: datetime | float) -> str:
    """RFC 3339 in UTC with whole seconds and a Z, as Kubernetes writes it (a number is epoch seconds)."""
    if not isinstance(moment, datetime):
        moment = datetime.fromtimestamp(int(moment), UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
