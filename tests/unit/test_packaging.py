"""The collection tarball never carries a private key, wherever a peer PKI directory was created."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_pki_left_in_the_tree_is_not_built_into_the_tarball(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    files = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60
    ).stdout.split(b"\0")
    for name in filter(None, files):
        source = ROOT / name.decode()
        if source.is_file():
            (tree / name.decode()).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, tree / name.decode())
    # where the node_agent role's old default put the PKI (next to the playbook), and a stray key
    for pki in (tree / "playbooks" / "nodeops-node-agent-pki", tree / "nodeops-node-agent-pki"):
        pki.mkdir()
        (pki / "ca.key").write_text("-----BEGIN PRIVATE KEY-----\n")
        (pki / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    (tree / "roles" / "node_agent" / "files" / "w1.key").write_text("-----BEGIN PRIVATE KEY-----\n")
    galaxy = Path(sys.executable).with_name("ansible-galaxy")
    subprocess.run(
        [str(galaxy), "collection", "build", "--output-path", str(tmp_path / "dist"), str(tree)],
        capture_output=True,
        check=True,
        timeout=300,
    )
    (tarball,) = (tmp_path / "dist").glob("*.tar.gz")
    with tarfile.open(tarball) as archive:
        names = archive.getnames()
    assert "roles/node_agent/files/nodeops_node_agent.py" in names
    assert [name for name in names if name.endswith(".key") or "node-agent-pki" in name] == []
