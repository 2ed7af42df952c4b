"""Accepting Unix (Vixie) cron: convert a 5-field expression to the Quartz form we store.

``to_quartz`` takes what a user types and returns the Quartz expression to store, or raises
:class:`CronParseError` with a message that suggests the right form:

- 5 fields ``minute hour day-of-month month day-of-week`` (``*/5 * * * *``) become
  ``0 */5 * * * ?``: a seconds field of 0 is added and the unused day field becomes ``?``.
- Unix numbers weekdays 0-7 with 0 and 7 = Sunday, Quartz 1-7 with 1 = Sunday: the
  day-of-week field is rewritten with names (``1-5`` becomes ``MON-FRI``).
- When both day fields are restricted, Unix fires on days that match *either* (OR); Quartz
  cannot express that (one of them must be ``?``), and we do not extend it: the expression is
  refused with the two Quartz expressions that, as two jobs, fire the same. (A day field that
  starts with ``*`` but is not ``*``, like ``*/2``, makes Vixie AND the two fields: refused too.)
- Macros ``@yearly @annually @monthly @weekly @daily @midnight @hourly`` are accepted.
- 6 and 7 fields are Quartz and are validated as such; typical mistakes get a suggestion
  (``0 0 12 * * MON`` -> ``0 0 12 ? * MON``; a day-of-week of 0 -> Quartz's 1 = SUN).
"""

from __future__ import annotations

import re

from jobring.core.cron.parser import CronParseError, parse_fields

_MACROS = {
    "@yearly": "0 0 0 1 1 ?",
    "@annually": "0 0 0 1 1 ?",
    "@monthly": "0 0 0 1 * ?",
    "@weekly": "0 0 0 ? * SUN",
    "@daily": "0 0 0 * * ?",
    "@midnight": "0 0 0 * * ?",
    "@hourly": "0 0 * * * ?",
}
_UNIX_DAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
_DOW_ITEM = re.compile(r"(?P<start>\*|[0-9]+|[A-Z]{3})(?:-(?P<end>[0-9]+|[A-Z]{3}))?(?:/(?P<step>[0-9]+))?")
_QUARTZ_ONLY = re.compile(r"[?LW#]")
_NAMES = re.compile(r"JAN|FEB|MAR|APR|MAY|JUN|JUL|AUG|SEP|OCT|NOV|DEC|SUN|MON|TUE|WED|THU|FRI|SAT")
_FORMS = (
    "expected 5 fields (Unix: minute hour day-of-month month day-of-week) "
    "or 6-7 fields (Quartz: seconds minutes hours day-of-month month day-of-week [year])"
)


def to_quartz(expression: str) -> str:
    """The Quartz expression to store for a Unix (5 fields, or a macro) or Quartz (6-7) one."""
    if not isinstance(expression, str):
        raise CronParseError(f"expression must be a string, got {type(expression).__name__}")
    text = " ".join(expression.split())
    if text.startswith("@"):
        macro = _MACROS.get(text.lower())
        if macro is None:
            known = " ".join(sorted(_MACROS))
            raise CronParseError(f"unknown macro {text!r} (known: {known}; @reboot is not a schedule)")
        return macro
    parts = text.split(" ") if text else []
    if len(parts) == 5:
        return _from_unix(parts)
    if len(parts) in (6, 7):
        _check_quartz(parts)
        return text
    raise CronParseError(f"{_FORMS}, got {len(parts)}")


def _from_unix(parts: list[str]) -> str:
    minute, hour, dom, month, dow = parts
    original = " ".join(parts)
    if _QUARTZ_ONLY.search(_NAMES.sub("", original.upper())):
        guess = f"0 {original}"
        hint = f"; did you mean {guess!r}?" if _parses(guess) else ""
        raise CronParseError(
            f"{original!r} has 5 fields but uses Quartz syntax (? L W #); a Quartz expression starts "
            f"with a seconds field{hint}"
        )
    dom_all, dow_all = dom == "*", dow == "*"
    if not dom_all and not dow_all:
        both = dom.startswith("*") or dow.startswith("*")
        quartz_dow = _quartz_days(dow)
        by_dom = f"0 {minute} {hour} {dom} {month} ?"
        by_dow = f"0 {minute} {hour} ? {month} {quartz_dow}"
        rule = (
            "Unix cron then fires only on days matching both (a field starting with '*' makes it AND)"
            if both
            else "Unix cron then fires on days matching either"
        )
        raise CronParseError(
            f"day-of-month/day-of-week: both are restricted ({dom!r}, {dow!r}); {rule}, which a Quartz "
            f"expression cannot say. Use two jobs ({by_dom!r} and {by_dow!r}), or one field and a calendar"
        )
    if dow_all:
        quartz = f"0 {minute} {hour} {dom} {month} ?"
    else:
        quartz = f"0 {minute} {hour} ? {month} {_quartz_days(dow)}"
    try:
        parse_fields(quartz)
    except CronParseError as exc:
        raise CronParseError(f"{exc} (in {original!r}, read as Unix cron: {quartz!r})") from None
    return quartz


