"""The pure cordon planner."""

from __future__ import annotations

import pytest
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.maintenance.cordon import (
    CORDONED,
    CORDONED_BY_ANNOTATION,
    ENGINE_FIELD_MANAGER,
    UNCORDONED,
    claim,
    cordon_patch,
    cordoned_by_claim,
    missing_names,
    owns_unschedulable,
    plan_cordon,
    unschedulable_owners,
)
from hypothesis import given
from hypothesis import strategies as st


def node(name: str, unschedulable: bool | None = None) -> dict[str, object]:
    spec = {} if unschedulable is None else {"unschedulable": unschedulable}
    return {"metadata": {"name": name}, "spec": spec}


def test_only_nodes_in_another_state_change() -> None:
    plan = plan_cordon([node("b", True), node("a"), node("c", False)], CORDONED)
    assert [(c.name, c.before, c.changed) for c in plan] == [
        ("a", UNCORDONED, True),
        ("b", CORDONED, False),
        ("c", UNCORDONED, True),
    ]


def test_unknown_state_is_refused() -> None:
    with pytest.raises(ValueError, match="state must be"):
        plan_cordon([node("a")], "drained")


def test_missing_names_in_request_order_once() -> None:
    assert missing_names(["x", "a", "x", "y"], [node("a")]) == ["x", "y"]


def test_patches() -> None:
    assert cordon_patch(CORDONED) == {"spec": {"unschedulable": True}}
    assert cordon_patch(UNCORDONED) == {"spec": {"unschedulable": None}}
    assert cordon_patch(CORDONED, "42", {CORDONED_BY_ANNOTATION: "me"}) == {
        "spec": {"unschedulable": True},
        "metadata": {"resourceVersion": "42", "annotations": {CORDONED_BY_ANNOTATION: "me"}},
    }
    assert cordon_patch(UNCORDONED, "43") == {"spec": {"unschedulable": None}, "metadata": {"resourceVersion": "43"}}


def managed(*entries: tuple[str, str | None, bool]) -> list[dict[str, object]]:
    """managedFields entries (manager, subresource, owns spec.unschedulable)."""
    out: list[dict[str, object]] = []
    for manager, subresource, owns in entries:
        fields: dict[str, object] = {"f:spec": {"f:unschedulable": {}}} if owns else {"f:metadata": {}}
        entry: dict[str, object] = {"manager": manager, "operation": "Update", "fieldsV1": fields}
        if subresource:
            entry["subresource"] = subresource
        out.append(entry)
    return out


def test_who_cordoned_a_node() -> None:
    mine = claim("NodeMaintenance", "ns", "a", "u-1")
    assert mine == "NodeMaintenance ns/a u-1"
    fields = managed(("kubelet", "status", True), ("kubectl", None, False), (ENGINE_FIELD_MANAGER, None, True))
    cordoned = {
        "metadata": {"annotations": {CORDONED_BY_ANNOTATION: mine}, "managedFields": fields},
        "spec": {"unschedulable": True},
    }
    assert unschedulable_owners(cordoned) == [ENGINE_FIELD_MANAGER]  # a status entry does not count
    assert owns_unschedulable(cordoned) and cordoned_by_claim(cordoned, mine)
    assert not cordoned_by_claim(cordoned, claim("NodeMaintenance", "ns", "a", "u-2"))  # a re-created request
    recordoned = {**cordoned, "metadata": {**cordoned["metadata"], "managedFields": managed(("kubectl", None, True))}}
    assert not owns_unschedulable(recordoned) and not cordoned_by_claim(recordoned, mine)
    uncordoned = {**cordoned, "spec": {}}
    assert not cordoned_by_claim(uncordoned, mine)


@given(
    st.dictionaries(st.text(min_size=1, max_size=5), st.sampled_from([None, True, False]), max_size=20),
    st.sampled_from([CORDONED, UNCORDONED]),
)
def test_plan_reaches_state_and_is_idempotent(states: dict[str, bool | None], target: str) -> None:
    nodes = [node(n, s) for n, s in states.items()]
    plan = plan_cordon(nodes, target)
    assert [c.name for c in plan] == sorted(states)
    assert all(c.after == target for c in plan)
    # Applying the plan and planning again changes nothing.
    applied = [node(c.name, c.after == CORDONED) for c in plan]
    assert not any(c.changed for c in plan_cordon(applied, target))
