# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Evaluation of a NodeHealthCheck: which nodes are unhealthy, which get a remediation, which
remediation objects go, and when to look again.

Pure, standard library only (time is the ``now`` parameter, seconds since the epoch). Semantics of medik8s
Node Health Check as a single pass over data the caller read:

* ``nodes``: every Node object of the cluster (dicts as the API returns them); the spec's selector
  picks the observed ones, and a remediation object whose node is not among them is an orphan.
* ``remediations``: the remediation objects this NodeHealthCheck owns (for example its
  SelfNodeRemediations); a remediation belongs to the node named by its annotation
  ``remediation.medik8s.io/node-name``, else by its name.
* ``maintenance``: names of nodes under maintenance (a NodeMaintenance in progress).

Rules: a node is unhealthy when one of ``unhealthyConditions`` has had its status for strictly longer
than its duration since ``lastTransitionTime``; a node that will become unhealthy ("soon") is neither
counted healthy nor cleaned up, and ``requeue_after`` says when to look again; a node counts healthy
only when no remediation object of it remains; new remediations (and escalations) need
``healthy >= minHealthy`` (or ``observed - maxUnhealthy``, percentages rounded up), no
``pauseRequests``, a node not under maintenance and not labelled
``remediation.medik8s.io/exclude-from-remediation=true``, and at most one control-plane node with a
remediation at a time; ``healthyDelay`` is waited before a recovered node's remediation objects are
deleted (negative: until the node is annotated ``remediation.medik8s.io/manually-confirmed-healthy``);
``escalatingRemediations`` are tried in ``order``, each until its ``timeout``; with
``stormCooldownDuration``, new remediations also wait out a cooldown after a shortfall of healthy
nodes (see :func:`storm_step`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..intorpercent import IntOrPercentError, parse, scaled
from ..labelselector import SelectorError, matches, validate
from ..node import conditions as _status_conditions
from ..node import nodes as _nodes
from ..node import rfc3339
from ..node.duration import DurationError, parse_duration
from ..node.errors import NodeopsError
from ..node.nodes import TIMED_OUT_ANNOTATION, is_control_plane, remediation_node
from . import nodelease

EXCLUDE_LABEL = "remediation.medik8s.io/exclude-from-remediation"
# defined in core/node/nodes.py, shared with the node agent; kept here for the modules that import them from health
NODE_NAME_ANNOTATION = _nodes.NODE_NAME_ANNOTATION
CONTROL_PLANE_LABELS = _nodes.CONTROL_PLANE_LABELS
TEMPLATE_NAME_ANNOTATION = "remediation.medik8s.io/template-name"
HEALTHY_DELAY_ANNOTATION = "remediation.medik8s.io/healthy-delay"
CONFIRMED_HEALTHY_ANNOTATION = "remediation.medik8s.io/manually-confirmed-healthy"
CONTROL_PLANE_CR_LABEL = "remediation.medik8s.io/isControlPlaneNode"

DEFAULT_UNHEALTHY_CONDITIONS: tuple[dict[str, str], ...] = (
    {"type": "Ready", "status": "False", "duration": "300s"},
    {"type": "Ready", "status": "Unknown", "duration": "300s"},
)
#: Retry interval for a node blocked by another control-plane remediation or by maintenance.
BLOCKED_RETRY_SECONDS = 60.0
#: Requeue slack after a deadline: the rule is strict (> duration), so look just after it.
REQUEUE_SLACK_SECONDS = 1.0


class Code:
    """Stable per-node decision codes."""

    HEALTHY = "Healthy"  # no listed condition matches, no remediation object left
    SOON_UNHEALTHY = "SoonUnhealthy"  # a listed condition matches but its duration has not passed
    REMEDIATE = "Remediate"  # a new remediation object is to be created
    ESCALATE = "Escalate"  # the current remediation timed out; the next template's object is created
    REMEDIATING = "Remediating"  # a remediation object is in progress; nothing to do
    NO_TEMPLATE_LEFT = "NoTemplateLeft"  # every escalating remediation timed out
    SKIPPED_MIN_HEALTHY = "SkippedMinHealthy"
    SKIPPED_STORM = "SkippedStormCooldown"  # stormCooldownDuration: the storm is over, its cooldown is not
    SKIPPED_PAUSED = "SkippedPaused"
    SKIPPED_MAINTENANCE = "SkippedMaintenance"
    SKIPPED_EXCLUDED = "SkippedExcluded"
    SKIPPED_CONTROL_PLANE = "SkippedControlPlane"  # another control-plane node is being remediated
    SKIPPED_LEASE = "SkippedNodeLease"  # someone else (a node maintenance) holds the node's Lease
    RECOVERING = "Recovering"  # healthy again; its remediation objects are being deleted
    HEALTHY_DELAYED = "HealthyDelayed"  # healthy again; waiting healthyDelay before deleting
    AWAITING_CONFIRMATION = "AwaitingConfirmation"  # negative healthyDelay: waits for the annotation


#: Codes of nodes that count as healthy.
HEALTHY_CODES = frozenset({Code.HEALTHY})
#: Codes of nodes that are unhealthy now (their conditions match).
UNHEALTHY_CODES = frozenset(
    {
        Code.REMEDIATE,
        Code.ESCALATE,
        Code.REMEDIATING,
        Code.NO_TEMPLATE_LEFT,
        Code.SKIPPED_MIN_HEALTHY,
        Code.SKIPPED_STORM,
        Code.SKIPPED_PAUSED,
        Code.SKIPPED_MAINTENANCE,
        Code.SKIPPED_EXCLUDED,
        Code.SKIPPED_CONTROL_PLANE,
        Code.SKIPPED_LEASE,
    }
)


class HealthSpecError(NodeopsError, ValueError):
    """A NodeHealthCheck spec (or input) the evaluation cannot use; the message names the field."""


@dataclass(frozen=True)
class Template:
    """One remediation template: the classic one (no order, no timeout) or an escalation step."""

    reference: Mapping[str, Any]  # the ObjectReference as in the spec
    order: int | None = None
    timeout_seconds: float | None = None

    @property
    def kind(self) -> str:
        return str(self.reference.get("kind", ""))

    @property
    def name(self) -> str:
        return str(self.reference.get("name", ""))

    @property
    def remediation_kind(self) -> str:
        """The kind of the objects it makes: the template's kind without the ``Template`` suffix."""
        return self.kind[: -len("Template")] if self.kind.endswith("Template") else self.kind


@dataclass(frozen=True)
class RemediationRef:
    """A remediation object, by what is needed to patch or delete it.

    ``uid`` and ``resource_version`` are those of the object as read (empty when the input had none): the
    caller's writes carry them as preconditions, so a write decided on this read is refused when the object was
    replaced or changed since. They are not part of :meth:`as_dict`.
    """

    node: str
    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str = ""
    resource_version: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "apiVersion": self.api_version,
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.name,
        }


