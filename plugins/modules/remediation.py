#!/usr/bin/python
# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: remediation
short_description: Self Node Remediation manager passes, medik8s-compatible
version_added: 0.1.0
author:
  - nodeops.maintenance contributors (@nodeops)
description:
  - Acts on C(SelfNodeRemediation) objects (C(self-node-remediation.medik8s.io/v1alpha1)) as the manager of medik8s Self
    Node Remediation does, usually those M(nodeops.maintenance.node_health) created.
  - For each object, the node gets the C(remediation.medik8s.io/self-node-remediation:NoSchedule) taint, the object the
    finalizer C(self-node-remediation.medik8s.io/snr-finalizer) and C(status.timeAssumedRebooted) = now + the safe time
    (from the C(SelfNodeRemediationConfig), the number of worker nodes and the node's
    C(self-node-remediation.medik8s.io/watchdog-timeout) annotation; see the C(nodeops.maintenance.safe_reboot_time)
    filter). The phase becomes C(Pre-Reboot-Completed).
  - Nothing is recovered before that time. Then (C(Reboot-Completed)) the strategy runs. C(ResourceDeletion)
    force-deletes the node's pods and deletes its VolumeAttachments. C(OutOfServiceTaint) adds
    C(node.kubernetes.io/out-of-service=nodeshutdown:NoExecute), waits until no pod of the node is terminating or
    about to be evicted by the taint (a pod that tolerates it stays and does not hold the remediation), deletes the
    VolumeAttachments left, and removes the taint once the node is Ready again. C(Automatic) is C(OutOfServiceTaint) on
    Kubernetes 1.28 or newer, else C(ResourceDeletion).
  - When done the phase is C(Fencing-Completed) with C(Succeeded=True) (reason C(RemediationFinishedSuccessfully)). When
    the object is deleted (by M(nodeops.maintenance.node_health) once the node is healthy) the taints and the finalizer
    go.
  - Nothing is tainted, deleted or marked rebooted for a node whose agent has not shown it can fence the node; the
    node must carry the annotation C(is-reboot-capable.self-node-remediation.medik8s.io) with the value C("true") (an
    annotation, not a label; a label of that name is ignored), which the node agent of this collection (or the medik8s
    agent) writes on its own Node. Without it the object gets C(Processing=False) with reason
    C(NodeNotRebootCapable), a Warning event C(RemediationCannotStart), and the result says why; however long the
    run waits, no pod is deleted. This is checked before every step, so a node that stops being capable is held.
    A published C(self-node-remediation.medik8s.io/watchdog-timeout) that is not a number of seconds makes the node
    not capable too (the safe time could not count it); a missing one, or 0, counts as 60 s.
  - Nothing is done for a node under maintenance (a C(NodeMaintenance) in progress) or labelled
    C(remediation.medik8s.io/exclude-from-remediation=true), nor for an object the C(NodeHealthCheck) marked timed out.
  - Each run makes one pass; with O(settle_timeout) it keeps passing while an object waits for something due within it.
    Progress is kept in the objects, so the next run continues where this one stopped.
  - A run acts on a node only while it holds that node's C(coordination.k8s.io) Lease C(nodeops-remediation-<node>) (in
    O(config_namespace), else the object's namespace), and writes only while it can show it holds it; a node whose Lease
    another run holds is left to that run (code C(Busy)). With O(settle_timeout) the run waits for that Lease until its
    holder gives it up or its hold runs out (a run that died holding it never gives it up; the Lease lasts 60 s after
    its last renewal), then goes on with the node. The credential needs C(get), C(create) and C(update) on Leases
    there.
extends_documentation_fragment:
  - nodeops.maintenance.k8s_auth_options
  - nodeops.maintenance.attributes
attributes:
  check_mode:
    support: full
    details: In check mode each object goes through the steps the run would take now, up to its first wait, against
      the objects held in memory (read from the cluster once); the result is what the run would write (phase,
      conditions, taints, deletions, events) and nothing is written. Offline mode is the same run on the objects
      given.
  diff_mode:
    support: none
