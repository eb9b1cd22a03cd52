#!/usr/bin/python
# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: node_health
short_description: One Node Health Check pass, medik8s-compatible
version_added: 0.1.0
author:
  - nodeops.maintenance contributors (@nodeops)
description:
  - Evaluates a C(NodeHealthCheck) (C(remediation.medik8s.io/v1alpha1)) as medik8s Node Health Check does, and acts on
    it once.
  - A node picked by the selector is unhealthy when one of C(unhealthyConditions) has had its status for strictly longer
    than its duration. It gets a remediation object (for example a C(SelfNodeRemediation)) made from the template, with
    an owner reference to the C(NodeHealthCheck), the annotations C(remediation.medik8s.io/node-name) and
    C(remediation.medik8s.io/template-name) and the label C(app.kubernetes.io/part-of=node-healthcheck-controller).
  - No remediation is created while fewer than C(minHealthy) nodes are healthy (or more than C(maxUnhealthy) are not),
    while C(pauseRequests) is set, for a node under maintenance (a C(NodeMaintenance) in progress), for a node labelled
    C(remediation.medik8s.io/exclude-from-remediation=true), or for a second control-plane node. While paused or
    disabled the status keeps what it said of the nodes as the last other pass left it, as medik8s does.
  - The remediation objects of a node healthy again are deleted after C(healthyDelay).
  - A new remediation takes the node's Lease C(node-<node>) in O(node_lease_namespace), held as
    C(NodeHealthCheck-<name>) for the remediation's timeout (10 minutes for a single template) plus one minute; a
    node whose Lease someone else holds (a node maintenance holds it as C(node-maintenance)) is skipped with the
    code C(SkippedNodeLease) and looked at again in a minute. A pass renews the Lease of a remediation in progress
    once it runs out within the remediation's timeout, so run passes at least every 10 minutes; as in medik8s, a
    pass that may not remediate (paused, too few healthy nodes, storm cooldown) leaves Leases alone. Once
    its C(acquireTime) is three times the timeout past (plus the timeouts of earlier escalation steps), the
    remediation is overdue. The Lease is then given up and the remediation object annotated
    C(remediation.medik8s.io/nhc-timed-out), so a single template's remediation times out after 30 minutes. The
    Lease of a node healthy again is given up.
  - With C(stormCooldownDuration) set, a pass that finds too few healthy nodes starts a storm (condition
    C(StormActive)); once enough nodes are healthy again new remediations still wait that long (condition
    C(StormCooldownActive), from its C(lastTransitionTime)), and a new shortfall starts the wait over. The events
    C(StormRecoveryStarted), C(StormRecoveryCooldownStarted) and C(StormRecoveryEnded) mark the changes;
    storm recovery is looked at only in a pass that finds an unhealthy node, and not while paused (as medik8s does).
  - The C(NodeHealthCheck) status (C(observedNodes), C(healthyNodes), C(unhealthyNodes), C(inFlightRemediations),
    C(phase), C(reason), C(conditions)) is updated only when it changed, conditionally on its resourceVersion. Events
    C(DetectedUnhealthy), C(RemediationCreated), C(RemediationRemoved), C(RemediationSkipped) and the storm events are
    recorded on it.
  - Every write is conditional on the read it was decided on. A deletion carries the uid and resourceVersion of the
    remediation object as listed, the annotations (on remediation objects and on the Node) and the status carry the
    resourceVersion as read, and a create by name fails if the name is taken. When a write is refused because the
    object changed, was replaced or was created meanwhile, the rest of that evaluation's writes are dropped, everything
    is read again and the pass decides again (at most 5 times, then it fails naming what kept changing).
  - A pass that writes holds the C(coordination.k8s.io) Lease C(nodeops-health-<name>) while it reads, decides and
    writes, so two passes for one C(NodeHealthCheck) never act at once (they would each create a remediation object
    for the same node). The credential needs C(get), C(create) and C(update) on Leases in O(lease_namespace), and
    C(list), C(create), C(update) and C(delete) on Leases in O(node_lease_namespace) (and C(create) on Namespaces
    while that namespace is missing).
  - Offline, with O(nodes) given, nothing is read from or written to a cluster; the result is a what-if evaluation.
