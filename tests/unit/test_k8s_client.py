"""Unit tests of the client layer: option resolution, configuration, error mapping (no API server)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import yaml
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s import errors
from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.client import (
    AUTH_ARG_SPEC,
    NODE_MAINTENANCES,
    NODES,
    PODS,
    Client,
    auth_params_from_env,
    load_configuration,
)


def empty_params() -> dict[str, object]:
    return dict.fromkeys(AUTH_ARG_SPEC)


def test_env_fills_only_unset_options() -> None:
    params = empty_params() | {"host": "https://from-task:6443"}
    env = {
        "K8S_AUTH_HOST": "https://from-env:6443",
        "K8S_AUTH_API_KEY": "tok",
        "K8S_AUTH_VERIFY_SSL": "False",
        "K8S_AUTH_SSL_CA_CERT": "~/ca.crt",
    }
    out = auth_params_from_env(params, env)
    assert out["host"] == "https://from-task:6443"
    assert out["api_key"] == "tok"
    assert out["validate_certs"] is False
    assert out["ca_cert"] == str(Path("~/ca.crt").expanduser())


def test_env_bool_that_is_not_a_bool_is_a_config_error() -> None:
    with pytest.raises(errors.ConfigError, match="K8S_AUTH_VERIFY_SSL='maybe' is not a boolean"):
        auth_params_from_env(empty_params(), {"K8S_AUTH_VERIFY_SSL": "maybe"})


def test_every_option_has_the_kubernetes_core_env_name() -> None:
    assert {spec["env"] for spec in AUTH_ARG_SPEC.values()} >= {
        "K8S_AUTH_HOST",
        "K8S_AUTH_API_KEY",
        "K8S_AUTH_VERIFY_SSL",
        "K8S_AUTH_SSL_CA_CERT",
        "K8S_AUTH_KUBECONFIG",
        "K8S_AUTH_CONTEXT",
    }
    assert AUTH_ARG_SPEC["api_key"]["no_log"] and AUTH_ARG_SPEC["password"]["no_log"]


def test_host_and_token_need_no_kubeconfig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    cfg = load_configuration(empty_params() | {"host": "https://127.0.0.1:1/", "api_key": "abc"})
    assert cfg.host == "https://127.0.0.1:1"
    assert Client(cfg)._headers(None)["authorization"] == "Bearer abc"


def write_kubeconfig(path: Path, server: str, token: str, context: str = "c1") -> None:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "k", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
                "users": [{"name": "u", "user": {"token": token}}],
                "contexts": [{"name": context, "context": {"cluster": "k", "user": "u"}}],
                "current-context": context,
            }
        )
    )


def test_kubeconfig_file_and_overrides(tmp_path: Path) -> None:
    kc = tmp_path / "kc"
    write_kubeconfig(kc, "https://10.9.9.9:6443", "kctoken")
    cfg = load_configuration(empty_params() | {"kubeconfig": str(kc)})
    assert cfg.host == "https://10.9.9.9:6443"
    assert Client(cfg)._headers(None)["authorization"] == "Bearer kctoken"
    cfg = load_configuration(empty_params() | {"kubeconfig": str(kc), "api_key": "override", "host": "https://x:1"})
    assert cfg.host == "https://x:1"
    assert Client(cfg)._headers(None)["authorization"] == "Bearer override"


def test_kubeconfig_as_dict(tmp_path: Path) -> None:
    kc = tmp_path / "kc"
    write_kubeconfig(kc, "https://10.1.1.1:6443", "t")
    cfg = load_configuration(empty_params() | {"kubeconfig": yaml.safe_load(kc.read_text())})
    assert cfg.host == "https://10.1.1.1:6443"


def test_missing_kubeconfig_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(errors.ConfigError, match="does not exist"):
        load_configuration(empty_params() | {"kubeconfig": str(tmp_path / "nope")})


def test_unknown_context_is_a_config_error(tmp_path: Path) -> None:
    kc = tmp_path / "kc"
    write_kubeconfig(kc, "https://10.1.1.1:6443", "t")
    with pytest.raises(errors.ConfigError, match="Cannot load the Kubernetes configuration"):
        load_configuration(empty_params() | {"kubeconfig": str(kc), "context": "nope"})


def test_nothing_configured_says_what_to_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(errors.ConfigError, match="No Kubernetes connection configured"):
        load_configuration(empty_params())


def test_missing_ca_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(errors.ConfigError, match="ca_cert file"):
        load_configuration(empty_params() | {"host": "https://h:1", "api_key": "t", "ca_cert": str(tmp_path / "x")})


def test_basic_auth_header() -> None:
    cfg = load_configuration(empty_params() | {"host": "https://h:1", "username": "ann", "password": "pw"})
    assert Client(cfg)._headers(None)["Authorization"].startswith("Basic ")


def test_impersonation_sends_one_header_line_per_group(monkeypatch: pytest.MonkeyPatch) -> None:
    params = {"host": "https://h:1", "api_key": "t", "impersonate_user": "ann", "impersonate_groups": ["a", "b"]}
    headers = Client(load_configuration(empty_params() | params))._headers(None)
    assert headers["Impersonate-User"] == "ann"
    assert [v for k, v in headers.items() if k == "Impersonate-Group"] == ["a", "b"]
    assert "Impersonate-User" not in Client(load_configuration(empty_params() | {"host": "https://h:1"}))._headers(None)
    with pytest.raises(errors.ConfigError, match="impersonate_groups needs impersonate_user"):
        load_configuration(empty_params() | {"host": "https://h:1", "impersonate_groups": ["a"]})
    env = {"K8S_AUTH_IMPERSONATE_USER": "bob", "K8S_AUTH_IMPERSONATE_GROUPS": "x, y"}
    out = auth_params_from_env(empty_params(), env)
    assert (out["impersonate_user"], out["impersonate_groups"]) == ("bob", ["x", "y"])


@pytest.mark.parametrize(
    ("no_proxy", "direct"),
    [(None, False), ("other.example", False), ("127.0.0.1", True), (".example.com", True), ("*", True)],
)
def test_no_proxy_reaches_a_listed_api_server_directly(no_proxy: str | None, direct: bool) -> None:
    import urllib3

    host = "https://127.0.0.1:6443" if no_proxy in ("127.0.0.1", None, "other.example") else "https://api.example.com"
    params = {"host": host, "api_key": "t", "proxy": "http://proxy:3128", "no_proxy": no_proxy}
    params["proxy_headers"] = {"proxy_basic_auth": "u:p", "user_agent": "me"}
    client = Client(load_configuration(empty_params() | params))
    assert isinstance(client._pool, urllib3.ProxyManager) is not direct
    if not direct:
        assert client._pool.proxy_headers["proxy-authorization"].startswith("Basic ")
        assert client._pool.proxy_headers["user-agent"] == "me"


def test_persist_config_is_passed_to_the_kubeconfig_loader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kubernetes import config as k8s_config

    seen: list[bool] = []
    real = k8s_config.load_kube_config

    def loader(*args: object, persist_config: bool = True, **kwargs: object) -> None:
        seen.append(persist_config)
        real(*args, persist_config=persist_config, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(k8s_config, "load_kube_config", loader)
    kc = tmp_path / "kc"
    write_kubeconfig(kc, "https://10.1.1.1:6443", "t")
    load_configuration(empty_params() | {"kubeconfig": str(kc)})  # a static token: read without the package
    load_configuration(empty_params() | {"kubeconfig": str(kc), "persist_config": True})
    assert seen == [True]
    # a user whose token an auth provider refreshes (and persist_config writes back) is the official loader's
    doc = yaml.safe_load(kc.read_text())
    doc["users"][0]["user"] = {"auth-provider": {"name": "oidc", "config": {"id-token": "a.b.c"}}}
    kc.write_text(yaml.safe_dump(doc))
    load_configuration(empty_params() | {"kubeconfig": str(kc)})
    assert seen == [True, False]


@pytest.mark.parametrize(
    ("status", "body", "cls", "text"),
    [
        (401, {"message": "Unauthorized"}, errors.Unauthorized, "rejected the credentials"),
        (403, {"message": "nodes is forbidden"}, errors.Forbidden, "Grant the user RBAC"),
        (404, {"reason": "NotFound", "details": {"name": "n1", "kind": "nodes"}}, errors.NotFound, "Not found"),
        (
            404,
            {"reason": "NotFound", "message": "the server could not find the requested resource"},
            errors.MissingResourceType,
            "nodeops.maintenance.crds",
        ),
        (404, "404 page not found", errors.MissingResourceType, "resource type is not installed"),
        (409, {"message": "the object has been modified"}, errors.Conflict, "Conflict"),
        (422, {"message": "spec.requestorID: Invalid value"}, errors.Invalid, "rejected"),
        (500, {"message": "boom"}, errors.K8sError, "HTTP 500"),
    ],
)
def test_error_mapping(status: int, body: dict[str, object] | str, cls: type, text: str) -> None:
    import json

    client = Client(load_configuration(empty_params() | {"host": "https://h:1", "api_key": "t"}))
    err = client._error(status, body if isinstance(body, str) else json.dumps(body), "GET", "/x", "")
    assert err.__class__ is cls
    assert text in err.msg
    assert err.to_result()["status"] == status


def test_unreachable_api_says_so() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = Client(load_configuration(empty_params() | {"host": f"https://127.0.0.1:{port}", "api_key": "t"}))
    with (
        client.retrying_until(0.0),  # a deadline already past: no second attempt
        pytest.raises(errors.Unreachable, match=f"Cannot reach the Kubernetes API at https://127.0.0.1:{port}"),
    ):
        client.server_version()
    assert client.retried == 0


def test_resource_paths() -> None:
    assert NODES.path(name="n1") == "/api/v1/nodes/n1"
    assert PODS.path("ns", "p", "eviction") == "/api/v1/namespaces/ns/pods/p/eviction"
    assert PODS.path() == "/api/v1/pods"
    assert NODE_MAINTENANCES.path("default", "a/b") == (
        "/apis/maintenance.nvidia.com/v1alpha1/namespaces/default/nodemaintenances/a%2Fb"
    )


def test_inline_kubeconfig_secrets_are_found() -> None:
    from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.module import kubeconfig_secrets

    kubeconfig = {
        "users": [
            {"name": "a", "user": {"token": "tok", "client-certificate-data": "public"}},
            {"name": "b", "user": {"password": "pw", "username": "ann", "client-key-data": "key"}},
            {"name": "c", "user": {"auth-provider": {"config": {"id-token": "idt", "refresh-token": "rt"}}}},
            {"name": "d"},
        ]
    }
    assert kubeconfig_secrets(kubeconfig) == {"tok", "pw", "key", "idt", "rt"}
    assert kubeconfig_secrets("/path/to/kubeconfig") == set()


def test_a_connection_that_ends_during_tls_is_retried_a_bad_certificate_is_not(tmp_path: Path) -> None:
    """A server going down or starting drops connections mid-handshake: retried. A wrong CA: not."""
    import ssl
    import threading

    from support.node_agent import issue

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    hangups = {"left": 2}
    ca = issue("test-ca")
    cert, key = issue("127.0.0.1", ca, ips=["127.0.0.1"]).write(tmp_path, "server")
    ca_file = ca.write(tmp_path, "ca")[0]
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cert), str(key))

    def serve() -> None:
        while True:
            try:
                conn, _peer = listener.accept()
            except OSError:
                return
            if hangups["left"] > 0:  # reads the ClientHello, then goes away
                hangups["left"] -= 1
                conn.recv(4096)
                conn.close()
                continue
            try:
                with context.wrap_socket(conn, server_side=True) as tls:
                    tls.recv(65536)
                    body = b'{"gitVersion": "v1.36.3"}'
                    head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body)
                    tls.sendall(head + body)
            except (OSError, ssl.SSLError):  # the client that does not trust this certificate hangs up
                continue

    threading.Thread(target=serve, daemon=True).start()
    try:
        params = empty_params() | {"host": f"https://127.0.0.1:{port}", "api_key": "t", "ca_cert": str(ca_file)}
        client = Client(load_configuration(params))
        assert client.server_version()["gitVersion"] == "v1.36.3"
        assert client.retried == 2
        stranger = issue("other-ca").write(tmp_path, "other")[0]
        other = Client(load_configuration(params | {"ca_cert": str(stranger)}))
        with pytest.raises(errors.Unreachable, match="Set ca_cert"):
            other.server_version()
        assert other.retried == 0
    finally:
        listener.close()


def test_a_kubeconfig_tls_server_name_is_the_name_checked_and_sent(tmp_path: Path) -> None:
    """tls-server-name of a kubeconfig cluster: the server's certificate is checked against it (not against the
    address) and it goes as SNI, as kubectl and the official client do."""
    import ssl
    import threading

    from support.node_agent import issue

    ca = issue("test-ca")
    cert, key = issue("kubernetes.default", ca).write(tmp_path, "server")  # no IP address in the certificate
    ca_file = ca.write(tmp_path, "ca")[0]
    names: list[str | None] = []
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cert), str(key))

    def sni(_sock: ssl.SSLObject, name: str | None, _ctx: ssl.SSLContext) -> None:
        names.append(name)

    context.sni_callback = sni
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        while True:
            try:
                conn, _peer = listener.accept()
            except OSError:
                return
            try:
                with context.wrap_socket(conn, server_side=True) as tls:
                    tls.recv(65536)
                    body = b'{"gitVersion": "v1.36.3"}'
                    tls.sendall(
                        b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body
                    )
            except (OSError, ssl.SSLError):
                continue

    threading.Thread(target=serve, daemon=True).start()
    cluster = {"server": f"https://127.0.0.1:{port}", "certificate-authority": str(ca_file)}
    doc = {
        "clusters": [{"name": "k", "cluster": cluster | {"tls-server-name": "kubernetes.default"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
        "current-context": "c",
    }
    try:
        client = Client(load_configuration(empty_params() | {"kubeconfig": doc}))
        with client.retrying_until(0.0):
            assert client.server_version()["gitVersion"] == "v1.36.3"
        assert names == ["kubernetes.default"]
        doc["clusters"][0]["cluster"] = cluster  # without it the address is checked, and does not match
        client = Client(load_configuration(empty_params() | {"kubeconfig": doc}))
        with client.retrying_until(0.0), pytest.raises(errors.Unreachable, match="Set ca_cert"):
            client.server_version()
    finally:
        listener.close()
