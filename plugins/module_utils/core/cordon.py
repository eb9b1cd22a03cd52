# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure planning of cordon / uncordon: which nodes change, and how."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

CORDONED = "cordoned"
UNCORDONED = "uncordoned"


@dataclass(frozen=True)
class NodeChange:
    name: str
    before: str
    after: str

    @property
    def changed(self) -> bool:
        return self.before != self.after

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "before": self.before, "after": self.after, "changed": self.changed}


def node_name(node: Mapping[str, Any]) -> str:
    return str((node.get("metadata") or {}).get("name", ""))


def is_cordoned(node: Mapping[str, Any]) -> bool:
    return bool((node.get("spec") or {}).get("unschedulable"))


def missing_names(requested: Iterable[str], nodes: Iterable[Mapping[str, Any]]) -> list[str]:
    """Requested names that no node has, in the order asked (duplicates once)."""
    present = {node_name(n) for n in nodes}
    return list(dict.fromkeys(name for name in requested if name not in present))


def plan_cordon(nodes: Sequence[Mapping[str, Any]], state: str) -> list[NodeChange]:
    """One change per distinct node, sorted by name, moving it to ``state`` (cordoned|uncordoned)."""
    if state not in (CORDONED, UNCORDONED):
        raise ValueError(f"state must be {CORDONED} or {UNCORDONED}, not {state!r}")
    by_name = {node_name(n): n for n in nodes}
    return [
        NodeChange(name, CORDONED if is_cordoned(node) else UNCORDONED, state) for name, node in sorted(by_name.items())
    ]


def cordon_patch(state: str) -> dict[str, Any]:
    """The merge patch that moves a node to ``state``; uncordon removes the field, as kubectl does."""
    return {"spec": {"unschedulable": True if state == CORDONED else None}}
