"""The nodeops.maintenance.safe_reboot_time filter, run through the ``ansible`` command as users run it."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest
from support.ansible_cli import BIN, clean_env


def run_filter(expression: str) -> tuple[int, Any, str]:
    """``ansible localhost -m ansible.builtin.debug -a 'msg={{ expression }}'``: (rc, msg or result, stderr)."""
    cmd = [str(BIN / "ansible"), "localhost", "-c", "local", "-i", "localhost,", "-m", "ansible.builtin.debug"]
    cmd += ["-a", json.dumps({"msg": "{{ " + expression + " }}"})]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=clean_env(), timeout=120, check=False)
    line = next(line for line in proc.stdout.splitlines() if line.startswith("{"))
    result = json.loads(line)["result"]
    return proc.returncode, result.get("msg", result), proc.stderr


def test_defaults_on_six_workers() -> None:
    rc, msg, _stderr = run_filter("{} | nodeops.maintenance.safe_reboot_time(worker_nodes=6)")
    assert rc == 0, msg
    assert {k: msg[k] for k in ("minimum_seconds", "effective_seconds", "api_check_seconds")} == {
        "minimum_seconds": 180,
        "effective_seconds": 180,
        "api_check_seconds": 60,
    }
    assert (msg["peer_check_seconds"], msg["peer_batches"], msg["watchdog_seconds"]) == (30, 2, 60)


def test_custom_spec_and_watchdog() -> None:
    spec = {
        "apiCheckInterval": "25s",
        "apiServerTimeout": "7s",
        "maxApiErrorThreshold": 4,
        "peerDialTimeout": "11s",
        "peerRequestTimeout": "13s",
        "safeTimeToAssumeNodeRebootedSeconds": 400,
    }
    rc, msg, _stderr = run_filter(
        f"{json.dumps(spec)} | nodeops.maintenance.safe_reboot_time(worker_nodes=20, watchdog_timeout=25)"
    )
    assert rc == 0, msg
    assert (msg["minimum_seconds"], msg["effective_seconds"], msg["peer_batches"]) == (351, 400, 7)
    assert (msg["api_check_seconds"], msg["peer_check_seconds"], msg["watchdog_seconds"]) == (128, 168, 25)


@pytest.mark.parametrize(
    ("spec", "field"),
    [({"apiCheckInterval": "15"}, "spec.apiCheckInterval"), ({"peerDialTimeout": "soon"}, "spec.peerDialTimeout")],
)
def test_bad_duration_fails_naming_the_field(spec: dict[str, str], field: str) -> None:
    rc, result, stderr = run_filter(f"{json.dumps(spec)} | nodeops.maintenance.safe_reboot_time(worker_nodes=3)")
    assert rc != 0
    text = json.dumps(result) + stderr
    assert f"safe_reboot_time: {field}: " in text


def test_worker_nodes_is_required() -> None:
    rc, result, stderr = run_filter("{} | nodeops.maintenance.safe_reboot_time")
    assert rc != 0
    assert "worker_nodes is required" in json.dumps(result) + stderr


@pytest.mark.parametrize("workers", ["\u0663", "\uff15", "²"])
def test_worker_nodes_take_ascii_digits_only(workers: str) -> None:
    """``str.isdigit`` holds for every Unicode digit: "\u0663" counted as 3 workers, "²" raised a bare ValueError."""
    from ansible.errors import AnsibleFilterError
    from ansible_collections.nodeops.maintenance.plugins.filter.safe_reboot_time import safe_reboot_time

    with pytest.raises(AnsibleFilterError, match=r"^safe_reboot_time: worker_nodes: "):
        safe_reboot_time({}, workers)
    assert safe_reboot_time({}, " 6 ")["minimum_seconds"] == 180
