# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The per-node Lease the medik8s operators share, as a NodeHealthCheck takes, keeps and gives it up.

Pure, standard library only (time is a parameter, seconds since the epoch). One ``coordination.k8s.io`` Lease
per node, named ``node-<node>`` in the namespace ``medik8s-leases``: whoever holds it may act on the node. A
NodeHealthCheck holds it as ``NodeHealthCheck-<name>`` while it remediates the node; a node maintenance
holds it as ``node-maintenance``. Rules:

* A Lease is **held** by its holder while ``renewTime <= now <= renewTime + leaseDurationSeconds``; a
  Lease without either time, or past that, is free to take over.
* A new remediation needs the Lease: taken for the remediation's timeout (10 minutes for a template
  without one) plus one minute. Held by someone else, the node is skipped and looked at again in a minute.
* While the remediation runs, the Lease is renewed before it runs out; once ``acquireTime`` is three times
  the current timeout past (plus the timeouts of the escalation steps before it), the remediation is overdue:
  the Lease is given up and the remediation object marked timed out.
* A node healthy again, whose objects are all gone, gets its Lease given up.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..node import rfc3339
from ..node.errors import NodeopsError

NAMESPACE = "medik8s-leases"
#: The length of a remediation from a template without a timeout (a single template).
DEFAULT_REMEDIATION_SECONDS = 600.0
#: Added to the remediation's length for the Lease's duration.
BUFFER_SECONDS = 60.0
#: A remediation is overdue once its Lease was extended this many times past its first duration.
MAX_EXTENSIONS = 2
#: When the Lease is held by someone else, look again after this long.
TAKEN_RETRY_SECONDS = 60.0
#: The longest leaseDurationSeconds the API server stores (int32).
MAX_DURATION_SECONDS = 2**31 - 1


class NodeLeaseError(NodeopsError, ValueError):
    """A node Lease whose fields cannot be read; the message names the field."""


def name_for(node: str) -> str:
    return f"node-{node}".lower()


def holder_for(nhc_name: str) -> str:
    return f"NodeHealthCheck-{nhc_name}"


@dataclass(frozen=True)
class NodeLease:
    """A node Lease as read: its holder, its times, and what a conditional write needs."""

    node: str
    holder: str = ""
    acquired: float | None = None  # seconds since the epoch
    renewed: float | None = None
    duration: float | None = None
    transitions: int = 0
    uid: str = ""
    resource_version: str = ""
    #: the Lease's metadata as read: a replace keeps its owner references, labels and annotations
    metadata: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def expires(self) -> float | None:
        if self.renewed is None or self.duration is None:
            return None
        return self.renewed + self.duration

    def held_by_other(self, holder: str, now: float) -> bool:
        """Held, now, by someone other than ``holder``: until ``renewTime + leaseDurationSeconds``. A renewal time
        ahead of ``now`` (the holder's clock runs ahead of this host's) still holds: a pass run from elsewhere
        than the cluster must not take a node someone else just took."""
        end = self.expires()
        return self.holder != holder and end is not None and now <= end


def read(obj: Mapping[str, Any]) -> NodeLease:
    """A Lease object (as the API returns it) as a NodeLease; NodeLeaseError naming the field it cannot read."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    name = str(meta.get("name") or "")
    if not name.startswith("node-"):
        raise NodeLeaseError(f"Lease {name!r}: not a node Lease (the name is node-<node>).")

    def stamp(key: str) -> float | None:
        value = spec.get(key)
        if value in (None, ""):
            return None
        try:
            return rfc3339.parse_time(value, f"Lease {name}: spec.{key}")
        except rfc3339.TimeError as err:
            raise NodeLeaseError(str(err)) from err

    duration = spec.get("leaseDurationSeconds")
    if duration is not None and (
        isinstance(duration, bool) or not isinstance(duration, int) or not 0 < duration <= MAX_DURATION_SECONDS
    ):
        raise NodeLeaseError(
            f"Lease {name}: spec.leaseDurationSeconds: {duration!r} is not a whole number of seconds from 1 to "
            f"{MAX_DURATION_SECONDS}."
        )
    renewed = stamp("renewTime")
    if renewed is not None and duration is not None and rfc3339.past_year_9999(spec.get("renewTime"), duration):
        raise NodeLeaseError(
            f"Lease {name}: spec.renewTime: {spec.get('renewTime')!r} plus leaseDurationSeconds is past the year 9999."
        )
    transitions = spec.get("leaseTransitions") or 0
    return NodeLease(
        node=name[len("node-") :],
        holder=str(spec.get("holderIdentity") or ""),
        acquired=stamp("acquireTime"),
        renewed=renewed,
        duration=float(duration) if duration is not None else None,
        transitions=transitions if isinstance(transitions, int) and not isinstance(transitions, bool) else 0,
        uid=str(meta.get("uid") or ""),
        resource_version=str(meta.get("resourceVersion") or ""),
        metadata=dict(meta),
    )


@dataclass(frozen=True)
class LeaseWrite:
    """A write of a node's Lease: ``take`` (create, take over or extend it for ``duration`` seconds),
    ``renew`` (extend one held), or ``release`` (delete it). ``current`` is the Lease as read (None: none).
    A ``fresh`` take starts a new remediation of the node: it is acquired now even when the Lease is already
    ours (left from an earlier remediation), so the new one is not overdue on the old one's time."""

    node: str
    action: str
    holder: str
    duration: float = 0.0
    current: NodeLease | None = None
    fresh: bool = False

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"node": self.node, "lease": name_for(self.node), "action": self.action}
        if self.action != "release":
            out["duration_seconds"] = int(self.duration)
        return out


def lease_seconds(timeout: float | None) -> float:
    """The Lease's duration for a remediation step with ``timeout`` seconds (None: a single template)."""
    return (DEFAULT_REMEDIATION_SECONDS if timeout is None else timeout) + BUFFER_SECONDS


def spec_after(write: LeaseWrite, now: float) -> dict[str, Any]:
    """The Lease's spec after a ``take`` or ``renew``: the acquire time stays while the holder keeps it (and
    had one), a takeover counts a transition."""
    current = write.current
    kept = current is not None and current.holder == write.holder and not write.fresh
    acquired = current.acquired if kept and current is not None and current.acquired is not None else now
    transitions = (current.transitions if current is not None else 0) + (0 if kept or current is None else 1)
    return {
        "holderIdentity": write.holder,
        "leaseDurationSeconds": int(write.duration),
        "acquireTime": rfc3339.micro_time(acquired),
        "renewTime": rfc3339.micro_time(now),
        "leaseTransitions": transitions,
    }


def needs_renewal(lease: NodeLease, length: float, now: float) -> bool:
    """Whether a Lease kept for a remediation step of ``length`` seconds is extended now: it would run out
    within that time."""
    end = lease.expires()
    return end is None or end < now + length


def overdue_at(lease: NodeLease, current: float, previous: float) -> float | None:
    """When a remediation under ``lease`` is overdue: ``acquireTime`` plus (MAX_EXTENSIONS + 1) times the
    current step's length, plus the lengths of the escalation steps before it. None without an acquire time."""
    if lease.acquired is None:
        return None
    return lease.acquired + (MAX_EXTENSIONS + 1) * current + previous
