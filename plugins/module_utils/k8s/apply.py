# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Server-side apply and deletion of whole manifests, for the ``apply`` module.

The pure part (reading ``definition``, telling a real change from a no-op, reading a CRD's
conditions) is kept in plain functions; :class:`Applier` does the calls through :class:`Client`.

Change detection: a real apply changed the object when the server wrote a new resourceVersion
*and* the object, minus status and bookkeeping (managedFields, resourceVersion, generation),
differs from what it was before. So a status write by a controller between our read and our apply
is not reported as our change. Check mode compares the server's dry-run answer the same way.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..core.node.errors import NodeopsError
from .client import CRDS, KNOWN_RESOURCES, Client, Resource
from .errors import Conflict, K8sError, MissingResourceType, NotFound, UIDMismatch

CRD_API_VERSION = "apiextensions.k8s.io/v1"
POLL_INTERVAL = 0.5

# Metadata the server rewrites on every write; not part of "what the object says".
_VOLATILE_METADATA = ("managedFields", "resourceVersion", "generation")


class ManifestError(NodeopsError, ValueError):
    """``definition`` is not a usable list of manifests; raised before the first API call."""


class ApplyError(NodeopsError):
    """A manifest could not be applied, deleted or waited for. ``results`` holds what was done before."""

    def __init__(self, msg: str, cause: K8sError | None = None, results: list[dict[str, Any]] | None = None) -> None:
        super().__init__(msg)
        self.msg = msg
        self.cause = cause
        self.results = results or []


@dataclass
class Manifest:
    """One object to apply, as given by the user, with where it came from (1-based position)."""

    position: int
    body: dict[str, Any]

    @property
    def api_version(self) -> str:
        return str(self.body["apiVersion"])

    @property
    def kind(self) -> str:
        return str(self.body["kind"])

    @property
    def name(self) -> str:
        return str(self.body["metadata"]["name"])

    @property
    def namespace(self) -> str | None:
        return self.body["metadata"].get("namespace") or None

    @property
    def is_crd(self) -> bool:
        return self.kind == "CustomResourceDefinition" and self.api_version == CRD_API_VERSION

    @property
    def label(self) -> str:
        where = f" in namespace {self.namespace}" if self.namespace else ""
        return f"{self.kind}/{self.name}{where} (definition item {self.position})"


# -- pure helpers ----------------------------------------------------------------------------
def _flatten(value: Any, out: list[Any]) -> None:
    if isinstance(value, (list, tuple)):
        for item in value:
            _flatten(item, out)
    elif isinstance(value, str):
        try:
            import yaml
        except ImportError as exc:  # PyYAML comes with ansible-core and kubernetes; be clear anyway
            raise ManifestError("definition is a string but PyYAML is not installed to parse it") from exc
        try:
            docs = list(yaml.safe_load_all(value))
        except yaml.YAMLError as exc:
            raise ManifestError(f"definition is a string that is not valid YAML: {exc}") from exc
        for doc in docs:
            _flatten(doc, out)
    elif value is None:
        return  # an empty YAML document
    else:
        out.append(value)


def load_manifests(definition: Any, default_namespace: str | None = None) -> list[Manifest]:
    """Turn ``definition`` (a dict, a YAML string, or a list of them, nested lists allowed) into manifests.

    ``kind: List`` objects are expanded into their items. Every manifest needs apiVersion, kind and
    metadata.name. ``default_namespace`` fills metadata.namespace where it is missing (it is removed
    again later for cluster-scoped kinds).
    """
    items: list[Any] = []
    _flatten(definition, items)
    expanded: list[Any] = []
    for item in items:
        if isinstance(item, dict) and item.get("kind") == "List" and isinstance(item.get("items"), list):
            expanded.extend(i for i in item["items"] if i is not None)
        else:
            expanded.append(item)
    if not expanded:
        raise ManifestError("definition holds no manifest; give a dict, a list of dicts or YAML documents")

    manifests: list[Manifest] = []
    for position, item in enumerate(expanded, start=1):
        where = f"definition item {position}"
        if not isinstance(item, dict):
            raise ManifestError(f"{where} is a {type(item).__name__}, not a mapping (a Kubernetes object)")
        missing = [key for key in ("apiVersion", "kind") if not isinstance(item.get(key), str) or not item.get(key)]
        metadata = item.get("metadata")
        if not isinstance(metadata, dict) or not isinstance(metadata.get("name"), str) or not metadata.get("name"):
            missing.append("metadata.name")
        if missing:
            name = metadata.get("name") if isinstance(metadata, dict) else None
            shown = f"{item.get('kind') or '?'}/{name or '?'}"
            raise ManifestError(
                f"{where} ({shown}) has no {', '.join(missing)}; server-side apply needs apiVersion, kind and "
                "metadata.name (generateName is not supported)"
            )
        body = copy.deepcopy(item)
        if default_namespace and not body["metadata"].get("namespace"):
            body["metadata"]["namespace"] = default_namespace
        manifests.append(Manifest(position, body))
    return manifests