@dataclass(frozen=True)
class RemediationRequest:
    """A remediation object to create for ``node`` from ``template``."""

    node: str
    template: Template
    control_plane: bool

    def as_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "template": dict(self.template.reference),
            "order": self.template.order,
            "timeout_seconds": self.template.timeout_seconds,
            "control_plane": self.control_plane,
        }


@dataclass(frozen=True)
class NodeDecision:
    node: str
    code: str
    reason: str
    control_plane: bool = False
    matched_conditions: tuple[str, ...] = ()  # "Ready=Unknown" of the conditions that match
    remediations: tuple[str, ...] = ()  # names of the node's remediation objects
    unhealthy_seconds: float | None = None  # how long the longest-held matching condition has held (None: unknown)

    @property
    def healthy(self) -> bool:
        return self.code in HEALTHY_CODES

    @property
    def unhealthy(self) -> bool:
        return self.code in UNHEALTHY_CODES

    def as_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "code": self.code,
            "reason": self.reason,
            "control_plane": self.control_plane,
            "matched_conditions": list(self.matched_conditions),
            "remediations": list(self.remediations),
            "unhealthy_seconds": self.unhealthy_seconds,
        }


# -- storm recovery (stormCooldownDuration) ---------------------------------------------------------
STORM_ACTIVE = "StormActive"
STORM_COOLDOWN_ACTIVE = "StormCooldownActive"
#: The reason of every storm condition, as upstream writes it.
STORM_REASON = "HealthyNodeThresholdChange"
STORM_STARTED = "StormRecoveryStarted"
STORM_COOLDOWN_STARTED = "StormRecoveryCooldownStarted"
STORM_ENDED = "StormRecoveryEnded"


@dataclass(frozen=True)
class ConditionChange:
    """A status condition of the NodeHealthCheck to set; its lastTransitionTime changes only with its status."""

    type: str
    status: str
    reason: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"type": self.type, "status": self.status, "reason": self.reason, "message": self.message}


@dataclass(frozen=True)
class StormStep:
    """What storm recovery decides in one pass: whether new remediations wait, the conditions to set, the
    storm events (reasons) and when to look again."""

    blocked: bool = False  # the cooldown holds new remediations back (a breach blocks through minHealthy)
    conditions: tuple[ConditionChange, ...] = ()
    events: tuple[str, ...] = ()
    requeue_after: float | None = None


def storm_cooldown_of(spec: Mapping[str, Any]) -> float | None:
    """``spec.stormCooldownDuration`` in seconds; None when unset (storm recovery off; "0s" is on)."""
    value = spec.get("stormCooldownDuration")
    if value is None:
        return None
    try:
        return parse_duration(value, "spec.stormCooldownDuration")
    except DurationError as err:
        raise HealthSpecError(str(err)) from err


def _storm_condition(conditions: Sequence[Any], ctype: str) -> tuple[bool, float | None]:
    """(status is True, lastTransitionTime) of the condition ``ctype`` among the NodeHealthCheck's."""
    condition = _status_conditions.find(list(conditions), ctype)
    if condition is None or condition.get("status") != "True":
        return False, None
    return True, parse_time(condition.get("lastTransitionTime"), f"status.conditions[{ctype}].lastTransitionTime")


def storm_step(cooldown: float, breached: bool, conditions: Sequence[Any], now: float) -> StormStep:
    """One pass of storm recovery, for a pass that has unhealthy nodes (upstream looks at nothing else).

    A breach of minHealthy (or maxUnhealthy) starts a storm (StormActive True) and clears any cooldown; once the
    threshold is met again the cooldown starts (StormCooldownActive True) and new remediations still wait until
    ``cooldown`` seconds have passed since that condition's lastTransitionTime; then both go False and this
    very pass remediates. A breach during the cooldown starts it over.
    """
    active, _since = _storm_condition(conditions, STORM_ACTIVE)
    cooling, since = _storm_condition(conditions, STORM_COOLDOWN_ACTIVE)
    if breached:
        cleared = "Cooldown cleared - storm threshold triggered"
        changes = [ConditionChange(STORM_COOLDOWN_ACTIVE, "False", STORM_REASON, cleared)]
        if active:
            return StormStep(conditions=tuple(changes))
        changes.insert(
            0,
            ConditionChange(
                STORM_ACTIVE,
                "True",
                STORM_REASON,
                "Storm mode is activated - preventing any new remediation until the storm is over and cooldown "
                "duration expired",
            ),
        )
        return StormStep(conditions=tuple(changes), events=(STORM_STARTED,))
    if not active:
        return StormStep()
    if not cooling or since is None:
        started = ConditionChange(
            STORM_COOLDOWN_ACTIVE,
            "True",
            STORM_REASON,
            "Storm cooldown delay started - waiting before resuming normal remediation",
        )
        return StormStep(True, (started,), (STORM_COOLDOWN_STARTED,), cooldown + REQUEUE_SLACK_SECONDS)
    elapsed = now - since
    if elapsed < cooldown:
        return StormStep(True, requeue_after=cooldown - elapsed + REQUEUE_SLACK_SECONDS)
    resumed = "Storm mode is deactivated, remediation can occur normally"
    ended = (
        ConditionChange(STORM_ACTIVE, "False", STORM_REASON, resumed),
        ConditionChange(STORM_COOLDOWN_ACTIVE, "False", STORM_REASON, "Storm cooldown completed"),
    )
    return StormStep(conditions=ended, events=(STORM_ENDED,))