def _unix_day(text: str, field: str) -> int:
    if text.isdigit():
        value = int(text)
        if not 0 <= value <= 7:
            raise CronParseError(
                f"day-of-week: value {value} out of range 0-7 (Unix: 0 or 7 = SUN) in {field!r}"
            )
        return value
    if text in _UNIX_DAYS:
        return _UNIX_DAYS.index(text)
    raise CronParseError(f"day-of-week: unknown name {text!r} in {field!r} (expected 0-7 or SUN-SAT)")


def _unix_days(field: str) -> set[int]:
    """The Unix weekdays (0 = Sunday .. 6) a day-of-week field selects."""
    days: set[int] = set()
    for item in field.upper().split(","):
        match = _DOW_ITEM.fullmatch(item)
        if match is None:
            raise CronParseError(f"day-of-week: cannot parse {item!r} in {field!r}")
        start_text, end_text, step_text = match.group("start", "end", "step")
        step = int(step_text) if step_text is not None else 1
        if step < 1:
            raise CronParseError(f"day-of-week: step must be at least 1 in {item!r}")
        if start_text == "*":
            if end_text is not None:
                raise CronParseError(f"day-of-week: cannot parse {item!r} in {field!r}")
            start, end = 0, 7
        else:
            start = _unix_day(start_text, field)
            end = _unix_day(end_text, field) if end_text is not None else (7 if step_text else start)
        span = range(start, end + 1, step) if end >= start else range(start, end + 8, step)
        days.update(value % 7 for value in span)
    return days


def _quartz_days(field: str) -> str:
    """A Unix day-of-week field as a Quartz field of names (runs of 3+ as ranges)."""
    days = sorted(_unix_days(field))
    runs: list[list[int]] = []
    for day in days:
        if runs and day == runs[-1][-1] + 1:
            runs[-1].append(day)
        else:
            runs.append([day])
    if len(runs) > 1 and runs[0][0] == 0 and runs[-1][-1] == 6:
        # Saturday runs on into Sunday: one wrapping range (Quartz reads FRI-MON as it wraps).
        runs = [runs[-1] + runs[0], *runs[1:-1]]
    items = []
    for run in runs:
        if len(run) >= 3:
            items.append(f"{_UNIX_DAYS[run[0]]}-{_UNIX_DAYS[run[-1]]}")
        else:
            items.extend(_UNIX_DAYS[day] for day in run)
    return ",".join(items)


def _parses(expression: str) -> bool:
    try:
        parse_fields(expression)
    except CronParseError:
        return False
    return True


def _check_quartz(parts: list[str]) -> None:
    try:
        parse_fields(" ".join(parts))
    except CronParseError as exc:
        suggestion = _suggest(parts, str(exc))
        if suggestion is None:
            raise
        raise CronParseError(f"{exc}; {suggestion}") from None


def _suggest(parts: list[str], message: str) -> str | None:
    dom, dow = parts[3], parts[5]
    if message.startswith("day-of-month/day-of-week"):
        candidates = []
        if dom == "?" and dow == "?":
            candidates.append(_with(parts, 3, "*"))
        if dow == "*":
            candidates.append(_with(parts, 5, "?"))
        if dom == "*":
            candidates.append(_with(parts, 3, "?"))
        valid = [c for c in candidates if _parses(c)]
        if valid:
            return f"did you mean {valid[0]!r}?"
        return "put '?' in one of the two day fields (Quartz cannot combine day-of-month and day-of-week)"
    if message.startswith("day-of-week:") and re.search(r"(^|[,\-/])0($|[,\-/])", dow):
        return "Quartz numbers days 1-7 from Sunday (1 = SUN, 7 = SAT); Unix's 0 = Sunday is 1 or SUN here"
    return None


def _with(parts: list[str], index: int, value: str) -> str:
    changed = list(parts)
    changed[index] = value
    return " ".join(changed)
