# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node agent's configuration: the SelfNodeRemediationConfig fields it uses, with the CRD's limits,
plus the agent's own settings (where the API server and the peers are, files, commands).

Pure, standard library only, Python 3.9 syntax at run time (shipped to the nodes with the agent).
``SNR_FIELDS`` is the one table of the limits; a unit test checks it against the CRD file
(roles/crds/files/self-node-remediation.medik8s.io_selfnoderemediationconfigs.yaml).
``validate(config)`` returns the configuration with defaults applied and durations in seconds, or
raises AgentConfigError naming the field.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any

from .duration import DurationError, parse_duration
from .errors import NodeopsError


class AgentConfigError(NodeopsError, ValueError):
    """A configuration the agent refuses; the message names the field."""


#: SelfNodeRemediationConfig fields the agent reads: kind, default, minimum, maximum. Durations'
#: minimums are in seconds (the CRD's CEL rules), integers' are the CRD's minimum/maximum.
SNR_FIELDS: dict[str, dict[str, Any]] = {
    "watchdogFilePath": {"kind": "string", "default": "/dev/watchdog"},
    "isSoftwareRebootEnabled": {"kind": "boolean", "default": True},
    "apiServerTimeout": {"kind": "duration", "default": "5s", "minimum": 0.01},
    "apiCheckInterval": {"kind": "duration", "default": "15s", "minimum": 1.0},
    "peerApiServerTimeout": {"kind": "duration", "default": "5s", "minimum": 0.01},
    "peerDialTimeout": {"kind": "duration", "default": "5s", "minimum": 0.01},
    "peerRequestTimeout": {"kind": "duration", "default": "7s", "minimum": 0.01},
    "peerUpdateInterval": {"kind": "duration", "default": "15m", "minimum": 10.0},
    "maxApiErrorThreshold": {"kind": "integer", "default": 3, "minimum": 1},
    "hostPort": {"kind": "integer", "default": 30001, "minimum": 1, "maximum": 65535},
    "minPeersForRemediation": {"kind": "integer", "default": 1, "minimum": 0},
    "endpointHealthCheckUrl": {"kind": "string", "default": ""},
}

#: The agent's own settings (not in the CRD). Required ones have no default.
AGENT_FIELDS: dict[str, dict[str, Any]] = {
    "nodeName": {"kind": "string", "required": True},
    "apiServer": {"kind": "string", "required": True},  # https://host:port
    "apiServerName": {"kind": "string", "default": ""},  # TLS name to verify instead of the URL's host
    "caFile": {"kind": "string", "required": True},  # the API server's CA
    "tokenFile": {"kind": "string", "required": True},  # the ServiceAccount token
    "remediationNamespace": {"kind": "string", "default": ""},  # "" = all namespaces
    "peerCaFile": {"kind": "string", "required": True},
    "peerCertFile": {"kind": "string", "required": True},
    "peerKeyFile": {"kind": "string", "required": True},
    "listenAddress": {"kind": "string", "default": "0.0.0.0"},
    "peersFile": {"kind": "string", "required": True},  # JSON list of {name, address, controlPlane}
    "statusFile": {"kind": "string", "default": "/run/nodeops-node-agent/status.json"},
    # written when fencing begins; on tmpfs, so that only a reboot clears it
    "fenceMarkerFile": {"kind": "string", "default": "/run/nodeops-node-agent/fence.json"},
    # when this boot's agent last confirmed no remediation is pending (tmpfs too): a restart does not reset it
    "confirmationFile": {"kind": "string", "default": "/run/nodeops-node-agent/confirmed.json"},
    "bootIdFile": {"kind": "string", "default": "/proc/sys/kernel/random/boot_id"},
    "watchdogTimeoutSeconds": {"kind": "integer", "default": 60, "minimum": 1, "maximum": 3600},
    "rebootCommand": {"kind": "list", "default": ["systemctl", "reboot", "--force", "--force"]},
    "sysrqTriggerPath": {"kind": "string", "default": "/proc/sysrq-trigger"},
    "softdogModule": {"kind": "boolean", "default": True},
    "logLevel": {"kind": "string", "default": "info", "choices": ["debug", "info", "warning", "error"]},
    # Prometheus metrics, plain HTTP (GET /metrics only); port 0 serves none. Loopback unless told otherwise.
    "metricsAddress": {"kind": "string", "default": "127.0.0.1"},
    "metricsPort": {"kind": "integer", "default": 9737, "minimum": 0, "maximum": 65535},
}


