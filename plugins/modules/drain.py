#!/usr/bin/python
# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: drain
short_description: Drain a Kubernetes node safely, in parallel, honouring PodDisruptionBudgets
version_added: 0.1.0
author:
  - nodeops.maintenance contributors (@nodeops)
description:
  - Cordons the node (remembering whether it was cordoned already), then evicts its pods through the
    policy/v1 Eviction API, many at once, and waits through a watch until they are really gone.
  - "Pods are chosen in C(kubectl drain)'s order: pods already terminating are waited for; DaemonSet pods
    stay (one whose DaemonSet no longer exists needs O(force)); mirror (static) pods stay; pods with an
    C(emptyDir) volume need O(delete_emptydir_data); pods without a controller need O(force) (finished
    pods need neither); then O(pod_eviction_filters) pick the pods to evict."
  - A rule that blocks the drain fails the task before the first eviction, naming every offending pod and
    the option that would allow it; the cordon this task added is undone, so nothing is changed.
  - An eviction refused by a PodDisruptionBudget (HTTP 429) is retried with backoff until O(timeout_seconds).
    When the deadline passes the task fails, naming the pods still there and the budgets that block them;
    the node stays cordoned unless O(uncordon_on_failure) is set.
  - An eviction answered with a Conflict on the budget (HTTP 409, the API server could not update the
    PodDisruptionBudget against other evictions of the moment) is asked again the same way; it is not a
    refusal and never leads to O(bypass_pdb_after).
  - A drained node drained again reports no change.
  - The cordon is written only if the node is still as read (its resourceVersion), under the field manager
    C(nodeops-maintenance-drain). Undoing it (a rule block, O(uncordon_on_failure)) reads the node again and
    uncordons only if that cordon is still the one there and no C(NodeMaintenance) in progress holds the node;
    otherwise the node stays cordoned, with a warning (also when the credential cannot list NodeMaintenances).
extends_documentation_fragment:
  - nodeops.maintenance.k8s_auth_options
  - nodeops.maintenance.attributes
attributes:
  check_mode:
    support: full
    details: In check mode the cordon and every eviction are sent with the API server's dry-run, so the
      result says which pods would go and which PodDisruptionBudgets would refuse them (a warning), and
      nothing changes.
  diff_mode:
    support: full
