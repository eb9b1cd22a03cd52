"""The int_or_percent filter."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.nodeops.maintenance.plugins.filter.int_or_percent import FilterModule, int_or_percent


@pytest.mark.parametrize(("value", "expected"), [(3, 3), ("3", 3), (" 3 ", 3), ("-1", -1), ("20%", "20%"), (0, 0)])
def test_values_get_the_kubernetes_type(value: object, expected: object) -> None:
    assert int_or_percent(value, "x") == expected
    assert type(int_or_percent(value, "x")) is type(expected)


@pytest.mark.parametrize("bad", ["10.5%", "-5%", "abc", True, None, 1.5])
def test_bad_values_name_the_setting(bad: object) -> None:
    with pytest.raises(AnsibleFilterError, match=r"^crds_max_unavailable: "):
        int_or_percent(bad, "crds_max_unavailable")


def test_exported() -> None:
    assert FilterModule().filters()["int_or_percent"] is int_or_percent


@pytest.mark.parametrize("bad", ["\u0663", " \u0663 ", "-\u0663", "\uff15", "\uff11\uff10", "\u0663%", "\uff150%"])
def test_non_ascii_digits_are_refused(bad: str) -> None:
    """``\\d`` and ``int()`` take every Unicode decimal digit: "\u0663" became 3."""
    with pytest.raises(AnsibleFilterError, match=r"^crds_max_unavailable: "):
        int_or_percent(bad, "crds_max_unavailable")
