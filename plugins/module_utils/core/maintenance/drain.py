# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure drain logic: which pods go, which stay and why, progress arithmetic, the result.

No Ansible, no network, no clock: the engine (``engines/drain.py``) does the I/O and passes
times in. Standard library only, as the whole core (the node agent does not ship this file).

Classification follows kubectl's order, with short-circuits: a pod already being deleted is
waited for; DaemonSet pods stay (one whose DaemonSet is gone needs ``force``); mirror pods stay;
then pods with emptyDir volumes need ``delete_emptydir_data`` and pods without a controller
need ``force`` (finished pods pass both); only then the eviction filters pick the pods to
evict. Unlike kubectl, a blocked pod lists *every* option it needs, not only the first.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import labelselector

# What the drain does with a pod (the plan).
EVICT = "evict"
SKIP = "skip"
WAIT = "wait"  # already terminating: waited for, not evicted again
BLOCK = "block"  # a rule forbids it: the drain fails before the first eviction

# Why a pod is skipped or blocked.
REASON_DAEMONSET = "daemonset"
REASON_MIRROR = "mirror"
REASON_FILTER = "eviction_filter"
REASON_TERMINATING = "terminating"
REASON_FINISHED = "finished"
REASON_ORPHANED_DAEMONSET = "orphaned_daemonset"

# Options that unblock a pod.
OPT_FORCE = "force"
OPT_EMPTYDIR = "delete_emptydir_data"

# What happened to a pod (the outcome, in the result).
EVICTED = "evicted"
DELETED = "deleted"
SKIPPED = "skipped"
BLOCKED = "blocked"
TERMINATING = "terminating"
FAILED = "failed"
GONE = "gone"  # it was terminating already and is gone now

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
FINISHED_PHASES = ("Succeeded", "Failed")


@dataclass(frozen=True)
class EvictionFilter:
    """One ``pod_eviction_filters`` entry: a pod matches when a container requests a matching resource."""

    by_resource_name_regex: re.Pattern[str]

    def matches(self, pod: Mapping[str, Any]) -> bool:
        for container in (pod.get("spec") or {}).get("containers") or []:
            requests = (container.get("resources") or {}).get("requests") or {}
            if any(self.by_resource_name_regex.search(key) for key in requests):
                return True
        return False


def parse_eviction_filters(entries: Sequence[Mapping[str, Any]] | None) -> list[EvictionFilter]:
    """Compile ``[{by_resource_name_regex: ...}]``; ValueError names the bad entry."""
    out: list[EvictionFilter] = []
    for index, entry in enumerate(entries or []):
        regex = entry.get("by_resource_name_regex")
        if not isinstance(regex, str) or not regex:
            raise ValueError(
                f"pod_eviction_filters[{index}].by_resource_name_regex is required (a regular expression)."
            )
        try:
            out.append(EvictionFilter(re.compile(regex)))
        except re.error as exc:
            raise ValueError(
                f"pod_eviction_filters[{index}].by_resource_name_regex {regex!r} is not a valid regular expression: "
                f"{exc}."
            ) from None
    return out


@dataclass(frozen=True)
class DrainRules:
    """The options that decide which pods may go."""

    force: bool = False
    delete_emptydir_data: bool = False
    eviction_filters: Sequence[EvictionFilter] = ()


