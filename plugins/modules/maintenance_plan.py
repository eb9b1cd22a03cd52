#!/usr/bin/python
# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: maintenance_plan
short_description: Show which NodeMaintenance requests the scheduler picks next, and the whole rollout
version_added: 0.1.0
author:
  - nodeops.maintenance contributors (@nodeops)
description:
  - Computes, without changing anything, the next scheduling pass over C(NodeMaintenance) requests
    (C(maintenance.nvidia.com/v1alpha1)) and the sequence of waves that would follow if every scheduled
    request completed and was released.
  - The scheduler follows the NVIDIA Maintenance Operator. C(maxParallelOperations) (a number, or a
    percentage of all nodes rounded up; 1 when unset; 0 schedules nothing) limits the nodes under
    maintenance. C(maxUnavailable) (a number, or a percentage rounded down; unset or negative means no limit)
    limits the nodes that are unavailable for any reason (cordoned, not Ready, or under maintenance).
  - Candidates are the Pending requests on nodes with no request in progress. Requestors that already have a
    request in progress go first, then requestors with fewer Pending requests, then the oldest requests.
    One request per node. A request on a node that is already unavailable does not use the
    C(maxUnavailable) budget, and a candidate skipped for lack of budget does not use up a slot.
  - The data comes from the cluster (all Nodes, the NodeMaintenances of O(namespace) or of all namespaces,
    and the C(default) MaintenanceOperatorConfig in O(config_namespace)), or from the O(nodes),
    O(node_maintenances) and O(config) parameters, or from files (O(snapshot)). With both O(nodes) and
    O(node_maintenances) given, or O(snapshot), the module runs offline and needs no cluster.
extends_documentation_fragment:
  - nodeops.maintenance.k8s_auth_options
  - nodeops.maintenance.attributes
attributes:
  check_mode:
    support: full
    details: The module only reads; check mode returns the same plan.
  diff_mode:
    support: none