extends_documentation_fragment:
  - nodeops.maintenance.k8s_auth_options
  - nodeops.maintenance.attributes
attributes:
  check_mode:
    support: full
    details: In check mode the cluster is read and nothing is written; the result says what would be created and
      deleted.
  diff_mode:
    support: none
options:
  name:
    description:
      - Name of the C(NodeHealthCheck) (cluster-scoped) to evaluate and act on.
      - One of O(name) and O(spec) is required; they are mutually exclusive, except offline (with O(nodes)), where
        O(name) only names the C(NodeHealthCheck) as the holder of its node Leases (see O(leases)).
    type: str
  spec:
    description:
      - A C(NodeHealthCheck) spec given as data, as in the object (C(selector), C(unhealthyConditions), C(minHealthy) or
        C(maxUnhealthy), C(remediationTemplate) or C(escalatingRemediations), C(healthyDelay), C(pauseRequests)).
      - Without O(name) the evaluation writes nothing; with O(nodes) it needs no cluster at all.
    type: dict
  nodes:
    description:
      - Offline mode. Every Node object, as C(kubectl get nodes -o json) prints them in C(items).
      - Needs O(spec); the cluster is not contacted.
    type: list
    elements: dict
  remediations:
    description:
      - Offline mode. The remediation objects of the C(NodeHealthCheck) (for example its C(SelfNodeRemediation)
        objects).
    type: list
    elements: dict
    default: []
  node_maintenances:
    description:
      - Offline mode. The C(NodeMaintenance) objects; the nodes of those in progress are under maintenance.
    type: list
    elements: dict
    default: []
  now:
    description:
      - Offline mode. The time of the evaluation, RFC 3339 (V(2026-01-02T03:04:05Z)); by default the current time.
    type: str
  status:
    description:
      - Offline mode. The C(status) of the C(NodeHealthCheck) as read. Its C(conditions) carry the state of storm
        recovery (C(StormActive), C(StormCooldownActive)), and the result then holds RV(status), the status the pass
        would write.
      - A remediation object the pass would create is shown in it as made at O(now), named after its node (the API
        server gives a generated name and the UID).
    type: dict
  leases:
    description:
      - Offline mode. The C(Lease) objects of the node Lease namespace (C(kubectl get leases -n medik8s-leases -o json)
        prints them in C(items)); those named C(node-<node>) are the node Leases. Without it no node Lease is held.
    type: list
    elements: dict
  snapshot:
    description:
      - Offline mode from files, read on the host the task runs on, as C(kubectl get ... -o json) (or C(-o yaml))
        saves them; each file holds one object or a List of them.
      - The C(NodeHealthCheck) (the one named O(name), or the only one) gives the spec, the status and the name,
        unless O(spec) is given. Its C(Node), C(NodeMaintenance) and C(Lease) objects, and the remediation objects
        of the template kinds owned by that C(NodeHealthCheck), are the rest.
      - For example C(kubectl get nodehealthchecks,nodes,selfnoderemediations,nodemaintenances,leases -A -o json).
      - Mutually exclusive with O(nodes), O(remediations), O(node_maintenances), O(leases) and O(status).
    type: list
    elements: path
  node_lease_namespace:
    description:
      - Namespace of the per-node Leases the medik8s operators share (created when missing).
    type: str
    default: medik8s-leases
  lease_namespace:
    description:
      - Namespace of the pass's Lease. By default the namespace of the first remediation template (where the
        remediation objects are created), else V(default).
    type: str
  lease_wait:
    description:
      - Seconds to wait for the Lease while another pass holds it. The default outlasts the Lease of a pass that died
        holding it (60 s after its last renewal). When the wait ends first the task fails and nothing is written.
    type: float
    default: 65
  events:
    description:
      - Record events on the C(NodeHealthCheck).
    type: bool
    default: true
notes:
  - Run it periodically (an AWX schedule, or the loop mode of C(playbooks/remediate.yml)) together with
    M(nodeops.maintenance.remediation); C(requeue_after) says when the next pass has something to look at.
