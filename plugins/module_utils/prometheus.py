# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one HTTP call to Prometheus: its active alerts (``GET /api/v1/alerts``), for the alert gate of a rolling run.

Through ansible-core's ``open_url`` (proxies, certificates). Which alerts block is decided in
``core/maintenance/gates.py``.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
from typing import Any

from ansible.module_utils.urls import open_url
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.maintenance.gates import PrometheusError


def check_url(url: str) -> str:
    """The base URL, checked: http or https with a host (ValueError names what is wrong)."""
    parts = urllib.parse.urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"the Prometheus URL {shown(url)!r} is not an http:// or https:// URL with a host")
    return url.strip().rstrip("/")


def shown(url: str) -> str:
    """The URL without its user information (a password in ``https://user:pass@host``), for messages."""
    parts = urllib.parse.urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urllib.parse.urlunsplit((parts.scheme, host, parts.path, "", ""))


def alerts(url: str, timeout: float = 10.0, validate_certs: bool = True) -> list[dict[str, Any]]:
    """The alerts Prometheus has (pending and firing), as its API lists them. Messages never show the URL's
    user information or query."""
    endpoint = check_url(url) + "/api/v1/alerts"
    url, safe_endpoint = shown(url), shown(endpoint)
    try:
        answer = open_url(
            endpoint, headers={"Accept": "application/json"}, timeout=timeout, validate_certs=validate_certs
        )
        body = answer.read()
    except urllib.error.HTTPError as exc:
        raise PrometheusError(f"Prometheus at {url} answered {exc.code} {exc.reason} to {safe_endpoint}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:  # refused, timeouts, TLS, a bad address
        reason = getattr(exc, "reason", exc)
        raise PrometheusError(f"Prometheus at {url} did not answer ({reason})") from None
    try:
        data = json.loads(body)
        items = data["data"]["alerts"]
        if data.get("status") != "success" or not isinstance(items, list):
            raise TypeError
    except (ValueError, KeyError, TypeError):
        raise PrometheusError(f"Prometheus at {url}: {safe_endpoint} did not answer with a list of alerts") from None
    return [a for a in items if isinstance(a, dict)]
