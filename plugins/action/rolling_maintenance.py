# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The action of nodeops.maintenance.rolling_maintenance: runs the module, and while a step hands its wait back
(``progress_after``), prints what it waits for and runs the step that goes on with it, with ``resume``.

The steps of one node (``admit`` and ``release``) run on the controller, in this action: their task's host is the
node under maintenance, not where the API is reached, and hundreds of hosts wait in them at once, which a Python
process per call would make cost several times the CPU.

What it imports, it imports at the top: Ansible's strategies load an action's class in ``ansible-playbook``'s own
process (to read ``BYPASS_HOST_LOOP``) before they fork a worker for a task, so the engine is imported once per run
and each worker starts with it, where an import inside a task cost each admit and release its own (three fifths
of the workers' CPU in a 200-node run)."""

from __future__ import annotations

import os
from typing import Any

from ansible.utils.display import Display
from ansible_collections.nodeops.maintenance.plugins.module_utils.engines.rolling import STEP_OF_WAIT
from ansible_collections.nodeops.maintenance.plugins.module_utils.rolling_steps import (
    ARGUMENT_SPEC,
    run,
    run_options,
)
from ansible_collections.nodeops.maintenance.plugins.modules import rolling_maintenance
from ansible_collections.nodeops.maintenance.plugins.plugin_utils import detach, in_process
from ansible_collections.nodeops.maintenance.plugins.plugin_utils.controller_module import (
    ControllerModule,
    Ended,
)
from ansible_collections.nodeops.maintenance.plugins.plugin_utils.progress import ProgressAction

display = Display()

# What a start did before it handed its wait back: the call that goes on only releases.
START_KEYS = ("requested", "added", "interrupted", "requeued", "finished", "overrides")
# The steps that run on the controller.
CONTROLLER_STEPS = ("admit", "release", "drive", "stop")


def outcome_line(step: Any, result: dict[str, Any]) -> str:
    """The line a node's step prints when it is done (an admission, a release), so that the run shows each node
    as it goes without a task of its own per host; empty for the other steps and results."""
    if result.get("failed") or "node" not in result:
        return ""
    if step == "admit" and result.get("admitted"):
        counts = result.get("counts") or {}
        opened = " (a new wave)" if result.get("opened") else ""
        return f"Wave {result.get('wave')}: {result['node']} admitted{opened}; {counts.get('pending', 0)} still pending"
    if step == "release" and result.get("state"):
        failure = f": {result['failure']}" if result.get("failure") else ""
        return f"{result['node']}: {result['state']} (wave {result.get('wave')}){failure}"
    return ""


def _drive_to_the_end(module: Any) -> None:
    """The driver's work: the step ``drive`` (which ends in Ended, as every step), then the kubeconfig's temporary
    files removed (they were written in the worker it was forked from, which leaves them to it)."""
    with in_process.temp_files_removed():
        run(module)


class ActionModule(ProgressAction):
    MODULE = "nodeops.maintenance.rolling_maintenance"
    IN_PROCESS = rolling_maintenance  # its other steps, when the task runs on the controller

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        if self._task.async_val and self._task.args.get("step") in CONTROLLER_STEPS:
            return {
                "failed": True,
                "msg": "step=admit, step=release, step=drive and step=stop run on the controller (admit and release "
                "wait in the task, with progress lines, see progress_after; drive and stop return at once); they do "
                "not take async.",
            }
        result = super().run(tmp, task_vars)
        line = outcome_line(self._task.args.get("step"), result)
        if line:
            display.display(f"{self._task.get_name()}: {line}")
        return result

    def call(self, args: dict[str, Any], task_vars: dict[str, Any] | None) -> dict[str, Any]:
        if args.get("step") not in CONTROLLER_STEPS:
            return super().call(args, task_vars)
        in_process.apply_environment(self)
        try:
            module = ControllerModule(
                ARGUMENT_SPEC, in_process.as_sent(args), bool(self._play_context.check_mode), name=self.MODULE
            )
            if args.get("step") == "drive" and not module.check_mode:
                return self._drive(module)  # the driver removes the kubeconfig's temporary files when it ends
            with in_process.temp_files_removed():
                run(module)
        except Ended as ended:
            return ended.result
        return {"failed": True, "msg": "the step ended without a result"}  # not reached: run() always ends

    @staticmethod
    def _drive(module: Any) -> dict[str, Any]:
        """Start the driver (``run`` with the step ``drive``) in a process of its own, detached from this worker,
        which Ansible ends with the task: it runs until its run ends or ``ansible-playbook`` (this worker's
        parent) is gone. The client is made here first, with the pool the step's workers need, so that a wrong
        connection setting fails the task. A driver that cannot be started is a warning: the nodes' steps run
        the passes themselves then."""
        try:
            options, _overrides = run_options(module.params)
        except ValueError as exc:
            return {"failed": True, "msg": str(exc)}
        if options.reconcile is not None:
            module.set_pool_size(options.reconcile.pool_size())
        module.client  # noqa: B018 - fails the task (Ended) on a connection setting it cannot use
        playbook = detach.Process.of(os.getppid())
        module.alive = playbook.alive
        try:
            pid = detach.start(lambda: _drive_to_the_end(module))
        except OSError as exc:
            return {
                "changed": False,
                "driver": None,
                "warnings": [f"The run's driver could not be started ({exc}); each node's steps run the passes."],
            }
        return {"changed": False, "driver": pid, "msg": f"The run's driver runs as process {pid} on the controller."}

    def again(self, args: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
        resume = result["resume"]
        return {**args, "resume": resume, "step": STEP_OF_WAIT.get(resume.get("phase"), args.get("step"))}

    def combine(self, so_far: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
        combined = dict(result)
        if so_far.get("resume", {}).get("phase") == "interrupted":  # also when the release then failed
            for key in START_KEYS:
                if key in so_far and (not result.get("failed") or key not in result):
                    combined[key] = so_far[key]
        return combined