@dataclass(frozen=True)
class Evaluation:
    """The outcome of one pass; sequences are sorted by node name, so equal input gives equal output."""

    observed: int
    healthy: int
    min_healthy: int
    min_healthy_met: bool
    paused: bool
    decisions: tuple[NodeDecision, ...]
    to_remediate: tuple[RemediationRequest, ...] = ()
    to_delete: tuple[RemediationRef, ...] = ()
    to_mark_timed_out: tuple[RemediationRef, ...] = ()  # annotate remediation.medik8s.io/nhc-timed-out
    to_mark_healthy: tuple[RemediationRef, ...] = ()  # annotate remediation.medik8s.io/healthy-delay=now
    confirmations_to_clear: tuple[str, ...] = ()  # nodes whose manually-confirmed-healthy annotation goes
    requeue_after: float | None = None  # seconds until the next pass should look again
    messages: tuple[str, ...] = field(default=())  # warnings for events (e.g. an empty exclude label)
    pause_requests: tuple[str, ...] = ()  # spec.pauseRequests, as given
    storm: StormStep = field(default_factory=StormStep)  # stormCooldownDuration's decision
    lease_writes: tuple[nodelease.LeaseWrite, ...] = ()  # the node Leases to take, renew or give up

    @property
    def unhealthy_nodes(self) -> tuple[str, ...]:
        return tuple(d.node for d in self.decisions if d.unhealthy)

    @property
    def phase(self) -> str:
        """NodeHealthCheck status phase (Disabled is decided by the caller): Paused, Remediating or Enabled."""
        if self.paused:
            return "Paused"
        if any(d.remediations and d.code not in HEALTHY_CODES for d in self.decisions):
            return "Remediating"
        return "Enabled"

    def decision(self, node: str) -> NodeDecision:
        return next(d for d in self.decisions if d.node == node)

    def as_dict(self) -> dict[str, Any]:
        return {
            "observed": self.observed,
            "healthy": self.healthy,
            "min_healthy": self.min_healthy,
            "min_healthy_met": self.min_healthy_met,
            "paused": self.paused,
            "phase": self.phase,
            "unhealthy_nodes": list(self.unhealthy_nodes),
            "decisions": [d.as_dict() for d in self.decisions],
            "to_remediate": [r.as_dict() for r in self.to_remediate],
            "to_delete": [r.as_dict() for r in self.to_delete],
            "to_mark_timed_out": [r.as_dict() for r in self.to_mark_timed_out],
            "to_mark_healthy": [r.as_dict() for r in self.to_mark_healthy],
            "confirmations_to_clear": list(self.confirmations_to_clear),
            "requeue_after": self.requeue_after,
            "messages": list(self.messages),
            "lease_writes": [w.as_dict() for w in self.lease_writes],
            "storm": {
                "cooldown_blocks": self.storm.blocked,
                "conditions": [c.as_dict() for c in self.storm.conditions],
                "events": list(self.storm.events),
            },
        }


# -- small readers ----------------------------------------------------------------------------
def parse_time(value: object, field: str) -> float:
    """An RFC 3339 timestamp (``2026-01-02T03:04:05Z``, fractions and offsets allowed) in seconds since the epoch.

    HealthSpecError naming ``field`` for anything else: not a string, not RFC 3339 with ASCII digits, a date
    or time that does not exist (2026-02-30), outside the years 0001-9999 in UTC, or after
    ``rfc3339.LATEST_TIME`` (durations are added to the times read here).
    """
    try:
        return rfc3339.parse_time(value, field, latest=True)
    except rfc3339.TimeError as err:
        raise HealthSpecError(str(err)) from err


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _name(obj: Mapping[str, Any]) -> str:
    return str(_meta(obj).get("name", ""))


def _ref(remediation: Mapping[str, Any]) -> RemediationRef:
    meta = _meta(remediation)
    return RemediationRef(
        node=remediation_node(remediation),
        api_version=str(remediation.get("apiVersion", "")),
        kind=str(remediation.get("kind", "")),
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid") or ""),
        resource_version=str(meta.get("resourceVersion") or ""),
    )


# -- the nodes and remediation objects, checked ---------------------------------------------------
def _check_nodes(nodes: Sequence[Any]) -> None:
    """Every node as the evaluation reads it, errors naming its index and field: an object with a name,
    labels and annotations of strings, and conditions whose type and status are strings and whose
    lastTransitionTime is a timestamp (every one, not only the listed conditions')."""
    checked: set[str] = set()  # timestamps already checked: the nodes of a cluster share many
    for index, obj in enumerate(nodes):
        where = f"nodes[{index}]"
        if not isinstance(obj, Mapping):
            raise HealthSpecError(
                f"{where}: a Node must be an object as 'kubectl get nodes -o json' prints it in items, not "
                f"{type(obj).__name__}."
            )
        meta = obj.get("metadata") or {}
        if not isinstance(meta, Mapping):
            raise HealthSpecError(f"{where}.metadata: must be an object with the node's name.")
        name = meta.get("name")
        if not isinstance(name, str) or not name:
            raise HealthSpecError(f"{where}: metadata.name is missing or not a string; every Node needs its name.")
        _strings(meta.get("labels"), f"{where}.metadata.labels")
        _strings(meta.get("annotations"), f"{where}.metadata.annotations")
        status = obj.get("status") or {}
        if not isinstance(status, Mapping):
            raise HealthSpecError(f"{where}.status: must be an object with the node's conditions.")
        conditions = status.get("conditions") or []
        if not isinstance(conditions, (list, tuple)):
            raise HealthSpecError(f"{where}.status.conditions: must be a list of conditions.")
        for number, cond in enumerate(conditions):
            here = f"{where}.status.conditions[{number}]"
            if not isinstance(cond, Mapping):
                raise HealthSpecError(f"{here}: must be an object with type, status and lastTransitionTime.")
            for key in ("type", "status"):
                value = cond.get(key)
                if value is not None and not isinstance(value, str):
                    raise HealthSpecError(f"{here}.{key}: {value!r} is not a string; {_as_string(value, str(value))}.")
            since = cond.get("lastTransitionTime")
            if since is not None and not (isinstance(since, str) and since in checked):
                parse_time(since, f"{here}.lastTransitionTime")
                if isinstance(since, str):
                    checked.add(since)


