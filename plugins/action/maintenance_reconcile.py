# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The action of nodeops.maintenance.maintenance_reconcile: runs the module, and while its passes are handed back
(``until_settled`` with ``progress_after``), prints what they wait for and runs it again with ``resume``. The
task's result is every call's passes as one: what happened in any pass, the state after the last."""

from __future__ import annotations

from typing import Any

from ansible_collections.nodeops.maintenance.plugins.modules import maintenance_reconcile
from ansible_collections.nodeops.maintenance.plugins.plugin_utils.progress import ProgressAction

# What happened in any pass, call after call.
HISTORY = ("scheduled", "advanced", "released", "left_cordoned", "collected", "events", "recovered")


class ActionModule(ProgressAction):
    MODULE = "nodeops.maintenance.maintenance_reconcile"
    IN_PROCESS = maintenance_reconcile
    PROGRESS_KEY = "progress"

    def combine(self, so_far: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
        combined = dict(result)
        for key in HISTORY:
            combined[key] = list(so_far.get(key) or []) + list(result.get(key) or [])
        combined["passes"] = int(so_far.get("passes") or 0) + int(result.get("passes") or 0)
        return combined
