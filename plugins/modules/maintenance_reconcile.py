#!/usr/bin/python
# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: maintenance_reconcile
short_description: Run NodeMaintenance reconcile passes (schedule, cordon, wait, drain, release)
version_added: 0.1.0
author:
  - nodeops.maintenance contributors (@nodeops)
description:
  - Does what the NVIDIA Maintenance Operator does for C(NodeMaintenance) objects
    (C(maintenance.nvidia.com/v1alpha1)), one pass at a time, so that an Ansible schedule (for example an
    AWX job template every few minutes) or a loop can stand in for the operator.
  - A pass lists all Nodes and the NodeMaintenances once, schedules Pending requests within
    C(maxParallelOperations) and C(maxUnavailable) of the C(default) MaintenanceOperatorConfig, and moves every
    request in progress through its steps Scheduled, Cordon, WaitForPodCompletion, Draining and Ready. It
    records the node's initial state before it cordons, evicts pods through the Eviction API (PodDisruptionBudgets
    are respected), mirrors the requestor's C(RequestorFailed) condition, and on deletion uncordons the node only
    when the request cordoned it, it was schedulable before and nobody has cordoned it since (held while
    C(additionalRequestors) remain), then removes its finalizer. Requests Ready for longer than
    C(maxNodeMaintenanceTimeSeconds) are deleted unless annotated
    C(maintenance.nvidia.com/garbage-collector.ignore=true).
  - The cordon and the uncordon are decided on the Node as just read and written only if it has not changed
    since (its C(resourceVersion)); the cordon writes the annotation C(maintenance.nodeops.io/cordoned-by) on
    the Node in the same write, under the field manager C(nodeops-maintenance-reconcile). A release leaves the
    node cordoned when that marker no longer names the request or another field manager has set
    C(spec.unschedulable) since (for example C(kubectl uncordon) then C(kubectl cordon)); RV(left_cordoned) and a
    C(NodeLeftCordoned) event say so. A C(kubectl cordon) of a node that is already cordoned changes nothing on
    the Node and cannot be seen.
  - Every Ready reason change records a C(ConditionChanged) event; a drain that PodDisruptionBudgets or the
    drain rules block records a Warning C(EvictionBlocked) event and names the pods and budgets in
    C(status.drain); a drain attempt that times out records a Warning C(DrainTimeout) event and starts again.
  - Passes from several processes take turns through a C(coordination.k8s.io) Lease. A pass that cannot get it
    within O(lease_wait) seconds changes nothing and returns RV(busy=true).
  - A pass never blocks for long. A drain runs at most O(step_timeout) seconds in one pass and continues in the
    next; with O(until_settled=true) the module runs passes until nothing is left to move or O(settle_timeout)
    passes, and with O(progress_after) it says what it waits for while it does.
extends_documentation_fragment:
  - nodeops.maintenance.k8s_auth_options
  - nodeops.maintenance.reconcile_options
  - nodeops.maintenance.attributes
attributes:
  check_mode:
    support: full
    details: Check mode reads, takes no Lease and writes nothing; it returns the scheduling plan and, for every
      request, the next step.
  diff_mode:
    support: none
options:
  namespace:
    description:
      - Namespace of the NodeMaintenance objects to reconcile. Omit it for every namespace, as the operator does;
        limits computed from one namespace alone ignore the requests in progress elsewhere.
    type: str
  lease_name:
    description: Name of the Lease that serialises passes.
    type: str
    default: nodeops-maintenance-reconcile
  lease_namespace:
    description: Namespace of the Lease (it must exist); by default O(config_namespace).
    type: str
  lease_wait:
    description: Seconds a pass waits for the Lease before it reports RV(busy).
    type: float
    default: 30
  lease_duration:
    description:
      - Seconds the Lease is held without a renewal (it is renewed every third of that while a pass runs).
      - A pass writes only while it can show that it holds the Lease, that is for 80% of this time after its last
        renewal; a pass whose renewal fails, or that is paused for longer, stops writing and says so. Another
        process takes the Lease over once this time has passed since the last renewal.
    type: int
    default: 60
  until_settled:
    description:
      - Run passes until no request is left that a pass would move by itself (Pending requests that the limits
        hold back and Ready requests count as settled), or until O(settle_timeout).
    type: bool
    default: false
  settle_timeout:
    description: Seconds for O(until_settled). The task does not fail when it runs out; RV(settled) says so.
    type: float
    default: 300
  progress_after:
    description:
      - With O(until_settled=true), print what the passes still wait for (the requests that are not settled, with
        their phases) at least every this many seconds. The task still runs its passes to the end, and
        O(settle_timeout) counts from the first pass.
      - The module hands its passes back to the task's action every this many seconds, which prints the line and
        runs it again with O(resume). V(0) runs every pass in one call, without a line.
    type: float
    default: 0
  resume:
    description:
      - Set by the task's action itself to go on with the passes that the module handed back (see
        O(progress_after)). There is no need to set it in a task.
    type: dict
    suboptions:
      since:
        description: When the first pass began, in seconds since the epoch.
        type: float
        required: true
      errors:
        description: The errors of the last pass before the hand-back; a later pass that gets past them reports
          them in RV(recovered).
        type: list
        elements: dict
        default: []
  workers:
    description: Requests moved in parallel within a pass.
    type: int
    default: 4