def _strings(values: object, where: str) -> None:
    """Labels or annotations: a mapping of strings to strings (or nothing)."""
    if values is None:
        return
    if not isinstance(values, Mapping):
        raise HealthSpecError(f"{where}: must be a mapping of keys to string values.")
    for key, value in values.items():
        if not isinstance(key, str):
            raise HealthSpecError(f"{where}: the key {key!r} is not a string; quote it ('{key}').")
        if not isinstance(value, str):
            raise HealthSpecError(f"{where}.{key}: {value!r} is not a string; {_as_string(value, str(value).lower())}.")


def _as_string(value: object, meant: str) -> str:
    """How to give ``value`` (a YAML scalar that is not a string) as the string ``meant``."""
    if isinstance(value, (bool, int, float)):
        return f"quote it ('{meant}')"
    return "give a string ('' for an empty one)"


def _stamp(value: Any) -> float | None:
    """A time this collection (or upstream) wrote into an annotation; None when missing or not a valid time."""
    if not value:
        return None
    try:
        return parse_time(value, "annotation")
    except HealthSpecError:
        return None


def _check_remediations(remediations: Sequence[Any]) -> None:
    """The times the evaluation reads from the remediation objects, errors naming the index and field."""
    for index, obj in enumerate(remediations):
        where = f"remediations[{index}]"
        if not isinstance(obj, Mapping):
            raise HealthSpecError(f"{where}: a remediation must be an object, not {type(obj).__name__}.")
        meta = obj.get("metadata") or {}
        if not isinstance(meta, Mapping):
            raise HealthSpecError(f"{where}.metadata: must be an object.")
        if meta.get("creationTimestamp") is not None:
            parse_time(meta["creationTimestamp"], f"{where}.metadata.creationTimestamp")
        if meta.get("deletionTimestamp"):
            parse_time(meta["deletionTimestamp"], f"{where}.metadata.deletionTimestamp")
        annotations = meta.get("annotations") or {}
        if not isinstance(annotations, Mapping):
            raise HealthSpecError(f"{where}.metadata.annotations: must be a mapping of keys to string values.")
        # The healthy-delay stamp is not checked here: a bad one counts as missing where it is used (the pass
        # writes a new one), so one object's annotation never stops the passes of every node.


# -- the spec ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Condition:
    type: str
    status: str
    seconds: float


def _conditions(spec: Mapping[str, Any]) -> list[_Condition]:
    raw = spec.get("unhealthyConditions")
    if raw is None:
        raw = DEFAULT_UNHEALTHY_CONDITIONS
    if not isinstance(raw, (list, tuple)):
        raise HealthSpecError("spec.unhealthyConditions: must be a list of {type, status, duration}.")
    out = []
    for index, cond in enumerate(raw):
        where = f"spec.unhealthyConditions[{index}]"
        if not isinstance(cond, Mapping) or not cond.get("type") or not cond.get("status"):
            raise HealthSpecError(f"{where}: needs type, status and duration (for example Ready, Unknown, 300s).")
        try:
            seconds = parse_duration(cond.get("duration"), f"{where}.duration")
        except DurationError as err:
            raise HealthSpecError(str(err)) from err
        out.append(_Condition(str(cond["type"]), str(cond["status"]), seconds))
    return out


def _templates(spec: Mapping[str, Any]) -> list[Template]:
    classic = spec.get("remediationTemplate")
    escalating = spec.get("escalatingRemediations")
    if bool(classic) == bool(escalating):
        raise HealthSpecError(
            "spec: set exactly one of remediationTemplate and escalatingRemediations "
            f"(got {'both' if classic else 'neither'})."
        )
    if classic:
        _check_reference(classic, "spec.remediationTemplate")
        return [Template(classic)]
    if not isinstance(escalating, list):
        raise HealthSpecError("spec.escalatingRemediations: must be a list of {remediationTemplate, order, timeout}.")
    steps = []
    orders: set[int] = set()
    for index, step in enumerate(escalating):
        where = f"spec.escalatingRemediations[{index}]"
        if not isinstance(step, Mapping):
            raise HealthSpecError(f"{where}: must be a mapping with remediationTemplate, order and timeout.")
        _check_reference(step.get("remediationTemplate"), f"{where}.remediationTemplate")
        order = step.get("order")
        if isinstance(order, bool) or not isinstance(order, int):
            raise HealthSpecError(f"{where}.order: {order!r} must be a whole number.")
        if order in orders:
            raise HealthSpecError(f"{where}.order: {order} is used twice; each step needs its own order.")
        orders.add(order)
        try:
            timeout = parse_duration(step.get("timeout"), f"{where}.timeout")
        except DurationError as err:
            raise HealthSpecError(str(err)) from err
        steps.append(Template(step["remediationTemplate"], order, timeout))
    return sorted(steps, key=lambda t: t.order if t.order is not None else 0)


