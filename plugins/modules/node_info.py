#!/usr/bin/python
# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: node_info
short_description: Read Kubernetes nodes, and wait until they are Ready (again, after a reboot)
version_added: 0.1.0
author:
  - nodeops.maintenance contributors (@nodeops)
description:
  - Returns readiness, schedulability, boot ID and addresses of the nodes named or selected.
  - With O(wait=true), waits until every node is Ready (or not Ready, O(wait_for=not_ready)). With
    O(rebooted_from), a node counts only once its boot ID differs from the one given, so a maintenance task
    can wait for a node to be back from its reboot even when Kubernetes never saw it go down.
  - Unknown node names fail the task.
extends_documentation_fragment:
  - nodeops.maintenance.k8s_auth_options
  - nodeops.maintenance.attributes
attributes:
  check_mode:
    support: full
    details: The module only reads; it does the same in check mode.
  diff_mode:
    support: N/A
    details: The module changes nothing.
options:
  name:
    description: The nodes. With neither O(name) nor O(node_selector), every node.
    type: list
    elements: str
    default: []
    aliases: [node]
  node_selector:
    description: A label selector for the nodes (with O(name), the nodes of both).
    type: str
  wait:
    description: Wait until the condition of O(wait_for) holds for every node.
    type: bool
    default: false
  wait_for:
    description: V(ready) (the Ready condition is True) or V(not_ready).
    type: str
    choices: [ready, not_ready]
    default: ready
  rebooted_from:
    description:
      - Node name to the boot ID it had before a reboot (RV(boot_ids) of an earlier call). With O(wait=true), a
        node listed here counts only once its boot ID differs.
    type: dict
    default: {}
  wait_timeout:
    description: Seconds to wait; the task fails when they pass, naming the nodes still waited for.
    type: float
    default: 600
  poll_interval:
    description: Seconds between two looks.
    type: float
    default: 1
seealso:
  - module: nodeops.maintenance.rolling_maintenance
"""

EXAMPLES = r"""
- name: Remember the boot ID
  nodeops.maintenance.node_info:
    name: gpu-07
  delegate_to: localhost
  register: before

- name: Reboot
  ansible.builtin.reboot:

- name: Wait until Kubernetes has the node back from this reboot
  nodeops.maintenance.node_info:
    name: gpu-07
    wait: true
    rebooted_from: "{{ before.boot_ids }}"
  delegate_to: localhost
"""

RETURN = r"""
nodes:
  description: One entry per node, by name.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: The node.
      type: str
    ready:
      description: Whether the Ready condition is True.
      type: bool
    ready_since:
      description: When the Ready condition last changed (RFC 3339).
      type: str
    unschedulable:
      description: Whether the node is cordoned.
      type: bool
    boot_id:
      description: C(status.nodeInfo.bootID).
      type: str
    addresses:
      description: Address type to address.
      type: dict
  sample:
    - {name: gpu-07, ready: true, ready_since: "2026-12-01T10:00:00Z", unschedulable: false, boot_id: 5d3c}
boot_ids:
  description: Node name to boot ID, for O(rebooted_from) of a later call.
  returned: always
  type: dict
waited:
  description: Seconds waited.
  returned: always
  type: float
"""

import threading
import time
from typing import Any

from ansible_collections.nodeops.maintenance.plugins.module_utils.core.node import conditions
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.node.errors import NodeopsError
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.node.nodes import node_ready
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.client import NODES
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.module import K8sModule

ARGUMENT_SPEC: dict[str, Any] = {
    "name": {"type": "list", "elements": "str", "default": [], "aliases": ["node"]},
    "node_selector": {"type": "str"},
    "wait": {"type": "bool", "default": False},
    "wait_for": {"type": "str", "choices": ["ready", "not_ready"], "default": "ready"},
    "rebooted_from": {"type": "dict", "default": {}},
    "wait_timeout": {"type": "float", "default": 600},
    "poll_interval": {"type": "float", "default": 1},
}


def describe(node: dict[str, Any]) -> dict[str, Any]:
    status = node.get("status") or {}
    since = (conditions.of(node, "Ready") or {}).get("lastTransitionTime")
    return {
        "name": node["metadata"]["name"],
        "ready": node_ready(node),
        "ready_since": since,
        "unschedulable": bool((node.get("spec") or {}).get("unschedulable")),
        "boot_id": (status.get("nodeInfo") or {}).get("bootID", ""),
        "addresses": {a.get("type"): a.get("address") for a in status.get("addresses") or []},
    }


def satisfied(info: dict[str, Any], wait_for: str, rebooted_from: dict[str, Any]) -> bool:
    if wait_for == "not_ready":
        return not info["ready"]
    old = rebooted_from.get(info["name"])
    return info["ready"] and (old is None or info["boot_id"] != str(old))


CHECKS: dict[str, Any] = {}


def run(module: Any) -> None:
    """What the module does; ends in ``module.exit_json`` or ``module.fail_json`` (a K8sModule, or its stand-in in
    the action when the task runs on the controller)."""
    p = module.params
    if p["wait_timeout"] < 0 or p["poll_interval"] <= 0:
        module.fail_json(msg="wait_timeout must be 0 or more and poll_interval more than 0 seconds.")
    names = list(dict.fromkeys(p["name"]))
    started = time.monotonic()
    waiter = threading.Event()
    try:
        while True:
            everything = {n["metadata"]["name"]: n for n in module.client.list(NODES)["items"]}
            missing = [n for n in names if n not in everything]
            if missing:
                module.fail_json(
                    msg=f"Node(s) {', '.join(missing)} not found. Check the names with 'kubectl get nodes'."
                )
            chosen = set(names)
            if p["node_selector"]:
                chosen |= {
                    n["metadata"]["name"] for n in module.client.list(NODES, label_selector=p["node_selector"])["items"]
                }
            elif not names:
                chosen = set(everything)
            infos = [describe(everything[n]) for n in sorted(chosen)]
            waited = round(time.monotonic() - started, 3)
            result = {
                "changed": False,
                "nodes": infos,
                "boot_ids": {i["name"]: i["boot_id"] for i in infos},
                "waited": waited,
            }
            if not p["wait"]:
                module.exit_json(**result)
            left = [i["name"] for i in infos if not satisfied(i, p["wait_for"], p["rebooted_from"])]
            if not left:
                module.exit_json(**result)
            if waited >= p["wait_timeout"]:
                what = (
                    "Ready" + (" after a reboot" if p["rebooted_from"] else "")
                    if p["wait_for"] == "ready"
                    else "not Ready"
                )
                module.fail_json(msg=f"Not {what} after {p['wait_timeout']:g}s: {', '.join(left)}.", **result)
            waiter.wait(min(p["poll_interval"], p["wait_timeout"] - waited))
    except NodeopsError as exc:
        module.fail_error(exc)


def main() -> None:
    run(K8sModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True, **CHECKS))


if __name__ == "__main__":
    main()
