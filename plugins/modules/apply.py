#!/usr/bin/python
# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: apply
short_description: Server-side apply Kubernetes manifests, or delete them
version_added: 0.1.0
author:
  - nodeops.maintenance contributors (@nodeops)
description:
  - Applies one or more Kubernetes objects with server-side apply (O(state=present)), or deletes them
    (O(state=absent)). Any kind the API server serves works, custom resources included.
  - Objects are handled one after the other in the order given (in reverse order for O(state=absent)), so a
    list can hold a CustomResourceDefinition followed by objects of its kind, or a Namespace followed by
    objects in it.
  - A CustomResourceDefinition is waited for until it is C(Established) (with O(wait=true), the default), so
    objects of its kind can be created right after, in the same task or the next one.
  - The task reports a change only when an object really changed; applying the same manifests again reports
    no change.
  - Every manifest is checked for C(apiVersion), C(kind) and C(metadata.name) before the first write. When the
    API server rejects a manifest, the task fails with a message that names it (kind, name, position in
    O(definition)); RV(result) lists what was done before.
extends_documentation_fragment:
  - nodeops.maintenance.k8s_auth_options
  - nodeops.maintenance.attributes
attributes:
  check_mode:
    support: full
    details:
      - Applies and deletions are sent with the API server's dry-run, so validation, defaulting, admission and
        permissions are checked without writing anything.
      - Objects whose CustomResourceDefinition or Namespace would be created earlier in the same task cannot be
        dry-run by the server; they are reported as V(created) without a server check.
  diff_mode:
    support: full
    details:
      - One diff entry per changed object, the whole object before and after (without C(metadata.managedFields)).
options:
  definition:
    description:
      - The objects, as a dict, a list of dicts, or a string with one or more YAML documents.
      - Nested lists are flattened and objects of C(kind=List) are expanded, so the result of the
        C(ansible.builtin.from_yaml_all) filter on a file lookup can be given as is, also several of them in a list.
      - Each object needs C(apiVersion), C(kind) and C(metadata.name).
    type: raw
    required: true
  namespace:
    description:
      - Namespace for the namespaced objects that have no C(metadata.namespace).
      - Ignored for cluster-scoped kinds. A namespaced object with neither fails the task before the first write.
    type: str
  state:
    description:
      - V(present) applies the objects with server-side apply; V(absent) deletes them.
    type: str
    choices: [present, absent]
    default: present
  field_manager:
    description:
      - Name of the field manager recorded for the applied fields.
    type: str
    default: nodeops.maintenance
  force_conflicts:
    description:
      - Take over fields that another field manager set to a different value.
      - When V(false), such a conflict fails the task and names the other managers.
    type: bool
    default: false
  wait:
    description:
      - With O(state=present), wait until each applied CustomResourceDefinition is C(Established).
      - With O(state=absent), wait until each deleted object is gone (its finalizers have run).
    type: bool
    default: true
  wait_timeout:
    description:
      - How many seconds to wait for each object when O(wait=true).
    type: float
    default: 60
requirements:
  - PyYAML (only when O(definition) is a string; it comes with ansible-core and kubernetes)
notes:
  - Server-side apply merges. Fields that the manifest no longer lists are removed only when this field
    manager set them before and no other manager owns them.
  - A CustomResourceDefinition deleted with O(state=absent) takes every object of its kind with it.
seealso:
  - name: Server-side apply
    description: How the API server merges applied configuration and tracks field ownership.
    link: https://kubernetes.io/docs/reference/using-api/server-side-apply/
  - module: nodeops.maintenance.cordon
"""

EXAMPLES = r"""
- name: Install a CRD from a file, then wait until it is served
  nodeops.maintenance.apply:
    definition: "{{ lookup('ansible.builtin.file', 'crds/nodemaintenances.yaml') | ansible.builtin.from_yaml_all }}"

- name: Create a namespace and the operator configuration in it, in one task
  nodeops.maintenance.apply:
    definition:
      - apiVersion: v1
        kind: Namespace
        metadata:
          name: nodeops-maintenance
      - apiVersion: maintenance.nvidia.com/v1alpha1
        kind: MaintenanceOperatorConfig
        metadata:
          name: default
          namespace: nodeops-maintenance
        spec:
          maxParallelOperations: 2
          maxUnavailable: "20%"

- name: Request maintenance of a node, with the connection set once for the play
  module_defaults:
    group/nodeops.maintenance.k8s:
      kubeconfig: ~/.kube/prod
  nodeops.maintenance.apply:
    namespace: nodeops-maintenance
    definition:
      apiVersion: maintenance.nvidia.com/v1alpha1
      kind: NodeMaintenance
      metadata:
        name: gpu-07-driver-upgrade
      spec:
        requestorID: gpu-driver.example.com
        nodeName: gpu-07
        drainSpec:
          force: true
          deleteEmptyDir: true

