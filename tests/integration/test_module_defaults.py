"""Connection settings given once in a play's module_defaults reach this collection's modules, for this
collection's group and for kubernetes.core's (a play that already sets them for kubernetes.core needs nothing
more), against the real API server and with no kubeconfig anywhere."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.ansible_cli import BIN, clean_env, run_module

pytestmark = pytest.mark.integration


def play(tmp_path: Path, defaults: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    tasks = [
        {"name": "Read the nodes", "nodeops.maintenance.node_info": {}, "register": "read"},
        {"name": "Show how many", "ansible.builtin.debug": {"msg": "read {{ read.nodes | length }} nodes"}},
    ]
    book = tmp_path / "play.yml"
    body = {"hosts": "localhost", "connection": "local", "gather_facts": False, "tasks": tasks}
    book.write_text(yaml.safe_dump([{**body, "module_defaults": defaults} if defaults else body]))
    env = clean_env({"ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.default", "KUBECONFIG": str(tmp_path / "none")})
    return subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", "localhost,", str(book)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )


@pytest.mark.parametrize("group", ["group/nodeops.maintenance.k8s", "group/kubernetes.core.k8s"])
def test_connection_settings_from_module_defaults(cluster: Any, tmp_path: Path, group: str) -> None:
    settings = {"host": cluster.server, "api_key": cluster.token, "ca_cert": str(cluster.ca_file)}
    proc = play(tmp_path, {group: settings})
    assert proc.returncode == 0, f"{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}"
    assert "read 0 nodes" not in proc.stdout and "nodes" in proc.stdout
    # without them there is nothing to connect to: the same play fails
    alone = play(tmp_path, {})
    assert alone.returncode != 0


def test_impersonation_acts_as_the_user_and_groups_given(cluster: Any) -> None:
    """The API server decides as the impersonated user: a user with no rights is refused, and the same user in
    the system:masters group is not."""
    auth = {"host": cluster.server, "api_key": cluster.token, "ca_cert": str(cluster.ca_file)}
    refused = run_module("node_info", {**auth, "impersonate_user": "nobody@example.com"})
    assert refused.failed and "Forbidden" in refused.result["msg"], refused.result
    assert "nobody@example.com" in refused.result["msg"]
    allowed = run_module(
        "node_info", {**auth, "impersonate_user": "nobody@example.com", "impersonate_groups": ["system:masters"]}
    )
    assert not allowed.failed and allowed.result["nodes"], allowed.result
