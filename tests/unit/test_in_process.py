"""When a module of this collection runs in its task's worker instead of a module process (plugins/plugin_utils/
in_process.py): only on the controller, without become or async, with ansible-playbook's own Python. What it runs is
tested against the module process in tests/integration/test_in_process.py."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.nodeops.maintenance.plugins.plugin_utils import in_process

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable


class Templar:
    def template(self, value: Any) -> Any:
        return PYTHON if value == "{{ ansible_playbook_python }}" else value


class Task:
    def __init__(self, delegate_to: str | None = None, async_val: int = 0) -> None:
        self.delegate_to = delegate_to
        self.async_val = async_val


class PlayContext:
    def __init__(self, become: bool = False) -> None:
        self.become = become


class Connection:
    def __init__(self, transport: str) -> None:
        self.transport = transport


class Action:
    def __init__(
        self, transport: str = "local", become: bool = False, async_val: int = 0, delegate_to: str | None = None
    ) -> None:
        self._task = Task(delegate_to, async_val)
        self._play_context = PlayContext(become)
        self._connection = Connection(transport)
        self._templar = Templar()


def test_a_local_task_with_ansible_playbooks_python_runs_in_the_worker() -> None:
    assert in_process.runs_here(Action(), {"ansible_python_interpreter": PYTHON})
    assert in_process.runs_here(Action(), {"ansible_python_interpreter": "{{ ansible_playbook_python }}"})


@pytest.mark.parametrize(
    ("action", "why"),
    [
        (Action(transport="ssh"), "another machine"),
        (Action(transport="ansible.netcommon.network_cli"), "another machine"),
        (Action(become=True), "another user"),
        (Action(async_val=30), "async: a job of its own"),
    ],
)
def test_elsewhere_as_another_user_or_async_gets_a_module_process(action: Action, why: str) -> None:
    assert not in_process.runs_here(action, {"ansible_python_interpreter": PYTHON}), why


@pytest.mark.parametrize(
    "interpreter",
    [
        "/usr/bin/python3.9",  # another Python
        "auto",  # discovery, which may find another
        "auto_silent",
        "python3",  # a name on the PATH, not a path
        "",
    ],
)
def test_another_interpreter_gets_a_module_process(interpreter: str) -> None:
    assert not in_process.runs_here(Action(), {"ansible_python_interpreter": interpreter})


def test_the_delegated_hosts_interpreter_decides() -> None:
    """delegate_to: localhost from a node's task: the interpreter of localhost, not of the node."""
    task_vars = {
        "ansible_python_interpreter": "/usr/bin/python3.9",  # the node's
        "ansible_delegated_vars": {"localhost": {"ansible_python_interpreter": PYTHON}},
    }
    assert in_process.runs_here(Action(delegate_to="localhost"), task_vars)
    assert not in_process.runs_here(Action(), task_vars)
    task_vars["ansible_delegated_vars"]["localhost"]["ansible_python_interpreter"] = "/usr/bin/python3.9"
    assert not in_process.runs_here(
        Action(delegate_to="localhost"), {**task_vars, "ansible_python_interpreter": PYTHON}
    )


def test_without_the_variable_the_setting_decides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANSIBLE_PYTHON_INTERPRETER", PYTHON)
    assert in_process.runs_here(Action(), {})
    monkeypatch.setenv("ANSIBLE_PYTHON_INTERPRETER", "auto_silent")
    assert not in_process.runs_here(Action(), {})


def test_another_name_of_the_same_python_in_its_directory_is_the_same(tmp_path: Path) -> None:
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python3").symlink_to(PYTHON)
    (bin_dir / "python").symlink_to("python3")
    assert in_process.same_python(str(bin_dir / "python"), str(bin_dir / "python3"))
    # the same file from another directory is another environment (a virtual environment is found from it)
    elsewhere = tmp_path / "other"
    elsewhere.mkdir()
    (elsewhere / "python3").symlink_to(bin_dir / "python3")
    assert not in_process.same_python(str(elsewhere / "python3"), str(bin_dir / "python3"))
    assert not in_process.same_python("python3", str(bin_dir / "python3"))
    assert not in_process.same_python(None, str(bin_dir / "python3"))


def test_every_action_that_runs_its_module_in_the_worker_has_what_it_needs() -> None:
    """The module file names its argument spec, its checks across options and run(); its main() gives the same to
    K8sModule (so the two ways check the same)."""
    found = []
    for path in sorted((ROOT / "plugins" / "action").glob("*.py")):
        action = importlib.import_module(f"ansible_collections.nodeops.maintenance.plugins.action.{path.stem}")
        module = getattr(action.ActionModule, "IN_PROCESS", None)
        if module is None:
            continue
        found.append(path.stem)
        assert module.__name__.endswith(f".modules.{path.stem}"), (path.stem, module.__name__)
        assert isinstance(module.ARGUMENT_SPEC, dict) and isinstance(module.CHECKS, dict)
        assert callable(module.run)
        source = Path(module.__file__).read_text()
        assert "run(K8sModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True, **CHECKS))" in source, path.stem
    # every module that talks to the API
    assert set(found) == {
        "apply",
        "cordon",
        "drain",
        "maintenance_plan",
        "maintenance_reconcile",
        "node_health",
        "node_info",
        "node_maintenance",
        "remediation",
        "rolling_maintenance",
    }
    assert os.path.isabs(PYTHON)


def test_the_arguments_reach_the_module_as_a_module_process_gets_them() -> None:
    sent = in_process.as_sent({"name": ("a", "b"), "labels": {1: "one"}, "nothing": None})
    assert sent == {"name": ["a", "b"], "labels": {"1": "one"}, "nothing": None}


def test_the_kubeconfigs_temporary_files_are_removed_when_the_module_ends() -> None:
    """A worker ends with os._exit, which runs no exit handler: the files holding a kubeconfig's keys would stay."""
    from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s import kubeconfig

    with pytest.raises(RuntimeError), in_process.temp_files_removed():
        key = kubeconfig._temp_file(b"-----BEGIN PRIVATE KEY----- in-process test")
        assert os.path.isfile(key)
        raise RuntimeError("the module failed")  # also when it ends in a failure
    assert not os.path.exists(key)