def _check_reference(ref: object, where: str) -> None:
    if not isinstance(ref, Mapping) or not ref.get("kind") or not ref.get("name"):
        raise HealthSpecError(f"{where}: needs at least kind and name (and apiVersion, namespace).")
    if not str(ref["kind"]).endswith("Template"):
        raise HealthSpecError(f"{where}.kind: {ref['kind']!r} must be a template kind ending in 'Template'.")


def min_healthy_for(spec: Mapping[str, Any], observed: int) -> int:
    """The number of healthy nodes new remediations need, from minHealthy or maxUnhealthy (rounded up).

    ``maxUnhealthy`` gives ``observed - scaled(maxUnhealthy)``, never below 0.
    """
    has_min, has_max = spec.get("minHealthy") is not None, spec.get("maxUnhealthy") is not None
    if has_min == has_max:
        raise HealthSpecError(
            f"spec: set exactly one of minHealthy and maxUnhealthy (got {'both' if has_min else 'neither'})."
        )
    name = "minHealthy" if has_min else "maxUnhealthy"
    value = spec[name]
    try:
        number = parse(value, f"spec.{name}")[0]
        if number < 0:
            raise HealthSpecError(f"spec.{name}: {value!r} is negative; give 0 or more, or a percentage.")
        absolute = scaled(value, observed, True, f"spec.{name}")
    except IntOrPercentError as err:
        raise HealthSpecError(str(err)) from err
    return absolute if has_min else max(0, observed - absolute)


def _healthy_delay(spec: Mapping[str, Any]) -> float:
    value = spec.get("healthyDelay")
    if value is None:
        return 0.0
    try:
        return parse_duration(value, "spec.healthyDelay", allow_negative=True)
    except DurationError as err:
        raise HealthSpecError(str(err)) from err


# -- the evaluation ---------------------------------------------------------------------------
@dataclass
class _Pass:
    """Mutable collector used while evaluating; frozen into an Evaluation at the end."""

    decisions: dict[str, NodeDecision] = field(default_factory=dict)
    to_remediate: list[RemediationRequest] = field(default_factory=list)
    to_delete: list[RemediationRef] = field(default_factory=list)
    to_mark_timed_out: list[RemediationRef] = field(default_factory=list)
    to_mark_healthy: list[RemediationRef] = field(default_factory=list)
    confirmations_to_clear: list[str] = field(default_factory=list)
    requeue: list[float] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    lease_writes: list[nodelease.LeaseWrite] = field(default_factory=list)

    def again_in(self, seconds: float) -> None:
        self.requeue.append(max(0.0, seconds))


@dataclass(frozen=True)
class _Inputs:
    """A NodeHealthCheck pass's inputs, checked and indexed once."""

    now: float
    conditions: list[_Condition]
    templates: list[Template]
    healthy_delay: float
    cooldown: float | None
    pause_requests: list[str]
    under_maintenance: frozenset[str]
    all_names: frozenset[str]
    selected: list[Mapping[str, Any]]  # by name
    by_node: dict[str, list[Mapping[str, Any]]]  # remediation objects by node, by name
    control_plane_names: frozenset[str]
    node_leases: Mapping[str, nodelease.NodeLease] | None
    holder: str

    @property
    def paused(self) -> bool:
        return bool(self.pause_requests)

    def rem_names(self, node: str) -> tuple[str, ...]:
        return tuple(_name(r) for r in self.by_node.get(node, []))


@dataclass(frozen=True)
class _Gate:
    """What stops new remediation objects this pass, whatever the node."""

    healthy: int
    observed: int
    min_healthy: int
    storm: StormStep

    @property
    def min_met(self) -> bool:
        return self.healthy >= self.min_healthy


def evaluate(
    spec: Mapping[str, Any],
    nodes: Sequence[Mapping[str, Any]],
    remediations: Sequence[Mapping[str, Any]],
    now: float,
    maintenance: Iterable[str] = (),
    status_conditions: Sequence[Any] = (),
    node_leases: Mapping[str, nodelease.NodeLease] | None = None,
    holder: str = "",
) -> Evaluation:
    """One evaluation pass of a NodeHealthCheck ``spec`` at ``now`` (seconds since the epoch); see the module
    docstring for the rules.
    ``status_conditions``: the NodeHealthCheck's ``status.conditions`` as read (the storm state, see storm_step).
    ``node_leases``: the node Leases by node (see core/remediation/nodelease.py), taken, kept and given up as
    ``holder``;    None leaves node Leases out of the evaluation.

    Raises HealthSpecError naming the field for a spec the API server would refuse.

    The pass: read and check the inputs; delete the objects of nodes that are gone; classify every selected
    node (healthy, soon unhealthy, recovering, unhealthy); then decide for each unhealthy node, within
    minHealthy, storm recovery, pauses, maintenance, exclusion, one control-plane node at a time and node
    Leases.
    """
    inputs = _read_inputs(spec, nodes, remediations, now, maintenance, status_conditions, node_leases, holder)
    work = _Pass()
    if not inputs.paused:
        _orphans(inputs, work)
    matching, healthy = _classify(inputs, work)

    observed = len(inputs.selected)
    min_healthy = min_healthy_for(spec, observed)
    # Storm recovery, as upstream: only with unhealthy nodes, and not while paused.
    storm = StormStep()
    if inputs.cooldown is not None and matching and not inputs.paused:
        storm = storm_step(inputs.cooldown, healthy < min_healthy, status_conditions, inputs.now)
        if storm.requeue_after is not None:
            work.again_in(storm.requeue_after)
    gate = _Gate(healthy, observed, min_healthy, storm)

    # Control-plane nodes with a remediation object: at most one at a time.
    cp_remediated = {node for node, rems in inputs.by_node.items() if rems and node in inputs.control_plane_names}
    cp_remediated |= {
        remediation_node(r) for r in remediations if CONTROL_PLANE_CR_LABEL in (_meta(r).get("labels") or {})
    }
    for node, matched, held in matching:
        _decide_unhealthy(inputs, gate, node, matched, held, cp_remediated, work)

    return Evaluation(
        observed=observed,
        healthy=healthy,
        min_healthy=min_healthy,
        min_healthy_met=gate.min_met,
        paused=inputs.paused,
        decisions=tuple(work.decisions[n] for n in sorted(work.decisions)),
        to_remediate=tuple(work.to_remediate),
        to_delete=tuple(sorted(set(work.to_delete), key=_ref_key)),
        to_mark_timed_out=tuple(sorted(set(work.to_mark_timed_out), key=_ref_key)),
        to_mark_healthy=tuple(sorted(set(work.to_mark_healthy), key=_ref_key)),
        confirmations_to_clear=tuple(sorted(set(work.confirmations_to_clear))),
        requeue_after=_round_up(min(work.requeue)) if work.requeue else None,
        messages=tuple(work.messages),
        pause_requests=tuple(inputs.pause_requests),
        storm=storm,
        lease_writes=tuple(sorted(work.lease_writes, key=lambda w: w.node)),
    )


