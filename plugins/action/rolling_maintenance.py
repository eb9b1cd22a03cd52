# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The action of nodeops.maintenance.rolling_maintenance: runs the module, and while a step hands its wait back
(``progress_after``: ``waiting`` and ``resume`` in its result), prints what it waits for and runs it again with
``resume``, so that one task waits to the end with a line at least every ``progress_after`` seconds."""

from __future__ import annotations

from typing import Any

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

display = Display()

MODULE = "nodeops.maintenance.rolling_maintenance"
# A wait can be handed back at most this many times in one task (a guard against a module that never ends one:
# the longest wait, an hour of gate, an hour of wave and ten minutes of Ready at one line a second, fits).
MAX_CALLS = 10_000


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        super().run(tmp, task_vars)
        args = dict(self._task.args)
        result = self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars)
        finished = result.get("finished")
        changed = bool(result.get("changed"))
        calls = 1
        while "resume" in result and not result.get("failed") and calls < MAX_CALLS:
            waiting = result.get("waiting") or {}
            display.display(f"{self._task.get_name()}: {waiting.get('message', 'waiting')}")
            resume = result["resume"]
            again = {**args, "resume": resume}
            if resume.get("phase") != "ready":  # a wave or gate wait: the next_wave step (also after a finish)
                again["step"] = "next_wave"
            result = self._execute_module(module_name=MODULE, module_args=again, task_vars=task_vars)
            calls += 1
            changed = changed or bool(result.get("changed"))
            finished = result.get("finished", finished)
        if finished is not None and "finished" not in result and not result.get("failed"):
            result["finished"] = finished  # the wave's outcome, from the finish whose next_wave handed a wait back
        result["changed"] = changed
        return result
