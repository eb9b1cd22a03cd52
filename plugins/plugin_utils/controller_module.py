# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A stand-in for K8sModule inside an action, for what runs on the controller itself (the rolling run's steps, and
the modules that plugin_utils/in_process.py runs in their task's worker): the same parameters (checked against the
module's argument spec), the same client and the same way to end, without a Python process per call. ``exit_json``
and ``fail_json`` raise :class:`Ended`, which holds the result, with the values of no_log options and the secrets
of an inline kubeconfig masked as AnsibleModule masks them.

The client reads the connection's environment (``K8S_AUTH_*``, ``KUBECONFIG``, what exec credential plugins
read) from the process: the action applies the task's ``environment`` to the worker process that runs the task
(Ansible forks one per task and host), as a module process started by that task would see it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from importlib.util import find_spec
from typing import Any, NoReturn

from ansible import constants as C
from ansible.module_utils.basic import missing_required_lib
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.common.parameters import remove_values
from ansible.module_utils.errors import UnsupportedError
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.node.errors import NodeopsError
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.strict import option_hints
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.client import AUTH_ARG_SPEC, Client
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.errors import K8sError
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.module import (
    auth_argument_spec,
    kubeconfig_secrets,
)
from ansible_collections.nodeops.maintenance.plugins.plugin_utils import doorbell, group_commit

HAS_KUBERNETES = find_spec("kubernetes") is not None


class Ended(Exception):
    """The step ended: ``result`` is what the module would have returned."""

    def __init__(self, result: dict[str, Any]) -> None:
        super().__init__(result.get("msg", ""))
        self.result = result


class ControllerModule:
    """What this collection's modules use of a K8sModule: ``params``, ``check_mode``, ``_diff``, ``client``,
    ``warn``, ``set_pool_size``, ``exit_json``, ``fail_json``, ``fail_k8s`` and ``fail_error``. ``checks``: the
    checks across options that the module gives AnsibleModule (``mutually_exclusive``, ``required_one_of``, ...);
    ``name``: the module's, for the messages."""

    def __init__(
        self,
        argument_spec: dict[str, Any],
        args: Mapping[str, Any],
        check_mode: bool,
        diff: bool = False,
        name: str = "",
        **checks: Sequence[Any],
    ) -> None:
        self.check_mode = check_mode
        self._diff = diff
        self.warnings: list[str] = []
        self.deprecations: list[dict[str, Any]] = []
        self._pool_size = 10
        self._client: Client | None = None
        self.params: dict[str, Any] = dict(args)  # what a failure of the checks shows (masked), as AnsibleModule
        spec = {**auth_argument_spec(), **argument_spec}
        validation = ArgumentSpecValidator(spec, **checks).validate(dict(args))
        self.no_log_values: set[str] = set(validation._no_log_values)
        self.no_log_values.update(kubeconfig_secrets(dict(args).get("kubeconfig")))
        for warning in validation._warnings:
            self.warn(f"Both option {warning['option']} and its alias {warning['alias']} are set.")
        self.deprecations = list(validation._deprecations)
        if validation.error_messages:  # as AnsibleModule says it, an unknown option named first (as K8sModule does)
            first = validation.errors[0]
            msg = validation.errors.msg
            if isinstance(first, UnsupportedError):
                msg = f"Unsupported parameters for ({name}) module: {msg}"
            self.fail_json(msg=" ".join([*option_hints(spec, dict(args)), msg]))
        self.params = validation.validated_parameters

    @property
    def client(self) -> Client:
        if self._client is None:
            if not HAS_KUBERNETES:
                self.fail_json(msg=missing_required_lib("kubernetes"))
            params = {name: self.params.get(name) for name in AUTH_ARG_SPEC}
            try:
                self._client = Client.from_params(params, pool_size=self._pool_size)
            except K8sError as exc:
                self.fail_k8s(exc)
        return self._client

    def commit(
        self, key: str, change: dict[str, Any], apply: group_commit.Apply, wait: float | None = None
    ) -> tuple[Any, dict[str, Any]] | None:
        """A group commit that every worker of this ``ansible-playbook`` shares (see group_commit), in its own
        temporary directory (made once, in ``ansible-playbook``'s process): the hosts of a run have their changes
        of the run's record written together, by whichever of them holds the lock; one waits ``wait`` seconds at
        most (default group_commit.WAIT) before it applies its change alone (None is returned then)."""
        group = group_commit.Group(C.DEFAULT_LOCAL_TMP, key)
        return group.commit(change, apply, group_commit.WAIT if wait is None else wait)

    def bell(self, key: str) -> doorbell.Bell:
        """The doorbell that every worker of this ``ansible-playbook`` (and a driver forked from one) shares for
        ``key``, in its temporary directory (see doorbell)."""
        return doorbell.Bell(C.DEFAULT_LOCAL_TMP, key)

    def set_pool_size(self, size: int) -> None:
        self._pool_size = size

    def warn(self, warning: str) -> None:
        if warning not in self.warnings:
            self.warnings.append(warning)

    def exit_json(self, **result: Any) -> NoReturn:
        result.setdefault("changed", False)
        result.setdefault("invocation", {"module_args": self.params})
        if self.warnings:
            result["warnings"] = list(self.warnings)
        if self.deprecations:
            result["deprecations"] = list(self.deprecations)
        raise Ended(remove_values(result, self.no_log_values))

    def fail_json(self, msg: Any, **result: Any) -> NoReturn:
        self.exit_json(**result, failed=True, msg=str(msg))

    def fail_k8s(self, exc: K8sError, **extra: Any) -> NoReturn:
        self.fail_json(msg=exc.msg, error=exc.to_result(), **extra)

    def fail_error(self, exc: NodeopsError, **extra: Any) -> NoReturn:
        if isinstance(exc, K8sError):
            self.fail_k8s(exc, **extra)
        self.fail_json(msg=str(exc), **extra)
