# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Objects saved with ``kubectl get -o json`` (or ``-o yaml``), read from files for the offline modes.

A file holds one object, or a List of them (``kubectl get nodes,nodemaintenances -A -o json`` writes a
``List`` whose items carry their own ``kind``; the API's typed lists such as ``NodeList`` may leave it
out, so it is taken from the list's kind). The objects are returned by kind, in file order.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from ..core.node.errors import NodeopsError


class SnapshotError(NodeopsError, ValueError):
    """A snapshot file that cannot be used; the message names the file and says what to fix."""


def _load(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as err:
        raise SnapshotError(f"snapshot: cannot read {path}: {err.strerror or err}.") from err
    try:
        return json.loads(text)
    except ValueError as json_err:
        try:
            import yaml  # only YAML files need it (ansible-core brings PyYAML)
        except ImportError:  # pragma: no cover - present wherever ansible-core is
            raise SnapshotError(f"snapshot: {path} is not JSON ({json_err}).") from None
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as err:
            raise SnapshotError(
                f"snapshot: {path} is neither JSON nor YAML ({err}); save it with 'kubectl get ... -o json'."
            ) from None


def read(paths: Iterable[str]) -> dict[str, list[dict[str, Any]]]:
    """The objects of the files ``paths`` by kind. SnapshotError for a missing or unreadable file, one that is not
    JSON or YAML, or an object without a kind."""
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for path in paths:
        data = _load(path)
        if not isinstance(data, Mapping):
            raise SnapshotError(
                f"snapshot: {path} holds a {type(data).__name__}, not a Kubernetes object or List; save it with "
                "'kubectl get ... -o json'."
            )
        kind = data.get("kind")
        if isinstance(data.get("items"), list):
            default = kind[: -len("List")] if isinstance(kind, str) and kind.endswith("List") and kind != "List" else ""
            items = data["items"]
        else:
            default, items = "", [data]
        for index, item in enumerate(items):
            if not isinstance(item, Mapping):
                raise SnapshotError(f"snapshot: {path}: item {index} is not an object.")
            item_kind = item.get("kind") or default
            if not isinstance(item_kind, str) or not item_kind:
                raise SnapshotError(
                    f"snapshot: {path}: item {index} has no kind; save the objects with 'kubectl get ... -o json', "
                    "which writes it."
                )
            by_kind.setdefault(item_kind, []).append(dict(item))
    return by_kind
