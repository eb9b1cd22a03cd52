"""One base class for the collection's errors (core/errors.py): every error class of plugins/module_utils derives
from it."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest
from ansible_collections.nodeops.maintenance.plugins import module_utils
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.errors import NodeopsError

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
    from ansible_collections.nodeops.maintenance.plugins.module_utils.core import agentconfig, duration, rolling

    for cls in (agentconfig.AgentConfigError, duration.DurationError, rolling.RollingError):
        assert issubclass(cls, ValueError) and issubclass(cls, NodeopsError)
    with pytest.raises(ValueError, match="must be a mapping"):
        agentconfig.validate([])


def test_no_two_error_classes_share_a_name() -> None:
    names = [cls.__name__ for cls in error_classes() if cls.__name__.endswith("Error")]
    assert sorted(names) == sorted(set(names))
