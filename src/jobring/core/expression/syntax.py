"""The expression language's tokens and syntax tree (see the package docstring for the grammar)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TypeAlias

__all__ = ["ExpressionError", "JsonValue", "Node", "Value", "parse_tree", "where"]

JsonValue: TypeAlias = "None | bool | int | float | str | list[JsonValue] | dict[str, JsonValue]"
Value: TypeAlias = "JsonValue | datetime | timedelta"

MAX_SOURCE_CHARS = 2_000
MAX_DEPTH = 32
MAX_NUMBER_CHARS = 30
_UNITS = {"s": 1, "m": 60, "h": 3_600, "d": 86_400, "w": 604_800}
FILTER_NAMES = frozenset({"fmt", "default", "exists", "len", "json"})
_KEYWORDS = {"true": True, "false": False, "null": None}
_WORD_OPS = {"and": "&&", "or": "||", "not": "!", "in": "in"}


def where(text: str, position: int) -> str:
    """``column 7`` (or ``line 2, column 3`` in text with line breaks) for a 0-based offset."""
    line = text.count("\n", 0, position) + 1
    column = position - (text.rfind("\n", 0, position) + 1) + 1
    return f"line {line}, column {column}" if "\n" in text else f"column {column}"


class ExpressionError(ValueError):
    """A syntax or evaluation error at ``position`` (0-based offset into ``source``)."""

    def __init__(self, message: str, position: int, source: str = "") -> None:
        super().__init__(f"{where(source, position)}: {message}")
        self.message = message
        self.position = position
        self.source = source


# -- tokens ------------------------------------------------------------------------------------

_TOKEN = re.compile(
    r"""(?P<space>\s+)
      | (?P<number>\d[\d.eE]*(?:(?<=[eE])[+-]\d+)?[A-Za-z_]*)
      | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
      | (?P<string>"|')
      | (?P<close>}})
      | (?P<op>==|!=|<=|>=|&&|\|\||[<>!+\-|.,()\[\]])
    """,
    re.VERBOSE,
)
_NUMBER = re.compile(r"\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")
_ESCAPES = {'"': '"', "'": "'", "\\": "\\", "n": "\n", "t": "\t", "r": "\r"}


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # number, duration, string, name, keyword, op, end
    text: str
    value: Value
    pos: int


def _string(text: str, pos: int) -> tuple[str, int]:
    quote, i = text[pos], pos + 1
    out: list[str] = []
    while i < len(text):
        char = text[i]
        if char == quote:
            return "".join(out), i + 1
        if char == "\\":
            escaped = _ESCAPES.get(text[i + 1 : i + 2])
            if escaped is None:
                raise ExpressionError("unknown escape in string (use \\\\ \\\" \\' \\n \\t \\r)", i, text)
            out.append(escaped)
            i += 2
            continue
        out.append(char)
        i += 1
    raise ExpressionError("string not closed", pos, text)


def _number(text: str, pos: int, word: str) -> _Token:
    if len(word) > MAX_NUMBER_CHARS:
        raise ExpressionError(f"number longer than {MAX_NUMBER_CHARS} characters", pos, text)
    digits = _NUMBER.match(word)
    end = digits.end() if digits else 0
    unit = word[end:]
    if unit and (unit not in _UNITS or not word[:end].isdigit()):
        raise ExpressionError(f"bad number or duration {word!r} (durations: whole numbers of s m h d w)",
                              pos, text)
    if unit:
        try:
            return _Token("duration", word, timedelta(seconds=int(word[:-1]) * _UNITS[unit]), pos)
        except OverflowError:
            raise ExpressionError(f"duration {word!r} out of range", pos, text) from None
    if word.isdigit():
        return _Token("number", word, int(word), pos)
    value = float(word)
    if value in (float("inf"), float("-inf")):
        raise ExpressionError(f"number {word!r} out of range", pos, text)
    return _Token("number", word, value, pos)


def _tokens(text: str, start: int, embedded: bool) -> list[_Token]:
    out: list[_Token] = []
    pos = start
    while True:
        if pos >= len(text):
            if embedded:
                raise ExpressionError("'{{' without its '}}'", start - 2, text)
            out.append(_Token("end", "", None, pos))
            return out
        match = _TOKEN.match(text, pos)
        if match is None:
            raise ExpressionError(f"unexpected character {text[pos]!r}", pos, text)
        kind, word = match.lastgroup or "", match.group()
        if kind == "close" and embedded:
            out.append(_Token("end", word, None, pos))
            return out
        if kind == "string":
            value, end = _string(text, pos)
            out.append(_Token("string", text[pos:end], value, pos))
            pos = end
            continue
        if kind == "number":
            out.append(_number(text, pos, word))
        elif kind == "name" and word in _KEYWORDS:
            out.append(_Token("keyword", word, _KEYWORDS[word], pos))
        elif kind == "name" and word in _WORD_OPS:
            out.append(_Token("op", _WORD_OPS[word], word, pos))
        elif kind in ("name", "op"):
            out.append(_Token(kind, word, None, pos))
        elif kind == "close":
            raise ExpressionError("unexpected '}}'", pos, text)
        pos = match.end()


# -- syntax tree ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Node:
    """One syntax-tree node, built only by the parser. ``op`` is literal, list, name, field,
    index, neg, not, a binary operator, or ``|name`` for a filter; ``args`` are its operands;
    ``value`` is a literal's value or a name's or field's name."""

    op: str
    pos: int
    args: tuple[Node, ...] = ()
    value: Value = None
    depth: int = 1


def _node(op: str, pos: int, args: tuple[Node, ...] = (), value: Value = None) -> Node:
    return Node(op, pos, args, value, 1 + max((a.depth for a in args), default=0))


