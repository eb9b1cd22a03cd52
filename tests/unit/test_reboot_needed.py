"""playbooks/maintenance/reboot_needed.yml, the decision of maintenance/ssh_reboot.yml whether a node reboots, run
for real with ansible-playbook on localhost (connection local). The host's tools are stand-ins on PATH: a
``needs-restarting`` that exits with a given status, a ``dnf`` that marks the host as RHEL-like."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.ansible_cli import BIN, clean_env

REPO = Path(__file__).resolve().parents[2]
TASKS = REPO / "playbooks/maintenance/reboot_needed.yml"
SYSTEM_PATH = "/usr/bin:/bin"


def stand_in(folder: Path, name: str, status: int) -> None:
    folder.mkdir(exist_ok=True)
    tool = folder / name
    tool.write_text(f"#!/bin/sh\nexit {status}\n")
    tool.chmod(0o755)


def decide(tmp_path: Path, tools: Path | None = None, **variables: str) -> tuple[int, dict[str, object], str]:
    """(exit status, {needed, reason} as the tasks set them, output)."""
    playbook = tmp_path / "decide.yml"
    playbook.write_text(
        json.dumps(
            [
                {
                    "hosts": "localhost",
                    "connection": "local",
                    "gather_facts": False,
                    "tasks": [
                        {"ansible.builtin.include_tasks": str(TASKS)},
                        {
                            "ansible.builtin.copy": {
                                "content": "{{ {'needed': _reboot_needed, 'reason': _reboot_reason} | to_json }}",
                                "dest": str(tmp_path / "decision.json"),
                            }
                        },
                    ],
                }
            ]
        )
    )
    env = clean_env({"ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.default"})
    env["PATH"] = os.pathsep.join([str(tools)] if tools else []) + os.pathsep + str(Path(sys.executable).parent)
    env["PATH"] += os.pathsep + SYSTEM_PATH
    proc = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", "localhost,", str(playbook), "-e", json.dumps(variables)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    out = proc.stdout + proc.stderr
    decision = tmp_path / "decision.json"
    return proc.returncode, json.loads(decision.read_text()) if decision.exists() else {}, out


@pytest.fixture(autouse=True)
def no_rhel_tools_on_this_host() -> None:
    for name in ("dnf", "yum", "needs-restarting"):
        for folder in SYSTEM_PATH.split(":"):
            if (Path(folder) / name).exists():
                pytest.skip(f"{folder}/{name} exists on this host: the stand-ins could not decide alone")


def test_the_reboot_required_file_says_reboot(tmp_path: Path) -> None:
    flag = tmp_path / "reboot-required"
    flag.write_text("*** System restart required ***\n")
    rc, decision, out = decide(tmp_path, rolling_reboot_required_file=str(flag))
    assert rc == 0, out
    assert decision == {"needed": True, "reason": f"{flag} exists"}


def test_no_file_and_no_needs_restarting_says_no_reboot(tmp_path: Path) -> None:
    flag = tmp_path / "reboot-required"
    rc, decision, out = decide(tmp_path, rolling_reboot_required_file=str(flag))
    assert rc == 0, out
    assert decision == {"needed": False, "reason": f"no {flag} and no needs-restarting"}


@pytest.mark.parametrize(("status", "needed"), [(1, True), (0, False)])
def test_needs_restarting_decides_on_rhel_like_hosts(tmp_path: Path, status: int, needed: bool) -> None:
    tools = tmp_path / "bin"
    stand_in(tools, "dnf", 0)
    stand_in(tools, "needs-restarting", status)
    rc, decision, out = decide(tmp_path, tools, rolling_reboot_required_file=str(tmp_path / "absent"))
    assert rc == 0, out
    assert decision["needed"] is needed
    assert "needs-restarting -r says" in str(decision["reason"])


def test_a_rhel_like_host_without_needs_restarting_fails_saying_what_to_install(tmp_path: Path) -> None:
    tools = tmp_path / "bin"
    stand_in(tools, "dnf", 0)
    rc, decision, out = decide(tmp_path, tools, rolling_reboot_required_file=str(tmp_path / "absent"))
    assert rc == 2 and decision == {}
    assert "has no needs-restarting" in out and "install dnf-utils" in out and "rolling_reboot=always" in out


def test_needs_restarting_failing_otherwise_fails_with_its_status(tmp_path: Path) -> None:
    tools = tmp_path / "bin"
    stand_in(tools, "needs-restarting", 3)
    rc, decision, out = decide(tmp_path, tools, rolling_reboot_required_file=str(tmp_path / "absent"))
    assert rc == 2 and decision == {}
    assert "exited with status 3" in out


def test_always_reboots_without_asking(tmp_path: Path) -> None:
    tools = tmp_path / "bin"
    stand_in(tools, "dnf", 0)  # a RHEL-like host without needs-restarting: not even asked
    rc, decision, out = decide(
        tmp_path, tools, rolling_reboot="always", rolling_reboot_required_file=str(tmp_path / "x")
    )
    assert rc == 0, out
    assert decision == {"needed": True, "reason": "rolling_reboot is always"}
    assert "Ask localhost" in out and "skipping" in out
