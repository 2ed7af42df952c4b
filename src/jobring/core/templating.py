"""Templates: text with ``{{ expression }}`` holes, one engine for every feature that fills text.

Used by workflow node params (``--rows={{ rows }}``), concurrency keys (``{{params.tenant}}``) and
business-date parameters (``{{ logical_date - 1d | fmt("%Y%m%d") }}``). The holes hold the
expression language of :mod:`jobring.core.expression` (fields, indexes, comparisons, durations,
filters); nothing else is interpreted and no code runs.

Rules the callers document to their users:

* Output: a string as itself, a datetime in ISO 8601 (use ``fmt`` for another form), any
  other JSON value as its compact JSON text (``true``, ``null``, ``[1,2]``). A duration alone
  cannot be rendered (add it to a date).
* A missing variable or field is an **error at render time** naming its position, not empty
  text: a silently empty parameter runs the job with the wrong input. Optional values say so:
  ``{{ region | default("eu") }}``.
* ``{{`` always opens a hole; a literal ``{{`` is written ``{{ "{{" }}``. A ``}}`` outside a hole
  is plain text.
* Sizes are capped: the template at :data:`MAX_TEMPLATE_CHARS`, the output at ``max_chars``
  (:data:`MAX_OUTPUT_CHARS` unless the caller's field is shorter, e.g. 512 for job params).

Errors are :class:`TemplateError` (an :class:`~jobring.core.expression.ExpressionError`) whose
text names the line and column in the template.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from jobring.core.expression import Expression, ExpressionError, Value, parse_embedded, render_value

__all__ = [
    "MAX_OUTPUT_CHARS",
    "MAX_TEMPLATE_CHARS",
    "Template",
    "TemplateError",
    "parse_template",
    "render_template",
]

MAX_TEMPLATE_CHARS = 16_384
MAX_OUTPUT_CHARS = 4_096
_OPEN = "{{"


class TemplateError(ExpressionError):
    """A template that does not parse or render; ``position`` is an offset in the template."""


@dataclass(frozen=True, slots=True)
class Template:
    """A parsed template: literal text and expressions, in order."""

    source: str
    parts: tuple[str | Expression, ...]

    @property
    def variables(self) -> frozenset[str]:
        """The top-level names the template reads."""
        names: set[str] = set()
        for part in self.parts:
            if isinstance(part, Expression):
                names |= part.variables
        return frozenset(names)

    @property
    def is_constant(self) -> bool:
        """True when the template has no hole (renders to its own text)."""
        return all(isinstance(part, str) for part in self.parts)

    def render(self, variables: Mapping[str, Value], *, max_chars: int = MAX_OUTPUT_CHARS) -> str:
        """The text with every hole filled from ``variables``; TemplateError on a missing name,
        a value that cannot be rendered, or output longer than ``max_chars``."""
        out: list[str] = []
        length = 0
        for part in self.parts:
            if isinstance(part, str):
                text = part
            else:
                try:
                    text = render_value(part.evaluate(variables))
                except ExpressionError as exc:
                    raise TemplateError(exc.message, exc.position, self.source) from None
                except ValueError as exc:  # a duration
                    raise TemplateError(str(exc), part.root.pos, self.source) from None
            length += len(text)
            if length > max_chars:
                position = part.root.pos if isinstance(part, Expression) else 0
                raise TemplateError(f"output longer than {max_chars} characters", position, self.source)
            out.append(text)
        return "".join(out)


def parse_template(text: str) -> Template:
    """Parse ``text``; TemplateError names the line and column of the first syntax error."""
    if len(text) > MAX_TEMPLATE_CHARS:
        raise TemplateError(f"template longer than {MAX_TEMPLATE_CHARS} characters", 0, text)
    parts: list[str | Expression] = []
    pos = 0
    while (start := text.find(_OPEN, pos)) >= 0:
        if start > pos:
            parts.append(text[pos:start])
        try:
            expression, pos = parse_embedded(text, start + len(_OPEN))
        except ExpressionError as exc:
            raise TemplateError(exc.message, exc.position, text) from None
        parts.append(expression)
    if pos < len(text):
        parts.append(text[pos:])
    return Template(text, tuple(parts))


def render_template(text: str, variables: Mapping[str, Value], *, max_chars: int = MAX_OUTPUT_CHARS) -> str:
    """Parse and render in one call (parse once with :func:`parse_template` when reused)."""
    return parse_template(text).render(variables, max_chars=max_chars)
