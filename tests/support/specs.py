# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Valid object specs the unit tests start from (and break one field at a time)."""

from __future__ import annotations

from typing import Any

#: a NodeHealthCheck spec the CRD accepts
NHC: dict[str, Any] = {
    "selector": {"matchExpressions": [{"key": "node-role.kubernetes.io/worker", "operator": "Exists"}]},
    "minHealthy": "51%",
    "unhealthyConditions": [{"type": "Ready", "status": "False", "duration": "300s"}],
    "remediationTemplate": {
        "apiVersion": "self-node-remediation.medik8s.io/v1alpha1",
        "kind": "SelfNodeRemediationTemplate",
        "name": "t",
        "namespace": "ns",
    },
}