notes:
  - The drain follows the module M(nodeops.maintenance.drain) with the request's C(drainSpec); its
    C(timeoutSeconds) (default 300, 0 for none) bounds one drain attempt; an attempt that times out is started
    again, and the Ready reason stays C(Draining), as upstream.
seealso:
  - module: nodeops.maintenance.maintenance_plan
  - name: NVIDIA Maintenance Operator
    description: The operator whose NodeMaintenance API and behaviour this module follows.
    link: https://github.com/Mellanox/maintenance-operator
"""

EXAMPLES = r"""
- name: One reconcile pass (for example from an AWX schedule)
  nodeops.maintenance.maintenance_reconcile:

- name: Reconcile until every request is Ready or waits for the limits, at most 30 minutes, with a line a minute
  nodeops.maintenance.maintenance_reconcile:
    until_settled: true
    settle_timeout: 1800
    progress_after: 60
  register: reconcile

- name: What would the next pass do?
  nodeops.maintenance.maintenance_reconcile:
  check_mode: true
  register: plan
"""

RETURN = r"""
scheduled:
  description: Requests moved from Pending to Scheduled (C(namespace/name)).
  returned: always
  type: list
  elements: str
  sample: [gpu-upgrades/gpu-07]
advanced:
  description: Requests whose Ready reason changed in a pass, with the reasons before and after.
  returned: always
  type: list
  elements: dict
  sample: [{name: gpu-upgrades/gpu-07, node: gpu-07, from: Pending, to: Ready}]
released:
  description: Requests whose finalizer was removed (the node given back).
  returned: always
  type: list
  elements: str
  sample: [gpu-upgrades/gpu-03]
