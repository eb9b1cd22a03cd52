#!/usr/bin/python
# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: node_maintenance
short_description: Request or release maintenance of Kubernetes nodes through NodeMaintenance objects
version_added: 0.1.0
author:
  - nodeops.maintenance contributors (@nodeops)
description:
  - Asks for maintenance of one or more nodes for a requestor by creating a C(NodeMaintenance)
    (C(maintenance.nvidia.com/v1alpha1)) per node, or gives them back by deleting it, the way NVIDIA's GPU and
    Network operators do.
  - When another requestor already has a NodeMaintenance for the node, the module joins it by adding
    O(requestor) to its C(additionalRequestors) instead of creating a second one, and on release removes
    O(requestor) from that list again. The node is handed back once its owner deletes the object and no
    additional requestor is left.
  - A request it joined whose owner deleted it while it was drained is kept for the requestors left; for them it
    is still their request (V(unchanged)), and no second one is made. While its own request of the default name
    is still being deleted, a new one is made as C(<name>-2) (then C(-3), ...).
  - With O(wait=true) the task waits until every request is Ready (O(state=present)) or gone
    (O(state=absent)). By default it runs the reconcile passes of M(nodeops.maintenance.maintenance_reconcile)
    itself while it waits; with O(engine=operator) it only watches, for clusters where the NVIDIA Maintenance
    Operator (or another reconciler) does the work.
  - Every node is checked before the first write; an unknown node fails the task and changes nothing. Updates
    are conditional and retried after a re-read when another writer came first.
extends_documentation_fragment:
  - nodeops.maintenance.k8s_auth_options
  - nodeops.maintenance.request_options
  - nodeops.maintenance.reconcile_options
  - nodeops.maintenance.attributes
attributes:
  check_mode:
    support: full
    details: Check mode reports what would be created, joined, updated, deleted or left, and writes nothing.
  diff_mode:
    support: none
