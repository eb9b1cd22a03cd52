# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one place that talks to the Kubernetes API.

Connection settings are resolved the way kubernetes.core does (same option names, same
``K8S_AUTH_*`` environment variables, same precedence). Static credentials (in the options, in a
kubeconfig, a pod's service account) are read by kubeconfig.py without importing the official
``kubernetes`` package; its loaders still read the rest (exec plugins, auth-provider refresh,
persist_config). Requests then go out as plain
JSON over one urllib3 pool: objects stay ``dict``s (no generated models, which cost 30-80x
``json.loads`` on big lists), the behaviour is the same on every client version, and the pool
size can match the number of parallel calls. Every third-party import happens on first use,
so a module's start-up stays small and a missing library is reported, not raised.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import ssl
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from . import kubeconfig
from .errors import (
    ConfigError,
    Conflict,
    Forbidden,
    Invalid,
    K8sError,
    MissingResourceType,
    NotFound,
    TooManyRequests,
    UIDMismatch,
    Unauthorized,
    Unreachable,
)

# Connection options: kubernetes.core's names, aliases and environment variables.
AUTH_ARG_SPEC: dict[str, dict[str, Any]] = {
    "kubeconfig": {"type": "raw", "env": "K8S_AUTH_KUBECONFIG"},
    "context": {"type": "str", "env": "K8S_AUTH_CONTEXT"},
    "host": {"type": "str", "env": "K8S_AUTH_HOST"},
    "api_key": {"type": "str", "no_log": True, "env": "K8S_AUTH_API_KEY"},
    "username": {"type": "str", "env": "K8S_AUTH_USERNAME"},
    "password": {"type": "str", "no_log": True, "env": "K8S_AUTH_PASSWORD"},
    "validate_certs": {"type": "bool", "aliases": ["verify_ssl"], "env": "K8S_AUTH_VERIFY_SSL"},
    "ca_cert": {"type": "path", "aliases": ["ssl_ca_cert"], "env": "K8S_AUTH_SSL_CA_CERT"},
    "client_cert": {"type": "path", "aliases": ["cert_file"], "env": "K8S_AUTH_CERT_FILE"},
    "client_key": {"type": "path", "aliases": ["key_file"], "no_log": False, "env": "K8S_AUTH_KEY_FILE"},
    "proxy": {"type": "str", "env": "K8S_AUTH_PROXY"},
    "no_proxy": {"type": "str", "env": "K8S_AUTH_NO_PROXY"},
    "proxy_headers": {
        "type": "dict",
        "options": {
            "proxy_basic_auth": {"type": "str", "no_log": True},
            "basic_auth": {"type": "str", "no_log": True},
            "user_agent": {"type": "str"},
        },
        "env": None,
    },
    "impersonate_user": {"type": "str", "env": "K8S_AUTH_IMPERSONATE_USER"},
    "impersonate_groups": {"type": "list", "elements": "str", "env": "K8S_AUTH_IMPERSONATE_GROUPS"},
    "persist_config": {"type": "bool", "env": "K8S_AUTH_PERSIST_CONFIG"},
}

# How the API server words a failed UID precondition: the storage layer ("Precondition failed: UID in
# precondition: ...") and the eviction subresource ("the UID in the precondition (...) does not match").
_UID_PRECONDITION = re.compile(r"UID in (the )?precondition", re.IGNORECASE)

JSON = "application/json"
#: What a GET asks for to get an object's metadata alone (or, from a server or proxy that cannot, the object).
PARTIAL_METADATA = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"

#: Answers a later attempt may not get: the API server restarting, overloaded or behind a failing proxy.
TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})
#: Without an operation's own deadline (Client.retrying_until), transient failures are retried this long.
DEFAULT_RETRY_SECONDS = 20.0
RETRY_FIRST_DELAY = 0.2
RETRY_MAX_DELAY = 2.0

#: Where load_configuration keeps the impersonation settings on the client's Configuration.
IMPERSONATE_ATTRIBUTE = "nodeops_impersonate"

_TRUE = {"1", "true", "yes", "on", "y", "t"}
_FALSE = {"0", "false", "no", "off", "n", "f"}


@dataclass(frozen=True)
class Resource:
    """Where a kind lives in the API: enough to build its URLs without discovery."""

    api_version: str
    plural: str
    namespaced: bool
    kind: str = ""

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        base = "/api/" + self.api_version if "/" not in self.api_version else "/apis/" + self.api_version
        if self.namespaced and namespace:
            base += "/namespaces/" + quote(namespace, safe="")
        base += "/" + self.plural
        if name is not None:
            base += "/" + quote(name, safe="")
        if subresource:
            base += "/" + subresource
        return base


