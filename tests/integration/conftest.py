"""Fixtures for integration tests: a real control plane with kwok nodes (tests/cluster).

``cluster`` (session): binaries built or reused by ``cluster/build.py``, processes started by
``cluster.launcher.Cluster`` in ``.build/test-cluster-<pid>``, stopped at the end of the session (and
at interpreter exit or SIGTERM if the session dies). ``api``: a ``kubernetes.client.ApiClient``
with the admin bearer token. ``namespace``: a fresh namespace per test.

``nvidia_cluster`` (session, started on first use): a second control plane that also runs the real NVIDIA
Maintenance Operator, built from ``$NODEOPS_NVIDIA_OPERATOR_SRC`` (``cluster/nvidia_operator.py``); the tests
that need it are skipped, saying how to provide the source, when the variable is unset. ``engine``: the tests
that take it run once per maintenance engine, ``builtin`` (the collection's own reconcile passes, on
``cluster``) and ``operator`` (on ``nvidia_cluster``), each with a fresh namespace.

When an integration test fails, the tail of every component's log is added to its report, and
``.build/failures/<test>/`` keeps what is needed to look into it afterwards (named in the report): the
control plane's component logs, the nodes, and for the test's namespace its events and objects.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import uuid
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest
from cluster import kwok, nvidia_operator
from cluster.build import build
from cluster.launcher import Cluster, stop_recorded
from kubernetes import client
from kubernetes.client.rest import ApiException
from support.cleanup import drop_finalizers
from support.engines import Engine

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


@contextlib.contextmanager
def fresh_namespace(api: client.ApiClient) -> Iterator[str]:
    """A new namespace, deleted afterwards (not waited for: that takes ~10 s)."""
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


@pytest.fixture
def namespace(api: client.ApiClient) -> Iterator[str]:
    """A new namespace, deleted after the test."""
    with fresh_namespace(api) as name:
        yield name


@pytest.fixture(scope="session")
def nvidia_cluster() -> Iterator[Cluster]:
    try:
        source = nvidia_operator.source()
    except nvidia_operator.SourceError as err:
        pytest.fail(str(err))  # given but wrong: say so, do not skip
    if source is None:
        pytest.skip(nvidia_operator.how_to_provide())
    binary = nvidia_operator.build(source)
    bindir = build()
    reap_dead_sessions()
    workdir = BUILD_DIR / f"test-cluster-nvidia-{os.getpid()}"
    control_plane = Cluster(workdir, bindir, nvidia_operator=binary)
    control_plane.start()
    try:
        yield control_plane
    finally:
        control_plane.stop()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="session")
def nvidia_api(nvidia_cluster: Cluster) -> Iterator[client.ApiClient]:
    api_client = kwok.api_client(nvidia_cluster.kubeconfig_token)
    try:
        yield api_client
    finally:
        api_client.close()


@pytest.fixture(params=["builtin", "operator"])
def engine(request: pytest.FixtureRequest) -> Iterator[Engine]:
    """Once with the collection's own engine, once with the real NVIDIA Maintenance Operator (skipped without
    its source). For the operator the MaintenanceOperatorConfig is removed first; the operator keeps the limits it
    last read until it reads new ones (it ignores a deletion), so a test that depends on them writes its own."""
    if request.param == "builtin":
        control_plane: Cluster = request.getfixturevalue("cluster")
        api_client: client.ApiClient = request.getfixturevalue("api")
    else:
        control_plane = request.getfixturevalue("nvidia_cluster")
        api_client = request.getfixturevalue("nvidia_api")
        with contextlib.suppress(ApiException):
            client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
                "maintenance.nvidia.com",
                "v1alpha1",
                control_plane.operator_namespace,
                "maintenanceoperatorconfigs",
                "default",
            )
    with fresh_namespace(api_client) as name:
        config_namespace = name if request.param == "builtin" else control_plane.operator_namespace
        yield Engine(request.param, control_plane, api_client, name, config_namespace)


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
    namespace = namespace_of(item)
    if namespace:
        events = kubectl(control_plane, "get", "events", "-n", namespace, "--sort-by=.lastTimestamp", "-o", "wide")
        (folder / f"events-{namespace}.txt").write_text(events)
        kinds = kubectl(control_plane, "api-resources", "--namespaced", "--verbs=list", "-o", "name").split()
        kinds = [kind for kind in kinds if kind != "events" and not kind.startswith("events.")]
        if kinds:
            objects = kubectl(control_plane, "get", ",".join(kinds), "-n", namespace, "-o", "yaml")
            (folder / f"objects-{namespace}.yaml").write_text(objects)
    (folder / "test.txt").write_text(f"{item.nodeid}\nfailed in: {when}\ncluster: {control_plane.workdir}\n")
    return folder


def engine_of(item: pytest.Item) -> Engine | None:
    return next((v for v in getattr(item, "funcargs", {}).values() if isinstance(v, Engine)), None)


def namespace_of(item: pytest.Item) -> str | None:
    engine = engine_of(item)
    namespace = engine.namespace if engine else getattr(item, "funcargs", {}).get("namespace")
    return namespace if isinstance(namespace, str) else None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report: pytest.TestReport = yield
    engine = engine_of(item)
    control_plane = engine.cluster if engine else item.config.stash.get(CLUSTER_KEY, None)
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
