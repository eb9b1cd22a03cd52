"""Fetch (or reuse) tools the tests run from Debian packages: Prometheus and its Pushgateway.

The tests need the real programs, not fakes: a Prometheus that evaluates alerting rules and scrapes the node
agent's metrics, and a Pushgateway that takes the figures the modules push. Both come from the Debian archive
this machine's apt is configured for (``apt-get download``, no root needed for that part) and are unpacked with
``dpkg-deb -x`` into the same cache as the control plane's binaries, keyed by the package's version, so only
the first run downloads them.

Usage: ``python tests/cluster/debian_tools.py prometheus prometheus-pushgateway`` prints each binary's path.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

if __package__:
    from .build import cache_root
else:  # run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from build import cache_root

# package -> the binary the tests run, as the package installs it
BINARIES = {
    "prometheus": "usr/bin/prometheus",
    "prometheus-pushgateway": "usr/bin/prometheus-pushgateway",
}


class ToolError(RuntimeError):
    """A package could not be found or unpacked."""


def how_to_provide(package: str) -> str:
    return (
        f"the Debian package {package} could not be fetched with apt-get download: make the Debian archive "
        "reachable (apt-get update) or install the package"
    )


def candidate_version(package: str) -> str:
    out = subprocess.run(
        ["apt-cache", "policy", package], check=False, capture_output=True, text=True, env=_c_locale()
    ).stdout
    match = re.search(r"Candidate:\s*(\S+)", out)
    if not match or match.group(1) == "(none)":
        raise ToolError(how_to_provide(package))
    return match.group(1)


def _c_locale() -> dict[str, str]:
    return {**os.environ, "LC_ALL": "C"}


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def binary(package: str) -> Path:
    """The path of the package's binary, downloaded and unpacked on first use."""
    if package not in BINARIES:
        raise ToolError(f"no binary known for package {package}; known: {', '.join(sorted(BINARIES))}")
    installed = shutil.which(Path(BINARIES[package]).name)
    version = candidate_version(package)
    root = cache_root() / "debian" / package / re.sub(r"[^A-Za-z0-9.+-]", "_", version)
    path = root / BINARIES[package]
    if path.exists():
        return path
    with _locked(root.parent / f".{root.name}.lock"):
        if path.exists():
            return path
        with tempfile.TemporaryDirectory(dir=root.parent) as tmp:
            fetched = subprocess.run(
                ["apt-get", "download", f"{package}={version}"],
                cwd=tmp,
                check=False,
                capture_output=True,
                text=True,
                env=_c_locale(),
            )
            debs = list(Path(tmp).glob("*.deb"))
            if fetched.returncode != 0 or not debs:
                if installed:
                    return Path(installed)
                raise ToolError(f"{how_to_provide(package)}: {fetched.stderr.strip()[-400:]}")
            unpacked = Path(tmp) / "root"
            subprocess.run(["dpkg-deb", "-x", str(debs[0]), str(unpacked)], check=True)
            if not (unpacked / BINARIES[package]).exists():
                raise ToolError(f"{debs[0].name} holds no {BINARIES[package]}")
            os.replace(unpacked, root)
    return path


def main(argv: list[str]) -> int:
    for package in argv or sorted(BINARIES):
        print(binary(package))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
