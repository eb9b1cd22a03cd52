"""engines/health.py: the pure parts (the remediation object, the status, ownership, maintenance)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from ansible_collections.nodeops.maintenance.plugins.module_utils.core.health import evaluate
from ansible_collections.nodeops.maintenance.plugins.module_utils.engines.health import (
    build_status,
    owned_by,
    remediation_object,
    skipped,
    under_maintenance,
)

UTC = timezone.utc  # noqa: UP017
NOW = datetime(2026, 1, 2, 3, 10, 0, tzinfo=UTC)
REF = {
    "apiVersion": "self-node-remediation.medik8s.io/v1alpha1",
    "kind": "SelfNodeRemediationTemplate",
    "namespace": "ops",
    "name": "tpl",
}
SPEC = {
    "selector": {"matchLabels": {"pool": "a"}},
    "unhealthyConditions": [{"type": "Ready", "status": "Unknown", "duration": "60s"}],
    "minHealthy": 1,
    "remediationTemplate": REF,
}
NHC = {
    "apiVersion": "remediation.medik8s.io/v1alpha1",
    "kind": "NodeHealthCheck",
    "metadata": {"name": "n", "uid": "u1"},
}
TEMPLATE = {
    "apiVersion": REF["apiVersion"],
    "kind": REF["kind"],
    "metadata": {"name": "tpl", "namespace": "ops"},
    "spec": {"template": {"spec": {"remediationStrategy": "OutOfServiceTaint"}}},
}


def node(name: str, status: str, cp: bool = False) -> dict[str, Any]:
    labels = {"pool": "a"}
    if cp:
        labels["node-role.kubernetes.io/control-plane"] = ""
    return {
        "metadata": {"name": name, "labels": labels},
        "status": {"conditions": [{"type": "Ready", "status": status, "lastTransitionTime": "2026-01-02T03:00:00Z"}]},
    }


def test_remediation_object_as_upstream_makes_it() -> None:
    evaluation = evaluate(SPEC, [node("a", "True"), node("b", "Unknown", cp=True)], [], NOW)
    [request] = evaluation.to_remediate
    body = remediation_object(request, TEMPLATE, NHC)
    assert body["kind"] == "SelfNodeRemediation"
    assert body["metadata"]["name"] == "b" and body["metadata"]["namespace"] == "ops"
    assert body["metadata"]["annotations"] == {
        "remediation.medik8s.io/node-name": "b",
        "remediation.medik8s.io/template-name": "tpl",
    }
    assert body["metadata"]["labels"] == {
        "app.kubernetes.io/part-of": "node-healthcheck-controller",
        "remediation.medik8s.io/isControlPlaneNode": "true",
    }
    assert body["metadata"]["ownerReferences"][0]["uid"] == "u1"
    assert body["spec"] == {"remediationStrategy": "OutOfServiceTaint"}
    multi = {**TEMPLATE, "metadata": {**TEMPLATE["metadata"], "annotations": {}}}
    multi["metadata"]["annotations"]["remediation.medik8s.io/multiple-templates-support"] = "true"
    assert remediation_object(request, multi, NHC)["metadata"]["generateName"] == "b-"


def test_status_of_a_remediating_pass_and_its_stability() -> None:
    rem = {
        "apiVersion": "self-node-remediation.medik8s.io/v1alpha1",
        "kind": "SelfNodeRemediation",
        "metadata": {
            "name": "b",
            "namespace": "ops",
            "uid": "r1",
            "creationTimestamp": "2026-01-02T03:05:00Z",
            "annotations": {"remediation.medik8s.io/template-name": "tpl"},
        },
    }
    evaluation = evaluate(SPEC, [node("a", "True"), node("b", "Unknown")], [rem], NOW)
    status = build_status({}, evaluation, [rem], NOW)
    assert (status["observedNodes"], status["healthyNodes"], status["phase"]) == (2, 1, "Remediating")
    assert status["inFlightRemediations"] == {"b": "2026-01-02T03:05:00Z"}
    assert status["unhealthyNodes"][0]["remediations"][0]["templateName"] == "tpl"
    assert status["conditions"][0]["reason"] == "NodeHealthCheckEnabled"
    later = datetime(2026, 1, 2, 3, 11, 0, tzinfo=UTC)
    assert build_status(status, evaluation, [rem], later) == status  # nothing changed: same times

    skipped_eval = evaluate({**SPEC, "minHealthy": 2}, [node("a", "True"), node("b", "Unknown")], [], NOW)
    assert skipped(skipped_eval)["b"]["code"] == "SkippedMinHealthy"
    disabled = build_status(status, skipped_eval, [], later, "RemediationTemplateNotFound", "template missing")
    assert disabled["phase"] == "Disabled"
    assert disabled["conditions"][0]["status"] == "True"
    assert disabled["lastUpdateTime"] == "2026-01-02T03:11:00Z"


def test_ownership_and_maintenance() -> None:
    mine = {"metadata": {"ownerReferences": [{"kind": "NodeHealthCheck", "name": "n", "uid": "u1"}]}}
    other = {"metadata": {"ownerReferences": [{"kind": "NodeHealthCheck", "name": "n", "uid": "u2"}]}}
    assert owned_by(mine, NHC) and not owned_by(other, NHC) and not owned_by({"metadata": {}}, NHC)
    nms = [
        {
            "metadata": {"name": f"m{i}", "namespace": "x"},
            "spec": {"nodeName": n, "requestorID": "r"},
            "status": {"conditions": [{"type": "Ready", "reason": reason}]},
        }
        for i, (n, reason) in enumerate([("a", "Draining"), ("b", "Pending")])
    ]
    assert under_maintenance(nms) == {"a"}
