"""Fixtures for integration tests: a real control plane with kwok nodes (tests/cluster).

``cluster`` (session): binaries built or reused by ``cluster/build.py``, processes started by
``cluster.launcher.Cluster`` in ``.build/test-cluster-<pid>``, stopped at the end of the session (and
at interpreter exit or SIGTERM if the session dies). ``api``: a ``kubernetes.client.ApiClient``
with the admin bearer token. ``namespace``: a fresh namespace per test.

When an integration test fails, the tail of every component's log is added to its report, and
``.build/failures/<test>/`` keeps what is needed to look into it afterwards (named in the report): the
control plane's component logs, the nodes, and for the test's namespace its events and objects.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import uuid
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest
from cluster import kwok
from cluster.build import build
from cluster.launcher import Cluster, stop_recorded
from kubernetes import client
from kubernetes.client.rest import ApiException
from support.cleanup import drop_finalizers

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
        drop_finalizers(api, name)
        try:
            core.delete_namespace(name)
        except ApiException as err:
            if err.status != 404:
                raise


FAILURES_DIR = BUILD_DIR / "failures"
KEPT_KEY = pytest.StashKey[bool]()


def failure_dir(item: pytest.Item) -> Path:
    """``.build/failures/<test file>.<test name>``, the name cut to what a file system takes."""
    name = re.sub(r"[^A-Za-z0-9_.=-]+", "_", f"{item.path.stem}.{item.name}").strip("_")
    return FAILURES_DIR / name[:200]


def kubectl(control_plane: Cluster, *args: str) -> str:
    """kubectl's output (or what went wrong) against ``control_plane``, for the failure folder."""
    cmd = [str(control_plane.bindir / "kubectl"), "--kubeconfig", str(control_plane.kubeconfig_token), *args]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"# {' '.join(args)}: {err}\n"
    if done.returncode != 0:
        return f"# {' '.join(args)}: exit {done.returncode}\n{done.stderr}{done.stdout}"
    return done.stdout


def keep_failure(item: pytest.Item, control_plane: Cluster, when: str) -> Path:
    """Copy the control plane's logs and dump the test's namespace into the test's failure folder."""
    folder = failure_dir(item)
    if not item.stash.get(KEPT_KEY, False):  # what an earlier session kept for this test goes
        shutil.rmtree(folder, ignore_errors=True)
        item.stash[KEPT_KEY] = True
    folder.mkdir(parents=True, exist_ok=True)
    logs = folder / "logs"
    logs.mkdir(exist_ok=True)
    for log in sorted(control_plane.logdir.glob("*.log")):
        shutil.copyfile(log, logs / log.name)
    (folder / "nodes.yaml").write_text(kubectl(control_plane, "get", "nodes", "-o", "yaml"))
    (folder / "nodemaintenances.yaml").write_text(
        kubectl(control_plane, "get", "nodemaintenances.maintenance.nvidia.com", "-A", "-o", "yaml")
    )
    namespace = getattr(item, "funcargs", {}).get("namespace")
    if isinstance(namespace, str):
        events = kubectl(control_plane, "get", "events", "-n", namespace, "--sort-by=.lastTimestamp", "-o", "wide")
        (folder / f"events-{namespace}.txt").write_text(events)
        kinds = kubectl(control_plane, "api-resources", "--namespaced", "--verbs=list", "-o", "name").split()
        kinds = [kind for kind in kinds if kind != "events" and not kind.startswith("events.")]
        if kinds:
            objects = kubectl(control_plane, "get", ",".join(kinds), "-n", namespace, "-o", "yaml")
            (folder / f"objects-{namespace}.yaml").write_text(objects)
    (folder / "test.txt").write_text(f"{item.nodeid}\nfailed in: {when}\ncluster: {control_plane.workdir}\n")
    return folder


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report: pytest.TestReport = yield
    control_plane = item.config.stash.get(CLUSTER_KEY, None)
    if report.failed and control_plane is not None and INTEGRATION_DIR in item.path.parents:
        report.sections.append(("cluster logs (tail)", control_plane.log_tail(lines=40)))
        try:
            folder = keep_failure(item, control_plane, report.when)
        except Exception as err:  # the test's own failure is what the report is about
            report.sections.append(("failure folder", f"could not keep the failure's files: {err!r}"))
        else:
            report.sections.append(
                ("failure folder", f"control-plane logs, nodes, namespace events and objects kept in {folder}")
            )
    return report
