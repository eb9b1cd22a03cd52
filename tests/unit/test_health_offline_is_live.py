"""Offline ``node_health`` is what a live pass writes: for random cluster states (nodes, their remediation objects,
node Leases, the storm state of the status, healthyDelay, minHealthy), the offline pass over the objects as data
reports the same creates, deletions, marks, Lease writes, events and status as a pass against a fake API server
holding the same objects reports and writes."""

from __future__ import annotations

import copy
from typing import Any

from ansible_collections.nodeops.maintenance.plugins.module_utils.core.node.rfc3339 import format_time, micro_time
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.remediation import nodelease
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.remediation.health import (
    HEALTHY_DELAY_ANNOTATION,
    STORM_ACTIVE,
    STORM_COOLDOWN_ACTIVE,
    TIMED_OUT_ANNOTATION,
)
from ansible_collections.nodeops.maintenance.plugins.module_utils.engines.health import PassResult, offline_pass
from hypothesis import given, settings
from hypothesis import strategies as st
from unit.test_engine_health import NHC, NOW, SPEC, TEMPLATE, FakeClient, run_pass, snr

HOLDER = "NodeHealthCheck-n"
#: The second escalation step's template: another kind (steps of one kind need the multiple-templates annotation).
OTHER_TEMPLATE = "OtherRemediationTemplate"
TPL2 = {"name": "tpl2", "namespace": "ops"}


class Clocked(FakeClient):
    """The fake API server, stamping what it creates with the pass's time, as the real one stamps its own."""

    def put(self, plural: str, obj: dict[str, Any], new: bool = False) -> dict[str, Any]:
        if new:
            obj["metadata"].setdefault("creationTimestamp", format_time(NOW))
        return super().put(plural, obj, new)


def ago(seconds: int) -> str:
    return format_time(NOW - seconds)


@st.composite
def states(draw: st.DrawFn) -> dict[str, Any]:
    count = draw(st.integers(1, 6))
    escalating = draw(st.booleans())
    nodes, rems, leases = [], [], []
    for index in range(count):
        name = f"n{index}"
        ready = draw(st.sampled_from(["True", "Unknown", "False"]))
        since = draw(st.sampled_from([10, 90, 4000]))
        labels = {"pool": "a"}
        if draw(st.booleans()) and draw(st.booleans()):
            labels["remediation.medik8s.io/exclude-from-remediation"] = draw(st.sampled_from(["true", ""]))
        annotations = {}
        if draw(st.integers(0, 5)) == 0:
            annotations["remediation.medik8s.io/manually-confirmed-healthy"] = ""
        nodes.append(
            {
                "metadata": {"name": name, "labels": labels, "annotations": annotations},
                "status": {"conditions": [{"type": "Ready", "status": ready, "lastTransitionTime": ago(since)}]},
            }
        )
        if draw(st.booleans()):
            marks: dict[str, str] = {}
            if draw(st.integers(0, 3)) == 0:
                marks[HEALTHY_DELAY_ANNOTATION] = ago(draw(st.sampled_from([5, 100])))
            if draw(st.integers(0, 4)) == 0:
                marks[TIMED_OUT_ANNOTATION] = ago(60)
            rem = snr(name, **marks)
            if escalating and draw(st.booleans()):  # the second escalation step's object
                rem["kind"] = "OtherRemediation"
                rem["metadata"]["annotations"]["remediation.medik8s.io/template-name"] = "tpl2"
            rem["metadata"]["creationTimestamp"] = ago(draw(st.sampled_from([30, 1000, 2400])))
            if draw(st.booleans()):  # the remediator's finalizer: a deletion marks it, the object stays
                rem["metadata"]["finalizers"] = ["self-node-remediation.medik8s.io/snr-finalizer"]
                if draw(st.booleans()):
                    rem["metadata"]["deletionTimestamp"] = ago(20)
            rems.append(rem)
        if draw(st.integers(0, 2)) == 0:
            holder = draw(st.sampled_from([HOLDER, "node-maintenance"]))
            renewed = draw(st.sampled_from([30, 500, 5000]))
            acquired = renewed + draw(st.sampled_from([0, 1500]))
            leases.append(
                {
                    "metadata": {"name": f"node-{name}", "namespace": nodelease.NAMESPACE},
                    "spec": {
                        "holderIdentity": holder,
                        "leaseDurationSeconds": draw(st.sampled_from([660, 3600])),
                        "acquireTime": micro_time(NOW - acquired),
                        "renewTime": micro_time(NOW - renewed),
                    },
                }
            )
    spec = {**SPEC, "minHealthy": draw(st.integers(0, count))}
    if escalating:
        ref = spec.pop("remediationTemplate")
        spec["escalatingRemediations"] = [
            {"remediationTemplate": ref, "order": 0, "timeout": "5m"},
            {"remediationTemplate": {**ref, "kind": OTHER_TEMPLATE, "name": "tpl2"}, "order": 1, "timeout": "10m"},
        ]
    delay = draw(st.sampled_from([None, "30s", "-1s"]))
    if delay is not None:
        spec["healthyDelay"] = delay
    conditions = []
    if draw(st.booleans()):
        spec["stormCooldownDuration"] = draw(st.sampled_from(["0s", "60s"]))
        active = draw(st.sampled_from([None, "True", "False"]))
        if active is not None:
            conditions.append({"type": STORM_ACTIVE, "status": active, "lastTransitionTime": ago(300)})
            cooling = draw(st.sampled_from(["True", "False"]))
            conditions.append(
                {
                    "type": STORM_COOLDOWN_ACTIVE,
                    "status": cooling,
                    "lastTransitionTime": ago(draw(st.sampled_from([20, 90]))),
                }
            )
    if draw(st.booleans()):
        spec["pauseRequests"] = ["upgrade"]
    return {"spec": spec, "nodes": nodes, "rems": rems, "leases": leases, "status": {"conditions": conditions}}


