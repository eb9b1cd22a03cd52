# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Int-or-percent values (``3`` or ``"20%"``), as Kubernetes' intstr, with the rounding made explicit.

Pure, standard library only: used by the scheduler (maxParallelOperations rounds up, maxUnavailable rounds
down) and the health rules (minHealthy / maxUnhealthy round up).
"""

from __future__ import annotations

import re

from .node.errors import NodeopsError

# [0-9], not \d: \d (like int() and str.isdigit()) takes every Unicode decimal digit, such as "٣" (U+0663).
_PERCENT = re.compile(r"([0-9]+)%")
_DIGITS = re.compile(r"-?[0-9]+")


class IntOrPercentError(NodeopsError, ValueError):
    """A value that is neither an integer nor a whole percentage; the message names the field."""


def parse(value: object, field: str) -> tuple[int, bool]:
    """``(number, is_percent)`` for ``3``, ``"3"`` is refused, ``"20%"`` gives ``(20, True)``.

    Booleans and fractional or signed percentages are refused with a message that names ``field``.
    """
    if isinstance(value, bool):
        raise IntOrPercentError(
            f"{field}: {value!r} is a boolean; use an integer such as 3 or a percentage such as '20%'."
        )
    if isinstance(value, int):
        return value, False
    if isinstance(value, str):
        match = _PERCENT.fullmatch(value.strip())
        if match:
            return int(match.group(1)), True
        if _DIGITS.fullmatch(value.strip()):
            # only where the value is an object's field: the options and the filter turn "3" into 3 first
            raise IntOrPercentError(
                f"{field}: {value!r} is a number in quotes, which the API server takes as text; write it without "
                f"quotes ({value.strip()})."
            )
        raise IntOrPercentError(
            f"{field}: {value!r} is not an integer or a whole percentage; use for example 3 or '20%' "
            "(ASCII digits; a percentage without a fraction or a sign)."
        )
    raise IntOrPercentError(f"{field}: {value!r} must be an integer or a percentage string such as '20%'.")


def scaled(value: object, total: int, round_up: bool, field: str) -> int:
    """The absolute number ``value`` stands for out of ``total`` (an int is returned as it is)."""
    number, is_percent = parse(value, field)
    if not is_percent:
        return number
    # integer arithmetic: exact, and no OverflowError for a percentage too large for a float
    return -(-number * total // 100) if round_up else number * total // 100
