"""Running an action plugin of the collection in a unit test, with the module's runs scripted: the module answers
``answers`` in turn, and the helper returns the action's result, the module arguments of each call and the lines the
action printed. Ansible's own set-up (``ActionBase.run``) is left out; the action's loop is what is tested."""

from __future__ import annotations

from typing import Any

import pytest
from ansible.plugins.action import ActionBase
from ansible_collections.nodeops.maintenance.plugins.plugin_utils import in_process, progress


class Task:
    """What the actions read of a task."""

    async_val = 0

    def __init__(self, args: dict[str, Any], name: str, module_defaults: list[dict[str, Any]] | None = None) -> None:
        self.args = args
        self.name = name
        self.module_defaults = module_defaults or []

    def get_name(self) -> str:
        return self.name


class Templar:
    def template(self, value: Any) -> Any:
        return value


def run_action(
    monkeypatch: pytest.MonkeyPatch,
    action_class: type[progress.ProgressAction],
    args: dict[str, Any],
    answers: list[dict[str, Any]],
    module_defaults: list[dict[str, Any]] | None = None,
    name: str = "The task",
) -> tuple[dict[str, Any], list[dict[str, Any]], list[str]]:
    """The result of ``action_class`` run on a task with ``args`` (and ``module_defaults``) named ``name``, when its
    module answers ``answers`` in turn; the module arguments of each call; the lines printed."""
    calls: list[dict[str, Any]] = []
    lines: list[str] = []
    plugin = action_class.__new__(action_class)
    plugin._task = Task(args, name, module_defaults)  # type: ignore[assignment]
    plugin._templar = Templar()  # type: ignore[assignment]

    def execute_module(module_name: str, module_args: dict[str, Any], task_vars: Any) -> dict[str, Any]:
        assert module_name == action_class.MODULE
        calls.append(dict(module_args))
        return dict(answers[len(calls) - 1])

    monkeypatch.setattr(plugin, "_execute_module", execute_module, raising=False)
    monkeypatch.setattr(in_process, "runs_here", lambda action, task_vars: False)  # the module answers, wherever
    monkeypatch.setattr(ActionBase, "run", lambda self, tmp=None, task_vars=None: {})
    monkeypatch.setattr(progress.display, "display", lambda msg, *a, **kw: lines.append(msg))
    return plugin.run(task_vars={}), calls, lines
