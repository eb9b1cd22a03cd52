"""Build (or reuse) the NVIDIA Maintenance Operator, for the tests that run the real operator.

The operator's source is not part of this repository. ``$NODEOPS_NVIDIA_OPERATOR_SRC`` names it: a
``.tar.gz`` of github.com/Mellanox/maintenance-operator or a folder with its checkout (the tests were
written against commit e15d07b). Its Go dependencies come from the Go module proxy. The binary
(``maintenance-manager``) goes to the same cache as the control plane's binaries, keyed by a hash of the
source and the Go version, so only the first run builds it (about 2 minutes on 2 cores).

Usage: ``python tests/cluster/nvidia_operator.py`` prints the binary's path on its last line, or says how
to provide the source and exits 0 when the variable is unset (nothing to build).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

if __package__:
    from .build import cache_root, find_go
else:  # run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from build import cache_root, find_go

SOURCE_VARIABLE = "NODEOPS_NVIDIA_OPERATOR_SRC"
BINARY = "maintenance-manager"
MODULE = "github.com/Mellanox/maintenance-operator"
PACKAGE = "./cmd/maintenance-manager"


class SourceError(RuntimeError):
    """The source named by the variable is missing or is not the operator."""


def how_to_provide() -> str:
    return (
        f"the NVIDIA Maintenance Operator's source is not given: set {SOURCE_VARIABLE} to a .tar.gz or a checkout "
        f"of {MODULE} (tested at commit e15d07b); its Go dependencies come from the Go module proxy"
    )


def source() -> Path | None:
    """The source named by the variable; None when it is unset or empty."""
    value = os.environ.get(SOURCE_VARIABLE, "").strip()
    if not value:
        return None
    path = Path(value).expanduser().resolve()
    if not path.exists():
        raise SourceError(f"{SOURCE_VARIABLE}={value}: no such file or folder")
    return path


def log(msg: str) -> None:
    print(f"[nvidia-operator] {msg}", file=sys.stderr, flush=True)


def _source_digest(src: Path) -> str:
    """A hash of what the build reads: the tarball's bytes, or the folder's Go files and module files."""
    digest = hashlib.sha256()
    if src.is_file():
        with src.open("rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
        return digest.hexdigest()
    for path in sorted(src.rglob("*")):
        if path.is_file() and (path.suffix == ".go" or path.name in ("go.mod", "go.sum")) and ".git" not in path.parts:
            digest.update(str(path.relative_to(src)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _module_root(tree: Path) -> Path:
    """The folder of ``tree`` whose go.mod declares the operator's module (a tarball has one top folder)."""
    for gomod in sorted(tree.glob("go.mod")) + sorted(tree.glob("*/go.mod")):
        first = gomod.read_text().splitlines()[:1]
        if first and first[0].split() == ["module", MODULE]:
            return gomod.parent
    raise SourceError(f"{tree} holds no go.mod of module {MODULE}: is {SOURCE_VARIABLE} the operator's source?")


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One build at a time (test workers may ask at the same moment)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def build(src: Path | None = None) -> Path:
    """The operator's binary built from ``src`` (default: the variable's), reused from the cache."""
    src = src or source()
    if src is None:
        raise SourceError(how_to_provide())
    root = cache_root()
    go = find_go(root)
    version = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, check=True).stdout.strip()
    key = hashlib.sha256(f"{_source_digest(src)} {version}".encode()).hexdigest()[:16]
    binary = root / "nvidia-operator" / key / BINARY
    with _locked(root / "nvidia-operator" / ".lock"):
        if binary.exists():
            log(f"reusing {binary}")
            return binary
        log(f"building {MODULE} from {src} with {go} into {binary.parent}; about 2 minutes on 2 cores the first time")
        start = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="nvidia-operator-") as tmp:
            if src.is_file():
                with tarfile.open(src) as archive:
                    archive.extractall(tmp, filter="data")
                tree = _module_root(Path(tmp))
            else:
                tree = _module_root(src)
            env = dict(os.environ, GOFLAGS="-mod=mod", GOTOOLCHAIN="local", CGO_ENABLED="0")
            partial = binary.with_name(BINARY + ".tmp")
            partial.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run(
                [go, "build", "-trimpath", "-ldflags=-s -w", "-o", str(partial), PACKAGE], cwd=tree, env=env, check=True
            )
            partial.rename(binary)
        log(f"built in {time.monotonic() - start:.0f}s")
        return binary


def main() -> int:
    try:
        src = source()
        if src is None:
            log(f"nothing to build: {how_to_provide()}")
            return 0
        print(build(src))
    except (SourceError, subprocess.CalledProcessError, OSError, tarfile.TarError) as err:
        log(str(err))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
