# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The action of a module that hands a long wait back (``progress_after``): it runs the module, and while the
module's result carries ``resume``, prints what it waits for and runs the module again with ``resume``, so that
one task waits to the end with a line at least every ``progress_after`` seconds.

The module gets the connection settings of kubernetes.core's module_defaults groups as defaults
(``k8s_defaults.py``). The task's result is the calls' results combined (``combine``): by default the last one,
``changed`` when any call changed something, and the warnings and deprecations of every call."""

from __future__ import annotations

from typing import Any

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible_collections.nodeops.maintenance.plugins.plugin_utils import in_process
from ansible_collections.nodeops.maintenance.plugins.plugin_utils.k8s_defaults import (
    K8sAction,
    with_connection_defaults,
)

display = Display()

# A wait can be handed back at most this many times in one task (a guard against a module that never ends one:
# the longest wait, an hour of gate and an hour for the scheduler at one line a second, fits).
MAX_CALLS = 10_000
# What every call adds to the task's result.
NOTICES = ("warnings", "deprecations")


class ProgressAction(K8sAction):
    """Subclasses name their ``MODULE`` (and ``PROGRESS_KEY`` when it is not ``waiting``) and may change how the
    next call's arguments are made (``again``) and how the results add up (``combine``). A task run with ``async``
    makes one call, as Ansible's own action does."""

    TRANSFERS_FILES = False
    MODULE = ""
    # the key of a handed-back result that holds what it waits for (its ``message``)
    PROGRESS_KEY = "waiting"

    def again(self, args: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
        """The arguments of the call that goes on with the wait ``result`` handed back."""
        return {**args, "resume": result["resume"]}

    def message(self, result: dict[str, Any]) -> str:
        """What the wait ``result`` handed back waits for."""
        return str((result.get(self.PROGRESS_KEY) or {}).get("message", "waiting"))

    def combine(self, so_far: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
        """The task's result so far and the next call's, as one (``changed`` and the notices are added after)."""
        return result

    def call(self, args: dict[str, Any], task_vars: dict[str, Any] | None) -> dict[str, Any]:
        """One call: the module, where the task runs (in this worker when it runs on the controller with
        ``ansible-playbook``'s own Python and the action names ``IN_PROCESS``, see in_process.py)."""
        if self.IN_PROCESS is not None and in_process.runs_here(self, task_vars or {}):
            return in_process.run_module(self, self.IN_PROCESS, args)
        return self._execute_module(module_name=self.MODULE, module_args=args, task_vars=task_vars)

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        if self._task.async_val:  # one call in the background, which waits to the end without a line
            if "progress_after" in self._task.args:
                self._task.args = {**self._task.args, "progress_after": 0}
            return super().run(tmp, task_vars)
        ActionBase.run(self, tmp, task_vars)  # its checks and set-up, not the one call of Ansible's own action
        args = with_connection_defaults(self, self._task.args, task_vars)
        result = self.call(args, task_vars)
        calls = 1
        while "resume" in result and not result.get("failed") and calls < MAX_CALLS:
            display.display(f"{self._task.get_name()}: {self.message(result)}")
            args = self.again(args, result)
            following = self.call(args, task_vars)
            calls += 1
            combined = self.combine(result, following)
            combined["changed"] = bool(result.get("changed")) or bool(following.get("changed"))
            for key in NOTICES:
                notices = list(result.get(key) or [])
                notices += [n for n in following.get(key) or [] if n not in notices]  # a call's repeats once
                if notices:
                    combined[key] = notices
            result = combined
        if "resume" in result:  # still waiting after MAX_CALLS calls: nothing goes on with it
            del result["resume"]
            result.update(
                failed=True, msg=f"The wait was handed back {MAX_CALLS} times and still goes on; it stops here."
            )
        return result
