"""Run this collection's modules the way users do: through the ``ansible`` command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BIN = Path(sys.executable).parent
CALLBACKS = Path(__file__).resolve().parent / "callback"


@dataclass
class ModuleRun:
    rc: int
    result: dict[str, Any]
    stderr: str
    stdout: str = ""  # what the action printed besides the result (the progress of long waits)

    @property
    def failed(self) -> bool:
        return bool(self.result.get("failed")) or self.rc != 0


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The test process's environment without any K8S_AUTH_* or KUBECONFIG, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("K8S_AUTH_") and k != "KUBECONFIG"}
    env.update(
        {
            "ANSIBLE_STDOUT_CALLBACK": "result_json",
            "ANSIBLE_CALLBACK_PLUGINS": str(CALLBACKS),
            "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
            "ANSIBLE_DEPRECATION_WARNINGS": "0",
            "ANSIBLE_LOCALHOST_WARNING": "0",
            "ANSIBLE_INVENTORY_UNPARSED_WARNING": "0",
            "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
        }
    )
    env.update(extra or {})
    return env


def run_module(
    module: str,
    args: dict[str, Any],
    env: dict[str, str] | None = None,
    check: bool = False,
    diff: bool = False,
    timeout: float = 120,
    verbose: bool = False,
) -> ModuleRun:
    """``ansible localhost -m nodeops.maintenance.<module> -a <json>``; returns the module's result. ``verbose``:
    with ``-vvv`` (what Ansible runs shows in ``stdout``)."""
    cmd = [str(BIN / "ansible"), "localhost", "-c", "local", "-i", "localhost,", "-m", f"nodeops.maintenance.{module}"]
    cmd += ["-a", json.dumps(args)]
    if check:
        cmd.append("--check")
    if diff:
        cmd.append("--diff")
    if verbose:
        cmd.append("-vvv")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=clean_env(env), timeout=timeout, check=False)
    try:
        line = next(line for line in proc.stdout.splitlines() if line.startswith("{"))
        result = json.loads(line)["result"]
    except (StopIteration, ValueError, KeyError) as exc:
        raise AssertionError(
            f"no JSON result from {cmd}: rc={proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
        ) from exc
    return ModuleRun(proc.returncode, result, proc.stderr, proc.stdout)
