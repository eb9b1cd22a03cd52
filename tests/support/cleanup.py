"""Clean-up between integration tests that share one control plane."""

from __future__ import annotations

from kubernetes import client
from kubernetes.client.rest import ApiException

#: Namespaced custom resources whose objects carry a finalizer of ours or upstream's operators'.
FINALIZED = (
    ("maintenance.nvidia.com", "v1alpha1", "nodemaintenances"),
    ("self-node-remediation.medik8s.io", "v1alpha1", "selfnoderemediations"),
)


def drop_finalizers(api: client.ApiClient, namespace: str | None = None) -> None:
    """Remove the finalizers of the NodeMaintenances and SelfNodeRemediations of ``namespace`` (all when None), so
    that a test's namespace, or a CRD a later test deletes, can go: nothing reconciles them after their test."""
    objs = client.CustomObjectsApi(api)
    for group, version, plural in FINALIZED:
        try:
            if namespace is None:
                items = objs.list_cluster_custom_object(group, version, plural)["items"]
            else:
                items = objs.list_namespaced_custom_object(group, version, namespace, plural)["items"]
        except ApiException as err:
            if err.status == 404:  # the CRD is not installed
                continue
            raise
        for item in items:
            meta = item["metadata"]
            if not meta.get("finalizers"):
                continue
            try:
                objs.patch_namespaced_custom_object(
                    group, version, meta["namespace"], plural, meta["name"], {"metadata": {"finalizers": None}}
                )
            except ApiException as err:
                if err.status != 404:
                    raise