def without_managed_fields(obj: dict[str, Any] | None) -> dict[str, Any]:
    """A copy of ``obj`` for diffs: no managedFields (noise of server-side apply)."""
    if not obj:
        return {}
    out = copy.deepcopy(obj)
    (out.get("metadata") or {}).pop("managedFields", None)
    return out


def comparable(obj: dict[str, Any] | None) -> dict[str, Any]:
    """What the object says, without status and the metadata every write changes."""
    if not obj:
        return {}
    out = copy.deepcopy(obj)
    out.pop("status", None)
    meta = out.get("metadata") or {}
    for key in _VOLATILE_METADATA:
        meta.pop(key, None)
    return out


def really_changed(before: dict[str, Any] | None, after: dict[str, Any], dry_run: bool) -> bool:
    """Whether the apply that turned ``before`` into ``after`` changed anything a user would see."""
    if before is None:
        return True
    if not dry_run:
        rv_before = (before.get("metadata") or {}).get("resourceVersion")
        rv_after = (after.get("metadata") or {}).get("resourceVersion")
        if rv_before and rv_before == rv_after:
            return False
    return comparable(before) != comparable(after)


def crd_state(crd: dict[str, Any]) -> tuple[str, str]:
    """('established' | 'failed' | 'pending', detail) from a CRD's status conditions."""
    conditions = {c.get("type"): c for c in (crd.get("status") or {}).get("conditions") or []}
    names = conditions.get("NamesAccepted")
    if names and names.get("status") == "False":
        return "failed", f"its names were not accepted: {names.get('message') or names.get('reason')}"
    established = conditions.get("Established")
    if established and established.get("status") == "True":
        return "established", ""
    if established:
        return "pending", f"Established is {established.get('status')}: {established.get('message') or ''}".strip()
    return "pending", "no Established condition yet"


def crd_kinds(crd: dict[str, Any]) -> set[tuple[str, str]]:
    """The (apiVersion, kind) pairs a CRD manifest serves."""
    spec = crd.get("spec") or {}
    group = spec.get("group")
    kind = (spec.get("names") or {}).get("kind")
    if not group or not kind:
        return set()
    return {(f"{group}/{v.get('name')}", kind) for v in spec.get("versions") or [] if v.get("served", True)}


def result_entry(manifest: Manifest, namespace: str | None, changed: bool, action: str) -> dict[str, Any]:
    return {
        "apiVersion": manifest.api_version,
        "kind": manifest.kind,
        "name": manifest.name,
        "namespace": namespace,
        "changed": changed,
        "action": action,
    }