- name: Delete it again and wait until the operator has let it go
  nodeops.maintenance.apply:
    state: absent
    wait_timeout: 600
    definition:
      apiVersion: maintenance.nvidia.com/v1alpha1
      kind: NodeMaintenance
      metadata:
        name: gpu-07-driver-upgrade
        namespace: nodeops-maintenance
"""

RETURN = r"""
result:
  description: One entry per object, in the order they were handled.
  returned: always
  type: list
  elements: dict
  contains:
    apiVersion:
      description: API version of the object.
      type: str
      sample: maintenance.nvidia.com/v1alpha1
    kind:
      description: Kind of the object.
      type: str
      sample: MaintenanceOperatorConfig
    name:
      description: Name of the object.
      type: str
      sample: default
    namespace:
      description: Namespace of the object; V(null) for cluster-scoped kinds.
      type: str
      sample: nodeops-maintenance
    changed:
      description: Whether this object was (or in check mode would be) changed.
      type: bool
      sample: true
    action:
      description:
        - What happened to the object (in check mode, what would happen).
        - V(created), V(updated) or V(unchanged) with O(state=present); V(deleted) or V(absent) (it was not
          there, or was already being deleted) with O(state=absent).
      type: str
      sample: updated
  sample:
    - apiVersion: apiextensions.k8s.io/v1
      kind: CustomResourceDefinition
      name: nodemaintenances.maintenance.nvidia.com
      namespace: null
      changed: false
      action: unchanged
diff:
  description:
    - One entry per changed object with the object before and after, without C(metadata.managedFields).
    - An empty dict stands for "does not exist".
  returned: when diff mode is on
  type: list
  elements: dict
  sample:
    - before_header: MaintenanceOperatorConfig/default in namespace nodeops-maintenance (definition item 1)
      after_header: MaintenanceOperatorConfig/default in namespace nodeops-maintenance (definition item 1)
      before: {}
      after:
        apiVersion: maintenance.nvidia.com/v1alpha1
        kind: MaintenanceOperatorConfig
        metadata: {name: default, namespace: nodeops-maintenance}
        spec: {maxParallelOperations: 1}
"""

from typing import Any

from ansible_collections.nodeops.maintenance.plugins.module_utils.core.node.errors import NodeopsError
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.apply import (
    Applier,
    ApplyError,
    ManifestError,
    load_manifests,
)
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.module import K8sModule

ARGUMENT_SPEC: dict[str, Any] = {
    "definition": {"type": "raw", "required": True},
    "namespace": {"type": "str"},
    "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
    "field_manager": {"type": "str", "default": "nodeops.maintenance"},
    "force_conflicts": {"type": "bool", "default": False},
    "wait": {"type": "bool", "default": True},
    "wait_timeout": {"type": "float", "default": 60},
}
CHECKS: dict[str, Any] = {}


def run(module: Any) -> None:
    """Apply the definition; ends in ``module.exit_json`` or ``module.fail_json`` (a K8sModule, or its stand-in in
    the action when the task runs on the controller)."""
    params = module.params
    if params["wait_timeout"] < 0:
        module.fail_json(msg=f"wait_timeout must be 0 or more seconds, not {params['wait_timeout']:g}")
    try:
        manifests = load_manifests(params["definition"], params["namespace"])
    except ManifestError as exc:
        module.fail_json(msg=f"definition: {exc}")
    except NodeopsError as exc:
        module.fail_error(exc)

    try:
        applier = Applier(
            module.client,
            field_manager=params["field_manager"],
            force_conflicts=params["force_conflicts"],
            check_mode=module.check_mode,
            wait=params["wait"],
            wait_timeout=float(params["wait_timeout"]),
        )
        if params["state"] == "present":
            applier.present(manifests)
        else:
            applier.absent(manifests)
    except ApplyError as exc:
        extra = {"error": exc.cause.to_result()} if exc.cause is not None else {}
        module.fail_json(
            msg=exc.msg,
            result=exc.results,
            changed=any(r["changed"] for r in exc.results) and not module.check_mode,
            **extra,
        )
    except NodeopsError as exc:
        module.fail_error(exc)

    out = {"changed": any(r["changed"] for r in applier.results), "result": applier.results}
    if module._diff:
        out["diff"] = applier.diffs
    module.exit_json(**out)


def main() -> None:
    run(K8sModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True, **CHECKS))


if __name__ == "__main__":
    main()