options:
  namespace:
    description:
      - Namespace of the NodeMaintenance objects read from the cluster.
      - Omit it to read every namespace, as the scheduler does. Limits computed from one namespace alone
        ignore the requests in progress elsewhere.
      - Not used when O(node_maintenances) is given.
    type: str
  config_namespace:
    description:
      - Namespace of the MaintenanceOperatorConfig named C(default) that holds the limits.
      - When that object does not exist the built-in defaults apply (C(maxParallelOperations=1), no
        C(maxUnavailable)) and RV(config.source) says so.
      - Not used when O(config) is given, or offline with O(nodes) and O(node_maintenances) (with O(snapshot) it
        picks the snapshot's C(MaintenanceOperatorConfig)).
    type: str
    default: nodeops-maintenance
  nodes:
    description:
      - Node objects as C(kubectl get nodes -o json) prints them, instead of reading the cluster. A list of
        Node objects, or the whole C(NodeList) (its C(items) are used).
      - Goes with O(node_maintenances); an offline plan needs both (V([]) when there are none).
      - Only C(metadata.name), C(spec.unschedulable) and the C(Ready) condition are looked at. A node
        without a C(Ready) condition counts as Ready.
      - The node count is the total that percentages are taken of, so give every node of the cluster.
    type: raw
  node_maintenances:
    description:
      - NodeMaintenance objects as C(kubectl get nodemaintenances -A -o json) prints them, instead of reading
        the cluster. A list of objects, or the whole list object (its C(items) are used).
      - Goes with O(nodes). Each object's C(spec) is checked as the API server checks it (an unknown field is
        named, with the closest known one).
      - The phase is the reason of the C(Ready) condition; a request without one counts as Pending, except on a
        node that does not exist (a live pass never marks such a request Pending, so it does not count in its
        requestor's ranking).
      - A request for a node that is not among the nodes is handled as O(unknown_nodes) says.
    type: raw
  snapshot:
    description:
      - Offline mode from files, read on the host the task runs on, as C(kubectl get ... -o json) (or C(-o yaml))
        saves them. Each file holds one object or a List of them. Its C(Node) objects are the nodes, its
        C(NodeMaintenance) objects the requests, and the C(MaintenanceOperatorConfig) named C(default) in
        O(config_namespace) the limits unless O(config) is given.
      - For example C(kubectl get nodes,nodemaintenances,maintenanceoperatorconfigs -A -o json > cluster.json).
      - Much faster than passing thousands of objects as O(nodes) and O(node_maintenances), which Ansible
        serializes into the module's arguments.
      - Mutually exclusive with O(nodes) and O(node_maintenances).
    type: list
    elements: path
  unknown_nodes:
    description:
      - What to do with a request for a node that is not among the nodes.
      - V(skip) plans as a live pass does, where a Node can go before its requests are collected. Such a
        request is reported with reason C(node_not_found) and a warning, and is never scheduled.
      - V(error) fails the task naming the request, which catches a typo in offline data.
    type: str
    choices: [skip, error]
    default: skip
  config:
    description:
      - The limits to plan with, the fields of a MaintenanceOperatorConfig's C(spec), instead of reading the
        C(default) config from the cluster. Each field takes its snake_case name or the CRD's camelCase one, so a
        C(spec) copied from the object works as it is.
      - A number given as a string (V("2"), as C(-e) passes it) is taken as that number.
      - Offline, without this option, the built-in defaults apply.
    type: dict
    suboptions:
      max_parallel_operations:
        description: C(maxParallelOperations), a number, or a whole percentage of all nodes such as V(10%) (rounded up).
        type: raw
        aliases: [maxParallelOperations]
      max_unavailable:
        description: C(maxUnavailable), a number, or a whole percentage of all nodes such as V(20%) (rounded down).
          Unset or negative means no limit.
        type: raw
        aliases: [maxUnavailable]
      max_node_maintenance_time_seconds:
        description: C(maxNodeMaintenanceTimeSeconds), accepted for convenience and not used by the plan.
        type: int
        aliases: [maxNodeMaintenanceTimeSeconds]
      log_level:
        description: C(logLevel), accepted for convenience and not used by the plan.
        type: str
        aliases: [logLevel]
notes:
  - The rollout is a model. Each wave starts when everything before it has completed and been released; a
    released node returns to the availability it had before its maintenance (a node the maintenance cordoned is
    uncordoned). Nodes that are cordoned or not Ready for other reasons stay so.
  - Offline runs need no cluster and no credentials, but the C(kubernetes) Python package must be installed
    where the module runs, as for every module of the collection.
  - Requests that no wave reaches are listed in RV(never_scheduled) with the reason, for example
    C(maxParallelOperations=0) or a C(maxUnavailable) budget used up by nodes that stay unavailable.
seealso:
  - name: NVIDIA Maintenance Operator
    description: The operator whose NodeMaintenance API and scheduler this collection follows.
    link: https://github.com/Mellanox/maintenance-operator
"""

EXAMPLES = r"""
- name: What would the scheduler pick next, and in which waves would the rest follow?
  nodeops.maintenance.maintenance_plan:
  register: plan

- name: Show the waves
  ansible.builtin.debug:
    msg: "{{ plan.waves | map(attribute='nodes') | list }}"

- name: Plan only the requests of one namespace, with the limits in another
  nodeops.maintenance.maintenance_plan:
    namespace: gpu-upgrades
    config_namespace: maintenance-operator

- name: What if maxUnavailable were 20%? (live nodes and requests, other limits)
  nodeops.maintenance.maintenance_plan:
    config:
      max_parallel_operations: 3
      max_unavailable: 20%

- name: Offline, from files saved with kubectl get -o json
  nodeops.maintenance.maintenance_plan:
    nodes: "{{ lookup('ansible.builtin.file', 'nodes.json') | from_json }}"
    node_maintenances: "{{ lookup('ansible.builtin.file', 'nodemaintenances.json') | from_json }}"
    config:
      max_parallel_operations: 2
  delegate_to: localhost

- name: Fail when a request can never be scheduled
  ansible.builtin.assert:
    that: plan.never_scheduled | length == 0
    fail_msg: "{{ plan.never_scheduled | map(attribute='message') | list }}"
"""

RETURN = r"""
scheduled:
  description: The requests the next pass schedules (C(namespace/name)), in ranked order.
  returned: always
  type: list
  elements: str
  sample: [gpu-upgrades/gpu-07-driver, gpu-upgrades/gpu-03-driver]
available_slots:
  description: Free slots in the next pass, C(maxParallelOperations) minus the nodes under maintenance (at least
    0, at most the node count).
  returned: always
  type: int
  sample: 2
can_become_unavailable:
  description: How many more available nodes may become unavailable in the next pass, C(maxUnavailable) minus
    the nodes unavailable or under maintenance (at least 0); null when there is no limit.
  returned: always
  type: int
  sample: 1
max_parallel_operations:
  description: C(maxParallelOperations) as a number of nodes.
  returned: always
  type: int
  sample: 3
max_unavailable:
  description: C(maxUnavailable) as a number of nodes; null when there is no limit.
  returned: always
  type: int
  sample: 4
total_nodes:
  description: The number of nodes, the total that percentages are taken of.
  returned: always
  type: int
  sample: 20
in_maintenance:
  description: Nodes with a request in progress (reason C(Scheduled) or later, not yet released), sorted.
  returned: always
  type: list
  elements: str
  sample: [gpu-01]
unavailable_nodes:
  description: Nodes that are cordoned or not Ready, sorted.
  returned: always
  type: list
  elements: str
  sample: [gpu-11]
in_progress:
  description: The requests already in progress (C(namespace/name)), sorted.
  returned: always
  type: list
  elements: str
  sample: [gpu-upgrades/gpu-01-driver]
candidates:
  description: One entry per waiting (Pending or new) request, with the decision of the next pass. The ranked
    candidates come first, in order; then the requests that could not compete, by name.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: C(namespace/name) of the NodeMaintenance.
      type: str
      sample: gpu-upgrades/gpu-07-driver
    namespace:
      description: Its namespace.
      type: str
      sample: gpu-upgrades
    node:
      description: The node it is for.
      type: str
      sample: gpu-07
    requestor:
      description: Its C(spec.requestorID).
      type: str
      sample: gpu-operator.nvidia.com
    scheduled:
      description: Whether the next pass schedules it.
      type: bool
      sample: true
    reason:
      description:
        - V(scheduled) (the node becomes unavailable, within the budget),
          V(scheduled_node_unavailable) (the node is already unavailable, no budget used),
          V(no_slot) (no free slot left), V(no_budget) (C(maxUnavailable) reached),
          V(node_in_maintenance) (another request is in progress on the node),
          V(node_taken) (another request for the node ranks higher), V(node_not_found),
          V(being_deleted).
      type: str
      sample: scheduled
    message:
      description: The reason in words, with the numbers.
      type: str
      sample: "node gpu-07 becomes unavailable: 1 of the maxUnavailable budget left before it."
    position:
      description: 1-based place in the ranked list; null for requests that could not compete.
      type: int
      sample: 1
    rank:
      description: The ranking score (1000 when the requestor has a request in progress, plus 100 minus its
        Pending requests, at least 0); null for requests that could not compete.
      type: int
      sample: 98
waves:
  description: The rollout; the first wave is the next pass (when it schedules anything).
  returned: always
  type: list
  elements: dict
  contains:
    wave:
      description: 1-based wave number.
      type: int
      sample: 1
    requests:
      description: The requests of the wave (C(namespace/name)), in ranked order.
      type: list
      elements: str
      sample: [gpu-upgrades/gpu-07-driver]
    nodes:
      description: Their nodes, in the same order.
      type: list
      elements: str
      sample: [gpu-07]
  sample:
    - {wave: 1, requests: [gpu-upgrades/gpu-07-driver, gpu-upgrades/gpu-03-driver], nodes: [gpu-07, gpu-03]}
    - {wave: 2, requests: [gpu-upgrades/gpu-05-driver], nodes: [gpu-05]}
never_scheduled:
  description: Waiting requests that no wave reaches, with the reason of the last pass (same keys as
    RV(candidates)).
  returned: always
  type: list
  elements: dict
  sample:
    - name: gpu-upgrades/gpu-09-driver
      namespace: gpu-upgrades
      node: gpu-09
      requestor: gpu-operator.nvidia.com
      scheduled: false
      reason: no_budget
      message: "node gpu-09 is available and would become unavailable, but maxUnavailable (1) is reached: ..."
      position: 1
      rank: 99
config:
  description: The limits the plan used (as O(config) names them) and where they came from.
  returned: always
  type: dict
  contains:
    max_parallel_operations:
      description: C(maxParallelOperations) as configured (a number or a percentage).
      type: raw
      sample: 20%
    max_unavailable:
      description: C(maxUnavailable) as configured; null when unset.
      type: raw
      sample: 2
    source:
      description: Where the limits came from.
      type: str
      sample: MaintenanceOperatorConfig nodeops-maintenance/default
source:
  description: V(cluster) when anything was read from the cluster, V(data) when the module ran offline.
  returned: always
  type: str
  sample: cluster
"""

from typing import Any

from ansible_collections.nodeops.maintenance.plugins.module_utils.core import strict
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.maintenance.scheduler import (
    NODE_NOT_FOUND,
    SchedulerConfig,
    parse_nodes,
    parse_requests,
    simulate_rollout,
)
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.node.errors import NodeopsError
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s import snapshot
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.client import (
    MAINTENANCE_CONFIGS,
    NODE_MAINTENANCES,
    NODES,
)
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.errors import NotFound
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.module import K8sModule

DEFAULT_CONFIG = "default"
# the config option's sub-options and the MaintenanceOperatorConfig spec fields they stand for
CONFIG_FIELDS = {
    "max_parallel_operations": "maxParallelOperations",
    "max_unavailable": "maxUnavailable",
    "max_node_maintenance_time_seconds": "maxNodeMaintenanceTimeSeconds",
    "log_level": "logLevel",
}


def _name(obj: Any) -> str:
    return str(((obj or {}).get("metadata") or {}).get("name") or "")


def as_items(value: Any, option: str) -> list[Any]:
    """A list of objects, or a Kubernetes List object (its items)."""
    if isinstance(value, list):
        return value
    if isinstance(value, dict) and isinstance(value.get("items"), list):
        return value["items"]
    raise ValueError(
        f"{option}: give a list of objects or a List object with items, as 'kubectl get -o json' prints it "
        f"(got {type(value).__name__})."
    )


def number_or_percent(value: Any) -> Any:
    """``"2"`` (as ``-e`` and templating give numbers) becomes 2; anything else is left for the scheduler."""
    text = value.strip() if isinstance(value, str) else ""
    digits = text[1:] if text.startswith("-") else text
    if digits.isascii() and digits.isdigit():  # isdigit() alone holds for "٣" and "²" too
        return int(value)
    return value


ARGUMENT_SPEC: dict[str, Any] = {
    "namespace": {"type": "str"},
    "config_namespace": {"type": "str", "default": "nodeops-maintenance"},
    "nodes": {"type": "raw"},
    "node_maintenances": {"type": "raw"},
    "snapshot": {"type": "list", "elements": "path"},
    "unknown_nodes": {"type": "str", "choices": ["skip", "error"], "default": "skip"},
    "config": {
        "type": "dict",
        "options": {
            "max_parallel_operations": {"type": "raw", "aliases": ["maxParallelOperations"]},
            "max_unavailable": {"type": "raw", "aliases": ["maxUnavailable"]},
            "max_node_maintenance_time_seconds": {"type": "int", "aliases": ["maxNodeMaintenanceTimeSeconds"]},
            "log_level": {"type": "str", "aliases": ["logLevel"]},
        },
    },
}
CHECKS: dict[str, Any] = {
    "mutually_exclusive": [("snapshot", "nodes"), ("snapshot", "node_maintenances")],
}


def run(module: Any) -> None:
    """What the module does; ends in ``module.exit_json`` or ``module.fail_json`` (a K8sModule, or its stand-in in
    the action when the task runs on the controller)."""
    # a copy: a snapshot's objects fill it, and must not be echoed back as the task's arguments
    p = dict(module.params)
    config_source = "built-in defaults"
    try:
        if p["snapshot"] is not None:
            saved = snapshot.read(p["snapshot"])
            strict.check_snapshot(saved)
            p["nodes"], p["node_maintenances"] = saved.get("Node", []), saved.get("NodeMaintenance", [])
            configs = [
                c
                for c in saved.get("MaintenanceOperatorConfig", [])
                if _name(c) == DEFAULT_CONFIG and (c.get("metadata") or {}).get("namespace") == p["config_namespace"]
            ]
            if p["config"] is None and configs:
                spec = configs[0].get("spec") or {}
                p["config"] = {option: spec.get(field) for option, field in CONFIG_FIELDS.items()}
                config_source = f"MaintenanceOperatorConfig {configs[0].get('metadata', {}).get('namespace')}/default"
                config_source += " (snapshot)"
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    offline = p["nodes"] is not None and p["node_maintenances"] is not None
    if (p["nodes"] is None) != (p["node_maintenances"] is None):
        given, missing = ("nodes", "node_maintenances") if p["nodes"] is not None else ("node_maintenances", "nodes")
        module.fail_json(
            msg=f"{given} without {missing}: an offline plan needs both (give {missing}: [] when there are none), "
            "or a snapshot; a plan against the cluster takes neither."
        )
    try:
        node_objs = as_items(p["nodes"], "nodes") if p["nodes"] is not None else None
        nm_objs = as_items(p["node_maintenances"], "node_maintenances") if p["node_maintenances"] is not None else None
        for index, obj in enumerate(nm_objs or []):
            if isinstance(obj, dict):
                strict.check_spec("NodeMaintenance", obj.get("spec"), f"node_maintenances[{index}].spec")
        config_spec: dict[str, Any] | None = None
        if p["config"] is not None:
            # by option name: the validated options hold each alias used too (maxParallelOperations, ...)
            config_spec = {
                field: number_or_percent(p["config"][option])
                for option, field in CONFIG_FIELDS.items()
                if p["config"].get(option) is not None
            }
            if config_source == "built-in defaults":
                config_source = "the config option"
            strict.check_spec("MaintenanceOperatorConfig", config_spec, "config")  # as the API server would
        if not offline:
            client = module.client
            if node_objs is None:
                node_objs = client.list(NODES)["items"]
            if nm_objs is None:
                nm_objs = client.list(NODE_MAINTENANCES, namespace=p["namespace"])["items"]
            if config_spec is None:
                name = f"{p['config_namespace']}/{DEFAULT_CONFIG}"
                try:
                    obj = client.get(MAINTENANCE_CONFIGS, DEFAULT_CONFIG, namespace=p["config_namespace"])
                    config_spec = obj.get("spec") or {}
                    config_source = f"MaintenanceOperatorConfig {name}"
                except NotFound:
                    config_source = f"built-in defaults (no MaintenanceOperatorConfig {name})"
    except NodeopsError as exc:
        module.fail_error(exc)
    except ValueError as exc:
        module.fail_json(msg=str(exc))

    try:
        config = SchedulerConfig.from_spec(config_spec, source=f"config ({config_source})")
        rollout = simulate_rollout(
            parse_nodes(node_objs or []),
            parse_requests(nm_objs or []),
            config,
            unknown_nodes=p["unknown_nodes"],
        )
    except ValueError as exc:
        module.fail_json(msg=str(exc))

    first = rollout.first
    for decision in first.decisions:
        if decision.reason == NODE_NOT_FOUND:
            module.warn(
                f"NodeMaintenance {decision.request.key} is for node {decision.request.node_name}, "
                "which does not exist."
            )
    result: dict[str, Any] = first.as_dict()
    result.update(rollout.as_dict())
    result["never_scheduled"] = result.pop("never")
    result["config"] = {
        "max_parallel_operations": config.max_parallel_operations,
        "max_unavailable": config.max_unavailable,
        "source": config_source,
    }
    result["source"] = "data" if offline else "cluster"
    module.exit_json(changed=False, **result)


def main() -> None:
    run(K8sModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True, **CHECKS))


if __name__ == "__main__":
    main()