# -- I/O -------------------------------------------------------------------------------------
@dataclass
class Applier:
    """Applies or deletes manifests one after the other through one client."""

    client: Client
    field_manager: str = "nodeops.maintenance"
    force_conflicts: bool = False
    check_mode: bool = False
    wait: bool = True
    wait_timeout: float = 60.0
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    results: list[dict[str, Any]] = field(default_factory=list)
    diffs: list[dict[str, Any]] = field(default_factory=list)
    # Check mode: kinds and namespaces that this run would create, so that objects depending on
    # them are reported as "would be created" instead of failing the dry run.
    _pending_kinds: set[tuple[str, str]] = field(default_factory=set)
    _pending_namespaces: set[str] = field(default_factory=set)
    _resources: dict[tuple[str, str], Resource] = field(default_factory=dict)

    # public ------------------------------------------------------------------------------
    def present(self, manifests: list[Manifest]) -> None:
        self._precheck(manifests, present=True)
        for manifest in manifests:
            self._apply_one(manifest)

    def absent(self, manifests: list[Manifest]) -> None:
        """Delete in reverse order: objects listed after the things they need go first."""
        self._precheck(manifests, present=False)
        for manifest in reversed(manifests):
            self._delete_one(manifest)

    # helpers -----------------------------------------------------------------------------
    def _fail(self, manifest: Manifest, what: str, cause: K8sError | None = None) -> ApplyError:
        return ApplyError(f"{manifest.label}: {what}", cause, self.results)

    def _precheck(self, manifests: list[Manifest], present: bool) -> None:
        """Check before the first write that every kind is served, or comes with a CRD listed in the same
        definition, and that every namespaced object has a namespace."""
        from_crds: set[tuple[str, str]] = set()
        for manifest in manifests:
            if manifest.is_crd:
                from_crds |= crd_kinds(manifest.body)
        for manifest in manifests:
            key = (manifest.api_version, manifest.kind)
            res = KNOWN_RESOURCES.get(key)
            if res is None and key not in from_crds:
                try:
                    res = self._resource(manifest)
                except MissingResourceType as exc:
                    if not present:
                        continue  # nothing of that kind can exist
                    raise self._fail(manifest, self._missing_type(manifest), exc) from exc
                except K8sError as exc:
                    raise self._fail(manifest, exc.msg, exc) from exc
            if res is not None and res.namespaced and not manifest.namespace:
                raise self._fail(
                    manifest, f"{manifest.kind} is namespaced: set metadata.namespace or the namespace option"
                )

    @staticmethod
    def _missing_type(manifest: Manifest) -> str:
        return (
            f"the API server does not serve {manifest.kind} in {manifest.api_version}; install its "
            "CustomResourceDefinition first (list the CRD earlier in the same definition, with wait: true)."
        )

    def _resource(self, manifest: Manifest) -> Resource:
        """Where the kind lives; discovered once per run (a kind that is not served is asked again later)."""
        key = (manifest.api_version, manifest.kind)
        if key not in self._resources:
            self._resources[key] = self.client.resource_for(manifest.api_version, manifest.kind)
        return self._resources[key]

    def _resolve(self, manifest: Manifest) -> tuple[Resource, dict[str, Any], str | None]:
        """The Resource, the body to send and the namespace (None for cluster-scoped kinds)."""
        res = self._resource(manifest)
        body = copy.deepcopy(manifest.body)
        if res.namespaced:
            if not manifest.namespace:
                raise self._fail(
                    manifest, f"{manifest.kind} is namespaced: set metadata.namespace or the namespace option"
                )
            return res, body, manifest.namespace
        body["metadata"].pop("namespace", None)
        return res, body, None

    def _get(self, res: Resource, name: str, namespace: str | None) -> dict[str, Any] | None:
        try:
            return self.client.get(res, name, namespace)
        except NotFound:
            return None

    def _record(
        self, entry: dict[str, Any], before: dict[str, Any] | None, after: dict[str, Any] | None, label: str
    ) -> None:
        self.results.append(entry)
        if not entry["changed"]:
            return  # identical before and after: nothing to show, and CRDs are long
        self.diffs.append(
            {
                "before": without_managed_fields(before),
                "after": without_managed_fields(after),
                "before_header": label,
                "after_header": label,
            }
        )

    def _record_would_create(self, manifest: Manifest, namespace: str | None) -> None:
        """Check mode: its CRD or namespace exists only in this dry run, so the server cannot dry-run it."""
        self._record(result_entry(manifest, namespace, True, "created"), None, manifest.body, manifest.label)

    # present -----------------------------------------------------------------------------
    def _apply_one(self, manifest: Manifest) -> None:
        if self.check_mode and (manifest.api_version, manifest.kind) in self._pending_kinds:
            self._record_would_create(manifest, manifest.namespace)
            return
        try:
            res, body, namespace = self._resolve(manifest)
            if self.check_mode and namespace in self._pending_namespaces:
                self._record_would_create(manifest, namespace)
                return
            before = self._get(res, manifest.name, namespace)
            after = self.client.apply(
                res, body, field_manager=self.field_manager, force=self.force_conflicts, dry_run=self.check_mode
            )
        except Conflict as exc:
            raise self._fail(
                manifest,
                f"{exc.msg}. Other field managers own these fields; set force_conflicts: true to take them over.",
                exc,
            ) from exc
        except MissingResourceType as exc:
            raise self._fail(manifest, self._missing_type(manifest), exc) from exc
        except K8sError as exc:
            raise self._fail(manifest, exc.msg, exc) from exc

        if before is None:
            changed, action = True, "created"
        else:
            changed = really_changed(before, after, self.check_mode)
            action = "updated" if changed else "unchanged"

        if manifest.is_crd:
            if self.check_mode and before is None:
                self._pending_kinds |= crd_kinds(body)
            elif self.wait and not self.check_mode:
                self._wait_established(manifest)
        if manifest.kind == "Namespace" and manifest.api_version == "v1" and self.check_mode and before is None:
            self._pending_namespaces.add(manifest.name)

        self._record(result_entry(manifest, namespace, changed, action), before, after, manifest.label)

    def _wait_established(self, manifest: Manifest) -> None:
        deadline = self.clock() + self.wait_timeout
        detail = ""
        while True:
            try:
                crd = self.client.get(CRDS, manifest.name)
            except K8sError as exc:
                raise self._fail(manifest, f"waiting for it to become Established: {exc.msg}", exc) from exc
            state, detail = crd_state(crd)
            if state == "established":
                return
            if state == "failed":
                raise self._fail(manifest, f"the CustomResourceDefinition cannot be served: {detail}")
            if self.clock() >= deadline:
                break
            self.sleep(POLL_INTERVAL)
        raise self._fail(
            manifest,
            f"the CustomResourceDefinition was not Established within {self.wait_timeout:g} s ({detail}); "
            "raise wait_timeout or check the API server's log",
        )

    # absent ------------------------------------------------------------------------------
    def _delete_one(self, manifest: Manifest) -> None:
        try:
            res, _body, namespace = self._resolve(manifest)
        except MissingResourceType:
            # The type is not served, so no object of it can exist.
            self._record(result_entry(manifest, manifest.namespace, False, "absent"), None, None, manifest.label)
            return
        except K8sError as exc:
            raise self._fail(manifest, exc.msg, exc) from exc
        try:
            before = self._get(res, manifest.name, namespace)
        except MissingResourceType:
            before = None
        except K8sError as exc:
            raise self._fail(manifest, exc.msg, exc) from exc
        if before is None:
            self._record(result_entry(manifest, namespace, False, "absent"), None, None, manifest.label)
            return

        if (before.get("metadata") or {}).get("deletionTimestamp"):
            changed, action = False, "absent"  # someone already deleted it; finalizers are running
        else:
            changed, action = True, "deleted"
            try:
                # In check mode a dry-run deletion checks RBAC and admission without deleting anything. The
                # deletion is of the object read (and shown as before): one made since under its name is not.
                uid = (before.get("metadata") or {}).get("uid")
                self.client.delete(res, manifest.name, namespace, dry_run=self.check_mode, uid=uid)
            except NotFound:
                changed, action = False, "absent"
            except UIDMismatch as exc:
                raise self._fail(
                    manifest,
                    f"{exc.msg}. It was deleted and made again while this task ran; nothing was deleted. Run again"
                    " to delete the new one.",
                    exc,
                ) from exc
            except K8sError as exc:
                raise self._fail(manifest, exc.msg, exc) from exc
        if self.wait and not self.check_mode:
            self._wait_gone(manifest, res, namespace)
        self._record(result_entry(manifest, namespace, changed, action), before, None, manifest.label)

    def _wait_gone(self, manifest: Manifest, res: Resource, namespace: str | None) -> None:
        deadline = self.clock() + self.wait_timeout
        current: dict[str, Any] | None = None
        while True:
            try:
                current = self._get(res, manifest.name, namespace)
            except MissingResourceType:
                return
            except K8sError as exc:
                raise self._fail(manifest, f"waiting for it to be gone: {exc.msg}", exc) from exc
            if current is None:
                return
            if self.clock() >= deadline:
                break
            self.sleep(POLL_INTERVAL)
        finalizers = (current.get("metadata") or {}).get("finalizers") or (current.get("spec") or {}).get("finalizers")
        hint = f" (finalizers still set: {', '.join(finalizers)})" if finalizers else ""
        raise self._fail(
            manifest,
            f"still there {self.wait_timeout:g} s after the delete{hint}; raise wait_timeout, or set wait: false "
            "to return as soon as the deletion has started",
        )


__all__ = [
    "Applier",
    "ApplyError",
    "Manifest",
    "ManifestError",
    "comparable",
    "crd_kinds",
    "crd_state",
    "load_manifests",
    "really_changed",
    "without_managed_fields",
]
