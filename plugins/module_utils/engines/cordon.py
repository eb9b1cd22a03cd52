# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Cordon or uncordon one node with a conditional write: the I/O around ``core/maintenance/cordon.py``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..core.maintenance.cordon import (
    MAX_CONFLICTS,
    UNCORDONED,
    NodeChange,
    cordon_patch,
    node_name,
    resource_version,
    state_of,
    still_own_cordon,
)
from ..k8s.client import NODES, Client
from ..k8s.errors import Conflict, NotFound


@dataclass(frozen=True)
class CordonOutcome:
    change: NodeChange  # before: the state of the node the write was decided on (the last read)
    node: dict[str, Any]  # the node as written (dry run: as it would be), or as last read when nothing was written
    rereads: int  # Conflicts met: each one a read and a new decision


def set_state(
    client: Client,
    node: Mapping[str, Any],
    state: str,
    *,
    dry_run: bool = False,
    field_manager: str | None = None,
    max_conflicts: int = MAX_CONFLICTS,
) -> CordonOutcome:
    """Move ``node`` (as just read) to ``state``, decided on that read and written only if it is still current.

    The merge patch carries the node's resourceVersion, so the API server refuses it with Conflict when anyone
    changed the node since: the node is read again and the decision made again (a node that is in ``state``
    by now is left alone). More than ``max_conflicts`` Conflicts in a row: the last one is raised.
    """
    name = node_name(node)
    current: dict[str, Any] = dict(node)
    rereads = 0
    while True:
        before = state_of(current)
        if before == state:
            return CordonOutcome(NodeChange(name, before, state), current, rereads)
        patch = cordon_patch(state, resource_version(current))
        try:
            written = client.patch(NODES, name, patch, dry_run=dry_run, field_manager=field_manager)
        except Conflict:
            rereads += 1
            if rereads > max_conflicts:
                raise
            current = client.get(NODES, name)
            continue
        return CordonOutcome(NodeChange(name, before, state), written, rereads)


def undo_own_cordon(
    client: Client, name: str, manager: str, *, dry_run: bool = False, max_conflicts: int = MAX_CONFLICTS
) -> bool:
    """Uncordon node ``name`` only if the cordon ``manager`` made is still the one there (read now, written with
    that read's resourceVersion; on Conflict read again and decide again). False when it was left alone: gone,
    not cordoned any more, or cordoned again by someone else since."""
    rereads = 0
    while True:
        try:
            node = client.get(NODES, name)
        except NotFound:
            return False
        if not still_own_cordon(node, manager):
            return False
        try:
            client.patch(
                NODES, name, cordon_patch(UNCORDONED, resource_version(node)), dry_run=dry_run, field_manager=manager
            )
        except Conflict:
            rereads += 1
            if rereads > max_conflicts:
                raise
            continue
        except NotFound:
            return False
        return True
