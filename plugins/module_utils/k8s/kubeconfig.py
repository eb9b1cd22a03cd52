# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Connection settings read without the ``kubernetes`` package, where none of its work is needed.

Importing ``kubernetes.client`` and ``kubernetes.config`` (pydantic, oauthlib, requests, dateutil and the
generated models) costs more than the rest of a module's start-up, while :class:`~.client.Client` reads a
dozen attributes of its ``Configuration``. So the common cases are read here, into a
:class:`StaticConfiguration` with those attributes, names and defaults:

* ``host`` with credentials in the options (no kubeconfig at all);
* a kubeconfig (files, ``KUBECONFIG`` with several files, or a dict) whose selected user has a static
  credential: ``token``/``tokenFile``, ``client-certificate(-data)``/``client-key(-data)``,
  ``username``/``password``; its cluster with ``server``, ``certificate-authority(-data)``,
  ``insecure-skip-tls-verify``, ``tls-server-name``, ``proxy-url``;
* a pod's service account, its token read again every minute as the official loader does.

Each reader follows ``kubernetes.config`` (37.x) step by step, also where it differs from kubectl: of the files
in ``KUBECONFIG`` the first one defining a cluster, user or context name wins, but the *last* one that sets
``current-context`` does; a user's ``client-certificate`` and ``client-key`` are relative to the file of the
*cluster*, ``tokenFile`` to the user's own; ``*-data`` fields go to temporary files (mode 0600, removed at exit).
So a kubeconfig means the same thing on either path.

