"""Simulated nodes for the test cluster, on the official ``kubernetes`` client.

The kwok controller started by ``launcher.py`` manages the nodes annotated
``kwok.x-k8s.io/node=fake``: it makes them Ready, renews their Lease in ``kube-node-lease``
every 5 s (the heartbeat the node-lifecycle controller watches), makes the pods scheduled
onto them Running/Ready and finishes their deletion.

``stop_heartbeat`` makes kwok let go of one node, the way a crashed kubelet would: the
annotation is removed (kwok ignores further events of the node) and the node's Lease is taken
over by a placeholder holder that never renews it (kwok does not renew a lease another holder
owns). After ``launcher.NODE_MONITOR_GRACE_SECONDS`` the real node-lifecycle controller marks the
node Ready=Unknown and taints it unreachable. ``start_heartbeat`` gives the node back to kwok.

Every function takes an ``ApiClient`` or a kubeconfig path.
"""

from __future__ import annotations

import datetime
import ipaddress
import itertools
import os
import secrets
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from kubernetes import client, config
from kubernetes.client.rest import ApiException

MANAGED_ANNOTATION = "kwok.x-k8s.io/node"
MANAGED_VALUE = "fake"
TYPE_LABEL = "type"
TYPE_VALUE = "kwok"
LEASE_NAMESPACE = "kube-node-lease"
# Holder of the lease of a node whose heartbeat is stopped (kwok's own identity is different).
STOPPED_HOLDER = "nodeops-tests/heartbeat-stopped"
# Taints the node-lifecycle controller sets while a node is not Ready.
LIFECYCLE_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
DEFAULT_CAPACITY: dict[str, str] = {"cpu": "32", "memory": "256Gi", "pods": "110"}
POLL_INTERVAL = 0.5

ApiLike = client.ApiClient | str | os.PathLike[str]
T = TypeVar("T")

_address_counter = itertools.count(1)


# --------------------------------------------------------------------------- clients


def api_client(kubeconfig: str | os.PathLike[str]) -> client.ApiClient:
    """An ApiClient for a kubeconfig; loopback servers never go through an environment proxy."""
    api = config.new_client_from_config(config_file=os.fspath(kubeconfig))
    host = api.configuration.host or ""
    if "//127.0.0.1" in host or "//localhost" in host:
        api.configuration.proxy = None
    return api


def _client(api: ApiLike) -> client.ApiClient:
    return api if isinstance(api, client.ApiClient) else api_client(api)


def _core(api: ApiLike) -> client.CoreV1Api:
    return client.CoreV1Api(_client(api))


def _coordination(api: ApiLike) -> client.CoordinationV1Api:
    return client.CoordinationV1Api(_client(api))


def _ignore_not_found(call: Callable[[], object]) -> None:
    try:
        call()
    except ApiException as err:
        if err.status != 404:
            raise


def wait_until(check: Callable[[], T | None], timeout: float, what: str, interval: float = POLL_INTERVAL) -> T:
    """Poll ``check`` until it returns something truthy (returned); TimeoutError after ``timeout``.

    ``what`` describes the awaited state for the error message.
    """
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


# --------------------------------------------------------------------------- nodes


def _as_dict(obj: Any, api: client.ApiClient) -> dict[str, Any]:
    """A model object (V1Taint, V1NodeCondition, ...) or a dict, as the JSON the API expects."""
    return dict(obj) if isinstance(obj, Mapping) else api.sanitize_for_serialization(obj)


