"""What a NodeMaintenance request asks for: the spec fields ``cordon``, ``waitForPodCompletion`` and ``drainSpec``,
compared by meaning, and what the NVIDIA Maintenance Operator makes of them.

The operator writes each object back through its Go API types, which leave out every field at its zero value
(``false``, ``""``, ``0``, an empty list). Where the CRD has no default for such a field, leaving it out means
the same, so the collection writes requests in that form and compares them without those fields: a request
written by either engine reads as unchanged afterwards. Two fields do change meaning, because the CRD defaults
them once they are left out: ``cordon: false`` becomes ``true`` and ``drainSpec.timeoutSeconds: 0`` (no limit)
becomes 300. :func:`operator_stores` says what the operator ends up with and why.
"""

from __future__ import annotations

import hashlib
from collections.abc import Container, Mapping
from typing import Any

#: The longest name an object may have (a DNS subdomain).
MAX_NAME = 253

#: The spec fields of a request (the rest, requestorID, nodeName and additionalRequestors, name who and where).
REQUEST_FIELDS = ("cordon", "waitForPodCompletion", "drainSpec")
#: Sub-fields whose zero value means the same as leaving them out (the CRD gives them no default).
_OMITTED_WHEN_ZERO = {
    "waitForPodCompletion": ("podSelector", "timeoutSeconds"),
    "drainSpec": ("force", "deleteEmptyDir", "podSelector", "podEvictionFilters"),
}
#: The CRD's defaults of the fields the operator drops at their zero value.
CORDON_DEFAULT = True
DRAIN_TIMEOUT_DEFAULT = 300


def _zero(value: Any) -> bool:
    return value is None or (not isinstance(value, bool) and value in ("", 0, [], {})) or value is False


def canonical(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The request fields of ``spec`` without the sub-fields at a zero value that means the same as none."""
    out: dict[str, Any] = {}
    for key in REQUEST_FIELDS:
        if key not in spec or spec[key] is None:
            continue
        value = spec[key]
        if key in _OMITTED_WHEN_ZERO and isinstance(value, Mapping):
            value = {k: v for k, v in value.items() if not (k in _OMITTED_WHEN_ZERO[key] and _zero(v))}
        out[key] = value
    return out


def same_request(current: Mapping[str, Any], wanted: Mapping[str, Any], key: str) -> bool:
    """Whether ``current[key]`` asks for what ``wanted[key]`` does (see :func:`canonical`)."""
    return canonical({key: current.get(key)}).get(key) == canonical({key: wanted.get(key)}).get(key)


def operator_stores(spec: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The request as the NVIDIA Maintenance Operator keeps it after its first write, and one sentence per field
    whose meaning that changes (empty when the operator serves the request as asked)."""
    stored = canonical(spec)
    changes: list[str] = []
    if stored.get("cordon") is False:
        stored["cordon"] = CORDON_DEFAULT
        changes.append(
            "cordon: false is served as true by the NVIDIA Maintenance Operator (it leaves the false out when it "
            "writes the object, and the CRD's default is true): the node is cordoned"
        )
    drain = stored.get("drainSpec")
    if isinstance(drain, Mapping) and drain.get("timeoutSeconds") == 0:
        stored["drainSpec"] = {**drain, "timeoutSeconds": DRAIN_TIMEOUT_DEFAULT}
        changes.append(
            "drain_spec.timeout_seconds: 0 (no limit) is served as 300 by the NVIDIA Maintenance Operator (it leaves "
            f"the 0 out when it writes the object, and the CRD's default is {DRAIN_TIMEOUT_DEFAULT}): a drain that "
            f"takes longer than {DRAIN_TIMEOUT_DEFAULT} seconds fails"
        )
    return stored, changes


def request_name(prefix: str, node: str, number: int = 1) -> str:
    """The name of a request for ``node``: ``<prefix>-<node>``, and ``-<number>`` after it from the second on. A
    name longer than an object name may be keeps its start and ends in a digest of the whole, so that two nodes
    never share one and the same node always gets the same."""
    base = f"{prefix}-{node}"
    suffix = f"-{number}" if number > 1 else ""
    if len(base) + len(suffix) <= MAX_NAME:
        return base + suffix
    digest = hashlib.sha256(base.encode()).hexdigest()[:16]
    head = base[: MAX_NAME - len(suffix) - len(digest) - 1].rstrip("-.")
    return f"{head}-{digest}{suffix}"


def free_request_name(prefix: str, node: str, taken: Container[str]) -> str:
    """:func:`request_name`, or while an object of that name is still there (a request of this requestor being
    deleted, whose finalizer is not removed yet), the first of its ``-2``, ``-3``, ... that is free: a request is
    made by name, so that a retried creation meets its own first attempt instead of making a second one."""
    number = 1
    while (name := request_name(prefix, node, number)) in taken:
        number += 1
    return name
