# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Test-only stdout callback: one JSON line per task result (host, task name, result), for the tests."""

from __future__ import annotations

DOCUMENTATION = r"""
name: result_json
type: stdout
short_description: One JSON line per task result (tests only)
description:
  - Prints every task result as one JSON object on its own line, for the collection's tests.
"""

import json

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"
    CALLBACK_NAME = "result_json"

    def _emit(self, result, status: str) -> None:
        data = dict(result._result)
        for key in ("warnings", "deprecations"):
            if key in data:
                data[key] = [w if isinstance(w, str) else getattr(w, "msg", str(w)) for w in data[key]]
        data["_status"] = status
        line = {"host": result._host.get_name(), "task": result.task_name, "result": data}
        self._display.display(json.dumps(line, default=str))

    def v2_runner_on_ok(self, result) -> None:
        self._emit(result, "ok")

    def v2_runner_on_failed(self, result, ignore_errors: bool = False) -> None:
        self._emit(result, "failed")

    def v2_runner_on_unreachable(self, result) -> None:
        self._emit(result, "unreachable")
