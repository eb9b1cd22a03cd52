"""The dependency collections the tests use, at versions galaxy.yml allows.

The node_agent role needs community.crypto and kubernetes.core (galaxy.yml's dependencies). The Ansible package of
tests/requirements.txt brings a kubernetes.core inside its range, but a community.crypto outside it (3.x; galaxy.yml
allows 2.x). So community.crypto comes from the older Ansible package pinned, with its hash, in
tests/requirements-collections.txt: the first run downloads that wheel with pip, keeps only the collection (in the
cache of tests/cluster/build.py, keyed by the package's version and hash) and drops the wheel; every run links it
into ``.build/collections``, the first directory of ANSIBLE_COLLECTIONS_PATH (tests/conftest.py, the Makefile), so
ansible-core loads it, not the installed Ansible package's.

``loaded`` asks ansible-core which copy of each collection it loads with the current ANSIBLE_COLLECTIONS_PATH;
``problems`` compares their versions with galaxy.yml's ranges. A unit test and the Makefile (before molecule and
ansible-lint) run them, so the tests cannot drift out of the declared ranges again.

Usage: ``python tests/support/dependency_collections.py [COLLECTIONS_DIR]`` links the collections into
COLLECTIONS_DIR (default ``.build/collections``), prints the version of each dependency ansible-core loads with
ANSIBLE_COLLECTIONS_PATH (default COLLECTIONS_DIR), and fails when one is missing or outside its range.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import yaml

try:
    from cluster.build import cache_root
except ModuleNotFoundError:  # run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from cluster.build import cache_root

ROOT = Path(__file__).resolve().parents[2]
PIN = ROOT / "tests" / "requirements-collections.txt"
# the collections taken from the pinned Ansible package; the others come from the installed one
TAKEN = ("community.crypto",)

# Run by the Python of the ansible commands: the first copy of each named collection that ansible-core's collection
# loader finds (it loads a collection from one directory only), the way ansible-playbook sets the loader up.
_LOADED = r"""
import importlib, json, sys
from ansible.plugins.loader import init_plugin_loader
init_plugin_loader()
found = {}
for name in sys.argv[1:]:
    try:
        package = importlib.import_module("ansible_collections." + name)
    except ImportError:
        continue
    found[name] = list(package.__path__)[0]
