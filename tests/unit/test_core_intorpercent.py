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


@pytest.mark.parametrize("bad", ["\u0663%", "\uff15%", "\uff11\uff10%", "1\u0660%", "²%", "\u0663"])
def test_non_ascii_digits_are_refused(bad: str) -> None:
    """``\\d`` and ``int()`` take every Unicode decimal digit; Kubernetes' intstr takes 0-9 only."""
    with pytest.raises(IntOrPercentError, match=r"^spec\.maxParallelOperations: .*ASCII digits"):
        parse(bad, "spec.maxParallelOperations")


@given(
    st.lists(st.characters(categories=["Nd"]), min_size=1, max_size=5).filter(
        lambda digits: not all(d.isascii() for d in digits)
    )
)
def test_a_percentage_with_any_non_ascii_digit_never_parses(digits: list[str]) -> None:
    with pytest.raises(IntOrPercentError, match=r"^spec\.minHealthy: "):
        parse("".join(digits) + "%", "spec.minHealthy")


@given(st.integers(min_value=0, max_value=10**400), st.integers(min_value=0, max_value=10**6))
def test_scaling_is_exact_for_any_size(pct: int, total: int) -> None:
    """Integer arithmetic: a huge percentage neither overflows a float nor loses digits."""
    up, down = scaled(f"{pct}%", total, True, "f"), scaled(f"{pct}%", total, False, "f")
    assert down * 100 <= pct * total <= up * 100
    assert up - down == (1 if pct * total % 100 else 0)
