"""Connection settings given once in a play's module_defaults reach this collection's modules and kubernetes.core's,
whichever group they are given for: this collection's (which extends kubernetes.core.k8s), kubernetes.core's, or
ansible-core's legacy k8s group (taken by this collection's actions); against the real API server and with no
kubeconfig anywhere. And impersonation."""

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
        {
            "name": "Summarise a rolling run (an action of its own, which goes on with handed-back waits)",
            "nodeops.maintenance.rolling_maintenance": {
                "step": "summary",
                "run_id": "module-defaults",
                "requestor": "module-defaults.example.com",
                "config_namespace": "default",
            },
        },
        {
            "name": "Read the namespaces with kubernetes.core",
            "kubernetes.core.k8s_info": {"kind": "Namespace", "name": "default"},
            "register": "namespaces",
        },
        {"name": "Show it", "ansible.builtin.debug": {"msg": "namespace {{ namespaces.resources[0].metadata.name }}"}},
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


def test_connection_settings_from_module_defaults_reach_both_collections(cluster: Any, tmp_path: Path) -> None:
    settings = {"host": cluster.server, "api_key": cluster.token, "ca_cert": str(cluster.ca_file)}
    proc = play(tmp_path, {"group/nodeops.maintenance.k8s": settings})
    assert proc.returncode == 0, f"{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}"
    assert '"msg": "namespace default"' in proc.stdout, proc.stdout[-3000:]
    # without them there is nothing to connect to: the same play fails
    alone = play(tmp_path, {})
    assert alone.returncode != 0 and "No Kubernetes connection configured" in alone.stdout, alone.stdout[-3000:]


@pytest.mark.parametrize("group", ["group/kubernetes.core.k8s", "group/k8s"])
def test_connection_settings_for_kubernetes_core_groups_reach_this_collections_modules(
    cluster: Any, tmp_path: Path, group: str
) -> None:
    settings = {"host": cluster.server, "api_key": cluster.token, "ca_cert": str(cluster.ca_file)}
    proc = play(tmp_path, {group: settings})
    assert proc.returncode == 0, f"{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}"
    assert '"msg": "namespace default"' in proc.stdout, proc.stdout[-3000:]


def test_this_collections_group_wins_over_kubernetes_cores_for_its_modules(cluster: Any, tmp_path: Path) -> None:
    """Both groups set: this collection's modules take this collection's settings (kubernetes.core's host here
    answers nothing). Which one kubernetes.core's own modules take is Ansible's matter, not asserted."""
    settings = {"host": cluster.server, "api_key": cluster.token, "ca_cert": str(cluster.ca_file)}
    defaults = {
        "group/nodeops.maintenance.k8s": settings,
        "group/kubernetes.core.k8s": {**settings, "host": "https://127.0.0.1:9"},
    }
    proc = play(tmp_path, defaults)
    ours = proc.stdout.split("TASK [Read the namespaces with kubernetes.core]")[0]
    assert ours.count("ok: [localhost]") == 2 and "127.0.0.1:9" not in ours, proc.stdout[-4000:]


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
    assert not allowed.failed and isinstance(allowed.result["nodes"], list), allowed.result
