"""playbooks/rolling_maintenance.yml on the real cluster, run as users run it: ansible-playbook in a subprocess.

The maintenance of each node is the collection's simulated reboot (kwok takes the node down and brings it back
with a new boot ID), wrapped in a tasks file that leaves one file per maintenance in a folder, so the test
counts how often each node was maintained. A watch-based monitor checks the limits during the runs.

The tests that take ``engine`` run twice: with the collection's own engine, and with ``rolling_engine: operator``
against the real NVIDIA Maintenance Operator on a control plane of its own (see conftest.py).
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.maintenance import lifecycle as lc
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.maintenance.rolling import (
    record_name,
    stored_nodes,
)
from cluster import kwok
from cluster.launcher import OPERATOR, REBOOT_ANNOTATION
from integration.test_maintenance_acceptance import api_client
from integration.test_maintenance_reconcile import GROUP, NM_PLURAL, VERSION
from kubernetes import client as k8s
from support.ansible_cli import BIN, clean_env
from support.engines import Engine
from support.monitor import Monitor
from support.processes import kill_tree

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
IMAGE = "registry.invalid/app:1"
REQUESTOR = "rolling-test.nodeops.io"


@pytest.fixture(scope="module")
def crds(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> None:
    from integration.test_crds import run_role

    run_role(cluster, tmp_path_factory.mktemp("rolling-crds"), {})


BUILTIN_ONLY = pytest.mark.parametrize("engine", ["builtin"], indirect=True)
OPERATOR_ONLY = pytest.mark.parametrize("engine", ["operator"], indirect=True)


@pytest.fixture
def fleet(request: pytest.FixtureRequest, engine: Engine) -> Iterator[tuple[str, list[str]]]:
    """Six nodes with a label of their own, each running pods of a Deployment; (label selector, names)."""
    if engine.name == "builtin":
        request.getfixturevalue("crds")  # the operator's control plane has them from its start
    api, namespace = engine.api, engine.namespace
    label = f"rolling-{uuid.uuid4().hex[:6]}"
    names = kwok.add_nodes(api, 6, prefix=label, labels={"rolling": label})
    try:
        kwok.wait_nodes_ready(api, names, timeout=120)
        deployment = {
            "metadata": {"name": "app"},
            "spec": {
                "replicas": 6,
                "selector": {"matchLabels": {"app": "rolling"}},
                "template": {
                    "metadata": {"labels": {"app": "rolling"}},
                    "spec": {
                        "nodeSelector": {"rolling": label},
                        "terminationGracePeriodSeconds": 0,
                        "containers": [{"name": "c", "image": IMAGE}],
                    },
                },
            },
        }
        k8s.AppsV1Api(api).create_namespaced_deployment(namespace, deployment)
        kwok.wait_until(
            lambda: (
                sum(p.status.phase == "Running" for p in k8s.CoreV1Api(api).list_namespaced_pod(namespace).items) == 6
                or None
            ),
            120,
            "the Deployment's pods Running",
        )
        yield f"rolling={label}", names
    finally:
        kwok.delete_nodes(api, names, timeout=120)


def running_pod(engine: Engine, name: str, node: str, labels: dict[str, str]) -> None:
    """A pod ``name`` with ``labels`` on ``node`` in the test's namespace, once it runs."""
    core = k8s.CoreV1Api(engine.api)
    pod = {
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 0,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "c", "image": IMAGE}],
        },
    }
    core.create_namespaced_pod(engine.namespace, pod)
    kwok.wait_until(
        lambda: core.read_namespaced_pod(name, engine.namespace).status.phase == "Running" or None,
        60,
        f"{name} Running",
    )


