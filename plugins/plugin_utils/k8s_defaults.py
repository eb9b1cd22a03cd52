# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Connection settings from kubernetes.core's module_defaults groups for this collection's modules.

A group's members are what its own collection's ``meta/runtime.yml`` says, so ``group/kubernetes.core.k8s`` (and
ansible-core's ``group/k8s``, which holds the same modules) can never list this collection's modules; this
collection's own group extends kubernetes.core's, which covers the other direction. The actions of the modules
that talk to the API take the connection options set for those groups as their defaults instead: a task's own
arguments and this collection's group (applied before the action runs) win over them, and only connection options
are taken, so nothing meant for kubernetes.core's modules alone reaches these."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ansible.plugins.action.normal import ActionModule as NormalAction

# The groups as a task's module_defaults name them once Ansible has resolved them (``group/k8s`` is ansible-core's
# legacy group, resolved to ansible.builtin.k8s).
KUBERNETES_CORE_GROUPS = ("group/ansible.builtin.k8s", "group/kubernetes.core.k8s")
# The connection options, as kubernetes.core names them (the k8s_auth_options doc fragment; a unit test holds this
# to the modules' argument spec).
CONNECTION_OPTIONS = frozenset(
    (
        "api_key",
        "ca_cert",
        "client_cert",
        "client_key",
        "context",
        "host",
        "impersonate_groups",
        "impersonate_user",
        "kubeconfig",
        "no_proxy",
        "password",
        "persist_config",
        "proxy",
        "proxy_headers",
        "username",
        "validate_certs",
    )
)


def kubernetes_core_defaults(module_defaults: Sequence[Mapping[str, Any]] | None) -> dict[str, Any]:
    """The connection options that ``module_defaults`` (a task's: the play's first, the innermost block's or the
    task's last) set for kubernetes.core's groups; the later setting of an option wins, kubernetes.core's own
    group over ansible-core's legacy one."""
    found: dict[str, Any] = {}
    for entry in module_defaults or ():
        for group in KUBERNETES_CORE_GROUPS:
            settings = entry.get(group) if isinstance(entry, Mapping) else None
            if isinstance(settings, Mapping):
                found.update((k, v) for k, v in settings.items() if k in CONNECTION_OPTIONS)
    return found


def with_connection_defaults(action: Any, args: Mapping[str, Any]) -> dict[str, Any]:
    """``args`` (a task's, with this collection's module_defaults applied) with the connection options that only
    kubernetes.core's groups set added; ``action`` is the task's action plugin (for its task and templar)."""
    defaults = kubernetes_core_defaults(action._task.module_defaults)
    missing = {k: v for k, v in defaults.items() if k not in args}
    if not missing:
        return dict(args)
    return {**action._templar.template(missing), **args}


class K8sAction(NormalAction):
    """The action of a module that talks to the API: Ansible's own, with the connection defaults above."""

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        self._task.args = with_connection_defaults(self, self._task.args)
        return super().run(tmp, task_vars)
