"""The API requests of one NodeMaintenance reconcile pass at 50 and at 500 nodes, from the API server's metrics.

    .venv/bin/python benchmarks/reconcile.py [--sizes 50 500]

Not part of ``make test``. Starts its own control plane (``tests/cluster``) in ``.build/bench-reconcile``.
For each size: N Node objects (not managed by kwok, so no heartbeat load; without a Ready condition they
count as Ready) and N NodeMaintenances from 10 requestors without a drainSpec, ``maxParallelOperations: 10%``.
Four passes of the reconcile engine (``engines/maintenance.py``) run one after the other:

1. ``first``: every new request goes to Pending, 10 % are scheduled and taken to Ready;
2. ``release``: after the requestors deleted the Ready ones, they are released (uncordon, finalizer);
3. ``next``: the next 10 % are scheduled and taken to Ready;
4. ``settled``: a pass with nothing to do.

For each pass the script prints the engine's own requests by verb and resource (counted in the client) and
what the API server counted meanwhile from all clients (``apiserver_request_total`` from ``/metrics``; the
controllers' requests for the new nodes show there too), the wall time, and the writes. Targets:
the same number of list calls at both sizes, and writes only for changes (in the settled pass only the
Lease's acquire and release).
"""

from __future__ import annotations

import argparse
import collections
import re
import ssl
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import conftest as _collection_path  # noqa: E402,F401 - makes this checkout the nodeops.maintenance collection
from ansible_collections.nodeops.maintenance.plugins.module_utils.engines.maintenance import (  # noqa: E402
    ReconcileOptions,
    Reconciler,
)
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.client import (  # noqa: E402
    MAINTENANCE_CONFIGS,
    NAMESPACES,
    NODE_MAINTENANCES,
    NODES,
    Client,
    load_configuration,
)
from cluster.build import build  # noqa: E402
from cluster.launcher import Cluster  # noqa: E402
from integration.test_crds import run_role  # noqa: E402

WORKDIR = ROOT / ".build" / "bench-reconcile"
_METRIC = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$")
_LABEL = re.compile(r'(\w+)="([^"]*)"')


class CountingClient(Client):
    """The engine's own requests, by verb and resource (the server's metrics also count the controllers)."""

    counts: collections.Counter[str]

    def request(self, method: str, path: str, *args: Any, **kwargs: Any) -> Any:
        parts = path.split("?")[0].strip("/").split("/")
        parts = parts[2:] if parts[0] == "api" else parts[3:]  # drop api/v1 or apis/group/version
        if parts[:1] == ["namespaces"] and len(parts) > 2:
            parts = parts[2:]
        resource = parts[0] + (f"/{parts[2]}" if len(parts) > 2 else "")
        verb = "LIST" if method == "GET" and len(parts) == 1 else method
        self.counts[f"{verb} {resource}"] += 1
        return super().request(method, path, *args, **kwargs)


def request_counts(cluster: Cluster) -> collections.Counter[str]:
    context = ssl.create_default_context(cafile=str(cluster.ca_file))
    request = urllib.request.Request(f"{cluster.server}/metrics", headers={"Authorization": f"Bearer {cluster.token}"})
    with urllib.request.urlopen(request, context=context, timeout=30) as resp:
        text = resp.read().decode()
    counts: collections.Counter[str] = collections.Counter()
    for line in text.splitlines():
        match = _METRIC.match(line)
        if not match:
            continue
        labels = dict(_LABEL.findall(match["labels"]))
        if labels.get("resource") in ("", None):
            continue
        resource = labels["resource"] + (f"/{labels['subresource']}" if labels.get("subresource") else "")
        counts[f"{labels['verb']} {resource}"] += int(float(match["value"]))
    return counts


def populate(client: Client, namespace: str, size: int) -> None:
    client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    for index in range(size):
        client.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"{namespace}-n{index}"}})
    client.create(
        MAINTENANCE_CONFIGS,
        {
            "apiVersion": MAINTENANCE_CONFIGS.api_version,
            "kind": MAINTENANCE_CONFIGS.kind,
            "metadata": {"name": "default", "namespace": namespace},
            "spec": {"maxParallelOperations": "10%"},
        },
        namespace,
    )
    for index in range(size):
        body = {
            "apiVersion": "maintenance.nvidia.com/v1alpha1",
            "kind": "NodeMaintenance",
            "metadata": {"name": f"m{index}", "namespace": namespace},
            "spec": {"requestorID": f"r{index % 10}.example.com", "nodeName": f"{namespace}-n{index}"},
        }
        client.create(NODE_MAINTENANCES, body, namespace)