def _read_inputs(
    spec: Mapping[str, Any],
    nodes: Sequence[Mapping[str, Any]],
    remediations: Sequence[Mapping[str, Any]],
    now: float,
    maintenance: Iterable[str],
    status_conditions: Sequence[Any],
    node_leases: Mapping[str, nodelease.NodeLease] | None,
    holder: str,
) -> _Inputs:
    """Check every input (HealthSpecError naming the field) and index it."""
    if not isinstance(spec, Mapping):
        raise HealthSpecError("spec: must be a mapping (the spec of a NodeHealthCheck).")
    try:
        moment = rfc3339.check_time(now, "now")
    except rfc3339.TimeError as err:
        raise HealthSpecError(str(err)) from err
    selector = spec.get("selector")
    try:
        validate(selector, "spec.selector")
    except SelectorError as err:
        raise HealthSpecError(str(err)) from err
    _check_nodes(nodes)
    _check_remediations(remediations)
    conditions = _conditions(spec)
    templates = _templates(spec)
    healthy_delay = _healthy_delay(spec)
    cooldown = storm_cooldown_of(spec)
    if not isinstance(status_conditions, Sequence) or isinstance(status_conditions, (str, bytes)):
        raise HealthSpecError("status.conditions: must be a list (the NodeHealthCheck's status conditions).")
    by_node: dict[str, list[Mapping[str, Any]]] = {}
    for rem in sorted(remediations, key=lambda r: (remediation_node(r), _name(r))):
        by_node.setdefault(remediation_node(rem), []).append(rem)
    return _Inputs(
        now=moment,
        conditions=conditions,
        templates=templates,
        healthy_delay=healthy_delay,
        cooldown=cooldown,
        pause_requests=[str(p) for p in spec.get("pauseRequests") or []],
        under_maintenance=frozenset(maintenance),
        all_names=frozenset(_name(n) for n in nodes),
        selected=sorted((n for n in nodes if matches(selector, _meta(n).get("labels"))), key=_name),
        by_node=by_node,
        control_plane_names=frozenset(_name(n) for n in nodes if is_control_plane(n)),
        node_leases=node_leases,
        holder=holder,
    )


def _orphans(inputs: _Inputs, work: _Pass) -> None:
    """Remediation objects whose node no longer exists are deleted (unless the node's deletion was expected and
    the remediation has not succeeded yet)."""
    for node_name, rems in inputs.by_node.items():
        if node_name in inputs.all_names:
            continue
        for rem in rems:
            expected = _status_conditions.status_of(rem, "PermanentNodeDeletionExpected") == "True"
            if expected and _status_conditions.status_of(rem, "Succeeded") != "True":
                continue
            if not _meta(rem).get("deletionTimestamp"):
                work.to_delete.append(_ref(rem))


def _classify(
    inputs: _Inputs, work: _Pass
) -> tuple[list[tuple[Mapping[str, Any], tuple[str, ...], float | None]], int]:
    """Decide every selected node that is not unhealthy (healthy, soon unhealthy, recovering); return the
    unhealthy ones with the conditions they match and how long they have held, and the number of healthy nodes."""
    matching: list[tuple[Mapping[str, Any], tuple[str, ...], float | None]] = []
    healthy = 0
    for node in inputs.selected:
        name = _name(node)
        rems = inputs.by_node.get(name, [])
        cp = name in inputs.control_plane_names
        matched, soonest, held = _match(node, inputs.conditions, inputs.now)
        if matched:
            matching.append((node, matched, held))
            continue
        if soonest is not None:
            work.again_in(soonest + REQUEUE_SLACK_SECONDS)
            work.decisions[name] = NodeDecision(
                name,
                Code.SOON_UNHEALTHY,
                f"a listed condition holds but for {soonest:.0f}s more its duration has not passed; "
                "neither counted healthy nor remediated yet",
                cp,
                (),
                inputs.rem_names(name),
            )
            continue
        if not rems:
            healthy += 1
            work.decisions[name] = NodeDecision(name, Code.HEALTHY, "no listed condition holds", cp)
            lease = (inputs.node_leases or {}).get(name)
            if lease is not None and lease.holder == inputs.holder:
                work.lease_writes.append(nodelease.LeaseWrite(name, "release", inputs.holder, current=lease))
            continue
        work.decisions[name] = _recovering(node, rems, inputs.healthy_delay, inputs.now, inputs.paused, work)
    return matching, healthy