seealso:
  - module: nodeops.maintenance.remediation
  - name: medik8s Node Health Check
    description: The operator whose objects and rules this module follows.
    link: https://github.com/medik8s/node-healthcheck-operator
"""

EXAMPLES = r"""
- name: One pass of the NodeHealthCheck workers
  nodeops.maintenance.node_health:
    name: workers
  register: health

- name: What would be remediated, without writing
  nodeops.maintenance.node_health:
    name: workers
  check_mode: true

- name: What-if, offline, from saved objects
  nodeops.maintenance.node_health:
    spec:
      selector:
        matchExpressions:
          - key: node-role.kubernetes.io/worker
            operator: Exists
      minHealthy: 51%
      remediationTemplate:
        apiVersion: self-node-remediation.medik8s.io/v1alpha1
        kind: SelfNodeRemediationTemplate
        namespace: nodeops-maintenance
        name: self-node-remediation-automatic-strategy-template
    nodes: "{{ (lookup('ansible.builtin.file', 'nodes.json') | from_json)['items'] }}"
    now: "2026-01-02T03:04:05Z"
"""

RETURN = r"""
unhealthy_nodes:
  description: Nodes whose listed conditions hold for longer than their duration.
  returned: always
  type: list
  elements: str
  sample: [worker-3]
remediated_nodes:
  description: Nodes that got (or in check mode and offline would get) a new remediation object in this pass.
  returned: always
  type: list
  elements: str
  sample: [worker-3]
not_remediated:
  description: Unhealthy nodes left alone in this pass, with the decision code and why.
  returned: always
  type: dict
  sample:
    worker-4:
      code: SkippedMinHealthy
      reason: "unhealthy (Ready=Unknown); only 1 of 3 nodes are healthy and 2 are needed before remediating"
healthy:
  description: Observed nodes that count healthy (no listed condition holds and no remediation object left).
  returned: always
  type: int
  sample: 2
observed:
  description: Nodes the selector picks.
  returned: always
  type: int
  sample: 3
min_healthy:
  description: Healthy nodes needed before remediating (from C(minHealthy) or C(maxUnhealthy), percentages rounded up).
  returned: always
  type: int
  sample: 2
min_healthy_met:
  description: Whether C(healthy) reaches C(min_healthy).
  returned: always
  type: bool
  sample: true
phase:
  description: The phase of the C(NodeHealthCheck) (Disabled, Paused, Remediating or Enabled).
  returned: always
  type: str
  sample: Remediating
requeue_after:
  description: Seconds after which a pass has something new to look at; null when nothing is pending.
  returned: always
  type: float
  sample: 31.0
created:
  description: Remediation objects created (or that would be).
  returned: always
  type: list
  elements: dict
  sample: [{node: worker-3, kind: SelfNodeRemediation, namespace: nodeops-maintenance, name: worker-3}]
deleted:
  description: Remediation objects deleted (or that would be) because their node is healthy again or gone; one that
    was gone already when the pass deleted it (someone else deleted it first) is not listed.
  returned: always
  type: list
  elements: dict
  sample: []
marked:
  description: Remediation objects annotated as timed out or healthy-delayed.
  returned: always
  type: list
  elements: dict
  sample: []
leases:
  description:
    - Node Leases taken (C(take), also a takeover of one that ran out), renewed (C(renew)) or given up (C(release)).
  returned: always
  type: list
  elements: dict
  sample: [{node: worker-3, lease: node-worker-3, action: take, duration_seconds: 660}]
decisions:
  description:
    - One entry per observed node, with its decision code and the reason.
    - C(unhealthy_seconds) is how long the longest-held listed condition has held on a node where one holds past its
      duration (null otherwise, and when a condition has no transition time).
  returned: always
  type: list
  elements: dict
  sample: [{node: worker-3, code: Remediate, reason: "unhealthy (Ready=Unknown); remediating with ...",
            control_plane: false, matched_conditions: [Ready=Unknown], remediations: [], unhealthy_seconds: 412.5}]
