"""execution-environment.yml: ansible-builder turns it into a complete build context (no container is built).

The context must hold the collection tarball built from this tree, the galaxy requirements that install it and
the Python requirements, and its Containerfile must copy them in and install them.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def test_ansible_builder_creates_a_context_with_the_collection(tmp_path: Path) -> None:
    if not (BIN / "ansible-builder").is_file():
        pytest.skip("no ansible-builder here (tests/requirements.txt pins it; make compat leaves it out)")
    version = yaml.safe_load((ROOT / "galaxy.yml").read_text())["version"]
    tarball = f"nodeops-maintenance-{version}.tar.gz"
    # the documented steps, in a copy of the files they read
    shutil.copy(ROOT / "execution-environment.yml", tmp_path)
    shutil.copy(ROOT / "requirements.txt", tmp_path)
    subprocess.run(
        [str(BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(tmp_path / "dist"), str(ROOT)],
        capture_output=True,
        check=True,
        timeout=300,
    )
    assert (tmp_path / "dist" / tarball).is_file()
    subprocess.run(
        [
            str(BIN / "ansible-builder"),
            *("create", "--file", "execution-environment.yml"),
            *("--context", "context", "--output-filename", "Containerfile"),
        ],
        cwd=tmp_path,
        capture_output=True,
        check=True,
        timeout=120,
    )
    build = tmp_path / "context" / "_build"
    # the collection itself, as built
    with tarfile.open(build / "collections" / tarball) as archive:
        names = archive.getnames()
    assert {"MANIFEST.json", "requirements.txt", "meta/execution-environment.yml", "plugins/modules/drain.py"} <= set(
        names
    )
    # the galaxy requirements install that file, and nothing from a path outside the context
    requirements = yaml.safe_load((build / "requirements.yml").read_text())
    assert requirements["collections"] == [{"name": f"collections/{tarball}", "type": "file"}]
    assert (build / "requirements.txt").read_text() == (ROOT / "requirements.txt").read_text()
    containerfile = (tmp_path / "context" / "Containerfile").read_text()
    assert "COPY _build /build" in containerfile
    assert "WORKDIR /build" in containerfile
    assert "ansible-galaxy collection install" in containerfile
    assert "-r requirements.yml" in containerfile
    assert "COPY _build/requirements.txt requirements.txt" in containerfile
    assert "--user-pip=requirements.txt" in containerfile
    assert 'ANSIBLE_INSTALL_REFS="ansible-core>=2.16,<2.20 ansible-runner>=2.4,<3"' in containerfile
