# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Status conditions (``type``, ``status``, ``reason``, ``message``, ``lastTransitionTime``), read and set in one
place for every object the collection writes or reads: NodeMaintenance, NodeHealthCheck, SelfNodeRemediation
and Node.

Pure, standard library only, Python 3.9 syntax at run time (the node agent ships ``nodes``, which reads the
Node's Ready condition through :func:`status_of`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def find(conditions: object, ctype: str) -> Mapping[str, Any] | None:
    """The first condition of type ``ctype`` in a list of conditions; entries that are not mappings, and a value
    that is not a list, are skipped (objects from the API can be malformed)."""
    if not isinstance(conditions, (list, tuple)):
        return None
    for condition in conditions:
        if isinstance(condition, Mapping) and condition.get("type") == ctype:
            return condition
    return None


def of(obj: Mapping[str, Any], ctype: str) -> Mapping[str, Any] | None:
    """The condition ``ctype`` of an object (``status.conditions``); None when it has none."""
    status = obj.get("status")
    return find(status.get("conditions") if isinstance(status, Mapping) else None, ctype)


def status_of(obj: Mapping[str, Any], ctype: str) -> str | None:
    """The status (``"True"``, ``"False"``, ``"Unknown"``) of the object's condition ``ctype``; None without one."""
    condition = of(obj, ctype)
    return None if condition is None else condition.get("status")


def set_condition(
    conditions: list[dict[str, Any]],
    ctype: str,
    status: str,
    reason: str,
    message: str,
    stamp: str,
    **extra: Any,
) -> bool:
    """Set the condition ``ctype`` in ``conditions``, in place; whether anything changed.

    An existing condition keeps its position, its other fields, and its ``lastTransitionTime`` unless its
    status changes (or it has none); a new one goes last with ``stamp``. ``extra`` fields (such as
    ``observedGeneration``) are set too.
    """
    wanted: dict[str, Any] = {"type": ctype, "status": status, "reason": reason, "message": message, **extra}
    for index, current in enumerate(conditions):
        if isinstance(current, Mapping) and current.get("type") == ctype:
            updated = dict(current)
            updated.update(wanted)
            if current.get("status") != status or not current.get("lastTransitionTime"):
                updated["lastTransitionTime"] = stamp
            if updated == current:
                return False
            conditions[index] = updated
            return True
    conditions.append({**wanted, "lastTransitionTime": stamp})
    return True