def delete_nodes(client: Client, namespace: str, size: int) -> None:
    for index in range(size):
        client.delete(NODES, f"{namespace}-n{index}")


def measured_pass(
    cluster: Cluster, client: CountingClient, reconciler: Reconciler
) -> tuple[dict[str, int], dict[str, int], float, Any]:
    """(our requests, all requests the API server counted meanwhile, seconds, report)."""
    before = request_counts(cluster)
    client.counts = collections.Counter()
    start = time.monotonic()
    report = reconciler.run_pass()
    seconds = time.monotonic() - start
    ours = dict(client.counts)
    after = request_counts(cluster)
    delta = {k: after[k] - before.get(k, 0) for k in after if after[k] - before.get(k, 0) > 0}
    return ours, delta, seconds, report


WRITES = ("POST", "PUT", "PATCH", "DELETE")


def run_size(cluster: Cluster, client: CountingClient, size: int) -> dict[str, dict[str, int]]:
    namespace = f"bench-{size}"
    client.counts = collections.Counter()
    populate(client, namespace, size)
    options = ReconcileOptions(namespace=namespace, config_namespace=namespace, lease_wait=10)
    reconciler = Reconciler(client, options)
    passes: dict[str, dict[str, int]] = {}
    try:
        for label in ("first", "release", "next", "settled"):
            if label == "release":  # the requestors are done with the Ready ones
                for item in client.list(NODE_MAINTENANCES, namespace)["items"]:
                    if any(c.get("reason") == "Ready" for c in (item.get("status") or {}).get("conditions") or []):
                        client.delete(NODE_MAINTENANCES, item["metadata"]["name"], namespace)
            ours, server, seconds, report = measured_pass(cluster, client, reconciler)
            passes[label] = ours
            lists = sum(v for k, v in ours.items() if k.startswith("LIST "))
            writes = sum(v for k, v in ours.items() if k.split(" ")[0] in WRITES)
            print(
                f"{size:>5} {label:<8} {seconds:6.2f}s  lists {lists:2}  writes {writes:5}  "
                f"(scheduled {len(report.scheduled)}, advanced {len(report.advanced)}, released "
                f"{len(report.released)}, events {len(report.events)})"
            )
            print(f"{'':>8}ours: " + ", ".join(f"{k} {v}" for k, v in sorted(ours.items())))
            print(f"{'':>8}API server, all clients: " + ", ".join(f"{k} {v}" for k, v in sorted(server.items())))
    finally:
        delete_nodes(client, namespace, size)
    return passes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[50, 500])
    args = parser.parse_args()
    cluster = Cluster(WORKDIR, build()).start()
    try:
        run_role(cluster, WORKDIR, {"crds_remediation": False})
        params = {"host": cluster.server, "api_key": cluster.token, "ca_cert": str(cluster.ca_file)}
        client = CountingClient(load_configuration(params), pool_size=50)
        results = {size: run_size(cluster, client, size) for size in args.sizes}
    finally:
        cluster.stop()
    ok = True
    for label in ("first", "release", "next", "settled"):
        lists = {size: sum(v for k, v in r[label].items() if k.startswith("LIST ")) for size, r in results.items()}
        writes = {size: sum(v for k, v in r[label].items() if k.split(" ")[0] in WRITES) for size, r in results.items()}
        same = len(set(lists.values())) == 1
        ok = ok and same
        print(f"{label:<8} list calls {lists} ({'same at every size' if same else 'DIFFER'}); writes {writes}")
    settled = {
        size: {k: v for k, v in r["settled"].items() if k.split(" ")[0] in WRITES} for size, r in results.items()
    }
    ok = ok and all(w == {"PUT leases": 2} for w in settled.values())
    print(f"writes of the settled pass: {settled} (target: the Lease's acquire and release only)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
