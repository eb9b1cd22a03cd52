#!/usr/bin/python
# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: notify
short_description: Send a notification of a maintenance event to a webhook or to Slack
version_added: 0.1.0
author:
  - nodeops.maintenance contributors (@nodeops)
description:
  - Sends one JSON document with an HTTP POST (or PUT) to O(url), a generic webhook (O(format=webhook)) or a
    Slack-compatible incoming webhook (O(format=slack)). The rolling maintenance playbook uses it at the start and
    end of every wave, for every failed node and at the end of the run.
  - With O(format=webhook) the body is O(body) when given, otherwise the O(event) itself (with its C(message)
    filled in). With O(format=slack) it is O(body) when given, otherwise a Slack payload made from O(event)
    (C(text), the fallback and notification text, and C(blocks)).
  - No connection, timeout, HTTP 408, 429 or 5xx answer is tried again, up to O(retries) more times, waiting
    O(retry_delay) seconds and then twice as long each time (at most 30 s). Any other answer of 400 or more fails
    at once.
  - A failure names the URL only by its host, port, first path segment and scheme (webhook URLs often hold their
    secret in the path), and never shows O(headers).
  - Every call sends, since a notification has no state to compare with; the module is not idempotent.
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
    details: In check mode nothing is sent; RV(payload) and RV(request) show what would be.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: none
  idempotent:
    support: none
    description: Whether running the module twice leaves the same state as running it once.
    details: Each call sends a notification.
options:
  url:
    description:
      - The http:// or https:// URL to send to, for example a Slack incoming-webhook URL.
      - It is treated as a secret (it is not shown in the task's output).
    type: str
    required: true
  format:
    description: V(webhook) (the event or O(body) as JSON) or V(slack) (an incoming-webhook payload).
    type: str
    choices: [webhook, slack]
    default: webhook
  event:
    description:
      - The event's fields. C(event) names it (V(wave_start), V(wave_end), V(node_failed), V(run_end) or a word of
        your own); C(run_id), C(wave), C(nodes) (a list), C(failures) (node to message), C(counts) (state to
        number of nodes) and C(message) (a sentence; made from the other fields when missing) are optional, and
        any other field is sent as it is in the webhook format.
      - Required unless O(body) is given.
    type: dict
    default: {}
  body:
    description:
      - The JSON document to send instead of the one made from O(event), as a mapping, a list or JSON text (for
        instance rendered from a template of your own).
    type: raw
  headers:
    description:
      - HTTP headers to add, for example an C(Authorization) token. Never shown in the output or in an error.
      - C(Content-Type) is C(application/json) unless given here.
    type: dict
    default: {}
  method:
    description: The HTTP method.
    type: str
    choices: [POST, PUT]
    default: POST
  request_timeout:
    description: Seconds each try may take.
    type: float
    default: 10
  retries:
    description: How many more tries after a connection error, a timeout or an HTTP 408, 429 or 5xx answer.
    type: int
    default: 3
  retry_delay:
    description: Seconds before the first retry; each further retry waits twice as long, at most 30 s.
    type: float
    default: 1
  validate_certs:
    description: Whether to check the server's TLS certificate.
    type: bool
    default: true
  ca_path:
    description: A PEM file of CA certificates to check the server's certificate against.
    type: path
  on_error:
    description:
      - V(fail) fails the task when the notification could not be sent; V(warn) returns it as a warning
        (RV(sent) false, RV(error)) and the task succeeds, for notifications that must never stop the work they
        report on.
      - Bad input (no URL, a body that is not JSON, no event) fails the task either way.
    type: str
    choices: [fail, warn]
    default: fail
seealso:
  - name: Slack incoming webhooks
    description: The payload format of O(format=slack).
    link: https://api.slack.com/messaging/webhooks
"""

EXAMPLES = r"""
- name: Tell the team's channel that a wave starts
  nodeops.maintenance.notify:
    url: "{{ slack_webhook_url }}"
    format: slack
    event:
      event: wave_start
      run_id: CHG-1234
      wave: 3
      nodes: [gpu-07, gpu-08]
      counts: {pending: 12, maintaining: 2, done: 10}
  delegate_to: localhost

- name: Post a body of your own to a webhook with a token, without stopping the play when it is down
  nodeops.maintenance.notify:
    url: https://events.example.com/hooks/maintenance
    body:
      source: nodeops
      summary: "Node {{ node }} failed: {{ reason }}"
    headers:
      Authorization: "Bearer {{ events_token }}"
    retries: 5
    on_error: warn
  delegate_to: localhost
"""

RETURN = r"""
sent:
  description: Whether the notification was sent and the server answered with success.
  returned: always
  type: bool
status:
  description: The HTTP status of the last answer; absent when no answer came.
  returned: when an answer came
  type: int
  sample: 200
attempts:
  description: How many tries were made (0 in check mode).
  returned: always
  type: int
