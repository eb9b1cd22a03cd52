# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The action of nodeops.maintenance.remediation: runs the module, and while it hands a wait back
(``settle_timeout`` with ``progress_after``), prints what the objects wait for and runs it again with ``resume``.
The task's result is every call's as one: each object's outcome over all of them."""

from __future__ import annotations

from typing import Any

from ansible_collections.nodeops.maintenance.plugins.module_utils.engines.remediation import merge_outcomes
from ansible_collections.nodeops.maintenance.plugins.modules import remediation
from ansible_collections.nodeops.maintenance.plugins.plugin_utils.progress import ProgressAction


class ActionModule(ProgressAction):
    MODULE = "nodeops.maintenance.remediation"
    IN_PROCESS = remediation
    PROGRESS_KEY = "progress"

    def combine(self, so_far: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
        combined = dict(result)
        outcomes = {(o["namespace"], o["name"]): o for o in so_far.get("remediations") or []}
        for outcome in result.get("remediations") or []:  # an object gone since keeps its earlier outcome
            key = (outcome["namespace"], outcome["name"])
            outcomes[key] = merge_outcomes(outcomes[key], outcome) if key in outcomes else outcome
        combined["remediations"] = [outcomes[key] for key in sorted(outcomes)]
        return combined
