"""Int-or-percent parsing and rounding."""

from __future__ import annotations

import pytest
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.intorpercent import (
    IntOrPercentError,
    parse,
    scaled,
)
from hypothesis import given
from hypothesis import strategies as st


@pytest.mark.parametrize(
    ("value", "total", "up", "expected"),
    [
        ("50%", 5, True, 3),  # maxParallelOperations rounds up
        ("50%", 5, False, 2),  # maxUnavailable rounds down (upstream's "50% of 5 -> 2")
        ("20%", 10, False, 2),
        ("0%", 10, True, 0),
        (3, 10, False, 3),
        (-1, 10, False, -1),
        ("100%", 7, True, 7),
    ],
)
def test_scaled(value: object, total: int, up: bool, expected: int) -> None:
    assert scaled(value, total, up, "f") == expected


@pytest.mark.parametrize("bad", ["5", "10.5%", "-5%", "%", "", "abc", True, None, 1.5, [1]])
def test_bad_values_name_the_field(bad: object) -> None:
    with pytest.raises(IntOrPercentError, match=r"^spec\.maxUnavailable: "):
        parse(bad, "spec.maxUnavailable")


@given(st.integers(min_value=0, max_value=1000), st.integers(min_value=0, max_value=10_000))
def test_percent_rounding_brackets_the_exact_value(pct: int, total: int) -> None:
    up, down = scaled(f"{pct}%", total, True, "f"), scaled(f"{pct}%", total, False, "f")
    assert down <= pct * total / 100 <= up
    assert up - down <= 1
