# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The action of nodeops.maintenance.maintenance_plan: Ansible's own, with the connection settings of kubernetes.core's
module_defaults groups as defaults (plugin_utils/k8s_defaults.py); on the controller with ansible-playbook's own
Python, the module runs in the task's worker (plugin_utils/in_process.py)."""

from __future__ import annotations

from ansible_collections.nodeops.maintenance.plugins.modules import maintenance_plan
from ansible_collections.nodeops.maintenance.plugins.plugin_utils.k8s_defaults import K8sAction


class ActionModule(K8sAction):
    IN_PROCESS = maintenance_plan