Anything else raises :class:`Unsupported`, and the caller uses the official loader as before: ``exec`` and
``auth-provider`` users (their plugins, token refresh and ``persist_config``), fields not listed above, values
of unexpected types, unreadable or malformed files (the official loader then reports them its way).
"""

from __future__ import annotations

import atexit
import base64
import binascii
import contextlib
import os
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from ansible_collections.nodeops.maintenance.plugins.module_utils.core.node.errors import NodeopsError
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.errors import ConfigError

#: Where a pod's service account credentials are mounted (as in kubernetes.config.incluster_config).
SERVICE_TOKEN_FILENAME = "/var/run/secrets/kubernetes.io/serviceaccount/token"
SERVICE_CERT_FILENAME = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
#: How long a service account token is used before its file is read again (the official loader's period).
TOKEN_REFRESH_SECONDS = 60.0

# The fields of a kubeconfig user and cluster this reader handles; "extensions" and "disable-compression" are
# ignored by the official loader too. Any other field sends the configuration to the official loader.
_USER_FIELDS = frozenset(
    {
        "token",
        "tokenFile",
        "client-certificate",
        "client-certificate-data",
        "client-key",
        "client-key-data",
        "username",
        "password",
        "extensions",
    }
)
_CLUSTER_FIELDS = frozenset(
    {
        "server",
        "certificate-authority",
        "certificate-authority-data",
        "insecure-skip-tls-verify",
        "tls-server-name",
        "proxy-url",
        "extensions",
        "disable-compression",
    }
)


class Unsupported(NodeopsError):
    """This reader does not handle the configuration: the official loader does (and reports errors its way).
    Never leaves load_configuration."""


class KubeconfigError(NodeopsError):
    """A kubeconfig no loader can use (the counterpart of the official loader's ConfigException); load_configuration
    turns it into a ConfigError."""


def _env_proxy(proxies: Mapping[str, str], host: str) -> str | None:
    from urllib.parse import urlparse

    return proxies.get(urlparse(host).scheme) or proxies.get("all")


class StaticConfiguration:
    """What :class:`~.client.Client` and ``load_configuration`` use of ``kubernetes.client.Configuration``,
    with the same names and defaults. As there, the proxy comes from the environment (``https_proxy``,
    ``http_proxy`` by the scheme of ``host``, else ``all_proxy``; ``no_proxy``), chosen again whenever
    ``host`` is set, until ``proxy`` itself is set."""

    #: set by load_configuration (client.IMPERSONATE_ATTRIBUTE)
    nodeops_impersonate: tuple[str, list[str]] = ("", [])

    def __init__(self) -> None:
        from urllib.request import getproxies

        proxies = getproxies()
        self._host = ""
        self._proxy_from_env = True
        self._proxy: str | None = _env_proxy(proxies, self._host)
        self.no_proxy: str | None = proxies.get("no")
        self.proxy_headers: Any = None
        self.api_key: dict[str, str] = {}
        self.api_key_prefix: dict[str, str] = {}
        self.refresh_api_key_hook: Callable[[Any], None] | None = None
        self.username: str | None = None
        self.password: str | None = None
        self.ssl_ca_cert: str | None = None
        self.cert_file: str | None = None
        self.key_file: str | None = None
        self.verify_ssl = True
        self.assert_hostname: bool | None = None
        self.tls_server_name: str | None = None

    @property
    def host(self) -> str:
        return self._host

    @host.setter
    def host(self, value: str) -> None:
        self._host = value
        if self._proxy_from_env:  # the scheme-specific proxy depends on the host
            from urllib.request import getproxies

            self._proxy = _env_proxy(getproxies(), value)

    @property
    def proxy(self) -> str | None:
        return self._proxy

    @proxy.setter
    def proxy(self, value: str | None) -> None:
        self._proxy = value
        self._proxy_from_env = False

    def get_api_key_with_prefix(self, identifier: str, alias: str | None = None) -> str | None:
        if self.refresh_api_key_hook is not None:
            self.refresh_api_key_hook(self)
        key = self.api_key.get(identifier, self.api_key.get(alias) if alias is not None else None)
        if not key:
            return None
        prefix = self.api_key_prefix.get(identifier, self.api_key_prefix.get(alias) if alias is not None else None)
        return f"{prefix} {key}" if prefix else key

    def auth_settings(self) -> dict[str, dict[str, Any]]:
        if "BearerToken" not in self.api_key and "authorization" not in self.api_key:
            return {}
        value = self.get_api_key_with_prefix("BearerToken", alias="authorization")
        return {"BearerToken": {"type": "api_key", "in": "header", "key": "authorization", "value": value}}


# -- temporary files for *-data fields ----------------------------------------------------------------------

_temp_lock = threading.Lock()
_temp_files: dict[bytes, str] = {}


def remove_temp_files() -> None:
    """Remove the temporary files written so far (at the process's exit, and by what runs in a process that does not
    run exit handlers: a worker that Ansible forked ends with os._exit)."""
    with _temp_lock:
        for name in _temp_files.values():
            with contextlib.suppress(OSError):
                os.remove(name)
        _temp_files.clear()


def _temp_file(content: bytes) -> str:
    """A file holding ``content``, readable by this user only (mkstemp: 0600), removed when the process exits;
    one per content, as the official loader keeps them."""
    with _temp_lock:
        name = _temp_files.get(content)
        if name and os.path.isfile(name):
            return name
        if not _temp_files:
            atexit.register(remove_temp_files)
        fd, name = tempfile.mkstemp(prefix="nodeops-kubeconfig-")
        try:
            os.write(fd, content)
        finally:
            os.close(fd)
        _temp_files[content] = name
        return name


# -- kubeconfig ----------------------------------------------------------------------------------------------


class _Kubeconfig:
    """The merged entries of one or more kubeconfig files, or of a dict: each entry with the file it came from."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.entries: dict[str, list[tuple[dict[str, Any], str | None]]] = {"clusters": [], "contexts": [], "users": []}
        self.current_context: Any = None
        self.has_users = False

    def named(self, item: str, name: Any) -> tuple[dict[str, Any], str | None] | None:
        found = [entry for entry in self.entries[item] if entry[0]["name"] == name]
        if len(found) > 1:  # a dict may repeat a name (files are merged first); the official loader refuses it
            raise Unsupported(f"two {item} named {name!r}")
        return found[0] if found else None


def _entry_list(config: Mapping[str, Any], item: str) -> list[dict[str, Any]]:
    entries = config.get(item, []) or []
    if not isinstance(entries, list) or not all(isinstance(e, dict) and e.get("name") is not None for e in entries):
        raise Unsupported(f"{item} is not a list of named entries")
    return entries


def _existing(config_file: str) -> list[str]:
    paths = [os.path.expanduser(path) for path in config_file.split(os.pathsep) if path]
    return [path for path in paths if os.path.exists(path)]


def _read_files(config_file: str) -> _Kubeconfig:
    """kube_config.KubeConfigMerger: the files of a ``:``-separated list that exist, merged; the first entry of
    a name wins, the last ``current-context`` set wins."""
    import yaml

    paths = _existing(config_file)
    if not paths:
        raise KubeconfigError("Invalid kube-config file. No configuration found.")  # the official loader's words
    merged = _Kubeconfig("the kubeconfig " + ", ".join(paths))
    for path in paths:
        try:
            with open(path, encoding="utf-8") as handle:
                config = yaml.safe_load(handle)
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise Unsupported(f"cannot read {path}: {exc}") from exc
        if not isinstance(config, dict):
            raise Unsupported(f"{path} holds no mapping")
        for item, known in merged.entries.items():
            for entry in _entry_list(config, item):
                if not any(old["name"] == entry["name"] for old, _source in known):
                    known.append((entry, path))
        if "current-context" in config:
            merged.current_context = config["current-context"]
    merged.has_users = bool(merged.entries["users"])
    return merged


def _read_dict(config: Any) -> _Kubeconfig:
    if not isinstance(config, dict):
        raise Unsupported("not a mapping")
    read = _Kubeconfig("the kubeconfig given as a dictionary")
    for item in ("clusters", "contexts", "users"):
        read.entries[item] = [(entry, None) for entry in _entry_list(config, item)]
    if config.get("contexts") is None:
        raise Unsupported("no contexts")
    read.current_context = config.get("current-context")
    read.has_users = bool(config.get("users"))
    return read


def _string_fields(section: dict[str, Any], known: frozenset[str], what: str) -> None:
    unknown = set(section) - known
    if unknown:
        raise Unsupported(f"{what} has {', '.join(sorted(map(str, unknown)))}")
    for key, value in section.items():
        if key not in ("extensions", "insecure-skip-tls-verify", "disable-compression") and not isinstance(value, str):
            raise Unsupported(f"{what} {key} is not a string")


def _base_path(origin: str | None) -> str:
    return os.path.abspath(os.path.dirname(origin)) if origin is not None else ""


def _file_or_data(section: dict[str, Any] | None, key: str, base: str) -> str | None:
    """kube_config.FileOrData(...).as_file(): ``<key>-data`` (base64) in a temporary file, else ``<key>``
    relative to ``base``; a file that does not exist is an error."""
    if not section:
        return None
    data, path = None, None
    if key + "-data" in section:
        data = section[key + "-data"]
    elif key in section:
        path = os.path.normpath(os.path.join(base, section[key]))
    if not path and data:
        try:
            path = _temp_file(base64.standard_b64decode(data.encode()))
        except (binascii.Error, ValueError) as exc:
            raise Unsupported(f"{key}-data is not base64: {exc}") from exc
    if path and not os.path.isfile(path):
        raise KubeconfigError(f"File does not exist: {path}")
    return path


def _configure(config: _Kubeconfig, context: str | None) -> StaticConfiguration:
    """kube_config.KubeConfigLoader: the context's user and cluster into a StaticConfiguration."""
    if context is not None and (not isinstance(context, str) or not context):
        raise Unsupported("the context option is empty")
    name = context if context is not None else config.current_context
    names = ", ".join(str(entry["name"]) for entry, _source in config.entries["contexts"]) or "none"
    if name is None or name == "":
        raise KubeconfigError(
            f"{config.where} sets no current-context: set the context option (K8S_AUTH_CONTEXT) to one of its "
            f"contexts ({names})."
        )
    found = config.named("contexts", name)
    if found is None:
        raise KubeconfigError(f"{config.where} has no context named {name!r} (its contexts: {names}).")
    ctx = found[0].get("context")
    if not isinstance(ctx, dict) or ctx.get("cluster") is None:
        raise Unsupported("a context without a cluster")

    user: dict[str, Any] | None = None
    user_origin: str | None = None
    if ctx.get("user") and config.has_users:
        named_user = config.named("users", ctx["user"])
        if named_user is not None:
            user, user_origin = named_user[0].get("user"), named_user[1]
            if not isinstance(user, dict):
                raise Unsupported("a user entry without user")
            _string_fields(user, _USER_FIELDS, "user")

    named_cluster = config.named("clusters", ctx["cluster"])
    if named_cluster is None:
        raise KubeconfigError(
            f"the context {name!r} names the cluster {ctx['cluster']!r}, which {config.where} does not define."
        )
    cluster, cluster_origin = named_cluster[0].get("cluster"), named_cluster[1]
    if not isinstance(cluster, dict):
        raise Unsupported("a cluster entry without cluster")
    _string_fields(cluster, _CLUSTER_FIELDS, "cluster")
    if not cluster.get("server"):
        raise Unsupported("a cluster without server")
    skip_verify = cluster.get("insecure-skip-tls-verify")
    if "insecure-skip-tls-verify" in cluster and not isinstance(skip_verify, bool):
        raise Unsupported("insecure-skip-tls-verify is not a boolean")

    # _load_authentication: a token (tokenFile only when there is no token field), else username and password
    authorization = None
    if user:
        token = None
        if "token" in user:
            token = user["token"]
        elif "tokenFile" in user:
            path = os.path.normpath(os.path.join(_base_path(user_origin), user["tokenFile"]))
            try:
                with open(path, encoding="utf-8") as handle:
                    token = handle.read()  # as it is, as the official loader sends it
            except (OSError, UnicodeDecodeError) as exc:
                raise Unsupported(f"cannot read tokenFile {path}: {exc}") from exc
        if token:
            authorization = "Bearer " + token
        elif "username" in user and "password" in user:
            import urllib3

            try:
                basic = urllib3.util.make_headers(basic_auth=user["username"] + ":" + user["password"])
            except UnicodeError as exc:  # not Latin-1
                raise Unsupported(f"username/password: {exc}") from exc
            authorization = basic["authorization"]

    # _load_cluster_info: certificates only for https, all relative to the cluster's file
    host = cluster["server"].rstrip("/")
    ca_file = cert_file = key_file = None
    if host.startswith("https"):
        base = _base_path(cluster_origin)
        ca_file = _file_or_data(cluster, "certificate-authority", base)
        cert_file = _file_or_data(user, "client-certificate", base)
        key_file = _file_or_data(user, "client-key", base)

    # _set_config
    cfg = StaticConfiguration()
    if authorization:
        cfg.api_key["BearerToken"] = authorization
    cfg.host = host
    cfg.ssl_ca_cert, cfg.cert_file, cfg.key_file = ca_file, cert_file, key_file
    if "insecure-skip-tls-verify" in cluster:
        cfg.verify_ssl = not skip_verify
    if "tls-server-name" in cluster:
        cfg.tls_server_name = cluster["tls-server-name"]
    if "proxy-url" in cluster:
        cfg.proxy = cluster["proxy-url"]
    return cfg


def default_location(environ: Mapping[str, str] | None = None) -> str:
    """Where the official loader looks without a kubeconfig option: ``$KUBECONFIG``, else ~/.kube/config."""
    return (os.environ if environ is None else environ).get("KUBECONFIG", "~/.kube/config")


def default_files() -> list[str]:
    """The files of :func:`default_location` that exist."""
    return _existing(default_location())


def from_files(config_file: str, context: str | None = None) -> StaticConfiguration:
    """``load_kube_config(config_file, context)``: ``config_file`` may name several files, ``:``-separated."""
    return _configure(_read_files(config_file), context)


def from_dict(config: Any, context: str | None = None) -> StaticConfiguration:
    """``load_kube_config_from_dict(config, context)``: relative paths are relative to the working directory."""
    return _configure(_read_dict(config), context)


# -- in-cluster ----------------------------------------------------------------------------------------------


def _join_host_port(host: str, port: str) -> str:
    return f"[{host}]:{port}" if ":" in host or "%" in host else f"{host}:{port}"


def _read_nonempty(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            content = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise Unsupported(f"cannot read {path}: {exc}") from exc
    if not content:
        raise Unsupported(f"{path} is empty")
    return content


class _ServiceAccountToken:
    """The refresh hook of an in-cluster configuration: the token file is read again once a minute (the kubelet
    rotates projected tokens), as kubernetes.config.incluster_config does."""

    def __init__(self, path: str, token: str) -> None:
        self.path = path
        self.token = token
        self.expires = time.monotonic() + TOKEN_REFRESH_SECONDS

    def __call__(self, cfg: Any) -> None:
        if time.monotonic() >= self.expires:
            try:
                self.token = _read_nonempty(self.path)
            except Unsupported as exc:
                raise ConfigError(f"Cannot read the service account token again: {exc}") from exc
            self.expires = time.monotonic() + TOKEN_REFRESH_SECONDS
        cfg.api_key["BearerToken"] = "bearer " + self.token


def in_cluster(
    environ: Mapping[str, str] | None = None, token_file: str | None = None, ca_file: str | None = None
) -> StaticConfiguration:
    """``load_incluster_config()``: the service host and port from the environment, the mounted token and CA."""
    env = os.environ if environ is None else environ
    token_file = token_file or SERVICE_TOKEN_FILENAME
    ca_file = ca_file or SERVICE_CERT_FILENAME
    service_host, service_port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
    if not service_host or not service_port:
        raise Unsupported("service host/port not set")
    if not os.path.isfile(token_file) or not os.path.isfile(ca_file):
        raise Unsupported("no service account token or CA file")
    token = _read_nonempty(token_file)
    _read_nonempty(ca_file)
    cfg = StaticConfiguration()
    cfg.host = "https://" + _join_host_port(service_host, service_port)
    cfg.ssl_ca_cert = ca_file
    cfg.api_key["BearerToken"] = "bearer " + token
    cfg.refresh_api_key_hook = _ServiceAccountToken(token_file, token)
    return cfg
