# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""AnsibleModule with the shared connection options and the client layer wired in."""

from __future__ import annotations

from importlib.util import find_spec
from typing import Any, NoReturn

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ..core.node.errors import NodeopsError
from ..core.strict import option_hints
from .client import AUTH_ARG_SPEC, Client
from .errors import K8sError

# Only look for the package here: importing it is left to the first API call.
HAS_KUBERNETES = find_spec("kubernetes") is not None


# Fields of a kubeconfig user that must never show in a task's output.
_KUBECONFIG_SECRETS = ("token", "password", "client-key-data")


def kubeconfig_secrets(kubeconfig: Any) -> set[str]:
    """The secret values inside a kubeconfig given as a dict (tokens, passwords, keys, auth-provider config)."""
    secrets: set[str] = set()
    if not isinstance(kubeconfig, dict):
        return secrets
    for entry in kubeconfig.get("users") or []:
        user = (entry or {}).get("user") or {}
        secrets.update(str(user[k]) for k in _KUBECONFIG_SECRETS if user.get(k))
        provider_config = (user.get("auth-provider") or {}).get("config") or {}
        secrets.update(str(v) for v in provider_config.values() if v)
    return secrets


def auth_argument_spec() -> dict[str, dict[str, Any]]:
    """The connection options as AnsibleModule wants them (the env names are resolved by the client)."""
    return {name: {k: v for k, v in spec.items() if k != "env"} for name, spec in AUTH_ARG_SPEC.items()}


class K8sModule(AnsibleModule):
    """A module of this collection: the connection options, a lazily built client, clear failures."""

    def __init__(self, argument_spec: dict[str, Any], pool_size: int = 10, **kwargs: Any) -> None:
        spec = auth_argument_spec()
        spec.update(argument_spec)
        self._checking_options = True
        super().__init__(argument_spec=spec, **kwargs)
        self._checking_options = False
        self._pool_size = pool_size
        self._client: Client | None = None
        # An inline kubeconfig carries credentials: keep them out of the result's invocation.
        self.no_log_values.update(kubeconfig_secrets(self.params.get("kubeconfig")))

    def fail_json(self, msg: Any, **kwargs: Any) -> NoReturn:
        """AnsibleModule's failure. While the options are checked, an unknown one is named first, with the known
        one it most likely stands for: Ansible's own message lists every option but guesses none, and may name
        only what the typo left missing ("one of the following is required: ...")."""
        if isinstance(msg, str) and getattr(self, "_checking_options", False):
            hints = option_hints(getattr(self, "argument_spec", {}), getattr(self, "params", None) or {})
            if hints:
                msg = " ".join(hints) + " " + msg
        super().fail_json(msg=msg, **kwargs)
        raise SystemExit(1)  # not reached: fail_json exits

    def set_pool_size(self, size: int) -> None:
        """Connections of the client, for modules that learn their parallelism from their options."""
        if self._client is not None:
            raise RuntimeError("set_pool_size() must come before the first use of .client")
        self._pool_size = size

    @property
    def client(self) -> Client:
        """The API client, built on first use (work on data given as parameters never needs one)."""
        if self._client is None:
            if not HAS_KUBERNETES:
                self.fail_json(msg=missing_required_lib("kubernetes"))
            params = {name: self.params.get(name) for name in AUTH_ARG_SPEC}
            try:
                self._client = Client.from_params(params, pool_size=self._pool_size)
            except K8sError as exc:
                self.fail_k8s(exc)
        return self._client

    def fail_k8s(self, exc: K8sError, **extra: Any) -> NoReturn:
        self.fail_json(msg=exc.msg, error=exc.to_result(), **extra)

    def fail_error(self, exc: NodeopsError, **extra: Any) -> NoReturn:
        """A clean failure for any error of the collection: a K8sError as fail_k8s reports it (with its reason
        and status), any other with its message. Modules end their handlers with it, after the handlers that
        add keys of their own."""
        if isinstance(exc, K8sError):
            self.fail_k8s(exc, **extra)
        self.fail_json(msg=str(exc), **extra)
