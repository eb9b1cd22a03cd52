"""A module of this collection whose task runs on the controller with ansible-playbook's own Python runs in the task's
worker (no module process), with the result, the failures, check mode, diff, no_log masking and the task's
environment of the module process; with another interpreter it runs as a module process. Against the real API
server with kwok nodes."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster import kwok
from kubernetes import client as k8s
from support.ansible_cli import BIN, clean_env, run_module

pytestmark = pytest.mark.integration

MODULE_PROCESS_SIGN = "AnsiballZ_"  # what -vvv shows of a module process: the file Ansible runs


@pytest.fixture
def nodes(api: k8s.ApiClient) -> Iterator[list[str]]:
    tag = uuid.uuid4().hex[:6]
    names = kwok.add_nodes(api, 2, prefix=f"inproc-{tag}")
    kwok.wait_nodes_ready(api, names, timeout=60)
    yield names
    kwok.delete_nodes(api, names)


@pytest.fixture
def other_python(tmp_path: Path) -> dict[str, str]:
    """An interpreter that is not ansible-playbook's own (a script in another directory that starts it): the module
    runs in a process of its own."""
    script = tmp_path / "bin" / "python"
    script.parent.mkdir()
    script.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    script.chmod(0o755)
    return {"ANSIBLE_PYTHON_INTERPRETER": str(script)}


def auth(cluster: Any) -> dict[str, Any]:
    return {"host": cluster.server, "api_key": cluster.token, "ca_cert": str(cluster.ca_file)}


def named(result: dict[str, Any], node: str) -> str:
    """The result as text with the node's name replaced, to hold results for two nodes side by side."""
    return json.dumps(result, sort_keys=True).replace(node, "NODE")


def test_cordon_in_the_worker_gives_the_module_process_result(
    cluster: Any, api: k8s.ApiClient, nodes: list[str], other_python: dict[str, str]
) -> None:
    here, apart = nodes
    # check mode (a change, not made), the change with its diff, then nothing left to change
    for check, diff, changed in ((True, True, True), (False, True, True), (False, False, False)):
        ours = run_module("cordon", {**auth(cluster), "name": here}, check=check, diff=diff, verbose=True)
        theirs = run_module(
            "cordon", {**auth(cluster), "name": apart}, env=other_python, check=check, diff=diff, verbose=True
        )
        assert MODULE_PROCESS_SIGN not in ours.stdout, ours.stdout[-3000:]
        assert f"{MODULE_PROCESS_SIGN}cordon.py" in theirs.stdout, theirs.stdout[-3000:]
        assert not ours.failed and not theirs.failed, (ours.result, theirs.result)
        assert named(ours.result, here) == named(theirs.result, apart)
        assert ours.result["changed"] is changed
    assert k8s.CoreV1Api(api).read_node(here).spec.unschedulable is True
    # no_log: the token is masked in the invocation, both ways
    assert ours.result["invocation"]["module_args"]["api_key"] == "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"
    assert cluster.token not in ours.stdout + theirs.stdout


@pytest.mark.parametrize(
    ("module", "args", "message"),
    [
        ("cordon", {"nmae": "x"}, "nmae"),  # an unknown option, named with the one it stands for
        ("node_info", {"name": "x", "bogus": 1}, "Unsupported parameters for (nodeops.maintenance.node_info) module"),
        ("cordon", {"name": "x", "node_selector": "a=b"}, "mutually exclusive"),
        ("node_info", {"name": "no-such-node-anywhere"}, "not found"),
        ("apply", {"definition": {"kind": "Node"}}, "definition"),
        ("remediation", {"name": "x"}, "namespace"),  # an action that goes on with handed-back waits
        ("rolling_maintenance", {"step": "summary", "run_id": " ", "requestor": "a.example.com"}, "run ID is empty"),
    ],
)
def test_failures_in_the_worker_are_the_module_process_failures(
    cluster: Any, other_python: dict[str, str], module: str, args: dict[str, Any], message: str
) -> None:
    ours = run_module(module, {**auth(cluster), **args})
    theirs = run_module(module, {**auth(cluster), **args}, env=other_python)
    assert ours.failed and theirs.failed
    assert message in ours.result["msg"], ours.result
    assert ours.result["msg"] == theirs.result["msg"]


def test_a_task_delegated_to_the_controller_runs_in_its_worker_with_the_tasks_environment(
    cluster: Any, api: k8s.ApiClient, nodes: list[str], tmp_path: Path
) -> None:
    """The rolling playbook's shape: the hosts are the nodes, the maintenance tasks run on the controller
    (``delegate_to: localhost``, the implicit localhost); the connection comes from the task's ``environment``."""
    inventory = tmp_path / "hosts.yml"
    unreachable = {"ansible_host": "192.0.2.1", "ansible_connection": "ssh"}  # never connected to
    inventory.write_text(yaml.safe_dump({"all": {"hosts": dict.fromkeys(nodes, unreachable)}}))
    book = tmp_path / "play.yml"
    book.write_text(
        yaml.safe_dump(
            [
                {
                    "hosts": "all",
                    "gather_facts": False,
                    "environment": {
                        "K8S_AUTH_HOST": cluster.server,
                        "K8S_AUTH_API_KEY": cluster.token,
                        "K8S_AUTH_SSL_CA_CERT": str(cluster.ca_file),
                    },
                    "tasks": [
                        {
                            "name": "Cordon the node",
                            "nodeops.maintenance.cordon": {"name": "{{ inventory_hostname }}"},
                            "delegate_to": "localhost",
                        },
                        {
                            "name": "Read it",
                            "nodeops.maintenance.node_info": {"name": "{{ inventory_hostname }}"},
                            "delegate_to": "localhost",
                            "register": "info",
                        },
                        {
                            "name": "Show it",
                            "ansible.builtin.debug": {"msg": "unschedulable={{ info.nodes[0].unschedulable }}"},
                        },
                    ],
                }
            ]
        )
    )
    env = clean_env({"ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.default", "KUBECONFIG": str(tmp_path / "none")})
    proc = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(inventory), str(book), "-vvv"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, f"{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}"
    assert MODULE_PROCESS_SIGN not in proc.stdout, proc.stdout[-4000:]
    assert proc.stdout.count('"msg": "unschedulable=True"') == len(nodes), proc.stdout[-3000:]
    assert all(k8s.CoreV1Api(api).read_node(n).spec.unschedulable for n in nodes)
