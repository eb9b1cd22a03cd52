"""``nodeops_node_agent.py --decide``: the agent's peer decision for a situation given as JSON, run as a process
the way a person asks it, one case per row of the decision table, and bad input named."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.node_agent import AGENT


def decide(data: Any, tmp_path: Path | None = None) -> tuple[int, Any, str]:
    args = [sys.executable, str(AGENT), "--decide", "-"]
    text = data if isinstance(data, str) else json.dumps(data)
    if tmp_path is not None:
        path = tmp_path / "situation.json"
        path.write_text(text)
        args[-1], text = str(path), ""
    proc = subprocess.run(args, input=text, capture_output=True, text=True, timeout=60, check=False)
    return proc.returncode, json.loads(proc.stdout) if proc.returncode == 0 else None, proc.stderr


WORKER = {"apiErrors": 3, "workerPeers": 5}


@pytest.mark.parametrize(
    ("situation", "code", "fence"),
    [
        ({"apiErrors": 2, "workerPeers": 5}, "ThresholdNotReached", False),
        ({**WORKER, "workerPeers": 0}, "TooFewPeers", False),
        ({**WORKER, "workerPeers": 0, "minPeersForRemediation": 0}, "NoPeersIsolated", True),
        ({**WORKER, "batches": [["Healthy", "Unhealthy", "Healthy"]]}, "PeerReportsHealthy", False),
        ({**WORKER, "batches": [["Unhealthy", "ApiError", "RequestFailed"]]}, "PeerReportsUnhealthy", True),
        ({**WORKER, "batches": [["ApiError", "ApiError", "ApiError"]]}, "ApiServerOutage", False),
        ({**WORKER, "batches": [["Busy", "RequestFailed"]], "secondsSinceLastAnswer": 100}, "RecentPeerAnswer", False),
        (
            {**WORKER, "batches": [["RequestFailed"] * 3, ["RequestFailed"] * 2], "secondsSinceLastAnswer": 31},
            "Isolated",
            True,
        ),
        # one slow Healthy answer against silence confirms nothing
        ({**WORKER, "batches": [["Healthy", "RequestFailed", "RequestFailed"]]}, "RecentPeerAnswer", False),
        # the isolation limit: Busy, API errors, too few peers or a tie keep nobody running past it
        (
            {**WORKER, "batches": [["Busy", "RequestFailed", "RequestFailed"]], "secondsCutOff": 85},
            "IsolationLimit",
            True,
        ),
        ({**WORKER, "batches": [["ApiError"] * 3], "secondsCutOff": 90}, "IsolationLimit", True),
        ({**WORKER, "workerPeers": 0, "secondsCutOff": 85}, "IsolationLimit", True),
        ({"apiErrors": 1, "workerPeers": 5, "secondsCutOff": 40, "isolationLimitSeconds": 30}, "IsolationLimit", True),
        ({**WORKER, "batches": [["Healthy", "Healthy", "Busy"]], "secondsCutOff": 500}, "PeerReportsHealthy", False),
        # a tie asks the next batch, which decides
        (
            {**WORKER, "batches": [["Healthy", "Unhealthy", "RequestFailed"], ["Unhealthy"]]},
            "PeerReportsUnhealthy",
            True,
        ),
        # control-plane node: isolated from workers, but a control-plane peer answers
        (
            {
                **WORKER,
                "batches": [["RequestFailed"] * 3],
                "secondsSinceLastAnswer": 60,
                "controlPlane": True,
                "controlPlaneAnswers": ["ApiError"],
            },
            "ControlPlanePeersReachable",
            False,
        ),
        (
            {**WORKER, "batches": [["ApiError"] * 3], "controlPlane": True, "diagnosticsOk": False},
            "DiagnosticsFailed",
            True,
        ),
    ],
)
def test_every_row_of_the_decision_table(situation: dict[str, Any], code: str, fence: bool) -> None:
    rc, verdict, stderr = decide(situation)
    assert rc == 0, stderr
    assert (verdict["code"], verdict["fence"]) == (code, fence), verdict


def test_numbers_and_a_file_work_too(tmp_path: Path) -> None:
    rc, verdict, stderr = decide({**WORKER, "batches": [[2, 2, 1]]}, tmp_path)
    assert rc == 0, stderr
    assert verdict["code"] == "PeerReportsUnhealthy" and verdict["answers"] == ["Unhealthy", "Unhealthy", "Healthy"]


@pytest.mark.parametrize(
    ("situation", "message"),
    [
        ({"workerPeers": 3}, "apiErrors: required"),
        ({**WORKER, "apiErrors": -1}, "apiErrors: -1 is not a whole number"),
        ({**WORKER, "batches": [["Healthy", "Maybe"]]}, "batches[0][1]: 'Maybe' is not an answer"),
        ({**WORKER, "peers": 3}, "unknown field 'peers'"),
        ({**WORKER, "controlPlane": "yes"}, "controlPlane: 'yes' is not true or false"),
        ({**WORKER, "secondsSinceLastAnswer": "soon"}, "secondsSinceLastAnswer"),
        ({**WORKER, "secondsCutOff": -1}, "secondsCutOff: -1 is not a number of seconds"),
        ({**WORKER, "isolationLimitSeconds": True}, "isolationLimitSeconds: True is not a number"),
        ("[1, 2", "--decide -:"),
        ([1], "must be a JSON object"),
    ],
)
def test_bad_input_is_named_and_exits_2(situation: Any, message: str) -> None:
    rc, _verdict, stderr = decide(situation)
    assert rc == 2
    assert message in stderr
