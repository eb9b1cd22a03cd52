# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The part of CEL that the collection's CRDs use in their ``x-kubernetes-validations`` rules, so that input
checked offline meets the same rules the API server applies.

Pure and standard library only. The grammar: ``||``, ``&&``, ``!``, ``? :``, the comparisons (``==``, ``!=``,
``<``, ``<=``, ``>``, ``>=``, ``in``), parentheses, field selection, indexing, list literals, string, integer
and boolean literals, the macro ``has(self.field)`` and the functions ``type()``, ``size()``, ``duration()``,
``.matches()``, ``.endsWith()``, ``.startsWith()`` and ``.contains()``. A rule outside it (a transition rule
reading ``oldSelf``, say) raises :class:`Unsupported` when parsed; evaluating one against a value it does not
fit (a missing field read without ``has``) raises :class:`EvalError`. Both mean "not decided here": the API
server still checks it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .node.duration import parse_duration
from .node.errors import NodeopsError


class Unsupported(NodeopsError):
    """A rule outside the supported part of CEL."""


class EvalError(NodeopsError):
    """A rule that has no value for this input (CEL's own evaluation error)."""


_TOKEN = re.compile(
    r"\s*(?:(?P<num>\d+)|(?P<str>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")|(?P<name>[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<op>\|\||&&|==|!=|<=|>=|[!<>?:()\[\],.]))"
)
_TYPES = {"int": int, "string": str, "bool": bool, "list": list, "map": dict, "double": float}


@dataclass(frozen=True)
class _Tok:
    kind: str
    text: str


def _tokens(rule: str) -> list[_Tok]:
    out: list[_Tok] = []
    pos = 0
    rule = rule.strip()
    while pos < len(rule):
        match = _TOKEN.match(rule, pos)
        if not match or match.end() == pos:
            raise Unsupported(f"cannot read {rule[pos : pos + 20]!r}")
        kind = match.lastgroup or ""
        out.append(_Tok(kind, match.group(kind)))
        pos = match.end()
    return out


Node = Callable[[Any], Any]


class _Parser:
    def __init__(self, rule: str) -> None:
        self.toks = _tokens(rule)
        self.pos = 0

    def peek(self, text: str | None = None) -> bool:
        if self.pos >= len(self.toks):
            return False
        return text is None or (self.toks[self.pos].text == text and self.toks[self.pos].kind in ("op", "name"))

    def take(self, text: str | None = None) -> _Tok:
        if self.pos >= len(self.toks) or (text is not None and not self.peek(text)):
            raise Unsupported(f"expected {text or 'more'}")
        self.pos += 1
        return self.toks[self.pos - 1]

    def parse(self) -> Node:
        node = self.ternary()
        if self.pos != len(self.toks):
            raise Unsupported(f"unexpected {self.toks[self.pos].text!r}")
        return node

    def ternary(self) -> Node:
        cond = self.or_()
        if not self.peek("?"):
            return cond
        self.take("?")
        yes = self.ternary()
        self.take(":")
        no = self.ternary()
        return lambda s: yes(s) if _bool(cond(s)) else no(s)

    def or_(self) -> Node:
        left = self.and_()
        while self.peek("||"):
            self.take()
            left = _either(left, self.and_())
        return left

    def and_(self) -> Node:
        left = self.rel()
        while self.peek("&&"):
            self.take()
            left = _both(left, self.rel())
        return left

    def rel(self) -> Node:
        left = self.unary()
        ops: dict[str, Callable[[Any, Any], bool]] = {
            "==": _eq,
            "!=": lambda a, b: not _eq(a, b),
            "<": lambda a, b: _order(a, b) < 0,
            "<=": lambda a, b: _order(a, b) <= 0,
            ">": lambda a, b: _order(a, b) > 0,
            ">=": lambda a, b: _order(a, b) >= 0,
            "in": lambda a, b: any(_eq(a, x) for x in _list(b)),
        }
        if self.pos < len(self.toks) and self.toks[self.pos].text in ops:
            return _binary(ops[self.take().text], left, self.unary())
        return left

    def unary(self) -> Node:
        if self.peek("!"):
            self.take()
            inner = self.unary()
            return lambda s: not _bool(inner(s))
        return self.postfix()

    def postfix(self) -> Node:
        node = self.primary()
        while self.peek(".") or self.peek("["):
            if self.take().text == "[":
                index = self.ternary()
                self.take("]")
                node = _binary(_index, node, index)
                continue
            name = self.take().text
            if self.peek("("):
                args = self.args()
                node = _method(node, name, args)
            else:
                node = _field(node, name)
        return node

    def args(self) -> list[Node]:
        self.take("(")
        args: list[Node] = []
        while not self.peek(")"):
            args.append(self.ternary())
            if not self.peek(")"):
                self.take(",")
        self.take(")")
        return args

    def primary(self) -> Node:
        tok = self.take()
        if tok.kind == "num":
            number = int(tok.text)
            return lambda s: number
        if tok.kind == "str":
            text = tok.text[1:-1].encode().decode("unicode_escape") if "\\" in tok.text else tok.text[1:-1]
            return lambda s: text
        if tok.text == "(":
            node = self.ternary()
            self.take(")")
            return node
        if tok.text == "[":
            items: list[Node] = []
            while not self.peek("]"):
                items.append(self.ternary())
                if not self.peek("]"):
                    self.take(",")
            self.take("]")
            return lambda s: [item(s) for item in items]
        if tok.kind != "name":
            raise Unsupported(f"unexpected {tok.text!r}")
        if tok.text in ("true", "false"):
            flag = tok.text == "true"
            return lambda s: flag
        if tok.text == "self":
            return lambda s: s
        if tok.text in _TYPES and not self.peek("("):
            kind = _TYPES[tok.text]
            return lambda s: kind
        if tok.text == "has":
            return self.has()
        if tok.text in ("type", "size", "duration"):
            args = self.args()
            if len(args) != 1:
                raise Unsupported(f"{tok.text}() takes one argument")
            return _function(tok.text, args[0])
        raise Unsupported(f"unknown name {tok.text!r}")  # oldSelf, variables, other functions

    def has(self) -> Node:
        self.take("(")
        path = [self.take().text]
        if path[0] != "self":
            raise Unsupported("has() takes a field of self")
        while self.peek("."):
            self.take()
            path.append(self.take().text)
        self.take(")")
        if len(path) < 2:
            raise Unsupported("has() takes a field of self")

        def node(s: Any) -> bool:
            value = s
            for field in path[1:-1]:
                value = _select(value, field)
            return isinstance(value, dict) and value.get(path[-1]) is not None

        return node


