"""Start, stop and inspect the loopback test control plane.

The control plane is made of real processes built by ``build.py``: etcd, kube-apiserver,
kube-controller-manager, kube-scheduler and the kwok controller, which plays the kubelet of
simulated nodes (see ``kwok.py``). Everything listens on 127.0.0.1 only, on free ports.

Work directory layout::

    pki/              CA, serving and client certificates, service-account keys, token file
    etcd/             etcd data (removed by stop())
    logs/<name>.log   stdout and stderr of every process
    kwok/stages.yaml  the kwok stages (node and pod lifecycle) written by this module
    kubeconfig-token  admin kubeconfig with a bearer token; ``kubeconfig`` is a copy of it
    kubeconfig-cert   admin kubeconfig with a client certificate
    pids.json         the processes started, so that a later run or ``down`` can stop them

CLI::

    python tests/cluster/launcher.py up       # build or reuse binaries, start, stay running
    python tests/cluster/launcher.py up --nvidia-operator   # and run the NVIDIA Maintenance Operator
    python tests/cluster/launcher.py status
    python tests/cluster/launcher.py down

The work directory of the CLI is ``$NODEOPS_CLUSTER_DIR`` (default /tmp/nodeops-cluster).
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import datetime
import ipaddress
import json
import os
import re
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO, Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

LOOPBACK = "127.0.0.1"
SERVICE_CIDR = "10.0.0.0/24"
SERVICE_IP = "10.0.0.1"
POD_CIDR = "10.244.0.0/16"
ADMIN_USER = "nodeops-admin"
# Nodes that kwok manages carry this annotation (kwok selects on it, see kwok.py).
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_NODE_ANNOTATION_VALUE = "fake"
# A node whose lease is not renewed for this long becomes Ready=Unknown.
NODE_MONITOR_GRACE_SECONDS = 20
# kwok renews node leases every quarter of this duration (5 s).
KWOK_NODE_LEASE_SECONDS = 20
START_ORDER = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
# The optional NVIDIA Maintenance Operator (see nvidia_operator.py): its component name, the namespace it reads
# its MaintenanceOperatorConfig from, and the CRDs it needs before it starts (the collection's own).
OPERATOR = "maintenance-operator"
OPERATOR_NAMESPACE = "nodeops-maintenance"
MAINTENANCE_CRDS = tuple(
    Path(__file__).resolve().parents[2] / "roles" / "crds" / "files" / f"maintenance.nvidia.com_{plural}.yaml"
    for plural in ("nodemaintenances", "maintenanceoperatorconfigs")
)
DEFAULT_WORKDIR = "/tmp/nodeops-cluster"
POLL_INTERVAL = 0.2

# A node with this annotation (an RFC 3339 time) goes through a simulated reboot: Ready=False at once,
# then at that time a new bootID, the annotation removed, and Ready again. kwok does it, so a reboot
# finishes even when whoever started it is gone (playbooks/maintenance/simulated_reboot.yml).
REBOOT_ANNOTATION = "maintenance.nodeops.io/simulated-reboot-until"

# kwok's configuration and its stages: our own, minimal lifecycle for nodes and pods. A node that is not Ready
# is made Ready once; after that its health is carried by the node Lease that kwok renews
# (like a kubelet, which posts its status rarely and renews its lease often). Scheduled
# pods become Running and Ready, pods of Jobs then Succeed, Running pods marked not Ready (by the
# node-lifecycle controller) are Ready again, deleted pods are finished.
# ``@K8S_VERSION@`` is replaced with the version of the control plane.
KWOK_STAGES = """\
apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  # kwok's defaults (4) make it finish about 60-120 deleted pods a second here, slower than a drain evicts.
  # A configuration given here replaces the defaults, so the other parallelism settings are spelled out.
  podPlayStageParallelism: 16
  nodePlayStageParallelism: 8
  nodeLeaseParallelism: 4
  podsOnNodeSyncParallelism: 1
  enablePodsOnNodeSyncListPager: true
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: nodeops-node-ready
spec:
  resourceRef:
    apiGroup: v1
    kind: Node
  selector:
    matchExpressions:
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: NotIn
      values: ["True"]
    - key: '.metadata.annotations["@REBOOT_ANNOTATION@"]'
      operator: DoesNotExist
  next:
    statusTemplate: |
      {{ $now := Now }}
      {{ $info := or .status.nodeInfo dict }}
      phase: Running
      conditions:
      {{ range NodeConditions }}
      - type: {{ .type | Quote }}
        status: {{ .status | Quote }}
        reason: {{ .reason | Quote }}
        message: {{ .message | Quote }}
        lastHeartbeatTime: {{ $now | Quote }}
        lastTransitionTime: {{ $now | Quote }}
      {{ end }}
      {{ if not .status.capacity }}
      capacity: {cpu: "32", memory: 256Gi, pods: "110"}
      {{ end }}
      {{ if not .status.allocatable }}
      allocatable: {cpu: "32", memory: 256Gi, pods: "110"}
      {{ end }}
      nodeInfo:
        architecture: {{ or $info.architecture "amd64" | Quote }}
        operatingSystem: {{ or $info.operatingSystem "linux" | Quote }}
        osImage: {{ or $info.osImage "kwok simulated node" | Quote }}
        kernelVersion: {{ or $info.kernelVersion "6.1.0-kwok" | Quote }}
        containerRuntimeVersion: {{ or $info.containerRuntimeVersion "kwok://0.8.0" | Quote }}
        kubeletVersion: {{ or $info.kubeletVersion "@K8S_VERSION@" | Quote }}
        kubeProxyVersion: {{ or $info.kubeProxyVersion "@K8S_VERSION@" | Quote }}
        machineID: {{ or $info.machineID "" | Quote }}
        systemUUID: {{ or $info.systemUUID "" | Quote }}
        bootID: {{ or $info.bootID "" | Quote }}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: nodeops-node-reboot-start
