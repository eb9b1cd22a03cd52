"""A watch-based monitor of the maintenance limits, beside a test or the demo.

It watches Nodes and the NodeMaintenances of one namespace and, after every event, records the requests in
progress (past Pending and holding their node) and the nodes unavailable (not Ready, cordoned, or under
maintenance), so a test can check that maxParallelOperations and maxUnavailable were never exceeded.
"""

from __future__ import annotations

import threading
from typing import Any

from ansible_collections.nodeops.maintenance.plugins.module_utils.core.maintenance import lifecycle as lc
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.client import NODE_MAINTENANCES, NODES, Client


class Monitor:
    """Watches Nodes and the NodeMaintenances of one namespace; records the worst numbers seen."""

    def __init__(self, client: Client, namespace: str) -> None:
        self.client = client
        self.namespace = namespace
        self.lock = threading.Lock()
        self.nodes: dict[str, dict[str, Any]] = {}
        self.nms: dict[str, dict[str, Any]] = {}
        self.max_in_progress = 0
        self.max_down = 0
        self.max_requests = 0  # NodeMaintenances present at once, of any phase
        self.ready_seen: set[str] = set()
        self.events = 0
        #: every event seen: (resource plural, event type, name, resourceVersion)
        self.history: list[tuple[str, str, str, int]] = []
        self.watches: list[Any] = []
        self.threads: list[threading.Thread] = []
        self.errors: list[BaseException] = []

    def start(self) -> None:
        for res, store, namespace in ((NODES, self.nodes, None), (NODE_MAINTENANCES, self.nms, self.namespace)):
            listing = self.client.list(res, namespace=namespace)
            with self.lock:
                for obj in listing["items"]:
                    store[obj["metadata"]["name"]] = obj
            watch = self.client.watch(
                res, namespace=namespace, resource_version=listing["metadata"]["resourceVersion"], timeout=3600
            )
            self.watches.append(watch)
            thread = threading.Thread(target=self._run, args=(watch, store, res.plural), daemon=True)
            thread.start()
            self.threads.append(thread)
        with self.lock:
            self._check()

    def stop(self) -> None:
        for watch in self.watches:
            watch.stop()
        for thread in self.threads:
            thread.join(timeout=10)

    def _run(self, watch: Any, store: dict[str, dict[str, Any]], plural: str) -> None:
        try:
            for event in watch:
                obj = event["object"]
                with self.lock:
                    meta = obj.get("metadata") or {}
                    version = str(meta.get("resourceVersion") or "0")
                    self.history.append((plural, event["type"], str(meta.get("name")), int(version or 0)))
                    if event["type"] == "RELIST":
                        store.clear()
                        store.update({o["metadata"]["name"]: o for o in obj.get("items") or []})
                    elif event["type"] == "DELETED":
                        store.pop(obj["metadata"]["name"], None)
                    else:
                        store[obj["metadata"]["name"]] = obj
                    self.events += 1
                    self._check()
        except BaseException as exc:  # reported by the test
            self.errors.append(exc)

    def _check(self) -> None:
        in_maint: set[str] = set()
        for obj in self.nms.values():
            view = lc.NodeMaintenanceView.from_dict(obj)
            if view.phase == lc.PHASE_READY:
                self.ready_seen.add(obj["metadata"]["name"])
            holds = view.phase not in ("", lc.PHASE_PENDING) and (view.finalizer or not view.deleting)
            if holds and view.node_name in self.nodes:
                in_maint.add(view.node_name)
        down = {name for name, node in self.nodes.items() if not _available(node)}
        self.max_in_progress = max(self.max_in_progress, len(in_maint))
        self.max_down = max(self.max_down, len(down | in_maint))
        self.max_requests = max(self.max_requests, len(self.nms))


def _available(node: dict[str, Any]) -> bool:
    if (node.get("spec") or {}).get("unschedulable"):
        return False
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return True
