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
    args = k8s_defaults.with_connection_defaults(Action(defaults), {"name": "gpu-07"}, {})
    # kubernetes.core's own group wins over the legacy one; "wait" is not a connection option
    assert args == {"kubeconfig": "/from/a/var", "context": "legacy", "validate_certs": False, "name": "gpu-07"}


def test_the_tasks_arguments_and_this_collections_group_win() -> None:
    defaults = [{"group/kubernetes.core.k8s": {"host": "https://theirs", "api_key": "t", "context": "c"}}]
    # what the task's arguments hold by the time the action runs: its own and this collection's group's defaults
    args = k8s_defaults.with_connection_defaults(Action(defaults), {"host": "https://ours", "api_key": None}, {})
    assert args == {"host": "https://ours", "api_key": None, "context": "c"}


def test_the_entries_are_merged_as_ansible_merges_them() -> None:
    """A play's module_defaults come first in the list, then the blocks', then the task's; a later entry's group
    replaces the earlier one's whole, as for kubernetes.core's own modules."""
    defaults = [
        {"group/kubernetes.core.k8s": {"context": "play", "kubeconfig": "/play"}},
        {"group/kubernetes.core.k8s": {"context": "task"}},
    ]
    assert k8s_defaults.kubernetes_core_defaults(defaults) == {"context": "task"}
    assert k8s_defaults.kubernetes_core_defaults(None) == {} and k8s_defaults.kubernetes_core_defaults([{}]) == {}


def test_a_group_given_as_a_template_is_templated_first() -> None:
    """ansible-core 2.19 hands module_defaults over untemplated: a whole group may still be a template."""
    defaults = [{"group/kubernetes.core.k8s": "{{ k8s_connection }}"}]
    resolved = {"kubeconfig": "/from/a/var", "wait": True}
    found = k8s_defaults.kubernetes_core_defaults(
        defaults, lambda value: resolved if value == "{{ k8s_connection }}" else value
    )
    assert found == {"kubeconfig": "/from/a/var"}


def test_omit_and_aliases() -> None:
    """ansible-core 2.16-2.18 leave omit's placeholder in templated module_defaults: such an option is not set.
    An alias stands for its option, both in the group and in the task's arguments."""
    omit = "__omit_place_holder__0123abcd"
    defaults = [{"group/kubernetes.core.k8s": {"kubeconfig": omit, "verify_ssl": False, "key_file": "/k"}}]
    args = k8s_defaults.with_connection_defaults(Action(defaults), {"client_key": "/mine"}, {"omit": omit})
    assert args == {"validate_certs": False, "client_key": "/mine"}
    args = k8s_defaults.with_connection_defaults(Action(defaults), {"key_file": "/mine"}, {"omit": omit})
    assert args == {"validate_certs": False, "key_file": "/mine"}


def test_every_alias_is_one_of_the_modules() -> None:
    aliases = {alias: name for name, spec in AUTH_ARG_SPEC.items() for alias in spec.get("aliases") or ()}
    assert aliases == k8s_defaults.ALIASES


def test_the_connection_options_are_the_modules() -> None:
    assert frozenset(AUTH_ARG_SPEC) == k8s_defaults.CONNECTION_OPTIONS


def test_every_module_of_the_k8s_group_has_an_action_that_takes_them() -> None:
    runtime = yaml.safe_load((ROOT / "meta" / "runtime.yml").read_text())
    modules = [m for m in runtime["action_groups"]["k8s"] if isinstance(m, str)]
    assert len(modules) >= 10
    for module in modules:
        action = importlib.import_module(f"ansible_collections.nodeops.maintenance.plugins.action.{module}")
        assert issubclass(action.ActionModule, (k8s_defaults.K8sAction, ProgressAction)), module