def tasks_file(tmp_path: Path, fail_on: str = "", leave_on: str = "") -> tuple[Path, Path]:
    """A maintenance tasks file: one file per maintenance in a log folder, then the simulated reboot. ``fail_on``: the
    node whose maintenance fails; ``leave_on``: the node whose host cannot be reached by a task of its maintenance
    (which Ansible does not rescue: the host leaves the play)."""
    log = tmp_path / "maintained"
    log.mkdir()
    body = [
        {
            "name": "Log the maintenance",
            "ansible.builtin.tempfile": {"path": str(log), "prefix": "{{ nodeops_node_name }}."},
            "delegate_to": "localhost",
        },
    ]
    if fail_on:
        body.append(
            {
                "name": "Break one node",
                "ansible.builtin.fail": {"msg": "firmware update failed"},
                "when": f"nodeops_node_name == '{fail_on}'",
            }
        )
    if leave_on:
        body.append(
            {
                "name": "Reach one node",
                "ansible.builtin.ping": {},
                "vars": {"ansible_host": "nohost.invalid", "ansible_connection": "ssh", "ansible_ssh_timeout": 2},
                "when": f"nodeops_node_name == '{leave_on}'",
            }
        )
    body.append(
        {
            "name": "Simulated reboot",
            "ansible.builtin.include_tasks": str(REPO / "playbooks/maintenance/simulated_reboot.yml"),
        }
    )
    path = tmp_path / "maintenance.yml"
    path.write_text(json.dumps(body))
    return path, log


def maintained(log: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for entry in log.iterdir():
        node = entry.name.rsplit(".", 1)[0]
        counts[node] = counts.get(node, 0) + 1
    return counts


def command(engine: Engine, selector: str, tasks: Path, run_id: str, *extra: str) -> list[str]:
    variables = {
        "rolling_run_id": unique(engine, run_id),
        "rolling_requestor": REQUESTOR,
        "rolling_node_selector": selector,
        "rolling_maintenance_tasks": str(tasks),
        "rolling_engine": engine.name,
        "rolling_namespace": engine.namespace,
        "rolling_config_namespace": engine.config_namespace,
        "rolling_max_parallel_operations": 2,
        "rolling_max_unavailable": 3,
        "rolling_kubeconfig": str(engine.cluster.kubeconfig),
        "rolling_gather_seconds": 5,
        "rolling_simulated_reboot_seconds": 2,
        "rolling_drain_spec": {"force": True, "timeout_seconds": 60},
        "rolling_wave_timeout": 120,
        "rolling_node_ready_timeout": 60,
    }
    return [
        str(BIN / "ansible-playbook"),
        "nodeops.maintenance.rolling_maintenance",
        "-f",
        "10",
        "-e",
        json.dumps(variables),
        *extra,
    ]


def env() -> dict[str, str]:
    return clean_env({"ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.default", "ANSIBLE_HOST_KEY_CHECKING": "False"})


def run(cmd: list[str], expect_rc: int | None = 0, timeout: float = 600) -> str:
    """Run a command (ansible-playbook); its output. ``expect_rc`` None: any exit code."""
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env(), timeout=timeout, check=False)
    assert expect_rc is None or proc.returncode == expect_rc, proc.stdout[-6000:] + proc.stderr[-3000:]
    return proc.stdout


def unique(engine: Engine, run_id: str) -> str:
    """The run's ID made unique to the test: its record is kept in the config namespace, which the operator's
    tests share."""
    return f"{run_id}-{engine.namespace}"


def record(engine: Engine, run_id: str) -> dict[str, dict[str, Any]]:
    name = record_name(unique(engine, run_id))
    cm = k8s.CoreV1Api(engine.api).read_namespaced_config_map(name, engine.config_namespace)
    return stored_nodes(cm.data)


def our_requests(api: k8s.ApiClient, namespace: str) -> list[dict[str, Any]]:
    items = k8s.CustomObjectsApi(api).list_namespaced_custom_object(GROUP, VERSION, namespace, NM_PLURAL)["items"]
    return [i for i in items if i["spec"]["requestorID"] == REQUESTOR]


