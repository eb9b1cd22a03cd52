"""Snapshot files for the offline modes: what kubectl saves (one object, a List of mixed kinds, a typed List,
YAML), and clear errors naming the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.snapshot import SnapshotError, read
from support.ansible_cli import run_module
from unit.test_engine_remediation import objects


def write(path: Path, data: object) -> str:
    path.write_text(json.dumps(data))
    return str(path)


def test_objects_by_kind_from_lists_typed_lists_single_objects_and_yaml(tmp_path: Path) -> None:
    mixed = write(
        tmp_path / "mixed.json",
        {
            "apiVersion": "v1",
            "kind": "List",
            "items": [{"kind": "Node", "metadata": {"name": "a"}}, {"kind": "Lease", "metadata": {"name": "node-a"}}],
        },
    )
    typed = write(tmp_path / "nodes.json", {"kind": "NodeList", "items": [{"metadata": {"name": "b"}}]})
    single = write(tmp_path / "nhc.json", {"kind": "NodeHealthCheck", "metadata": {"name": "w"}})
    yaml_file = tmp_path / "nm.yaml"
    yaml_file.write_text("kind: NodeMaintenance\nmetadata:\n  name: m\n")
    saved = read([mixed, typed, single, str(yaml_file)])
    assert [n["metadata"]["name"] for n in saved["Node"]] == ["a", "b"]
    assert list(saved) == ["Node", "Lease", "NodeHealthCheck", "NodeMaintenance"]
    assert read([write(tmp_path / "empty.json", {"kind": "List", "items": []})]) == {}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json: [", "is neither JSON nor YAML"),
        ("[1, 2]", "holds a list, not a Kubernetes object or List"),
        ('{"kind": "List", "items": [{"metadata": {}}]}', "item 0 has no kind"),
        ('{"kind": "List", "items": [3]}', "item 0 is not an object"),
    ],
)
def test_a_file_that_is_not_a_snapshot_is_named(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(SnapshotError, match=message) as err:
        read([str(path)])
    assert str(path) in str(err.value)
    with pytest.raises(SnapshotError, match="cannot read"):
        read([str(tmp_path / "missing.json")])


def test_remediation_offline_from_a_snapshot_or_options(tmp_path: Path) -> None:
    """The remediation module's what-if through the ansible command: the same answer from a kubectl snapshot and
    from the objects as options; what it needs is asked for by name."""
    kinds = {
        "nodes": "Node",
        "selfnoderemediationconfigs": "SelfNodeRemediationConfig",
        "selfnoderemediations": "SelfNodeRemediation",
        "pods": "Pod",
        "volumeattachments": "VolumeAttachment",
    }
    items = [{"kind": kinds[plural], **obj} for plural, obj in objects()]
    saved = write(tmp_path / "cluster.json", {"kind": "List", "items": items})
    common = {"kubernetes_version": "v1.36.3", "now": "2026-01-02T03:00:00Z"}
    from_file = run_module("remediation", {"snapshot": [saved], **common})
    assert not from_file.failed, from_file.result
    options = {
        "remediations": [i for i in items if i["kind"] == "SelfNodeRemediation"],
        "nodes": [i for i in items if i["kind"] == "Node"],
        "pods": [i for i in items if i["kind"] == "Pod"],
        "volume_attachments": [i for i in items if i["kind"] == "VolumeAttachment"],
        "configs": [i for i in items if i["kind"] == "SelfNodeRemediationConfig"],
    }
    from_options = run_module("remediation", {**options, **common})
    assert from_file.result["remediations"] == from_options.result["remediations"]
    [one] = from_file.result["remediations"]
    # as the run would leave it now: fenced, waiting for the safe time
    assert (one["code"], one["strategy"], one["seconds_to_safe_time"]) == ("WaitingSafeTime", "ResourceDeletion", 130.0)
    assert (one["phase"], one["taints"]) == ("Pre-Reboot-Completed", ["remediation.medik8s.io/self-node-remediation"])
    assert from_file.result["changed"] is False
    missing = run_module("remediation", {"snapshot": [saved]})
    assert missing.failed and "kubernetes_version is required offline" in missing.result["msg"]
    live_only = run_module("remediation", {"pods": []})
    assert live_only.failed and "pods is only for offline mode" in live_only.result["msg"]
