# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The time after which an unhealthy node can be assumed rebooted (fenced), and the peer batch plan.

Pure, standard library only: the remediation module and the node agent use the same
arithmetic, so the formula exists once. The minimum is the longest an agent can take to decide that
its node must reboot, plus the reboot itself::

    api_check   = maxApiErrorThreshold x (apiCheckInterval + apiServerTimeout)
    peer_check  = max(batches(workers) x (peerDialTimeout + effective peer request timeout), 30 s)
    watchdog    = the node's watchdog timeout (60 s when unknown) + 30 s
    minimum     = api_check + peer_check + watchdog

where the effective peer request timeout is ``max(peerRequestTimeout, apiServerTimeout + 2 s)``, the
time the agent really waits (upstream computes with the configured value, which can come out shorter
than the agent's real decision time), and
the batches are those of :func:`peer_batches`. A configured ``safeTimeToAssumeNodeRebootedSeconds``
is used only when it is not below the minimum.

Worked example, all defaults (apiCheckInterval 15s, apiServerTimeout 5s, maxApiErrorThreshold 3,
peerDialTimeout 5s, peerRequestTimeout 7s = max(7, 5 + 2)), 6 workers, watchdog timeout unknown::

    api_check  = 3 x (15 + 5)             =  60 s
    peer_check = max(2 x (5 + 7), 30)     =  30 s   (batches 3 + 3; 24 s is below the 30 s floor)
    watchdog   = 60 + 30                  =  90 s
    minimum    = 60 + 30 + 90             = 180 s   (the same for 0 to 6 workers)

7 workers take 3 batches (36 s): 186 s.

The isolation limit is the other side of the same promise: how long an agent may stay cut off from its
remediation state (no read of its SelfNodeRemediations, no majority of its peers saying Healthy) before it
stops feeding its watchdog, whatever its peers answer::

    isolation_limit = api_check + 30 s - 5 s          (85 s with the defaults)

A remediation created just after the agent's last confirmation is waited for the safe time; the agent has
stopped feeding by ``isolation_limit`` after that confirmation, and the watchdog resets the node one watchdog
timeout later (``peer_check + 5 s``, 35 s or more, before the safe time ends), or the software fallback's
sysrq 20 s after that (``peer_check - 15 s``, 15 s or more, before it). The peer part is the 30 s floor, not
the batches: it holds whatever number of workers the manager counted (a node that does not know them all still
fences in time), and a round that confirms usually ends in its first batch. A longer control-plane outage is
tolerated only by raising ``apiCheckInterval`` or ``maxApiErrorThreshold``, which lengthens the safe time by
as much.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .duration import MAX_SECONDS, DurationError, parse_duration
from .errors import NodeopsError

#: SelfNodeRemediationConfig defaults (upstream's CRD defaults).
DEFAULTS: dict[str, Any] = {
    "apiServerTimeout": "5s",
    "apiCheckInterval": "15s",
    "maxApiErrorThreshold": 3,
    "peerDialTimeout": "5s",
    "peerRequestTimeout": "7s",
}
#: Smallest accepted value of each duration field, in seconds (upstream's webhook minimums).
MINIMUM_SECONDS: dict[str, float] = {
    "apiServerTimeout": 0.01,
    "apiCheckInterval": 1.0,
    "peerDialTimeout": 0.01,
    "peerRequestTimeout": 0.01,
}
FIRST_BATCH = 3
MIN_PEER_CHECK_SECONDS = 30.0
PEER_REQUEST_MARGIN_SECONDS = 2.0
UNKNOWN_WATCHDOG_SECONDS = 60.0
REBOOT_MARGIN_SECONDS = 30.0
#: The agent's software fallback, counted from the moment it stopped feeding the watchdog: the reboot
#: command runs once the watchdog's timeout plus this margin has passed with the node still running (the
#: watchdog did not reset it), and the sysrq reboot follows after the second margin if the command did
#: not take the node down. Both fall inside the safe time's "watchdog + REBOOT_MARGIN_SECONDS", leaving
#: the rest of that margin for the reset itself.
SOFTWARE_REBOOT_AFTER_SECONDS = 10.0
SYSRQ_AFTER_SECONDS = 20.0
#: What the isolation limit keeps back from the time it may last, for the scheduling of the agent's threads
#: and the start of the manager's count (the safe time is counted from when it saw the remediation).
LIVENESS_MARGIN_SECONDS = 5.0
#: The longest safe time, in whole seconds: Go's longest duration (about 292 years), as upstream counts it. Also
#: what keeps timeAssumedRebooted (now + the safe time) within the year 9999.
MAX_SAFE_SECONDS = int(MAX_SECONDS)
#: int64, the CRD's integers.
MAX_INTEGER = 2**63 - 1
# A number as the agent writes the watchdog timeout: ASCII digits (float() also takes "٣", "1_0" and "inf").
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


class SafeTimeError(NodeopsError, ValueError):
    """A configuration value the arithmetic cannot use; the message names the field."""


@dataclass(frozen=True)
class SafeTime:
    """All the parts of the safe time, in seconds."""

    minimum_seconds: int  # rounded up to a whole second
    effective_seconds: int  # what is waited: the configured value when not below the minimum
    api_check_seconds: float
    peer_check_seconds: float  # with the 30 s floor applied
    peer_batches: int
    batch_sizes: tuple[int, ...]
    peer_request_timeout_seconds: float  # the effective one
    watchdog_seconds: float  # the watchdog timeout used (60 when unknown)
    reboot_seconds: float  # watchdog_seconds + 30
    configured_seconds: int | None
    configured_used: bool
    #: the longest an agent stays cut off from its remediation state before it stops feeding its watchdog
    isolation_limit_seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "minimum_seconds": self.minimum_seconds,
            "effective_seconds": self.effective_seconds,
            "api_check_seconds": _number(self.api_check_seconds),
            "peer_check_seconds": _number(self.peer_check_seconds),
            "peer_batches": self.peer_batches,
            "batch_sizes": list(self.batch_sizes),
            "peer_request_timeout_seconds": _number(self.peer_request_timeout_seconds),
            "watchdog_seconds": _number(self.watchdog_seconds),
            "reboot_seconds": _number(self.reboot_seconds),
            "configured_seconds": self.configured_seconds,
            "configured_used": self.configured_used,
            "isolation_limit_seconds": _number(self.isolation_limit_seconds),
        }


