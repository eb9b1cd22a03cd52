"""Status conditions are read and set in one place (core/node/conditions.py)."""

from __future__ import annotations

from typing import Any

from ansible_collections.nodeops.maintenance.plugins.module_utils.core.node import conditions
from hypothesis import given
from hypothesis import strategies as st

STATUSES = st.sampled_from(["True", "False", "Unknown"])
TYPES = st.sampled_from(["Ready", "Succeeded", "Disabled"])
TEXT = st.text(max_size=5)


def test_find_skips_what_is_not_a_condition() -> None:
    ready = {"type": "Ready", "status": "True"}
    assert conditions.find(["x", None, {"type": "Other"}, ready], "Ready") is ready
    assert conditions.find("not a list", "Ready") is None
    assert conditions.status_of({"status": {"conditions": [ready]}}, "Ready") == "True"
    assert conditions.status_of({"status": "broken"}, "Ready") is None
    assert conditions.status_of({}, "Ready") is None


def test_a_new_condition_goes_last_with_the_stamp() -> None:
    listed: list[dict[str, Any]] = [{"type": "Other", "status": "True"}]
    assert conditions.set_condition(listed, "Ready", "False", "Cordon", "", "t1", observedGeneration=2)
    assert listed[1] == {
        "type": "Ready",
        "status": "False",
        "reason": "Cordon",
        "message": "",
        "observedGeneration": 2,
        "lastTransitionTime": "t1",
    }


@given(
    ctype=TYPES,
    first=st.tuples(STATUSES, TEXT, TEXT),
    second=st.tuples(STATUSES, TEXT, TEXT),
    keep=st.dictionaries(st.sampled_from(["observedGeneration", "extra"]), st.integers(), max_size=2),
)
def test_set_keeps_position_other_fields_and_the_transition_time_while_the_status_stays(
    ctype: str, first: tuple[str, str, str], second: tuple[str, str, str], keep: dict[str, int]
) -> None:
    before = {"type": "Before", "status": "True"}
    after = {"type": "After", "status": "False"}
    listed: list[dict[str, Any]] = [
        before,
        {
            "type": ctype,
            "status": first[0],
            "reason": first[1],
            "message": first[2],
            "lastTransitionTime": "t0",
            **keep,
        },
        after,
    ]
    changed = conditions.set_condition(listed, ctype, *second, "t1")
    assert listed[0] is before and listed[2] is after and len(listed) == 3
    got = listed[1]
    assert (got["status"], got["reason"], got["message"]) == second
    assert got["lastTransitionTime"] == ("t0" if first[0] == second[0] else "t1")
    assert all(got[k] == v for k, v in keep.items())
    assert changed == (first != second)
    assert not conditions.set_condition(listed, ctype, *second, "t2")  # setting it again changes nothing
