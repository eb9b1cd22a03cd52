"""The connection read without the ``kubernetes`` package (module_utils/k8s/kubeconfig.py) against the official loader.

Every case is loaded twice through ``load_configuration``: as modules do (the quick reader) and with the quick
reader switched off (the official ``kubernetes.config`` loader, as before). The Client built from each must send
the same headers to the same host through the same pool settings; files written from ``*-data`` fields are
compared by content.
"""

from __future__ import annotations

import base64
import json
import os
import re
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s import client as client_module
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s import errors, kubeconfig
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.client import (
    AUTH_ARG_SPEC,
    Client,
    load_configuration,
)

PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")
CA, CERT, KEY = b"-----CA-----\n", b"-----CERT-----\n", b"-----KEY-----\n"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.fixture(autouse=True)
def clean_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No proxy, service account or KUBECONFIG from the machine; the official loader's default location (read when
    the package is imported) follows KUBECONFIG as it does in a module's own process."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    set_kubeconfig_env(monkeypatch, str(tmp_path / "no-such-kubeconfig"))
    yield


def set_kubeconfig_env(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    from kubernetes.config import kube_config

    monkeypatch.setenv("KUBECONFIG", value)
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", value)


def params(**options: Any) -> dict[str, Any]:
    return dict.fromkeys(AUTH_ARG_SPEC) | options


def kubeconfig_doc(
    cluster: dict[str, Any],
    user: dict[str, Any] | None,
    *,
    current: str | None = "c1",
    contexts: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "k1", "cluster": cluster}],
        "users": [{"name": "u1", "user": user}] if user is not None else [],
        "contexts": contexts or [{"name": "c1", "context": {"cluster": "k1", "user": "u1"}}],
    }
    if current is not None:
        doc["current-context"] = current
    return doc


def write(path: Path, content: bytes | str | dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, dict):
        content = yaml.safe_dump(content)
    if isinstance(content, str):
        content = content.encode()
    path.write_bytes(content)
    return path


def temp_files() -> set[str]:
    from kubernetes.config import kube_config

    return set(kube_config._temp_files.values()) | set(kubeconfig._temp_files.values())


def where(path: str | None) -> Any:
    """A file the loader wrote from a ``*-data`` field by its content (its name is random), any other by its path."""
    if path and path in temp_files():
        return ("written", Path(path).read_bytes())
    return path


def effective(cfg: Any) -> dict[str, Any]:
    """What the Client uses of a configuration, and what it makes of it."""
    attributes = {
        "host": cfg.host,
        "ssl_ca_cert": where(cfg.ssl_ca_cert),
        "cert_file": where(cfg.cert_file),
        "key_file": where(cfg.key_file),
        "verify_ssl": cfg.verify_ssl,
        "assert_hostname": cfg.assert_hostname,
        "tls_server_name": cfg.tls_server_name,
        "proxy": cfg.proxy,
        "no_proxy": cfg.no_proxy,
        "proxy_headers": cfg.proxy_headers,
        "username": cfg.username,
        "password": cfg.password,
        "impersonate": getattr(cfg, client_module.IMPERSONATE_ATTRIBUTE),
    }
    client = Client(cfg)  # reads the configuration before a request's refresh hook may set it again
    pool = client._pool
    pool_kw = dict(pool.connection_pool_kw)
    for key in ("ca_certs", "cert_file", "key_file"):
        pool_kw[key] = where(pool_kw.get(key))
    pool_kw["retries"] = repr(pool_kw.get("retries"))  # a Retry equals only itself
    return {
        "configuration": attributes,
        "client host": client.host,
        "headers": list(client._headers("application/json").items()),
        "pool": type(pool).__name__,
        "pool settings": pool_kw,
        "proxy url": str(getattr(pool, "proxy", None) or ""),
        "proxy headers": dict(getattr(pool, "proxy_headers", None) or {}),
    }


def official_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client_module, "_quick_configuration", lambda *args: None)


def both(options: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, Any], dict[str, Any]]:
    """(quick, official) effective settings of the same options."""
    quick = load_configuration(params(**options))
    assert isinstance(quick, kubeconfig.StaticConfiguration), "the quick reader should handle this case"
    with monkeypatch.context() as m:
        official_only(m)
        official = load_configuration(params(**options))
    assert type(official).__module__ == "kubernetes.client.configuration"
    return effective(quick), effective(official)


