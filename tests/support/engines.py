"""Where an integration test runs for one maintenance engine (the ``engine`` fixture of the integration tests)."""

from __future__ import annotations

from dataclasses import dataclass

from cluster.launcher import Cluster
from kubernetes import client


@dataclass(frozen=True)
class Engine:
    """The engine's name (``builtin`` or ``operator``), its control plane, a client, the test's fresh namespace,
    and the namespace of the MaintenanceOperatorConfig the engine reads."""

    name: str
    cluster: Cluster
    api: client.ApiClient
    namespace: str
    config_namespace: str