options:
  name:
    description: The node, or a list of nodes (C(spec.nodeName) of each object).
    type: list
    elements: str
    required: true
    aliases: [node, nodeName]
  state:
    description:
      - V(present) requests maintenance; V(absent) releases it.
    type: str
    choices: [present, absent]
    default: present
  wait:
    description: Wait until every request is Ready (O(state=present)) or released (O(state=absent)).
    type: bool
    default: false
  wait_timeout:
    description: Seconds to wait; the task fails when they pass, naming what each request waits for.
    type: float
    default: 600
  engine:
    description:
      - V(builtin) runs reconcile passes while waiting; V(operator) only waits for another reconciler.
      - The NVIDIA Maintenance Operator serves O(cordon=false) as V(true) and O(drain_spec.timeout_seconds=0)
        as V(300) (the CRD's defaults, once its API types leave out a false or a 0). With V(operator) the
        request is written that way from the start and the task warns; RV(overrides) lists what changed.
    type: str
    choices: [builtin, operator]
    default: builtin
seealso:
  - module: nodeops.maintenance.maintenance_reconcile
  - module: nodeops.maintenance.maintenance_plan
"""

EXAMPLES = r"""
- name: Ask for gpu-07 and wait until it is cordoned and drained
  nodeops.maintenance.node_maintenance:
    name: gpu-07
    requestor: upgrades.example.com
    drain_spec:
      force: true
      delete_emptydir_data: true
      timeout_seconds: 600
    wait: true

- name: Give it back
  nodeops.maintenance.node_maintenance:
    name: gpu-07
    requestor: upgrades.example.com
    state: absent
    wait: true

- name: On a cluster that runs the NVIDIA Maintenance Operator, only create and wait
  nodeops.maintenance.node_maintenance:
    name: [gpu-01, gpu-02]
    requestor: upgrades.example.com
    namespace: maintenance-operator
    drain_spec: {force: true}
    wait: true
    engine: operator
"""

RETURN = r"""
node_maintenances:
  description: One entry per node and object, after the task (and the wait).
  returned: always
  type: list
  elements: dict
  contains:
    node:
      description: The node.
      type: str
    name:
      description: C(namespace/name) of the NodeMaintenance.
      type: str
    action:
      description: V(created), V(joined), V(updated), V(unchanged), V(deleted), V(deleting) (deleted earlier,
        held by other requestors), V(left) or V(absent).
      type: str
    phase:
      description: The Ready condition's reason (V(Pending) ... V(Ready)); empty before the first pass, null
        when the object is gone.
      type: str
    conditions:
      description: The object's conditions.
      type: list
      elements: dict
  sample:
    - {node: gpu-07, name: default/upgrades.example.com-gpu-07, action: created, phase: Ready, conditions: []}
overrides:
  description:
    - One sentence per option that the engine serves differently from what was asked (O(engine=operator)
      only); the same sentences are the task's warnings.
  returned: always
  type: list
  elements: str
  sample: []
"""

from typing import Any

from ansible_collections.nodeops.maintenance.plugins.module_utils.core import strict
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.node.errors import NodeopsError
from ansible_collections.nodeops.maintenance.plugins.module_utils.engines.maintenance import (
    ReconcileOptions,
    Reconciler,
)
from ansible_collections.nodeops.maintenance.plugins.module_utils.engines.requests import (
    ABSENT,
    DELETING,
    UNCHANGED,
    RequestError,
    Requests,
    RequestSpec,
    for_engine,
    is_gone,
    is_ready,
    nm_spec,
)
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.module import K8sModule
from ansible_collections.nodeops.maintenance.plugins.module_utils.reconcile_options import reconcile_options
from ansible_collections.nodeops.maintenance.plugins.module_utils.request_options import request_options

ARGUMENT_SPEC: dict[str, Any] = {
    "name": {"type": "list", "elements": "str", "required": True, "aliases": ["node", "nodeName"]},
    "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
    **request_options(),
    "wait": {"type": "bool", "default": False},
    "wait_timeout": {"type": "float", "default": 600},
    "engine": {"type": "str", "choices": ["builtin", "operator"], "default": "builtin"},
    **reconcile_options(),
}


CHECKS: dict[str, Any] = {}


def run(module: Any) -> None:
    """What the module does; ends in ``module.exit_json`` or ``module.fail_json`` (a K8sModule, or its stand-in in
    the action when the task runs on the controller)."""
    p = module.params
    nodes = list(dict.fromkeys(p["name"]))
    try:
        spec, overrides = for_engine(nm_spec(p), p["engine"])
        for node in nodes:  # the whole object's spec, as the API server will check it
            strict.check_spec("NodeMaintenance", {**spec, "requestorID": p["requestor"], "nodeName": node})
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    for sentence in overrides:
        module.warn(sentence)
    options = ReconcileOptions(config_namespace=p["config_namespace"], step_budget=p["step_timeout"])
    module.set_pool_size(options.pool_size())
    request = RequestSpec(p["requestor"], p["namespace"], p["name_prefix"] or p["requestor"], spec)
    result: dict[str, Any] = {"node_maintenances": [], "overrides": overrides}
    requests = Requests(module.client, request, check_mode=module.check_mode)
    try:
        actions = requests.present(nodes) if p["state"] == "present" else requests.absent(nodes)
        changed = any(a.action not in (UNCHANGED, ABSENT, DELETING) for a in actions)
        result["node_maintenances"] = [a.as_dict() for a in actions]
        if p["wait"] and not module.check_mode:
            reconciler = Reconciler(module.client, options) if p["engine"] == "builtin" else None
            until = is_ready if p["state"] == "present" else is_gone
            done = requests.wait(actions, until, p["wait_timeout"], reconciler)
            warn_passes(module, requests)
            result["node_maintenances"] = [a.as_dict() for a in actions]
            if not done:
                left = [requests.explain(a) for a in actions if not until(a)]
                goal = "Ready" if p["state"] == "present" else "released"
                module.fail_json(
                    msg=f"Not {goal} after {p['wait_timeout']:g}s: " + "; ".join(left),
                    changed=changed,
                    **result,
                )
    except RequestError as exc:
        warn_passes(module, requests)
        module.fail_json(msg=exc.msg, **result)
    except NodeopsError as exc:
        warn_passes(module, requests)
        module.fail_error(exc, **result)
    module.exit_json(changed=changed, **result)


def warn_passes(module: Any, requests: Requests) -> None:
    """The warnings of the reconcile passes run while waiting (each once, and only once per task)."""
    for warning in requests.warnings:
        module.warn(warning)
    requests.warnings.clear()


def main() -> None:
    run(K8sModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True, **CHECKS))


if __name__ == "__main__":
    main()