def live(state: dict[str, Any]) -> tuple[PassResult, FakeClient]:
    nhc = {**copy.deepcopy(NHC), "spec": state["spec"], "status": copy.deepcopy(state["status"])}
    fake = Clocked(
        [("nodehealthchecks", nhc), ("selfnoderemediationtemplates", copy.deepcopy(TEMPLATE))]
        + [("otherremediationtemplates", {**copy.deepcopy(TEMPLATE), "kind": OTHER_TEMPLATE, "metadata": TPL2})]
        + [("nodes", copy.deepcopy(n)) for n in state["nodes"]]
        + [(r["kind"].lower() + "s", copy.deepcopy(r)) for r in state["rems"]]
        + [("leases", copy.deepcopy(lease)) for lease in state["leases"]]
    )
    fake.store[("nodehealthchecks", "", "n")]["metadata"]["uid"] = "nhc-uid"  # the owner of the objects
    return run_pass(fake), fake


def without_uids(status: dict[str, Any]) -> dict[str, Any]:
    """The status, without what only the API server can give (the UIDs of the objects)."""
    out = copy.deepcopy(status)
    for entry in out.get("unhealthyNodes") or []:
        for rem in entry.get("remediations") or []:
            rem["resource"].pop("uid", None)
    return out


@settings(max_examples=150, deadline=None)
@given(states())
def test_offline_is_what_the_live_pass_writes(state: dict[str, Any]) -> None:
    written, fake = live(state)
    offline = offline_pass(
        state["spec"],
        copy.deepcopy(state["nodes"]),
        copy.deepcopy(state["rems"]),
        NOW,
        status=copy.deepcopy(state["status"]),
        leases=copy.deepcopy(state["leases"]),
        name="n",
    )
    assert written.rereads == 0
    assert offline.created == written.created
    assert offline.deleted == written.deleted
    assert offline.marked == written.marked
    assert offline.leases == written.leases
    assert [(e["reason"], e["message"]) for e in offline.events] == fake.events
    assert offline.status is not None and written.status is not None
    assert without_uids(offline.status) == without_uids(written.status)
    stored = fake.store[("nodehealthchecks", "", "n")]["status"]
    assert without_uids(stored) == without_uids(offline.status) or not written.status_changed