spec:
  resourceRef:
    apiGroup: v1
    kind: Node
  selector:
    matchExpressions:
    - key: '.metadata.annotations["@REBOOT_ANNOTATION@"]'
      operator: Exists
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: In
      values: ["True"]
  next:
    patches:
    - subresource: status
      root: status
      template: |
        {{ $now := Now }}
        conditions:
        - type: Ready
          status: "False"
          reason: KubeletNotReady
          message: simulated reboot
          lastHeartbeatTime: {{ $now | Quote }}
          lastTransitionTime: {{ $now | Quote }}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: nodeops-node-reboot-end
spec:
  resourceRef:
    apiGroup: v1
    kind: Node
  selector:
    matchExpressions:
    - key: '.metadata.annotations["@REBOOT_ANNOTATION@"]'
      operator: Exists
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: NotIn
      values: ["True"]
  delay:
    durationMilliseconds: 0
    durationFrom:
      expressionFrom: '.metadata.annotations["@REBOOT_ANNOTATION@"]'
  next:
    patches:
    - subresource: status
      root: status
      template: |
        nodeInfo:
          bootID: {{ index .metadata.annotations "@REBOOT_ANNOTATION@" | Quote }}
    - type: merge
      template: |
        metadata:
          annotations:
            "@REBOOT_ANNOTATION@": null
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: nodeops-pod-running
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: .metadata.deletionTimestamp
      operator: DoesNotExist
    - key: .status.phase
      operator: In
      values: [Pending]
  next:
    statusTemplate: |
      {{ $now := Now }}
      phase: Running
      startTime: {{ $now | Quote }}
      conditions:
      - {type: PodReadyToStartContainers, status: "True", lastTransitionTime: {{ $now | Quote }}}
      - {type: Initialized, status: "True", lastTransitionTime: {{ $now | Quote }}}
      - {type: ContainersReady, status: "True", lastTransitionTime: {{ $now | Quote }}}
      - {type: Ready, status: "True", lastTransitionTime: {{ $now | Quote }}}
      containerStatuses:
      {{ range .spec.containers }}
      - name: {{ .name | Quote }}
        image: {{ .image | Quote }}
        imageID: {{ printf "kwok://%s" .image | Quote }}
        containerID: {{ printf "kwok://%s" .name | Quote }}
        ready: true
        started: true
        restartCount: 0
        state: {running: {startedAt: {{ $now | Quote }}}}
      {{ end }}
      {{ with .spec.initContainers }}
      initContainerStatuses:
      {{ range . }}
      - name: {{ .name | Quote }}
        image: {{ .image | Quote }}
        imageID: {{ printf "kwok://%s" .image | Quote }}
        ready: true
        restartCount: 0
        {{ if eq (or .restartPolicy "") "Always" }}
        started: true
        state: {running: {startedAt: {{ $now | Quote }}}}
        {{ else }}
        started: false
        state:
          terminated: {exitCode: 0, reason: Completed, startedAt: {{ $now | Quote }}, finishedAt: {{ $now | Quote }}}
        {{ end }}
      {{ end }}
      {{ end }}
      {{ with NodeIPWith .spec.nodeName }}
      hostIP: {{ . | Quote }}
      hostIPs: [{ip: {{ . | Quote }}}]
      {{ end }}
      {{ $hostNetwork := or .spec.hostNetwork false }}
      {{ with PodIPWith .spec.nodeName $hostNetwork .metadata.uid .metadata.name .metadata.namespace }}
      podIP: {{ . | Quote }}
      podIPs: [{ip: {{ . | Quote }}}]
      {{ end }}
---
# A kubelet posts its pods' status again once it can: after the node-lifecycle controller marked the pods of a
# node NotReady because it missed the node's Lease renewals (while kube-apiserver was down, say), they are Ready
# again. kwok does not look at a Running pod again by itself, so this stage does it.
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: nodeops-pod-ready-again
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: .metadata.deletionTimestamp
      operator: DoesNotExist
    - key: .status.phase
      operator: In
      values: [Running]
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: In
      values: ["False"]
  next:
    patches:
    - subresource: status
      root: status
      template: |
        {{ $now := Now }}
        conditions:
        - {type: PodScheduled, status: "True", lastTransitionTime: {{ $now | Quote }}}
        - {type: PodReadyToStartContainers, status: "True", lastTransitionTime: {{ $now | Quote }}}
        - {type: Initialized, status: "True", lastTransitionTime: {{ $now | Quote }}}
        - {type: ContainersReady, status: "True", lastTransitionTime: {{ $now | Quote }}}
        - {type: Ready, status: "True", lastTransitionTime: {{ $now | Quote }}}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: nodeops-pod-job-succeeded
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: .metadata.deletionTimestamp
      operator: DoesNotExist
    - key: .status.phase
      operator: In
      values: [Running]
    - key: .metadata.ownerReferences.[].kind
      operator: In
      values: [Job]
  next:
    statusTemplate: |
      {{ $now := Now }}
      phase: Succeeded
      conditions:
      - {type: Ready, status: "False", reason: PodCompleted, lastTransitionTime: {{ $now | Quote }}}
      - {type: ContainersReady, status: "False", reason: PodCompleted, lastTransitionTime: {{ $now | Quote }}}
      containerStatuses:
      {{ range .spec.containers }}
      - name: {{ .name | Quote }}
        image: {{ .image | Quote }}
        ready: false
        started: false
        restartCount: 0
        state:
          terminated: {exitCode: 0, reason: Completed, startedAt: {{ $now | Quote }}, finishedAt: {{ $now | Quote }}}
      {{ end }}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: nodeops-pod-finish-deletion
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: .metadata.deletionTimestamp
      operator: Exists
  next:
    delete: true
