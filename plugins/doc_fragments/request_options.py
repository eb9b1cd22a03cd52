# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The NodeMaintenance request options: who asks, where the objects live, and their spec (spec.cordon,
spec.waitForPodCompletion, spec.drainSpec).

Their argument specs are plugins/module_utils/request_options.py; tests/unit/test_module_docs.py checks that every
module's argument spec agrees with its rendered documentation."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  requestor:
    description:
      - The requestor ID of the NodeMaintenance objects (C(spec.requestorID)), a DNS-like name such as
        V(upgrades.example.com).
    type: str
    required: true
    aliases: [requestorID]
  namespace:
    description: Namespace of the NodeMaintenance objects.
    type: str
    default: default
  name_prefix:
    description: Objects are named C(<name_prefix>-<node>). By default the prefix is O(requestor).
    type: str
  cordon:
    description: Whether the node is cordoned during the maintenance (C(spec.cordon)).
    type: bool
    default: true
  wait_for_pod_completion:
    description:
      - Wait for the pods matching O(wait_for_pod_completion.pod_selector) to finish before the drain
        (C(spec.waitForPodCompletion)). Omit it to skip the step.
    type: dict
    aliases: [waitForPodCompletion]
    suboptions:
      pod_selector:
        description: Label selector of the pods; empty selects every pod on the node.
        type: str
        default: ""
        aliases: [podSelector]
      timeout_seconds:
        description: After this many seconds the drain starts anyway; 0 waits for ever.
        type: int
        default: 0
        aliases: [timeoutSeconds]
  drain_spec:
    description:
      - How to drain the node (C(spec.drainSpec)). Omit it to not drain.
      - Each sub-option also takes the CRD's camelCase name of its field, so a C(drainSpec) copied from an
        object works as it is.
    type: dict
    aliases: [drainSpec]
    suboptions:
      force:
        description: Also evict pods without a controller.
        type: bool
        default: false
      delete_emptydir_data:
        description: Also evict pods with emptyDir volumes.
        type: bool
        default: false
        aliases: [delete_empty_dir, deleteEmptyDir]
      pod_selector:
        description: Only pods matching this label selector are drained.
        type: str
        default: ""
        aliases: [podSelector]
      timeout_seconds:
        description: Timeout of one drain attempt; a new attempt follows. 0 means no timeout.
        type: int
        default: 300
        aliases: [timeoutSeconds]
      pod_eviction_filters:
        description: Only pods with a container that requests a resource matching one of these are evicted.
        type: list
        elements: dict
        aliases: [podEvictionFilters]
        suboptions:
          by_resource_name_regex:
            description: Regular expression matched against the requested resource names.
            type: str
            required: true
            aliases: [byResourceNameRegex]
"""
