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

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ansible.plugins.action import ActionBase
from ansible.plugins.action.normal import ActionModule as NormalAction
from ansible.utils.vars import merge_hash
from ansible_collections.nodeops.maintenance.plugins.plugin_utils import in_process

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


# kubernetes.core's aliases of the connection options (the modules take them too), by the option they stand for.
ALIASES = {
    "verify_ssl": "validate_certs",
    "ssl_ca_cert": "ca_cert",
    "cert_file": "client_cert",
    "key_file": "client_key",
}
# What ansible-core puts where a template said ``omit``; 2.16 to 2.18 template module_defaults before the action
# runs and leave it in them (only a task's own arguments lose it).
OMIT_PREFIX = "__omit_place_holder__"


def kubernetes_core_defaults(
    module_defaults: Sequence[Mapping[str, Any]] | None, resolve: Callable[[Any], Any] = lambda value: value
) -> dict[str, Any]:
    """The connection options that ``module_defaults`` (a task's: the play's first, the innermost block's or the
    task's last) set for kubernetes.core's groups, by their own names (an alias stands for its option). The entries
    are merged as Ansible merges them (a later entry's group replaces an earlier one's), kubernetes.core's own group
    wins over ansible-core's legacy one, and ``resolve`` templates a group given as a template."""
    merged: dict[str, Any] = {}
    for entry in module_defaults or ():
        if isinstance(entry, Mapping):
            merged.update(entry)
    found: dict[str, Any] = {}
    for group in KUBERNETES_CORE_GROUPS:
        settings = merged.get(group)
        if isinstance(settings, str):
            settings = resolve(settings)
        if isinstance(settings, Mapping):
            for key, value in settings.items():
                option = ALIASES.get(key, key)
                if option in CONNECTION_OPTIONS:
                    found[option] = value
    return found


def with_connection_defaults(
    action: Any, args: Mapping[str, Any], task_vars: Mapping[str, Any] | None
) -> dict[str, Any]:
    """``args`` (a task's, with this collection's module_defaults applied) with the connection options that only
    kubernetes.core's groups set added; ``action`` is the task's action plugin (for its task and templar)."""

    def resolve(value: Any) -> Any:  # the templar only once a group needs it
        return action._templar.template(value)

    defaults = kubernetes_core_defaults(action._task.module_defaults, resolve)
    given = {ALIASES.get(key, key) for key in args}
    missing = {k: v for k, v in defaults.items() if k not in given}
    if not missing:
        return dict(args)
    omit = (task_vars or {}).get("omit")
    resolved = action._templar.template(missing)
    kept = {k: v for k, v in resolved.items() if not (isinstance(v, str) and (v == omit or v.startswith(OMIT_PREFIX)))}
    return {**kept, **args}


class K8sAction(NormalAction):
    """The action of a module that talks to the API: Ansible's own, with the connection defaults above. With
    ``IN_PROCESS`` (the module's file), a task that runs on the controller with ``ansible-playbook``'s own Python runs
    the module in its worker instead of a module process (plugin_utils/in_process.py)."""

    IN_PROCESS: Any = None

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        self._task.args = with_connection_defaults(self, self._task.args, task_vars)
        if self.IN_PROCESS is not None and in_process.runs_here(self, task_vars or {}):
            result = ActionBase.run(self, tmp, task_vars)  # what every action checks first (check mode, async)
            return merge_hash(result, in_process.run_module(self, self.IN_PROCESS, self._task.args))
        return super().run(tmp, task_vars)
