#!/usr/bin/python
# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: cordon
short_description: Cordon or uncordon Kubernetes nodes
version_added: 0.1.0
author:
  - nodeops.maintenance contributors (@nodeops)
description:
  - Marks one node, a list of nodes, or the nodes that match a label selector unschedulable
    (O(state=cordoned)) or schedulable again (O(state=uncordoned)).
  - Only the nodes whose state differs are patched, so a second run reports no change.
  - Each patch is conditional on the node's C(resourceVersion) as the task read it, so it never overwrites a
    change made meanwhile; when the node changed (Conflict), it is read again and decided again, at most 5 times.
    A node that someone else moved to O(state) meanwhile is reported unchanged.
  - Every named node is checked before the first write; an unknown name fails the task and changes nothing.
  - Pods already on a node keep running; use a drain to move them.
extends_documentation_fragment:
  - nodeops.maintenance.k8s_auth_options
  - nodeops.maintenance.attributes
attributes:
  check_mode:
    support: full
    details: In check mode each patch is sent with the API server's dry-run, so permissions and admission
      are checked too.
  diff_mode:
    support: full
options:
  name:
    description:
      - Name of the node, or a list of node names.
      - Mutually exclusive with O(node_selector); one of the two is required.
    type: list
    elements: str
    aliases: [node]
  node_selector:
    description:
      - A label selector (for example V(node-role.kubernetes.io/gpu=,zone=a)) that picks the nodes.
      - A selector that matches no node is not an error; the result has an empty O(name) list and a warning.
    type: str
  state:
    description:
      - V(cordoned) marks the nodes unschedulable; V(uncordoned) makes them schedulable again.
    type: str
    choices: [cordoned, uncordoned]
    default: cordoned
notes:
  - Uncordon removes C(spec.unschedulable), as C(kubectl uncordon) does.
  - Uncordoning a node that a NodeMaintenance cordoned (annotation C(maintenance.nodeops.io/cordoned-by)) warns,
    since the maintenance still holds it; its release leaves the node as it is then.
seealso:
  - name: Safely drain a node
    description: The Kubernetes documentation on cordon and drain.
    link: https://kubernetes.io/docs/tasks/administer-cluster/safely-drain-node/
"""

EXAMPLES = r"""
- name: Cordon one node
  nodeops.maintenance.cordon:
    name: gpu-07

- name: Cordon every node of a rack, with the connection set once for the play
  module_defaults:
    group/nodeops.maintenance.k8s:
      kubeconfig: ~/.kube/prod
  nodeops.maintenance.cordon:
    node_selector: topology.example.com/rack=r12

- name: Uncordon a list of nodes and show what changed
  nodeops.maintenance.cordon:
    name: [gpu-07, gpu-08]
    state: uncordoned
  diff: true
  register: uncordon

- name: Ad-hoc, from the shell
  ansible.builtin.debug:
    msg: "ansible localhost -m nodeops.maintenance.cordon -a 'name=gpu-07 state=uncordoned'"
"""

RETURN = r"""
nodes:
  description: One entry per node the task selected, sorted by name.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: Node name.
      type: str
      sample: gpu-07
    before:
      description: The node's state before the task (as last read, when the node changed during the task).
      type: str
      sample: uncordoned
    after:
      description: The node's state after the task (in check mode, the state it would have).
      type: str
      sample: cordoned
    changed:
      description: Whether this node was (or in check mode would be) patched.
      type: bool
      sample: true
  sample:
    - name: gpu-07
      before: uncordoned
      after: cordoned
      changed: true
changed_nodes:
  description: Names of the nodes that were (or would be) patched.
  returned: always
  type: list
  elements: str
  sample: [gpu-07]
diff:
  description: Per node, C(unschedulable) before and after; only when run with C(--diff).
  returned: when diff mode is on
  type: dict
  sample:
    before: {gpu-07: {unschedulable: false}}
    after: {gpu-07: {unschedulable: true}}
"""

from typing import Any

from ansible_collections.nodeops.maintenance.plugins.module_utils.core.maintenance.cordon import (
    CORDONED,
    UNCORDONED,
    cordoned_by,
    missing_names,
    plan_cordon,
)
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.node.errors import NodeopsError
from ansible_collections.nodeops.maintenance.plugins.module_utils.engines.cordon import set_state
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.client import NODES
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.errors import NotFound
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.module import K8sModule

ARGUMENT_SPEC: dict[str, Any] = {
    "name": {"type": "list", "elements": "str", "aliases": ["node"]},
    "node_selector": {"type": "str"},
    "state": {"type": "str", "choices": [CORDONED, UNCORDONED], "default": CORDONED},
}
CHECKS: dict[str, Any] = {
    "mutually_exclusive": [("name", "node_selector")],
    "required_one_of": [("name", "node_selector")],
}


def run(module: Any) -> None:
    """Cordon or uncordon; ends in ``module.exit_json`` or ``module.fail_json`` (a K8sModule, or its stand-in in the
    action when the task runs on the controller)."""
    names: list[str] | None = module.params["name"]
    state: str = module.params["state"]
    client = module.client
    try:
        if names is not None and len(set(names)) == 1:
            try:
                nodes = [client.get(NODES, names[0])]
            except NotFound:
                nodes = []
        else:
            listing = client.list(NODES, label_selector=module.params["node_selector"])
            nodes = listing["items"]
            if names is not None:
                wanted = set(names)
                nodes = [n for n in nodes if n["metadata"]["name"] in wanted]
        if names is not None and (unknown := missing_names(names, nodes)):
            module.fail_json(
                msg=f"Unknown node(s): {', '.join(unknown)}. Nothing was changed; check the names with "
                "'kubectl get nodes'.",
                unknown_nodes=unknown,
            )
        if names is None and not nodes:
            module.warn(f"node_selector {module.params['node_selector']!r} matched no node.")

        by_name = {n["metadata"]["name"]: n for n in nodes}
        plan = plan_cordon(nodes, state)
        for index, change in enumerate(plan):
            if not change.changed:
                continue
            outcome = set_state(client, by_name[change.name], state, dry_run=module.check_mode)
            plan[index] = outcome.change
            holder = cordoned_by(outcome.node) if outcome.change.changed and state == UNCORDONED else None
            if holder:
                module.warn(
                    f"Node {change.name} was cordoned by {holder}, which still holds it; its release will leave "
                    "the node as it is."
                )
    except NodeopsError as exc:
        module.fail_error(exc)

    changed_nodes = [c.name for c in plan if c.changed]
    result = {
        "changed": bool(changed_nodes),
        "nodes": [c.as_dict() for c in plan],
        "changed_nodes": changed_nodes,
    }
    if module._diff:
        result["diff"] = {
            "before": {c.name: {"unschedulable": c.before == CORDONED} for c in plan},
            "after": {c.name: {"unschedulable": c.after == CORDONED} for c in plan},
        }
    module.exit_json(**result)


def main() -> None:
    run(K8sModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True, **CHECKS))


if __name__ == "__main__":
    main()
