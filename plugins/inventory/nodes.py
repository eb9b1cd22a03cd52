# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Inventory plugin: the cluster's Kubernetes nodes as inventory hosts."""

from __future__ import annotations

DOCUMENTATION = r"""
name: nodes
short_description: Kubernetes nodes as inventory hosts
version_added: 0.1.0
author:
  - nodeops.maintenance contributors (@nodeops)
description:
  - Reads the cluster's Node objects with one list call and makes each node an inventory host, so
    that maintenance tasks (a reboot, a driver upgrade) can run on the nodes over SSH.
  - The host's C(ansible_host) is the first of the node's addresses in the order of O(address_types).
  - Groups made for every node, with O(group_prefix) in front; role labels
    C(node-role.kubernetes.io/<role>) give V(role_<role>), readiness gives V(ready) or V(not_ready), and
    schedulability gives V(schedulable) or V(cordoned).
  - C(keyed_groups), C(groups) and C(compose) work on the host variables listed under O(compose).
  - "The inventory file's name must end in C(nodes.yml) or C(nodes.yaml), and it must hold
    C(plugin: nodeops.maintenance.nodes)."
extends_documentation_fragment:
  - nodeops.maintenance.k8s_auth_options
  - ansible.builtin.constructed
  - ansible.builtin.inventory_cache
options:
  plugin:
    description: The name of this plugin; it makes the file an inventory source of this plugin.
    required: true
    type: str
    choices: [nodeops.maintenance.nodes]
  node_selector:
    description: Only the nodes whose labels match this selector, for example V(node-role.kubernetes.io/gpu).
    type: str
  address_types:
    description:
      - The node address types to use for C(ansible_host), in order of preference.
      - When a node has none of them, C(ansible_host) is the node's name.
    type: list
    elements: str
    default: [InternalIP, ExternalIP, Hostname]
  group_prefix:
    description: Text put before the names of the groups this plugin makes (not those of C(keyed_groups)).
    type: str
    default: k8s_
notes:
  - "Host variables: C(k8s_node_name), C(k8s_labels), C(k8s_roles), C(k8s_ready), C(k8s_unschedulable),
    C(k8s_taints), C(k8s_addresses), C(k8s_kubelet_version), C(k8s_capacity) and C(k8s_allocatable)."
"""

EXAMPLES = r"""
# gpu.nodes.yml: GPU nodes, grouped by zone, reached over their internal address
plugin: nodeops.maintenance.nodes
kubeconfig: ~/.kube/prod
node_selector: nvidia.com/gpu.present=true
keyed_groups:
  - key: k8s_labels['topology.kubernetes.io/zone'] | default('none')
    prefix: zone
compose:
  ansible_user: "'ubuntu'"
cache: true
cache_plugin: ansible.builtin.jsonfile
cache_connection: ~/.cache/ansible-inventory

# With the AWX/AAP Kubernetes credential, which sets K8S_AUTH_HOST and K8S_AUTH_API_KEY:
# plugin: nodeops.maintenance.nodes
"""

from typing import Any  # noqa: E402

from ansible.errors import AnsibleError, AnsibleParserError  # noqa: E402
from ansible.plugins.inventory import BaseInventoryPlugin, Cacheable, Constructable  # noqa: E402
from ansible.utils.unsafe_proxy import wrap_var  # noqa: E402
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.node.nodes import node_ready  # noqa: E402
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.client import (  # noqa: E402
    AUTH_ARG_SPEC,
    NODES,
    Client,
)
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.errors import K8sError  # noqa: E402

ROLE_LABEL = "node-role.kubernetes.io/"


def node_hostvars(node: dict[str, Any], address_types: list[str]) -> dict[str, Any]:
    """The host variables of one Node object."""
    meta, spec, status = node.get("metadata") or {}, node.get("spec") or {}, node.get("status") or {}
    labels = meta.get("labels") or {}
    addresses = {a.get("type"): a.get("address") for a in status.get("addresses") or [] if a.get("address")}
    ready = node_ready(node)
    host = next((addresses[t] for t in address_types if t in addresses), meta.get("name"))
    return {
        "ansible_host": host,
        "k8s_node_name": meta.get("name"),
        "k8s_labels": labels,
        "k8s_roles": sorted(key[len(ROLE_LABEL) :] for key in labels if key.startswith(ROLE_LABEL)),
        "k8s_ready": ready,
        "k8s_unschedulable": bool(spec.get("unschedulable")),
        "k8s_taints": spec.get("taints") or [],
        "k8s_addresses": addresses,
        "k8s_kubelet_version": (status.get("nodeInfo") or {}).get("kubeletVersion"),
        "k8s_capacity": status.get("capacity") or {},
        "k8s_allocatable": status.get("allocatable") or {},
    }


def node_groups(hostvars: dict[str, Any]) -> list[str]:
    """The groups a node belongs to, without prefix."""
    groups = [f"role_{role}" for role in hostvars["k8s_roles"] if role]
    groups.append("ready" if hostvars["k8s_ready"] else "not_ready")
    groups.append("cordoned" if hostvars["k8s_unschedulable"] else "schedulable")
    return groups


class InventoryModule(BaseInventoryPlugin, Constructable, Cacheable):
    NAME = "nodeops.maintenance.nodes"

    def verify_file(self, path: str) -> bool:
        return super().verify_file(path) and path.endswith(("nodes.yml", "nodes.yaml"))

    def parse(self, inventory: Any, loader: Any, path: str, cache: bool = True) -> None:
        super().parse(inventory, loader, path)
        self._read_config_data(path)
        cache_key = self.get_cache_key(path)
        use_cache = self.get_option("cache") and cache
        update_cache = self.get_option("cache") and not cache
        nodes = None
        if use_cache:
            try:
                nodes = self._cache[cache_key]
            except KeyError:
                update_cache = True
        if nodes is None:
            nodes = self._fetch_nodes()
        if update_cache:
            self._cache[cache_key] = nodes
        self._populate(nodes)

    def _fetch_nodes(self) -> list[dict[str, Any]]:
        params = {name: self.get_option(name) for name in AUTH_ARG_SPEC}
        try:
            client = Client.from_params(params)
            return list(client.list(NODES, label_selector=self.get_option("node_selector"))["items"])
        except K8sError as err:
            raise AnsibleParserError(f"nodeops.maintenance.nodes: {err.msg}") from err
        except ImportError as err:
            raise AnsibleError(
                "nodeops.maintenance.nodes needs the kubernetes Python package on the controller "
                f"(pip install kubernetes): {err}"
            ) from err

    def _populate(self, nodes: list[dict[str, Any]]) -> None:
        prefix = self.get_option("group_prefix") or ""
        strict = self.get_option("strict")
        address_types = self.get_option("address_types")
        for node in sorted(nodes, key=lambda n: (n.get("metadata") or {}).get("name", "")):
            hostvars = node_hostvars(node, address_types)
            name = hostvars["k8s_node_name"]
            if not name:
                continue
            self.inventory.add_host(name)
            for group in node_groups(hostvars):
                self.inventory.add_group(prefix + group)
                self.inventory.add_child(prefix + group, name)
            for key, value in hostvars.items():
                # What a node reports about itself (labels, kubelet version, ...) is never templated.
                self.inventory.set_variable(name, key, wrap_var(value))
            self._set_composite_vars(self.get_option("compose"), hostvars, name, strict=strict)
            self._add_host_to_composed_groups(self.get_option("groups"), hostvars, name, strict=strict)
            self._add_host_to_keyed_groups(self.get_option("keyed_groups"), hostvars, name, strict=strict)