payload:
  description: The JSON document sent (or, in check mode, that would be sent).
  returned: always
  type: raw
  sample:
    event: wave_start
    run_id: CHG-1234
    wave: 3
    nodes: [gpu-07]
    message: "Run CHG-1234: wave 3 starts: gpu-07."
request:
  description: The request without its secrets.
  returned: always
  type: dict
  contains:
    url:
      description: The URL's host, port, first path segment and scheme.
      type: str
      sample: hooks.slack.com/services/… (https)
    method:
      description: The HTTP method.
      type: str
    header_names:
      description: The names of the headers sent (not their values).
      type: list
      elements: str
response:
  description: The start of the server's answer (at most 1000 characters).
  returned: when an answer came
  type: str
error:
  description: Why the notification could not be sent (with O(on_error=warn); otherwise it is the failure's message).
  returned: when it could not be sent
  type: str
"""

import json
import time
from typing import Any
from urllib.error import HTTPError, URLError

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_text
from ansible.module_utils.urls import open_url
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.maintenance.notify import (
    FORMATS,
    backoff,
    check_url,
    display_url,
    payload,
    retryable,
)
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.node.errors import NodeopsError

ARGUMENT_SPEC: dict[str, Any] = {
    "url": {"type": "str", "required": True, "no_log": True},
    "format": {"type": "str", "choices": list(FORMATS), "default": "webhook"},
    "event": {"type": "dict", "default": {}},
    "body": {"type": "raw"},
    "headers": {"type": "dict", "default": {}, "no_log": True},
    "method": {"type": "str", "choices": ["POST", "PUT"], "default": "POST"},
    "request_timeout": {"type": "float", "default": 10},
    "retries": {"type": "int", "default": 3},
    "retry_delay": {"type": "float", "default": 1},
    "validate_certs": {"type": "bool", "default": True},
    "ca_path": {"type": "path"},
    "on_error": {"type": "str", "choices": ["fail", "warn"], "default": "fail"},
}
RESPONSE_LIMIT = 1000


def _read(response: Any) -> str:
    try:
        return to_text(response.read(RESPONSE_LIMIT), errors="surrogate_or_replace")
    except (OSError, ValueError):  # the answer's text is only for the person reading the result
        return ""


def send(module: AnsibleModule, url: str, data: bytes, headers: dict[str, str]) -> dict[str, Any]:
    """Send with retries; the result's fields (sent, status, attempts, response, error)."""
    params = module.params
    shown = display_url(url)
    attempts = 0
    while True:
        attempts += 1
        status: int | None = None
        try:
            response = open_url(
                url,
                data=data,
                headers=headers,
                method=params["method"],
                timeout=params["request_timeout"],
                validate_certs=params["validate_certs"],
                ca_path=params["ca_path"],
                follow_redirects="safe",
                use_proxy=True,
            )
            return {"sent": True, "status": response.getcode(), "attempts": attempts, "response": _read(response)}
        except HTTPError as exc:
            status = exc.code
            problem = f"answered HTTP {exc.code} {exc.reason}"
            answer = _read(exc)
        except (URLError, OSError) as exc:  # refused, reset, DNS, TLS, timeout
            reason = getattr(exc, "reason", exc)
            problem = f"could not be reached ({to_text(reason)})"
            answer = None
        if not retryable(status) or attempts > params["retries"]:
            tries = f"after {attempts} tries" if attempts > 1 else "at the first try"
            hint = (
                "check the server, the URL and the network, or raise retries"
                if retryable(status)
                else "check the URL, the headers (a token?) and the body the server expects"
            )
            result: dict[str, Any] = {
                "sent": False,
                "attempts": attempts,
                "error": f"The notification to {shown} failed {tries}: the server {problem}; {hint}.",
            }
            if status is not None:
                result["status"] = status
            if answer:
                result["response"] = answer
            return result
        time.sleep(backoff(attempts, params["retry_delay"]))


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    try:
        url = check_url(params["url"])
        if params["retries"] < 0 or params["request_timeout"] <= 0 or params["retry_delay"] < 0:
            raise ValueError("retries and retry_delay must be 0 or more, and request_timeout more than 0")
        document = payload(params["format"], params["event"], params["body"])
        data = json.dumps(document).encode()
    except (NodeopsError, ValueError, TypeError) as exc:
        module.fail_json(msg=f"Nothing sent: {exc}")
    headers = {str(k): str(v) for k, v in params["headers"].items()}
    if not any(k.lower() == "content-type" for k in headers):
        headers["Content-Type"] = "application/json"
    request = {"url": display_url(url), "method": params["method"], "header_names": sorted(headers)}
    if module.check_mode:
        module.exit_json(changed=True, sent=False, attempts=0, payload=document, request=request)
    result = send(module, url, data, headers)
    result.update(payload=document, request=request)
    if not result["sent"]:
        if params["on_error"] == "fail":
            module.fail_json(msg=result["error"], changed=False, **result)
        module.warn(result["error"])
    module.exit_json(changed=result["sent"], **result)


if __name__ == "__main__":
    main()