def _number(value: float) -> float | int:
    """An integral float as an int (60.0 -> 60), for readable output; other floats rounded to ms."""
    return int(value) if float(value).is_integer() else round(value, 3)


def peer_batches(workers: int) -> list[int]:
    """Sizes of the batches in which an agent asks its ``workers`` peers, all of a batch in parallel.

    The first batch has 3 peers, each later one ``max(3, (workers - 3) // 10)``, the last one the
    remainder: 20 -> [3, 3, 3, 3, 3, 3, 2]; 53 -> [3, 5 x 10]; 0 -> [].
    """
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
        raise SafeTimeError(f"worker_nodes: {workers!r} must be a whole number of 0 or more.")
    sizes: list[int] = []
    left = workers
    later = max(FIRST_BATCH, (workers - FIRST_BATCH) // 10)
    while left > 0:
        size = min(FIRST_BATCH if not sizes else later, left)
        sizes.append(size)
        left -= size
    return sizes


def software_fallback(watchdog_timeout: float) -> tuple[float, float]:
    """When the agent's software fallback fires, in seconds after fencing began, for a watchdog of
    ``watchdog_timeout`` seconds: (the reboot command, the sysrq reboot). Both lie within
    ``watchdog_timeout + REBOOT_MARGIN_SECONDS``, the reboot part of the safe time."""
    return watchdog_timeout + SOFTWARE_REBOOT_AFTER_SECONDS, watchdog_timeout + SYSRQ_AFTER_SECONDS


def isolation_limit_from(api_check_seconds: float) -> float:
    """The isolation limit for an API check part of ``api_check_seconds`` (see the module's docstring)."""
    return round(api_check_seconds + MIN_PEER_CHECK_SECONDS - LIVENESS_MARGIN_SECONDS, 6)


def isolation_limit(spec: Mapping[str, Any] | None) -> float:
    """The isolation limit, in seconds, for a SelfNodeRemediationConfig ``spec`` (missing fields take
    upstream's defaults): 85 s with the defaults. Raises SafeTimeError naming a field that cannot be used."""
    spec = spec or {}
    if not isinstance(spec, Mapping):
        raise SafeTimeError(f"spec: {spec!r} must be a mapping (the spec of a SelfNodeRemediationConfig).")
    threshold = _whole(spec, "maxApiErrorThreshold", 1, MAX_INTEGER) or DEFAULTS["maxApiErrorThreshold"]
    return isolation_limit_from(threshold * (_duration(spec, "apiCheckInterval") + _duration(spec, "apiServerTimeout")))


def effective_peer_request_timeout(peer_request_timeout: float, api_server_timeout: float) -> float:
    """What the agent waits for a peer: at least the peer's own API call (apiServerTimeout) + 2 s."""
    return max(peer_request_timeout, api_server_timeout + PEER_REQUEST_MARGIN_SECONDS)


def watchdog_text_unusable(value: object) -> bool:
    """A published watchdog timeout that is there but says nothing usable: not text of ASCII digits (with an
    optional fraction and exponent), or not a finite number. Missing, and 0 or less, are not this (they count
    as unknown: 60 s)."""
    if value is None:
        return False
    if not isinstance(value, str) or not _NUMBER.fullmatch(value.strip()):
        return True
    return not math.isfinite(float(value))


def watchdog_seconds(value: object) -> float:
    """The watchdog timeout to count: ``value`` (seconds, or the node annotation's text) or 60 when unknown.

    Unknown = missing, not a number (text: not ASCII digits, with an optional fraction and exponent), or 0 or
    less (an agent that annotates before its watchdog runs writes "0"; counting 0 would shorten the safe time
    below a real reboot).
    """
    if value is None or isinstance(value, bool):
        return UNKNOWN_WATCHDOG_SECONDS
    if isinstance(value, str) and not _NUMBER.fullmatch(value.strip()):
        return UNKNOWN_WATCHDOG_SECONDS
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return UNKNOWN_WATCHDOG_SECONDS
    if not math.isfinite(seconds) or seconds <= 0:
        return UNKNOWN_WATCHDOG_SECONDS
    return seconds


def _duration(spec: Mapping[str, Any], name: str) -> float:
    value = spec.get(name)
    field = f"spec.{name}"
    try:
        seconds = parse_duration(DEFAULTS[name] if value is None else value, field)
    except DurationError as err:
        raise SafeTimeError(str(err)) from err
    if seconds < MINIMUM_SECONDS[name]:
        raise SafeTimeError(f"{field}: {value!r} is below the minimum of {MINIMUM_SECONDS[name]:g}s.")
    return seconds


def _whole(spec: Mapping[str, Any], name: str, minimum: int, maximum: int, unit: str = "") -> int | None:
    value = spec.get(name, DEFAULTS.get(name))
    if value is None:
        return None
    text = value.strip() if isinstance(value, str) else ""
    if text.isascii() and text.isdigit():  # str.isdigit() alone holds for "٣" and "²" too
        value = int(text)
    if isinstance(value, bool) or not isinstance(value, int):
        raise SafeTimeError(f"spec.{name}: {value!r} must be a whole number, in ASCII digits 0-9 (such as 3).")
    if value < minimum:
        raise SafeTimeError(f"spec.{name}: {value} is below the minimum of {minimum}.")
    if value > maximum:
        raise SafeTimeError(f"spec.{name}: {value} is above the maximum of {maximum}{unit}.")
    return value


def safe_time(spec: Mapping[str, Any] | None, worker_nodes: int, watchdog_timeout: object = None) -> SafeTime:
    """The safe time for a SelfNodeRemediationConfig ``spec`` (as in the object; missing fields take
    upstream's defaults), ``worker_nodes`` nodes labelled ``node-role.kubernetes.io/worker`` (the
    unhealthy one included when it has the label) and the unhealthy node's ``watchdog_timeout``
    (seconds or the annotation's text; 60 when unknown).

    Raises SafeTimeError naming the field for a bad duration or number.
    """
    spec = spec or {}
    if not isinstance(spec, Mapping):
        raise SafeTimeError(f"spec: {spec!r} must be a mapping (the spec of a SelfNodeRemediationConfig).")
    api_server_timeout = _duration(spec, "apiServerTimeout")
    api_check_interval = _duration(spec, "apiCheckInterval")
    peer_dial_timeout = _duration(spec, "peerDialTimeout")
    peer_request_timeout = _duration(spec, "peerRequestTimeout")
    threshold = _whole(spec, "maxApiErrorThreshold", 1, MAX_INTEGER) or DEFAULTS["maxApiErrorThreshold"]
    longest = " seconds, the longest duration Go allows (about 292 years)"
    configured = _whole(spec, "safeTimeToAssumeNodeRebootedSeconds", 0, MAX_SAFE_SECONDS, longest)

    sizes = peer_batches(worker_nodes)
    request = effective_peer_request_timeout(peer_request_timeout, api_server_timeout)
    api_check = threshold * (api_check_interval + api_server_timeout)
    peer_check = max(len(sizes) * (peer_dial_timeout + request), MIN_PEER_CHECK_SECONDS)
    watchdog = watchdog_seconds(watchdog_timeout)
    reboot = watchdog + REBOOT_MARGIN_SECONDS
    # round() first: 3 x (0.1 + 0.2) must not become 1 s more through float error
    minimum = math.ceil(round(api_check + peer_check + reboot, 6))
    if minimum > MAX_SAFE_SECONDS:
        raise SafeTimeError(
            f"spec: the safe time these settings give with a watchdog timeout of {watchdog:g}s is {minimum}s, longer "
            f"than the longest duration Go allows ({MAX_SAFE_SECONDS}s, about 292 years); lower "
            "maxApiErrorThreshold, the durations or the watchdog timeout."
        )
    used = configured is not None and configured >= minimum
    return SafeTime(
        minimum_seconds=minimum,
        effective_seconds=configured if used and configured is not None else minimum,
        api_check_seconds=api_check,
        peer_check_seconds=peer_check,
        peer_batches=len(sizes),
        batch_sizes=tuple(sizes),
        peer_request_timeout_seconds=request,
        watchdog_seconds=watchdog,
        reboot_seconds=reboot,
        configured_seconds=configured,
        configured_used=used,
        isolation_limit_seconds=isolation_limit_from(api_check),
    )