@dataclass(frozen=True)
class PodPlan:
    """What the drain does with one pod, and why."""

    namespace: str
    name: str
    uid: str
    action: str
    reason: str = ""
    needs: tuple[str, ...] = ()
    warning: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def pod_key(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def pod_uid(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("uid", ""))


def controller_of(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return ref
    return None


def is_finished(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in FINISHED_PHASES


def is_terminating(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def is_mirror(pod: Mapping[str, Any]) -> bool:
    return MIRROR_ANNOTATION in ((pod.get("metadata") or {}).get("annotations") or {})


def has_emptydir(pod: Mapping[str, Any]) -> bool:
    return any("emptyDir" in (v or {}) for v in (pod.get("spec") or {}).get("volumes") or [])


def daemonset_of(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """(namespace, name) of the DaemonSet controlling the pod, None for other pods."""
    ref = controller_of(pod)
    if ref is None or ref.get("kind") != "DaemonSet":
        return None
    return (str((pod.get("metadata") or {}).get("namespace", "")), str(ref.get("name", "")))


def daemonsets_to_check(pods: Iterable[Mapping[str, Any]]) -> set[tuple[str, str]]:
    """The DaemonSets whose existence the classification needs (running, not terminating DS pods)."""
    out: set[tuple[str, str]] = set()
    for pod in pods:
        ds = daemonset_of(pod)
        if ds is not None and not is_finished(pod) and not is_terminating(pod):
            out.add(ds)
    return out


def classify_pod(
    pod: Mapping[str, Any], rules: DrainRules, existing_daemonsets: Collection[tuple[str, str]]
) -> PodPlan:
    """The plan for one pod bound to the node being drained (see the module docstring for the order)."""
    meta = pod.get("metadata") or {}
    namespace, name, uid = str(meta.get("namespace", "")), str(meta.get("name", "")), pod_uid(pod)

    def plan(action: str, reason: str = "", needs: tuple[str, ...] = (), warning: str = "") -> PodPlan:
        return PodPlan(namespace, name, uid, action, reason, needs, warning)

    if is_terminating(pod):
        return plan(WAIT, REASON_TERMINATING)
    finished = is_finished(pod)
    needs: list[str] = []
    warning = ""
    ds = daemonset_of(pod)
    if ds is not None and not finished:
        if ds in existing_daemonsets:
            return plan(SKIP, REASON_DAEMONSET)
        # The DaemonSet is gone: nothing would recreate the pod, so it goes only with force.
        if not rules.force:
            needs.append(OPT_FORCE)
        warning = f"DaemonSet {ds[1]} of pod {namespace}/{name} does not exist"
    if is_mirror(pod):
        return plan(SKIP, REASON_MIRROR)
    if not finished:
        if has_emptydir(pod) and not rules.delete_emptydir_data:
            needs.append(OPT_EMPTYDIR)
        if controller_of(pod) is None and not rules.force and OPT_FORCE not in needs:
            needs.append(OPT_FORCE)
    if needs:
        return plan(BLOCK, REASON_ORPHANED_DAEMONSET if ds is not None else "", tuple(needs), warning)
    if rules.eviction_filters and not any(f.matches(pod) for f in rules.eviction_filters):
        return plan(SKIP, REASON_FILTER)
    return plan(EVICT, REASON_FINISHED if finished else "", warning=warning)


def classify(
    pods: Iterable[Mapping[str, Any]], rules: DrainRules, existing_daemonsets: Collection[tuple[str, str]] = ()
) -> list[PodPlan]:
    """Plans for every pod, sorted by namespace/name."""
    plans = [classify_pod(p, rules, existing_daemonsets) for p in pods]
    return sorted(plans, key=lambda p: (p.namespace, p.name))


def block_message(node: str, plans: Iterable[PodPlan]) -> str:
    """The failure message for blocked pods: every pod, and the option(s) that would allow it."""
    lines = []
    for p in plans:
        if p.action != BLOCK:
            continue
        why = []
        if OPT_EMPTYDIR in p.needs:
            why.append("uses emptyDir (set delete_emptydir_data: true to lose its data)")
        if OPT_FORCE in p.needs:
            if p.reason == REASON_ORPHANED_DAEMONSET:
                why.append("belongs to a DaemonSet that no longer exists (set force: true)")
            else:
                why.append("has no controller that would recreate it (set force: true)")
        lines.append(f"{p.key} {' and '.join(why)}")
    if not lines:
        return ""
    return f"Cannot drain node {node}: " + "; ".join(lines) + ". No pod was evicted."


# ----------------------------------------------------------------------------- selectors, PDBs


def pdbs_for_pod(pod: Mapping[str, Any], pdbs: Iterable[Mapping[str, Any]]) -> list[str]:
    """Names of the PodDisruptionBudgets in the pod's namespace that select it."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    out = []
    for pdb in pdbs:
        pmeta = pdb.get("metadata") or {}
        if pmeta.get("namespace") != meta.get("namespace"):
            continue
        selector = (pdb.get("spec") or {}).get("selector")
        # policy/v1: a null selector selects no pod, an empty one every pod of the namespace.
        if selector is not None and labelselector.matches(selector, labels):
            out.append(str(pmeta.get("name", "")))
    return sorted(out)


_BUDGET_IN_MESSAGE = re.compile(r"disruption budget (\S+?) needs")


def pdbs_from_status(body: Mapping[str, Any]) -> list[str]:
    """PDB names an eviction refusal (HTTP 429) names in its Status causes."""
    names = []
    for cause in (body.get("details") or {}).get("causes") or []:
        match = _BUDGET_IN_MESSAGE.search(str(cause.get("message", "")))
        if match:
            names.append(match.group(1))
    return sorted(set(names))


# ----------------------------------------------------------------------------- backoff


def retry_delay(attempt: int, base: float = 0.5, cap: float = 5.0) -> float:
    """Seconds before retry ``attempt`` (1-based) of a refused eviction: doubling from ``base`` up to ``cap``."""
    return float(min(cap, base * (2 ** max(0, attempt - 1))))


def bypass_due(started_at: float, now: float, bypass_after: float | None) -> bool:
    """Whether a PDB-blocked pod is deleted instead (opt-in ``bypass_pdb_after`` seconds since the drain began)."""
    return bypass_after is not None and now >= started_at + bypass_after


# ----------------------------------------------------------------------------- progress


@dataclass
class DrainProgress:
    """The numbers NodeMaintenance ``status.drain`` shows (field names of the operator)."""

    total_pods: int
    eviction_pods: int
    wait_for_eviction: list[str] = field(default_factory=list)

    @property
    def drain_progress(self) -> int:
        return progress_percent(self.eviction_pods, len(self.wait_for_eviction))

    def as_status(self) -> dict[str, Any]:
        return {
            "totalPods": self.total_pods,
            "evictionPods": self.eviction_pods,
            "drainProgress": self.drain_progress,
            "waitForEviction": list(self.wait_for_eviction),
        }


def progress_percent(eviction_pods: int, remaining: int) -> int:
    """Whole percent of the pods to remove that are gone, truncated; 100 when there is none."""
    if eviction_pods <= 0:
        return 100
    done = eviction_pods - min(max(remaining, 0), eviction_pods)
    return int(done * 100 // eviction_pods)


def progress_of(total_pods: int, plans: Sequence[PodPlan], gone: Collection[str]) -> DrainProgress:
    """Progress from the plans (pods to evict or waited for) and the uids known to be gone."""
    moving = [p for p in plans if p.action in (EVICT, WAIT)]
    waiting = sorted(p.key for p in moving if p.uid not in gone)
    return DrainProgress(total_pods, len(moving), waiting)


# ----------------------------------------------------------------------------- outcome and result


@dataclass
class PodOutcome:
    """What happened to one pod; ``seconds`` from the start of the drain to its last change."""

    namespace: str
    name: str
    action: str
    reason: str = ""
    pdbs: list[str] = field(default_factory=list)
    needs: list[str] = field(default_factory=list)
    error: str = ""
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "namespace": self.namespace,
            "name": self.name,
            "action": self.action,
            "seconds": round(self.seconds, 3),
        }
        if self.reason:
            out["reason"] = self.reason
        if self.pdbs:
            out["pdbs"] = list(self.pdbs)
        if self.needs:
            out["needs"] = list(self.needs)
        if self.error:
            out["error"] = self.error
        return out


def initial_outcome(plan: PodPlan) -> PodOutcome:
    if plan.action == SKIP:
        return PodOutcome(plan.namespace, plan.name, SKIPPED, plan.reason)
    if plan.action == BLOCK:
        return PodOutcome(plan.namespace, plan.name, BLOCKED, plan.reason or "rule", needs=list(plan.needs))
    if plan.action == WAIT:
        return PodOutcome(plan.namespace, plan.name, TERMINATING, REASON_TERMINATING)
    return PodOutcome(plan.namespace, plan.name, TERMINATING)


def totals(outcomes: Iterable[PodOutcome]) -> dict[str, int]:
    counts = dict.fromkeys((EVICTED, DELETED, GONE, SKIPPED, BLOCKED, TERMINATING, FAILED), 0)
    for o in outcomes:
        counts[o.action] = counts.get(o.action, 0) + 1
    return counts


def failure_message(node: str, outcomes: Sequence[PodOutcome], timeout: float, timed_out: bool) -> str:
    """Why the drain did not finish: blocked pods with their PDBs, pods still there, errors."""
    parts = []
    by_pdbs: dict[str, list[str]] = {}
    for o in outcomes:
        if o.action == BLOCKED and not o.needs:
            by_pdbs.setdefault(", ".join(o.pdbs) or "unknown", []).append(f"{o.namespace}/{o.name}")
    for pdbs, pods in by_pdbs.items():
        parts.append(f"eviction refused by PodDisruptionBudget {pdbs} for {', '.join(pods)}")
    staying = [o for o in outcomes if o.action == TERMINATING]
    if staying:
        parts.append("still terminating: " + ", ".join(f"{o.namespace}/{o.name}" for o in staying))
    # each cause once, with the pods it affects (a message names its pod: that part is left out)
    by_cause: dict[str, list[str]] = {}
    for o in outcomes:
        if o.action == FAILED:
            cause = re.sub(rf"(?<![\w.-]){re.escape(o.name)}(?![\w.-])", "<pod>", o.error)
            by_cause.setdefault(cause, []).append(f"{o.namespace}/{o.name}")
    if by_cause:
        parts.append("errors: " + "; ".join(f"{', '.join(pods)}: {cause}" for cause, pods in by_cause.items()))
    head = f"Drain of node {node} timed out after {timeout:g}s" if timed_out else f"Drain of node {node} failed"
    return head + (": " + "; ".join(parts) if parts else "") + "."


def pdb_names(outcomes: Iterable[PodOutcome]) -> list[str]:
    return sorted({f"{o.namespace}/{pdb}" for o in outcomes for pdb in o.pdbs})