def _either(a: Node, b: Node) -> Node:
    return lambda s: _bool(a(s)) or _bool(b(s))


def _both(a: Node, b: Node) -> Node:
    return lambda s: _bool(a(s)) and _bool(b(s))


def _binary(op: Callable[[Any, Any], Any], a: Node, b: Node) -> Node:
    return lambda s: op(a(s), b(s))


def _field(base: Node, name: str) -> Node:
    return lambda s: _select(base(s), name)


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise EvalError("not a bool")
    return value


def _eq(a: Any, b: Any) -> bool:
    if isinstance(a, type) or isinstance(b, type):
        return a is b
    if isinstance(a, bool) != isinstance(b, bool):
        return False
    return bool(a == b)


def _order(a: Any, b: Any) -> int:
    numbers = (int, float)
    if isinstance(a, bool) or isinstance(b, bool):
        raise EvalError("no order on bools")
    if not (isinstance(a, numbers) and isinstance(b, numbers)) and not (isinstance(a, str) and isinstance(b, str)):
        raise EvalError("no order between these values")
    return (a > b) - (a < b)  # type: ignore[operator]  # both numbers or both strings, checked above


def _list(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise EvalError("not a list")
    return value


def _select(value: Any, field: str) -> Any:
    if not isinstance(value, dict) or value.get(field) is None:
        raise EvalError(f"no field {field}")
    return value[field]


def _index(value: Any, at: Any) -> Any:
    if isinstance(value, list) and isinstance(at, int) and not isinstance(at, bool) and 0 <= at < len(value):
        return value[at]
    if isinstance(value, dict) and isinstance(at, str) and at in value:
        return value[at]
    raise EvalError("no such item")


def _type(value: Any) -> type:
    for kind in (bool, int, str, list, dict, float):
        if isinstance(value, kind):
            return kind
    raise EvalError("no CEL type")


def _function(name: str, arg: Node) -> Node:
    if name == "type":
        return lambda s: _type(arg(s))
    if name == "size":

        def size(s: Any) -> int:
            value = arg(s)
            if not isinstance(value, (str, list, dict)):
                raise EvalError("size() of a value that has none")
            return len(value)

        return size

    def duration(s: Any) -> float:
        try:
            return parse_duration(arg(s), "duration", allow_negative=True)
        except ValueError as err:
            raise EvalError(str(err)) from None

    return duration


def _method(target: Node, name: str, args: list[Node]) -> Node:
    if name not in ("matches", "endsWith", "startsWith", "contains") or len(args) != 1:
        raise Unsupported(f"unknown method {name}()")
    (arg,) = args

    def call(s: Any) -> bool:
        text, other = target(s), arg(s)
        if not isinstance(text, str) or not isinstance(other, str):
            raise EvalError(f"{name}() on a value that is not a string")
        if name == "matches":
            return re.search(other, text) is not None
        if name == "endsWith":
            return text.endswith(other)
        if name == "startsWith":
            return text.startswith(other)
        return other in text

    return call


def compile_rule(rule: str) -> Callable[[Any], bool]:
    """The rule as a function of ``self`` that says whether the value passes. Unsupported if the rule is
    outside the part of CEL read here; the function raises EvalError where CEL would have no value."""
    node = _Parser(rule).parse()
    return lambda value: _bool(node(value))
