"""The connection settings of kubernetes.core's module_defaults groups as defaults of this collection's modules
(plugins/plugin_utils/k8s_defaults.py): which options are taken, in which order, and that every module that talks
to the API has an action that takes them. The whole is tested in tests/integration/test_module_defaults.py."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import yaml
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.client import AUTH_ARG_SPEC
from ansible_collections.nodeops.maintenance.plugins.plugin_utils import k8s_defaults
from ansible_collections.nodeops.maintenance.plugins.plugin_utils.progress import ProgressAction

ROOT = Path(__file__).resolve().parents[2]


class Templar:
    def template(self, value: Any) -> Any:
        return {k: v.replace("{{ kc }}", "/from/a/var") if isinstance(v, str) else v for k, v in value.items()}


class Task:
    def __init__(self, module_defaults: list[dict[str, Any]]) -> None:
        self.module_defaults = module_defaults


class Action:
    def __init__(self, module_defaults: list[dict[str, Any]]) -> None:
        self._task = Task(module_defaults)
        self._templar = Templar()


def test_only_connection_options_of_kubernetes_core_groups_are_taken() -> None:
    defaults = [
        {
            "group/kubernetes.core.k8s": {"kubeconfig": "{{ kc }}", "wait": True, "validate_certs": False},
            "group/ansible.builtin.k8s": {"context": "legacy", "kubeconfig": "/legacy"},
            "kubernetes.core.k8s_info": {"host": "https://only-for-k8s-info"},
            "group/community.general.other": {"host": "https://other"},
        }
    ]
    args = k8s_defaults.with_connection_defaults(Action(defaults), {"name": "gpu-07"})
    # kubernetes.core's own group wins over the legacy one; "wait" is not a connection option
    assert args == {"kubeconfig": "/from/a/var", "context": "legacy", "validate_certs": False, "name": "gpu-07"}


def test_the_tasks_arguments_and_this_collections_group_win() -> None:
    defaults = [{"group/kubernetes.core.k8s": {"host": "https://theirs", "api_key": "t", "context": "c"}}]
    # what the task's arguments hold by the time the action runs: its own and this collection's group's defaults
    args = k8s_defaults.with_connection_defaults(Action(defaults), {"host": "https://ours", "api_key": None})
    assert args == {"host": "https://ours", "api_key": None, "context": "c"}


def test_a_later_module_defaults_entry_wins() -> None:
    """A play's module_defaults come first in the list, then the blocks', then the task's."""
    defaults = [
        {"group/kubernetes.core.k8s": {"context": "play", "kubeconfig": "/play"}},
        {"group/ansible.builtin.k8s": {"context": "block"}},
    ]
    assert k8s_defaults.kubernetes_core_defaults(defaults) == {"context": "block", "kubeconfig": "/play"}
    assert k8s_defaults.kubernetes_core_defaults(None) == {} and k8s_defaults.kubernetes_core_defaults([{}]) == {}


def test_the_connection_options_are_the_modules() -> None:
    assert frozenset(AUTH_ARG_SPEC) == k8s_defaults.CONNECTION_OPTIONS


def test_every_module_of_the_k8s_group_has_an_action_that_takes_them() -> None:
    runtime = yaml.safe_load((ROOT / "meta" / "runtime.yml").read_text())
    modules = [m for m in runtime["action_groups"]["k8s"] if isinstance(m, str)]
    assert len(modules) >= 10
    for module in modules:
        action = importlib.import_module(f"ansible_collections.nodeops.maintenance.plugins.action.{module}")
        assert issubclass(action.ActionModule, (k8s_defaults.K8sAction, ProgressAction)), module