NODES = Resource("v1", "nodes", namespaced=False, kind="Node")
PODS = Resource("v1", "pods", namespaced=True, kind="Pod")
NAMESPACES = Resource("v1", "namespaces", namespaced=False, kind="Namespace")
CONFIGMAPS = Resource("v1", "configmaps", namespaced=True, kind="ConfigMap")
EVENTS = Resource("v1", "events", namespaced=True, kind="Event")
CRDS = Resource(
    "apiextensions.k8s.io/v1", "customresourcedefinitions", namespaced=False, kind="CustomResourceDefinition"
)
NODE_MAINTENANCES = Resource(
    "maintenance.nvidia.com/v1alpha1", "nodemaintenances", namespaced=True, kind="NodeMaintenance"
)
MAINTENANCE_CONFIGS = Resource(
    "maintenance.nvidia.com/v1alpha1", "maintenanceoperatorconfigs", namespaced=True, kind="MaintenanceOperatorConfig"
)
DAEMONSETS = Resource("apps/v1", "daemonsets", namespaced=True, kind="DaemonSet")
PDBS = Resource("policy/v1", "poddisruptionbudgets", namespaced=True, kind="PodDisruptionBudget")
LEASES = Resource("coordination.k8s.io/v1", "leases", namespaced=True, kind="Lease")
VOLUME_ATTACHMENTS = Resource("storage.k8s.io/v1", "volumeattachments", namespaced=False, kind="VolumeAttachment")
NODE_HEALTH_CHECKS = Resource(
    "remediation.medik8s.io/v1alpha1", "nodehealthchecks", namespaced=False, kind="NodeHealthCheck"
)
_SNR = "self-node-remediation.medik8s.io/v1alpha1"
SELF_NODE_REMEDIATIONS = Resource(_SNR, "selfnoderemediations", namespaced=True, kind="SelfNodeRemediation")
SELF_NODE_REMEDIATION_TEMPLATES = Resource(
    _SNR, "selfnoderemediationtemplates", namespaced=True, kind="SelfNodeRemediationTemplate"
)
SELF_NODE_REMEDIATION_CONFIGS = Resource(
    _SNR, "selfnoderemediationconfigs", namespaced=True, kind="SelfNodeRemediationConfig"
)
KNOWN_RESOURCES = {
    (r.api_version, r.kind): r
    for r in (
        NODES,
        PODS,
        NAMESPACES,
        EVENTS,
        CRDS,
        NODE_MAINTENANCES,
        MAINTENANCE_CONFIGS,
        DAEMONSETS,
        PDBS,
        LEASES,
        VOLUME_ATTACHMENTS,
        NODE_HEALTH_CHECKS,
        SELF_NODE_REMEDIATIONS,
        SELF_NODE_REMEDIATION_TEMPLATES,
        SELF_NODE_REMEDIATION_CONFIGS,
    )
}


