# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Kubernetes label selectors (``matchLabels`` and ``matchExpressions``) evaluated on label dicts.

Pure, standard library only. Semantics of ``metav1.LabelSelector``: all requirements must hold; an
empty selector matches everything; ``NotIn`` and ``DoesNotExist`` hold for a missing key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


class SelectorError(ValueError):
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
    expressions = selector.get("matchExpressions") or []
    if not isinstance(expressions, list):
        raise SelectorError(f"{field}.matchExpressions: must be a list.")
    for index, expr in enumerate(expressions):
        where = f"{field}.matchExpressions[{index}]"
        if not isinstance(expr, Mapping) or not expr.get("key"):
            raise SelectorError(f"{where}: needs a key.")
        operator = expr.get("operator")
        values = expr.get("values") or []
        if operator not in OPERATORS:
            raise SelectorError(f"{where}.operator: {operator!r} is not one of {', '.join(OPERATORS)}.")
        if operator in ("In", "NotIn") and not values:
            raise SelectorError(f"{where}.values: {operator} needs at least one value.")
        if operator in ("Exists", "DoesNotExist") and values:
            raise SelectorError(f"{where}.values: {operator} takes no values.")


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
