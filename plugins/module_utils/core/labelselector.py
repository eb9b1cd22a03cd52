# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Kubernetes label selectors (``matchLabels`` and ``matchExpressions``) evaluated on label dicts.

Pure, standard library only. Semantics of ``metav1.LabelSelector``: all requirements must hold; an
empty selector matches everything; ``NotIn`` and ``DoesNotExist`` hold for a missing key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .node.errors import NodeopsError

OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


class SelectorError(NodeopsError, ValueError):
    """A malformed selector; the message names the field."""


def validate(selector: Mapping[str, Any] | None, field: str = "selector") -> None:
    """Raise SelectorError for a selector Kubernetes would refuse."""
    if selector is None:
        return
    if not isinstance(selector, Mapping):
        raise SelectorError(f"{field}: must be a mapping with matchLabels and/or matchExpressions.")
    labels = selector.get("matchLabels") or {}
    if not isinstance(labels, Mapping):
        raise SelectorError(f"{field}.matchLabels: must be a mapping of label keys to values.")
    # Label values are strings: 1 never equals the label "1", so the selector would silently match nothing.
    for key, value in labels.items():
        if not isinstance(key, str):
            raise SelectorError(f"{field}.matchLabels: the key {key!r} is not a string; quote it ('{key}').")
        _string(value, f"{field}.matchLabels.{key}")
    expressions = selector.get("matchExpressions") or []
    if not isinstance(expressions, list):
        raise SelectorError(f"{field}.matchExpressions: must be a list.")
    for index, expr in enumerate(expressions):
        where = f"{field}.matchExpressions[{index}]"
        if not isinstance(expr, Mapping) or not expr.get("key"):
            raise SelectorError(f"{where}: needs a key.")
        if not isinstance(expr["key"], str):
            raise SelectorError(f"{where}.key: {expr['key']!r} is not a string; quote it ('{expr['key']}').")
        operator = expr.get("operator")
        values = expr.get("values") or []
        if operator not in OPERATORS:
            raise SelectorError(f"{where}.operator: {operator!r} is not one of {', '.join(OPERATORS)}.")
        if not isinstance(values, (list, tuple)):
            raise SelectorError(f"{where}.values: must be a list of strings, not {values!r}.")
        for number, value in enumerate(values):
            _string(value, f"{where}.values[{number}]")
        if operator in ("In", "NotIn") and not values:
            raise SelectorError(f"{where}.values: {operator} needs at least one value.")
        if operator in ("Exists", "DoesNotExist") and values:
            raise SelectorError(f"{where}.values: {operator} takes no values.")


def _string(value: object, where: str) -> None:
    if isinstance(value, str):
        return
    if isinstance(value, bool):  # YAML's unquoted true / false
        text = str(value).lower()
    elif isinstance(value, (int, float)):
        text = str(value)
    else:
        raise SelectorError(f"{where}: {value!r} is not a string; label values are strings, such as 'gpu' (or '').")
    raise SelectorError(f"{where}: {value!r} is not a string; quote it ('{text}'): label values are strings.")


def matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str] | None) -> bool:
    """Whether ``labels`` satisfy ``selector`` (call ``validate`` first for clear errors)."""
    labels = labels or {}
    if selector is None:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, operator, values = expr["key"], expr["operator"], list(expr.get("values") or [])
        present = key in labels
        if operator == "In":
            ok = present and labels[key] in values
        elif operator == "NotIn":
            ok = not present or labels[key] not in values
        elif operator == "Exists":
            ok = present
        elif operator == "DoesNotExist":
            ok = not present
        else:
            raise SelectorError(f"matchExpressions: unknown operator {operator!r}.")
        if not ok:
            return False
    return True