options:
  name:
    description: Name of the node to drain.
    type: str
    required: true
    aliases: [node]
  force:
    description:
      - Also evict pods that no controller would recreate (bare pods) and pods whose DaemonSet no longer exists.
    type: bool
    default: false
  delete_emptydir_data:
    description:
      - Also evict pods with C(emptyDir) volumes; their data is lost.
    type: bool
    default: false
  pod_selector:
    description:
      - A label selector; only the node's pods that match it are considered (others are not even classified).
        Empty, every pod on the node.
    type: str
    default: ""
  pod_eviction_filters:
    description:
      - When set, only pods matching at least one entry are evicted; the others are skipped.
      - Applied after the rules, so a pod that needs O(force) or O(delete_emptydir_data) still blocks the drain.
    type: list
    elements: dict
    suboptions:
      by_resource_name_regex:
        description:
          - A regular expression (unanchored search); a pod matches when one of its containers requests
            a resource whose name matches, for example V(nvidia\\.com/gpu).
        type: str
        required: true
  terminate_grace_period:
    description:
      - Seconds each pod gets to terminate. Unset, each pod's own C(terminationGracePeriodSeconds) is used.
      - V(0) is honoured (immediate termination).
    type: int
  disable_eviction:
    description:
      - Delete pods instead of evicting them. This bypasses every PodDisruptionBudget.
    type: bool
    default: false
  bypass_pdb_after:
    description:
      - Opt-in fallback. Seconds after the drain began from which a pod still refused by a
        PodDisruptionBudget is deleted instead of evicted. Unset (the default), budgets are never bypassed.
      - Every bypass is listed in the task's warnings.
    type: int
  timeout_seconds:
    description:
      - Seconds the drain (evictions and waiting for the pods to be gone) may take before the task fails; V(0)
        sets no limit.
      - A NodeMaintenance's C(drainSpec.timeoutSeconds) (C(drain_spec.timeout_seconds) of
        M(nodeops.maintenance.node_maintenance)).
    type: int
    default: 300
  workers:
    description:
      - How many evictions are in flight at once (the connection pool is sized to match), at most 256.
    type: int
    default: 32
  wait_for_pod_completion:
    description:
      - Before evicting anything, wait for the node's pods matching O(wait_for_pod_completion.pod_selector)
        to finish and be deleted on their own. When O(wait_for_pod_completion.timeout_seconds) passes, the drain
        goes on with a warning (the NVIDIA Maintenance Operator's semantics).
    type: dict
    suboptions:
      pod_selector:
        description: Label selector of the pods to wait for; empty means every pod on the node.
        type: str
        default: ""
      timeout_seconds:
        description: Seconds to wait; V(0) waits without limit.
        type: int
        default: 0
  uncordon_on_failure:
    description:
      - When the drain fails, uncordon the node again, if and only if this task cordoned it.
      - By default the node stays cordoned, the safe choice.
    type: bool
    default: false
notes:
  - Needs RBAC to get and patch nodes, list and watch pods, create C(pods/eviction), get daemonsets and
    list poddisruptionbudgets (and delete pods for O(disable_eviction) or O(bypass_pdb_after)).
seealso:
  - module: nodeops.maintenance.cordon
  - name: Safely drain a node
    description: The Kubernetes documentation on cordon and drain.
    link: https://kubernetes.io/docs/tasks/administer-cluster/safely-drain-node/
"""

EXAMPLES = r"""
- name: Drain a node, waiting up to 10 minutes for PodDisruptionBudgets
  nodeops.maintenance.drain:
    name: gpu-07
    delete_emptydir_data: true
    timeout_seconds: 600

- name: Only move the GPU workloads, deleting pods still blocked after 5 minutes
  nodeops.maintenance.drain:
    name: gpu-07
    pod_eviction_filters:
      - by_resource_name_regex: nvidia\.com/gpu
    bypass_pdb_after: 300
    timeout_seconds: 420

- name: Let batch jobs finish first (at most an hour), then drain
  nodeops.maintenance.drain:
    name: gpu-07
    wait_for_pod_completion:
      pod_selector: workload-class=batch
      timeout_seconds: 3600
  register: drained

- name: Which PodDisruptionBudgets would block a drain? (changes nothing)
  nodeops.maintenance.drain:
    name: gpu-07
  check_mode: true
  register: prediction
"""

RETURN = r"""
node:
  description: The node drained.
  returned: always
  type: str
  sample: gpu-07
was_cordoned:
  description: Whether the node was cordoned before the task.
  returned: always
  type: bool
  sample: false
cordoned:
  description: Whether the node is cordoned after the task (in check mode, would be).
  returned: always
  type: bool
  sample: true
pods:
  description: One entry per pod on the node (matching O(pod_selector)), sorted by namespace and name.
  returned: when the node exists
  type: list
  elements: dict
  contains:
    namespace:
      description: Namespace of the pod.
      type: str
    name:
      description: Name of the pod.
      type: str
    action:
      description:
        - V(evicted) or V(deleted) (and gone), V(gone) (it was terminating already, or went by itself, or
          was replaced by a new pod of the same name, which the drain leaves alone),
          V(skipped) (see RV(pods[].reason)), V(blocked) (by a rule, see RV(pods[].needs), or by a
          PodDisruptionBudget, see RV(pods[].pdbs)), V(terminating) (still there at the deadline),
          V(failed) (see RV(pods[].error)).
        - In check mode, what would happen.
      type: str
      sample: evicted
    reason:
      description: Why a pod is skipped or blocked (daemonset, mirror, eviction_filter, pdb, orphaned_daemonset,
        rule), V(pdb_bypassed) for a pod deleted by O(bypass_pdb_after), or V(answer_lost) for a pod evicted or
        deleted by a request whose answer was lost (the API server went away), found gone when it was sent again.
      type: str
      returned: when there is one
    pdbs:
      description: The PodDisruptionBudgets that refused its eviction.
      type: list
      elements: str
      returned: when a budget refused it
    needs:
      description: Options that would allow a pod a rule blocks (V(force), V(delete_emptydir_data)).
      type: list
      elements: str
      returned: when a rule blocks it
    error:
      description: The API's error for this pod.
      type: str
      returned: when the action is failed
    seconds:
      description: Seconds from the start of the drain until the pod was gone (or the last change).
      type: float
  sample:
    - {namespace: web, name: web-5d9c-x2x, action: evicted, seconds: 0.41}
    - {namespace: kube-system, name: node-agent-7qk, action: skipped, reason: daemonset, seconds: 0.0}
totals:
  description: Number of pods per action.
  returned: when the node exists
  type: dict
  sample: {evicted: 12, deleted: 0, gone: 0, skipped: 2, blocked: 0, terminating: 0, failed: 0}
progress:
  description: The numbers of NodeMaintenance C(status.drain).
  returned: when the node exists
  type: dict
  sample: {totalPods: 14, evictionPods: 12, drainProgress: 100, waitForEviction: []}
pdbs:
  description: C(namespace/name) of every PodDisruptionBudget that refused an eviction.
  returned: when the node exists
  type: list
  elements: str
  sample: [web/web-pdb]
wait_for_completion:
  description: Pods O(wait_for_pod_completion) was still waiting for when it ended (in check mode, the
    pods it would wait for).
  returned: when O(wait_for_pod_completion) is set
  type: list
  elements: str
  sample: []
seconds:
  description: Wall time of the task's work, in seconds.
  returned: always
  type: float
  sample: 2.315
diff:
  description: C(unschedulable) of the node before and after; only when run with C(--diff).
  returned: when diff mode is on
  type: dict
  sample:
    before: {unschedulable: false}
    after: {unschedulable: true}
"""

from typing import Any

from ansible_collections.nodeops.maintenance.plugins.module_utils.core.maintenance.drain import parse_eviction_filters
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.node.errors import NodeopsError
from ansible_collections.nodeops.maintenance.plugins.module_utils.engines.drain import (
    DrainError,
    DrainOptions,
    WaitForCompletion,
    drain,
    pool_size_for,
)
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.module import K8sModule
from ansible_collections.nodeops.maintenance.plugins.module_utils.request_options import drain_options

MAX_WORKERS = 256
NO_LIMIT = 1e9  # timeout_seconds: 0, as a NodeMaintenance's drainSpec.timeoutSeconds

ARGUMENT_SPEC: dict[str, Any] = {
    "name": {"type": "str", "required": True, "aliases": ["node"]},
    **drain_options(),
    "terminate_grace_period": {"type": "int"},
    "disable_eviction": {"type": "bool", "default": False},
    "bypass_pdb_after": {"type": "int", "no_log": False},
    "workers": {"type": "int", "default": 32},
    "uncordon_on_failure": {"type": "bool", "default": False},
}


CHECKS: dict[str, Any] = {}


def run(module: Any) -> None:
    """What the module does; ends in ``module.exit_json`` or ``module.fail_json`` (a K8sModule, or its stand-in in
    the action when the task runs on the controller)."""
    p = module.params
    for option in ("terminate_grace_period", "bypass_pdb_after", "timeout_seconds"):
        if p[option] is not None and p[option] < 0:
            module.fail_json(msg=f"{option} must be 0 or more, not {p[option]}.")
    if not 1 <= p["workers"] <= MAX_WORKERS:
        module.fail_json(msg=f"workers must be between 1 and {MAX_WORKERS}, not {p['workers']}.")
    completion = None
    if p["wait_for_pod_completion"] is not None:
        spec = p["wait_for_pod_completion"]
        if spec["timeout_seconds"] < 0:
            module.fail_json(msg="wait_for_pod_completion.timeout_seconds must be 0 (no limit) or more.")
        completion = WaitForCompletion(spec["pod_selector"] or None, float(spec["timeout_seconds"]))
    try:
        filters = parse_eviction_filters(p["pod_eviction_filters"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    options = DrainOptions(
        force=p["force"],
        delete_emptydir_data=p["delete_emptydir_data"],
        pod_selector=p["pod_selector"] or None,
        eviction_filters=filters,
        grace_period=p["terminate_grace_period"],
        disable_eviction=p["disable_eviction"],
        bypass_pdb_after=p["bypass_pdb_after"],
        timeout=float(p["timeout_seconds"]) if p["timeout_seconds"] > 0 else NO_LIMIT,
        concurrency=p["workers"],
        dry_run=module.check_mode,
    )
    module.set_pool_size(pool_size_for(options.concurrency))
    client = module.client
    try:
        result = drain(client, p["name"], options, uncordon_on_failure=p["uncordon_on_failure"], completion=completion)
    except DrainError as exc:
        for warning in exc.result.pop("warnings", []):
            module.warn(warning)
        module.fail_json(msg=exc.msg, **exc.result)
    except NodeopsError as exc:
        module.fail_error(exc)
    for warning in result.pop("warnings", []):
        module.warn(warning)
    if module._diff:
        result["diff"] = {
            "before": {"unschedulable": result["was_cordoned"]},
            "after": {"unschedulable": result["cordoned"]},
        }
    module.exit_json(**result)


def main() -> None:
    run(K8sModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True, **CHECKS))


if __name__ == "__main__":
    main()