"""


class ClusterError(RuntimeError):
    """The control plane could not be started, or a process of it died."""


# --------------------------------------------------------------------------- PKI


@dataclass
class _Identity:
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attrs)


def _issue(
    common_name: str,
    issuer: _Identity | None,
    *,
    organization: str | None = None,
    dns_names: Sequence[str] = (),
    ip_addresses: Sequence[str] = (),
    usage: x509.ObjectIdentifier | None = None,
) -> _Identity:
    """A new EC P-256 key and its certificate; ``issuer=None`` makes a self-signed CA."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    subject = _name(common_name, organization)
    is_ca = issuer is None
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject if issuer is None else issuer.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=is_ca, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=not is_ca,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=is_ca,
                crl_sign=is_ca,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    if issuer is not None:
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer.key.public_key()), critical=False
        )
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if dns_names or ip_addresses:
        names: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
        names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    signing_key = key if issuer is None else issuer.key
    return _Identity(key, builder.sign(signing_key, hashes.SHA256()))


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _write_private(path: Path, data: bytes) -> None:
    path.write_bytes(data)
    path.chmod(0o600)


def _write_identity(pki: Path, name: str, ident: _Identity) -> tuple[Path, Path]:
    cert_path, key_path = pki / f"{name}.crt", pki / f"{name}.key"
    cert_path.write_bytes(ident.cert.public_bytes(serialization.Encoding.PEM))
    _write_private(key_path, _key_pem(ident.key))
    return cert_path, key_path


# --------------------------------------------------------------------------- helpers