def _decide_unhealthy(
    inputs: _Inputs,
    gate: _Gate,
    node: Mapping[str, Any],
    matched: tuple[str, ...],
    held: float | None,
    cp_remediated: set[str],
    work: _Pass,
) -> None:
    """The decision for one unhealthy node: keep its remediation going, or create the next one, or why not."""
    now, holder, node_leases = inputs.now, inputs.holder, inputs.node_leases
    name = _name(node)
    labels = _meta(node).get("labels") or {}
    cp = name in inputs.control_plane_names
    rems = inputs.by_node.get(name, [])
    shown = ", ".join(matched)

    def decide(code: str, reason: str) -> None:
        work.decisions[name] = NodeDecision(name, code, reason, cp, matched, inputs.rem_names(name), held)

    step, current, timed_out = _next_step(rems, inputs.templates, now, work)
    if step is None and current is not None:
        reason = f"unhealthy ({shown}); remediation {_name(current)} is in progress"
        # as upstream, its Lease is looked after only in a pass that may remediate
        if node_leases is not None and not inputs.paused and gate.min_met and not gate.storm.blocked:
            reason += _keep_lease(name, current, inputs.templates, node_leases.get(name), holder, now, work)
        decide(Code.REMEDIATING, reason)
        return
    # Something is to be written for this node: a new object, or a timed-out mark.
    if inputs.paused:
        decide(Code.SKIPPED_PAUSED, f"unhealthy ({shown}); pauseRequests: {', '.join(inputs.pause_requests)}")
        return
    if not gate.min_met:
        decide(
            Code.SKIPPED_MIN_HEALTHY,
            f"unhealthy ({shown}); only {gate.healthy} of {gate.observed} nodes are healthy and "
            f"{gate.min_healthy} are needed before remediating",
        )
        return
    if gate.storm.blocked:
        decide(
            Code.SKIPPED_STORM,
            f"unhealthy ({shown}); after a storm (fewer than {gate.min_healthy} healthy nodes) new remediations "
            "wait for stormCooldownDuration",
        )
        return
    if name in inputs.under_maintenance:
        work.again_in(BLOCKED_RETRY_SECONDS)
        decide(Code.SKIPPED_MAINTENANCE, f"unhealthy ({shown}); the node is under maintenance")
        return
    exclude = labels.get(EXCLUDE_LABEL)
    if exclude == "true":
        decide(Code.SKIPPED_EXCLUDED, f"unhealthy ({shown}); labelled {EXCLUDE_LABEL}=true")
        return
    if exclude == "":  # as upstream: only an empty value is called out ("false" says what it means)
        work.messages.append(f"{name}: label {EXCLUDE_LABEL} is empty, not 'true', so the node is not excluded")
    if cp and cp_remediated - {name}:
        work.again_in(BLOCKED_RETRY_SECONDS)
        others = ", ".join(sorted(cp_remediated - {name}))
        decide(
            Code.SKIPPED_CONTROL_PLANE,
            f"unhealthy ({shown}); control-plane node {others} is being remediated (one at a time)",
        )
        return
    work.to_mark_timed_out.extend(timed_out)
    if step is None:
        decide(Code.NO_TEMPLATE_LEFT, f"unhealthy ({shown}); every escalating remediation timed out")
        return
    if node_leases is not None:
        lease = node_leases.get(name)
        if lease is not None and lease.held_by_other(holder, now):
            work.again_in(nodelease.TAKEN_RETRY_SECONDS)
            until = lease.expires()
            decide(
                Code.SKIPPED_LEASE,
                f"unhealthy ({shown}); its node Lease {nodelease.name_for(name)} is held by {lease.holder}"
                + (f" until {rfc3339.format_time(until)}" if until is not None else ""),
            )
            return
        duration = nodelease.lease_seconds(step.timeout_seconds)
        work.lease_writes.append(nodelease.LeaseWrite(name, "take", holder, duration, lease, fresh=not rems))
    if cp:
        cp_remediated.add(name)
    work.to_remediate.append(RemediationRequest(name, step, cp))
    if step.timeout_seconds is not None:
        work.again_in(step.timeout_seconds + REQUEUE_SLACK_SECONDS)
    template = f"{step.kind}/{step.name}"
    if rems:
        decide(Code.ESCALATE, f"unhealthy ({shown}); the previous remediation timed out, escalating to {template}")
    else:
        decide(Code.REMEDIATE, f"unhealthy ({shown}); remediating with {template}")


def _ref_key(ref: RemediationRef) -> tuple[str, str, str, str]:
    return (ref.node, ref.kind, ref.namespace, ref.name)


def _round_up(seconds: float) -> float:
    return float(math.ceil(round(seconds, 6)))


def _match(
    node: Mapping[str, Any], conditions: list[_Condition], now: float
) -> tuple[tuple[str, ...], float | None, float | None]:
    """(conditions that match now, seconds until the soonest one that will match, seconds the longest-held matching
    one has held: None when none matches or one has no transition time) for ``node``."""
    matched: list[str] = []
    soonest: float | None = None
    held_longest: float | None = None
    forever = False
    node_conditions = (node.get("status") or {}).get("conditions") or []
    for wanted in conditions:
        for cond in node_conditions:
            if cond.get("type") != wanted.type or cond.get("status") != wanted.status:
                continue
            since = cond.get("lastTransitionTime")
            if since is None:  # no transition time: it has held for ever
                matched.append(f"{wanted.type}={wanted.status}")
                forever = True
                continue
            start = parse_time(since, f"node {_name(node)}: condition {wanted.type} lastTransitionTime")
            held = now - start
            if held > wanted.seconds:
                matched.append(f"{wanted.type}={wanted.status}")
                held_longest = held if held_longest is None else max(held_longest, held)
            else:
                left = wanted.seconds - held
                soonest = left if soonest is None else min(soonest, left)
    longest = None if forever or held_longest is None else round(held_longest, 3)
    return tuple(dict.fromkeys(matched)), (None if matched else soonest), longest


def _template_of(rem: Mapping[str, Any], templates: list[Template]) -> Template | None:
    annotations = _meta(rem).get("annotations") or {}
    kind = str(rem.get("kind", ""))
    wanted = annotations.get(TEMPLATE_NAME_ANNOTATION)
    for template in templates:
        if template.remediation_kind == kind and (wanted is None or template.name == wanted):
            return template
    return None


