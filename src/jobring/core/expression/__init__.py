"""A tiny, safe expression language: the inside of ``{{ ... }}`` templates and workflow decisions.

Nothing here runs code. An expression reads JSON data and the datetimes it is given, by name
(``rows``), field (``a.b``, ``a["b c"]``) and index (``a[0]``); it compares (``== != < <= > >=``,
``in``), combines booleans (``and``/``&&``, ``or``/``||``, ``not``/``!``), adds and subtracts
numbers and durations (``logical_date - 1d``; units ``s m h d w``), builds lists (``["eu", "us"]``)
and passes a value through a filter (``x | fmt("%Y%m%d")``, see :data:`FILTERS`).

Precedence, lowest first: ``or``, ``and``, ``not``, one comparison (they do not chain), ``|``
filters, ``+ -``, unary ``-``, field/index access. So ``logical_date - 1d | fmt("%Y%m%d")`` formats
the shifted date and ``rows | default(0) > 10`` compares the defaulted value.

Types are strict (no truthiness, no coercion): ``and``/``or``/``not`` take booleans, ordering
compares two numbers, two strings, two datetimes or two durations, ``true != 1``. A name or field
that is absent is *missing*: ``default(v)`` replaces it (and null), ``exists`` tests for it, and
any other use is an error naming it. Errors are :class:`ExpressionError` with the position.

Bounded by construction: the source length, nesting and tree depth are capped, numbers have at
most :data:`MAX_NUMBER_CHARS` characters, there is no string or list concatenation, and every
operation is linear in its operands (which come from bounded JSON).
"""

from jobring.core.expression.evaluation import (
    FILTERS,
    Expression,
    parse_embedded,
    parse_expression,
    render_value,
)
from jobring.core.expression.syntax import (
    MAX_DEPTH,
    MAX_SOURCE_CHARS,
    ExpressionError,
    JsonValue,
    Value,
    where,
)

__all__ = [
    "FILTERS",
    "MAX_DEPTH",
    "MAX_SOURCE_CHARS",
    "Expression",
    "ExpressionError",
    "JsonValue",
    "Value",
    "parse_embedded",
    "parse_expression",
    "render_value",
    "where",
]
