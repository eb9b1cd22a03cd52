# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The strict reader of object-shaped input: a NodeHealthCheck spec, a SelfNodeRemediationConfig or template, a
NodeMaintenance, a MaintenanceOperatorConfig, given as module options or read from snapshot files, is checked
the way the API server checks it when ``kubectl apply`` sends it, before anything uses it.

The schemas are the CRDs' own (``crd_schemas``, generated from roles/crds/files). What is checked: unknown
fields (named, with the closest known field: ``did you mean minHealthy?``), types (a number in quotes is a
string, as for the API server), enums, patterns, bounds, lengths, required fields, and the CRDs' CEL rules
that :mod:`.cel` can evaluate. A ``null`` counts as left out, as the API server prunes it. Pure: no Ansible,
no network, no clock.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from . import cel
from .crd_schemas import SCHEMAS
from .node.errors import NodeopsError
from .node.rfc3339 import parse_time

#: problems shown in one message at most (the rest are counted)
MAX_SHOWN = 8
_INT_RANGE = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
_RULES: dict[str, Callable[[Any], bool] | None] = {}


class InputError(NodeopsError, ValueError):
    """Object-shaped input that the API server would refuse; the message names each field and how to fix it."""


def camel(name: str) -> str:
    """``safe_time_to_assume`` -> ``safeTimeToAssume``."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def snake(name: str) -> str:
    """``maxParallelOperations`` -> ``max_parallel_operations`` (``requestorID`` -> ``requestor_id``)."""
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


def closest(name: str, known: list[str]) -> str | None:
    """The known name ``name`` most likely stands for: the same in camelCase or in another case, else the
    nearest by spelling (None when nothing is near)."""
    spellings = {name.lower(), camel(name).lower(), snake(name)}
    for candidate in known:
        if candidate.lower() in spellings:
            return candidate
    found = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    if not found:
        lowered = {k.lower(): k for k in known}
        found = [lowered[m] for m in difflib.get_close_matches(name.lower(), list(lowered), n=1, cutoff=0.6)]
    return found[0] if found else None


def describe(value: Any) -> str:
    """A value as a message shows what was given."""
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:37] + "..."
        if re.fullmatch(r"\s*-?[0-9]+(\.[0-9]+)?\s*", value):
            return f'the string "{shown}" (a number in quotes; write it without quotes)'
        if value.strip().lower() in ("true", "false", "yes", "no"):
            return f'the string "{shown}" (write true or false without quotes)'
        return f'the string "{shown}"'
    if isinstance(value, (int, float)):
        return f"the number {value}"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return f"a {type(value).__name__}"


def _type_ok(schema: Mapping[str, Any], value: Any) -> str | None:
    """None when ``value`` has the schema's type, else what it should be."""
    if schema.get("x-kubernetes-int-or-string"):
        ok = (isinstance(value, int) and not isinstance(value, bool)) or isinstance(value, str)
        return None if ok else 'a whole number or a string such as "10%"'
    kind = schema.get("type")
    checks: dict[str, tuple[Callable[[Any], bool], str]] = {
        "object": (lambda v: isinstance(v, Mapping), "a mapping"),
        "array": (lambda v: isinstance(v, list), "a list"),
        "string": (lambda v: isinstance(v, str), "a string"),
        "integer": (lambda v: isinstance(v, int) and not isinstance(v, bool), "a whole number"),
        "number": (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool), "a number"),
        "boolean": (lambda v: isinstance(v, bool), "true or false"),
    }
    if kind not in checks:
        return None
    test, expected = checks[kind]
    return None if test(value) else expected


def _rule(text: str) -> Callable[[Any], bool] | None:
    if text not in _RULES:
        try:
            _RULES[text] = cel.compile_rule(text)
        except cel.Unsupported:
            _RULES[text] = None  # left to the API server (a transition rule reading oldSelf, say)
    return _RULES[text]


