# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Connection options shared by every module and plugin of the collection."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  kubeconfig:
    description:
      - Path to a kubeconfig file, or the kubeconfig itself as a dictionary.
      - When neither this, O(context) nor O(host) with credentials is given, the module uses the in-cluster
        service account when it runs in a pod, else the default kubeconfig (E(KUBECONFIG) or C(~/.kube/config)).
      - Can also be set with the E(K8S_AUTH_KUBECONFIG) environment variable.
    type: raw
  context:
    description:
      - The kubeconfig context to use.
      - Can also be set with the E(K8S_AUTH_CONTEXT) environment variable.
    type: str
  host:
    description:
      - URL of the Kubernetes API server, for example V(https://10.0.0.1:6443).
      - With O(api_key), O(username)/O(password) or O(client_cert) it is used without any kubeconfig;
        otherwise it overrides the server of the kubeconfig.
      - Can also be set with the E(K8S_AUTH_HOST) environment variable (set by the AWX/AAP
        Kubernetes bearer token credential).
    type: str
  api_key:
    description:
      - Bearer token for the API server.
      - Can also be set with the E(K8S_AUTH_API_KEY) environment variable.
    type: str
  username:
    description:
      - Username for HTTP basic authentication.
      - Can also be set with the E(K8S_AUTH_USERNAME) environment variable.
    type: str
  password:
    description:
      - Password for HTTP basic authentication.
      - Can also be set with the E(K8S_AUTH_PASSWORD) environment variable.
    type: str
  validate_certs:
    description:
      - Whether to verify the API server's TLS certificate.
      - Defaults to the kubeconfig's setting, else V(true).
      - Can also be set with the E(K8S_AUTH_VERIFY_SSL) environment variable.
    type: bool
    aliases: [verify_ssl]
  ca_cert:
    description:
      - Path to a CA certificate bundle that signed the API server's certificate.
      - Can also be set with the E(K8S_AUTH_SSL_CA_CERT) environment variable.
    type: path
    aliases: [ssl_ca_cert]
  client_cert:
    description:
      - Path to a client certificate for mutual TLS authentication.
      - Can also be set with the E(K8S_AUTH_CERT_FILE) environment variable.
    type: path
    aliases: [cert_file]
  client_key:
    description:
      - Path to the private key of O(client_cert).
      - Can also be set with the E(K8S_AUTH_KEY_FILE) environment variable.
    type: path
    aliases: [key_file]
  proxy:
    description:
      - URL of an HTTP proxy to reach the API server through.
      - Can also be set with the E(K8S_AUTH_PROXY) environment variable.
    type: str
  no_proxy:
    description:
      - Hosts reached without O(proxy), comma separated (host names, domain suffixes such as V(.example.com), IP
        addresses, or V(*)); when the API server's host matches, the proxy is not used.
      - Can also be set with the E(K8S_AUTH_NO_PROXY) environment variable.
    type: str
  proxy_headers:
    description:
      - Headers for O(proxy).
    type: dict
    suboptions:
      proxy_basic_auth:
        description:
          - C(user:password) for the proxy's basic authentication.
        type: str
      basic_auth:
        description:
          - C(user:password) for basic authentication.
        type: str
      user_agent:
        description:
          - The User-Agent sent to the proxy.
        type: str
  impersonate_user:
    description:
      - Act as this user (the API server checks that the credential may impersonate it).
      - Can also be set with the E(K8S_AUTH_IMPERSONATE_USER) environment variable.
    type: str
  impersonate_groups:
    description:
      - Act with these groups; needs O(impersonate_user).
      - Can also be set with the E(K8S_AUTH_IMPERSONATE_GROUPS) environment variable (comma separated).
    type: list
    elements: str
  persist_config:
    description:
      - Write tokens that the kubeconfig's auth provider refreshes back to the kubeconfig file.
      - Can also be set with the E(K8S_AUTH_PERSIST_CONFIG) environment variable.
    type: bool
notes:
  - The connection options have the names and environment variables of C(kubernetes.core), so the same
    C(module_defaults) values and AWX/AAP credentials work. Set them once for every module of this
    collection with C(module_defaults) and the action group C(group/nodeops.maintenance.k8s), which also reaches
    the modules of C(kubernetes.core)'s C(k8s) group. The connection options set for C(group/kubernetes.core.k8s)
    or C(group/k8s) reach the modules too, where neither the task nor C(group/nodeops.maintenance.k8s) sets them.
  - Options given to the task win over the environment variables.
requirements:
  - kubernetes >= 24.2.0 (the official Python client)
"""
