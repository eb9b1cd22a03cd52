# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Small facts about Node and remediation objects, shared by the health rules and the node agent.

Pure, standard library only, Python 3.9 syntax at run time. Kept apart from ``health`` so that the
node agent, which needs only these, does not load the whole NodeHealthCheck evaluation (about 2 MB
of its 25 MB memory budget).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .conditions import of

NODE_NAME_ANNOTATION = "remediation.medik8s.io/node-name"
TIMED_OUT_ANNOTATION = "remediation.medik8s.io/nhc-timed-out"
CONTROL_PLANE_LABELS = ("node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master")


def is_control_plane(node: Mapping[str, Any]) -> bool:
    """Whether a Node carries a control-plane (or the old master) role label."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    return any(label in labels for label in CONTROL_PLANE_LABELS)


def remediation_node(remediation: Mapping[str, Any]) -> str:
    """The node a remediation object is for: its node-name annotation, else its name."""
    meta = remediation.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    return str(annotations.get(NODE_NAME_ANNOTATION) or meta.get("name", ""))


def node_ready(node: Mapping[str, Any], missing: bool = False) -> bool:
    """Whether the Node's (first) Ready condition is True; a Node without one counts as ``missing``: not Ready for
    health and readiness waits, Ready for the maintenance scheduler's availability (as the NVIDIA operator counts
    it)."""
    condition = of(node, "Ready")
    return missing if condition is None else condition.get("status") == "True"
