"""Cordon / uncordon of one node as a conditional write (engines/cordon.py): Conflict -> read again, decide again."""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.maintenance.cordon import (
    CORDONED,
    MAX_CONFLICTS,
    UNCORDONED,
)
from ansible_collections.nodeops.maintenance.plugins.module_utils.engines.cordon import set_state
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s import errors
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.client import NODES
from unit.test_engine_maintenance import FakeApi, node


@pytest.fixture
def api() -> FakeApi:
    fake = FakeApi()
    fake.add(NODES, node("n0"))
    return fake


def read(api: FakeApi) -> dict[str, Any]:
    found = api.obj(NODES, "n0", None)
    assert found is not None
    return found


def node_writes(api: FakeApi) -> list[tuple[str, ...]]:
    return [w for w in api.writes if w[1] == "nodes"]


def test_the_write_carries_the_resource_version_it_was_decided_on(api: FakeApi) -> None:
    seen: list[dict[str, Any]] = []
    original = api.patch

    def patch(res: Any, name: str, body: dict[str, Any], namespace: str | None = None, **kw: Any) -> dict:
        seen.append(body)
        return original(res, name, body, namespace, **kw)

    api.patch = patch  # type: ignore[method-assign]
    listed = read(api)
    outcome = set_state(api, listed, CORDONED)  # type: ignore[arg-type]
    assert seen == [
        {"spec": {"unschedulable": True}, "metadata": {"resourceVersion": listed["metadata"]["resourceVersion"]}}
    ]
    assert outcome.change.changed and outcome.rereads == 0 and outcome.node["spec"]["unschedulable"] is True


def test_a_conflict_is_read_again_and_written_again(api: FakeApi) -> None:
    listed = read(api)
    api.conflicts[("nodes", "n0")] = 2  # two unrelated writes (a heartbeat, a label) between read and write
    outcome = set_state(api, listed, CORDONED)  # type: ignore[arg-type]
    assert outcome.rereads == 2 and outcome.change.as_dict() == {
        "name": "n0",
        "before": UNCORDONED,
        "after": CORDONED,
        "changed": True,
    }
    now = read(api)
    assert now["spec"]["unschedulable"] is True and now["metadata"]["annotations"]["x"] == "y"
    assert node_writes(api) == [("patch", "nodes", "n0", "True")]


def test_a_node_someone_else_moved_meanwhile_is_left_alone(api: FakeApi) -> None:
    listed = read(api)
    api.patch(NODES, "n0", {"spec": {"unschedulable": True}}, field_manager="kubectl")  # kubectl cordon meanwhile
    api.writes.clear()
    outcome = set_state(api, listed, CORDONED)  # type: ignore[arg-type]
    assert outcome.rereads == 1 and not outcome.change.changed and outcome.change.before == CORDONED
    assert node_writes(api) == []
    # and the other way round: an uncordon decided on a read from before someone else's uncordon
    stale_cordoned = read(api)
    api.patch(NODES, "n0", {"spec": {"unschedulable": None}}, field_manager="kubectl")
    api.writes.clear()
    again = set_state(api, stale_cordoned, UNCORDONED)  # type: ignore[arg-type]
    assert again.rereads == 1 and not again.change.changed and node_writes(api) == []


def test_conflicts_without_end_are_raised(api: FakeApi) -> None:
    api.conflicts[("nodes", "n0")] = 1_000
    with pytest.raises(errors.Conflict):
        set_state(api, read(api), CORDONED)  # type: ignore[arg-type]
    assert api.conflicts[("nodes", "n0")] == 1_000 - (MAX_CONFLICTS + 1)
    assert node_writes(api) == []


def test_check_mode_writes_nothing_but_is_decided_the_same_way(api: FakeApi) -> None:
    listed = read(api)
    api.conflicts[("nodes", "n0")] = 1
    outcome = set_state(api, listed, CORDONED, dry_run=True)  # type: ignore[arg-type]
    assert outcome.change.changed and outcome.rereads == 1 and outcome.node["spec"]["unschedulable"] is True
    assert "unschedulable" not in read(api)["spec"] and node_writes(api) == []