def add_nodes(
    api: ApiLike,
    count: int,
    prefix: str = "kwok-node",
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, Any] | client.V1Taint] | None = None,
    capacity: Mapping[str, str] | None = None,
    conditions: Sequence[Mapping[str, Any] | client.V1NodeCondition] | None = None,
) -> list[str]:
    """Create ``count`` nodes that kwok manages; returns their names, ``<prefix>-<random>-<i>``.

    Every node has the labels ``type=kwok``, ``kubernetes.io/hostname``, ``kubernetes.io/os``
    and ``kubernetes.io/arch`` plus ``labels``; capacity and allocatable are
    ``DEFAULT_CAPACITY`` updated with ``capacity`` (e.g. ``{"nvidia.com/gpu": "8"}``); an
    InternalIP address. No taint is added unless given in ``taints`` (dicts with key, value,
    effect), so pods schedule onto the nodes without tolerations. ``conditions`` adds node
    conditions of other types (kwok itself sets Ready, MemoryPressure, DiskPressure,
    PIDPressure and NetworkUnavailable). Wait for them with ``wait_nodes_ready``.
    """
    if count < 1:
        raise ValueError("count must be at least 1")
    api = _client(api)
    core = client.CoreV1Api(api)
    resources = {**DEFAULT_CAPACITY, **(capacity or {})}
    batch = secrets.token_hex(2)
    created: list[str] = []
    try:
        for index in range(count):
            name = f"{prefix}-{batch}-{index}"
            address = ipaddress.ip_address("10.250.0.0") + next(_address_counter)
            body = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "annotations": {MANAGED_ANNOTATION: MANAGED_VALUE},
                    "labels": {
                        TYPE_LABEL: TYPE_VALUE,
                        "kubernetes.io/hostname": name,
                        "kubernetes.io/os": "linux",
                        "kubernetes.io/arch": "amd64",
                        **(labels or {}),
                    },
                },
                "spec": {"taints": [_as_dict(t, api) for t in taints or ()]},
                "status": {
                    "capacity": dict(resources),
                    "allocatable": dict(resources),
                    "addresses": [
                        {"type": "InternalIP", "address": str(address)},
                        {"type": "Hostname", "address": name},
                    ],
                    "conditions": [_as_dict(c, api) for c in conditions or ()],
                },
            }
            core.create_node(body)
            created.append(name)
    except BaseException:
        delete_nodes(api, created, wait=False)
        raise
    return created


def ready_status(node: client.V1Node) -> str | None:
    """The status of the node's Ready condition ("True", "False", "Unknown"), None without one."""
    for condition in (node.status and node.status.conditions) or ():
        if condition.type == "Ready":
            return str(condition.status)
    return None


def schedulable_ready(node: client.V1Node) -> bool:
    """Ready=True and none of the taints the node-lifecycle controller puts on unready nodes.

    Every new node gets ``node.kubernetes.io/not-ready:NoSchedule`` at creation; the
    controller removes it shortly after the node turns Ready.
    """
    taints = {t.key for t in (node.spec and node.spec.taints) or ()}
    return ready_status(node) == "True" and not taints & set(LIFECYCLE_TAINTS)


def wait_nodes_ready(api: ApiLike, names: Iterable[str], timeout: float = 60.0) -> None:
    """Wait until every named node is Ready=True and rid of the not-ready/unreachable taints.

    TimeoutError names the nodes that are not.
    """
    core = _core(api)
    wanted = set(names)
    pending = set(wanted)

    def all_ready() -> bool:
        nonlocal pending
        ready = {n.metadata.name for n in core.list_node().items if schedulable_ready(n)}
        pending = wanted - ready
        return not pending

    try:
        wait_until(all_ready, timeout, "nodes Ready")
    except TimeoutError:
        raise TimeoutError(f"nodes not Ready (or still tainted) after {timeout:.0f}s: {sorted(pending)}") from None


def wait_node_ready_status(api: ApiLike, name: str, status: str, timeout: float = 60.0) -> client.V1Node:
    """Wait until the node's Ready condition has ``status`` ("True", "False" or "Unknown")."""
    core = _core(api)

    def matches() -> client.V1Node | None:
        node = core.read_node(name)
        return node if ready_status(node) == status else None

    return wait_until(matches, timeout, f"node {name} Ready={status}")


