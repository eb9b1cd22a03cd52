# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A module of this collection run inside its action, in the worker process Ansible forked for the task, instead of
in a Python process of its own, when that process would be one more copy of ``ansible-playbook``'s own Python on
the same machine: the task runs on the controller (the ``local`` connection, ``delegate_to: localhost`` included),
without ``become`` or ``async``, and its Python interpreter (``ansible_python_interpreter``, or the
``interpreter_python`` setting) is the one ``ansible-playbook`` runs on (``ansible_playbook_python``, which the
implicit localhost has, or another name of it in the same directory). Any other interpreter, ``auto`` discovery
included, gets the module process as always.

The module's own code runs, with a stand-in for its AnsibleModule (controller_module.py): the same argument checks,
results, failures and no_log masking; what a run saves is the module process (Python's start, the module's
packaging and the imports of ansible.module_utils), about 0.2-0.3 CPU-seconds a call. What is left out is what only
a module process does: logging the invocation to the system log of the controller.

A module takes part by naming ``ARGUMENT_SPEC``, ``CHECKS`` (its AnsibleModule's checks across options, may be
empty) and ``run(module)``, which ends in ``module.exit_json`` or ``module.fail_json``; its action imports it at
the top, so that ``ansible-playbook``'s process (which loads every action before it forks a worker) imports it once
and each worker starts with it."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from ansible import constants as C
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s import kubeconfig
from ansible_collections.nodeops.maintenance.plugins.plugin_utils.controller_module import ControllerModule, Ended


class InProcessModule(Protocol):
    """What a module file names to run in its action (see the module's docstring)."""

    ARGUMENT_SPEC: dict[str, Any]
    CHECKS: dict[str, Any]

    def run(self, module: Any) -> None: ...


def interpreter(action: Any, task_vars: Mapping[str, Any]) -> str | None:
    """The Python interpreter a module process of this task would be started with, as configured (``auto`` and its
    kinds as they are: no discovery), the variables of the host it is delegated to applying."""
    use_vars: Mapping[str, Any] = task_vars
    if action._task.delegate_to:
        use_vars = (task_vars.get("ansible_delegated_vars") or {}).get(action._task.delegate_to) or task_vars
    value = use_vars.get("ansible_python_interpreter")
    if value is None:
        value = C.config.get_config_value("INTERPRETER_PYTHON", variables=use_vars)
    value = action._templar.template(value) if value is not None else None
    return str(value) if value is not None else None


def runs_here(action: Any, task_vars: Mapping[str, Any]) -> bool:
    """Whether the task's module would run on the controller with ``ansible-playbook``'s own Python (see above)."""
    if action._task.async_val or action._play_context.become:
        return False
    if getattr(action._connection, "transport", None) != "local":
        return False
    return same_python(interpreter(action, task_vars), sys.executable)


def same_python(path: str | None, executable: str) -> bool:
    """Whether ``path`` starts the Python of ``executable``: the same file in the same directory (``python`` and
    ``python3`` of one virtual environment are; a link to it from elsewhere is not, for a virtual environment is
    found from the directory the interpreter was started from)."""
    if not path or not os.path.isabs(path):
        return False
    here, there = os.path.abspath(path), os.path.abspath(executable)
    return os.path.dirname(here) == os.path.dirname(there) and os.path.realpath(here) == os.path.realpath(there)


def apply_environment(action: Any) -> None:
    """The task's ``environment`` in this worker process (which Ansible forked for this task and host, and which ends
    with it), as a module process started by the task would see it: the client reads its connection's environment
    (``K8S_AUTH_*``, ``KUBECONFIG``, what exec credential plugins read) from the process."""
    environment: dict[str, Any] = {}
    action._compute_environment_string(environment)
    os.environ.update({str(k): str(v) for k, v in environment.items()})


def as_sent(args: Mapping[str, Any]) -> dict[str, Any]:
    """``args`` as a module process gets them: through JSON, as Ansible sends them (vaulted values as their text,
    tuples as lists, keys as strings, no template markers)."""
    try:  # ansible-core 2.19 and later
        from ansible.module_utils.common.json import Direction, get_module_decoder, get_module_encoder

        encoder = get_module_encoder("legacy", Direction.CONTROLLER_TO_MODULE)
        decoder = get_module_decoder("legacy", Direction.CONTROLLER_TO_MODULE)
        return dict(json.loads(json.dumps(args, cls=encoder), cls=decoder))
    except ImportError:
        from ansible.module_utils.common.json import AnsibleJSONEncoder

        return dict(json.loads(json.dumps(args, cls=AnsibleJSONEncoder, vault_to_text=True)))


@contextlib.contextmanager
def temp_files_removed() -> Iterator[None]:
    """At the end, the temporary files that the connection's kubeconfig was read into (its ``*-data`` fields: keys,
    certificates) are removed, by this collection's reader and by the official one: a module process removes them
    when it exits, but Ansible's worker ends with os._exit, which runs no exit handler."""
    try:
        yield
    finally:
        kubeconfig.remove_temp_files()
        official = sys.modules.get("kubernetes.config.kube_config")
        cleanup = getattr(official, "_cleanup_temp_files", None)
        if callable(cleanup):
            with contextlib.suppress(OSError):
                cleanup()


def run_module(action: Any, module: InProcessModule, args: Mapping[str, Any]) -> dict[str, Any]:
    """The result of ``module`` run with ``args`` in this process, as its module process would have returned it."""
    apply_environment(action)
    try:
        with temp_files_removed():
            stand_in = ControllerModule(
                module.ARGUMENT_SPEC,
                as_sent(args),
                bool(action._task.check_mode),
                bool(action._task.diff),
                name=getattr(action, "MODULE", "") or action._task.action,
                **module.CHECKS,
            )
            module.run(stand_in)
    except Ended as ended:
        return ended.result
    return {"failed": True, "msg": f"{action._task.action} ended without a result"}  # not reached: run() ends
