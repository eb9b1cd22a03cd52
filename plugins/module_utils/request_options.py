# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The argument specs of the options that ask for node maintenance and say how to drain, shared by the modules.

Their documentation is the doc fragment of the same name, ``plugins/doc_fragments/request_options.py``
(``nodeops.maintenance.request_options``); the ``drain`` module takes the drain options at the top level and
documents them itself. tests/unit/test_module_docs.py checks every module's argument spec against its rendered
documentation, so a spec and its docs cannot drift apart.
"""

from __future__ import annotations

import copy
from typing import Any

# The drain options: the fields of a NodeMaintenance's spec.drainSpec in snake_case, the drain module's options.
FORCE: dict[str, Any] = {"type": "bool", "default": False}
DELETE_EMPTYDIR_DATA: dict[str, Any] = {"type": "bool", "default": False}
POD_SELECTOR: dict[str, Any] = {"type": "str", "default": ""}
DRAIN_TIMEOUT_SECONDS: dict[str, Any] = {"type": "int", "default": 300}
POD_EVICTION_FILTERS: dict[str, Any] = {
    "type": "list",
    "elements": "dict",
    "options": {"by_resource_name_regex": {"type": "str", "required": True, "aliases": ["byResourceNameRegex"]}},
}
# spec.waitForPodCompletion
WAIT_FOR_POD_COMPLETION: dict[str, Any] = {
    "type": "dict",
    "options": {
        "pod_selector": {"type": "str", "default": "", "aliases": ["podSelector"]},
        "timeout_seconds": {"type": "int", "default": 0, "aliases": ["timeoutSeconds"]},
    },
}


def drain_spec_options() -> dict[str, Any]:
    """The sub-options of ``drain_spec``; each also answers to the CRD's name of its field (``deleteEmptyDir``,
    ``podSelector``, ...), so that a spec copied from an object works."""
    return {
        "force": copy.deepcopy(FORCE),
        "delete_emptydir_data": {
            **copy.deepcopy(DELETE_EMPTYDIR_DATA),
            "aliases": ["delete_empty_dir", "deleteEmptyDir"],
        },
        "pod_selector": {**copy.deepcopy(POD_SELECTOR), "aliases": ["podSelector"]},
        "timeout_seconds": {**copy.deepcopy(DRAIN_TIMEOUT_SECONDS), "aliases": ["timeoutSeconds"]},
        "pod_eviction_filters": {**copy.deepcopy(POD_EVICTION_FILTERS), "aliases": ["podEvictionFilters"]},
    }


def _without_aliases(options: dict[str, Any]) -> dict[str, Any]:
    for spec in options.values():
        spec.pop("aliases", None)
        _without_aliases(spec.get("options") or {})
    return options


def drain_options() -> dict[str, Any]:
    """The drain module's options that a NodeMaintenance's drainSpec and waitForPodCompletion also have (under
    kubectl's names alone: the drain module mirrors ``kubectl drain``, not an object)."""
    options = drain_spec_options()
    options["wait_for_pod_completion"] = copy.deepcopy(WAIT_FOR_POD_COMPLETION)
    return _without_aliases(options)


def request_options() -> dict[str, Any]:
    """The options of a request (doc fragment ``nodeops.maintenance.request_options``): who asks, where the
    NodeMaintenance objects live, and their spec (``cordon``, ``wait_for_pod_completion``, ``drain_spec``)."""
    return {
        "requestor": {"type": "str", "required": True, "aliases": ["requestorID"]},
        "namespace": {"type": "str", "default": "default"},
        "name_prefix": {"type": "str"},
        "cordon": {"type": "bool", "default": True},
        "wait_for_pod_completion": {**copy.deepcopy(WAIT_FOR_POD_COMPLETION), "aliases": ["waitForPodCompletion"]},
        "drain_spec": {"type": "dict", "options": drain_spec_options(), "aliases": ["drainSpec"]},
    }


# The spec fields alone (cordon, wait_for_pod_completion, drain_spec), as nm_spec() reads them.
REQUEST_SPEC_OPTIONS = ("cordon", "wait_for_pod_completion", "drain_spec")