def delete_nodes(api: ApiLike, names: Iterable[str], *, wait: bool = True, timeout: float = 120.0) -> None:
    """Delete the nodes, the pods bound to them and their leases (missing ones are fine).

    A node whose heartbeat is stopped is handed back to kwok first: kwok only lets go of a
    node (and stops renewing its lease) when it sees the deletion of a node it selects.
    Without kwok a pod bound to a deleted node would stay Terminating until the pod garbage
    collector removes it, so the pods are force-deleted here. With ``wait`` returns once the
    nodes are gone.
    """
    api = _client(api)
    core, coordination = client.CoreV1Api(api), client.CoordinationV1Api(api)
    names = list(names)
    for name in names:
        lease = read_lease(api, name)
        if lease is not None and lease.spec.holder_identity == STOPPED_HOLDER:
            _ignore_not_found(lambda name=name: core.patch_node(name, _managed_patch(MANAGED_VALUE)))
        _ignore_not_found(lambda name=name: core.delete_node(name))
        for pod in core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={name}").items:
            _ignore_not_found(
                lambda pod=pod: core.delete_namespaced_pod(
                    pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0
                )
            )
    if wait and names:
        remaining = set(names)

        def gone() -> bool:
            existing = {n.metadata.name for n in core.list_node().items}
            remaining.intersection_update(existing)
            return not remaining

        wait_until(gone, timeout, f"nodes deleted: {sorted(remaining)}")
    # Normally the garbage collector removes them with their node (owner reference).
    for name in names:
        _ignore_not_found(lambda name=name: coordination.delete_namespaced_lease(name, LEASE_NAMESPACE))


# --------------------------------------------------------------------------- heartbeats


def _managed_patch(value: str | None) -> dict[str, Any]:
    """A patch that sets (or with None removes) the annotation kwok selects nodes by."""
    return {"metadata": {"annotations": {MANAGED_ANNOTATION: value}}}


def _now_micro() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def read_lease(api: ApiLike, name: str) -> client.V1Lease | None:
    """The node's Lease in kube-node-lease, None when it does not exist."""
    try:
        return _coordination(api).read_namespaced_lease(name, LEASE_NAMESPACE)
    except ApiException as err:
        if err.status == 404:
            return None
        raise


def stop_heartbeat(api: ApiLike, name: str) -> None:
    """Make kwok stop heartbeating the node: no lease renewals, no status updates.

    The node keeps its pods (kwok no longer updates or finishes them, like a dead kubelet).
    The node-lifecycle controller marks it Ready=Unknown once its lease is older than the
    grace period.
    """
    api = _client(api)
    core, coordination = client.CoreV1Api(api), client.CoordinationV1Api(api)
    core.patch_node(name, _managed_patch(None))
    # One year: kwok only takes a lease over from another holder once it has expired.
    spec = {"holderIdentity": STOPPED_HOLDER, "leaseDurationSeconds": 365 * 24 * 3600, "renewTime": _now_micro()}
    try:
        coordination.patch_namespaced_lease(name, LEASE_NAMESPACE, {"spec": spec})
    except ApiException as err:
        if err.status != 404:
            raise
        body = {"metadata": {"name": name, "namespace": LEASE_NAMESPACE}, "spec": spec}
        coordination.create_namespaced_lease(LEASE_NAMESPACE, body)


def start_heartbeat(api: ApiLike, name: str) -> None:
    """Give the node back to kwok after ``stop_heartbeat``.

    The placeholder lease is deleted; kwok recreates it within its 5 s renew interval, takes
    the node over again and sets Ready=True. Wait for it with ``wait_nodes_ready``.
    """
    api = _client(api)
    core, coordination = client.CoreV1Api(api), client.CoordinationV1Api(api)
    core.patch_node(name, _managed_patch(MANAGED_VALUE))
    lease = read_lease(api, name)
    if lease is not None and lease.spec.holder_identity == STOPPED_HOLDER:
        # Only delete the version we looked at, never a lease kwok already took back.
        options = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=lease.metadata.uid))
        try:
            coordination.delete_namespaced_lease(name, LEASE_NAMESPACE, body=options)
        except ApiException as err:
            if err.status not in (404, 409):
                raise
