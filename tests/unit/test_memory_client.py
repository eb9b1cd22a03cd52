# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The in-memory API that check mode plans on: the API server's rules it keeps, also under concurrent calls."""

from __future__ import annotations

import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.client import CONFIGMAPS, NODE_MAINTENANCES
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.errors import Conflict, NotFound
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.memory import MemoryClient


def configmap(name: str, **data: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "ns"}, "data": data}


def test_a_write_with_a_stale_resource_version_is_a_conflict_and_changes_nothing() -> None:
    api = MemoryClient([(CONFIGMAPS, configmap("cm", a="1"))])
    read = api.get(CONFIGMAPS, "cm", "ns")
    api.replace(CONFIGMAPS, {**read, "data": {"a": "2"}})
    with pytest.raises(Conflict):
        api.replace(CONFIGMAPS, {**read, "data": {"a": "3"}})
    assert api.get(CONFIGMAPS, "cm", "ns")["data"] == {"a": "2"}


def test_an_object_with_finalizers_is_marked_deleted_and_goes_with_its_last_finalizer() -> None:
    request = {
        "apiVersion": "maintenance.nvidia.com/v1alpha1",
        "kind": "NodeMaintenance",
        "metadata": {"name": "nm", "namespace": "ns", "finalizers": ["keep"]},
    }
    api = MemoryClient([(NODE_MAINTENANCES, request)], now=lambda: 0.0)
    api.delete(NODE_MAINTENANCES, "nm", "ns")
    marked = api.get(NODE_MAINTENANCES, "nm", "ns")
    assert marked["metadata"]["deletionTimestamp"] == "1970-01-01T00:00:00Z"
    marked["metadata"]["finalizers"] = []
    api.replace(NODE_MAINTENANCES, marked)
    with pytest.raises(NotFound):
        api.get(NODE_MAINTENANCES, "nm", "ns")


def test_writes_stay_in_memory_and_later_reads_see_them_over_the_base() -> None:
    base = MemoryClient([(CONFIGMAPS, configmap("cm", a="1"))])
    overlay = MemoryClient(base=base)
    read = overlay.get(CONFIGMAPS, "cm", "ns")
    overlay.replace(CONFIGMAPS, {**read, "data": {"a": "2"}})
    overlay.create(CONFIGMAPS, configmap("new"))
    assert overlay.get(CONFIGMAPS, "cm", "ns")["data"] == {"a": "2"}
    assert [o["metadata"]["name"] for o in overlay.list(CONFIGMAPS, "ns")["items"]] == ["cm", "new"]
    assert base.get(CONFIGMAPS, "cm", "ns")["data"] == {"a": "1"}
    with pytest.raises(NotFound):
        base.get(CONFIGMAPS, "new", "ns")


@pytest.fixture
def thread_switches_often():
    """Python hands the GIL to another thread every few microseconds instead of 5 ms, so that threads interleave
    inside a call."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(interval)


@pytest.mark.usefixtures("thread_switches_often")
def test_concurrent_writes_are_applied_one_after_the_other() -> None:
    """Check mode's requests pool writes from several threads: every create is kept with a version of its own,
    and of concurrent replaces of one read exactly one wins, the others are conflicts."""
    api = MemoryClient([(CONFIGMAPS, configmap("shared"))])
    start = threading.Barrier(8)

    def create(worker: int) -> list[str]:
        start.wait()
        return [api.create(CONFIGMAPS, configmap(f"w{worker}-{i}"))["metadata"]["resourceVersion"] for i in range(300)]

    with ThreadPoolExecutor(max_workers=8) as pool:
        versions = [v for created in pool.map(create, range(8)) for v in created]
    assert len(set(versions)) == len(versions) == 2400
    assert len(api.list(CONFIGMAPS, "ns")["items"]) == 2401

    race = threading.Barrier(8)
    for _round in range(10):
        read = api.get(CONFIGMAPS, "shared", "ns")

        def replace(worker: int, read: dict = read) -> bool:
            race.wait()
            try:
                api.replace(CONFIGMAPS, {**read, "data": {"by": str(worker)}})
            except Conflict:
                return False
            return True

        with ThreadPoolExecutor(max_workers=8) as pool:
            won = list(pool.map(replace, range(8)))
        assert won.count(True) == 1
        assert api.get(CONFIGMAPS, "shared", "ns")["data"] == {"by": str(won.index(True))}
