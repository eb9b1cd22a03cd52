# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The remediation_strategy filter: which SelfNodeRemediation strategy runs on a Kubernetes version."""

from __future__ import annotations

DOCUMENTATION = r"""
name: remediation_strategy
short_description: The self node remediation strategy that runs for a requested one on a Kubernetes version
version_added: 0.1.0
author:
  - nodeops.maintenance contributors (@nodeops)
description:
  - Says which strategy a C(SelfNodeRemediation) with C(spec.remediationStrategy) set to the input runs on a
    cluster of the given version, as M(nodeops.maintenance.remediation) chooses it.
  - V(Automatic) (or no strategy) is V(OutOfServiceTaint) on Kubernetes 1.28 or newer, where the
    out-of-service taint is generally available, and V(ResourceDeletion) before.
  - V(ResourceDeletion) runs as asked. V(OutOfServiceTaint) needs Kubernetes 1.26 or newer; on an older version the
    filter fails, as the remediation would.
options:
  _input:
    description:
      - The requested strategy, V(Automatic), V(ResourceDeletion) or V(OutOfServiceTaint); V(null) or an empty
        string is V(Automatic).
    type: str
    required: true
  kubernetes_version:
    description:
      - The cluster's version as C(/version) gives it in C(gitVersion) (V(v1.30.2), V(v1.28.2-eks-abc)), or just
        V(1.30).
    type: str
    required: true
seealso:
  - module: nodeops.maintenance.remediation
  - name: medik8s Self Node Remediation
    description: The upstream project whose strategies this filter follows.
    link: https://github.com/medik8s/self-node-remediation
"""

EXAMPLES = r"""
- name: What Automatic runs on this cluster
  vars:
    git_version: "{{ cluster_info.version.server.kubernetes.gitVersion }}"
  ansible.builtin.debug:
    msg: "{{ 'Automatic' | nodeops.maintenance.remediation_strategy(kubernetes_version=git_version) }}"

- name: Automatic on Kubernetes 1.27 (ResourceDeletion)
  ansible.builtin.assert:
    that: "(none | nodeops.maintenance.remediation_strategy(kubernetes_version='v1.27.4')) == 'ResourceDeletion'"
"""

RETURN = r"""
_value:
  description: The strategy that runs, V(ResourceDeletion) or V(OutOfServiceTaint).
  type: str
  sample: OutOfServiceTaint
"""

from typing import Any  # noqa: E402

from ansible.errors import AnsibleFilterError  # noqa: E402
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.remediation.strategy import (  # noqa: E402
    StrategyError,
    resolve_strategy,
)


def remediation_strategy(requested: Any, kubernetes_version: Any = None) -> str:
    """The strategy that runs for ``requested`` on ``kubernetes_version``; see DOCUMENTATION."""
    if kubernetes_version is None:
        raise AnsibleFilterError(
            "remediation_strategy: kubernetes_version is required, the cluster's gitVersion such as 'v1.30.2'."
        )
    if requested is not None and not isinstance(requested, str):
        raise AnsibleFilterError(
            f"remediation_strategy: the input must be a strategy name (Automatic, ResourceDeletion or "
            f"OutOfServiceTaint), not {requested!r}."
        )
    try:
        return resolve_strategy(requested, kubernetes_version, field="remediation_strategy")
    except StrategyError as err:
        raise AnsibleFilterError(f"remediation_strategy: {err}") from err


class FilterModule:
    """nodeops.maintenance filters for the remediation strategy."""

    def filters(self) -> dict[str, Any]:
        return {"remediation_strategy": remediation_strategy}
