# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The safe_reboot_time filter: the safe time of self node remediation for a SelfNodeRemediationConfig spec."""

from __future__ import annotations

DOCUMENTATION = r"""
name: safe_reboot_time
short_description: Time after which an unhealthy node can be assumed rebooted (self node remediation)
version_added: 0.1.0
author:
  - nodeops.maintenance contributors (@nodeops)
description:
  - Computes from the spec of a C(SelfNodeRemediationConfig) how long an unhealthy node's workloads must
    wait before they are recovered elsewhere, that is the time after which the node has certainly
    rebooted itself through its watchdog (it is fenced).
  - The minimum is the API-check part, C(maxApiErrorThreshold) x (C(apiCheckInterval) + C(apiServerTimeout)),
    plus the peer part, the number of peer batches x (C(peerDialTimeout) + the effective peer request
    timeout) but at least 30 seconds, plus the watchdog timeout, plus 30 seconds.
  - The peers are asked in batches of 3 first, then of max(3, (workers - 3) // 10).
  - The effective peer request timeout is max(C(peerRequestTimeout), C(apiServerTimeout) + 2s), the time
    the node agent really waits (upstream medik8s counts the configured value, which can be shorter).
  - A configured C(safeTimeToAssumeNodeRebootedSeconds) is used only when it is not below the minimum.
  - With every setting at its default the result is 180 seconds for up to 6 worker nodes.
  - Fields missing from the spec take their upstream defaults, so V({}) gives the default configuration.
options:
  _input:
    description:
      - The C(spec) of a C(SelfNodeRemediationConfig) as in the object, with durations such as V(15s),
        V(500ms) or V(1m30s). V(null) or V({}) means all defaults.
    type: dict
    required: true
  worker_nodes:
    description:
      - Number of nodes labelled C(node-role.kubernetes.io/worker), the unhealthy one included when it has
        the label.
    type: int
    required: true
  watchdog_timeout:
    description:
      - Watchdog timeout of the unhealthy node in seconds, for example the value of its annotation
        C(self-node-remediation.medik8s.io/watchdog-timeout).
      - Unknown (not given, not a number, or 0 or less) counts as 60 seconds.
    type: raw
    default: 60
notes:
  - A bad duration or number fails the task with a message that names the field, for example
    C(spec.apiCheckInterval).
seealso:
  - name: medik8s Self Node Remediation
    description: The upstream project whose configuration and arithmetic this filter follows.
    link: https://github.com/medik8s/self-node-remediation
"""

EXAMPLES = r"""
- name: Safe time with the default configuration on a 6-worker cluster (180 seconds)
  ansible.builtin.debug:
    msg: "{{ {} | nodeops.maintenance.safe_reboot_time(worker_nodes=6) }}"

- name: Safe time of the configuration in the cluster, for a node with a 10 second watchdog
  vars:
    snr_config_spec: "{{ snr_config.resources[0].spec }}"
  ansible.builtin.debug:
    msg: >-
      Wait {{ (snr_config_spec | nodeops.maintenance.safe_reboot_time(worker_nodes=20,
      watchdog_timeout=10)).effective_seconds }} seconds before recovering the workloads.

- name: Refuse a configured safe time that would be replaced by the minimum
  vars:
    safe: "{{ {'safeTimeToAssumeNodeRebootedSeconds': 120} | nodeops.maintenance.safe_reboot_time(worker_nodes=3) }}"
  ansible.builtin.assert:
    that: safe.effective_seconds == 120
    fail_msg: "120 s is below the minimum of {{ safe.minimum_seconds }} s"
"""

RETURN = r"""
_value:
  description: The safe time and its parts, in seconds.
  type: dict
  contains:
    minimum_seconds:
      description: The computed minimum, rounded up to a whole second.
      type: int
      sample: 180
    effective_seconds:
      description:
        - The time to wait, the configured C(safeTimeToAssumeNodeRebootedSeconds) when it is not below the
          minimum, else the minimum.
      type: int
      sample: 180
    api_check_seconds:
      description: maxApiErrorThreshold x (apiCheckInterval + apiServerTimeout).
      type: float
      sample: 60
    peer_check_seconds:
      description: peer_batches x (peerDialTimeout + effective peer request timeout), at least 30.
      type: float
      sample: 30
    peer_batches:
      description: Number of batches in which the agent asks its worker peers.
      type: int
      sample: 2
    batch_sizes:
      description: Size of each batch.
      type: list
      elements: int
      sample: [3, 3]
    peer_request_timeout_seconds:
      description: The effective peer request timeout, max(peerRequestTimeout, apiServerTimeout + 2s).
      type: float
      sample: 7
    watchdog_seconds:
      description: The watchdog timeout counted (60 when unknown).
      type: float
      sample: 60
    reboot_seconds:
      description: watchdog_seconds + 30.
      type: float
      sample: 90
    configured_seconds:
      description: The configured safeTimeToAssumeNodeRebootedSeconds, or null.
      type: int
      sample: null
    configured_used:
      description: Whether the configured value is the one waited.
      type: bool
      sample: false
"""

from typing import Any  # noqa: E402

from ansible.errors import AnsibleFilterError  # noqa: E402
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.node.safetime import SafeTimeError, safe_time  # noqa: E402


def safe_reboot_time(spec: Any, worker_nodes: Any = None, watchdog_timeout: Any = None) -> dict[str, Any]:
    """The safe time for ``spec`` (a SelfNodeRemediationConfig spec); see DOCUMENTATION."""
    if worker_nodes is None:
        raise AnsibleFilterError(
            "safe_reboot_time: worker_nodes is required, the number of nodes labelled node-role.kubernetes.io/worker."
        )
    if isinstance(worker_nodes, str) and worker_nodes.strip().isascii() and worker_nodes.strip().isdigit():
        worker_nodes = int(worker_nodes)
    if spec is not None and not isinstance(spec, dict):
        raise AnsibleFilterError(
            f"safe_reboot_time: the input must be the spec of a SelfNodeRemediationConfig (a dict), not {spec!r}."
        )
    try:
        return safe_time(spec, worker_nodes, watchdog_timeout).as_dict()
    except SafeTimeError as err:
        raise AnsibleFilterError(f"safe_reboot_time: {err}") from err


class FilterModule:
    """nodeops.maintenance filters for self node remediation."""

    def filters(self) -> dict[str, Any]:
        return {"safe_reboot_time": safe_reboot_time}
