# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Go-style durations ("300s", "5m", "1h30m", "1.5h", "-10s") as the medik8s objects carry them.

Pure and standard library only (shipped to the node agent): the same grammar as Go's
``time.ParseDuration`` and the CRDs' pattern, an optional sign, then one or more of a decimal number
with a unit ``ns``, ``us`` (``µs``), ``ms``, ``s``, ``m`` or ``h``; ``"0"`` alone is zero.
"""

from __future__ import annotations

import re

from .errors import NodeopsError

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h)")
_WHOLE = re.compile(r"^[-+]?(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:ns|us|µs|μs|ms|s|m|h))+$")
#: Go's time.Duration is int64 nanoseconds: 2562047h47m16.854775807s (about 292 years) at most, either sign.
MAX_SECONDS = (2**63 - 1) / 1e9
_MAX_TEXT = "2562047h47m16.854775807s"


class DurationError(NodeopsError, ValueError):
    """A value that is not a Go-style duration; the message names the field."""


def parse_duration(value: object, field: str, allow_negative: bool = False) -> float:
    """Seconds (a float) for a duration string such as ``"1h30m"``; errors name ``field``.

    Only strings are accepted (a bare number has no unit: ``15`` could mean seconds or nanoseconds).
    Negative durations are refused unless ``allow_negative`` (NodeHealthCheck's healthyDelay).
    """
    if not isinstance(value, str):
        raise DurationError(
            f"{field}: {value!r} is not a duration; give a string with a unit such as '15s', '5m' or '1h30m'."
        )
    text = value.strip()
    if text == "0":
        return 0.0
    if not _WHOLE.match(text):
        raise DurationError(
            f"{field}: {value!r} is not a duration; use numbers with units ns, us, ms, s, m or h, "
            "for example '300s', '5m', '1h30m' or '1.5h'."
        )
    sign = -1.0 if text.startswith("-") else 1.0
    seconds = sum(float(number) * _UNITS[unit] for number, unit in _PART.findall(text.lstrip("+-")))
    if not seconds <= MAX_SECONDS:  # also a float infinity: "1" followed by 400 zeros
        raise DurationError(
            f"{field}: {value!r} is longer than the longest duration Go allows ({_MAX_TEXT}, about 292 years); "
            "give a shorter one."
        )
    if sign < 0 and seconds > 0 and not allow_negative:
        raise DurationError(f"{field}: {value!r} is negative; give a duration of 0 or more such as '15s'.")
    return sign * seconds
