"""The collection's playbooks, run as users run them: ansible-playbook with the playbook's FQCN."""

from __future__ import annotations

import re
import subprocess
import uuid
from typing import Any

import pytest
from kubernetes import client as k8s
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
