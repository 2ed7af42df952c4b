"""The expression language's tokens and syntax tree (see the package docstring for the grammar)."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import NamedTuple, TypeAlias

from jobring.errors import JobringError

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


class ExpressionError(JobringError, ValueError):
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


class _Token(NamedTuple):
    kind: str  # number, duration, string, name, keyword, op, end
    text: str  # for an op: the operator (``and`` is ``&&``)
    value: Value  # a literal's value; for a word operator, the word
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
    append = out.append
    match_at = _TOKEN.match
    pos, size = start, len(text)
    while pos < size:
        match = match_at(text, pos)
        if match is None:
            raise ExpressionError(f"unexpected character {text[pos]!r}", pos, text)
        kind = match.lastgroup
        if kind == "space":
            pos = match.end()
            continue
        word = match.group()
        if kind == "name":
            if word in _KEYWORDS:
                append(_Token("keyword", word, _KEYWORDS[word], pos))
            elif word in _WORD_OPS:
                append(_Token("op", _WORD_OPS[word], word, pos))
            else:
                append(_Token("name", word, None, pos))
        elif kind == "op":
            append(_Token("op", word, None, pos))
        elif kind == "string":
            value, end = _string(text, pos)
            append(_Token("string", text[pos:end], value, pos))
            pos = end
            continue
        elif kind == "number":
            append(_number(text, pos, word))
        elif embedded:  # "}}" closes the hole
            append(_Token("end", word, None, pos))
            return out
        else:
            raise ExpressionError("unexpected '}}'", pos, text)
        pos = match.end()
    if embedded:
        raise ExpressionError("'{{' without its '}}'", start - 2, text)
    append(_Token("end", "", None, pos))
    return out


# -- syntax tree ---------------------------------------------------------------------------------


class Node(NamedTuple):
    """One syntax-tree node, built only by the parser. ``op`` is literal, list, name, field,
    index, neg, not, a binary operator, or ``|name`` for a filter; ``args`` are its operands;
    ``value`` is a literal's value or a name's or field's name; ``depth`` the tree's height."""

    op: str
    pos: int
    args: tuple[Node, ...] = ()
    value: Value = None
    depth: int = 1


# Binding strength of infix operators (higher binds tighter). "!"/"not" takes an operand that
# may hold a comparison but not and/or; unary "-" and field/index access bind tightest.
_COMPARISON = 4
_INFIX = {"||": 1, "&&": 2, "==": _COMPARISON, "!=": _COMPARISON, "<": _COMPARISON, "<=": _COMPARISON,
          ">": _COMPARISON, ">=": _COMPARISON, "in": _COMPARISON, "|": 5, "+": 6, "-": 6}
_NOT_OPERAND = 3


class _Parser:
    """Precedence climbing over the token list (one call per operator, not per level)."""

    def __init__(self, text: str, tokens: list[_Token]) -> None:
        self.text, self.tokens, self.i, self.nesting = text, tokens, 0, 0

    def error(self, message: str, token: _Token | None = None) -> ExpressionError:
        return ExpressionError(message, (token or self.tokens[self.i]).pos, self.text)

    def take(self, op: str) -> _Token | None:
        token = self.tokens[self.i]
        if token.kind == "op" and token.text == op:
            self.i += 1
            return token
        return None

    def expect(self, op: str) -> _Token:
        token = self.take(op)
        if token is None:
            raise self.error(f"expected '{op}', found {self._found()}")
        return token

    def _found(self) -> str:
        token = self.tokens[self.i]
        return "the end" if token.kind == "end" and not token.text else repr(token.text)

    def node(self, op: str, pos: int, args: tuple[Node, ...] = (), value: Value = None) -> Node:
        depth = 1 + max(arg.depth for arg in args) if args else 1
        if depth > 2 * MAX_DEPTH:
            raise ExpressionError(f"expression deeper than {2 * MAX_DEPTH} operations", pos, self.text)
        return Node(op, pos, args, value, depth)

    def whole(self) -> Node:
        node = self.nested()
        if self.tokens[self.i].kind != "end":
            raise self.error(f"unexpected {self._found()}")
        return node

    def nested(self, min_strength: int = 1) -> Node:
        """An expression inside brackets, parentheses, arguments or after a prefix operator."""
        self.nesting += 1
        if self.nesting > MAX_DEPTH:
            raise self.error(f"nested more than {MAX_DEPTH} deep")
        node = self.expr(min_strength)
        self.nesting -= 1
        return node

    def expr(self, min_strength: int) -> Node:
        left = self.prefix()
        tokens = self.tokens
        while True:
            token = tokens[self.i]
            strength = _INFIX.get(token.text) if token.kind == "op" else None
            if strength is None or strength < min_strength:
                return left
            self.i += 1
            if token.text == "|":
                left = self.filter(left, token)
                continue
            left = self.node(token.text, token.pos, (left, self.expr(strength + 1)))
            if strength == _COMPARISON:
                after = tokens[self.i]
                if after.kind == "op" and _INFIX.get(after.text) == _COMPARISON:
                    raise self.error("comparisons do not chain: use 'and'", after)

    def prefix(self) -> Node:
        token = self.tokens[self.i]
        if token.kind == "op" and token.text in ("!", "-"):
            self.i += 1
            if token.text == "!":
                return self.node("not", token.pos, (self.nested(_NOT_OPERAND),))
            self.nesting += 1
            if self.nesting > MAX_DEPTH:
                raise self.error(f"nested more than {MAX_DEPTH} deep")
            operand = self.prefix()
            self.nesting -= 1
            return self.node("neg", token.pos, (operand,))
        return self.postfix(self.primary())

    def filter(self, operand: Node, bar: _Token) -> Node:
        name = self.tokens[self.i]
        if name.kind != "name" or name.text not in FILTER_NAMES:
            known = ", ".join(sorted(FILTER_NAMES))
            raise self.error(f"unknown filter {name.text!r} (filters: {known})", name)
        self.i += 1
        args = [operand]
        if self.take("("):
            while self.tokens[self.i].text != ")" and (len(args) == 1 or self.expect(",")):
                args.append(self.nested())
            self.expect(")")
        return self.node("|" + name.text, bar.pos, tuple(args))

    def postfix(self, node: Node) -> Node:
        while True:
            token = self.tokens[self.i]
            if token.kind != "op" or token.text not in (".", "["):
                return node
            self.i += 1
            if token.text == "[":
                index = self.nested()
                self.expect("]")
                node = self.node("index", token.pos, (node, index))
                continue
            name = self.tokens[self.i]
            is_word_op = name.kind == "op" and isinstance(name.value, str)
            if name.kind not in ("name", "keyword") and not is_word_op:
                raise self.error(f"expected a field name after '.', found {self._found()}")
            self.i += 1
            node = self.node("field", token.pos, (node,), name.value if is_word_op else name.text)

    def primary(self) -> Node:
        token = self.tokens[self.i]
        kind = token.kind
        if kind == "name":
            self.i += 1
            return Node("name", token.pos, (), token.text)
        if kind in ("number", "duration", "string", "keyword"):
            self.i += 1
            return Node("literal", token.pos, (), token.value)
        if self.take("("):
            node = self.nested()
            self.expect(")")
            return node
        if self.take("["):
            items: list[Node] = []
            while self.tokens[self.i].text != "]" and (not items or self.expect(",")):
                items.append(self.nested())
            self.expect("]")
            return self.node("list", token.pos, tuple(items))
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