def cordoned(api: k8s.ApiClient, names: list[str]) -> list[str]:
    return [n for n in names if k8s.CoreV1Api(api).read_node(n).spec.unschedulable]


def check_batches(state: dict[str, dict[str, Any]], gather: float) -> None:
    """The admission batches (the record's ``wave``) as the record's own times show them: numbered from 1 without a
    gap; a node joined its batch within ``gather`` seconds of the batch's first node and while one of the batch's
    nodes was still in its maintenance (not released yet); any other node opened a new batch. How many batches
    there are depends on how fast the maintenance goes, so that is not asserted."""
    waves = sorted({r["wave"] for r in state.values()})
    assert waves == list(range(1, len(waves) + 1)), waves
    at = {node: {k: datetime.fromisoformat(r[k]) for k in ("started", "back")} for node, r in state.items()}
    by_start = sorted(state, key=lambda node: at[node]["started"])
    for index, node in enumerate(by_start):
        before = [b for b in by_start[:index] if state[b]["wave"] == state[node]["wave"]]
        if not before:
            continue
        started = at[node]["started"]
        assert (started - min(at[b]["started"] for b in before)).total_seconds() <= gather, (node, state)
        assert any(at[b]["back"] >= started for b in before), (node, state)


def test_every_node_once_in_waves_within_the_limits_and_a_second_run_does_nothing(
    engine: Engine, fleet: tuple[str, list[str]], tmp_path: Path
) -> None:
    api, namespace = engine.api, engine.namespace
    selector, names = fleet
    tasks, log = tasks_file(tmp_path)
    watcher = Monitor(api_client(engine.cluster, 4), namespace)
    watcher.start()
    try:
        out = run(command(engine, selector, tasks, "first"))
    finally:
        watcher.stop()
    assert watcher.errors == []
    assert 0 < watcher.max_in_progress <= 2, watcher.max_in_progress
    assert watcher.max_down <= 3, watcher.max_down
    assert maintained(log) == dict.fromkeys(names, 1)
    state = record(engine, "first")
    assert {n: r["state"] for n, r in state.items()} == dict.fromkeys(names, "done")
    check_batches(state, gather=5)
    for r in state.values():
        assert r["requested"] <= r["admitted"] <= r["ready"] <= r["started"] <= r["finished"] <= r["back"], r
        assert r["started"] <= r["began"] <= r["ended"] <= r["finished"], r  # the tasks' own span, from the hosts
    assert our_requests(api, namespace) == []
    assert cordoned(api, names) == []
    assert "Wave 1: " in out and "done (wave 1)" in out and "outcome" in out  # as it happens, and the summary
    for node in names:
        assert node in out

    again = run(command(engine, selector, tasks, "first"))
    assert "Wave " not in again.replace("waves: ", "")
    assert maintained(log) == dict.fromkeys(names, 1)
    assert our_requests(api, namespace) == []


