"""One base class for the collection's errors (core/node/errors.py): every error class of plugins/module_utils derives
from it, and every module turns any of them into a clean failure (fail_json with the message), not a traceback."""

from __future__ import annotations

import importlib
import inspect
import json
import pkgutil
from typing import Any

import pytest
from ansible_collections.nodeops.maintenance.plugins import module_utils
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.node.errors import NodeopsError
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.errors import Forbidden
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.module import K8sModule

# ansible-core 2.19's helper; `make compat` (ansible-core 2.16) skips this file
patch_module_args = pytest.importorskip(
    "ansible.module_utils.testing", reason="ansible.module_utils.testing is new in ansible-core 2.19"
).patch_module_args

MODULE_UTILS = module_utils.__name__


def error_classes() -> list[type[BaseException]]:
    """Every exception class defined (not only imported) in a module of plugins/module_utils."""
    found: list[type[BaseException]] = []
    for info in pkgutil.walk_packages(module_utils.__path__, prefix=MODULE_UTILS + "."):
        module = importlib.import_module(info.name)
        found.extend(
            obj
            for obj in vars(module).values()
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == module.__name__
        )
    return sorted(found, key=lambda cls: f"{cls.__module__}.{cls.__qualname__}")


def test_every_error_class_of_module_utils_derives_from_the_base() -> None:
    classes = error_classes()
    names = {cls.__name__ for cls in classes}
    assert {"K8sError", "RequestError", "AgentConfigError", "DurationError", "NodeGone"} <= names  # the walk works
    assert [f"{c.__module__}.{c.__qualname__}" for c in classes if not issubclass(c, NodeopsError)] == []


def test_the_errors_that_were_value_errors_still_are() -> None:
    from ansible_collections.nodeops.maintenance.plugins.module_utils.core.maintenance import rolling
    from ansible_collections.nodeops.maintenance.plugins.module_utils.core.node import agentconfig, duration

    for cls in (agentconfig.AgentConfigError, duration.DurationError, rolling.RollingError):
        assert issubclass(cls, ValueError) and issubclass(cls, NodeopsError)
    with pytest.raises(ValueError, match="must be a mapping"):
        agentconfig.validate([])


def test_no_two_error_classes_share_a_name() -> None:
    names = [cls.__name__ for cls in error_classes() if cls.__name__.endswith("Error")]
    assert sorted(names) == sorted(set(names))


# ------------------------------------------------------------------------------------ the modules
class Broken(NodeopsError):
    """An error of the collection that no module names in a handler of its own."""


class BrokenClient:
    """Every call raises ``error``."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            raise self.error

        return call


MODULE_ARGS: dict[str, dict[str, Any]] = {
    "apply": {"definition": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "x"}}]},
    "cordon": {"name": ["n0"]},
    "drain": {"name": "n0"},
    "maintenance_plan": {},
    "maintenance_reconcile": {"lease_wait": 0},
    "node_health": {"name": "nhc"},
    "node_info": {"name": ["n0"]},
    "node_maintenance": {"name": ["n0"], "requestor": "r.example.com"},
    "remediation": {},
    "rolling_maintenance": {"step": "summary", "run_id": "chg-1", "requestor": "r.example.com"},
}


#: modules that talk to no Kubernetes API (their errors are tested with their own tests)
NOT_KUBERNETES = {"check_variables", "metrics_push", "notify"}


def test_every_module_is_in_the_table() -> None:
    from ansible_collections.nodeops.maintenance.plugins import modules

    found = {info.name for info in pkgutil.iter_modules(modules.__path__)}
    assert sorted(found - NOT_KUBERNETES) == sorted(MODULE_ARGS)


def run_module(name: str, client: BrokenClient, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> dict[str, Any]:
    module = importlib.import_module(f"ansible_collections.nodeops.maintenance.plugins.modules.{name}")
    monkeypatch.setattr(K8sModule, "client", property(lambda self: client))
    capsys.readouterr()
    with patch_module_args(MODULE_ARGS[name]), pytest.raises(SystemExit):
        module.main()
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    return result


@pytest.mark.parametrize("name", sorted(MODULE_ARGS))
def test_a_module_fails_cleanly_on_any_error_of_the_collection(
    name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_module(name, BrokenClient(Broken("the client broke")), monkeypatch, capsys)
    assert result["failed"] is True
    assert "the client broke" in result["msg"]


@pytest.mark.parametrize("name", sorted(MODULE_ARGS))
def test_a_module_reports_an_api_error_with_its_reason(
    name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_module(name, BrokenClient(Forbidden("nodes is forbidden", 403)), monkeypatch, capsys)
    assert result["failed"] is True
    assert "nodes is forbidden" in result["msg"]
    if "error" in result:  # an engine that reports the call's failure in its own words keeps it there
        assert result["error"]["reason"] == "forbidden"