# Each case: the options of a task, given a directory to write files to (the tests run from another directory,
# so that relative paths resolved against the working directory would be found wrong).


def token_and_relative_ca(tmp: Path) -> dict[str, Any]:
    write(tmp / "kube" / "ca.crt", CA)
    doc = kubeconfig_doc({"server": "https://10.0.0.1:6443/", "certificate-authority": "ca.crt"}, {"token": "tok"})
    return {"kubeconfig": str(write(tmp / "kube" / "config", doc))}


def client_cert_files(tmp: Path) -> dict[str, Any]:
    write(tmp / "kube" / "pki" / "c.crt", CERT)
    write(tmp / "kube" / "pki" / "c.key", KEY)
    ca = write(tmp / "elsewhere" / "ca.crt", CA)
    cluster = {"server": "https://api.example:6443", "certificate-authority": str(ca)}
    user = {"client-certificate": "pki/c.crt", "client-key": "./pki/../pki/c.key"}
    return {"kubeconfig": str(write(tmp / "kube" / "config", kubeconfig_doc(cluster, user)))}


def certificate_data(tmp: Path) -> dict[str, Any]:
    cluster = {"server": "https://10.0.0.1:6443", "certificate-authority-data": b64(CA)}
    user = {"client-certificate-data": b64(CERT), "client-key-data": b64(KEY)}
    return {"kubeconfig": str(write(tmp / "kc", kubeconfig_doc(cluster, user)))}


def data_wins_over_file(tmp: Path) -> dict[str, Any]:
    cluster = {
        "server": "https://10.0.0.1:6443",
        "certificate-authority": "no-such-file",
        "certificate-authority-data": b64(CA),
    }
    return {"kubeconfig": str(write(tmp / "kc", kubeconfig_doc(cluster, {"token": "t"})))}


def insecure(tmp: Path) -> dict[str, Any]:
    cluster = {"server": "https://10.0.0.1:6443", "insecure-skip-tls-verify": True}
    return {"kubeconfig": str(write(tmp / "kc", kubeconfig_doc(cluster, {"token": "t"})))}


def proxy_url_and_tls_server_name(tmp: Path) -> dict[str, Any]:
    cluster = {
        "server": "https://10.0.0.1:6443",
        "certificate-authority-data": b64(CA),
        "proxy-url": "http://proxy.example:3128",
        "tls-server-name": "kubernetes.default",
    }
    return {"kubeconfig": str(write(tmp / "kc", kubeconfig_doc(cluster, {"token": "t"})))}


def plain_http_ignores_certificates(tmp: Path) -> dict[str, Any]:
    cluster = {"server": "http://127.0.0.1:8080", "certificate-authority": "missing-but-unused"}
    user = {"token": "t", "client-certificate": "missing-too", "client-key": "missing-too"}
    return {"kubeconfig": str(write(tmp / "kc", kubeconfig_doc(cluster, user)))}


def username_password(tmp: Path) -> dict[str, Any]:
    user = {"token": "", "username": "ann", "password": "pä:ss"}  # an empty token gives way
    return {"kubeconfig": str(write(tmp / "kc", kubeconfig_doc({"server": "https://h:1"}, user)))}


def token_file_relative(tmp: Path) -> dict[str, Any]:
    write(tmp / "kube" / "secrets" / "token", "from-file")
    user = {"tokenFile": "secrets/token", "username": "ignored", "password": "ignored"}
    return {"kubeconfig": str(write(tmp / "kube" / "config", kubeconfig_doc({"server": "https://h:1"}, user)))}


def unknown_user_means_no_credentials(tmp: Path) -> dict[str, Any]:
    doc = kubeconfig_doc({"server": "https://h:1"}, {"token": "t"})
    doc["contexts"][0]["context"]["user"] = "ghost"
    return {"kubeconfig": str(write(tmp / "kc", doc))}


def named_context(tmp: Path) -> dict[str, Any]:
    doc = kubeconfig_doc({"server": "https://h:1"}, {"token": "t1"})
    doc["clusters"].append(
        {"name": "k2", "cluster": {"server": "https://second:6443", "insecure-skip-tls-verify": True}}
    )
    doc["users"].append({"name": "u2", "user": {"token": "t2"}})
    doc["contexts"].append({"name": "c2", "context": {"cluster": "k2", "user": "u2", "namespace": "x"}})
    return {"kubeconfig": str(write(tmp / "kc", doc)), "context": "c2"}


