"""The nodeops.maintenance.nodes inventory plugin on the real cluster, through ansible-inventory."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster import kwok
from kubernetes import client as k8s
from support.ansible_cli import BIN, clean_env

pytestmark = pytest.mark.integration


@pytest.fixture
def inventory_nodes(api: k8s.ApiClient) -> Iterator[tuple[str, list[str]]]:
    tag = uuid.uuid4().hex[:6]
    gpu = kwok.add_nodes(api, 2, prefix=f"inv-gpu-{tag}", labels={"inv": tag, "node-role.kubernetes.io/gpu": ""})
    cpu = kwok.add_nodes(api, 1, prefix=f"inv-cpu-{tag}", labels={"inv": tag, "zone": "b"})
    names = gpu + cpu
    kwok.wait_nodes_ready(api, names, timeout=60)
    k8s.CoreV1Api(api).patch_node(cpu[0], {"spec": {"unschedulable": True}})
    yield tag, names
    kwok.delete_nodes(api, names)


def inventory(path: Path, config: dict[str, Any], env: dict[str, str] | None = None) -> dict[str, Any]:
    path.write_text(yaml.safe_dump({"plugin": "nodeops.maintenance.nodes", **config}))
    proc = subprocess.run(
        [str(BIN / "ansible-inventory"), "-i", str(path), "--list"],
        capture_output=True,
        text=True,
        env=clean_env({"ANSIBLE_INVENTORY_UNPARSED_FAILED": "1", **(env or {})}),
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    # Values read from the API are untrusted (never templated); ansible-inventory marks them so.
    return dict(json.loads(proc.stdout, object_hook=lambda d: d.get("__ansible_unsafe", d)))


def group_hosts(listing: dict[str, Any], group: str) -> set[str]:
    return set(listing.get(group, {}).get("hosts", []))


def test_hosts_groups_addresses_and_constructed(
    cluster: Any, api: k8s.ApiClient, inventory_nodes: tuple[str, list[str]], tmp_path: Path
) -> None:
    tag, names = inventory_nodes
    gpu, cpu = names[:2], names[2]
    listing = inventory(
        tmp_path / "k.nodes.yml",
        {
            "kubeconfig": str(cluster.kubeconfig),
            "node_selector": f"inv={tag}",
            "keyed_groups": [{"key": "k8s_labels.zone | default('none')", "prefix": "zone"}],
            "groups": {"gpu_ready": "'gpu' in k8s_roles and k8s_ready"},
            "compose": {"ansible_user": "'maint'"},
        },
    )
    hostvars = listing["_meta"]["hostvars"]
    assert set(hostvars) == set(names)
    assert group_hosts(listing, "k8s_role_gpu") == set(gpu)
    assert group_hosts(listing, "k8s_cordoned") == {cpu}
    assert group_hosts(listing, "k8s_schedulable") == set(gpu)
    assert group_hosts(listing, "k8s_ready") == set(names)
    assert group_hosts(listing, "gpu_ready") == set(gpu)
    assert group_hosts(listing, "zone_b") == {cpu}
    assert group_hosts(listing, "zone_none") == set(gpu)
    node = k8s.CoreV1Api(api).read_node(cpu)
    internal = next(a.address for a in node.status.addresses if a.type == "InternalIP")
    assert hostvars[cpu]["ansible_host"] == internal
    assert hostvars[cpu]["ansible_user"] == "maint"
    assert hostvars[cpu]["k8s_unschedulable"] is True
    by_hostname = inventory(
        tmp_path / "h.nodes.yml",
        {"kubeconfig": str(cluster.kubeconfig), "node_selector": f"inv={tag}", "address_types": ["Hostname"]},
    )
    assert by_hostname["_meta"]["hostvars"][cpu]["ansible_host"] == cpu


def test_k8s_auth_env_and_cache(
    cluster: Any, api: k8s.ApiClient, inventory_nodes: tuple[str, list[str]], tmp_path: Path
) -> None:
    tag, names = inventory_nodes
    env = {
        "K8S_AUTH_HOST": cluster.server,
        "K8S_AUTH_API_KEY": cluster.token,
        "K8S_AUTH_SSL_CA_CERT": str(cluster.ca_file),
    }
    config = {
        "node_selector": f"inv={tag}",
        "cache": True,
        "cache_plugin": "ansible.builtin.jsonfile",
        "cache_connection": str(tmp_path / "cache"),
    }
    first = inventory(tmp_path / "c.nodes.yml", config, env)
    assert set(first["_meta"]["hostvars"]) == set(names)
    # With the cache filled, the same source answers even though the API server can no longer be asked.
    unreachable = {**env, "K8S_AUTH_HOST": "https://127.0.0.1:9"}
    cached = inventory(tmp_path / "c.nodes.yml", config, unreachable)
    assert set(cached["_meta"]["hostvars"]) == set(names)


def test_unreachable_api_fails_the_source(tmp_path: Path) -> None:
    path = tmp_path / "bad.nodes.yml"
    path.write_text(
        yaml.safe_dump({"plugin": "nodeops.maintenance.nodes", "host": "https://127.0.0.1:9", "api_key": "x"})
    )
    proc = subprocess.run(
        # -v: ansible-core before 2.19 prints a source's error only when verbose
        [str(BIN / "ansible-inventory"), "-v", "-i", str(path), "--list"],
        capture_output=True,
        text=True,
        env=clean_env(
            {"ANSIBLE_INVENTORY_UNPARSED_FAILED": "1", "ANSIBLE_INVENTORY_ENABLED": "nodeops.maintenance.nodes"}
        ),
        timeout=120,
        check=False,
    )
    assert proc.returncode != 0
    message = " ".join(proc.stderr.split())  # the console wraps long lines
    assert "nodeops.maintenance.nodes: Cannot reach the Kubernetes API at https://127.0.0.1:9" in message


def test_what_a_node_reports_is_never_templated(cluster: Any, api: k8s.ApiClient, tmp_path: Path) -> None:
    """A node controls its own status (a compromised kubelet could write Jinja there): it stays text."""
    core = k8s.CoreV1Api(api)
    name = f"inv-evil-{uuid.uuid4().hex[:6]}"
    core.create_node({"metadata": {"name": name, "labels": {"inv-evil": name}}})
    try:
        core.patch_node_status(name, {"status": {"nodeInfo": {"kubeletVersion": "{{ 6 * 7 }}"}}})
        path = tmp_path / "e.nodes.yml"
        path.write_text(
            yaml.safe_dump(
                {
                    "plugin": "nodeops.maintenance.nodes",
                    "kubeconfig": str(cluster.kubeconfig),
                    "node_selector": f"inv-evil={name}",
                }
            )
        )
        proc = subprocess.run(
            [
                str(BIN / "ansible"),
                "all",
                "-i",
                str(path),
                "-m",
                "ansible.builtin.debug",
                "-a",
                "msg={{ k8s_kubelet_version }}",
            ],
            capture_output=True,
            text=True,
            env=clean_env({"ANSIBLE_INVENTORY_UNPARSED_FAILED": "1"}),
            timeout=120,
            check=False,
        )
        results = [json.loads(line)["result"] for line in proc.stdout.splitlines() if line.startswith("{")]
        assert [r.get("msg") for r in results] == ["{{ 6 * 7 }}"], proc.stdout + proc.stderr
    finally:
        core.delete_node(name)
