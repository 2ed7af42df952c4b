"""Evaluating a syntax tree against named values: strict types, missing values, filters."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TypeAlias

from jobring.core.expression.syntax import FILTER_NAMES, ExpressionError, JsonValue, Node, Value, parse_tree

__all__ = ["FILTERS", "Expression", "is_json_data", "parse_embedded", "parse_expression", "render_value"]

# -- evaluation ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Missing:
    what: str
    pos: int


MAX_FORMAT_CHARS = 100
_JSON_SCALARS = (type(None), bool, int, float, str)
_EvalResult: TypeAlias = "Value | _Missing"


def _kind(value: object) -> str:
    kind = type(value)
    if kind in (int, float):
        return "number"
    names = {type(None): "null", bool: "boolean", str: "string", list: "list", dict: "object",
             datetime: "datetime", timedelta: "duration", _Missing: "missing"}
    return names.get(kind, "unsupported")


def _a(kind: str) -> str:
    return ("an " if kind[0] in "aeiou" else "a ") + kind


def _checked_value(value: object, node: Node, source: str) -> Value:
    if type(value) in _JSON_SCALARS or type(value) in (list, dict, datetime, timedelta):
        return value  # type: ignore[return-value]
    raise ExpressionError(f"{type(value).__name__} values are not readable here (JSON data only)",
                          node.pos, source)


def is_json_data(value: object, depth_limit: int = 64) -> bool:
    """True when ``value`` is made only of JSON types (exact types: nothing user-defined is
    looked at, not even through ``isinstance``)."""
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        current, depth = stack.pop()
        kind = type(current)
        if depth > depth_limit:
            return False
        if kind is list:
            stack.extend((item, depth + 1) for item in current)  # type: ignore[attr-defined]
        elif kind is dict:
            for key, item in current.items():  # type: ignore[attr-defined]
                if type(key) is not str:
                    return False
                stack.append((item, depth + 1))
        elif kind not in _JSON_SCALARS or (kind is float and current != current):
            return False
    return True


def _equal(a: object, b: object) -> bool:
    kind = _kind(a)
    if kind != _kind(b) or kind == "unsupported":
        return False
    if kind == "list":
        assert isinstance(a, list) and isinstance(b, list)
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    if kind == "object":
        assert isinstance(a, dict) and isinstance(b, dict)
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    return a == b


class _Evaluator:
    def __init__(self, names: Mapping[str, Value], source: str) -> None:
        self.names, self.source = names, source

    def fail(self, message: str, node: Node) -> ExpressionError:
        return ExpressionError(message, node.pos, self.source)

    def present(self, node: Node) -> Value:
        value = self.eval(node)
        if isinstance(value, _Missing):
            raise ExpressionError(f"{value.what} does not exist (use '| default(...)' or '| exists')",
                                  value.pos, self.source)
        return value

    def boolean(self, node: Node) -> bool:
        value = self.present(node)
        if type(value) is not bool:
            raise self.fail(f"expected a boolean, got {_a(_kind(value))}", node)
        return value

    def eval(self, node: Node) -> _EvalResult:  # noqa: C901 - one branch per operator
        op = node.op
        if op == "literal":
            return node.value
        if op == "name":
            assert isinstance(node.value, str)
            if node.value not in self.names:
                return _Missing(f"variable '{node.value}'", node.pos)
            return _checked_value(self.names[node.value], node, self.source)
        if op in ("field", "index"):
            return self.access(node)
        if op == "list":
            return [self.json(a) for a in node.args]
        if op == "&&":
            return self.boolean(node.args[0]) and self.boolean(node.args[1])
        if op == "||":
            return self.boolean(node.args[0]) or self.boolean(node.args[1])
        if op == "not":
            return not self.boolean(node.args[0])
        if op == "neg":
            return self.arithmetic("-", 0, self.present(node.args[0]), node)
        if op.startswith("|"):
            return FILTERS[op[1:]](self, node)
        left, right = self.present(node.args[0]), self.present(node.args[1])
        if op in ("+", "-"):
            return self.arithmetic(op, left, right, node)
        if op == "==":
            return _equal(left, right)
        if op == "!=":
            return not _equal(left, right)
        if op == "in":
            return self.contains(right, left, node)
        return self.order(op, left, right, node)

    def json(self, node: Node) -> JsonValue:
        value = self.present(node)
        if isinstance(value, datetime | timedelta):
            raise self.fail(f"{_a(_kind(value))} cannot be put in a list", node)
        return value

    def access(self, node: Node) -> _EvalResult:
        base = self.eval(node.args[0])
        if isinstance(base, _Missing):
            return base
        if node.op == "field":
            key: Value = node.value
            label = f"field '{node.value}'"
        else:
            key = self.present(node.args[1])
            label = f"[{json.dumps(key)}]" if type(key) in (int, str) else ""
        if type(base) is dict and type(key) is str:
            return _checked_value(base[key], node, self.source) if key in base else _Missing(label, node.pos)
        if type(base) is list and type(key) is int:
            in_range = -len(base) <= key < len(base)
            return _checked_value(base[key], node, self.source) if in_range else _Missing(label, node.pos)
        raise self.fail(f"cannot read {label or _a(_kind(key)) + ' index'} of {_a(_kind(base))}", node)

    def arithmetic(self, op: str, left: Value, right: Value, node: Node) -> Value:
        kinds = (_kind(left), _kind(right))
        try:
            if kinds == ("number", "number"):
                assert isinstance(left, int | float) and isinstance(right, int | float)
                result: Value = left + right if op == "+" else left - right
                if isinstance(result, float) and result in (float("inf"), float("-inf")):
                    raise OverflowError
                return result
            if kinds in (("datetime", "duration"), ("duration", "duration")):
                assert isinstance(left, datetime | timedelta) and isinstance(right, timedelta)
                return left + right if op == "+" else left - right
            if kinds == ("number", "duration") and op == "-" and left == 0:  # unary minus of a duration
                assert isinstance(right, timedelta)
                return -right
        except OverflowError:
            raise self.fail("result out of range", node) from None
        raise self.fail(f"cannot compute {kinds[0]} {op} {kinds[1]}", node)

    def order(self, op: str, left: Value, right: Value, node: Node) -> bool:
        kind = _kind(left)
        if kind != _kind(right) or kind not in ("number", "string", "datetime", "duration"):
            raise self.fail(f"cannot order {_a(_kind(left))} and {_a(_kind(right))}", node)
        try:
            if op == "<":
                return left < right  # type: ignore[operator]
            if op == "<=":
                return left <= right  # type: ignore[operator]
            if op == ">":
                return left > right  # type: ignore[operator]
            return left >= right  # type: ignore[operator]
        except TypeError:  # a naive and an aware datetime
            raise self.fail("cannot order a naive and an aware datetime", node) from None

    def contains(self, container: Value, item: Value, node: Node) -> bool:
        if type(container) is list:
            return any(_equal(item, x) for x in container)
        if type(container) in (str, dict) and type(item) is str:
            return item in container  # type: ignore[operator]
        raise self.fail(f"cannot look for {_a(_kind(item))} in {_a(_kind(container))}", node)


# -- filters: (evaluator, filter node) -> value; args[0] is the piped value ----------------------


def _filter_args(ev: _Evaluator, node: Node, count: int) -> list[Value]:
    if len(node.args) != count + 1:
        raise ev.fail(f"filter '{node.op[1:]}' takes {count} argument{'s' if count != 1 else ''}", node)
    return [ev.present(a) for a in node.args[1:]]


def _fmt(ev: _Evaluator, node: Node) -> Value:
    (pattern,) = _filter_args(ev, node, 1)
    value = ev.present(node.args[0])
    if type(value) is not datetime:
        raise ev.fail(f"fmt formats a datetime, not {_a(_kind(value))}", node)
    if type(pattern) is not str or len(pattern) > MAX_FORMAT_CHARS:
        raise ev.fail(f"fmt takes a format string of at most {MAX_FORMAT_CHARS} characters", node)
    try:
        return value.strftime(pattern)
    except ValueError as exc:
        raise ev.fail(f"bad date format: {exc}", node) from None


def _default(ev: _Evaluator, node: Node) -> Value:
    (fallback,) = _filter_args(ev, node, 1)
    value = ev.eval(node.args[0])
    return fallback if isinstance(value, _Missing) or value is None else value


def _exists(ev: _Evaluator, node: Node) -> Value:
    _filter_args(ev, node, 0)
    return not isinstance(ev.eval(node.args[0]), _Missing)


def _len(ev: _Evaluator, node: Node) -> Value:
    _filter_args(ev, node, 0)
    value = ev.present(node.args[0])
    if type(value) not in (str, list, dict):
        raise ev.fail(f"len takes a string, list or object, not {_a(_kind(value))}", node)
    return len(value)  # type: ignore[arg-type]


def _json(ev: _Evaluator, node: Node) -> Value:
    _filter_args(ev, node, 0)
    value = ev.present(node.args[0])
    if not is_json_data(value):
        raise ev.fail(f"json takes JSON data, not {_a(_kind(value))} holding other things", node)
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


FILTERS: dict[str, Callable[[_Evaluator, Node], Value]] = {
    "fmt": _fmt, "default": _default, "exists": _exists, "len": _len, "json": _json,
}
assert FILTERS.keys() == FILTER_NAMES
"""``fmt("%Y%m%d")`` a datetime (strftime codes); ``default(v)``: v when missing or null;
``exists``: false when missing; ``len``: of a string, list or object; ``json``: compact JSON text."""


# -- public API --------------------------------------------------------------------------------


def _variables(node: Node) -> frozenset[str]:
    found: set[str] = set()
    stack = [node]
    while stack:
        current = stack.pop()
        if current.op == "name":
            found.add(str(current.value))
        stack.extend(current.args)
    return frozenset(found)


@dataclass(frozen=True, slots=True)
class Expression:
    """A parsed expression; :meth:`evaluate` it against named values as often as needed."""

    source: str
    root: Node

    @property
    def variables(self) -> frozenset[str]:
        """The top-level names the expression reads (``a`` for ``a.b[0]``)."""
        return _variables(self.root)

    def evaluate(self, names: Mapping[str, Value]) -> Value:
        """The value; names map to JSON data, datetimes or durations. A missing result is an error."""
        return _Evaluator(names, self.source).present(self.root)

    def evaluate_bool(self, names: Mapping[str, Value]) -> bool:
        """The value, which must be a boolean (a decision)."""
        return _Evaluator(names, self.source).boolean(self.root)


def parse_expression(source: str) -> Expression:
    """Parse ``source``; :class:`ExpressionError` names the position of the first problem."""
    root, _ = parse_tree(source)
    return Expression(source, root)


def parse_embedded(text: str, start: int) -> tuple[Expression, int]:
    """Parse the expression that starts at ``start`` and ends at the next ``}}`` outside a string
    (for templates); returns it and the offset just past the ``}}``. Error positions are
    offsets in ``text``."""
    root, end = parse_tree(text, start, embedded=True)
    return Expression(text, root), end


def render_value(value: Value) -> str:
    """A value as template output: a string as itself, a datetime in ISO 8601, JSON data as its
    compact JSON text (``true``, ``null``, ``[1,2]``). A duration is refused (ValueError)."""
    if type(value) is str:
        return value
    if type(value) is datetime:
        return value.isoformat()
    if type(value) is timedelta:
        raise ValueError("a duration cannot be rendered: add it to a datetime")
    if not is_json_data(value):
        raise ValueError("only JSON data can be rendered")
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