def kubeconfig_extensions(tmp: Path) -> dict[str, Any]:
    """As minikube writes it: extensions in the cluster, the context and the user, preferences."""
    extension = [{"name": "cluster_info", "extension": {"provider": "minikube.sigs.k8s.io", "version": "v1.36.0"}}]
    cluster = {
        "server": "https://192.168.49.2:8443",
        "certificate-authority-data": b64(CA),
        "extensions": extension,
        "disable-compression": True,
    }
    doc = kubeconfig_doc(cluster, {"client-certificate-data": b64(CERT), "client-key-data": b64(KEY), "extensions": []})
    doc["contexts"][0]["context"]["extensions"] = extension
    doc["preferences"] = {}
    return {"kubeconfig": str(write(tmp / "kc", doc))}


def several_files_in_kubeconfig_env(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """KUBECONFIG=a:missing:b. The first file defining a name wins; the last current-context wins (the official
    loader's rule, not kubectl's). Context c2 joins cluster k2 of b with user u1 of a: u1's tokenFile is relative
    to a, its client certificate relative to the cluster's file, b."""
    write(tmp / "a" / "token", "a-token")
    write(tmp / "a" / "c.crt", CERT + b"a")
    write(tmp / "a" / "c.key", KEY + b"a")
    write(tmp / "b" / "c.crt", CERT)
    write(tmp / "b" / "c.key", KEY)
    write(tmp / "b" / "ca.crt", CA)
    first = kubeconfig_doc(
        {"server": "https://first:6443"}, {"tokenFile": "token", "client-certificate": "c.crt", "client-key": "c.key"}
    )
    second = {
        "clusters": [
            {"name": "k1", "cluster": {"server": "https://shadowed:6443"}},
            {"name": "k2", "cluster": {"server": "https://second:6443", "certificate-authority": "ca.crt"}},
        ],
        "users": [{"name": "u1", "user": {"token": "shadowed"}}],
        "contexts": [{"name": "c2", "context": {"cluster": "k2", "user": "u1"}}],
        "current-context": "c2",
    }
    paths = [write(tmp / "a" / "config", first), tmp / "missing", write(tmp / "b" / "config", second)]
    set_kubeconfig_env(monkeypatch, ":".join(map(str, paths)))
    return {}


def context_option_with_kubeconfig_env(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    several_files_in_kubeconfig_env(tmp, monkeypatch)
    return {"context": "c1"}


def inline_dict_relative_to_working_directory(tmp: Path) -> dict[str, Any]:
    write(Path.cwd() / "ca.crt", CA)
    cluster = {"server": "https://10.0.0.1:6443", "certificate-authority": "ca.crt"}
    return {"kubeconfig": kubeconfig_doc(cluster, {"client-key-data": b64(KEY), "client-certificate-data": b64(CERT)})}


def options_override_the_kubeconfig(tmp: Path) -> dict[str, Any]:
    options = token_and_relative_ca(tmp)
    ca = write(tmp / "other-ca.crt", CA + b"other")
    return options | {
        "host": "https://override:443/",
        "api_key": "option-token",
        "ca_cert": str(ca),
        "validate_certs": False,
        "proxy": "http://p:1",
        "no_proxy": "other.example",
        "proxy_headers": {"proxy_basic_auth": "u:p", "user_agent": "me"},
        "impersonate_user": "ann",
        "impersonate_groups": ["g1", "g2"],
    }


def proxy_from_the_environment(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.setenv("https_proxy", "http://env-proxy:3128")
    monkeypatch.setenv("http_proxy", "http://plain-proxy:3128")
    monkeypatch.setenv("no_proxy", "localhost,.example")
    return token_and_relative_ca(tmp)


def all_proxy_and_basic_auth_options(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.setenv("ALL_PROXY", "http://all:1")
    return {"host": "https://h:6443", "username": "ann", "password": "pw"}


def options_only_with_client_certificate(tmp: Path) -> dict[str, Any]:
    return {
        "host": "https://h:6443",
        "client_cert": str(write(tmp / "c.crt", CERT)),
        "client_key": str(write(tmp / "c.key", KEY)),
        "ca_cert": str(write(tmp / "ca.crt", CA)),
    }


def options_only_with_token(tmp: Path) -> dict[str, Any]:
    return {"host": "https://h:6443/", "api_key": "abc", "validate_certs": True}


def default_kubeconfig_with_host_override(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    set_kubeconfig_env(monkeypatch, token_and_relative_ca(tmp)["kubeconfig"])
    return {"host": "https://override:6443"}


CASES: list[Callable[..., dict[str, Any]]] = [
    token_and_relative_ca,
    client_cert_files,
    certificate_data,
    data_wins_over_file,
    insecure,
    proxy_url_and_tls_server_name,
    plain_http_ignores_certificates,
    username_password,
    token_file_relative,
    unknown_user_means_no_credentials,
    named_context,
    kubeconfig_extensions,
    several_files_in_kubeconfig_env,
    context_option_with_kubeconfig_env,
    inline_dict_relative_to_working_directory,
    options_override_the_kubeconfig,
    proxy_from_the_environment,
    all_proxy_and_basic_auth_options,
    options_only_with_client_certificate,
    options_only_with_token,
    default_kubeconfig_with_host_override,
]


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.__name__)
def test_the_quick_reader_configures_the_client_as_the_official_loader(
    case: Callable[..., dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files, work = tmp_path / "files", tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    options = case(files, monkeypatch) if "monkeypatch" in case.__code__.co_varnames else case(files)
    quick, official = both(options, monkeypatch)
    assert quick == official


def test_the_comparison_sees_what_matters(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The settings compared above do tell configurations apart."""
    quick = both(certificate_data(tmp_path), monkeypatch)[0]
    assert quick["pool settings"]["key_file"] == ("written", KEY)
    assert quick["pool settings"]["ca_certs"] == ("written", CA)
    cases = (token_and_relative_ca, token_file_relative, username_password, proxy_url_and_tls_server_name)
    seen = [both(case(tmp_path / case.__name__), monkeypatch)[0] for case in cases]
    assert ("authorization", "Bearer tok") in seen[0]["headers"]
    assert seen[0]["configuration"]["ssl_ca_cert"] == str(tmp_path / "token_and_relative_ca" / "kube" / "ca.crt")
    assert ("authorization", "Bearer from-file") in seen[1]["headers"]
    assert ("authorization", "Basic " + base64.b64encode("ann:pä:ss".encode("latin-1")).decode()) in seen[2]["headers"]
    assert seen[3]["pool"] == "ProxyManager"
    assert seen[3]["configuration"]["tls_server_name"] == "kubernetes.default"


def test_several_files_resolve_as_the_official_loader_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    several_files_in_kubeconfig_env(tmp_path, monkeypatch)
    quick = effective(load_configuration(params()))
    assert quick["client host"] == "https://second:6443"
    assert ("authorization", "Bearer a-token") in quick["headers"]
    assert quick["pool settings"]["ca_certs"] == str(tmp_path / "b" / "ca.crt")
    assert quick["pool settings"]["cert_file"] == str(tmp_path / "b" / "c.crt")
    quick = effective(load_configuration(params(context="c1")))
    assert (quick["client host"], quick["pool settings"]["ca_certs"]) == ("https://first:6443", None)
    assert quick["pool settings"]["cert_file"] == str(tmp_path / "a" / "c.crt")


def test_data_fields_are_private_temporary_files_removed_at_exit(tmp_path: Path) -> None:
    """Keys from ``*-data`` fields are written mode 0600 and removed when the process ends."""
    doc = kubeconfig_doc(
        {"server": "https://h:1", "certificate-authority-data": b64(CA)},
        {"client-certificate-data": b64(CERT), "client-key-data": b64(KEY + b"subprocess")},
    )
    script = (
        "import json, os, stat, sys\n"
        "from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.client import load_configuration\n"
        "cfg = load_configuration({'kubeconfig': json.loads(sys.argv[1])})\n"
        "files = [cfg.ssl_ca_cert, cfg.cert_file, cfg.key_file]\n"
        "print(json.dumps([(f, stat.S_IMODE(os.stat(f).st_mode), open(f, 'rb').read().decode()) for f in files]))\n"
    )
    out = run_python(script, json.dumps(doc))
    written = json.loads(out)
    assert [entry[2] for entry in written] == [CA.decode(), CERT.decode(), (KEY + b"subprocess").decode()]
    assert {entry[1] for entry in written} == {0o600}
    assert [entry[0] for entry in written if os.path.exists(entry[0])] == []


def run_python(script: str, *args: str) -> str:
    """Run ``script`` in a fresh Python that imports the collection as this one does."""
    collections_root = Path(client_module.__file__).parents[6]  # .../ansible_collections/nodeops/maintenance/...
    environ = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    environ["PYTHONPATH"] = str(collections_root)
    done = subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, env=environ, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_quick_paths_do_not_import_the_kubernetes_package(tmp_path: Path) -> None:
    """A module's configuration with static credentials, and its Client, leave ``kubernetes`` unimported;
    an exec user imports it (the official loader runs the plugin)."""
    kc = certificate_data(tmp_path)["kubeconfig"]
    token, ca = write(tmp_path / "sa" / "token", "sa-token"), write(tmp_path / "sa" / "ca.crt", CA)
    exec_kc = write(tmp_path / "exec-kc", exec_kubeconfig(tmp_path))
    cases = {
        "options": {"host": "https://h:1", "api_key": "t"},
        "kubeconfig file": {"kubeconfig": kc},
        "kubeconfig dict": {"kubeconfig": yaml.safe_load(Path(kc).read_text())},
        "KUBECONFIG": {},
    }
    script = f"""
import json, os, sys
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s import kubeconfig
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.client import Client, load_configuration

def imported():
    return sorted(m for m in sys.modules if m.split(".")[0] in ("kubernetes", "pydantic", "oauthlib", "requests"))

kubeconfig.SERVICE_TOKEN_FILENAME, kubeconfig.SERVICE_CERT_FILENAME = {str(token)!r}, {str(ca)!r}
seen = {{}}
os.environ["KUBECONFIG"] = {kc!r}
for name, options in json.loads(sys.argv[1]).items():
    Client(load_configuration(options))._headers(None)
    seen[name] = imported()
del os.environ["KUBECONFIG"]
os.environ.update(KUBERNETES_SERVICE_HOST="10.96.0.1", KUBERNETES_SERVICE_PORT="443")
Client(load_configuration({{}}))._headers(None)
seen["in cluster"] = imported()
headers = Client(load_configuration({{"kubeconfig": {str(exec_kc)!r}}}))._headers(None)
seen["exec"] = ["kubernetes" in sys.modules, headers["authorization"]]
print(json.dumps(seen))
"""
    seen = json.loads(run_python(script, json.dumps(cases)))
    assert seen == {
        "options": [],
        "kubeconfig file": [],
        "kubeconfig dict": [],
        "KUBECONFIG": [],
        "in cluster": [],
        "exec": [True, "Bearer from-exec"],
    }


def exec_kubeconfig(tmp: Path) -> dict[str, Any]:
    plugin = write(
        tmp / "plugin.py",
        "import json\nprint(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1beta1', "
        "'kind': 'ExecCredential', 'status': {'token': 'from-exec'}}))\n",
    )
    user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": sys.executable,
            "args": [str(plugin)],
            "interactiveMode": "Never",
        }
    }
    return kubeconfig_doc({"server": "https://h:1", "insecure-skip-tls-verify": True}, user)


def oidc_token() -> str:
    header = base64.urlsafe_b64encode(b'{"alg":"none"}').decode().rstrip("=")
    claims = base64.urlsafe_b64encode(b'{"sub":"ann"}').decode().rstrip("=")
    return f"{header}.{claims}.sig"


@pytest.mark.parametrize(
    ("user", "authorization"),
    [
        ("exec", "Bearer from-exec"),
        ({"auth-provider": {"name": "oidc", "config": {"id-token": oidc_token()}}}, "Bearer " + oidc_token()),
        ({"token": "t", "as": "impersonated"}, "Bearer t"),  # a field it does not know (the official loader ignores it)
        ({"token": None, "username": "a", "password": "b"}, None),  # the official loader's own error
    ],
    ids=["exec", "auth-provider", "unknown field", "null token"],
)
def test_anything_else_goes_to_the_official_loader(
    user: Any, authorization: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = exec_kubeconfig(tmp_path) if user == "exec" else kubeconfig_doc({"server": "https://h:1"}, user)
    path = str(write(tmp_path / "kc", doc))
    for options in ({"kubeconfig": path}, {"kubeconfig": doc}):
        with pytest.raises(kubeconfig.Unsupported):
            if isinstance(options["kubeconfig"], dict):
                kubeconfig.from_dict(doc)
            else:
                kubeconfig.from_files(path)
        if authorization is None:
            with pytest.raises(errors.ConfigError, match="Expected key token"):
                load_configuration(params(**options))
            continue
        cfg = load_configuration(params(**options))
        assert type(cfg).__module__ == "kubernetes.client.configuration"
        assert Client(cfg)._headers(None)["authorization"] == authorization


def test_persist_config_keeps_the_official_loader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = token_and_relative_ca(tmp_path)["kubeconfig"]
    assert isinstance(load_configuration(params(kubeconfig=path)), kubeconfig.StaticConfiguration)
    cfg = load_configuration(params(kubeconfig=path, persist_config=True))
    assert type(cfg).__module__ == "kubernetes.client.configuration"
    set_kubeconfig_env(monkeypatch, path)
    assert type(load_configuration(params(persist_config=True))).__module__ == "kubernetes.client.configuration"
    # an inline kubeconfig is never persisted (no file): the quick reader takes it whatever persist_config says
    inline = params(kubeconfig=yaml.safe_load(Path(certificate_data(tmp_path)["kubeconfig"]).read_text()))
    inline["persist_config"] = True
    assert isinstance(load_configuration(inline), kubeconfig.StaticConfiguration)


def test_no_current_context_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = kubeconfig_doc({"server": "https://h:1"}, {"token": "t"}, current=None)
    doc["contexts"].append({"name": "c2", "context": {"cluster": "k1"}})
    path = str(write(tmp_path / "kc", doc))
    wanted = f"Cannot load the Kubernetes configuration: the kubeconfig {path} sets no current-context: set the "
    wanted += "context option (K8S_AUTH_CONTEXT) to one of its contexts (c1, c2)."
    with pytest.raises(errors.ConfigError, match=re.escape(wanted)):
        load_configuration(params(kubeconfig=path))
    with pytest.raises(errors.ConfigError, match="given as a dictionary sets no current-context"):
        load_configuration(params(kubeconfig=doc))
    set_kubeconfig_env(monkeypatch, path)  # the default kubeconfig: its error, not "no connection configured"
    with pytest.raises(errors.ConfigError, match="sets no current-context"):
        load_configuration(params())
    assert load_configuration(params(context="c2")).host == "https://h:1"
    write(Path(path), doc | {"current-context": ""})  # kubectl's "not set"
    with pytest.raises(errors.ConfigError, match="sets no current-context"):
        load_configuration(params(kubeconfig=path))
    official_only(monkeypatch)  # the official loader fails too, in its words
    with pytest.raises(errors.ConfigError, match=r"Cannot load the Kubernetes configuration: .*current-context"):
        load_configuration(params(kubeconfig=doc))


def test_errors_of_a_kubeconfig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = token_and_relative_ca(tmp_path)["kubeconfig"]
    with pytest.raises(errors.ConfigError, match=re.escape("has no context named 'nope' (its contexts: c1).")):
        load_configuration(params(kubeconfig=path, context="nope"))
    doc = yaml.safe_load(Path(path).read_text())
    doc["contexts"][0]["context"]["cluster"] = "gone"
    with pytest.raises(errors.ConfigError, match="names the cluster 'gone', which the kubeconfig given as a dict"):
        load_configuration(params(kubeconfig=doc))
    (tmp_path / "kube" / "ca.crt").unlink()
    with pytest.raises(errors.ConfigError) as quick:
        load_configuration(params(kubeconfig=path))
    official_only(monkeypatch)
    with pytest.raises(errors.ConfigError) as official:
        load_configuration(params(kubeconfig=path))
    wanted = f"Cannot load the Kubernetes configuration: File does not exist: {tmp_path / 'kube' / 'ca.crt'}"
    assert quick.value.msg == official.value.msg == wanted


def test_context_option_without_any_kubeconfig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(errors.ConfigError, match=r"Cannot load the Kubernetes configuration: .*No configuration found"):
        load_configuration(params(context="c1"))
    # a broken default kubeconfig gives way to the options' host, as before
    set_kubeconfig_env(
        monkeypatch, str(write(tmp_path / "kc", kubeconfig_doc({"server": "https://h:1"}, {}, current=None)))
    )
    cfg = load_configuration(params(host="https://from-options:1"))
    assert (cfg.host, cfg.auth_settings()) == ("https://from-options:1", {})


def service_account(tmp: Path, monkeypatch: pytest.MonkeyPatch, host: str = "10.96.0.1") -> tuple[Path, Path]:
    from kubernetes.config import incluster_config

    token, ca = write(tmp / "token", "sa-token-1"), write(tmp / "ca.crt", CA)
    for module in (kubeconfig, incluster_config):
        monkeypatch.setattr(module, "SERVICE_TOKEN_FILENAME", str(token))
        monkeypatch.setattr(module, "SERVICE_CERT_FILENAME", str(ca))
    monkeypatch.delenv("KUBECONFIG")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", host)
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    return token, ca


@pytest.mark.parametrize("host", ["10.96.0.1", "fd00::1"])
def test_in_cluster_as_the_official_loader(host: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    service_account(tmp_path, monkeypatch, host)
    quick, official = both({}, monkeypatch)
    assert quick == official
    assert ("authorization", "bearer sa-token-1") in quick["headers"]


def test_in_cluster_token_is_read_again_every_minute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    token, _ca = service_account(tmp_path, monkeypatch)
    cfg = load_configuration(params())
    client, hook = Client(cfg), cfg.refresh_api_key_hook
    assert 59 < hook.expires - time.monotonic() <= kubeconfig.TOKEN_REFRESH_SECONDS
    token.write_text("sa-token-2")
    assert client._headers(None)["authorization"] == "bearer sa-token-1"
    hook.expires = time.monotonic() - 1  # a minute later
    assert client._headers(None)["authorization"] == "bearer sa-token-2"
    assert hook.expires > time.monotonic() + 59
    token.write_text("")
    hook.expires = time.monotonic() - 1
    with pytest.raises(errors.ConfigError, match="service account token"):
        client._headers(None)


def test_in_cluster_without_its_files_goes_to_the_official_loader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token, _ca = service_account(tmp_path, monkeypatch)
    token.unlink()
    with pytest.raises(errors.ConfigError, match="Service token file does not exist"):
        load_configuration(params())


def test_a_kubeconfig_with_certificate_data_connects_with_mutual_tls(tmp_path: Path) -> None:
    """End to end: the written CA, client certificate and key work with a server that wants a client certificate."""
    from support.node_agent import issue

    ca = issue("test-ca")
    server_cert, server_key = issue("127.0.0.1", ca, ips=["127.0.0.1"]).write(tmp_path, "server")
    client_identity = issue("admin", ca)
    client_cert, client_key = client_identity.write(tmp_path, "client")
    ca_file = ca.write(tmp_path, "ca")[0]
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(server_cert), str(server_key))
    context.load_verify_locations(str(ca_file))
    context.verify_mode = ssl.CERT_REQUIRED
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    peers: list[Any] = []

    def serve() -> None:
        conn = listener.accept()[0]
        with context.wrap_socket(conn, server_side=True) as tls:
            peers.append(tls.getpeercert()["subject"])
            peers.append(b"Bearer tok" in tls.recv(65536))
            body = b'{"gitVersion": "v1.36.3"}'
            tls.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    cluster = {"server": f"https://127.0.0.1:{port}", "certificate-authority-data": b64(ca_file.read_bytes())}
    user = {
        "token": "tok",
        "client-certificate-data": b64(client_cert.read_bytes()),
        "client-key-data": b64(client_key.read_bytes()),
    }
    try:
        cfg = load_configuration(params(kubeconfig=kubeconfig_doc(cluster, user)))
        assert isinstance(cfg, kubeconfig.StaticConfiguration)
        assert Client(cfg).server_version()["gitVersion"] == "v1.36.3"
        thread.join(10)
        assert peers == [((("commonName", "admin"),),), True]
    finally:
        listener.close()
