"""Hypothesis without per-example deadlines: `make test` runs the unit tests beside the integration tests, and a
busy machine must not turn a slow example into a failure. What the property tests check is correctness."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.client import NODES
from hypothesis import HealthCheck, settings
from support.node_agent import AgentProcess, FakeApi, issue
from unit.test_engine_maintenance import node
from unit.test_rolling_windows_gates import GateApi

settings.register_profile("nodeops", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("nodeops")


@pytest.fixture
def fake_api(tmp_path: Path) -> Iterator[FakeApi]:
    """A fake API server for the node agent's tests."""
    api = FakeApi(tmp_path / "api").start()
    try:
        yield api
    finally:
        api.stop()


@pytest.fixture
def agents() -> Iterator[list[AgentProcess]]:
    """The node agents a test started (append them), stopped when it ends."""
    started: list[AgentProcess] = []
    yield started
    for agent in started:
        agent.stop()


@pytest.fixture
def pki(tmp_path: Path) -> dict[str, Any]:
    """A peer CA for the node agent's tests: the CA, its certificate file and the folder for the agents' files."""
    ca = issue("nodeops-peer-ca")
    return {"ca": ca, "ca_file": ca.write(tmp_path / "pki", "ca")[0], "dir": tmp_path / "pki"}


@pytest.fixture
def gate_api() -> GateApi:
    """The in-memory API of the rolling engine's tests with the nodes n0 to n3, whose pod lists honour a label
    selector (the gates)."""
    fake = GateApi()
    for name in ("n0", "n1", "n2", "n3"):
        fake.add(NODES, node(name))
    return fake
