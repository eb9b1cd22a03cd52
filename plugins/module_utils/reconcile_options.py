# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The argument specs of the options of the built-in reconcile engine, shared by the modules that run its passes
(maintenance_reconcile, node_maintenance, rolling_maintenance).

Their documentation is the doc fragment of the same name, ``plugins/doc_fragments/reconcile_options.py``
(``nodeops.maintenance.reconcile_options``); tests/unit/test_module_docs.py checks every module's argument spec
against its rendered documentation.
"""

from __future__ import annotations

from typing import Any

DEFAULT_CONFIG_NAMESPACE = "nodeops-maintenance"


def reconcile_options() -> dict[str, Any]:
    """``config_namespace`` (the MaintenanceOperatorConfig ``default`` and the reconcile Lease) and
    ``step_timeout`` (the longest a drain runs within one pass)."""
    return {
        "config_namespace": {"type": "str", "default": DEFAULT_CONFIG_NAMESPACE},
        "step_timeout": {"type": "float", "default": 20},
    }
