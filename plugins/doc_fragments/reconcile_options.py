# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The options of the built-in reconcile engine shared by the modules that run its passes.

Their argument specs are plugins/module_utils/reconcile_options.py; tests/unit/test_module_docs.py checks that every
module's argument spec agrees with its rendered documentation."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  config_namespace:
    description:
      - Namespace of the MaintenanceOperatorConfig named C(default), which holds the limits, and of the reconcile
        Lease. Without that object the built-in defaults apply (C(maxParallelOperations=1), no C(maxUnavailable),
        C(maxNodeMaintenanceTimeSeconds=3600)).
    type: str
    default: nodeops-maintenance
  step_timeout:
    description:
      - The longest a drain runs within one reconcile pass, in seconds; it goes on in the next pass.
      - Only the built-in engine runs passes; with C(engine=operator) it is not used.
    type: float
    default: 20
"""