_COMPARISONS = frozenset({"==", "!=", "<", "<=", ">", ">=", "in"})


class _Parser:
    def __init__(self, text: str, tokens: list[_Token]) -> None:
        self.text, self.tokens, self.i, self.nesting = text, tokens, 0, 0

    def error(self, message: str, token: _Token | None = None) -> ExpressionError:
        return ExpressionError(message, (token or self.peek()).pos, self.text)

    def peek(self) -> _Token:
        return self.tokens[self.i]

    def take(self, *ops: str) -> _Token | None:
        token = self.tokens[self.i]
        if token.kind == "op" and token.text in ops:
            self.i += 1
            return token
        return None

    def expect(self, op: str) -> _Token:
        token = self.take(op)
        if token is None:
            raise self.error(f"expected '{op}', found {self._found()}")
        return token

    def _found(self) -> str:
        token = self.peek()
        return "the end" if token.kind == "end" and not token.text else repr(token.text)

    def nest(self) -> None:
        self.nesting += 1
        if self.nesting > MAX_DEPTH:
            raise self.error(f"nested more than {MAX_DEPTH} deep")

    def checked(self, node: Node) -> Node:
        if node.depth > 2 * MAX_DEPTH:
            raise ExpressionError(f"expression deeper than {2 * MAX_DEPTH} operations", node.pos, self.text)
        return node

    def whole(self) -> Node:
        node = self.expr()
        if self.peek().kind != "end":
            raise self.error(f"unexpected {self._found()}")
        return node

    def expr(self) -> Node:
        self.nest()
        node = self.binary_chain(("||",), self.conjunction)
        self.nesting -= 1
        return node

    def conjunction(self) -> Node:
        return self.binary_chain(("&&",), self.negation)

    def binary_chain(self, ops: tuple[str, ...], operand: Callable[[], Node]) -> Node:
        node = operand()
        while (token := self.take(*ops)) is not None:
            node = self.checked(_node(token.text, token.pos, (node, operand())))
        return node

    def negation(self) -> Node:
        token = self.take("!")
        if token is None:
            return self.comparison()
        self.nest()
        node = self.checked(_node("not", token.pos, (self.negation(),)))
        self.nesting -= 1
        return node

    def comparison(self) -> Node:
        node = self.pipe()
        token = self.take(*_COMPARISONS)
        if token is None:
            return node
        node = self.checked(_node(token.text, token.pos, (node, self.pipe())))
        if (again := self.take(*_COMPARISONS)) is not None:
            raise self.error("comparisons do not chain: use 'and'", again)
        return node

    def pipe(self) -> Node:
        node = self.sum()
        while (bar := self.take("|")) is not None:
            name = self.peek()
            if name.kind != "name" or name.text not in FILTER_NAMES:
                raise self.error(f"unknown filter {name.text!r} (filters: {', '.join(sorted(FILTER_NAMES))})",
                                 name)
            self.i += 1
            args = [node]
            if self.take("("):
                while self.peek().text != ")" and (len(args) == 1 or self.expect(",")):
                    args.append(self.expr())
                self.expect(")")
            node = self.checked(_node("|" + name.text, bar.pos, tuple(args)))
        return node

    def sum(self) -> Node:
        return self.binary_chain(("+", "-"), self.unary)

    def unary(self) -> Node:
        token = self.take("-")
        if token is None:
            return self.postfix()
        self.nest()
        node = self.checked(_node("neg", token.pos, (self.unary(),)))
        self.nesting -= 1
        return node

    def postfix(self) -> Node:
        node = self.primary()
        while True:
            if (dot := self.take(".")) is not None:
                name = self.peek()
                is_word_op = name.kind == "op" and isinstance(name.value, str)
                word = name.value if is_word_op and isinstance(name.value, str) else name.text
                if name.kind not in ("name", "keyword") and not is_word_op:
                    raise self.error(f"expected a field name after '.', found {self._found()}")
                self.i += 1
                node = self.checked(_node("field", dot.pos, (node,), word))
            elif (bracket := self.take("[")) is not None:
                index = self.expr()
                self.expect("]")
                node = self.checked(_node("index", bracket.pos, (node, index)))
            else:
                return node

    def primary(self) -> Node:
        token = self.peek()
        if token.kind in ("number", "duration", "string", "keyword"):
            self.i += 1
            return _node("literal", token.pos, value=token.value)
        if token.kind == "name":
            self.i += 1
            return _node("name", token.pos, value=token.text)
        if self.take("("):
            node = self.expr()
            self.expect(")")
            return node
        if self.take("["):
            items: list[Node] = []
            while self.peek().text != "]" and (not items or self.expect(",")):
                items.append(self.expr())
            self.expect("]")
            return self.checked(_node("list", token.pos, tuple(items)))
        raise self.error(f"expected a value, found {self._found()}")




def parse_tree(text: str, start: int = 0, *, embedded: bool = False) -> tuple[Node, int]:
    """The tree of the expression in ``text`` from ``start``: to the end, or (``embedded``, for
    templates) to the next ``}}`` outside a string. Returns the tree and the offset where the
    expression stopped (just past the ``}}`` when embedded). Positions are offsets in ``text``."""
    if not embedded and len(text) - start > MAX_SOURCE_CHARS:
        raise ExpressionError(f"expression longer than {MAX_SOURCE_CHARS} characters", start, text)
    tokens = _tokens(text, start, embedded)
    end = tokens[-1].pos
    if end - start > MAX_SOURCE_CHARS:
        raise ExpressionError(f"expression longer than {MAX_SOURCE_CHARS} characters", start, text)
    return _Parser(text, tokens).whole(), end + 2 if embedded else end
