"""Run messages and logs as text for people (the CLI; the console has the same rules in
``console/src/lib/runText.ts``).

XXL-JOB writes ``<br>`` for line breaks in logs and messages (jobring's executor does too,
for compatibility), ``<span style=...>`` colouring in the trigger messages of adopted
databases, and ``>>>>>>>>>>> Title <<<<<<<<<<<`` section markers. Here breaks become lines,
that markup is dropped and a marker becomes ``-- Title --``; nothing else is touched.
"""

from __future__ import annotations

import re

__all__ = ["CHILD_HEADER", "log_text", "message_lines", "message_summary"]

# The section the admin appends to a successful parent's handle message (after a blank line),
# one line per child job it fired, as XXL-JOB does.
CHILD_HEADER = ">>>>>>>>>>> Trigger child job <<<<<<<<<<<"

_BREAK = re.compile(r"<br\s*/?>", re.IGNORECASE)
_SPAN = re.compile(r"</?span\b[^>]*>", re.IGNORECASE)
_MARKER = re.compile(r"\s*>{3,}\s*(.*?)\s*<{3,}\s*")


def log_text(content: str) -> str:
    """A chunk of an executor's log with its ``<br>`` markers as line breaks."""
    return _BREAK.sub("\n", content)


def message_lines(message: str | None) -> list[str]:
    """A trigger or handle message as display lines (markers as ``-- Title --``)."""
    lines: list[str] = []
    for line in _BREAK.sub("\n", _SPAN.sub("", message or "")).splitlines():
        marker = _MARKER.fullmatch(line)
        lines.append(f"-- {marker[1]} --" if marker else line)
    return lines


def message_summary(message: str | None, *, last: bool) -> str | None:
    """The first (or ``last``) line of the message that says something: no marker, not blank.
    A failed trigger's reason is its last such line, also when a retry marker follows it."""
    said = [line.strip() for line in _BREAK.sub("\n", _SPAN.sub("", message or "")).splitlines()
            if line.strip() and not _MARKER.fullmatch(line)]
    if not said:
        return None
    return said[-1] if last else said[0]
