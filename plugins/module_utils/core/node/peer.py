# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node agent's decisions: is my node healthy, should it fence itself, what do I tell a peer.

Pure, standard library only, Python 3.9 at run time: the node agent imports this file on the node's
system Python. No clock and no network: the agent asks its peers and passes the answers (and the
seconds since the last answer) in. Semantics of medik8s Self Node Remediation's agent, with
``minPeersForRemediation`` honoured and the peers' answers counted by majority (see below).

Worker verdict, after a failed API probe (``worker_verdict``), first rule that applies:

=======================================  ==========================  =========  ===========
condition                                code                        fence      confirmed
=======================================  ==========================  =========  ===========
errors < maxApiErrorThreshold            ThresholdNotReached         no         no
worker peers < minPeersForRemediation    TooFewPeers                 no         no
no worker peers (minPeers 0)             NoPeersIsolated             yes        no
more Unhealthy than Healthy answers      PeerReportsUnhealthy        yes        no
Healthy from a majority of those asked   PeerReportsHealthy          no         yes
API errors so far > peers // 2           ApiServerOutage             no         no
no decision, an answer within 30 s       RecentPeerAnswer            no         no
no decision, no answer for > 30 s        Isolated                    yes        no
=======================================  ==========================  =========  ===========

Then the isolation limit (``limit_verdict``), over every verdict above that neither fences nor is
confirmed: once the node has been cut off from its remediation state (no read of its own SelfNodeRemediations
and no confirmed verdict) for ``safetime.isolation_limit`` seconds, it fences (``IsolationLimit``). The agent
enforces it on the thread that feeds the watchdog, whatever the checks and the peer rounds are doing, so
nothing a peer answers (Busy, ApiError, a tie, a stranger's close, a slow Healthy against silence), no
lookup or read that hangs and no ``minPeersForRemediation`` keeps a cut-off node feeding its watchdog
past it. A confirmed verdict restarts that clock from the start of its round (a peer's Healthy answer
comes from a read made after the question was sent). The limit runs from the node's first confirmation in
its boot and rests while the node shows itself not reboot-capable (``limit_in_force``); the peers are asked
at every failed check once past the threshold, and before it once the limit is near (``peers_due``).

Batches are asked in order (3, then ``max(3, (N - 3) // 10)``; :func:`safetime.peer_batches`); after
each batch the rules are applied to all the answers so far, the first batch that decides ends the round,
so the caller passes the batches as a lazy iterable.

Majority, not the first answer (a deliberate difference from upstream, where one Healthy answer in a
batch stops the fence and otherwise one Unhealthy answer fences): a peer holding a valid certificate
may be compromised or wrong, and one such peer must not be able to reboot a node that only lost the API
server, nor keep a node running that the cluster is about to treat as rebooted. More Unhealthy than Healthy
answers over the batches asked so far fence. Healthy answers confirm the node only when they come from more
than half of the peers asked so far, the silent ones included (2 of the first 3): one Healthy answer against
silence, or a tie, confirms nothing and so cannot extend the isolation limit. With one lying peer among
honest ones that can read the API the honest answers win; a node with a single peer depends on it, as
upstream. In a control-plane outage the honest peers answer API error, which counts for neither side, so one
lying Unhealthy answer still fences, as upstream (it is the node that cannot reach the API); an outage that
lasts past the isolation limit fences the nodes that cannot read their remediation state (the cluster cannot
tell them from nodes cut off alone).

``Busy`` is not an answer about the node but a sign of life: the peer accepted the connection and closed
it before any TLS, because it was serving as many peers as it may (or because it does not know the asker:
the two look the same). It keeps the node from counting as isolated before the isolation limit, and it is
never counted as Healthy, Unhealthy or API error.

Control-plane verdict (``control_plane_verdict``), for a node labelled control-plane, from the worker
verdict, the answers of all control-plane peers and the node's self-diagnostics: more control-plane
peers reporting Unhealthy than Healthy → fence; worker PeerReportsUnhealthy → fence; worker Isolated or
NoPeersIsolated → healthy only if a control-plane peer answered; ApiServerOutage → healthy only if the
diagnostics pass; TooFewPeers → healthy only if the diagnostics pass and a control-plane peer
answered; any other worker verdict → healthy. It is confirmed when the worker verdict is, or when more than
half of its control-plane peers answered Healthy; the isolation limit applies to it as to a worker's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import rfc3339, safetime
from .errors import NodeopsError
from .nodes import TIMED_OUT_ANNOTATION, is_control_plane, remediation_node

# Answers of a peer (upstream's HealthCheckResponse values).
HEALTHY = 1
UNHEALTHY = 2
API_ERROR = 3
REQUEST_FAILED = -1  # no answer: dial or request failed or timed out (counted by the asker only)
BUSY = -2  # the peer accepted the connection, then closed it unanswered: alive, but full (asker only)
ANSWER_NAMES = {
    HEALTHY: "Healthy",
    UNHEALTHY: "Unhealthy",
    API_ERROR: "ApiError",
    REQUEST_FAILED: "RequestFailed",
    BUSY: "Busy",
}

#: Seconds without any peer answer after which a node that cannot decide counts as isolated.
MAX_SECONDS_WITHOUT_PEER_ANSWER = 30.0


class Code:
    THRESHOLD_NOT_REACHED = "ThresholdNotReached"
    TOO_FEW_PEERS = "TooFewPeers"
    NO_PEERS_ISOLATED = "NoPeersIsolated"
    PEER_REPORTS_HEALTHY = "PeerReportsHealthy"
    PEER_REPORTS_UNHEALTHY = "PeerReportsUnhealthy"
    API_SERVER_OUTAGE = "ApiServerOutage"
    RECENT_PEER_ANSWER = "RecentPeerAnswer"
    ISOLATED = "Isolated"
    ISOLATION_LIMIT = "IsolationLimit"
    # control-plane verdict only
    CONTROL_PLANE_PEER_REPORTS_UNHEALTHY = "ControlPlanePeerReportsUnhealthy"
    CONTROL_PLANE_PEERS_REACHABLE = "ControlPlanePeersReachable"
    CONTROL_PLANE_PEERS_UNREACHABLE = "ControlPlanePeersUnreachable"
    DIAGNOSTICS_PASSED = "DiagnosticsPassed"
    DIAGNOSTICS_FAILED = "DiagnosticsFailed"


@dataclass(frozen=True)
class Verdict:
    code: str
    fence: bool
    #: a majority of the peers asked said Healthy: the isolation limit's clock restarts from the start of the
    #: round (the agent keeps its API error count, so it asks again at the next failed check)
    confirmed: bool
    reason: str
    answers: tuple[int, ...] = ()  # every answer received this round, in batch order
    batches_asked: int = 0
    peers_asked: int = 0

    @property
    def reset_errors(self) -> bool:
        return self.confirmed

    def as_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "fence": self.fence,
            "confirmed": self.confirmed,
            "reason": self.reason,
            "answers": [ANSWER_NAMES.get(a, str(a)) for a in self.answers],
            "batches_asked": self.batches_asked,
            "peers_asked": self.peers_asked,
        }


def majority(asked: int) -> int:
    """The fewest Healthy answers that confirm a node after asking ``asked`` peers: more than half of them
    (1 of 1, 2 of 2, 2 of 3, 3 of 4), the peers that did not answer included."""
    return asked // 2 + 1


def worker_verdict(
    error_count: int,
    threshold: int,
    worker_peers: int,
    min_peers: int,
    batches: Iterable[Sequence[int]],
    seconds_since_last_answer: float,
) -> Verdict:
    """The worker verdict after ``error_count`` consecutive failed API probes.

    ``batches`` yields the answers of each batch of peers in turn (only consumed when peers are to be
    asked, and only until a batch decides); ``seconds_since_last_answer`` is the time since any peer
    last answered, measured by the caller before this round (an answer in this round makes it 0).
    """
    if error_count < threshold:
        return Verdict(
            Code.THRESHOLD_NOT_REACHED, False, False, f"{error_count} of {threshold} API errors: peers not asked yet"
        )
    if worker_peers < min_peers:
        return Verdict(
            Code.TOO_FEW_PEERS,
            False,
            False,
            f"{worker_peers} worker peers, fewer than minPeersForRemediation {min_peers}: assuming healthy",
        )
    if worker_peers == 0:
        return Verdict(Code.NO_PEERS_ISOLATED, True, False, "no worker peers and minPeersForRemediation 0: isolated")
    answers: list[int] = []
    batches_asked = 0
    for batch in batches:
        batches_asked += 1
        answers.extend(batch)
        asked = len(answers)
        healthy, unhealthy = answers.count(HEALTHY), answers.count(UNHEALTHY)
        so_far = f"{healthy} Healthy, {unhealthy} Unhealthy of {asked} peers asked"
        if unhealthy > healthy:
            return Verdict(
                Code.PEER_REPORTS_UNHEALTHY,
                True,
                False,
                f"peers report a remediation for this node ({so_far})",
                tuple(answers),
                batches_asked,
                asked,
            )
        if healthy >= majority(asked):
            return Verdict(
                Code.PEER_REPORTS_HEALTHY,
                False,
                True,
                f"a majority of the peers asked see no remediation for this node ({so_far})",
                tuple(answers),
                batches_asked,
                asked,
            )
        api_errors = answers.count(API_ERROR)
        if api_errors > worker_peers // 2:
            return Verdict(
                Code.API_SERVER_OUTAGE,
                False,
                False,
                f"{api_errors} of {worker_peers} peers cannot reach the API server either: control-plane outage",
                tuple(answers),
                batches_asked,
                asked,
            )
    received = tuple(answers)
    if any(answer != REQUEST_FAILED for answer in received) or seconds_since_last_answer <= (
        MAX_SECONDS_WITHOUT_PEER_ANSWER
    ):
        return Verdict(
            Code.RECENT_PEER_ANSWER,
            False,
            False,
            "no decision, but a peer answered recently",
            received,
            batches_asked,
            len(received),
        )
    return Verdict(
        Code.ISOLATED,
        True,
        False,
        f"no peer answered for {seconds_since_last_answer:.0f}s (more than {MAX_SECONDS_WITHOUT_PEER_ANSWER:.0f}s):"
        " isolated",
        received,
        batches_asked,
        len(received),
    )


def control_plane_verdict(worker: Verdict, control_plane_answers: Sequence[int], diagnostics_ok: bool) -> Verdict:
    """The verdict of a control-plane node from its worker verdict, the answers of all its control-plane
    peers (asked in one batch) and whether its self-diagnostics pass."""
    reachable = any(answer != REQUEST_FAILED for answer in control_plane_answers)
    answers = worker.answers + tuple(control_plane_answers)
    cp_healthy = control_plane_answers.count(HEALTHY)
    cp_unhealthy = control_plane_answers.count(UNHEALTHY) > cp_healthy
    cp_confirmed = bool(control_plane_answers) and cp_healthy >= majority(len(control_plane_answers))

    def verdict(code: str, fence: bool, reason: str) -> Verdict:
        confirmed = (worker.confirmed or cp_confirmed) and not fence
        return Verdict(code, fence, confirmed, reason, answers, worker.batches_asked, len(answers))

    if cp_unhealthy:
        return verdict(
            Code.CONTROL_PLANE_PEER_REPORTS_UNHEALTHY, True, "more control-plane peers report a remediation than not"
        )
    if worker.code == Code.PEER_REPORTS_UNHEALTHY:
        return verdict(worker.code, True, worker.reason)
    if worker.code in (Code.ISOLATED, Code.NO_PEERS_ISOLATED):
        if reachable:
            return verdict(
                Code.CONTROL_PLANE_PEERS_REACHABLE, False, "no worker peer answers, but a control-plane peer"
            )
        return verdict(Code.CONTROL_PLANE_PEERS_UNREACHABLE, True, worker.reason + "; no control-plane peer answers")
    if worker.code == Code.API_SERVER_OUTAGE:
        if diagnostics_ok:
            return verdict(Code.DIAGNOSTICS_PASSED, False, worker.reason + "; self-diagnostics pass")
        return verdict(Code.DIAGNOSTICS_FAILED, True, worker.reason + "; self-diagnostics fail")
    if worker.code == Code.TOO_FEW_PEERS:
        if diagnostics_ok and reachable:
            return verdict(
                Code.DIAGNOSTICS_PASSED, False, worker.reason + "; diagnostics pass, control plane reachable"
            )
        why = "self-diagnostics fail" if not diagnostics_ok else "no control-plane peer answers"
        return verdict(
            Code.DIAGNOSTICS_FAILED if not diagnostics_ok else Code.CONTROL_PLANE_PEERS_UNREACHABLE,
            True,
            f"{worker.reason}; {why}",
        )
    return verdict(worker.code, False, worker.reason)


def limit_verdict(verdict: Verdict, seconds_cut_off: float, isolation_limit: float) -> Verdict:
    """``verdict`` with the isolation limit applied: a node cut off from its remediation state for
    ``seconds_cut_off`` seconds (since its last read of it or its last confirmed verdict) fences once that
    reaches ``isolation_limit`` (:func:`safetime.isolation_limit`), unless this verdict fences already or is
    confirmed."""
    if verdict.fence or verdict.confirmed or not past_isolation_limit(seconds_cut_off, isolation_limit):
        return verdict
    return Verdict(
        Code.ISOLATION_LIMIT,
        True,
        False,
        f"cut off from the remediation state for {seconds_cut_off:.1f}s, the isolation limit is"
        f" {isolation_limit:g}s, and no majority of the peers asked said Healthy ({verdict.code}: {verdict.reason})",
        verdict.answers,
        verdict.batches_asked,
        verdict.peers_asked,
    )


def limit_in_force(confirmed_this_boot: bool, published_not_capable: bool) -> bool:
    """Whether the isolation limit runs: from the node's first confirmation in this boot (before it, the node has
    shown nothing: its watchdog is not open, and a cold start of the whole cluster, its control plane included,
    does not reboot every node again and again), and not while the node shows itself not reboot-capable on its
    Node (the manager then neither taints nor deletes anything for it, and checks that before every step)."""
    return confirmed_this_boot and not published_not_capable


def peers_due(error_count: int, threshold: int, seconds_cut_off: float, isolation_limit: float, lead: float) -> int:
    """The API error count to decide with: ``error_count``, or ``threshold`` once the isolation limit is less than
    ``lead`` seconds away (a check and a peer round), so that a node whose checks are slow still asks its peers,
    and can be confirmed by them, before the limit."""
    if error_count < threshold and seconds_cut_off + lead >= isolation_limit:
        return threshold
    return error_count


def past_isolation_limit(seconds_cut_off: float, isolation_limit: float) -> bool:
    """Whether a node cut off for ``seconds_cut_off`` seconds must stop feeding its watchdog."""
    return seconds_cut_off >= isolation_limit


def feeder_wait(seconds_cut_off: float, isolation_limit: float, feed_interval: float) -> float:
    """How long the thread that feeds the watchdog may sleep before it looks again: the feed interval, but
    never past the moment the isolation limit is reached (so it never feeds after it)."""
    return max(0.0, min(feed_interval, isolation_limit - seconds_cut_off))


def node_verdict(
    node_is_control_plane: bool,
    worker: Verdict,
    control_plane_answers: Sequence[int] = (),
    diagnostics_ok: bool = True,
) -> Verdict:
    """The verdict for the node: the control-plane rules on a control-plane node, else the worker one."""
    if node_is_control_plane:
        return control_plane_verdict(worker, control_plane_answers, diagnostics_ok)
    return worker


class DecideError(NodeopsError, ValueError):
    """Input of :func:`decide` that cannot be used; the message names the field."""


_ANSWERS_BY_NAME = {name: code for code, name in ANSWER_NAMES.items()}
#: The fields of :func:`decide`'s input, with their defaults (None: required).
DECIDE_FIELDS: dict[str, Any] = {
    "apiErrors": None,
    "maxApiErrorThreshold": 3,
    "workerPeers": None,
    "minPeersForRemediation": 1,
    "batches": [],
    "secondsSinceLastAnswer": 0,
    "controlPlane": False,
    "controlPlaneAnswers": [],
    "diagnosticsOk": True,
    "secondsCutOff": 0,
    "isolationLimitSeconds": safetime.isolation_limit({}),
}


def _whole(data: Mapping[str, Any], key: str) -> int:
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise DecideError(f"{key}: {value!r} is not a whole number of 0 or more.")
    return value


def _answers(value: Any, key: str) -> list[int]:
    if not isinstance(value, list):
        raise DecideError(f"{key}: {value!r} is not a list of answers.")
    out = []
    for index, answer in enumerate(value):
        if isinstance(answer, str) and answer in _ANSWERS_BY_NAME:
            out.append(_ANSWERS_BY_NAME[answer])
        elif isinstance(answer, int) and not isinstance(answer, bool) and answer in ANSWER_NAMES:
            out.append(answer)
        else:
            raise DecideError(
                f"{key}[{index}]: {answer!r} is not an answer; give one of {', '.join(_ANSWERS_BY_NAME)}."
            )
    return out


def decide(data: Mapping[str, Any]) -> Verdict:
    """The verdict for a situation given as data (JSON), for asking "what would the agent do" without a node.

    Fields (see DECIDE_FIELDS for the defaults): ``apiErrors`` (consecutive failed API probes),
    ``maxApiErrorThreshold``, ``workerPeers``, ``minPeersForRemediation``, ``batches`` (the answers of each
    batch of worker peers in turn, by name: Healthy, Unhealthy, ApiError, RequestFailed, Busy),
    ``secondsSinceLastAnswer``, ``controlPlane`` (the node is a control-plane node), ``controlPlaneAnswers``,
    ``diagnosticsOk``, ``secondsCutOff`` (since the node last read its remediation state or had a confirmed
    verdict) and ``isolationLimitSeconds`` (by default that of the SelfNodeRemediationConfig defaults, 85).
    Raises DecideError naming a missing, unknown or wrong field.
    """
    if not isinstance(data, Mapping):
        raise DecideError("the input must be a JSON object with the fields " + ", ".join(DECIDE_FIELDS) + ".")
    unknown = sorted(set(data) - set(DECIDE_FIELDS))
    if unknown:
        raise DecideError(f"unknown field {unknown[0]!r}; the fields are {', '.join(DECIDE_FIELDS)}.")
    missing = [key for key, default in DECIDE_FIELDS.items() if default is None and key not in data]
    if missing:
        raise DecideError(f"{missing[0]}: required.")
    values = {key: data.get(key, default) for key, default in DECIDE_FIELDS.items()}
    batches = values["batches"]
    if not isinstance(batches, list):
        raise DecideError(f"batches: {batches!r} is not a list of batches (each a list of answers).")
    answered = [_answers(batch, f"batches[{index}]") for index, batch in enumerate(batches)]
    seconds = _seconds(values, "secondsSinceLastAnswer")
    cut_off = _seconds(values, "secondsCutOff")
    limit = _seconds(values, "isolationLimitSeconds")
    for key in ("controlPlane", "diagnosticsOk"):
        if not isinstance(values[key], bool):
            raise DecideError(f"{key}: {values[key]!r} is not true or false.")
    worker = worker_verdict(
        _whole(values, "apiErrors"),
        _whole(values, "maxApiErrorThreshold"),
        _whole(values, "workerPeers"),
        _whole(values, "minPeersForRemediation"),
        iter(answered),
        seconds,
    )
    control_plane = _answers(values["controlPlaneAnswers"], "controlPlaneAnswers")
    verdict = node_verdict(values["controlPlane"], worker, control_plane, values["diagnosticsOk"])
    return limit_verdict(verdict, cut_off, limit)


def _seconds(data: Mapping[str, Any], key: str) -> float:
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
        raise DecideError(f"{key}: {value!r} is not a number of seconds of 0 or more.")
    return float(value)


def node_is_control_plane(node: Mapping[str, Any]) -> bool:
    """Whether a Node object carries a control-plane (or master) role label."""
    return is_control_plane(node)


def remediations_for(remediations: Iterable[Mapping[str, Any]], node: str) -> list[Mapping[str, Any]]:
    """The SelfNodeRemediation objects that ask for ``node`` (its annotation, else the object's name)."""
    return [item for item in remediations if remediation_node(item) == node]


def peer_answer(remediations: Iterable[Mapping[str, Any]], asker: str) -> int:
    """What a peer answers ``asker`` after listing the SelfNodeRemediations: Unhealthy when one is for
    the asker, else Healthy (an API error is answered API_ERROR by the caller)."""
    return UNHEALTHY if remediations_for(remediations, asker) else HEALTHY


def _created(item: Mapping[str, Any]) -> float | None:
    return rfc3339.to_epoch((item.get("metadata") or {}).get("creationTimestamp"))


def remediation_to_act_on(
    remediations: Iterable[Mapping[str, Any]], node: str, boot_time: float, fenced_uids: Iterable[str] = ()
) -> Mapping[str, Any] | None:
    """The SelfNodeRemediation for ``node`` this agent must fence for, or None.

    One created after the node's last boot (``boot_time``, seconds since the epoch) that this agent has not
    fenced for yet (``fenced_uids``) and that Node Health Check has not given up
    (``remediation.medik8s.io/nhc-timed-out``). One created before the boot was already served by
    that reboot (upstream's uptime check), so a node does not reboot twice for one remediation.
    """
    done = set(fenced_uids)
    for item in remediations_for(remediations, node):
        meta = item.get("metadata") or {}
        if meta.get("uid") in done or TIMED_OUT_ANNOTATION in (meta.get("annotations") or {}):
            continue
        created = _created(item)
        if created is None or created > boot_time:
            return item
    return None