options:
  namespace:
    description:
      - Namespace of the C(SelfNodeRemediation) objects; all namespaces when omitted.
    type: str
  name:
    description:
      - Only the C(SelfNodeRemediation) of this name (needs O(namespace)).
    type: str
  config_namespace:
    description:
      - Namespace of the C(SelfNodeRemediationConfig) C(self-node-remediation-config); by default each object's own
        namespace. Without a config an object gets C(Disabled=True) (C(ConfigurationNotFound)) and nothing is done.
      - When set, only C(SelfNodeRemediation) objects of this namespace are acted on; objects of other namespaces
        are ignored (listed in RV(ignored), with a warning), so that whoever may create such objects elsewhere
        cannot fence a node. Set it in production.
    type: str
  watchdog_timeout:
    description:
      - Watchdog timeout in seconds to count in the safe time when it is longer than the one the node's agent published
        (annotation C(self-node-remediation.medik8s.io/watchdog-timeout)); it can lengthen the safe time, never shorten
        it. 0 or less, like a missing annotation, counts as unknown (60 s).
    type: float
  settle_timeout:
    description:
      - Seconds this run may keep passing while an object waits (the safe time, pods going away).
      - V(0) makes one pass and returns; the next run continues.
    type: float
    default: 0
  progress_after:
    description:
      - With O(settle_timeout), print what the objects wait for (each one's phase and when its next step is due) at
        least every this many seconds. The task still waits to the end, and O(settle_timeout) counts from its start.
      - The module hands its wait back to the task's action every this many seconds, which prints the line and runs
        it again with O(resume). V(0) waits in one call, without a line.
    type: float
    default: 0
  resume:
    description:
      - Set by the task's action itself to go on with a wait that the module handed back (see O(progress_after)).
        There is no need to set it in a task.
    type: dict
    suboptions:
      since:
        description: When the task's first run began, in seconds since the epoch.
        type: float
        required: true
      emitted:
        description: The events the task's earlier calls recorded (namespace, name, reason, message), each once
          per task.
        type: list
        elements: dict
        default: []
  events:
    description:
      - Record events on the C(SelfNodeRemediation) objects.
    type: bool
    default: true
  remediations:
    description:
      - Offline mode. The C(SelfNodeRemediation) objects, as C(kubectl get selfnoderemediations -A -o json) prints them
        in C(items). The result says, for each, the next step a pass would take (what a check-mode run reports),
        the strategy that runs and the time left to its safe time; nothing is read from or written to a cluster.
      - Needs O(kubernetes_version); the other objects come from O(nodes), O(pods), O(volume_attachments),
        O(node_maintenances) and O(configs).
    type: list
    elements: dict
  nodes:
    description:
      - Offline mode. Every Node object (the worker nodes count in the safe time).
    type: list
    elements: dict
  pods:
    description:
      - Offline mode. The pods (those whose C(spec.nodeName) is a remediated node are the ones to recover).
    type: list
    elements: dict
  volume_attachments:
    description:
      - Offline mode. The C(VolumeAttachment) objects.
    type: list
    elements: dict
  node_maintenances:
    description:
      - Offline mode. The C(NodeMaintenance) objects; the nodes of those in progress are under maintenance.
    type: list
    elements: dict
  configs:
    description:
      - Offline mode. The C(SelfNodeRemediationConfig) objects; the one named C(self-node-remediation-config) in
        O(config_namespace), else in each object's namespace, is its configuration.
    type: list
    elements: dict
  snapshot:
    description:
      - Offline mode from files, read on the host the task runs on, as C(kubectl get ... -o json) (or C(-o yaml))
        saves them; each file holds one object or a List of them, sorted by kind into O(remediations), O(nodes),
        O(pods), O(volume_attachments), O(node_maintenances) and O(configs).
      - Mutually exclusive with those options.
    type: list
    elements: path
  kubernetes_version:
    description:
      - Offline mode. The cluster's version as C(/version) gives it in C(gitVersion) (V(v1.30.2)); the strategy
        V(Automatic) depends on it.
    type: str
  now:
    description:
      - Offline mode. The time of the pass, RFC 3339 (V(2026-01-02T03:04:05Z)); by default the current time.
    type: str
notes:
  - The node itself must reboot within the safe time (the node agent of this collection, or the medik8s agent); this
    module only does the bookkeeping and the recovery of the workloads, and only for nodes whose agent published that
    it can.
seealso:
  - module: nodeops.maintenance.node_health
  - name: medik8s Self Node Remediation
    description: The operator whose objects and rules this module follows.
    link: https://github.com/medik8s/self-node-remediation
"""

EXAMPLES = r"""
- name: One pass over every SelfNodeRemediation
  nodeops.maintenance.remediation:
    config_namespace: nodeops-maintenance

- name: Remediate and wait up to 5 minutes for the safe time and the recovery, with a line a minute
  nodeops.maintenance.remediation:
    namespace: nodeops-maintenance
    settle_timeout: 300
    progress_after: 60
  register: remediation

- name: What the next step would be
  nodeops.maintenance.remediation:
    namespace: nodeops-maintenance
  check_mode: true

# cluster.json: kubectl get selfnoderemediations,selfnoderemediationconfigs,nodes,pods,volumeattachments -A -o json
- name: What-if, offline, from objects saved with kubectl
  nodeops.maintenance.remediation:
    snapshot:
      - cluster.json
    kubernetes_version: v1.30.2
    config_namespace: nodeops-maintenance
    now: "2026-01-02T03:04:05Z"
"""

RETURN = r"""
remediations:
  description: One entry per C(SelfNodeRemediation) object, sorted by namespace and name.
  returned: always
  type: list
  elements: dict
  contains:
    namespace:
      description: Namespace of the object.
      type: str
    name:
      description: Name of the object.
      type: str
    node:
      description: The node it remediates.
      type: str
    strategy:
      description: The strategy that runs (C(ResourceDeletion) or C(OutOfServiceTaint)).
      type: str
    phase_before:
      description: The phase when the run started.
      type: str
    phase:
      description: The phase after the run (C(Deleted) once the object is gone).
      type: str
    code:
      description: What the last step was about (Fencing, WaitingSafeTime, Recovering, Completed, CleaningUp,
        UnderMaintenance, Excluded, NotRebootCapable, StoppedByNHC, NodeNotFound, Disabled, Gone, and Busy when another
        run holds the node's Lease).
      type: str
    reason:
      description: The last step's reason, for people.
      type: str
    time_assumed_rebooted:
      description: When the node can be assumed rebooted; nothing is recovered before.
      type: str
    safe_time:
      description: The parts of the safe time, when it was computed in this run.
      type: dict
    wait_until:
      description: When the object has something to do next; null when nothing is pending.
      type: str
    changed:
      description: Whether anything was (or in check mode would be) written for it.
      type: bool
    pods_deleted:
      description: Pods this run force-deleted (or would). Each deletion carries the UID the pod was listed
        with, so a pod re-created under the same name meanwhile is never deleted.
      type: list
      elements: str
    pods_already_gone:
      description: Pods to delete that were gone, or replaced by a new pod of the same name (left alone),
        before this run's deletion reached them; not deleted by this run.
      type: list
      elements: str
    attachments_deleted:
      description: VolumeAttachments deleted (or that would be).
      type: list
      elements: str
    taints_added:
      description: Taint keys added to the node.
      type: list
      elements: str
    taints_removed:
      description: Taint keys removed from the node.
      type: list
      elements: str
    events:
      description: Events recorded (or that would be), each with C(type), C(reason), C(message) and C(on), the kind
        of object it is recorded on (C(SelfNodeRemediation) or C(Node)). The reasons are those of medik8s Self Node
        Remediation (C(RemediationStarted), C(AddFinalizer), C(AddNoScheduleTaint), C(UpdateTimeAssumedRebooted),
        C(NodeReboot), C(AddOutOfService), C(DeleteResources), C(RemoveOutOfService), C(RemoveNoScheduleTaint),
        C(RemoveFinalizer), C(RemediationFinished), C(OutOfServiceTimestampExpired), ...).
      type: list
      elements: dict
    conditions:
      description: The object's status conditions after the run (or as the run would leave them).
      type: list
      elements: dict
    taints:
      description: The node's taint keys after the run (or as the run would leave them).
      type: list
      elements: str
    steps:
      description: The steps taken, in order.
      type: list
      elements: dict
    rereads:
      description: Writes refused with Conflict because the object or its node changed after the step was decided
        (another run, another writer). Each time the rest of that step was dropped, both were read again and the
        step decided again from what they hold now.
      type: int
    seconds_to_safe_time:
      description: Seconds from the end of the run (offline, from O(now)) to RV(remediations[].time_assumed_rebooted);
        0 once it has passed, null while not known.
      type: float
  sample:
    - namespace: nodeops-maintenance
      name: worker-3
      node: worker-3
      strategy: OutOfServiceTaint
      phase_before: Pre-Reboot-Completed
      phase: Fencing-Completed
      code: Completed
      time_assumed_rebooted: "2026-01-02T03:07:05Z"
ignored:
  description: Names (namespace/name) of the objects outside O(config_namespace), left alone.
  returned: always
  type: list
  elements: str
  sample: []
waiting:
  description: Names (namespace/name) of the objects still waiting for something.
  returned: always
  type: list
  elements: str
  sample: [nodeops-maintenance/worker-3]
"""

import time
from typing import Any

from ansible_collections.nodeops.maintenance.plugins.module_utils.core import strict
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.node.errors import NodeopsError
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.remediation.health import parse_time
from ansible_collections.nodeops.maintenance.plugins.module_utils.engines.remediation import (
    Outcome,
    RemediationManager,
    offline_outcomes,
)
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s import snapshot
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.module import K8sModule

NAMES_SHOWN = 5  # objects a progress line names

OFFLINE_KINDS = {
    "remediations": "SelfNodeRemediation",
    "nodes": "Node",
    "pods": "Pod",
    "volume_attachments": "VolumeAttachment",
    "node_maintenances": "NodeMaintenance",
    "configs": "SelfNodeRemediationConfig",
}


def _offline(module: K8sModule, params: dict[str, Any]) -> None:
    """The offline what-if: the run on the objects given as data (options or snapshot files); exits."""
    try:
        if params["snapshot"] is not None:
            given = [option for option in OFFLINE_KINDS if params[option]]
            if given:
                module.fail_json(msg=f"snapshot and {given[0]} are mutually exclusive: the snapshot holds the objects.")
            saved = snapshot.read(params["snapshot"])
            strict.check_snapshot(saved)
            params.update({option: saved.get(kind, []) for option, kind in OFFLINE_KINDS.items()})
        else:
            for option in ("remediations", "configs", "node_maintenances"):
                for index, obj in enumerate(params[option] or []):
                    strict.check_spec(OFFLINE_KINDS[option], obj.get("spec"), f"{option}[{index}].spec")
        if not params["kubernetes_version"]:
            module.fail_json(
                msg="kubernetes_version is required offline (the cluster's gitVersion, such as v1.30.2): the "
                "strategy Automatic depends on it."
            )
        now = parse_time(params["now"], "now") if params["now"] else None  # None: the engine reads the clock
        outcomes, ignored = offline_outcomes(
            params["remediations"] or [],
            params["nodes"] or [],
            params["pods"] or [],
            params["volume_attachments"] or [],
            params["configs"] or [],
            params["kubernetes_version"],
            now,
            params["node_maintenances"] or [],
            params["watchdog_timeout"],
            params["config_namespace"],
        )
    except NodeopsError as exc:  # the data cannot be used (times, strategy, snapshot, ...)
        module.fail_error(exc)
    module.exit_json(
        changed=False,
        remediations=[o.as_dict() for o in outcomes],
        waiting=[f"{o.namespace}/{o.name}" for o in outcomes if o.wait_until is not None],
        ignored=ignored,
    )


ARGUMENT_SPEC: dict[str, Any] = {
    "namespace": {"type": "str"},
    "name": {"type": "str"},
    "config_namespace": {"type": "str"},
    "watchdog_timeout": {"type": "float"},
    "settle_timeout": {"type": "float", "default": 0},
    "progress_after": {"type": "float", "default": 0},
    "resume": {
        "type": "dict",
        "options": {
            "since": {"type": "float", "required": True},
            "emitted": {"type": "list", "elements": "dict", "default": []},
        },
    },
    "events": {"type": "bool", "default": True},
    **{option: {"type": "list", "elements": "dict"} for option in OFFLINE_KINDS},
    "snapshot": {"type": "list", "elements": "path"},
    "kubernetes_version": {"type": "str"},
    "now": {"type": "str"},
}
CHECKS: dict[str, Any] = {
    "required_by": {"name": "namespace"},
}


def run(module: Any) -> None:
    """What the module does; ends in ``module.exit_json`` or ``module.fail_json`` (a K8sModule, or its stand-in in
    the action when the task runs on the controller)."""
    # a copy: a snapshot's objects fill it, and must not be echoed back as the task's arguments
    params = dict(module.params)
    if params["remediations"] is not None or params["snapshot"] is not None:
        _offline(module, params)
    for offline_only in (*[o for o in OFFLINE_KINDS if o != "remediations"], "kubernetes_version", "now"):
        if params[offline_only] is not None:
            module.fail_json(
                msg=f"{offline_only} is only for offline mode (with remediations or snapshot); a live run reads "
                "the cluster."
            )
    if params["settle_timeout"] < 0:
        module.fail_json(msg="settle_timeout: give 0 or more seconds.")
    if params["progress_after"] < 0:
        module.fail_json(msg="progress_after: give 0 (no line) or more seconds.")
    now = time.time()
    since = min(float((params["resume"] or {}).get("since", now)), now)  # a time from the future is taken as now
    manager = RemediationManager(
        module.client,
        check_mode=module.check_mode,
        emit_events=params["events"],
        config_namespace=params["config_namespace"],
        watchdog_timeout=params["watchdog_timeout"],
    )
    manager.emitted = (params["resume"] or {}).get("emitted") or []  # each event once per task, over its calls
    try:
        outcomes = manager.run(
            params["namespace"],
            params["name"],
            max(0.0, params["settle_timeout"] - (now - since)),
            hand_back_after=params["progress_after"],
        )
    except NodeopsError as exc:  # a K8sError with its reason and status, or a configuration it cannot use
        for warning in manager.warnings:
            module.warn(warning)
        module.fail_error(exc)
    result: dict[str, Any] = {
        "changed": any(o.changed for o in outcomes),
        "remediations": [o.as_dict() for o in outcomes],
        "waiting": [f"{o.namespace}/{o.name}" for o in outcomes if o.wait_until is not None and o.phase != "Deleted"],
        "ignored": sorted(manager.ignored),
    }
    if manager.ignored:
        module.warn(
            f"SelfNodeRemediation objects outside config_namespace {params['config_namespace']} were ignored (only"
            f" objects in that namespace may fence a node): {', '.join(sorted(manager.ignored))}"
        )
    for warning in manager.warnings:
        module.warn(warning)
    if manager.handed_back:  # the wait goes on in the next call of the task's action
        result["progress"] = progress(outcomes, since, time.time(), params["settle_timeout"])
        result["resume"] = {"since": since, "emitted": manager.emitted}
    module.exit_json(**result)


def progress(outcomes: list[Outcome], since: float, now: float, timeout: float) -> dict[str, Any]:
    """What a wait handed back waits for, for the line the task's action prints."""
    waiting = [o for o in outcomes if o.wait_until is not None and o.phase != "Deleted"]
    shown = [
        f"{o.namespace}/{o.name} on {o.node} ({o.phase or 'new'}, {o.code or 'waiting'}, next look in "
        f"{max(0.0, (o.wait_until or now) - now):.0f}s)"
        for o in waiting[:NAMES_SHOWN]
    ]
    if len(waiting) > NAMES_SHOWN:
        shown.append("...")
    waited = max(0.0, now - since)
    return {
        "since": since,
        "waited": round(waited, 1),
        "timeout": timeout,
        "message": f"{len(waiting)} remediation(s) waiting: {'; '.join(shown)} "
        f"(waiting {waited:.0f}s of at most {timeout:g}s)",
    }


def main() -> None:
    run(K8sModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True, **CHECKS))


if __name__ == "__main__":
    main()