def _scalar(schema: Mapping[str, Any], value: Any, where: str, out: list[str]) -> None:
    if "enum" in schema and value not in schema["enum"]:
        choices = [str(c) for c in schema["enum"]]
        hint = closest(str(value), choices) if isinstance(value, str) else None
        out.append(
            f"{where}: {describe(value)} is not one of {', '.join(choices)}"
            + (f"; did you mean {hint}?" if hint else ".")
        )
    if isinstance(value, str):
        if "pattern" in schema and not re.search(schema["pattern"], value):
            out.append(f"{where}: {describe(value)} does not have the form {schema['pattern']}.")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            out.append(f"{where}: {len(value)} characters; at most {schema['maxLength']} are allowed.")
        if "minLength" in schema and len(value) < schema["minLength"]:
            out.append(f"{where}: give at least {schema['minLength']} character(s).")
        if schema.get("format") == "date-time":
            try:
                parse_time(value, where)
            except ValueError:
                out.append(f"{where}: {describe(value)} is not an RFC 3339 time such as 2026-01-31T12:00:00Z.")
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            out.append(f"{where}: {value} is below the least allowed value, {schema['minimum']}.")
        if "maximum" in schema and value > schema["maximum"]:
            out.append(f"{where}: {value} is above the greatest allowed value, {schema['maximum']}.")
        low, high = _INT_RANGE.get(str(schema.get("format")), (None, None))
        if low is not None and high is not None and not low <= value <= high:
            out.append(f"{where}: {value} does not fit in {schema['format']}.")


def _walk(schema: Mapping[str, Any], value: Any, where: str, out: list[str]) -> None:
    expected = _type_ok(schema, value)
    if expected:
        out.append(f"{where}: must be {expected}, not {describe(value)}.")
        return
    before = len(out)
    if isinstance(value, Mapping):
        _mapping(schema, value, where, out)
    elif isinstance(value, list):
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            out.append(f"{where}: {len(value)} items; at most {schema['maxItems']} are allowed.")
        if "minItems" in schema and len(value) < schema["minItems"]:
            out.append(f"{where}: give at least {schema['minItems']} item(s).")
        for index, item in enumerate(value):
            if "items" in schema:
                if item is None:
                    out.append(f"{where}[{index}]: an empty item; remove it or fill it in.")
                else:
                    _walk(schema["items"], item, f"{where}[{index}]", out)
    else:
        _scalar(schema, value, where, out)
    if len(out) > before:
        return  # the API server runs the CEL rules only on values of the right shape
    for entry in schema.get("x-kubernetes-validations") or []:
        rule = _rule(entry["rule"])
        if rule is None:
            continue
        try:
            passed = rule(value)
        except cel.EvalError:
            continue
        if not passed:
            given = "" if isinstance(value, (Mapping, list)) else f"{describe(value)} is refused: "
            out.append(f"{where}: {given}{entry.get('message') or 'it fails the rule ' + entry['rule']}.")


def _mapping(schema: Mapping[str, Any], value: Mapping[str, Any], where: str, out: list[str]) -> None:
    properties: Mapping[str, Any] = schema.get("properties") or {}
    extra = schema.get("additionalProperties")
    free = schema.get("x-kubernetes-preserve-unknown-fields") or (not properties and extra is None)
    for key, item in value.items():
        path = f"{where}.{key}"
        if not isinstance(key, str):
            out.append(f"{where}: the key {key!r} is not a string.")
        elif key in properties:
            if item is not None:
                _walk(properties[key], item, path, out)
        elif isinstance(extra, Mapping):
            if item is not None:
                _walk(extra, item, path, out)
        elif not free:
            known = sorted(properties)
            hint = closest(key, known)
            if hint and hint == camel(key) and hint != key:
                out.append(f"{path}: unknown field; did you mean {hint}? (objects take the CRD's camelCase names)")
            elif hint:
                out.append(f"{path}: unknown field; did you mean {hint}?")
            else:
                out.append(f"{path}: unknown field; {where} takes {', '.join(known)}.")
    for key in schema.get("required") or []:
        if value.get(key) is None:
            out.append(f"{where}.{key}: required; give it.")


def problems(schema: Mapping[str, Any], value: Any, where: str) -> list[str]:
    """Every way ``value`` breaks ``schema``, one sentence each, fields named from ``where``."""
    out: list[str] = []
    if value is not None:
        _walk(schema, value, where, out)
    return out


def _raise(found: list[str]) -> None:
    if found:
        shown = found[:MAX_SHOWN]
        more = f" (and {len(found) - MAX_SHOWN} more)" if len(found) > MAX_SHOWN else ""
        raise InputError(" ".join(shown) + more)


def schema_of(kind: str, part: str | None = None) -> dict[str, Any]:
    """The schema of ``kind`` (a CRD in the collection), or of its top-level field ``part``."""
    schema: dict[str, Any] = SCHEMAS[kind]["schema"]
    return schema["properties"][part] if part else schema


def check_spec(kind: str, spec: Any, where: str = "spec") -> None:
    """InputError unless ``spec`` is a valid spec of a ``kind`` object."""
    _raise(problems(schema_of(kind, "spec"), spec, where))