def _check(name: str, spec: Mapping[str, Any], value: Any) -> Any:
    kind = spec["kind"]
    if kind == "duration":
        try:
            seconds = parse_duration(value, name)
        except DurationError as err:
            raise AgentConfigError(str(err)) from err
        if seconds < spec["minimum"]:
            raise AgentConfigError(f"{name}: {value!r} is below the minimum of {spec['minimum']:g}s.")
        return seconds
    if kind == "integer":
        if isinstance(value, bool) or not isinstance(value, int):
            raise AgentConfigError(f"{name}: {value!r} must be a whole number.")
        if "minimum" in spec and value < spec["minimum"]:
            raise AgentConfigError(f"{name}: {value} is below the minimum of {spec['minimum']}.")
        if "maximum" in spec and value > spec["maximum"]:
            raise AgentConfigError(f"{name}: {value} is above the maximum of {spec['maximum']}.")
        return value
    if kind == "boolean":
        if not isinstance(value, bool):
            raise AgentConfigError(f"{name}: {value!r} must be true or false.")
        return value
    if kind == "list":
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise AgentConfigError(f"{name}: {value!r} must be a list of strings.")
        return list(value)
    if not isinstance(value, str):
        raise AgentConfigError(f"{name}: {value!r} must be a string.")
    if "choices" in spec and value not in spec["choices"]:
        raise AgentConfigError(f"{name}: {value!r} must be one of {', '.join(spec['choices'])}.")
    return value


def validate(config: Mapping[str, Any]) -> dict[str, Any]:
    """The configuration with defaults applied and durations as seconds (floats)."""
    if not isinstance(config, Mapping):
        raise AgentConfigError("the configuration must be a mapping of field names to values.")
    fields = dict(SNR_FIELDS)
    fields.update(AGENT_FIELDS)
    unknown = sorted(set(config) - set(fields))
    if unknown:
        raise AgentConfigError(f"{unknown[0]}: unknown field (known: {', '.join(sorted(fields))}).")
    result: dict[str, Any] = {}
    for name, spec in fields.items():
        if name not in config or config[name] is None:
            if spec.get("required"):
                raise AgentConfigError(f"{name}: required.")
            value = spec["default"]
        else:
            value = config[name]
        result[name] = _check(name, spec, value)
    for name in ("nodeName", "apiServer", "caFile", "tokenFile", "peerCaFile", "peerCertFile", "peerKeyFile"):
        if not result[name]:
            raise AgentConfigError(f"{name}: must not be empty.")
    if not result["apiServer"].startswith("https://"):
        raise AgentConfigError(f"apiServer: {result['apiServer']!r} must be an https:// URL.")
    if result["metricsPort"] and result["metricsPort"] == result["hostPort"]:
        raise AgentConfigError(
            f"metricsPort: {result['metricsPort']} is the peer port (hostPort); give the metrics another port, or 0."
        )
    if result["metricsPort"] and not result["metricsAddress"]:
        raise AgentConfigError(
            "metricsAddress: must not be empty while metricsPort is set (127.0.0.1: this node only)."
        )
    if result["metricsPort"]:
        try:
            ipaddress.ip_address(result["metricsAddress"])
        except ValueError:
            raise AgentConfigError(
                f"metricsAddress: {result['metricsAddress']!r} is not an IP address; give one such as 127.0.0.1 "
                "(this node only) or the node's own address."
            ) from None
    if result["isSoftwareRebootEnabled"] and not result["rebootCommand"]:
        raise AgentConfigError("rebootCommand: must not be empty while isSoftwareRebootEnabled is true.")
    return result
