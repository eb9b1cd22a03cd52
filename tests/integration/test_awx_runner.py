"""The rolling maintenance and remediation playbooks run the way AWX/AAP runs a job.

ansible-runner gets a private data directory and nothing else: ``env/extravars`` with the job template's survey
answers (awx/surveys/<playbook>.json: the defaults, and the answers a person gives) and the template's own extra
variables; ``env/envvars`` with what AWX's "OpenShift or Kubernetes API Bearer Token" credential injects
(``K8S_AUTH_HOST``, ``K8S_AUTH_API_KEY``, ``K8S_AUTH_VERIFY_SSL`` and ``K8S_AUTH_SSL_CA_CERT``, a file that AWX
writes into ``env/``); ``inventory/`` with the job template's inventory source (awx/inventory/cluster.nodes.yml,
the collection's nodes inventory plugin); ``project/`` with the repository's playbooks, as a project sync checks
them out. No kubeconfig anywhere: the test process's own K8S_AUTH_* and KUBECONFIG are not passed on.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.maintenance.rolling import (
    record_name,
    stored_nodes,
)
from cluster import kwok
from integration.test_node_health import NHC_GROUP, SNR_GROUP, VERSION, nhc_body, template
from kubernetes import client as k8s
from support.ansible_cli import BIN

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def crds(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> None:
    from integration.test_crds import run_role

    run_role(cluster, tmp_path_factory.mktemp("awx-crds"), {})


def survey_extravars(playbook: str, answers: dict[str, Any]) -> dict[str, Any]:
    """The extra variables AWX makes from the job template's survey: each answer given, else the question's
    default (a question without one and without an answer sends nothing)."""
    questions = {
        q["variable"]: q for q in json.loads((REPO / "awx" / "surveys" / f"{playbook}.json").read_text())["spec"]
    }
    assert set(answers) <= set(questions), f"not questions of the survey: {set(answers) - set(questions)}"
    extravars = {}
    for variable, question in questions.items():
        if variable in answers:
            extravars[variable] = answers[variable]
        elif question.get("default") not in (None, ""):
            extravars[variable] = question["default"]
        else:
            assert not question["required"], f"the survey requires {variable}"
    return extravars


def private_data_dir(root: Path, cluster: Any, extravars: dict[str, Any], label_selector: str) -> Path:
    """A private data directory as AWX prepares it for a job."""
    pdd = root / "job"
    (pdd / "env").mkdir(parents=True)
    (pdd / "inventory").mkdir()
    (pdd / "env" / "extravars").write_text(json.dumps(extravars))
    # the credential's CA certificate, written by AWX into env/ with a random name
    handle, ca_path = tempfile.mkstemp(dir=pdd / "env")
    with os.fdopen(handle, "w") as ca:
        ca.write(Path(cluster.ca_file).read_text())
    envvars = {
        "K8S_AUTH_HOST": cluster.server,
        "K8S_AUTH_API_KEY": cluster.token,
        "K8S_AUTH_VERIFY_SSL": "True",
        "K8S_AUTH_SSL_CA_CERT": ca_path,
    }
    (pdd / "env" / "envvars").write_text(json.dumps(envvars))
    # the job template's inventory source, limited to this test's nodes (the cluster is shared)
    source = yaml.safe_load((REPO / "awx" / "inventory" / "cluster.nodes.yml").read_text())
    (pdd / "inventory" / "cluster.nodes.yml").write_text(yaml.safe_dump({**source, "label_selector": label_selector}))
    shutil.copytree(REPO / "playbooks", pdd / "project" / "playbooks")
    return pdd


def run_job(pdd: Path, playbook: str, forks: int = 10) -> list[dict[str, Any]]:
    """ansible-runner run, as AWX starts a job; the job's events (asserts that it succeeded)."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("K8S_AUTH_", "ANSIBLE_")) and key != "KUBECONFIG"
    }
    # the collection, installed in the execution environment
    env["ANSIBLE_COLLECTIONS_PATH"] = os.environ["ANSIBLE_COLLECTIONS_PATH"]
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    proc = subprocess.run(
        [str(BIN / "ansible-runner"), "run", str(pdd), "-p", playbook, "--ident", "1", "--forks", str(forks)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    artifacts = pdd / "artifacts" / "1"
    status = (artifacts / "status").read_text() if (artifacts / "status").is_file() else "none"
    assert proc.returncode == 0 and status == "successful", (
        f"rc={proc.returncode} status={status}\n{proc.stdout[-8000:]}\n{proc.stderr[-3000:]}"
    )
    events = [json.loads(path.read_text()) for path in (artifacts / "job_events").glob("*.json")]
    return sorted(events, key=lambda event: event["counter"])


def stats(events: list[dict[str, Any]]) -> dict[str, Any]:
    (recap,) = [event["event_data"] for event in events if event["event"] == "playbook_on_stats"]
    return recap


@pytest.fixture
def nodes(crds: None, api: k8s.ApiClient) -> Iterator[tuple[str, list[str]]]:
    """Two kwok nodes with a label of their own: (label selector, names)."""
    label = f"awx-{uuid.uuid4().hex[:6]}"
    names = kwok.add_nodes(api, 2, prefix=label, labels={"awx-test": label})
    try:
        kwok.wait_nodes_ready(api, names, timeout=120)
        yield f"awx-test={label}", names
    finally:
        kwok.delete_nodes(api, names, timeout=120)


def test_rolling_maintenance_job_with_survey_answers(
    cluster: Any, api: k8s.ApiClient, namespace: str, nodes: tuple[str, list[str]], tmp_path: Path
) -> None:
    selector, names = nodes
    core = k8s.CoreV1Api(api)
    boot_ids = {name: core.read_node(name).status.node_info.boot_id for name in names}
    run_id = f"CHG-{uuid.uuid4().hex[:6]}"
    # a person's answers, as text where the survey asks for text
    extravars = survey_extravars(
        "rolling_maintenance",
        {
            "rolling_run_id": run_id,
            "rolling_node_selector": selector,
            "rolling_maintenance_tasks": "maintenance/simulated_reboot.yml",
            "rolling_max_parallel_operations": "2",
            "rolling_max_unavailable": "2",
        },
    )
    # the job template's own extra variables (no survey questions)
    extravars |= {
        "rolling_namespace": namespace,
        "rolling_config_namespace": namespace,
        "rolling_gather_seconds": 2,
        "rolling_simulated_reboot_seconds": 2,
        "rolling_wave_timeout": 120,
        "rolling_node_ready_timeout": 60,
    }
    pdd = private_data_dir(tmp_path, cluster, extravars, selector)
    recap = stats(run_job(pdd, "playbooks/rolling_maintenance.yml"))
    assert recap["failures"] == {} and recap["dark"] == {}
    record = k8s.CoreV1Api(api).read_namespaced_config_map(record_name(run_id), namespace)
    state = {node: entry["state"] for node, entry in stored_nodes(record.data).items()}
    assert state == dict.fromkeys(names, "done")
    for name in names:
        node = core.read_node(name)
        assert node.status.node_info.boot_id != boot_ids[name], "the node went through its (simulated) reboot"
        assert not node.spec.unschedulable
    config = k8s.CustomObjectsApi(api).get_namespaced_custom_object(
        "maintenance.nvidia.com", "v1alpha1", namespace, "maintenanceoperatorconfigs", "default"
    )
    assert config["spec"]["maxParallelOperations"] == 2
    assert config["spec"]["maxUnavailable"] == 2


def test_remediation_pass_job_on_healthy_nodes(
    cluster: Any, api: k8s.ApiClient, namespace: str, nodes: tuple[str, list[str]], tmp_path: Path
) -> None:
    """A scheduled remediation pass on a cluster whose nodes are all healthy: it evaluates the NodeHealthCheck,
    writes its status and remediates nothing."""
    selector, names = nodes
    tag = selector.split("=", 1)[1]
    objs = k8s.CustomObjectsApi(api)
    objs.create_namespaced_custom_object(
        SNR_GROUP, VERSION, namespace, "selfnoderemediationtemplates", template(namespace)
    )
    nhc = nhc_body(f"nhc-{tag}", tag, namespace, 1)
    nhc["spec"]["selector"] = {"matchLabels": {"awx-test": tag}}
    objs.create_cluster_custom_object(NHC_GROUP, VERSION, "nodehealthchecks", nhc)
    try:
        extravars = survey_extravars(
            "remediate", {"remediate_nhc_name": f"nhc-{tag}", "remediate_namespace": namespace, "remediate_interval": 0}
        )
        pdd = private_data_dir(tmp_path, cluster, extravars, selector)
        recap = stats(run_job(pdd, "playbooks/remediate.yml"))
        assert recap["failures"] == {} and recap["dark"] == {}
        status = objs.get_cluster_custom_object(NHC_GROUP, VERSION, "nodehealthchecks", f"nhc-{tag}")["status"]
        assert (status["observedNodes"], status["healthyNodes"]) == (len(names), len(names))
        assert not status.get("unhealthyNodes")
        remediations = objs.list_namespaced_custom_object(SNR_GROUP, VERSION, namespace, "selfnoderemediations")
        assert remediations["items"] == []
    finally:
        objs.delete_cluster_custom_object(NHC_GROUP, VERSION, "nodehealthchecks", f"nhc-{tag}")
