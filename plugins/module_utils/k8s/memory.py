# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Objects held in memory that answer a run's reads and take its writes, as the API server would.

Check mode and offline runs plan against it: the run is the live run's own code, step after step, and what it
would write is what it wrote here (no second implementation of the steps). Offline the objects are the ones
given; in check mode an object not yet held is read from the cluster once (``base``) and then held, so later
reads see the run's own writes. Nothing written here reaches a cluster.

What it keeps of the API server's rules: writes of an object carry its resourceVersion (Conflict when stale),
the status goes through the ``status`` subresource only, a deletion with a UID precondition fails with
UIDMismatch for another object of that name, an object with finalizers is marked deleted and goes once they
are removed. Selectors: the equality forms (``key``, ``key=value``, ``key!=value``, ``!key``, comma-joined).
Each call works on the held objects under the client's lock (a read from the cluster is made outside it): a
run's writes made from several threads at once (the requests' pool) are applied one after the other, as the API
server would.
"""

from __future__ import annotations

import copy
import functools
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar, cast

from ..core.node.rfc3339 import format_time
from .client import PODS, Client, Resource
from .errors import Conflict, NotFound, UIDMismatch

_Key = tuple[str, str, str, str]  # api version, plural, namespace ("" when cluster-scoped), name
_F = TypeVar("_F", bound=Callable[..., Any])


def _locked(method: _F) -> _F:
    """``method`` holding the client's lock (reentrant: a write reads through :meth:`MemoryClient.get`)."""

    @functools.wraps(method)
    def wrapper(self: MemoryClient, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return method(self, *args, **kwargs)

    return cast(_F, wrapper)


class MemoryClient:
    """The subset of :class:`~.client.Client` a planning run uses, on objects held in memory."""

    def __init__(
        self,
        objects: Iterable[tuple[Resource, Mapping[str, Any]]] = (),
        git_version: str = "",
        base: Client | MemoryClient | None = None,
        now: Callable[[], float] | None = None,
    ) -> None:
        self.base = base
        self._git_version = git_version
        self._now = now
        self._lock = threading.RLock()
        #: key -> the object, or None once it is deleted here
        self._held: dict[_Key, dict[str, Any] | None] = {}
        self._version = 0
        #: the events recorded, as the API server would have stored them (the run's involvedObject and reason)
        self.events: list[dict[str, Any]] = []
        for res, obj in objects:
            held = copy.deepcopy(dict(obj))
            meta = held.setdefault("metadata", {})
            meta.setdefault("resourceVersion", self._next_version())  # every stored object has one
            self._held[self._key(res, held)] = held

    # -- keys and versions -----------------------------------------------------------------
    @staticmethod
    def _key(res: Resource, obj: Mapping[str, Any] | None = None, name: str = "", namespace: str | None = "") -> _Key:
        if obj is not None:
            meta = obj.get("metadata") or {}
            name, namespace = str(meta.get("name") or ""), meta.get("namespace")
        return (res.api_version, res.plural, str(namespace or "") if res.namespaced else "", name)

    def _next_version(self) -> str:
        self._version += 1
        return f"memory-{self._version}"

    # -- reads -----------------------------------------------------------------------------
    def get(self, res: Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        key = self._key(res, name=name, namespace=namespace)
        with self._lock:
            known = key in self._held
        if not known and self.base is not None:
            fetched = self.base.get(res, name, namespace)  # outside the lock; NotFound goes to the caller
            with self._lock:
                self._held.setdefault(key, fetched)  # this run's own write of it meanwhile stays
        with self._lock:
            held = self._held.get(key)
            if held is None:
                raise NotFound(f"{res.kind or res.plural} {name} not found", 404)
            return copy.deepcopy(held)

    def get_metadata(self, res: Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        return {"kind": "PartialObjectMetadata", "metadata": self.get(res, name, namespace)["metadata"]}

    def list(
        self,
        res: Resource,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> dict[str, Any]:
        if self.base is not None:
            listed = (
                self.base.list(
                    res, namespace=namespace, label_selector=label_selector, field_selector=field_selector
                ).get("items")
                or []
            )  # outside the lock
            with self._lock:
                for obj in listed:
                    self._held.setdefault(self._key(res, obj), obj)
        with self._lock:
            return self._listed(res, namespace, label_selector, field_selector)

    def _listed(
        self, res: Resource, namespace: str | None, label_selector: str | None, field_selector: str | None
    ) -> dict[str, Any]:
        items = []
        for key, obj in sorted(self._held.items(), key=lambda item: item[0]):
            if obj is None or key[:2] != (res.api_version, res.plural):
                continue
            if res.namespaced and namespace and key[2] != namespace:
                continue
            if _labels_match(label_selector, (obj.get("metadata") or {}).get("labels") or {}) and _fields_match(
                field_selector, obj
            ):
                items.append(copy.deepcopy(obj))
        return {"apiVersion": res.api_version, "kind": f"{res.kind}List", "metadata": {}, "items": items}

    def server_version(self) -> dict[str, Any]:
        if self._git_version or self.base is None:
            return {"gitVersion": self._git_version}
        return self.base.server_version()

    # -- writes ----------------------------------------------------------------------------
    @_locked
    def create(self, res: Resource, body: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        if namespace and res.namespaced:
            meta["namespace"] = namespace
        key = self._key(res, obj)
        if self._held.get(key) is not None:
            raise Conflict(f"{res.kind or res.plural} {meta.get('name')} already exists", 409)
        meta["resourceVersion"] = self._next_version()
        self._held[key] = obj
        return copy.deepcopy(obj)

    @_locked
    def replace(self, res: Resource, body: dict[str, Any], subresource: str | None = None) -> dict[str, Any]:
        meta = body.get("metadata") or {}
        current = self.get(res, str(meta.get("name")), meta.get("namespace"))
        what = f"{res.kind or res.plural} {meta.get('name')}"
        if meta.get("resourceVersion") and meta["resourceVersion"] != current["metadata"].get("resourceVersion"):
            raise Conflict(f"{what} was changed since it was read (its resourceVersion is not the one given)", 409)
        if subresource == "status":
            new = copy.deepcopy(current)
            new["status"] = copy.deepcopy(body.get("status"))
        else:
            new = copy.deepcopy(body)
            if "status" in current:
                new["status"] = copy.deepcopy(current["status"])
            else:
                new.pop("status", None)
            # what only the API server sets is kept
            for field in ("deletionTimestamp", "uid", "creationTimestamp"):
                if field in current["metadata"]:
                    new["metadata"][field] = current["metadata"][field]
        new["metadata"]["resourceVersion"] = self._next_version()
        key = self._key(res, new)
        if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers"):
            self._held[key] = None  # the last finalizer went: the object goes
        else:
            self._held[key] = new
        return copy.deepcopy(new)

    @_locked
    def delete(
        self,
        res: Resource,
        name: str,
        namespace: str | None = None,
        dry_run: bool = False,
        propagation_policy: str | None = None,
        *,
        uid: str | None = None,
        resource_version: str | None = None,
    ) -> dict[str, Any]:
        del propagation_policy  # dependents are not held apart from their owner here
        current = self.get(res, name, namespace)
        meta = current["metadata"]
        if uid and meta.get("uid") != uid:
            raise UIDMismatch(f"{res.kind or res.plural} {name}: the UID in the precondition is not the object's", 409)
        if resource_version and meta.get("resourceVersion") != resource_version:
            raise Conflict(f"{res.kind or res.plural} {name} was changed since it was read", 409)
        if dry_run:
            return current
        key = self._key(res, current)
        if meta.get("finalizers"):
            meta["deletionTimestamp"] = meta.get("deletionTimestamp") or format_time(self._clock())
            meta["resourceVersion"] = self._next_version()
            self._held[key] = current
        else:
            self._held[key] = None
        return current

    @_locked
    def delete_pod(
        self, name: str, namespace: str, *, uid: str, grace_period: int | None = None, dry_run: bool = False
    ) -> dict[str, Any]:
        if grace_period == 0:
            return self.delete(PODS, name, namespace, dry_run, uid=uid)
        current = self.get(PODS, name, namespace)
        if current["metadata"].get("uid") != uid:
            raise UIDMismatch(f"pod {namespace}/{name}: the UID in the precondition is not the pod's", 409)
        if not dry_run:  # a graceful deletion: the kubelet ends the pod, the pod stays until then
            current["metadata"]["deletionTimestamp"] = format_time(self._clock())
            current["metadata"]["resourceVersion"] = self._next_version()
            self._held[self._key(PODS, current)] = current
        return current

    @_locked
    def create_event(
        self,
        involved: dict[str, Any],
        reason: str,
        message: str,
        event_type: str = "Normal",
        component: str = "nodeops-maintenance",
        now: str | None = None,
    ) -> dict[str, Any]:
        meta = involved.get("metadata") or {}
        event = {
            "involvedObject": {
                "kind": involved.get("kind"),
                "name": meta.get("name"),
                "namespace": meta.get("namespace"),
            },
            "reason": reason,
            "message": message,
            "type": event_type,
            "source": {"component": component},
            "lastTimestamp": now or format_time(self._clock()),
        }
        self.events.append(event)
        return copy.deepcopy(event)

    def _clock(self) -> float:
        return time.time() if self._now is None else self._now()


def _labels_match(selector: str | None, labels: Mapping[str, str]) -> bool:
    for term in (t.strip() for t in (selector or "").split(",")):
        if not term:
            continue
        if term.startswith("!"):
            if term[1:] in labels:
                return False
        elif "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key.strip()) == value.strip():
                return False
        elif "=" in term:
            key, value = term.split("==", 1) if "==" in term else term.split("=", 1)
            if labels.get(key.strip()) != value.strip():
                return False
        elif term not in labels:
            return False
    return True


def _fields_match(selector: str | None, obj: Mapping[str, Any]) -> bool:
    for term in (t.strip() for t in (selector or "").split(",")):
        if not term:
            continue
        negate = "!=" in term
        path, value = term.split("!=" if negate else ("==" if "==" in term else "="), 1)
        found: Any = obj
        for part in path.strip().split("."):
            found = found.get(part) if isinstance(found, Mapping) else None
        if (str(found or "") == value.strip()) == negate:
            return False
    return True
