#!/usr/bin/python
# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: metrics_push
short_description: Push the figures of a node_health, remediation or rolling_maintenance task to Prometheus
version_added: 0.1.0
author:
  - nodeops.maintenance contributors (@nodeops)
description:
  - Turns the registered result of a M(nodeops.maintenance.node_health), M(nodeops.maintenance.remediation) or
    M(nodeops.maintenance.rolling_maintenance) task (O(result) with O(source)), or figures you describe
    (O(metrics)), into Prometheus' text format, and pushes it to a Pushgateway (O(pushgateway_url)), writes it to
    a node-exporter textfile (O(textfile)), or both.
  - The metric names, labels and meaning are listed in the collection's C(docs/metrics.md).
  - A push replaces (V(put)) or updates (V(post)) the group C(job=<job>) plus O(grouping) on the gateway; the
    group of a NodeHealthCheck gets C(nhc), a rolling run's C(run_id), unless O(grouping) names them.
  - The textfile is written to a temporary file in the same directory and renamed over the old one, so
    node-exporter never reads half a file; a file that already holds the same text is left alone (the figures of
    a module's result carry the time they were taken, so those change at every run; O(metrics) need not).
  - Nothing is sent or written before every figure, name and label has been checked.
options:
  source:
    description:
      - Which module's result O(result) is.
    type: str
    choices: [node_health, remediation, rolling_maintenance]
  result:
    description:
      - The registered result of a task of the O(source) module (any step of rolling_maintenance; the C(summary)
        step's also gives each wave's length).
      - Mutually exclusive with O(metrics); one of the two is required.
    type: dict
  nhc:
    description:
      - The NodeHealthCheck's name, the C(nhc) label of node_health's figures. Required with O(source=node_health).
    type: str
  metrics:
    description:
      - Figures of your own, each C(name), C(value) and optionally C(type) (V(gauge), or V(counter) for a name ending
        in C(_total)), C(help) and C(labels) (a mapping).
      - Names and label names must follow Prometheus' rules; a name of the collection's catalogue takes its
        labels.
    type: list
    elements: dict
  pushgateway_url:
    description:
      - Base URL of the Pushgateway (for example V(http://pushgateway.monitoring:9091)).
      - At least one of O(pushgateway_url) and O(textfile) is required.
    type: str
  job:
    description: The C(job) label of the pushed group.
    type: str
    default: nodeops
  grouping:
    description: Further labels of the pushed group (label name to value).
    type: dict
    default: {}
  method:
    description: V(put) replaces every metric of the group; V(post) replaces only the metrics of the same names.
    type: str
    choices: [put, post]
    default: put
  request_timeout:
    description: Seconds the push may take.
    type: float
    default: 10
  validate_certs:
    description: Check the gateway's TLS certificate (an C(https) URL).
    type: bool
    default: true
  url_username:
    description: User name for the gateway's basic authentication.
    type: str
  url_password:
    description: Password for the gateway's basic authentication (never shown in the result or the log).
    type: str
  textfile:
    description:
      - Path of a node-exporter textfile (its name must end in C(.prom), the only files the textfile collector reads).
      - The directory must exist.
    type: path
  mode:
    description: File mode of O(textfile).
    type: raw
    default: "0644"
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
    details: In check mode the text is rendered and checked and returned, but nothing is pushed or written.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: full
    details: The diff is the textfile's old and new text.
notes:
  - A push always reports C(changed) (the gateway records the time of every push); a textfile reports it only when
    its text changes.
  - The figures hold counts, states, node names, run IDs and durations; no token, key or message text.
seealso:
  - name: Pushgateway
    description: How the Pushgateway groups and replaces what is pushed.
    link: https://github.com/prometheus/pushgateway
"""

EXAMPLES = r"""
- name: Evaluate the NodeHealthCheck
  nodeops.maintenance.node_health:
    name: workers
  register: health

- name: Push its figures
  nodeops.maintenance.metrics_push:
    source: node_health
    result: "{{ health }}"
    nhc: workers
    pushgateway_url: http://pushgateway.monitoring:9091

- name: Write a rolling run's summary for node-exporter
  nodeops.maintenance.metrics_push:
    source: rolling_maintenance
    result: "{{ rolling_summary }}"
    textfile: /var/lib/node_exporter/textfile/nodeops_rolling.prom

- name: Push a figure of your own
  nodeops.maintenance.metrics_push:
    metrics:
      - name: firmware_upgrades_total
        value: 12
        labels: {model: a100}
    pushgateway_url: http://pushgateway.monitoring:9091
    job: firmware
"""

RETURN = r"""
text:
  description: The text format that was pushed or written (or would be, in check mode).
  returned: always
  type: str
  sample: "# HELP nodeops_nhc_healthy_nodes Observed nodes that count healthy.\n..."
metrics:
  description: The names of the metric families in RV(text).
  returned: always
  type: list
  elements: str
  sample: [nodeops_nhc_observed_nodes, nodeops_nhc_healthy_nodes]
url:
  description: The URL of the pushed group (without credentials).
  returned: when O(pushgateway_url) is given
  type: str
  sample: http://pushgateway.monitoring:9091/metrics/job/nodeops/nhc/workers
textfile_changed:
  description: Whether the textfile's text changed (or would).
  returned: when O(textfile) is given
  type: bool
"""

import os
import tempfile
import time
from http.client import HTTPException
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import ConnectionError as UrlConnectionError
from ansible.module_utils.urls import SSLValidationError, open_url
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.node.metrics import (
    CONTENT_TYPE,
    Exposition,
    MetricsError,
    custom_figures,
    node_health_figures,
    push_path,
    remediation_figures,
    rolling_figures,
)

ARGUMENT_SPEC: dict[str, Any] = {
    "source": {"type": "str", "choices": ["node_health", "remediation", "rolling_maintenance"]},
    "result": {"type": "dict"},
    "nhc": {"type": "str"},
    "metrics": {"type": "list", "elements": "dict"},
    "pushgateway_url": {"type": "str"},
    "job": {"type": "str", "default": "nodeops"},
    "grouping": {"type": "dict", "default": {}},
    "method": {"type": "str", "choices": ["put", "post"], "default": "put"},
    "request_timeout": {"type": "float", "default": 10},
    "validate_certs": {"type": "bool", "default": True},
    "url_username": {"type": "str"},
    "url_password": {"type": "str", "no_log": True},
    "textfile": {"type": "path"},
    "mode": {"type": "raw", "default": "0644"},
}


def figures(params: dict[str, Any], now: float) -> tuple[Exposition, dict[str, Any]]:
    """The exposition of the options, and the grouping labels of its push."""
    grouping = dict(params["grouping"])
    if params["metrics"] is not None:
        return custom_figures(params["metrics"]), grouping
    result, source = params["result"], params["source"]
    if source == "node_health":
        grouping.setdefault("nhc", params["nhc"])
        return node_health_figures(result, params["nhc"], now), grouping
    if source == "remediation":
        return remediation_figures(result, now), grouping
    exposition = rolling_figures(result, now)
    grouping.setdefault("run_id", str(result["run_id"]))
    return exposition, grouping


def write_textfile(module: AnsibleModule, path: str, text: str) -> tuple[bool, str]:
    """(changed, old text): the text written to a temporary file beside ``path`` and renamed over it."""
    directory = os.path.dirname(path) or "."
    try:
        with open(path, encoding="utf-8") as handle:
            old = handle.read()
    except FileNotFoundError:
        old = ""
    except OSError as err:
        module.fail_json(msg=f"textfile: cannot read {path}: {err}")
    mode = module.params["mode"]
    if old == text:
        return False, old
    if module.check_mode:
        return True, old
    fd, temp = tempfile.mkstemp(prefix=".nodeops-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp, int(mode, 8) if isinstance(mode, str) else int(mode))
        os.replace(temp, path)
    except (OSError, ValueError) as err:
        if os.path.exists(temp):
            os.remove(temp)
        module.fail_json(msg=f"textfile: cannot write {path}: {err}")
    return True, old


def main() -> None:
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
        mutually_exclusive=[("result", "metrics"), ("source", "metrics")],
        required_one_of=[("result", "metrics"), ("pushgateway_url", "textfile")],
        required_together=[("source", "result")],
        required_if=[("source", "node_health", ("nhc",))],
    )
    params = module.params
    textfile = params["textfile"]
    if textfile is not None:
        if not textfile.endswith(".prom"):
            module.fail_json(
                msg=f"textfile: {textfile} must end in .prom; node-exporter's textfile collector reads only those."
            )
        if not os.path.isdir(os.path.dirname(textfile) or "."):
            module.fail_json(msg=f"textfile: the directory of {textfile} does not exist; create it first.")
    url = (params["pushgateway_url"] or "").rstrip("/")
    if params["pushgateway_url"] is not None and not url.startswith(("http://", "https://")):
        module.fail_json(msg=f"pushgateway_url: {url!r} must be an http:// or https:// URL of the Pushgateway.")
    try:
        exposition, grouping = figures(params, time.time())
        text = exposition.render()
        path = push_path(params["job"], grouping) if url else ""
    except MetricsError as err:
        module.fail_json(msg=str(err))
    out: dict[str, Any] = {"changed": False, "text": text, "metrics": exposition.names()}
    if url:
        scheme, rest = url.split("://", 1)
        out["url"] = (
            f"{scheme}://{rest.split('/', 1)[0].rsplit('@', 1)[-1]}"
            + ("/" + rest.split("/", 1)[1] if "/" in rest else "")
            + path
        )  # no user information in the output
        out["changed"] = True
        if not module.check_mode:
            try:
                with open_url(
                    url + path,
                    data=text.encode("utf-8"),
                    method=params["method"].upper(),
                    headers={"Content-Type": CONTENT_TYPE},
                    timeout=params["request_timeout"],
                    validate_certs=params["validate_certs"],
                    url_username=params["url_username"],
                    url_password=params["url_password"],
                    force_basic_auth=params["url_username"] is not None,
                ) as answer:
                    answer.read()
            except (OSError, ValueError, HTTPException, UrlConnectionError, SSLValidationError) as err:
                detail = ""
                read = getattr(err, "read", None)
                if callable(read):
                    try:
                        detail = ": " + read().decode("utf-8", "replace")[:500].strip()
                    except (OSError, HTTPException):  # the body is only a detail of the message
                        detail = ""
                module.fail_json(
                    msg=f"pushing to {out['url']} failed: {err}{detail}. Check pushgateway_url and that the gateway "
                    "answers; what it refused is in text.",
                    text=text,
                    url=out["url"],
                )
    if textfile is not None:
        changed, old = write_textfile(module, textfile, text)
        out["textfile_changed"] = changed
        out["changed"] = out["changed"] or changed
        if module._diff and changed:
            out["diff"] = {"before": old, "after": text, "before_header": textfile, "after_header": textfile}
    module.exit_json(**out)


if __name__ == "__main__":
    main()
