"""A strict reader of Prometheus' text format (0.0.4) for the tests: what the agent serves and the module pushes.

Independent of the renderer in plugins/module_utils/core/node/metrics.py (it reads character by character), so that a
round trip through both checks the escaping. ``parse(text)`` gives the families: name -> {"type", "help", "samples":
{frozenset(labels.items()): value}}; anything malformed raises ValueError.
"""

from __future__ import annotations

import math
import re
from typing import Any

NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}


def _unescape_help(text: str) -> str:
    out, i = [], 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text) and text[i + 1] in ("\\", "n"):
            out.append("\n" if text[i + 1] == "n" else "\\")
            i += 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _labels(line: str, pos: int) -> tuple[dict[str, str], int]:
    labels: dict[str, str] = {}
    pos += 1  # "{"
    while line[pos] != "}":
        match = LABEL.match(line, pos)
        if not match:
            raise ValueError(f"bad label name at {pos}: {line!r}")
        name = match.group(0)
        pos = match.end()
        if line[pos : pos + 2] != '="':
            raise ValueError(f'expected =" at {pos}: {line!r}')
        pos += 2
        value = []
        while line[pos] != '"':
            if line[pos] == "\\":
                escaped = line[pos + 1]
                if escaped not in ESCAPES:
                    raise ValueError(f"bad escape \\{escaped}: {line!r}")
                value.append(ESCAPES[escaped])
                pos += 2
            else:
                if line[pos] == "\n":
                    raise ValueError("raw line feed in a label value")
                value.append(line[pos])
                pos += 1
        pos += 1
        if name in labels:
            raise ValueError(f"label {name} twice: {line!r}")
        labels[name] = "".join(value)
        if line[pos] == ",":
            pos += 1
        elif line[pos] != "}":
            raise ValueError(f"expected , or }} at {pos}: {line!r}")
    return labels, pos + 1


def parse_value(text: str) -> float:
    if text in ("+Inf", "-Inf", "NaN"):
        return {"+Inf": math.inf, "-Inf": -math.inf, "NaN": math.nan}[text]
    return float(text)


def parse(text: str) -> dict[str, dict[str, Any]]:
    families: dict[str, dict[str, Any]] = {}
    if text and not text.endswith("\n"):
        raise ValueError("the text must end with a line feed")
    for line in text.split("\n"):
        if not line:
            continue
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            name, _sep, rest = line[7:].partition(" ")
            family = families.setdefault(name, {"type": None, "help": None, "samples": {}})
            if family["samples"]:
                raise ValueError(f"{line[:6]} of {name} after its samples")
            if line.startswith("# HELP "):
                family["help"] = _unescape_help(rest)
            else:
                if rest not in ("counter", "gauge", "histogram", "summary", "untyped"):
                    raise ValueError(f"bad type {rest!r}")
                family["type"] = rest
            continue
        if line.startswith("#"):
            continue
        match = NAME.match(line)
        if not match:
            raise ValueError(f"bad sample line {line!r}")
        name = match.group(0)
        pos = match.end()
        labels: dict[str, str] = {}
        if pos < len(line) and line[pos] == "{":
            labels, pos = _labels(line, pos)
        if line[pos : pos + 1] != " ":
            raise ValueError(f"expected a space before the value: {line!r}")
        value = parse_value(line[pos + 1 :].split(" ")[0])
        family = families.setdefault(name, {"type": None, "help": None, "samples": {}})
        key = frozenset(labels.items())
        if key in family["samples"]:
            raise ValueError(f"series {name}{labels} twice")
        family["samples"][key] = value
    return families


def value(families: dict[str, dict[str, Any]], name: str, **labels: str) -> float | None:
    """The value of one series, or None when it is not there."""
    family = families.get(name)
    if family is None:
        return None
    result: float | None = family["samples"].get(frozenset(labels.items()))
    return result
