"""The nodeops.maintenance.remediation_strategy filter, run through the ``ansible`` command as users run it."""

from __future__ import annotations

import pytest
from unit.test_filter_safe_reboot_time import run_filter

FILTER = "nodeops.maintenance.remediation_strategy"


@pytest.mark.parametrize(
    ("requested", "version", "runs"),
    [
        ("'Automatic'", "v1.28.0", "OutOfServiceTaint"),
        ("'Automatic'", "v1.27.9-eks-abc", "ResourceDeletion"),
        ("none", "1.36", "OutOfServiceTaint"),
        ("''", "v1.20.1", "ResourceDeletion"),
        ("'ResourceDeletion'", "v1.36.3", "ResourceDeletion"),
        ("'OutOfServiceTaint'", "v1.26.0", "OutOfServiceTaint"),
    ],
)
def test_the_strategy_that_runs(requested: str, version: str, runs: str) -> None:
    rc, msg, _stderr = run_filter(f"{requested} | {FILTER}(kubernetes_version='{version}')")
    assert (rc, msg) == (0, runs)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        (f"'OutOfServiceTaint' | {FILTER}(kubernetes_version='v1.25.3')", "needs Kubernetes 1.26"),
        (f"'Fast' | {FILTER}(kubernetes_version='v1.30.0')", "'Fast' is not one of"),
        (f"'Automatic' | {FILTER}(kubernetes_version='latest')", "cannot read 'latest'"),
        (f"'Automatic' | {FILTER}", "kubernetes_version is required"),
        (f"5 | {FILTER}(kubernetes_version='v1.30.0')", "must be a strategy name"),
    ],
)
def test_a_wrong_input_fails_naming_it(expression: str, message: str) -> None:
    rc, msg, stderr = run_filter(expression)
    assert rc != 0
    assert message in f"{msg}{stderr}"