def _timed_out(rem: Mapping[str, Any], template: Template, now: float) -> bool:
    annotations = _meta(rem).get("annotations") or {}
    if TIMED_OUT_ANNOTATION in annotations:
        return True
    if _status_conditions.status_of(rem, "Succeeded") == "False":
        return True
    created = _meta(rem).get("creationTimestamp")
    if template.timeout_seconds is None or created is None:
        return False
    started = parse_time(created, f"remediation {_name(rem)}: metadata.creationTimestamp")
    return now > started + template.timeout_seconds


def _keep_lease(
    node: str,
    current: Mapping[str, Any],
    templates: list[Template],
    lease: nodelease.NodeLease | None,
    holder: str,
    now: float,
    work: _Pass,
) -> str:
    """The node Lease of a remediation in progress, if this NodeHealthCheck holds it: renewed before it runs out,
    or, once the remediation is overdue, given up with the remediation marked timed out. Returns what the
    decision's reason gets added."""
    if lease is None or lease.holder != holder:
        return ""
    template = _template_of(current, templates) or templates[0]
    index = templates.index(template)
    length = template.timeout_seconds if template.timeout_seconds is not None else nodelease.DEFAULT_REMEDIATION_SECONDS
    previous = sum(t.timeout_seconds or 0.0 for t in templates[:index])
    overdue = nodelease.overdue_at(lease, length, previous)
    if overdue is not None and now > overdue:
        work.lease_writes.append(nodelease.LeaseWrite(node, "release", holder, current=lease))
        annotations = _meta(current).get("annotations") or {}
        if TIMED_OUT_ANNOTATION not in annotations and _status_conditions.status_of(current, "Succeeded") != "True":
            work.to_mark_timed_out.append(_ref(current))
        return f"; overdue since {rfc3339.format_time(overdue)}: timed out, its node Lease given up"
    if nodelease.needs_renewal(lease, length, now):
        work.lease_writes.append(
            nodelease.LeaseWrite(node, "renew", holder, nodelease.lease_seconds(template.timeout_seconds), lease)
        )
        work.again_in(length)
    else:
        end = lease.expires()
        if end is not None:
            work.again_in(end - length - now + REQUEUE_SLACK_SECONDS)
    if overdue is not None:
        work.again_in(overdue - now + REQUEUE_SLACK_SECONDS)
    return ""


def _next_step(
    rems: list[Mapping[str, Any]], templates: list[Template], now: float, work: _Pass
) -> tuple[Template | None, Mapping[str, Any] | None, list[RemediationRef]]:
    """(template to create an object from, remediation in progress, objects to mark timed out).

    Walks the templates in order: a template whose object timed out passes to the next; the first
    template without an object is the step; an object not timed out is in progress.
    """
    timed_out: list[RemediationRef] = []
    for template in templates:
        mine = [r for r in rems if _template_of(r, templates) == template]
        if not mine:
            return template, None, timed_out
        current = mine[-1]
        if template.order is None:
            # a single template has no next step: its object stays, timed out or not, until the node is healthy
            return None, current, timed_out
        if not _timed_out(current, template, now):
            if template.timeout_seconds is not None and _meta(current).get("creationTimestamp"):
                started = parse_time(_meta(current)["creationTimestamp"], "metadata.creationTimestamp")
                left = started + template.timeout_seconds - now
                work.again_in(left + REQUEUE_SLACK_SECONDS)
            return None, current, timed_out
        annotations = _meta(current).get("annotations") or {}
        if TIMED_OUT_ANNOTATION not in annotations and _status_conditions.status_of(current, "Succeeded") != "True":
            timed_out.append(_ref(current))
    return None, None, timed_out


def _recovering(
    node: Mapping[str, Any],
    rems: list[Mapping[str, Any]],
    delay: float,
    now: float,
    paused: bool,
    work: _Pass,
) -> NodeDecision:
    """The decision for a node whose conditions are healthy but whose remediation objects remain."""
    name = _name(node)
    cp = is_control_plane(node)
    rem_names = tuple(_name(r) for r in rems)
    live = [r for r in rems if not _meta(r).get("deletionTimestamp")]
    if paused:
        return NodeDecision(name, Code.RECOVERING, "healthy again; paused, so its remediation stays", cp, (), rem_names)
    if not live:
        return NodeDecision(name, Code.RECOVERING, "healthy again; its remediation is being deleted", cp, (), rem_names)
    annotations = _meta(node).get("annotations") or {}
    if delay < 0:
        if CONFIRMED_HEALTHY_ANNOTATION not in annotations:
            return NodeDecision(
                name,
                Code.AWAITING_CONFIRMATION,
                "healthy again; healthyDelay is negative, so it waits for the annotation "
                f"{CONFIRMED_HEALTHY_ANNOTATION}",
                cp,
                (),
                rem_names,
            )
        work.to_delete.extend(_ref(r) for r in live)
        work.confirmations_to_clear.append(name)
        return NodeDecision(name, Code.RECOVERING, "healthy again and confirmed by hand", cp, (), rem_names)
    if delay > 0:
        stamps = [
            stamp
            for r in live
            for stamp in [_stamp((_meta(r).get("annotations") or {}).get(HEALTHY_DELAY_ANNOTATION))]
            if stamp is not None
        ]
        if not stamps:
            work.to_mark_healthy.extend(_ref(r) for r in live)
            work.again_in(delay + REQUEUE_SLACK_SECONDS)
            return NodeDecision(
                name, Code.HEALTHY_DELAYED, f"healthy again; waiting healthyDelay ({delay:g}s)", cp, (), rem_names
            )
        left = min(stamps) + delay - now
        if left > 0:
            work.again_in(left + REQUEUE_SLACK_SECONDS)
            return NodeDecision(
                name, Code.HEALTHY_DELAYED, f"healthy again; {left:.0f}s of healthyDelay left", cp, (), rem_names
            )
    work.to_delete.extend(_ref(r) for r in live)
    return NodeDecision(name, Code.RECOVERING, "healthy again; deleting its remediation", cp, (), rem_names)