def check_object(obj: Any, where: str, parts: tuple[str, ...] = ("spec",)) -> None:
    """InputError unless the ``parts`` of ``obj`` (an object of a kind the collection has a CRD for; other
    kinds pass) are valid; ``where`` names the object in the message."""
    _raise(object_problems(obj, where, parts))


def object_problems(obj: Any, where: str, parts: tuple[str, ...] = ("spec",)) -> list[str]:
    """What :func:`check_object` would say of ``obj``, one sentence a problem."""
    if not isinstance(obj, Mapping) or obj.get("kind") not in SCHEMAS:
        return []
    schema = schema_of(str(obj["kind"]))
    found: list[str] = []
    for part in parts:
        if obj.get(part) is not None:
            found += problems(schema["properties"][part], obj[part], f"{where}.{part}")
    return found


def check_snapshot(by_kind: Mapping[str, list[Any]]) -> None:
    """InputError unless every object of a kind with a CRD in ``by_kind`` (as snapshot files give them) has a
    valid spec; the message names the problems of every bad object (up to MAX_SHOWN)."""
    found: list[str] = []
    for kind in sorted(set(by_kind) & set(SCHEMAS)):
        for obj in by_kind[kind]:
            meta = obj.get("metadata") or {}
            name = "/".join(str(part) for part in (meta.get("namespace"), meta.get("name")) if part)
            found += object_problems(obj, f"snapshot {kind} {name or '(no name)'}")
    _raise(found)


def option_hints(argument_spec: Mapping[str, Any], params: Mapping[str, Any], prefix: str = "") -> list[str]:
    """For each option in ``params`` that ``argument_spec`` (an Ansible argument spec) does not know, at any
    depth, a sentence naming it and the closest known option or alias."""
    known = dict(argument_spec.items())
    for spec in argument_spec.values():
        known.update({alias: spec for alias in spec.get("aliases") or []})
    hints: list[str] = []
    walked: set[int] = set()  # Ansible's params hold an option under its name and the alias used: one look each
    for key, value in params.items():
        if not isinstance(key, str) or key.startswith("_ansible_"):
            continue
        spec = known.get(key)
        if spec is None:
            hint = closest(key, sorted(known))
            hints.append(f"{prefix}{key}: unknown option" + (f"; did you mean {hint}?" if hint else "."))
        elif spec.get("options") and id(spec) not in walked:
            walked.add(id(spec))
            if isinstance(value, Mapping):
                hints += option_hints(spec["options"], value, f"{prefix}{key}.")
            elif isinstance(value, list):
                for index, item in enumerate(value):
                    if isinstance(item, Mapping):
                        hints += option_hints(spec["options"], item, f"{prefix}{key}[{index}].")
    return hints


def variable_prefixes(known: Iterable[str]) -> list[str]:
    """The prefixes that mark a playbook's variables, from their names: for each first word that two or more
    names share, their longest common prefix up to an underscore (``rolling_`` for ``rolling_run_id`` and
    ``rolling_engine``, ``node_agent_`` for ``node_agent_hosts`` and ``node_agent_serial``)."""
    by_word: dict[str, list[str]] = {}
    for name in known:
        if "_" in name:
            by_word.setdefault(name.split("_", 1)[0], []).append(name)
    prefixes = []
    for names in by_word.values():
        if len(names) > 1:
            first, last = min(names), max(names)  # the prefix they share is that of all the names between
            end = 0
            while end < min(len(first), len(last)) and first[end] == last[end]:
                end += 1
            common = first[:end]
            prefixes.append(common[: common.rindex("_") + 1])
    return sorted(prefixes)


def unknown_variables(given: Iterable[str], known: Iterable[str], prefixes: Iterable[str] = ()) -> dict[str, str]:
    """The variables in ``given`` that start like the ``known`` ones (``prefixes``, or those
    :func:`variable_prefixes` finds) but are none of them, each with a sentence naming the closest known one: a
    misspelt ``-e rolling_maxParallelOperations=3`` would otherwise be ignored without a word."""
    known = sorted(set(known))
    starts = tuple(prefixes) or tuple(variable_prefixes(known))
    found = {}
    for name in sorted(set(given) - set(known)):
        start = next((s for s in starts if name.startswith(s)), None)
        if start is not None:
            # compared without the prefix they share, which would make any two names look alike
            rests = [k[len(start) :] for k in known if k.startswith(start)]
            rest = closest(name[len(start) :], rests)
            hint = start + rest if rest is not None else None
            found[name] = f"{name} is not a variable of this playbook" + (f"; did you mean {hint}?" if hint else ".")
    return found