def free_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports on 127.0.0.1 (bound to port 0, then released)."""
    socks = []
    try:
        for _index in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((LOOPBACK, 0))
            socks.append(sock)
        return [s.getsockname()[1] for s in socks]
    finally:
        for sock in socks:
            sock.close()


# Loopback requests never go through a proxy from the environment.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _http_get(
    url: str, *, token: str | None = None, context: ssl.SSLContext | None = None, timeout: float = 3.0
) -> tuple[int, bytes] | None:
    """(status, body) of a GET, or None when nothing answers."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({})]
    if context is not None:
        handlers.append(urllib.request.HTTPSHandler(context=context))
    opener = urllib.request.build_opener(*handlers) if context is not None else _OPENER
    try:
        with opener.open(request, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()
    except (urllib.error.URLError, OSError):
        return None


def _insecure_context() -> ssl.SSLContext:
    """For the self-signed loopback health ports of controller-manager and scheduler."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def tail_file(path: Path, lines: int = 40, width: int | None = None) -> str:
    """The last ``lines`` lines of a (possibly large) text file, cut to ``width`` characters."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            end = fh.tell()
            block, data = 8192, b""
            while end > 0 and data.count(b"\n") <= lines:
                step = min(block, end)
                end -= step
                fh.seek(end)
                data = fh.read(step) + data
    except FileNotFoundError:
        return ""
    tail = data.decode(errors="replace").splitlines()[-lines:]
    if width is not None:
        tail = [line if len(line) <= width else line[: width - 3] + "..." for line in tail]
    return "\n".join(tail)


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def _alive(pid: int) -> bool:
    """True when ``pid`` runs and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _is_ours(pid: int, binary: str, workdir: Path) -> bool:
    """The PID still runs ``binary`` with this work directory in its arguments.

    Guards against PID reuse: an unrelated process that got a recorded PID is never signalled.
    """
    argv = _cmdline(pid)
    return bool(argv) and argv[0] == binary and any(str(workdir) in arg for arg in argv[1:])


@dataclass
class _Process:
    name: str
    binary: str
    pid: int
    popen: subprocess.Popen[bytes] | None = None
    log: IO[bytes] | None = field(default=None, repr=False)

    def running(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is None
        return _alive(self.pid)


def _terminate(procs: Sequence[_Process], workdir: Path, timeout: float) -> None:
    """Stop the processes that are still ours, newest first: SIGTERM, wait, then SIGKILL.

    One at a time, so that the API clients go before kube-apiserver and kube-apiserver goes
    before etcd: a client whose server vanished first may hang in its shutdown. ``timeout`` is
    the wait per process before SIGKILL.
    """
    for proc in reversed(procs):
        if not (proc.running() and _is_ours(proc.pid, proc.binary, workdir)):
            continue
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while proc.running() and time.monotonic() < deadline:
            time.sleep(0.05)
        if proc.running():
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
        if proc.popen is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.popen.wait(timeout=5)
    for proc in procs:
        if proc.log is not None:
            proc.log.close()
            proc.log = None


def _read_pids(workdir: Path) -> dict[str, Any]:
    try:
        data = json.loads((workdir / "pids.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def _recorded_processes(workdir: Path) -> list[_Process]:
    return [
        _Process(name=str(p["name"]), binary=str(p["binary"]), pid=int(p["pid"]))
        for p in _read_pids(workdir).get("processes", [])
    ]


def stop_recorded(workdir: Path, timeout: float = 10.0) -> list[str]:
    """Stop the processes recorded in ``workdir/pids.json`` that still belong to it.

    Returns the names of the processes that were running. Removes pids.json and the etcd data.
    """
    workdir = Path(workdir).resolve()
    procs = _recorded_processes(workdir)
    running = [p.name for p in procs if p.running() and _is_ours(p.pid, p.binary, workdir)]
    _terminate(procs, workdir, timeout)
    (workdir / "pids.json").unlink(missing_ok=True)
    shutil.rmtree(workdir / "etcd", ignore_errors=True)
    return running


def _version_of(bindir: Path) -> str:
    match = re.match(r"(v\d+\.\d+\.\d+)", bindir.name)
    if match:
        return match.group(1)
    out = subprocess.run(
        [str(bindir / "kube-apiserver"), "--version"], capture_output=True, text=True, check=False
    ).stdout
    match = re.search(r"v\d+\.\d+\.\d+\S*", out)
    return match.group(0) if match else "unknown"


# --------------------------------------------------------------------------- cluster


class Cluster:
    """A loopback control plane: etcd, kube-apiserver, controller-manager, scheduler, kwok.

    ``Cluster(workdir, bindir).start()`` returns once the API server is ready, every component
    answers its health check and the ``default`` ServiceAccount exists (pods can be created).
    ``stop()`` terminates exactly the processes it started. ``kill(name)`` and ``restart(name)`` crash
    one component and start it again in its place (same arguments and ports), for fault tests.

    With ``nvidia_operator`` (the path of a ``maintenance-manager`` binary) ``start()`` also installs the
    collection's NodeMaintenance and MaintenanceOperatorConfig CRDs and runs the NVIDIA Maintenance Operator
    from outside the cluster as the component ``maintenance-operator``, reading its configuration from
    ``operator_namespace``. It then serves every NodeMaintenance object of this control plane.
    """

    def __init__(
        self,
        workdir: str | os.PathLike[str],
        bindir: str | os.PathLike[str],
        *,
        nvidia_operator: str | os.PathLike[str] | None = None,
        operator_namespace: str = OPERATOR_NAMESPACE,
    ) -> None:
        self.workdir = Path(workdir).resolve()
        self.bindir = Path(bindir).resolve()
        self.nvidia_operator = Path(nvidia_operator).resolve() if nvidia_operator else None
        self.operator_namespace = operator_namespace
        self.k8s_version = _version_of(self.bindir)
        self.pki = self.workdir / "pki"
        self.logdir = self.workdir / "logs"
        self.ca_file = self.pki / "ca.crt"
        self.client_cert = self.pki / "admin.crt"
        self.client_key = self.pki / "admin.key"
        self.kubeconfig_token = self.workdir / "kubeconfig-token"
        self.kubeconfig_cert = self.workdir / "kubeconfig-cert"
        self.kubeconfig = self.workdir / "kubeconfig"
        self.token = ""
        self.server = ""
        self.ports: dict[str, int] = {}
        self.startup_seconds: float | None = None
        # "<component> <check>" -> seconds since start() began, for each readiness check passed.
        self.timings: dict[str, float] = {}
        self._began = 0.0
        self._procs: list[_Process] = []
        self._cleanup_registered = False
        self._previous_sigterm: Any = None
        self._lock = threading.RLock()

    # ------------------------------------------------------------------ public API

    @property
    def components(self) -> tuple[str, ...]:
        """The components of this control plane, in their start order."""
        return (*START_ORDER, OPERATOR) if self.nvidia_operator else START_ORDER

    def start(self, *, timeout: float = 120.0, stop_on_exit: bool = True) -> Cluster:
        """Start every component and wait until the cluster is usable.

        With ``stop_on_exit`` the processes are stopped at interpreter exit and on SIGTERM;
        the CLI's ``up`` passes False so that they outlive it.
        """
        if self._procs:
            raise ClusterError(f"cluster in {self.workdir} is already started")
        began = self._began = time.monotonic()
        deadline = began + timeout
        stale = stop_recorded(self.workdir)
        if stale:
            print(f"[cluster] stopped stale processes from an earlier run: {', '.join(stale)}", file=sys.stderr)
        missing = [str(self._binary(name)) for name in self.components if not self._binary(name).exists()]
        if missing:
            raise ClusterError(f"missing binaries: {', '.join(missing)} (run tests/cluster/build.py)")
        # A run that died without stop() leaves its etcd data: start from an empty store.
        shutil.rmtree(self.workdir / "etcd", ignore_errors=True)
        for sub in ("pki", "logs", "kwok"):
            (self.workdir / sub).mkdir(parents=True, exist_ok=True)
        self._write_pki()
        names = ("etcd", "etcd-peer", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", OPERATOR)
        self.ports = dict(zip(names, free_ports(len(names)), strict=True))
        self.server = f"https://{LOOPBACK}:{self.ports['kube-apiserver']}"
        self._write_kubeconfigs()
        self._write_kwok_config()
        if stop_on_exit:
            self._register_cleanup()
        try:
            self._start_all(deadline)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - began
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Terminate the processes started by this object (SIGTERM, then SIGKILL), drop etcd data.

        ``timeout`` is how long each process gets to exit after SIGTERM.
        """
        with self._lock:
            procs = self._procs or _recorded_processes(self.workdir)
            _terminate(procs, self.workdir, timeout)
            self._procs = []
            (self.workdir / "pids.json").unlink(missing_ok=True)
            shutil.rmtree(self.workdir / "etcd", ignore_errors=True)
            self._unregister_cleanup()

    def log_tail(self, name: str | None = None, lines: int = 40, width: int | None = 400) -> str:
        """Tail of one component's log, or of all of them (with headers) when ``name`` is None.

        Lines longer than ``width`` characters are cut (kwok and the scheduler log long ones).
        """
        if name is not None:
            return tail_file(self.logdir / f"{name}.log", lines, width)
        parts = []
        for component in self.components:
            path = self.logdir / f"{component}.log"
            if path.exists():
                parts.append(f"==> {path} <==\n{tail_file(path, lines, width)}")
        return "\n\n".join(parts)

    def status(self) -> dict[str, bool]:
        """Component name -> running, for the processes recorded in pids.json."""
        procs = self._procs or _recorded_processes(self.workdir)
        return {p.name: p.running() and _is_ours(p.pid, p.binary, self.workdir) for p in procs}

    def ready(self) -> bool:
        """True when the API server answers /readyz with 200."""
        return self._apiserver_ready()

    def healthy(self, name: str) -> bool:
        """True when the component ``name`` answers its health check (/readyz of kube-apiserver)."""
        return self._health_check(name)[1]()

    def kill(self, name: str) -> int:
        """SIGKILL the component ``name`` (a crash: no shutdown of its own) and wait until it is gone.

        The process is the one recorded for this work directory, signalled only while its PID still runs
        its binary with this work directory (as ``stop()`` checks). Its record stays, no longer running,
        until :meth:`restart` replaces it. Returns the PID killed. ClusterError when it is not running.
        """
        with self._lock:
            proc = self._recorded(name)
            if not (proc.running() and _is_ours(proc.pid, proc.binary, self.workdir)):
                raise ClusterError(f"{name} (PID {proc.pid}) is not running; nothing to kill")
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
            if proc.popen is not None:
                proc.popen.wait(timeout=30)  # reaped: no zombie left behind
            else:
                deadline = time.monotonic() + 30
                while _alive(proc.pid) and time.monotonic() < deadline:
                    time.sleep(0.05)
            if proc.running():
                raise ClusterError(f"{name} (PID {proc.pid}) still runs 30 s after SIGKILL")
            if proc.log is not None:
                proc.log.close()
                proc.log = None
            return proc.pid

    def restart(self, name: str, *, timeout: float = 120.0) -> int:
        """Start the component ``name`` again after :meth:`kill` (or a crash): the same binary, arguments and
        ports, its output appended to the same log. Returns once it answers its health check (/readyz for
        kube-apiserver), with the new PID recorded in its place (pids.json too), so that ``stop()`` and a
        later session's clean-up stop it in the usual order. The other components reconnect by themselves.

        ClusterError when it is still running, or when it (or another component) exits or ``timeout``
        passes before it is ready.
        """
        began = time.monotonic()
        with self._lock:
            proc = self._recorded(name)
            if proc.running() and _is_ours(proc.pid, proc.binary, self.workdir):
                raise ClusterError(f"{name} (PID {proc.pid}) is still running; kill it first")
            new = self._launch(name)
            self._procs[self._procs.index(proc)] = new  # its place: stop() goes through them newest first
            self._record_pids()
        self._wait_healthy(name, began + timeout, restarted_at=began)
        return new.pid

    def _recorded(self, name: str) -> _Process:
        """The recorded process of ``name``; a Cluster made by ``attach()`` takes over the records first."""
        if not self._procs:
            self._procs = _recorded_processes(self.workdir)
        for proc in self._procs:
            if proc.name == name:
                return proc
        raise ClusterError(f"no {name} recorded in {self.workdir / 'pids.json'}")

    @classmethod
    def attach(cls, workdir: str | os.PathLike[str]) -> Cluster:
        """A Cluster object for a control plane started earlier (e.g. by ``launcher.py up``)."""
        workdir = Path(workdir).resolve()
        data = _read_pids(workdir)
        if not data:
            raise ClusterError(f"no running cluster recorded in {workdir / 'pids.json'}")
        cluster = cls(
            workdir,
            data["bindir"],
            nvidia_operator=data.get("nvidia_operator"),
            operator_namespace=data.get("operator_namespace", OPERATOR_NAMESPACE),
        )
        cluster.server = data.get("server", "")
        cluster.ports = {k: int(v) for k, v in data.get("ports", {}).items()}
        token_file = cluster.pki / "admin.token"
        cluster.token = token_file.read_text().strip() if token_file.exists() else ""
        return cluster

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ files

    def _write_pki(self) -> None:
        pki = self.pki
        ca = _issue("nodeops-test-ca", None)
        _write_identity(pki, "ca", ca)
        serving = _issue(
            "kube-apiserver",
            ca,
            dns_names=(
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ),
            ip_addresses=(LOOPBACK, SERVICE_IP),
            usage=ExtendedKeyUsageOID.SERVER_AUTH,
        )
        _write_identity(pki, "apiserver", serving)
        client = ExtendedKeyUsageOID.CLIENT_AUTH
        _write_identity(pki, "admin", _issue(ADMIN_USER, ca, organization="system:masters", usage=client))
        for component in ("kube-controller-manager", "kube-scheduler"):
            ident = _issue(f"system:{component}", ca, usage=client)
            _write_identity(pki, component, ident)
        # apiserver -> etcd and kube-apiserver -> kubelet are not needed: etcd is plain loopback HTTP.
        sa_key = ec.generate_private_key(ec.SECP256R1())
        _write_private(pki / "sa.key", _key_pem(sa_key))
        (pki / "sa.pub").write_bytes(
            sa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        self.token = secrets.token_urlsafe(32)
        _write_private(pki / "admin.token", self.token.encode() + b"\n")
        # token,user,uid,"group1,group2"
        _write_private(pki / "tokens.csv", f'{self.token},{ADMIN_USER},{ADMIN_USER},"system:masters"\n'.encode())

    def _kubeconfig_dict(self, user: dict[str, str], name: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "nodeops-test", "cluster": {"server": self.server, "certificate-authority": str(self.ca_file)}}
            ],
            "users": [{"name": name, "user": user}],
            "contexts": [{"name": "nodeops-test", "context": {"cluster": "nodeops-test", "user": name}}],
            "current-context": "nodeops-test",
        }

    def _write_kubeconfig(self, path: Path, user: dict[str, str], name: str) -> None:
        path.write_text(yaml.safe_dump(self._kubeconfig_dict(user, name), sort_keys=False))
        path.chmod(0o600)

    def _write_kubeconfigs(self) -> None:
        self._write_kubeconfig(self.kubeconfig_token, {"token": self.token}, ADMIN_USER)
        cert_user = {"client-certificate": str(self.client_cert), "client-key": str(self.client_key)}
        self._write_kubeconfig(self.kubeconfig_cert, cert_user, ADMIN_USER)
        shutil.copyfile(self.kubeconfig_token, self.kubeconfig)
        for component in ("kube-controller-manager", "kube-scheduler"):
            user = {
                "client-certificate": str(self.pki / f"{component}.crt"),
                "client-key": str(self.pki / f"{component}.key"),
            }
            self._write_kubeconfig(self.pki / f"{component}.kubeconfig", user, f"system:{component}")

    def _write_kwok_config(self) -> None:
        stages = KWOK_STAGES.replace("@K8S_VERSION@", self.k8s_version)
        stages = stages.replace("@REBOOT_ANNOTATION@", REBOOT_ANNOTATION)
        (self.workdir / "kwok" / "stages.yaml").write_text(stages)

    def _record_pids(self) -> None:
        data = {
            "workdir": str(self.workdir),
            "bindir": str(self.bindir),
            "nvidia_operator": str(self.nvidia_operator) if self.nvidia_operator else None,
            "operator_namespace": self.operator_namespace,
            "server": self.server,
            "ports": self.ports,
            "processes": [{"name": p.name, "pid": p.pid, "binary": p.binary} for p in self._procs],
        }
        tmp = self.workdir / "pids.json.tmp"
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        tmp.replace(self.workdir / "pids.json")

    # ------------------------------------------------------------------ processes

    def _args(self, name: str) -> list[str]:
        w, pki, p = self.workdir, self.pki, self.ports
        if name == "etcd":
            client, peer = f"http://{LOOPBACK}:{p['etcd']}", f"http://{LOOPBACK}:{p['etcd-peer']}"
            return [
                "--name=nodeops",
                f"--data-dir={w / 'etcd'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=nodeops={peer}",
                "--initial-cluster-state=new",
                "--unsafe-no-fsync",
                f"--quota-backend-bytes={512 * 1024 * 1024}",
                "--log-level=warn",
            ]
        if name == "kube-apiserver":
            return [
                f"--etcd-servers=http://{LOOPBACK}:{p['etcd']}",
                f"--bind-address={LOOPBACK}",
                f"--advertise-address={LOOPBACK}",
                f"--secure-port={p['kube-apiserver']}",
                f"--tls-cert-file={pki / 'apiserver.crt'}",
                f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--client-ca-file={self.ca_file}",
                f"--token-auth-file={pki / 'tokens.csv'}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--authorization-mode=Node,RBAC",
                "--enable-priority-and-fairness=false",
                # The "kubernetes" Service cannot point at a loopback address; do not keep trying.
                "--endpoint-reconciler-type=none",
                "--allow-privileged=true",
                "--profiling=false",
            ]
        if name == "kube-controller-manager":
            kubeconfig = pki / "kube-controller-manager.kubeconfig"
            return [
                f"--kubeconfig={kubeconfig}",
                f"--bind-address={LOOPBACK}",
                f"--secure-port={p['kube-controller-manager']}",
                f"--cert-dir={pki / 'kube-controller-manager-serving'}",
                # All controllers but those that need a cloud provider (they would be skipped anyway).
                "--controllers=*,-cloud-node-lifecycle-controller,-service-lb-controller,-node-route-controller",
                "--leader-elect=false",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={self.ca_file}",
                f"--cluster-signing-cert-file={self.ca_file}",
                f"--cluster-signing-key-file={pki / 'ca.key'}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                f"--node-monitor-grace-period={NODE_MONITOR_GRACE_SECONDS}s",
                "--node-monitor-period=2s",
                "--profiling=false",
            ]
        if name == "kube-scheduler":
            return [
                f"--kubeconfig={pki / 'kube-scheduler.kubeconfig'}",
                f"--bind-address={LOOPBACK}",
                f"--secure-port={p['kube-scheduler']}",
                f"--cert-dir={pki / 'kube-scheduler-serving'}",
                "--leader-elect=false",
                "--profiling=false",
            ]
        if name == "kwok":
            return [
                f"--kubeconfig={self.kubeconfig_cert}",
                f"--config={w / 'kwok' / 'stages.yaml'}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}={KWOK_NODE_ANNOTATION_VALUE}",
                f"--node-lease-duration-seconds={KWOK_NODE_LEASE_SECONDS}",
                f"--cidr={POD_CIDR}",
                f"--server-address={LOOPBACK}:{p['kwok']}",
            ]
        if name == OPERATOR:
            return [
                f"--kubeconfig={self.kubeconfig_token}",
                "--leader-elect=false",
                "--metrics-bind-address=0",
                f"--health-probe-bind-address={LOOPBACK}:{p[OPERATOR]}",
            ]
        raise ValueError(name)

    def _binary(self, name: str) -> Path:
        if name == OPERATOR and self.nvidia_operator:
            return self.nvidia_operator
        return self.bindir / name

    def _spawn(self, name: str) -> _Process:
        proc = self._launch(name)
        self._procs.append(proc)
        self._record_pids()
        return proc

    def _launch(self, name: str) -> _Process:
        """Start one component (not recorded yet): its binary with ``_args(name)``, output to its log."""
        binary = str(self._binary(name))
        argv = [binary, *self._args(name)]
        log = (self.logdir / f"{name}.log").open("ab")
        log.write(f"=== {datetime.datetime.now().isoformat()} {' '.join(argv)}\n".encode())
        log.flush()
        env = dict(os.environ)
        # kwok would also read ~/.kwok/kwok.yaml; keep it to this work directory.
        env["KWOK_WORKDIR"] = str(self.workdir / "kwok")
        if name == OPERATOR:  # run from outside the cluster: no webhook server, its config namespace by name
            env.update(OPERATOR_NAMESPACE=self.operator_namespace, ENABLE_WEBHOOKS="false")
        popen = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.workdir,
            env=env,
            start_new_session=True,
        )
        return _Process(name=name, binary=binary, pid=popen.pid, popen=popen, log=log)

    def _health_check(self, name: str) -> tuple[str, Callable[[], bool]]:
        """(what, check) of the health endpoint that says ``name`` is ready: /readyz of kube-apiserver,
        /health of etcd, /healthz of the others."""
        p = self.ports
        if name == "etcd":
            url = f"http://{LOOPBACK}:{p['etcd']}/health"
            return "/health", lambda: _ok(_http_get(url))
        if name == "kube-apiserver":
            return "/readyz", self._apiserver_ready
        if name in ("kube-controller-manager", "kube-scheduler"):
            url, insecure = f"https://{LOOPBACK}:{p[name]}/healthz", _insecure_context()
            return "/healthz", lambda: _ok(_http_get(url, context=insecure))
        if name == "kwok":
            url = f"http://{LOOPBACK}:{p['kwok']}/healthz"
            return "/healthz", lambda: _ok(_http_get(url))
        if name == OPERATOR:
            url = f"http://{LOOPBACK}:{p[OPERATOR]}/readyz"
            return "/readyz", lambda: _ok(_http_get(url))
        raise ValueError(name)

    def _wait_healthy(self, name: str, deadline: float, restarted_at: float | None = None) -> None:
        what, check = self._health_check(name)
        self._wait(name, what, deadline, check, restarted_at)

    def _start_all(self, deadline: float) -> None:
        self._spawn("etcd")
        self._wait_healthy("etcd", deadline)
        self._spawn("kube-apiserver")
        self._wait_healthy("kube-apiserver", deadline)
        for name in ("kube-controller-manager", "kube-scheduler", "kwok"):
            self._spawn(name)
        for name in ("kube-controller-manager", "kube-scheduler", "kwok"):
            self._wait_healthy(name, deadline)
        # The ServiceAccount admission plugin rejects pods until the controller-manager made it.
        sa_url = f"{self.server}/api/v1/namespaces/default/serviceaccounts/default"
        self._wait(
            "kube-controller-manager", "the default ServiceAccount", deadline, lambda: _ok(self._api_get(sa_url))
        )
        if self.nvidia_operator:
            self._start_operator(deadline)

    def start_nvidia_operator(self, binary: str | os.PathLike[str], *, timeout: float = 120.0) -> None:
        """Run the NVIDIA Maintenance Operator on a started control plane (as ``nvidia_operator`` does at start),
        for a benchmark that compares the engines on the same cluster."""
        with self._lock:
            if self.nvidia_operator:
                raise ClusterError(f"the NVIDIA Maintenance Operator already runs here ({self.nvidia_operator})")
            self.nvidia_operator = Path(binary).resolve()
            self.ports[OPERATOR] = free_ports(1)[0]
        self._start_operator(time.monotonic() + timeout)

    def _start_operator(self, deadline: float) -> None:
        self._install_maintenance_crds()
        self._spawn(OPERATOR)
        self._wait_healthy(OPERATOR, deadline)

    def _kubectl(self, *args: str, stdin: str | None = None) -> str:
        cmd = [str(self.bindir / "kubectl"), f"--kubeconfig={self.kubeconfig_token}", *args]
        done = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            raise ClusterError(f"kubectl {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
        return done.stdout

    def _install_maintenance_crds(self) -> None:
        """The operator's CRDs (the collection's, schema-compatible) and its namespace, before it starts: it
        watches these kinds from its first moment."""
        files = [f"--filename={path}" for path in MAINTENANCE_CRDS]
        self._kubectl("apply", "--server-side", "--force-conflicts", *files)
        self._kubectl("wait", "--for=condition=Established", "--timeout=60s", *files)
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.operator_namespace}}
        self._kubectl("apply", "--server-side", "--filename=-", stdin=json.dumps(namespace))

    def _api_get(self, url: str) -> tuple[int, bytes] | None:
        return _http_get(url, token=self.token, context=ssl.create_default_context(cafile=str(self.ca_file)))

    def _apiserver_ready(self) -> bool:
        return bool(self.server) and _ok(self._api_get(f"{self.server}/readyz"))

    def _wait(
        self,
        component: str,
        what: str,
        deadline: float,
        check: Callable[[], bool],
        restarted_at: float | None = None,
    ) -> None:
        """Poll ``check`` until it is true; fail if a started process dies or the deadline passes.

        ``component`` names the log whose tail explains a timeout. The time it took goes to ``timings``: since
        start() began, or for a restart (``restarted_at``) since the restart, under "<component> <what> restart".
        """
        while True:
            for proc in self._procs:
                if not proc.running():
                    code = proc.popen.returncode if proc.popen is not None else "?"
                    raise ClusterError(
                        f"{proc.name} exited (code {code}) while waiting for {component} {what}; "
                        f"tail of {self.logdir / (proc.name + '.log')}:\n{self.log_tail(proc.name)}"
                    )
            if check():
                if restarted_at is None:
                    self.timings[f"{component} {what}"] = round(time.monotonic() - self._began, 2)
                else:
                    self.timings[f"{component} {what} restart"] = round(time.monotonic() - restarted_at, 2)
                return
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"timed out waiting for {component} {what}; "
                    f"tail of {self.logdir / (component + '.log')}:\n{self.log_tail(component)}"
                )
            time.sleep(POLL_INTERVAL)

    # ------------------------------------------------------------------ exit handling

    def _register_cleanup(self) -> None:
        if self._cleanup_registered:
            return
        atexit.register(self._stop_at_exit)
        if threading.current_thread() is threading.main_thread():
            self._previous_sigterm = signal.getsignal(signal.SIGTERM)
            signal.signal(signal.SIGTERM, self._on_sigterm)
        self._cleanup_registered = True

    def _unregister_cleanup(self) -> None:
        if not self._cleanup_registered:
            return
        atexit.unregister(self._stop_at_exit)
        if (
            threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGTERM) == self._on_sigterm
        ):
            signal.signal(signal.SIGTERM, self._previous_sigterm or signal.SIG_DFL)
        self._cleanup_registered = False

    def _stop_at_exit(self) -> None:
        self.stop(timeout=5.0)

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        previous = self._previous_sigterm
        self.stop(timeout=5.0)
        if callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)


