"""Parsing of Quartz cron expressions into per-field value sets.

The grammar follows Quartz's ``CronExpression``; see the package docstring for
the accepted syntax and the few places where we are stricter than Quartz.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from jobring.errors import JobringError

SECONDS = "seconds"
MINUTES = "minutes"
HOURS = "hours"
DAY_OF_MONTH = "day-of-month"
MONTH = "month"
DAY_OF_WEEK = "day-of-week"
YEAR = "year"

FIELD_NAMES: tuple[str, ...] = (SECONDS, MINUTES, HOURS, DAY_OF_MONTH, MONTH, DAY_OF_WEEK, YEAR)

MIN_YEAR = 1970
MAX_YEAR = 2099
# Quartz: "L-n" accepts offsets up to 30.
MAX_LAST_DAY_OFFSET = 30

# (low, high) of each field's values.
_BOUNDS: dict[str, tuple[int, int]] = {
    SECONDS: (0, 59),
    MINUTES: (0, 59),
    HOURS: (0, 23),
    DAY_OF_MONTH: (1, 31),
    MONTH: (1, 12),
    DAY_OF_WEEK: (1, 7),
    YEAR: (MIN_YEAR, MAX_YEAR),
}
# Largest step Quartz accepts per field (year steps are only bounded by the range).
_MAX_STEP: dict[str, int] = {
    SECONDS: 59,
    MINUTES: 59,
    HOURS: 23,
    DAY_OF_MONTH: 31,
    MONTH: 12,
    DAY_OF_WEEK: 7,
    YEAR: MAX_YEAR - MIN_YEAR,
}

_MONTH_NAMES = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_DAY_NAMES = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
_NAMES: dict[str, dict[str, int]] = {
    MONTH: {name: i + 1 for i, name in enumerate(_MONTH_NAMES)},
    DAY_OF_WEEK: {name: i + 1 for i, name in enumerate(_DAY_NAMES)},
}

_VALUE = r"[0-9]+|[A-Z]+"
_RANGE_RE = re.compile(rf"(?P<start>{_VALUE})(?:-(?P<end>{_VALUE}))?(?:/(?P<step>[^/]*))?")
_ALL_RE = re.compile(r"\*?(?:/(?P<step>.*))?")
_LAST_DOM_RE = re.compile(r"L(?:-(?P<offset>[0-9]+))?(?P<weekday>W)?")
_NEAREST_WEEKDAY_RE = re.compile(r"(?P<day>[0-9]+)W")
_LAST_DOW_RE = re.compile(rf"(?P<day>{_VALUE})L")
_NTH_DOW_RE = re.compile(rf"(?P<day>{_VALUE})#(?P<nth>.*)")


class CronParseError(JobringError, ValueError):
    """An invalid cron expression; the message names the field and the problem."""


@dataclass(frozen=True)
class DayOfMonthRule:
    """What the day-of-month field selects (when it is not ``?``)."""

    days: frozenset[int]
    # "L" is offset 0, "L-3" is offset 3.
    last_day_offsets: frozenset[int] = frozenset()
    # "15W": the weekday nearest to the 15th, within the month.
    nearest_weekdays: frozenset[int] = frozenset()
    # "LW" / "L-3W": the weekday nearest to the (last day - offset).
    nearest_weekday_last_offsets: frozenset[int] = frozenset()


@dataclass(frozen=True)
class DayOfWeekRule:
    """What the day-of-week field selects (when it is not ``?``); days are 1 = Sunday .. 7 = Saturday."""

    days: frozenset[int]
    # "6L": the last Friday of the month.
    last_in_month: int | None = None
    # "6#3": (6, 3), the third Friday of the month.
    nth_in_month: tuple[int, int] | None = None


@dataclass(frozen=True)
class CronFields:
    seconds: frozenset[int]
    minutes: frozenset[int]
    hours: frozenset[int]
    day_of_month: DayOfMonthRule | None
    months: frozenset[int]
    day_of_week: DayOfWeekRule | None
    years: frozenset[int]


def _error(field: str, problem: str) -> CronParseError:
    return CronParseError(f"{field}: {problem}")


def _value(field: str, text: str, item: str) -> int:
    names = _NAMES.get(field)
    if text.isdigit():
        value = int(text)
    elif names is not None and text in names:
        value = names[text]
    elif names is not None:
        allowed = "-".join((next(iter(names)), list(names)[-1]))
        raise _error(field, f"unknown name {text!r} in {item!r} (expected a number or {allowed})")
    else:
        raise _error(field, f"{text!r} is not a number in {item!r}")
    low, high = _BOUNDS[field]
    if not low <= value <= high:
        raise _error(field, f"value {value} out of range {low}-{high} in {item!r}")
    return value


def _step(field: str, text: str, item: str) -> int:
    if not text.isdigit():
        raise _error(field, f"'/' must be followed by a positive integer in {item!r}")
    step = int(text)
    if step < 1 or step > _MAX_STEP[field]:
        raise _error(field, f"step {step} out of range 1-{_MAX_STEP[field]} in {item!r}")
    return step


def _expand(field: str, start: int, end: int, step: int, item: str) -> set[int]:
    """Values start, start+step, ... up to end; a range whose end is below its start wraps around."""
    low, high = _BOUNDS[field]
    if end >= start:
        return set(range(start, end + 1, step))
    if field == YEAR:
        raise _error(field, f"range start must not be after its end in {item!r}")
    size = high - low + 1
    return {low + (v - low) % size for v in range(start, end + size + 1, step)}


def _plain_item(field: str, item: str) -> set[int]:
    """``*``, ``*/n``, ``/n``, ``a``, ``a-b``, ``a/n``, ``a-b/n``."""
    low, high = _BOUNDS[field]
    all_match = _ALL_RE.fullmatch(item)
    if all_match is not None:
        step_text = all_match.group("step")
        step = 1 if step_text is None else _step(field, step_text, item)
        return _expand(field, low, high, step, item)
    range_match = _RANGE_RE.fullmatch(item)
    if range_match is None:
        raise _error(field, f"cannot parse {item!r}")
    start = _value(field, range_match.group("start"), item)
    end_text = range_match.group("end")
    step_text = range_match.group("step")
    step = 1 if step_text is None else _step(field, step_text, item)
    if end_text is not None:
        end = _value(field, end_text, item)
    elif step_text is not None:
        end = high
    else:
        return {start}
    return _expand(field, start, end, step, item)


def _split(field: str, text: str) -> list[str]:
    items = text.split(",")
    if any(not item for item in items):
        raise _error(field, f"empty list item in {text!r}")
    if "?" in text and text != "?":
        raise _error(field, f"'?' must stand alone, got {text!r}")
    return items


def _simple_field(field: str, text: str) -> frozenset[int]:
    if "?" in text:
        raise _error(field, "'?' is only allowed in day-of-month or day-of-week")
    # Month names (JUL) contain letters, so only name-less fields get this friendlier check;
    # in the month field a stray L or W is reported as an unknown name.
    for special in ("L", "W", "#"):
        if special in text and (field not in _NAMES or special == "#"):
            raise _error(field, f"{special!r} is not allowed in the {field} field")
    values: set[int] = set()
    for item in _split(field, text):
        values |= _plain_item(field, item)
    return frozenset(values)


def _day_of_month(text: str) -> DayOfMonthRule | None:
    field = DAY_OF_MONTH
    items = _split(field, text)
    if text == "?":
        return None
    days: set[int] = set()
    last_offsets: set[int] = set()
    nearest: set[int] = set()
    nearest_last: set[int] = set()
    for item in items:
        if "#" in item:
            raise _error(field, f"'#' is only allowed in day-of-week, got {item!r}")
        last = _LAST_DOM_RE.fullmatch(item)
        if last is not None:
            offset = int(last.group("offset") or 0)
            if offset > MAX_LAST_DAY_OFFSET:
                raise _error(field, f"offset from last day must be <= {MAX_LAST_DAY_OFFSET} in {item!r}")
            (nearest_last if last.group("weekday") else last_offsets).add(offset)
            continue
        if "L" in item:
            raise _error(field, f"'L' must be written as L, L-n, LW or L-nW, got {item!r}")
        weekday = _NEAREST_WEEKDAY_RE.fullmatch(item)
        if weekday is not None:
            nearest.add(_value(field, weekday.group("day"), item))
            continue
        if "W" in item:
            raise _error(field, f"'W' must follow a single day (like 15W or LW), got {item!r}")
        days |= _plain_item(field, item)
    return DayOfMonthRule(
        days=frozenset(days),
        last_day_offsets=frozenset(last_offsets),
        nearest_weekdays=frozenset(nearest),
        nearest_weekday_last_offsets=frozenset(nearest_last),
    )


def _day_of_week(text: str) -> DayOfWeekRule | None:
    field = DAY_OF_WEEK
    items = _split(field, text)
    if text == "?":
        return None
    if "W" in text.replace("WED", ""):
        raise _error(field, f"'W' is only allowed in day-of-month, got {text!r}")
    special = any(item != "L" and ("L" in item or "#" in item) for item in items)
    if len(items) > 1 and (special or "L" in items):
        raise _error(field, f"'L' and '#' cannot be combined with other days in a list, got {text!r}")
    item = items[0]
    if item == "L":
        # Quartz: a bare L in day-of-week means 7, Saturday.
        return DayOfWeekRule(days=frozenset({7}))
    last = _LAST_DOW_RE.fullmatch(item)
    if last is not None:
        day = _value(field, last.group("day"), item)
        return DayOfWeekRule(days=frozenset({day}), last_in_month=day)
    nth = _NTH_DOW_RE.fullmatch(item)
    if nth is not None:
        day = _value(field, nth.group("day"), item)
        nth_text = nth.group("nth")
        if not nth_text.isdigit() or not 1 <= int(nth_text) <= 5:
            raise _error(field, f"'#' must be followed by a number 1-5 in {item!r}")
        return DayOfWeekRule(days=frozenset({day}), nth_in_month=(day, int(nth_text)))
    if "L" in text or "#" in text:
        raise _error(field, f"'L' / '#' must be written as nL or n#k, got {item!r}")
    values: set[int] = set()
    for one in items:
        values |= _plain_item(field, one)
    return DayOfWeekRule(days=frozenset(values))


def parse_fields(expression: str) -> CronFields:
    """Split a 6- or 7-field Quartz expression and parse each field."""
    if not isinstance(expression, str):
        raise CronParseError(f"expression must be a string, got {type(expression).__name__}")
    parts = expression.upper().split()
    if len(parts) < 6:
        missing = FIELD_NAMES[len(parts)]
        raise CronParseError(
            f"{missing}: missing; expected 6 or 7 fields "
            f"(seconds minutes hours day-of-month month day-of-week [year]), got {len(parts)}"
        )
    if len(parts) > 7:
        raise CronParseError(f"too many fields: expected 6 or 7, got {len(parts)}")
    if len(parts) == 6:
        parts.append("*")
    seconds = _simple_field(SECONDS, parts[0])
    minutes = _simple_field(MINUTES, parts[1])
    hours = _simple_field(HOURS, parts[2])
    dom = _day_of_month(parts[3])
    months = _simple_field(MONTH, parts[4])
    dow = _day_of_week(parts[5])
    years = _simple_field(YEAR, parts[6])
    if (dom is None) == (dow is None):
        which = "both are '?'" if dom is None else "neither is '?'"
        raise CronParseError(
            f"day-of-month/day-of-week: exactly one of them must be '?' ({which}); "
            "specifying both a day-of-month and a day-of-week is not supported"
        )
    return CronFields(
        seconds=seconds,
        minutes=minutes,
        hours=hours,
        day_of_month=dom,
        months=months,
        day_of_week=dow,
        years=years,
    )
