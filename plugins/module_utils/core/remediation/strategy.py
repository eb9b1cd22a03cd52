# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which SelfNodeRemediation strategy runs on a cluster of a given Kubernetes version.

Pure, standard library only. ``Automatic`` becomes ``OutOfServiceTaint`` on Kubernetes 1.28 or newer
(the out-of-service taint is GA there) and ``ResourceDeletion`` before; an explicit
``OutOfServiceTaint`` needs 1.26 or newer.
"""

from __future__ import annotations

import re

from ..node.errors import NodeopsError

AUTOMATIC = "Automatic"
RESOURCE_DELETION = "ResourceDeletion"
OUT_OF_SERVICE_TAINT = "OutOfServiceTaint"
STRATEGIES = (AUTOMATIC, RESOURCE_DELETION, OUT_OF_SERVICE_TAINT)
OUT_OF_SERVICE_SUPPORTED = (1, 26)
OUT_OF_SERVICE_GA = (1, 28)

_VERSION = re.compile(r"^v?([0-9]+)\.([0-9]+)")


class StrategyError(NodeopsError, ValueError):
    """An unknown strategy, an unreadable version, or a strategy the cluster cannot run."""


def parse_version(git_version: str) -> tuple[int, int]:
    """``(major, minor)`` from a ``/version`` gitVersion: ``"v1.36.3"`` -> (1, 36),
    ``"v1.28.2-eks-abc"`` -> (1, 28), ``"1.27+"`` -> (1, 27)."""
    if not isinstance(git_version, str):
        raise StrategyError(f"Kubernetes version: {git_version!r} is not a version string such as 'v1.30.2'.")
    match = _VERSION.match(git_version.strip())
    if not match:
        raise StrategyError(f"Kubernetes version: cannot read {git_version!r}; expected a form such as 'v1.30.2'.")
    return int(match.group(1)), int(match.group(2))


def resolve_strategy(requested: str | None, git_version: str, field: str = "spec.remediationStrategy") -> str:
    """The strategy to run (ResourceDeletion or OutOfServiceTaint) for ``requested`` (None = Automatic)."""
    requested = AUTOMATIC if requested in (None, "") else requested
    if requested not in STRATEGIES:
        raise StrategyError(f"{field}: {requested!r} is not one of {', '.join(STRATEGIES)}.")
    version = parse_version(git_version)
    shown = f"{version[0]}.{version[1]}"
    if requested == AUTOMATIC:
        return OUT_OF_SERVICE_TAINT if version >= OUT_OF_SERVICE_GA else RESOURCE_DELETION
    if requested == OUT_OF_SERVICE_TAINT and version < OUT_OF_SERVICE_SUPPORTED:
        raise StrategyError(
            f"{field}: OutOfServiceTaint needs Kubernetes 1.26 or newer and this cluster runs {shown}; "
            "use ResourceDeletion or Automatic."
        )
    return requested