def _ok(result: tuple[int, bytes] | None) -> bool:
    return result is not None and result[0] == 200


# --------------------------------------------------------------------------- CLI


def _default_workdir() -> Path:
    return Path(os.environ.get("NODEOPS_CLUSTER_DIR") or DEFAULT_WORKDIR)


def _build_bindir() -> Path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from build import build

    return build()


def _build_operator() -> Path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from nvidia_operator import build

    return build()


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("up", "down", "status"))
    parser.add_argument("--workdir", type=Path, default=_default_workdir(), help="default: $NODEOPS_CLUSTER_DIR")
    parser.add_argument("--bindir", type=Path, help="use these binaries instead of running build.py")
    parser.add_argument("--timeout", type=float, default=120.0, help="startup deadline in seconds")
    parser.add_argument(
        "--nvidia-operator",
        action="store_true",
        help="also run the NVIDIA Maintenance Operator, built from $NODEOPS_NVIDIA_OPERATOR_SRC (nvidia_operator.py)",
    )
    args = parser.parse_args(list(argv) if argv is not None else None)
    workdir: Path = args.workdir.resolve()

    if args.command == "up":
        bindir = args.bindir or _build_bindir()
        operator = _build_operator() if args.nvidia_operator else None
        cluster = Cluster(workdir, bindir, nvidia_operator=operator).start(timeout=args.timeout, stop_on_exit=False)
        print(f"[cluster] Kubernetes {cluster.k8s_version} ready at {cluster.server} in {cluster.startup_seconds:.1f}s")
        print(f"[cluster] logs: {cluster.logdir}; stop with: make cluster-down (python {__file__} down)")
        print(f"[cluster] kubectl: {cluster.bindir / 'kubectl'}")
        print(f"[cluster] kubeconfig: {cluster.kubeconfig}")
        print(f"export KUBECONFIG={cluster.kubeconfig}")
        return 0
    if args.command == "down":
        stopped = stop_recorded(workdir)
        print(f"[cluster] stopped: {', '.join(stopped) if stopped else 'nothing was running'}")
        return 0
    # status
    try:
        cluster = Cluster.attach(workdir)
    except ClusterError as err:
        print(f"[cluster] {err}")
        return 1
    states = cluster.status()
    for name, running in states.items():
        print(f"{name:24} {'running' if running else 'NOT running'}")
    ready = cluster.ready()
    print(f"{'readyz':24} {'ok' if ready else 'NOT ready'} ({cluster.server})")
    print(f"export KUBECONFIG={cluster.kubeconfig}")
    return 0 if ready and all(states.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
