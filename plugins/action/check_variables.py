# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The action of nodeops.maintenance.check_variables (there is no module to run on a host): warns about each
variable that starts like the playbook's own but is none of them."""

from __future__ import annotations

from typing import Any

from ansible.plugins.action import ActionBase
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.strict import unknown_variables

ARGUMENT_SPEC: dict[str, Any] = {
    "known": {"type": "list", "elements": "str", "required": True},
    "prefixes": {"type": "list", "elements": "str", "default": []},
    "unknown": {"type": "str", "choices": ["warn", "fail"], "default": "warn"},
}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)[1]
        found = unknown_variables(list(task_vars or {}), args["known"], args["prefixes"])
        result.update(changed=False, unknown=found)
        if found and args["unknown"] == "fail":
            result.update(failed=True, msg=" ".join(found.values()))
        elif found:
            result["warnings"] = list(found.values())
        return result
