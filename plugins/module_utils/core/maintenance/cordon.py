# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure planning of cordon / uncordon: which nodes change, and how; who cordoned a node.

Every cordon write of the collection's own cordon logic is conditional: the patch carries the
``metadata.resourceVersion`` of the node it was decided on, so the API server refuses it (Conflict) when
anyone changed the node since; the caller reads the node again and decides again.

The reconcile engine records on the Node which NodeMaintenance cordoned it (:data:`CORDONED_BY_ANNOTATION`),
in the same write that sets ``spec.unschedulable``, under its own field manager
(:data:`ENGINE_FIELD_MANAGER`). The release lifts only a cordon that is still that one
(:func:`cordoned_by_claim`): the marker still names the request, and the API server's managedFields still
show the engine's field manager as the owner of ``spec.unschedulable`` (whoever sets the field again after
it was cleared, ``kubectl cordon`` included, becomes its owner, even when our marker stays).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

CORDONED = "cordoned"
UNCORDONED = "uncordoned"

# Ours (not upstream's), on the Node: which request cordoned it ("NodeMaintenance <namespace>/<name> <uid>").
CORDONED_BY_ANNOTATION = "maintenance.nodeops.io/cordoned-by"
# The field manager of the reconcile engine's Node writes. It must differ from every other writer's: the
# collection's cordon module writes as "nodeops.maintenance" (the API server's default, taken from the client's
# User-Agent), the drain module as DRAIN_FIELD_MANAGER.
ENGINE_FIELD_MANAGER = "nodeops-maintenance-reconcile"
# The field manager of the drain module's own cordon, so that it can tell later whether that cordon is still its.
DRAIN_FIELD_MANAGER = "nodeops-maintenance-drain"
# Conditional writes refused because the node changed: read again and decide again at most this often.
MAX_CONFLICTS = 5


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


def state_of(node: Mapping[str, Any]) -> str:
    return CORDONED if is_cordoned(node) else UNCORDONED


def resource_version(node: Mapping[str, Any]) -> str | None:
    value = (node.get("metadata") or {}).get("resourceVersion")
    return str(value) if value else None


def missing_names(requested: Iterable[str], nodes: Iterable[Mapping[str, Any]]) -> list[str]:
    """Requested names that no node has, in the order asked (duplicates once)."""
    present = {node_name(n) for n in nodes}
    return list(dict.fromkeys(name for name in requested if name not in present))


def plan_cordon(nodes: Sequence[Mapping[str, Any]], state: str) -> list[NodeChange]:
    """One change per distinct node, sorted by name, moving it to ``state`` (cordoned|uncordoned)."""
    if state not in (CORDONED, UNCORDONED):
        raise ValueError(f"state must be {CORDONED} or {UNCORDONED}, not {state!r}")
    by_name = {node_name(n): n for n in nodes}
    return [NodeChange(name, state_of(node), state) for name, node in sorted(by_name.items())]


def cordon_patch(
    state: str, resource_version: str | None = None, annotations: Mapping[str, str | None] | None = None
) -> dict[str, Any]:
    """The merge patch that moves a node to ``state``; uncordon removes the field, as kubectl does.

    With ``resource_version`` the write is conditional (the API server answers Conflict when the node changed
    since that version); ``annotations`` are set in the same write (None removes one).
    """
    patch: dict[str, Any] = {"spec": {"unschedulable": True if state == CORDONED else None}}
    meta = metadata_patch(resource_version, annotations)
    if meta:
        patch["metadata"] = meta
    return patch


def metadata_patch(resource_version: str | None, annotations: Mapping[str, str | None] | None = None) -> dict[str, Any]:
    """The ``metadata`` of a conditional merge patch: the precondition and the annotations to change."""
    meta: dict[str, Any] = {}
    if resource_version is not None:
        meta["resourceVersion"] = resource_version
    if annotations:
        meta["annotations"] = dict(annotations)
    return meta


# -- who cordoned it ------------------------------------------------------------------------------
def claim(kind: str, namespace: str | None, name: str, uid: str | None) -> str:
    """The value of CORDONED_BY_ANNOTATION for one object: unique per object (its uid), readable by a person."""
    where = f"{namespace}/{name}" if namespace else name
    return f"{kind} {where} {uid}" if uid else f"{kind} {where}"


def cordoned_by(node: Mapping[str, Any]) -> str | None:
    value = ((node.get("metadata") or {}).get("annotations") or {}).get(CORDONED_BY_ANNOTATION)
    return str(value) if value is not None else None


def unschedulable_owners(node: Mapping[str, Any]) -> list[str]:
    """The field managers that own ``spec.unschedulable`` in the node's managedFields, sorted.

    The API server moves a field to whoever last changed it; setting it to the value it already has changes
    nothing, and clearing it ends every claim on it.
    """
    owners = set()
    for entry in (node.get("metadata") or {}).get("managedFields") or ():
        if entry.get("subresource"):
            continue
        spec = (entry.get("fieldsV1") or {}).get("f:spec") or {}
        if "f:unschedulable" in spec:
            owners.add(str(entry.get("manager") or ""))
    return sorted(owners)


def owns_unschedulable(node: Mapping[str, Any], manager: str = ENGINE_FIELD_MANAGER) -> bool:
    """Whether the node's managedFields show ``manager`` as an owner of ``spec.unschedulable``."""
    return manager in unschedulable_owners(node)


def still_own_cordon(node: Mapping[str, Any], manager: str) -> bool:
    """The node is cordoned and nobody but ``manager`` has set ``spec.unschedulable`` since ``manager`` cordoned it
    (someone who uncordoned and cordoned it again owns the field now): only then may ``manager`` undo it."""
    return is_cordoned(node) and unschedulable_owners(node) == [manager]


def cordoned_by_claim(node: Mapping[str, Any], value: str, manager: str = ENGINE_FIELD_MANAGER) -> bool:
    """The node is cordoned, and that cordon is still the one written with ``value`` by ``manager``."""
    return is_cordoned(node) and cordoned_by(node) == value and owns_unschedulable(node, manager)
