# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A stand-in for K8sModule inside an action, for the steps that run on the controller itself: the same
parameters (checked against the module's argument spec), the same client and the same way to end, without a
Python process per call. ``exit_json`` and ``fail_json`` raise :class:`Ended`, which holds the result."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, NoReturn

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.node.errors import NodeopsError
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.strict import option_hints
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.client import (
    AUTH_ARG_SPEC,
    Client,
    auth_params_from_env,
    load_configuration,
)
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.errors import K8sError
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.module import auth_argument_spec


class Ended(Exception):
    """The step ended: ``result`` is what the module would have returned."""

    def __init__(self, result: dict[str, Any]) -> None:
        super().__init__(result.get("msg", ""))
        self.result = result


class ControllerModule:
    """What the steps use of a K8sModule: ``params``, ``check_mode``, ``client``, ``warn``, ``set_pool_size``,
    ``exit_json``, ``fail_json`` and ``fail_error``. ``environment``: the task's ``environment`` (its K8S_AUTH_*
    variables and KUBECONFIG count as they would for the module)."""

    def __init__(
        self,
        argument_spec: dict[str, Any],
        args: Mapping[str, Any],
        check_mode: bool,
        environment: Mapping[str, str] | None = None,
    ) -> None:
        self.check_mode = check_mode
        self.environment = {**os.environ, **(environment or {})}
        self.warnings: list[str] = []
        self._pool_size = 10
        self._client: Client | None = None
        spec = {**auth_argument_spec(), **argument_spec}
        validation = ArgumentSpecValidator(spec).validate(dict(args))
        if validation.error_messages:  # an unknown option named first, with the one it most likely stands for
            self.params: dict[str, Any] = {}
            self.fail_json(msg=" ".join([*option_hints(spec, dict(args)), "; ".join(validation.error_messages)]))
        self.params = validation.validated_parameters

    @property
    def client(self) -> Client:
        if self._client is None:
            params = {name: self.params.get(name) for name in AUTH_ARG_SPEC}
            if params.get("kubeconfig") is None and self.environment.get("KUBECONFIG"):
                params["kubeconfig"] = self.environment["KUBECONFIG"]
            try:
                configuration = load_configuration(auth_params_from_env(params, self.environment))
                self._client = Client(configuration, pool_size=self._pool_size)
            except K8sError as exc:
                self.fail_error(exc)
        return self._client

    def set_pool_size(self, size: int) -> None:
        self._pool_size = size

    def warn(self, warning: str) -> None:
        if warning not in self.warnings:
            self.warnings.append(warning)

    def exit_json(self, **result: Any) -> NoReturn:
        result.setdefault("changed", False)
        if self.warnings:
            result["warnings"] = list(self.warnings)
        raise Ended(result)

    def fail_json(self, msg: Any, **result: Any) -> NoReturn:
        self.exit_json(**result, failed=True, msg=str(msg))

    def fail_error(self, exc: NodeopsError, **extra: Any) -> NoReturn:
        if isinstance(exc, K8sError):
            self.fail_json(msg=exc.msg, error=exc.to_result(), **extra)
        self.fail_json(msg=str(exc), **extra)