status:
  description:
    - The C(NodeHealthCheck) status after the pass (in check mode, the status it would write).
    - Offline, the status the pass would write over the O(status) given.
  returned: when O(name) is given, or offline with O(status)
  type: dict
  sample: {observedNodes: 3, healthyNodes: 2, phase: Remediating}
events:
  description: Events recorded (or that would be) on the C(NodeHealthCheck).
  returned: always
  type: list
  elements: dict
  sample: [{reason: RemediationCreated, type: Normal, message: Created remediation for node worker-3}]
rereads:
  description:
    - Writes refused in this pass because what they were decided on changed after it was read (another pass,
      another writer) or a remediation object of that name was made meanwhile.
    - Each time the rest of that evaluation's writes were dropped, everything was read again and the pass decided
      again; what was written before is part of that read and stays in C(created), C(deleted) and C(marked).
    - 0 offline and in check mode.
  returned: always
  type: int
  sample: 0
"""

from typing import Any

from ansible_collections.nodeops.maintenance.plugins.module_utils.core import strict
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.node.errors import NodeopsError
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.remediation.health import parse_time
from ansible_collections.nodeops.maintenance.plugins.module_utils.engines.health import (
    HealthInputError,
    HealthPass,
    PassResult,
    offline_pass,
    owned_by,
    skipped,
    under_maintenance,
)
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s import snapshot
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.errors import K8sError
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.module import K8sModule


def _result(result: PassResult) -> dict[str, Any]:
    evaluation = result.evaluation
    out: dict[str, Any] = {
        "changed": result.changed,
        "unhealthy_nodes": list(evaluation.unhealthy_nodes),
        "remediated_nodes": [c["node"] for c in result.created],
        "not_remediated": skipped(evaluation),
        "healthy": evaluation.healthy,
        "observed": evaluation.observed,
        "min_healthy": evaluation.min_healthy,
        "min_healthy_met": evaluation.min_healthy_met,
        "phase": result.status["phase"] if result.status else ("Disabled" if result.disabled else evaluation.phase),
        "requeue_after": evaluation.requeue_after,
        "created": result.created,
        "deleted": result.deleted,
        "marked": result.marked,
        "leases": result.leases,
        "decisions": [d.as_dict() for d in evaluation.decisions],
        "events": result.events,
        "rereads": result.rereads,
    }
    if result.status is not None:
        out["status"] = result.status
    return out


def _from_snapshot(params: dict[str, Any]) -> None:
    """Fill the offline options from the snapshot files: the NodeHealthCheck (O(name), or the only one) gives
    spec, status and name unless O(spec) is given; Nodes, its remediation objects (the kinds of its templates,
    owned by it), NodeMaintenances and Leases give the rest."""
    for option in ("nodes", "remediations", "node_maintenances", "leases", "status"):
        if params[option]:
            raise HealthInputError(f"snapshot and {option} are mutually exclusive: the snapshot holds the objects.")
    saved = snapshot.read(params["snapshot"])
    strict.check_snapshot(saved)
    checks = saved.get("NodeHealthCheck", [])
    nhc: dict[str, Any] = {}
    if params["spec"] is None:
        wanted = [c for c in checks if not params["name"] or (c.get("metadata") or {}).get("name") == params["name"]]
        if len(wanted) != 1:
            found = ", ".join(sorted(str((c.get("metadata") or {}).get("name")) for c in checks)) or "none"
            raise HealthInputError(
                "snapshot: give spec, or a snapshot with the NodeHealthCheck to evaluate"
                + (f" named {params['name']}" if params["name"] else " (or name to pick one)")
                + f"; NodeHealthChecks in the snapshot: {found}."
            )
        nhc = wanted[0]
        params["spec"] = nhc.get("spec") or {}
        params["status"] = nhc.get("status") or {}
        params["name"] = (nhc.get("metadata") or {}).get("name")
    spec = params["spec"]
    refs = [spec.get("remediationTemplate") or {}]
    refs += [(step or {}).get("remediationTemplate") or {} for step in spec.get("escalatingRemediations") or []]
    kinds = {str(ref["kind"])[: -len("Template")] for ref in refs if str(ref.get("kind", "")).endswith("Template")}
    params["nodes"] = saved.get("Node", [])
    params["remediations"] = [
        obj for kind in sorted(kinds) for obj in saved.get(kind, []) if not nhc or owned_by(obj, nhc)
    ]
    params["node_maintenances"] = saved.get("NodeMaintenance", [])
    # only the node Lease namespace's: kube-node-lease holds a Lease named after each node, too
    namespace = params["node_lease_namespace"]
    params["leases"] = [
        obj for obj in saved.get("Lease", []) if (obj.get("metadata") or {}).get("namespace") == namespace
    ]


ARGUMENT_SPEC: dict[str, Any] = {
    "name": {"type": "str"},
    "spec": {"type": "dict"},
    "nodes": {"type": "list", "elements": "dict"},
    "remediations": {"type": "list", "elements": "dict", "default": []},
    "node_maintenances": {"type": "list", "elements": "dict", "default": []},
    "now": {"type": "str"},
    "status": {"type": "dict"},
    "leases": {"type": "list", "elements": "dict"},
    "snapshot": {"type": "list", "elements": "path"},
    "events": {"type": "bool", "default": True},
    "lease_namespace": {"type": "str"},
    "lease_wait": {"type": "float", "default": 65.0},
    "node_lease_namespace": {"type": "str", "default": "medik8s-leases"},
}
CHECKS: dict[str, Any] = {
    "required_one_of": [("name", "spec", "snapshot")],
}


def run(module: Any) -> None:
    """What the module does; ends in ``module.exit_json`` or ``module.fail_json`` (a K8sModule, or its stand-in in
    the action when the task runs on the controller)."""
    # a copy: a snapshot's objects fill it, and must not be echoed back as the task's arguments
    params = dict(module.params)
    warnings: list[str] = []
    try:
        if params["snapshot"] is not None:
            _from_snapshot(params)
        elif params["spec"] is not None:
            strict.check_spec("NodeHealthCheck", params["spec"])
        if params["nodes"] is not None:
            if params["spec"] is None:
                module.fail_json(msg="nodes (offline mode) needs spec: the NodeHealthCheck spec as data.")
            now = parse_time(params["now"], "now") if params["now"] else None  # None: the engine reads the clock
            held = under_maintenance(params["node_maintenances"])
            offline = offline_pass(
                params["spec"],
                params["nodes"],
                params["remediations"],
                now,
                held,
                params["status"],
                params["leases"] or [],
                params["name"] or "",
            )
            out = _result(offline)
            out["changed"] = False
            module.exit_json(**out)
        if params["name"] and params["spec"] is not None:
            module.fail_json(
                msg="name and spec are mutually exclusive for a pass against the cluster (give spec alone to "
                "evaluate a spec as data; both only offline, with nodes)."
            )
        if not params["node_lease_namespace"]:
            module.fail_json(msg="node_lease_namespace: give the namespace of the node Leases (medik8s-leases).")
        for offline_only in ("now", "status", "leases"):
            if params[offline_only] is not None:
                module.fail_json(
                    msg=f"{offline_only} is only for offline mode (with nodes); a live pass reads the cluster "
                    "and uses the current time."
                )
        if params["lease_wait"] < 0:
            module.fail_json(msg="lease_wait: give 0 or more seconds.")
        engine = HealthPass(
            module.client,
            check_mode=module.check_mode,
            emit_events=params["events"],
            lease_namespace=params["lease_namespace"],
            lease_wait=params["lease_wait"],
            node_lease_namespace=params["node_lease_namespace"],
        )
        warnings = engine.warnings
        result = engine.run(params["name"], params["spec"])
    except K8sError as exc:
        for warning in warnings:
            module.warn(warning)
        module.fail_k8s(exc)
    except NodeopsError as exc:  # the input (spec, snapshot, nodes) cannot be used, or another error
        module.fail_error(exc)
    for warning in warnings:
        module.warn(warning)
    out = _result(result)
    if params["name"] is None:
        out["changed"] = False
    module.exit_json(**out)


def main() -> None:
    run(K8sModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True, **CHECKS))


if __name__ == "__main__":
    main()
