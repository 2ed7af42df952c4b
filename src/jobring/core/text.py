"""Single-line text: names, titles, e-mail addresses, header values.

A single-line value holds no line break (as ``str.splitlines`` and the ``email`` package see
them: CR, LF, VT, FF, the file/group/record separators, NEL, U+2028, U+2029) and no other
control character (tab included): such a value can never start a new header or line wherever
it is written.
"""

from __future__ import annotations

import re

ONE_LINE_MESSAGE = "must be one line: no line breaks or control characters"
_BREAKING = "\\x00-\\x1f\\x7f\\x85\\u2028\\u2029"
_NOT_ON_ONE_LINE = re.compile(f"[{_BREAKING}]")
_BREAKING_RUNS = re.compile(f"[{_BREAKING}]+")
# The same class for JSON Schema readers (ECMA-262 regular expressions).
ONE_LINE_EXCLUDED = "\\u0000-\\u001f\\u007f\\u0085\\u2028\\u2029"


def one_line_problem(value: str) -> str | None:
    """Why ``value`` cannot be a single-line value, or None."""
    return ONE_LINE_MESSAGE if _NOT_ON_ONE_LINE.search(value) else None


def one_line(value: str) -> str:
    """``value`` with each run of line breaks and control characters replaced by a space."""
    return _BREAKING_RUNS.sub(" ", value)