left_cordoned:
  description:
    - Released requests whose node stays cordoned because the cordon is not, or no longer, the request's own,
      since the node was cordoned before the maintenance or someone cordoned it again during it (our
      C(maintenance.nodeops.io/cordoned-by) marker was replaced or removed, or another field manager set
      C(spec.unschedulable) since). Each also has a C(NodeLeftCordoned) event (Warning for a cordon made during
      the maintenance).
  returned: always
  type: list
  elements: dict
  sample: [{name: gpu-upgrades/gpu-03, node: gpu-03, message: "node gpu-03 was cordoned again by someone else during
      this maintenance (spec.unschedulable set by kubectl); it stays cordoned"}]
collected:
  description: Requests deleted by the garbage collection.
  returned: always
  type: list
  elements: str
  sample: []
waiting:
  description: Requests of the last pass that did not move on, with a reason code and a message (scheduler
    reasons such as V(no_slot) or V(no_budget) for Pending requests, V(waiting) with the step's message for the
    others).
  returned: always
  type: list
  elements: dict
  sample: [{name: gpu-upgrades/gpu-09, node: gpu-09, phase: Pending, reason: no_slot, message: "no free slot"}]
requests:
  description: Every request after the last pass, with its phase (the Ready reason) and conditions.
  returned: always
  type: list
  elements: dict
events:
  description: The events recorded (name, reason, message, type).
  returned: always
  type: list
  elements: dict
plan:
  description: The scheduling decision of the last pass (the keys of M(nodeops.maintenance.maintenance_plan)).
  returned: always
  type: dict
errors:
  description: Requests the last pass could not move because of an API error; the task fails when there are any.
  returned: always
  type: list
  elements: dict
recovered:
  description:
    - Errors of earlier passes of O(until_settled=true) that a later pass got past (for example the API server
      restarting); each is also a warning.
  returned: always
  type: list
  elements: dict
lease_lost:
  description: Whether the last pass stopped writing because it could no longer show that it held the Lease.
  returned: always
  type: bool
settled:
  description: Whether the last pass left nothing that a further pass would move by itself.
  returned: always
  type: bool
busy:
  description: Whether the last pass could not get the Lease (another pass held it) and did nothing.
  returned: always
  type: bool
passes:
  description: The number of passes run.
  returned: always
  type: int
  sample: 3
"""

import time
from collections.abc import Sequence
from typing import Any

from ansible_collections.nodeops.maintenance.plugins.module_utils.core.node.errors import NodeopsError
from ansible_collections.nodeops.maintenance.plugins.module_utils.engines.maintenance import (
    HANDED_BACK,
    SETTLED,
    PassReport,
    ReconcileOptions,
    Reconciler,
    reconcile_until_settled,
)
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.module import K8sModule
from ansible_collections.nodeops.maintenance.plugins.module_utils.reconcile_options import reconcile_options

NAMES_SHOWN = 5  # requests a progress line names

ARGUMENT_SPEC: dict[str, Any] = {
    "namespace": {"type": "str"},
    "lease_name": {"type": "str", "default": "nodeops-maintenance-reconcile"},
    "lease_namespace": {"type": "str"},
    "lease_wait": {"type": "float", "default": 30},
    "lease_duration": {"type": "int", "default": 60},
    "until_settled": {"type": "bool", "default": False},
    "settle_timeout": {"type": "float", "default": 300},
    "progress_after": {"type": "float", "default": 0},
    "resume": {
        "type": "dict",
        "options": {
            "since": {"type": "float", "required": True},
            "errors": {"type": "list", "elements": "dict", "default": []},
        },
    },
    **reconcile_options(),
    "workers": {"type": "int", "default": 4},
}


def merge(reports: list[PassReport], earlier_errors: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """One result from several passes: what happened in any pass, the state after the last. The errors are
    the last pass's (each pass starts again from the objects, so an earlier error that a later pass got
    past is history: it is in ``recovered``, with ``earlier_errors``, those of a pass before these)."""
    last = reports[-1]
    out = last.as_dict()
    for name in ("scheduled", "advanced", "released", "left_cordoned", "collected", "events"):
        out[name] = [item for r in reports for item in getattr(r, name)]
    out["recovered"] = [*earlier_errors, *(item for r in reports[:-1] for item in r.errors)]
    out["passes"] = len(reports)
    return out


def progress(report: PassReport, since: float, now: float, timeout: float, passes: int) -> dict[str, Any]:
    """What passes that go on wait for, for the line the task's action prints."""
    moving = report.moving
    shown = ", ".join(moving[:NAMES_SHOWN]) + (", ..." if len(moving) > NAMES_SHOWN else "")
    if report.busy:
        what = f"another pass holds the Lease ({report.holder or 'unknown holder'})"
    elif report.errors:
        what = f"the last pass failed ({report.errors[0]['error']}); trying again"
    else:
        what = f"{len(moving)} request(s) not settled yet: {shown}"
    waited = max(0.0, now - since)
    return {
        "since": since,
        "waited": round(waited, 1),
        "timeout": timeout,
        "moving": moving,
        "message": f"{passes} pass(es) so far; {what} (waiting {waited:.0f}s of at most {timeout:g}s)",
    }


def options_from(params: dict[str, Any]) -> ReconcileOptions:
    if params["progress_after"] < 0:
        raise ValueError(f"progress_after must be 0 (no line) or more (got {params['progress_after']:g}).")
    if params["workers"] < 1:
        raise ValueError("workers must be at least 1.")
    if params["step_timeout"] <= 0:
        raise ValueError("step_timeout must be more than 0 seconds.")
    if params["lease_duration"] < 3:
        raise ValueError("lease_duration must be at least 3 seconds (it is renewed every third of it).")
    return ReconcileOptions(
        namespace=params["namespace"],
        config_namespace=params["config_namespace"],
        lease_name=params["lease_name"],
        lease_namespace=params["lease_namespace"],
        lease_wait=max(0.0, params["lease_wait"]),
        lease_duration=params["lease_duration"],
        step_budget=params["step_timeout"],
        workers=params["workers"],
    )


CHECKS: dict[str, Any] = {}


def run(module: Any) -> None:
    """What the module does; ends in ``module.exit_json`` or ``module.fail_json`` (a K8sModule, or its stand-in in
    the action when the task runs on the controller)."""
    p = module.params
    try:
        options = options_from(p)
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    module.set_pool_size(options.pool_size())
    now = time.time()
    try:
        reconciler = Reconciler(module.client, options)
        outcome, since = SETTLED, now
        if module.check_mode:
            reports = [reconciler.run_pass(check_mode=True)]
        elif p["until_settled"]:
            resume = p["resume"] or {}
            since = min(resume.get("since", now), now)  # a time from the future is taken as now
            remaining = max(0.0, p["settle_timeout"] - (now - since))
            reports, outcome = reconcile_until_settled(reconciler, remaining, hand_back_after=p["progress_after"])
        else:
            reports = [reconciler.run_pass()]
    except NodeopsError as exc:
        module.fail_error(exc)
    earlier = (p["resume"] or {}).get("errors") or [] if p["until_settled"] else []
    result = merge(reports, earlier)
    for report in reports:
        for warning in report.warnings:
            module.warn(warning)
    for error in result["recovered"]:
        module.warn(f"An earlier pass failed and a later one went on: {error['name'] or 'the pass'}: {error['error']}")
    changed = any(r.changed for r in reports)
    if outcome == HANDED_BACK:  # the passes go on in the next call: this one neither fails nor ends the task
        last = reports[-1]
        result["progress"] = progress(last, since, time.time(), p["settle_timeout"], len(reports))
        result["resume"] = {"since": since, "errors": last.errors}
        module.exit_json(changed=changed, **result)
    if result["errors"]:
        module.fail_json(
            msg="Some NodeMaintenance requests could not be moved: "
            + "; ".join(f"{e['name']}: {e['error']}" for e in result["errors"]),
            changed=changed,
            **result,
        )
    module.exit_json(changed=changed, **result)


def main() -> None:
    run(K8sModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True, **CHECKS))


if __name__ == "__main__":
    main()
