# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Errors of the client layer: one class per thing a user can fix, each with a message that says how."""

from __future__ import annotations

from typing import Any

# absolute: pylint (ansible-test sanity) resolves "..core.errors" from this module, also named errors, to itself
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.node.errors import NodeopsError


class K8sError(NodeopsError):
    """A failed call to the Kubernetes API, with a message meant for a person."""

    reason = "error"

    def __init__(self, msg: str, status: int | None = None, body: dict[str, Any] | None = None) -> None:
        super().__init__(msg)
        self.msg = msg
        self.status = status
        self.body = body or {}
        #: the answer to a repeat of the call, sent after an earlier attempt got no answer (that attempt may have
        #: taken effect: a NotFound then may be its own effect)
        self.after_lost_answer = False

    def to_result(self) -> dict[str, Any]:
        """The keys a module adds to fail_json next to ``msg``."""
        return {"reason": self.reason, "status": self.status}


class ConfigError(K8sError):
    """The connection options cannot be turned into a client configuration."""

    reason = "config"


class Unreachable(K8sError):
    """No answer: the connection failed, was reset or timed out (``transient``), or TLS failed (not)."""

    reason = "unreachable"

    def __init__(
        self,
        msg: str,
        status: int | None = None,
        body: dict[str, Any] | None = None,
        transient: bool = False,
        sent: bool = True,
    ) -> None:
        super().__init__(msg, status, body)
        self.transient = transient
        #: whether the request may have reached the server (False: the connection or its TLS never came up)
        self.sent = sent


class Unauthorized(K8sError):
    reason = "unauthorized"


class Forbidden(K8sError):
    reason = "forbidden"


class NotFound(K8sError):
    reason = "not_found"


class MissingResourceType(K8sError):
    """The API server does not serve the group/version/resource at all (e.g. a CRD is not installed)."""

    reason = "missing_crd"


class Conflict(K8sError):
    reason = "conflict"


class UIDMismatch(Conflict):
    """409 on a UID precondition: the object of that name is another one now (deleted and re-created).

    For a call decided on one object (an eviction or deletion of the pod a plan listed) it means, as
    NotFound does, that the object decided on is gone; the new one of the same name was not touched.
    """

    reason = "uid_mismatch"


class Invalid(K8sError):
    reason = "invalid"


class TooManyRequests(K8sError):
    reason = "too_many_requests"


#: What an eviction or a deletion that carries the UID raises when the pod it was decided on is gone:
#: deleted (NotFound) or replaced by a new pod of the same name (UIDMismatch).
OBJECT_GONE: tuple[type[K8sError], ...] = (NotFound, UIDMismatch)