def test_a_run_killed_in_a_wave_and_run_again_maintains_no_node_twice(
    engine: Engine, fleet: tuple[str, list[str]], tmp_path: Path
) -> None:
    api, namespace = engine.api, engine.namespace
    selector, names = fleet
    tasks, log = tasks_file(tmp_path)
    cmd = command(engine, selector, tasks, "killed", "-e", "rolling_simulated_reboot_seconds=4")
    proc = subprocess.Popen(cmd, env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:

        def in_a_wave() -> bool | None:
            try:
                state = record(engine, "killed")
            except k8s.ApiException:
                return None
            # every node of the wave has begun its maintenance (logged it): the kill comes during the
            # simulated reboot that follows, not between the record's "maintaining" and the tasks' first step
            maintaining = {n for n, r in state.items() if r["state"] == "maintaining"}
            if maintaining and maintaining <= set(maintained(log)):
                return True
            return None

        kwok.wait_until(in_a_wave, 120, "a wave in its maintenance")
    finally:
        # the whole run: ansible's workers have sessions of their own, a kill of the group leaves them running
        kill_tree(proc.pid)
        proc.wait(timeout=60)
        if proc.stdout is not None:
            proc.stdout.close()
    interrupted = {n for n, r in record(engine, "killed").items() if r["state"] == "maintaining"}
    assert interrupted
    assert interrupted <= set(maintained(log)), "the kill came before every interrupted node began its maintenance"
    assert our_requests(api, namespace), "the killed run left its requests"

    out = run(command(engine, selector, tasks, "killed"))
    counts = maintained(log)
    assert all(count == 1 for count in counts.values()), counts
    assert set(counts) == set(names)  # the interrupted ones were maintained by the first run
    state = record(engine, "killed")
    assert {n for n, r in state.items() if r["state"] == "interrupted"} == interrupted
    assert {n for n, r in state.items() if r["state"] == "done"} == set(names) - interrupted
    assert our_requests(api, namespace) == []
    assert cordoned(api, names) == []
    assert "interrupted" in out


@BUILTIN_ONLY
def test_a_restart_says_it_waits_for_an_interrupted_node_still_down_then_releases_it(
    engine: Engine, fleet: tuple[str, list[str]], tmp_path: Path
) -> None:
    """A run killed while the node of its wave is down (a reboot that does not end): the run started again waits
    for that node to be Ready before it releases it, says so at every rolling_progress_interval, and goes on once
    the node is back."""
    api, namespace = engine.api, engine.namespace
    _selector, names = fleet
    node = names[0]
    core = k8s.CoreV1Api(api)
    stuck = tmp_path / "stuck.yml"
    stuck.write_text(
        json.dumps(
            [
                {
                    "name": "Wait for the test",
                    "ansible.builtin.wait_for": {"path": str(tmp_path / "never"), "timeout": 600},
                    "delegate_to": "localhost",
                }
            ]
        )
    )
    targets = json.dumps({"rolling_node_names": [node]})
    cmd = command(engine, "", stuck, "down", "-e", targets)
    proc = subprocess.Popen(cmd, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:

        def maintaining() -> bool | None:
            try:
                return record(engine, "down")[node]["state"] == "maintaining" or None
            except k8s.ApiException:
                return None

        kwok.wait_until(maintaining, 120, f"{node} in its maintenance")
        until = "2099-01-01T00:00:00Z"  # down until the test says otherwise
        core.patch_node(node, {"metadata": {"annotations": {REBOOT_ANNOTATION: until}}})

        def down() -> bool | None:
            return any(c.type == "Ready" and c.status != "True" for c in core.read_node(node).status.conditions) or None

        kwok.wait_until(down, 60, f"{node} down")
    finally:
        kill_tree(proc.pid)
        proc.wait(timeout=60)
    tasks, log = tasks_file(tmp_path)
    output = tmp_path / "restart.out"
    progress = f"1 node(s) ({node}), interrupted during their maintenance, to be Ready in Kubernetes"
    again = command(engine, "", tasks, "down", "-e", targets, "-e", json.dumps({"rolling_progress_interval": 1}))
    with output.open("w") as out_file:
        proc = subprocess.Popen(again, stdout=out_file, stderr=subprocess.STDOUT, env=env())
        try:
            kwok.wait_until(lambda: output.read_text().count(progress) >= 2 or None, 120, "two progress lines")
            assert record(engine, "down")[node]["back"] is None and our_requests(api, namespace), "released early"
            core.patch_node(node, {"metadata": {"annotations": {REBOOT_ANNOTATION: None}}})  # back up
            assert proc.wait(timeout=300) == 0, output.read_text()[-5000:]
        finally:
            if proc.poll() is None:
                kill_tree(proc.pid)
                proc.wait()
    lines = [line for line in output.read_text().splitlines() if progress in line]
    waited = [int(line.split("(waiting ")[1].split("s")[0]) for line in lines]
    assert waited == sorted(waited) and waited[-1] > waited[0] and all("of at most 60s)" in x for x in lines)
    state = record(engine, "down")[node]
    assert state["state"] == "interrupted" and state["back"] is not None
    assert maintained(log) == {}  # released, not maintained again (the interrupted policy release)
    assert our_requests(api, namespace) == [] and cordoned(api, names) == []


def test_a_failed_node_is_marked_and_left_cordoned_while_the_others_finish(
    engine: Engine, fleet: tuple[str, list[str]], tmp_path: Path
) -> None:
    api, namespace = engine.api, engine.namespace
    _selector, names = fleet
    broken = names[0]
    tasks, log = tasks_file(tmp_path, fail_on=broken)
    # The targets as an inventory group whose hosts are not named like their nodes (as with the nodes inventory
    # plugin's k8s_node_name, or an inventory of host names).
    inventory = tmp_path / "hosts.ini"
    lines = ["[gpu]"] + [f"host-{i} k8s_node_name={node} ansible_connection=local" for i, node in enumerate(names)]
    inventory.write_text("\n".join(lines) + "\n")
    targets = {"rolling_target_group": "gpu", "rolling_max_fail_percentage": 20}
    out = run(command(engine, "", tasks, "broken", "-i", str(inventory), "-e", json.dumps(targets)), 2)
    state = record(engine, "broken")
    assert state[broken]["state"] == "failed" and "firmware update failed" in state[broken]["message"]
    assert {n for n, r in state.items() if r["state"] == "done"} == set(names) - {broken}, out[-5000:]
    left = our_requests(api, namespace)
    assert [r["spec"]["nodeName"] for r in left] == [broken]
    assert lc.NodeMaintenanceView.from_dict(left[0]).phase == lc.PHASE_REQUESTOR_FAILED
    failed_condition = [c for c in left[0]["status"]["conditions"] if c["type"] == "RequestorFailed"]
    assert failed_condition and failed_condition[0]["status"] == "True"
    assert left[0]["metadata"]["annotations"][lc.GC_IGNORE_ANNOTATION] == "true"
    assert cordoned(api, names) == [broken]
    assert f"need a look: {broken}." in out
    assert maintained(log) == dict.fromkeys(names, 1)


@BUILTIN_ONLY
def test_a_node_whose_host_left_and_whose_outcome_cannot_be_recorded_fails_the_run_by_name(
    engine: Engine, fleet: tuple[str, list[str]], tmp_path: Path
) -> None:
    """The last play records the failure of a node whose host left the play during its maintenance; when that
    cannot be written (here the run's record was deleted meanwhile, so the node is no longer one of the run) the
    run fails naming the node and why, before its summary. Two nodes one after the other (a play whose every host
    left ends the playbook): the second one's maintenance waits until the first is done, deletes the record and
    cannot be reached."""
    _selector, names = fleet
    run_id = unique(engine, "unrecorded")
    first = tmp_path / "first"
    tasks = tmp_path / "maintenance.yml"
    second = "_second.rc | default(0) != 0"
    body = [
        {
            "name": "Be the first node maintained",
            "ansible.builtin.command": {"argv": ["mkdir", str(first)]},  # mkdir is atomic: one node makes it
            "register": "_second",
            "changed_when": False,
            "failed_when": False,
            "delegate_to": "localhost",
        },
        {
            "name": "Wait until the first node is done",
            "nodeops.maintenance.rolling_maintenance": {"step": "summary"},
            "register": "_so_far",
            "until": "_so_far.counts.done == 1",
            "retries": 120,
            "delay": 1,
            "when": second,
            "delegate_to": "localhost",
        },
        {
            "name": "Delete the run's record",
            "nodeops.maintenance.apply": {
                "definition": {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": record_name(run_id), "namespace": engine.config_namespace},
                },
                "state": "absent",
            },
            "when": second,
            "delegate_to": "localhost",
        },
        {
            "name": "Reach the node",
            "ansible.builtin.ping": {},
            "vars": {"ansible_host": "nohost.invalid", "ansible_connection": "ssh", "ansible_ssh_timeout": 2},
            "when": second,
        },
    ]
    tasks.write_text(json.dumps(body))
    inventory = tmp_path / "hosts.ini"
    hosts = [f"host-{i} k8s_node_name={node} ansible_connection=local" for i, node in enumerate(names[:2])]
    inventory.write_text("\n".join(["[gpu]", *hosts]) + "\n")
    targets = json.dumps({"rolling_target_group": "gpu", "rolling_max_parallel_operations": 1})
    out = run(command(engine, "", tasks, "unrecorded", "-i", str(inventory), "-e", targets), 4)  # 4: unreachable
    (left,) = [n for n in names[:2] if f"{n}: their outcome could not be recorded: " in out] or [out[-5000:]]
    assert f"{left} is not a node of the run" in out, out[-5000:]
    assert "TASK [Read the run's record]" not in out  # the run stopped there, before its summary


def test_a_node_deleted_before_its_wave_fails_and_the_run_goes_on(
    engine: Engine, fleet: tuple[str, list[str]], tmp_path: Path
) -> None:
    api, namespace = engine.api, engine.namespace
    selector, names = fleet
    tasks, log = tasks_file(tmp_path)
    extra = {"rolling_max_fail_percentage": 20, "rolling_simulated_reboot_seconds": 4}
    cmd = command(engine, selector, tasks, "vanish", "-e", json.dumps(extra))
    proc = subprocess.Popen(cmd, env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:

        def a_node_waiting_for_its_wave() -> str | None:
            try:
                state = record(engine, "vanish")
            except k8s.ApiException:
                return None
            if not any(r["state"] == "maintaining" for r in state.values()):
                return None
            waiting = sorted(n for n, r in state.items() if r["state"] == "pending" and r.get("admitted") is None)
            return waiting[-1] if waiting else None

        victim = kwok.wait_until(a_node_waiting_for_its_wave, 120, "a wave in its maintenance, a node still waiting")
        kwok.delete_nodes(api, [victim], timeout=60)  # scaled away during the run
        out, _err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            kill_tree(proc.pid)
            proc.wait(timeout=60)
    assert proc.returncode == 2, out[-6000:]  # a node needs a look
    state = record(engine, "vanish")
    assert state[victim]["state"] == "failed" and "Node object is gone" in state[victim]["message"], out[-6000:]
    assert {n for n, r in state.items() if r["state"] == "done"} == set(names) - {victim}, out[-6000:]
    assert victim not in maintained(log)
    assert our_requests(api, namespace) == [], "the gone node's request was given back too"
    assert cordoned(api, [n for n in names if n != victim]) == []


@BUILTIN_ONLY
def test_bad_input_changes_nothing(engine: Engine, fleet: tuple[str, list[str]], tmp_path: Path) -> None:
    api, namespace = engine.api, engine.namespace
    _selector, names = fleet
    tasks, log = tasks_file(tmp_path)
    out = run(
        command(engine, "", tasks, "bad", "-e", json.dumps({"rolling_node_names": [names[0], "no-such-node"]})),
        expect_rc=2,
    )
    assert "no-such-node not found" in out
    assert our_requests(api, namespace) == []
    assert maintained(log) == {}
    bad_limit = {"rolling_node_names": names[:1], "rolling_max_unavailable": "ten"}
    out = run(command(engine, "", tasks, "bad", "-e", json.dumps(bad_limit)), expect_rc=2)
    assert "rolling_max_unavailable" in out
    assert our_requests(api, namespace) == []


def test_check_mode_runs_the_playbook_and_writes_nothing(
    engine: Engine, fleet: tuple[str, list[str]], tmp_path: Path
) -> None:
    """``--check``: the first play's steps run on a copy of what they read and show the plan; no request, no
    record, no cordon, and no node's maintenance: the nodes' play ends at once (their steps go on from the record
    and requests that check mode does not write), and the summary play too."""
    api, namespace = engine.api, engine.namespace
    selector, names = fleet
    tasks, log = tasks_file(tmp_path)
    out = run(command(engine, selector, tasks, "checked", "--check"))
    assert maintained(log) == {}
    assert our_requests(api, namespace) == []
    assert cordoned(api, names) == []
    with pytest.raises(k8s.ApiException) as missing:
        k8s.CoreV1Api(engine.api).read_namespaced_config_map(
            record_name(unique(engine, "checked")), engine.config_namespace
        )
    assert missing.value.status == 404
    assert "6 node(s) to maintain" in out  # the plan
    assert "rescued=1" not in out and "failed=1" not in out and "Show the summary" not in out


@OPERATOR_ONLY
def test_engine_operator_only_requests_and_waits_for_the_operator(
    engine: Engine, fleet: tuple[str, list[str]], tmp_path: Path
) -> None:
    """``rolling_engine: operator``: the playbook makes no reconcile pass of its own. With the operator stopped no
    node becomes ready and the wave times out, changing no node; once it runs again, the same run goes through."""
    api, namespace = engine.api, engine.namespace
    selector, names = fleet
    tasks, log = tasks_file(tmp_path)
    role = tmp_path / "roles" / "reboot_role"  # the maintenance as a role this time
    (role / "tasks").mkdir(parents=True)
    (role / "tasks" / "main.yml").write_text(
        json.dumps([{"name": "Maintain", "ansible.builtin.include_tasks": str(tasks)}])
    )
    as_role = {"rolling_maintenance_tasks": "", "rolling_maintenance_role": str(role)}
    alone = command(engine, selector, tasks, "operator", "-e", json.dumps(as_role))
    engine.cluster.kill(OPERATOR)
    try:
        out = run([*alone, "-e", "rolling_wave_timeout=5"], expect_rc=2)
    finally:
        engine.cluster.restart(OPERATOR)
    assert "become ready for its maintenance within 5s" in out, out[-3000:]
    # the summary play ran and named the stop on record: the nodes after the first waited no timeout of their own
    assert "The run stopped: nothing new is cordoned" in out.replace("\n", " "), out[-3000:]
    assert maintained(log) == {}
    assert cordoned(api, names) == []
    run(alone)
    assert maintained(log) == dict.fromkeys(names, 1)
    assert our_requests(api, namespace) == []
    assert cordoned(api, names) == []


@BUILTIN_ONLY
def test_reconcile_playbook_prepares_a_request(engine: Engine, fleet: tuple[str, list[str]]) -> None:
    cluster, api, namespace = engine.cluster, engine.api, engine.namespace
    _selector, names = fleet
    objs = k8s.CustomObjectsApi(api)
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "NodeMaintenance",
        "metadata": {"name": "by-hand"},
        "spec": {"requestorID": "someone.example.com", "nodeName": names[0], "drainSpec": {"force": True}},
    }
    objs.create_namespaced_custom_object(GROUP, VERSION, namespace, NM_PLURAL, body)
    variables = {
        "reconcile_namespace": namespace,
        "reconcile_config_namespace": namespace,
        "reconcile_until_settled": True,
        "reconcile_settle_timeout": 120,
        "reconcile_kubeconfig": str(cluster.kubeconfig),
    }
    out = run([str(BIN / "ansible-playbook"), "nodeops.maintenance.reconcile", "-e", json.dumps(variables)])
    assert "settled" in out
    obj = objs.get_namespaced_custom_object(GROUP, VERSION, namespace, NM_PLURAL, "by-hand")
    assert lc.NodeMaintenanceView.from_dict(obj).phase == lc.PHASE_READY
    assert cordoned(api, names) == [names[0]]


@BUILTIN_ONLY
def test_reconcile_until_settled_says_what_it_waits_for_and_goes_on_to_the_end(
    engine: Engine, fleet: tuple[str, list[str]], tmp_path: Path
) -> None:
    """A request that waits for a pod to complete keeps the passes from settling: the reconcile playbook prints the
    requests not settled yet at least every reconcile_progress_interval seconds, the same task goes on, and the
    request gets to Ready once the pod is gone."""
    cluster, api, namespace = engine.cluster, engine.api, engine.namespace
    _selector, names = fleet
    core = k8s.CoreV1Api(api)
    running_pod(engine, "trainer", names[0], {"app": "training"})
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "NodeMaintenance",
        "metadata": {"name": "waits"},
        "spec": {
            "requestorID": "someone.example.com",
            "nodeName": names[0],
            "waitForPodCompletion": {"podSelector": "app=training"},
            "drainSpec": {"force": True},
        },
    }
    objs = k8s.CustomObjectsApi(api)
    objs.create_namespaced_custom_object(GROUP, VERSION, namespace, NM_PLURAL, body)
    variables = {
        "reconcile_namespace": namespace,
        "reconcile_config_namespace": namespace,
        "reconcile_until_settled": True,
        "reconcile_settle_timeout": 600,
        "reconcile_progress_interval": 1,
        "reconcile_kubeconfig": str(cluster.kubeconfig),
    }
    output = tmp_path / "playbook.out"
    progress = f"request(s) not settled yet: {namespace}/waits (WaitForPodCompletion)"
    cmd = [str(BIN / "ansible-playbook"), "nodeops.maintenance.reconcile", "-e", json.dumps(variables)]
    with output.open("w") as out_file:
        proc = subprocess.Popen(cmd, stdout=out_file, stderr=subprocess.STDOUT, env=env())
        try:
            kwok.wait_until(lambda: output.read_text().count(progress) >= 2 or None, 180, "two progress lines")
            core.delete_namespaced_pod("trainer", namespace, grace_period_seconds=0)
            assert proc.wait(timeout=300) == 0, output.read_text()[-5000:]
        finally:
            if proc.poll() is None:
                kill_tree(proc.pid)
                proc.wait()
    out = output.read_text()
    lines = [line for line in out.splitlines() if progress in line]
    assert all("of at most 600s)" in line for line in lines)
    # one settle timeout across the calls: the time waited grows from line to line
    waited = [int(line.split("(waiting ")[1].split("s")[0]) for line in lines]
    assert waited == sorted(waited) and waited[-1] > waited[0]
    assert "'settled': True" in out or '"settled": true' in out, out[-3000:]
    obj = objs.get_namespaced_custom_object(GROUP, VERSION, namespace, NM_PLURAL, "waits")
    assert lc.NodeMaintenanceView.from_dict(obj).phase == lc.PHASE_READY


@BUILTIN_ONLY
def test_the_bundled_simulated_reboot_by_its_relative_path(engine: Engine, fleet: tuple[str, list[str]]) -> None:
    """``rolling_maintenance_tasks: maintenance/simulated_reboot.yml`` as the README and the demo give it: relative
    to the collection's playbooks folder, also from the wave plays in playbooks/rolling/."""
    api = engine.api
    _selector, names = fleet
    chosen = names[:2]
    core = k8s.CoreV1Api(api)
    boot_ids = {n: core.read_node(n).status.node_info.boot_id for n in chosen}
    relative = {"rolling_node_names": chosen, "rolling_maintenance_tasks": "maintenance/simulated_reboot.yml"}
    run(command(engine, "", Path("unused"), "relative", "-e", json.dumps(relative)))
    state = record(engine, "relative")
    assert {n: r["state"] for n, r in state.items()} == dict.fromkeys(chosen, "done")
    for node in chosen:
        assert core.read_node(node).status.node_info.boot_id != boot_ids[node], "the node went through a reboot"
    assert cordoned(api, names) == []