print(json.dumps(found))
"""


class CollectionError(RuntimeError):
    """The pinned collections could not be fetched or linked."""


def log(msg: str) -> None:
    print(f"[dependency-collections] {msg}", file=sys.stderr, flush=True)


def pinned() -> tuple[str, str]:
    """(version, sha256) of the Ansible package in tests/requirements-collections.txt."""
    match = re.search(r"^ansible==(\S+)\s+--hash=sha256:([0-9a-f]{64})\s*$", PIN.read_text(), re.MULTILINE)
    if not match:
        raise CollectionError(f"{PIN} pins no ansible==VERSION --hash=sha256:HASH")
    return match.group(1), match.group(2)


def cached(name: str) -> Path:
    """Where the cache keeps the collection taken from the pinned Ansible package."""
    version, sha256 = pinned()
    return cache_root() / "collections" / f"ansible-{version}-{sha256[:12]}" / "ansible_collections" / _path(name)


def _path(name: str) -> str:
    return name.replace(".", "/")


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _missing() -> list[str]:
    return [name for name in TAKEN if not (cached(name) / "MANIFEST.json").is_file()]


def fetch() -> None:
    """Download the pinned Ansible package (pip checks its hash) and keep the taken collections, once."""
    if not _missing():
        return
    version, _sha256 = pinned()
    base = cached(TAKEN[0]).parents[2]
    with _locked(base.parent / f".{base.name}.lock"):
        missing = _missing()
        if not missing:
            return
        log(f"downloading ansible {version} from PyPI once, for {', '.join(missing)} ({PIN.relative_to(ROOT)})")
        with tempfile.TemporaryDirectory(dir=base.parent) as tmp:
            cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps"]
            cmd += ["--only-binary", ":all:", "--require-hashes", "-r", str(PIN), "-d", tmp]
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            wheels = list(Path(tmp).glob(f"ansible-{version}-*.whl"))
            if proc.returncode != 0 or len(wheels) != 1:
                raise CollectionError(
                    f"could not download ansible {version} from PyPI ({' '.join(cmd)}): {proc.stderr.strip()[-800:]}"
                )
            unpacked = Path(tmp) / "unpacked"
            with zipfile.ZipFile(wheels[0]) as wheel:
                for name in missing:
                    prefix = f"ansible_collections/{_path(name)}/"
                    members = [member for member in wheel.namelist() if member.startswith(prefix)]
                    if f"{prefix}MANIFEST.json" not in members:
                        raise CollectionError(f"{wheels[0].name} holds no {name}")
                    wheel.extractall(unpacked, members)
                    target = cached(name)
                    shutil.rmtree(target, ignore_errors=True)  # what an interrupted run may have left
                    target.parent.mkdir(parents=True, exist_ok=True)
                    os.replace(unpacked / prefix, target)


def link(collections: Path) -> None:
    """Fetch the taken collections if needed and link each into ``collections/ansible_collections``."""
    fetch()
    for name in TAKEN:
        path = collections / "ansible_collections" / _path(name)
        target = cached(name)
        if path.is_symlink() and Path(os.readlink(path)) == target:
            continue
        if path.exists() and not path.is_symlink():
            raise CollectionError(f"{path} is not a link made by {__file__}: remove it")
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{os.getpid()}")
        temporary.unlink(missing_ok=True)
        temporary.symlink_to(target, target_is_directory=True)
        os.replace(temporary, path)  # atomic: other pytest-xdist workers see the old link or the new one


def dependencies() -> dict[str, str]:
    """galaxy.yml's dependencies: {collection: version range}."""
    return dict(yaml.safe_load((ROOT / "galaxy.yml").read_text()).get("dependencies") or {})


def version(path: Path) -> str:
    """The version of the collection in ``path`` (its MANIFEST.json, or galaxy.yml for a source tree)."""
    if (path / "MANIFEST.json").is_file():
        return str(json.loads((path / "MANIFEST.json").read_text())["collection_info"]["version"])
    return str(yaml.safe_load((path / "galaxy.yml").read_text())["version"])


def loaded(names: list[str], env: dict[str, str] | None = None) -> dict[str, Path]:
    """{collection: its directory} for each named collection the ansible commands of this Python load with ``env``
    (default: this environment); a collection they cannot find is left out."""
    proc = subprocess.run(
        [sys.executable, "-c", _LOADED, *names], capture_output=True, text=True, env=env, check=False, timeout=120
    )
    if proc.returncode != 0:
        raise CollectionError(f"could not ask ansible-core for {names}: {proc.stderr.strip()[-800:]}")
    return {name: Path(path) for name, path in json.loads(proc.stdout).items()}


def allows(requirement: str, found: str) -> bool:
    """Whether a galaxy.yml version range allows ``found``, as ansible-galaxy reads the range."""
    from ansible.galaxy.dependency_resolution.versioning import meets_requirements

    return bool(meets_requirements(found, requirement))


def main(argv: list[str]) -> int:
    collections = Path(argv[0]) if argv else ROOT / ".build" / "collections"
    link(collections.resolve())
    ranges = dependencies()
    found = loaded(list(ranges), {"ANSIBLE_COLLECTIONS_PATH": str(collections.resolve()), **os.environ})
    problems = []
    for name, requirement in ranges.items():
        if name not in found:
            problems.append(f"{name}: ansible-core finds no copy of it (ANSIBLE_COLLECTIONS_PATH, the Ansible package)")
            continue
        at = version(found[name])
        print(f"{name} {at} (galaxy.yml: {requirement!r}) from {found[name]}")
        if not allows(requirement, at):
            problems.append(f"{name} {at} from {found[name]} is outside galaxy.yml's range {requirement!r}")
    for problem in problems:
        print(f"dependency collections: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
