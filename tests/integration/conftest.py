"""Fixtures for integration tests: a real control plane with kwok nodes (tests/cluster).

``cluster`` (session): binaries built or reused by ``cluster/build.py``, processes started by
``cluster.launcher.Cluster`` in ``.build/test-cluster-<pid>``, stopped at the end of the session (and
at interpreter exit or SIGTERM if the session dies). ``api``: a ``kubernetes.client.ApiClient``
with the admin bearer token. ``namespace``: a fresh namespace per test.

When an integration test fails, the tail of every component's log is added to its report.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest
from cluster import kwok
from cluster.build import build
from cluster.launcher import Cluster, stop_recorded
from kubernetes import client
from kubernetes.client.rest import ApiException

CLUSTER_KEY = pytest.StashKey[Cluster]()
INTEGRATION_DIR = Path(__file__).resolve().parent


# One work directory per pytest process, named after its PID, so that sessions can run side by
# side. A session killed with SIGKILL leaves its directory and processes behind: the next session
# stops the processes recorded there (by PID, checked against the binary) and removes it.
BUILD_DIR = INTEGRATION_DIR.parent.parent / ".build"


def reap_dead_sessions() -> None:
    for workdir in BUILD_DIR.glob("test-cluster-*"):
        owner = workdir.name.rsplit("-", 1)[-1]
        if owner.isdigit() and not Path(f"/proc/{owner}").exists():
            stopped = stop_recorded(workdir)
            if stopped:
                print(f"[cluster] stopped processes of a dead test session: {', '.join(stopped)}")
            shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    bindir = build()
    reap_dead_sessions()
    workdir = BUILD_DIR / f"test-cluster-{os.getpid()}"
    control_plane = Cluster(workdir, bindir)
    control_plane.start()
    request.config.stash[CLUSTER_KEY] = control_plane
    try:
        yield control_plane
    finally:
        control_plane.stop()
        del request.config.stash[CLUSTER_KEY]
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="session")
def api(cluster: Cluster) -> Iterator[client.ApiClient]:
    api_client = kwok.api_client(cluster.kubeconfig_token)
    try:
        yield api_client
    finally:
        api_client.close()


@pytest.fixture
def namespace(api: client.ApiClient) -> Iterator[str]:
    """A new namespace, deleted after the test (not waited for: that takes ~10 s)."""
    core = client.CoreV1Api(api)
    name = f"test-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name, "labels": {"nodeops.test/namespace": "true"}}})
    try:
        yield name
    finally:
        try:
            core.delete_namespace(name)
        except ApiException as err:
            if err.status != 404:
                raise


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report: pytest.TestReport = yield
    control_plane = item.config.stash.get(CLUSTER_KEY, None)
    if report.failed and control_plane is not None and INTEGRATION_DIR in item.path.parents:
        report.sections.append(("cluster logs (tail)", control_plane.log_tail(lines=40)))
    return report
