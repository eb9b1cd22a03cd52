"""The collection's playbooks, run as users run them: ansible-playbook with the playbook's FQCN."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from support.ansible_cli import BIN, clean_env

pytestmark = pytest.mark.integration

RECAP = re.compile(r"^localhost\s*:\s*ok=\d+\s+changed=(\d+)\s+unreachable=0\s+failed=0", re.MULTILINE)


def playbook(name: str, env: dict[str, str], *extra: str) -> int:
    """Run nodeops.maintenance.<name>; returns the number of changed tasks (fails the test on failure)."""
    env = {**env, "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.default"}
    proc = subprocess.run(
        [str(BIN / "ansible-playbook"), f"nodeops.maintenance.{name}", *extra],
        capture_output=True,
        text=True,
        env=clean_env(env),
        timeout=300,
        check=False,
    )
    match = RECAP.search(proc.stdout)
    assert proc.returncode == 0 and match, proc.stdout + proc.stderr
    return int(match.group(1))


def test_install_playbook_with_awx_style_environment(cluster: Any, api: k8s.ApiClient) -> None:
    # What the AWX/AAP "OpenShift or Kubernetes API Bearer Token" credential injects.
    env = {
        "K8S_AUTH_HOST": cluster.server,
        "K8S_AUTH_API_KEY": cluster.token,
        "K8S_AUTH_VERIFY_SSL": "True",
        "K8S_AUTH_SSL_CA_CERT": str(cluster.ca_file),
    }
    namespace = f"install-{uuid.uuid4().hex[:6]}"
    extra = [
        "-e",
        f"crds_namespace={namespace}",
        "-e",
        "crds_max_parallel_operations=4",
        "-e",
        "crds_max_unavailable=25%",
    ]
    try:
        assert playbook("install", env, *extra) >= 1
        config = k8s.CustomObjectsApi(api).get_namespaced_custom_object(
            "maintenance.nvidia.com", "v1alpha1", namespace, "maintenanceoperatorconfigs", "default"
        )
        assert config["spec"]["maxParallelOperations"] == 4
        assert config["spec"]["maxUnavailable"] == "25%"
        assert playbook("install", env, *extra) == 0
    finally:
        k8s.CoreV1Api(api).delete_namespace(namespace)


def test_deploy_agent_check_mode_where_nothing_exists_yet(cluster: Any, api: k8s.ApiClient, tmp_path: Path) -> None:
    """Check mode on a new controller (no peer CA), a cluster without the credential namespace and a node without
    the agent: it runs through, with the credential the role would create, and creates nothing anywhere."""
    suffix = uuid.uuid4().hex[:6]
    node, namespace = f"check-node-{suffix}", f"agent-check-{suffix}"
    host = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "node_agent_python": sys.executable,
        "node_agent_install_dir": str(tmp_path / "node" / "opt"),
        "node_agent_config_dir": str(tmp_path / "node" / "etc"),
        "node_agent_status_file": str(tmp_path / "node" / "run" / "status.json"),
    }
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {node: host}}}))
    variables = {
        "node_agent_hosts": "all",
        "node_agent_become": False,
        "node_agent_manage_service": False,
        "node_agent_api_server": cluster.server,
        "node_agent_api_ca_file": str(cluster.ca_file),
        "node_agent_credential_namespace": namespace,
        "node_agent_pki_dir": str(tmp_path / "pki"),
    }
    env = {"ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.default", "K8S_AUTH_KUBECONFIG": str(cluster.kubeconfig)}
    cmd = [str(BIN / "ansible-playbook"), "-i", str(inventory), "nodeops.maintenance.deploy_agent"]
    proc = subprocess.run(
        [*cmd, "-e", json.dumps(variables), "--check"],
        capture_output=True,
        text=True,
        env=clean_env(env),
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert "does not exist yet" in proc.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["inventory.yml"]
    with pytest.raises(ApiException) as missing:
        k8s.CoreV1Api(api).read_namespace(namespace)
    assert missing.value.status == 404
    with pytest.raises(ApiException) as missing:
        k8s.RbacAuthorizationV1Api(api).read_cluster_role(f"nodeops-node-agent:{node}")
    assert missing.value.status == 404