def auth_params_from_env(params: dict[str, Any], environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Fill connection options the task left unset from their ``K8S_AUTH_*`` variables."""
    env: Mapping[str, str] = os.environ if environ is None else environ
    out = dict(params)
    for name, spec in AUTH_ARG_SPEC.items():
        if out.get(name) is not None:
            continue
        raw = env.get(spec["env"]) if spec["env"] else None
        if raw is None or raw == "":
            continue
        if spec["type"] == "list":
            out[name] = [item.strip() for item in raw.split(",") if item.strip()]
        elif spec["type"] == "bool":
            low = raw.strip().lower()
            if low not in _TRUE | _FALSE:
                raise ConfigError(f"{spec['env']}={raw!r} is not a boolean; use true or false.")
            out[name] = low in _TRUE
        elif spec["type"] == "path":
            out[name] = os.path.expanduser(raw)
        else:
            out[name] = raw
    return out


def _source(p: Mapping[str, Any]) -> str:
    """Where the connection comes from: ``options`` (host and credentials only), ``dict`` (an inline
    kubeconfig), ``files`` (the kubeconfig option or KUBECONFIG, with a context), ``in_cluster`` (a pod's
    service account), ``default`` (KUBECONFIG or ~/.kube/config if there is one, else the options)."""
    has_creds = p.get("api_key") or (p.get("username") and p.get("password")) or p.get("client_cert")
    if p.get("host") and has_creds and not (p.get("kubeconfig") or p.get("context")):
        return "options"
    if isinstance(p.get("kubeconfig"), dict):
        return "dict"
    if p.get("kubeconfig") or p.get("context"):
        return "files"
    if os.environ.get("KUBERNETES_SERVICE_HOST") and not os.environ.get("KUBECONFIG"):
        return "in_cluster"
    return "default"


def _quick_configuration(p: Mapping[str, Any], source: str, path: str | None) -> Any:
    """The configuration read without the ``kubernetes`` package (``kubeconfig.StaticConfiguration``), or None
    when it needs the official loader: an exec or auth-provider user, persist_config, anything unusual."""
    # persist_config: tokens an auth provider refreshes are written back to the kubeconfig file; the official
    # loader keeps that whole business (an inline kubeconfig and a service account have no file to write)
    persist = bool(p.get("persist_config")) and source in ("files", "default")
    try:
        if source == "options":
            return kubeconfig.StaticConfiguration()
        if source == "dict":
            return kubeconfig.from_dict(p["kubeconfig"], p.get("context"))
        if source == "in_cluster":
            return kubeconfig.in_cluster()
        if persist:
            return None
        return kubeconfig.from_files(path or kubeconfig.default_location(), p.get("context"))
    except kubeconfig.Unsupported:
        return None


def _official_configuration(p: Mapping[str, Any], source: str, path: str | None) -> Any:
    """``kubernetes.client.Configuration`` from the official loaders (exec plugins, auth-provider refresh,
    persist_config); their ConfigException as kubeconfig.KubeconfigError."""
    try:
        from kubernetes import client as k8s_client
        from kubernetes import config as k8s_config
        from kubernetes.config.config_exception import ConfigException
    except ImportError as exc:  # reported by the module layer with missing_required_lib
        raise ImportError(str(exc)) from exc

    cfg = k8s_client.Configuration()
    persist = bool(p.get("persist_config"))
    try:
        if source == "dict":
            k8s_config.load_kube_config_from_dict(
                config_dict=p["kubeconfig"], context=p.get("context"), client_configuration=cfg, persist_config=False
            )  # an inline kubeconfig has no file to write refreshed tokens to
        elif source == "files":
            k8s_config.load_kube_config(
                config_file=path, context=p.get("context"), client_configuration=cfg, persist_config=persist
            )
        elif source == "in_cluster":
            k8s_config.load_incluster_config(client_configuration=cfg)
        elif source == "default":
            try:
                k8s_config.load_kube_config(client_configuration=cfg, persist_config=persist)
            except OSError as exc:
                raise kubeconfig.KubeconfigError(str(exc)) from exc
    except ConfigException as exc:
        raise kubeconfig.KubeconfigError(str(exc)) from exc
    return cfg


def load_configuration(params: dict[str, Any]) -> Any:
    """The client's configuration from resolved connection options: a ``kubernetes.client.Configuration`` from
    the official loaders where their work is needed, else a ``kubeconfig.StaticConfiguration`` with the same
    attributes, read without importing the ``kubernetes`` package (see kubeconfig.py)."""
    p = params
    source = _source(p)
    path = None
    if source == "files" and p.get("kubeconfig"):
        path = os.path.expanduser(p["kubeconfig"])
        if not os.path.exists(path):
            raise ConfigError(f"kubeconfig file {path} does not exist; set kubeconfig to an existing file.")
    try:
        cfg = _quick_configuration(p, source, path)
        if cfg is None:
            cfg = _official_configuration(p, source, path)
    except kubeconfig.KubeconfigError as exc:
        if source != "default" or (not p.get("host") and kubeconfig.default_files()):
            raise ConfigError(f"Cannot load the Kubernetes configuration: {exc}") from exc
        if not p.get("host"):
            raise ConfigError(
                "No Kubernetes connection configured: set kubeconfig (or K8S_AUTH_KUBECONFIG / KUBECONFIG), "
                "or host with api_key, username/password or client_cert/client_key."
            ) from None
        cfg = kubeconfig.StaticConfiguration()  # the default kubeconfig is unusable: the options alone

    if p.get("host"):
        cfg.host = p["host"].rstrip("/")
    if p.get("api_key"):
        # Replace whatever the kubeconfig set (its token and its refresh hook), under both the
        # old ("authorization") and the new ("BearerToken") key of the client's Configuration.
        bearer = "Bearer " + p["api_key"]
        cfg.api_key = {"authorization": bearer, "BearerToken": bearer}
        cfg.api_key_prefix = {}
        cfg.refresh_api_key_hook = None
    if p.get("username"):
        cfg.username = p["username"]
    if p.get("password"):
        cfg.password = p["password"]
    if p.get("ca_cert"):
        cfg.ssl_ca_cert = p["ca_cert"]
    if p.get("client_cert"):
        cfg.cert_file = p["client_cert"]
    if p.get("client_key"):
        cfg.key_file = p["client_key"]
    if p.get("validate_certs") is not None:
        cfg.verify_ssl = p["validate_certs"]
    if p.get("proxy"):
        cfg.proxy = p["proxy"]
    if p.get("no_proxy"):
        cfg.no_proxy = p["no_proxy"]
    headers = {k: v for k, v in (p.get("proxy_headers") or {}).items() if v}
    if headers:
        import urllib3

        cfg.proxy_headers = urllib3.make_headers(**headers)
    # impersonation (Impersonate-User / Impersonate-Group headers): kept beside the client's configuration
    impersonate = (str(p.get("impersonate_user") or ""), [str(g) for g in p.get("impersonate_groups") or []])
    if impersonate[1] and not impersonate[0]:
        raise ConfigError("impersonate_groups needs impersonate_user: the API server impersonates a user.")
    setattr(cfg, IMPERSONATE_ATTRIBUTE, impersonate)
    for option, path in (("ca_cert", cfg.ssl_ca_cert), ("client_cert", cfg.cert_file), ("client_key", cfg.key_file)):
        if path and not os.path.exists(path):
            raise ConfigError(f"{option} file {path} does not exist.")
    if not cfg.host:
        raise ConfigError("No API server address: set host, or a kubeconfig with a cluster server.")
    return cfg


def _bypasses_proxy(host_url: str, no_proxy: str | None) -> bool:
    """Whether the API server at ``host_url`` is reached directly: its host matches ``no_proxy`` (comma-separated
    host names, which match their subdomains too, domain suffixes such as ``.example.com``, IP addresses, each
    with an optional ``:port``, or ``*``), as the NO_PROXY convention has them."""
    if not no_proxy:
        return False
    parts = urlsplit(host_url)
    host, port = (parts.hostname or "").lower(), parts.port
    for raw in no_proxy.split(","):
        entry = raw.strip().lower()
        if entry == "*":
            return True
        name, wanted_port = entry, ""
        if entry.count(":") == 1:  # host:port (an IPv6 address has more colons)
            name, wanted_port = entry.split(":")
        name = name.strip("[]").lstrip(".")
        if not name or (wanted_port and port is not None and wanted_port != str(port)):
            continue
        if host == name or host.endswith("." + name):
            return True
    return False


def within_deadline(client: Any, until: float) -> contextlib.AbstractContextManager[None]:
    """``client.retrying_until(until)`` where the client has it (a test's fake may not)."""
    within = getattr(client, "retrying_until", None)
    return within(until) if within is not None else contextlib.nullcontext()


def retrying_for(client: Any, seconds: float | None) -> contextlib.AbstractContextManager[None]:
    """``client.retrying_for(seconds)`` where the client has it (a test's fake may not)."""
    within = getattr(client, "retrying_for", None)
    return within(seconds) if within is not None else contextlib.nullcontext()


def is_transient(exc: Exception) -> bool:
    """A failure after which the request may or may not have taken effect, and a later attempt may get an
    answer: no connection, a reset or a timeout, 5xx, 429 from API Priority and Fairness."""
    if isinstance(exc, Unreachable):
        return exc.transient
    return isinstance(exc, K8sError) and exc.status in TRANSIENT_STATUS


class Client:
    """JSON calls to one API server, sharing one connection pool.

    Construct with :meth:`from_params`; tests may pass a ready ``Configuration``. Every method
    may be called from several threads at once (urllib3's pool is thread safe); ``pool_size``
    is the number of connections kept open and the number of calls in flight at once, so make
    it at least the number of threads (plus one per open watch).
    """

    def __init__(self, configuration: Any, pool_size: int = 10, timeout: float = 30.0) -> None:
        import urllib3

        self.configuration = configuration
        self.host = configuration.host.rstrip("/")
        self.timeout = timeout
        self.pool_size = pool_size
        self._auth_lock = threading.Lock()
        self._retry = threading.local()  # .until: this thread's operation's deadline (time.monotonic())
        self.retry_seconds = DEFAULT_RETRY_SECONDS
        self.retried = 0  # transient failures retried, all threads
        tls: dict[str, Any] = {
            "maxsize": pool_size,
            "block": True,
            "cert_reqs": "CERT_REQUIRED" if configuration.verify_ssl else "CERT_NONE",
            "ca_certs": configuration.ssl_ca_cert,
            "cert_file": configuration.cert_file,
            "key_file": configuration.key_file,
            "retries": False,
        }
        if configuration.assert_hostname is not None:
            tls["assert_hostname"] = configuration.assert_hostname
        if getattr(configuration, "tls_server_name", None):  # a kubeconfig cluster's tls-server-name
            tls["server_hostname"] = configuration.tls_server_name  # sent as SNI, and the certificate must match it
        if not configuration.verify_ssl:
            urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
        self._pool: Any
        if configuration.proxy and not _bypasses_proxy(self.host, getattr(configuration, "no_proxy", None)):
            proxy_headers = getattr(configuration, "proxy_headers", None) or None
            self._pool = urllib3.ProxyManager(configuration.proxy, proxy_headers=proxy_headers, **tls)
        else:
            self._pool = urllib3.PoolManager(**tls)
        self._impersonate: tuple[str, list[str]] = getattr(configuration, IMPERSONATE_ATTRIBUTE, ("", []))

    @classmethod
    def from_params(cls, params: dict[str, Any], pool_size: int = 10) -> Client:
        return cls(load_configuration(auth_params_from_env(params)), pool_size=pool_size)

    # -- low level -------------------------------------------------------------------------
    def _headers(self, content_type: str | None, accept: str = JSON) -> Any:
        from urllib3._collections import HTTPHeaderDict  # where urllib3 1.26 and 2.x both have it

        headers = HTTPHeaderDict({"Accept": accept, "User-Agent": "nodeops.maintenance"})
        user, groups = self._impersonate
        if user:
            headers["Impersonate-User"] = user
            for group in groups:  # one header line each, as the API server reads them
                headers.add("Impersonate-Group", group)
        if content_type:
            headers["Content-Type"] = content_type
        cfg = self.configuration
        with self._auth_lock:  # a token refresh hook is not meant to run twice at once
            settings = cfg.auth_settings()
        for setting in settings.values():  # calls the exec/refresh hook when there is one
            if setting.get("in") == "header" and setting.get("value"):
                headers[setting["key"]] = setting["value"]
        if cfg.username and cfg.password and "authorization" not in {k.lower() for k in headers}:
            import base64

            token = base64.b64encode(f"{cfg.username}:{cfg.password}".encode()).decode()
            headers["Authorization"] = "Basic " + token
        return headers

    @contextlib.contextmanager
    def retrying_until(self, until: float | None) -> Iterator[None]:
        """Within the block, this thread's calls retry transient failures until ``until`` (``time.monotonic()``;
        None: the default window of ``retry_seconds`` from each call) and no longer: the deadline of the
        operation they serve (a drain's, a wave's, a Lease's time)."""
        before = getattr(self._retry, "until", None)
        if before is not None and until is not None:
            until = min(before, until)  # an inner deadline never outlasts the one around it
        self._retry.until = until
        try:
            yield
        finally:
            self._retry.until = before

    @contextlib.contextmanager
    def retrying_for(self, seconds: float | None) -> Iterator[None]:
        """Within the block, each of this thread's calls that has no deadline of its operation (see
        :meth:`retrying_until`) retries transient failures for ``seconds`` from its own start (None: the default
        ``retry_seconds``): a window per call, so that no call of a long step is left without one."""
        before = getattr(self._retry, "window", None)
        self._retry.window = seconds
        try:
            yield
        finally:
            self._retry.window = before

    def request(
        self,
        method: str,
        path: str,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        what: str = "",
        retry_429: bool = True,
        accept: str = JSON,
    ) -> Any:
        """Send one request and return the decoded JSON body; raise a specific K8sError on failure.

        A transient failure (no connection, a reset or a timeout, 5xx, 429 from API Priority and Fairness) is
        tried again with a growing pause (``Retry-After`` honoured) while the operation's deadline allows
        (:meth:`retrying_until`); then it is raised. Retrying is safe for the collection's calls: writes carry
        a resourceVersion or a UID precondition, or are creations by name, so a repeat of a call whose answer
        was lost meets its effect (a Conflict, a NotFound) instead of doing it twice. A creation with
        ``generateName`` is the exception: its caller sends it with no retry (``retrying_until(now)``) and
        reads again after a transient failure. ``retry_429`` False leaves a 429
        to the caller (an eviction's, which is a PodDisruptionBudget's answer, not the server's load).
        """
        until = getattr(self._retry, "until", None)
        window = getattr(self._retry, "window", None)
        deadline = time.monotonic() + (self.retry_seconds if window is None else window) if until is None else until
        attempt = 0
        maybe_applied = False  # an earlier attempt may have reached the server and taken effect, unanswered
        while True:
            retry_after = 0.0
            try:
                resp = self._send(
                    method, path, query, body, content_type, read_timeout=self.timeout, stream=False, accept=accept
                )
            except Unreachable as exc:
                if not exc.transient:
                    raise
                failure: K8sError = exc
                maybe_applied = maybe_applied or exc.sent
            else:
                text = resp.data.decode("utf-8", "replace") if resp.data else ""
                if 200 <= resp.status < 300:
                    return json.loads(text) if text else {}
                failure = self._error(resp.status, text, method, path, what)
                failure.after_lost_answer = maybe_applied
                if resp.status not in TRANSIENT_STATUS or (resp.status == 429 and not retry_429):
                    raise failure
                # a 500, 502 or 504 may come after the write was done (429 and 503 are refusals before it)
                maybe_applied = maybe_applied or resp.status in (500, 502, 504)
                retry_after = _seconds(resp.headers.get("Retry-After"))
            delay = max(retry_after, min(RETRY_MAX_DELAY, RETRY_FIRST_DELAY * 2**attempt))
            if time.monotonic() + delay > deadline:
                raise failure
            attempt += 1
            self.retried += 1
            time.sleep(delay)

    def _send(
        self,
        method: str,
        path: str,
        query: dict[str, Any] | None,
        body: Any,
        content_type: str,
        read_timeout: float,
        stream: bool,
        accept: str = JSON,
    ) -> Any:
        import urllib3

        url = self.host + path
        if query:
            url += "?" + urlencode({k: v for k, v in query.items() if v is not None})
        data = None if body is None else json.dumps(body).encode()
        try:
            return self._pool.request(
                method,
                url,
                body=data,
                headers=self._headers(content_type if data is not None else None, accept),
                timeout=urllib3.Timeout(connect=min(10.0, self.timeout), read=read_timeout),
                preload_content=not stream,
            )
        except urllib3.exceptions.SSLError as exc:
            cause = exc.args[0] if exc.args else None
            if isinstance(cause, (ssl.SSLEOFError, ssl.SSLZeroReturnError, ssl.SSLSyscallError)):
                # the connection ended during the handshake (a server going down or starting): no answer yet
                raise Unreachable(
                    f"Cannot reach the Kubernetes API at {self.host}: the connection ended during TLS ({exc}).",
                    transient=True,
                    sent=False,
                ) from exc
            raise Unreachable(
                f"TLS with the API server at {self.host} failed: {exc}. Set ca_cert to the cluster's CA "
                "(or validate_certs: false for a test cluster)."
            ) from exc
        except urllib3.exceptions.HTTPError as exc:
            raise Unreachable(
                f"Cannot reach the Kubernetes API at {self.host}: {exc}. Check host / kubeconfig and that "
                "the API server is running and reachable from this machine.",
                transient=True,
                # no connection at all (refused, not resolved, connect timeout): the request never left
                sent=not isinstance(exc, urllib3.exceptions.ConnectTimeoutError),
            ) from exc

    def _error(self, status: int, text: str, method: str, path: str, what: str) -> K8sError:
        try:
            body = json.loads(text) if text else {}
        except ValueError:
            body = {"message": text}
        message = body.get("message") or text or f"HTTP {status}"
        target = what or f"{method} {path}"
        if status == 401:
            return Unauthorized(
                f"The API server at {self.host} rejected the credentials (401 Unauthorized) for {target}: "
                "the token, client certificate or username/password is wrong or expired.",
                status,
                body,
            )
        if status == 403:
            return Forbidden(
                f"Forbidden (403) for {target}: {message}. Grant the user RBAC permission for it.", status, body
            )
        if status == 404:
            # A missing object always names itself in details; a path the server does not serve at
            # all gets a Status without a name (known group) or plain "404 page not found" text.
            if not (body.get("details") or {}).get("name"):
                return MissingResourceType(
                    f"The API server does not serve {path.split('?')[0]} ({target}): the resource type is not "
                    "installed. For NodeMaintenance objects install the CRDs with the nodeops.maintenance.crds "
                    "role (playbooks/install.yml).",
                    status,
                    body,
                )
            return NotFound(f"Not found: {target}: {message}", status, body)
        if status == 409:
            if _UID_PRECONDITION.search(message):
                return UIDMismatch(
                    f"Replaced: {target}: the object of that name is not the one the call was decided on "
                    f"(deleted and re-created; it was not touched): {message}",
                    status,
                    body,
                )
            return Conflict(f"Conflict for {target}: {message}", status, body)
        if status == 422:
            return Invalid(f"The API server rejected {target} as invalid: {message}", status, body)
        if status == 429:
            return TooManyRequests(f"Too many requests for {target}: {message}", status, body)
        return K8sError(f"{target} failed with HTTP {status}: {message}", status, body)

    # -- objects ---------------------------------------------------------------------------
    def get(self, res: Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        return self.request("GET", res.path(namespace, name), what=f"get {res.kind or res.plural} {name}")

    def get_metadata(self, res: Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        """The object's metadata alone (a ``PartialObjectMetadata``: its labels, annotations, resourceVersion), which
        the API server sends without the rest of the object: a cheap look at a large one, such as a run's record.
        A server that cannot send it sends the whole object; read ``metadata`` of either."""
        return self.request(
            "GET", res.path(namespace, name), what=f"get {res.kind or res.plural} {name}", accept=PARTIAL_METADATA
        )

    def list(
        self,
        res: Resource,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> dict[str, Any]:
        """List objects, following ``continue`` tokens; returns a List with all items."""
        items: list[dict[str, Any]] = []
        query: dict[str, Any] = {"labelSelector": label_selector, "fieldSelector": field_selector, "limit": 500}
        while True:
            page = self.request("GET", res.path(namespace), query=query, what=f"list {res.plural}")
            items.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                page["items"] = items
                return page
            query["continue"] = token

    def create(self, res: Resource, body: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
        name = (body.get("metadata") or {}).get("name", "")
        return self.request("POST", res.path(namespace), body=body, what=f"create {res.kind or res.plural} {name}")

    def replace(self, res: Resource, body: dict[str, Any], subresource: str | None = None) -> dict[str, Any]:
        """PUT the whole object (or its ``status`` subresource).

        Conditional: the body's ``metadata.resourceVersion`` must still be current, else Conflict is
        raised and the caller reads again and decides again.
        """
        meta = body.get("metadata") or {}
        what = f"update {res.kind or res.plural} {meta.get('name', '')}" + (f" {subresource}" if subresource else "")
        return self.request("PUT", res.path(meta.get("namespace"), meta["name"], subresource), body=body, what=what)

    def create_event(
        self,
        involved: dict[str, Any],
        reason: str,
        message: str,
        event_type: str = "Normal",
        component: str = "nodeops-maintenance",
        now: str | None = None,
    ) -> dict[str, Any]:
        """Record a core/v1 Event about ``involved`` (a full object: apiVersion, kind, metadata).

        Events of cluster-scoped objects go to the ``default`` namespace, as kubectl and controllers do.
        ``now`` is an RFC 3339 time; by default the current UTC time.
        """
        import uuid

        from ..core.node.rfc3339 import format_time

        meta = involved.get("metadata") or {}
        namespace = meta.get("namespace") or "default"
        stamp = now or format_time(time.time())
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{meta.get('name', 'object')}.{uuid.uuid4().hex[:16]}", "namespace": namespace},
            "involvedObject": {
                "apiVersion": involved.get("apiVersion"),
                "kind": involved.get("kind"),
                "name": meta.get("name"),
                "namespace": meta.get("namespace"),
                "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion"),
            },
            "reason": reason,
            "message": message,
            "type": event_type,
            "source": {"component": component},
            "reportingComponent": component,
            "reportingInstance": component,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        return self.create(EVENTS, body, namespace)

    def patch(
        self,
        res: Resource,
        name: str,
        patch: Any,
        namespace: str | None = None,
        patch_type: str = "merge",
        dry_run: bool = False,
        field_manager: str | None = None,
    ) -> dict[str, Any]:
        """PATCH an object. A merge patch that holds ``metadata.resourceVersion`` is conditional: Conflict when the
        object changed since. ``field_manager`` names the writer in managedFields (default: from the User-Agent).
        """
        content_type = {
            "merge": "application/merge-patch+json",
            "json": "application/json-patch+json",
            "strategic": "application/strategic-merge-patch+json",
        }[patch_type]
        return self.request(
            "PATCH",
            res.path(namespace, name),
            query={"dryRun": "All" if dry_run else None, "fieldManager": field_manager},
            body=patch,
            content_type=content_type,
            what=f"patch {res.kind or res.plural} {name}",
        )

    def apply(
        self,
        res: Resource,
        body: dict[str, Any],
        field_manager: str = "nodeops.maintenance",
        force: bool = True,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Server-side apply of a full manifest."""
        meta = body.get("metadata") or {}
        return self.request(
            "PATCH",
            res.path(meta.get("namespace"), meta["name"]),
            query={
                "fieldManager": field_manager,
                "force": "true" if force else None,
                "dryRun": "All" if dry_run else None,
            },
            body=body,
            content_type="application/apply-patch+yaml",
            what=f"apply {res.kind or res.plural} {meta['name']}",
        )

    def delete(
        self,
        res: Resource,
        name: str,
        namespace: str | None = None,
        dry_run: bool = False,
        propagation_policy: str | None = None,
        *,
        uid: str | None = None,
        resource_version: str | None = None,
    ) -> dict[str, Any]:
        """DELETE an object. With ``uid`` and/or ``resource_version`` the deletion is conditional
        (``preconditions``): UIDMismatch when the object of that name is another one now, Conflict when it
        changed since that version was read, NotFound when it is gone."""
        options: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        preconditions = {k: v for k, v in (("uid", uid), ("resourceVersion", resource_version)) if v}
        if preconditions:
            options["preconditions"] = preconditions
        if propagation_policy:
            options["propagationPolicy"] = propagation_policy
        if dry_run:
            options["dryRun"] = ["All"]
        return self.request(
            "DELETE", res.path(namespace, name), body=options, what=f"delete {res.kind or res.plural} {name}"
        )

    def evict(
        self, name: str, namespace: str, *, uid: str, grace_period: int | None = None, dry_run: bool = False
    ) -> dict[str, Any]:
        """POST a policy/v1 Eviction for the pod ``namespace/name`` whose UID is ``uid``; the pod's own grace
        period unless ``grace_period`` is set.

        The UID goes as ``deleteOptions.preconditions.uid``, so a pod of the same name created since the
        decision (a StatefulSet's replacement) is never evicted. Raises TooManyRequests (429) when a
        PodDisruptionBudget refuses it, NotFound when the pod is gone, UIDMismatch when it was replaced
        (both mean the pod decided on is gone: ``errors.OBJECT_GONE``).
        """
        options: dict[str, Any] = {"preconditions": {"uid": _required_uid(uid, "evict", namespace, name)}}
        if grace_period is not None:
            options["gracePeriodSeconds"] = grace_period
        body: dict[str, Any] = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
            "deleteOptions": options,
        }
        return self.request(
            "POST",
            PODS.path(namespace, name, "eviction"),
            query={"dryRun": "All" if dry_run else None},
            body=body,
            what=f"evict pod {namespace}/{name}",
            retry_429=False,
        )

    def delete_pod(
        self, name: str, namespace: str, *, uid: str, grace_period: int | None = None, dry_run: bool = False
    ) -> dict[str, Any]:
        """DELETE the pod ``namespace/name`` whose UID is ``uid`` (no PodDisruptionBudget check); the pod's own
        grace period unless set.

        The options go as a DeleteOptions body with ``preconditions.uid`` (the API server then ignores the
        query's options, so grace period and dry run are in the body too). Raises NotFound when the pod is
        gone, UIDMismatch when another pod has its name now (``errors.OBJECT_GONE``).
        """
        options: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "preconditions": {"uid": _required_uid(uid, "delete", namespace, name)},
        }
        if grace_period is not None:
            options["gracePeriodSeconds"] = grace_period
        if dry_run:
            options["dryRun"] = ["All"]
        return self.request("DELETE", PODS.path(namespace, name), body=options, what=f"delete pod {namespace}/{name}")

    def watch(
        self,
        res: Resource,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
        timeout: float = 60.0,
    ) -> Watch:
        """Watch events from ``resource_version`` for ``timeout`` seconds; iterate the returned Watch."""
        return Watch(self, res, namespace, label_selector, field_selector, resource_version, timeout)

    def server_version(self) -> dict[str, Any]:
        return self.request("GET", "/version", what="get the server version")

    def resource_for(self, api_version: str, kind: str) -> Resource:
        """The Resource of a kind: known ones directly, others through one discovery call."""
        known = KNOWN_RESOURCES.get((api_version, kind))
        if known:
            return known
        path = "/api/" + api_version if "/" not in api_version else "/apis/" + api_version
        try:
            listing = self.request("GET", path, what=f"discover {api_version}")
        except (NotFound, MissingResourceType):
            listing = {}
        for entry in listing.get("resources") or []:
            if entry.get("kind") == kind and "/" not in entry.get("name", ""):
                return Resource(api_version, entry["name"], bool(entry.get("namespaced")), kind)
        raise MissingResourceType(
            f"The API server does not serve kind {kind} in {api_version}: is its CustomResourceDefinition installed?"
        )


class Watch:
    """A watch as an iterator of decoded events ``{"type": ..., "object": {...}}``.

    It reconnects from the last seen resourceVersion when the server ends a request, until
    ``timeout`` seconds have passed. BOOKMARK events only move the resourceVersion on. When the
    resourceVersion is too old (410 Gone) it lists again and yields one ``{"type": "RELIST",
    "object": <List>}`` event (the consumer reconciles its state against the list's items),
    then watches on from the list. :meth:`stop` ends the iteration from another thread.
    """

    def __init__(
        self,
        client: Client,
        res: Resource,
        namespace: str | None,
        label_selector: str | None,
        field_selector: str | None,
        resource_version: str | None,
        timeout: float,
    ) -> None:
        self.client = client
        self.res = res
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.resource_version = resource_version
        self.deadline = time.monotonic() + timeout
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._resp: Any = None

    def stop(self) -> None:
        self._stopped.set()
        with self._lock:
            resp = self._resp
        if resp is not None:
            with contextlib.suppress(Exception):  # the response may already be closed
                resp.shutdown()  # unblocks a read in the iterating thread

    def _relist(self) -> dict[str, Any]:
        listing = self.client.list(
            self.res, self.namespace, label_selector=self.label_selector, field_selector=self.field_selector
        )
        self.resource_version = (listing.get("metadata") or {}).get("resourceVersion")
        return {"type": "RELIST", "object": listing}

    def __iter__(self) -> Iterator[dict[str, Any]]:
        what = f"watch {self.res.plural}"
        while not self._stopped.is_set():
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                return
            query = {
                "watch": "1",
                "allowWatchBookmarks": "true",
                "resourceVersion": self.resource_version,
                "timeoutSeconds": max(1, math.ceil(remaining)),
                "labelSelector": self.label_selector,
                "fieldSelector": self.field_selector,
            }
            path = self.res.path(self.namespace)
            resp = self.client._send("GET", path, query, None, "", read_timeout=remaining + 10, stream=True)
            with self._lock:
                self._resp = resp
            try:
                if self._stopped.is_set():  # stop() came while the request was being sent
                    return
                if resp.status == 410:
                    yield self._relist()
                    continue
                if not 200 <= resp.status < 300:
                    text = resp.read().decode("utf-8", "replace")
                    raise self.client._error(resp.status, text, "GET", path, what)
                gone = False
                for event in _events(resp):
                    kind = event.get("type")
                    obj = event.get("object") or {}
                    if kind == "ERROR":
                        if obj.get("code") == 410:
                            gone = True
                            break
                        raise self.client._error(int(obj.get("code") or 500), json.dumps(obj), "GET", path, what)
                    version = (obj.get("metadata") or {}).get("resourceVersion")
                    if version:
                        self.resource_version = version
                    if kind == "BOOKMARK":
                        continue
                    yield event
                    if self._stopped.is_set():
                        return
                if gone:
                    yield self._relist()
            except Exception as exc:
                if self._stopped.is_set():
                    return
                import urllib3

                if isinstance(exc, urllib3.exceptions.HTTPError):
                    continue  # the stream broke: reconnect from the last resourceVersion
                raise
            finally:
                with self._lock:
                    self._resp = None
                resp.release_conn()


def _seconds(value: Any) -> float:
    """A ``Retry-After`` header's whole seconds (0 when absent or a date), at most RETRY_MAX_DELAY x 5."""
    try:
        return min(float(int(str(value))), RETRY_MAX_DELAY * 5)
    except (TypeError, ValueError):
        return 0.0


def _required_uid(uid: str, verb: str, namespace: str, name: str) -> str:
    if not uid:
        raise ValueError(f"{verb} pod {namespace}/{name}: the UID of the pod decided on is required")
    return uid


def _events(resp: Any) -> Iterator[dict[str, Any]]:
    """Decoded JSON lines of a streaming response."""
    buffer = b""
    for chunk in resp.stream(65536, decode_content=True):
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            if line.strip():
                yield json.loads(line)
    if buffer.strip():
        yield json.loads(buffer)
