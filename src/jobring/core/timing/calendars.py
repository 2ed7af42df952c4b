"""Named calendars: the times a job must not fire (or, inverted, the only times it may).

A calendar *names* times through any of these parts (their union), read on the wall clock of
the calendar's own zone:

- ``dates``: whole days (``"2026-10-01"``); ``date_ranges``: whole days, both ends included;
- ``workdays``: the days of the week that are workdays (``["MON", ..., "FRI"]``): every other
  day is named; ``day_windows``: times of day every day, ``[start, end)``, an end at or before
  the start wraps past midnight (``22:00``-``06:00``), ``24:00`` is the end of the day;
- ``cron``: the seconds a Quartz (or Unix) cron expression selects (``* * 0-6 ? * *`` is
  00:00:00-06:59:59), as Quartz's CronCalendar;
- ``periods``: absolute time ranges ``[start, end)`` (ISO 8601; without an offset, the
  calendar's zone): timed events of an imported ``.ics`` file.

Normally the named times are excluded; with ``invert: true`` only they are allowed ("only on
these"), and ``workdays`` is then refused (list the allowed days as dates or ranges). Several
calendars on one job exclude a time when any of them does, so inverted calendars intersect:
"only on these dates" and "only 09:00-17:00" give those dates between 09:00 and 17:00.

Times are whole seconds. ``next_allowed`` looks at most :data:`SEARCH_HORIZON_DAYS` ahead.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, tzinfo

from jobring.core.cron import CronExpression, CronParseError, resolve_zone, to_quartz
from jobring.core.timing.calendar_rules import CronRule, DaysRule, DayWindowsRule, WallRule, WorkdaysRule
from jobring.core.timing.errors import TimingError
from jobring.core.timing.zones import DAY, instant_of_wall, offset_at, segment_at, wall_of_naive

MAX_DATES = 20_000
MAX_DATE_RANGES = 1_000
MAX_DAY_WINDOWS = 100
MAX_PERIODS = 20_000
SEARCH_HORIZON_DAYS = 3_660
MIN_DATE, MAX_DATE = date(1970, 1, 1), date(2099, 12, 31)
_HORIZON = SEARCH_HORIZON_DAYS * DAY
_MAX_STEPS = 100_000
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9 _.:-]{0,63}")
_TIME = re.compile(r"(?P<h>[0-9]{2}):(?P<m>[0-9]{2})(?::(?P<s>[0-9]{2}))?")
_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
WEEKDAYS = ("MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN")
_FULL_DAYS = ("MONDAY", "TUESDAY", "WEDNESDAY", "THURSDAY", "FRIDAY", "SATURDAY", "SUNDAY")
_DAY_NUMBERS = {name: i + 1 for names in (WEEKDAYS, _FULL_DAYS) for i, name in enumerate(names)}
_KEYS = ("name", "zone", "dates", "date_ranges", "workdays", "day_windows", "cron", "periods", "invert")


@dataclass(frozen=True, slots=True)
class Exclusion:
    """Why a time is excluded: the calendar's name and the part that names it."""

    calendar: str
    rule: str

    @property
    def text(self) -> str:
        return f"calendar {self.calendar!r}: {self.rule}"


@dataclass(frozen=True, slots=True)
class _Period:
    start: int
    end: int
    label: str


class Calendar:
    """A validated calendar; build it with :func:`parse_calendar`."""

    def __init__(
        self,
        spec: dict[str, object],
        zone: tzinfo,
        rules: Sequence[WallRule],
        periods: Sequence[_Period],
    ) -> None:
        self._spec = spec
        self.name = str(spec["name"])
        self.zone = zone
        self.invert = bool(spec.get("invert", False))
        self._rules = tuple(rules)
        self._periods = tuple(sorted(periods, key=lambda p: (p.start, p.end)))
        merged: list[list[int]] = []
        for period in self._periods:
            if merged and period.start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], period.end)
            else:
                merged.append([period.start, period.end])
        self._starts = tuple(start for start, _ in merged)
        self._ends = tuple(end for _, end in merged)

    def __repr__(self) -> str:
        return f"Calendar({self.name!r})"

    def to_spec(self) -> dict[str, object]:
        """The normalised JSON-serialisable spec (parse_calendar(to_spec()) is equal)."""
        return dict(self._spec)

    # -- queries --------------------------------------------------------------------------------

    def is_excluded(self, instant_ms: int) -> Exclusion | None:
        """The reason the instant (epoch ms) is excluded, or None when it is allowed."""
        label = self._named_by(instant_ms // 1000)
        if self.invert:
            return None if label is not None else Exclusion(self.name, "invert (not a listed time)")
        return None if label is None else Exclusion(self.name, label)

    def next_allowed(self, instant_ms: int) -> int | None:
        """The first instant (epoch ms) at or after ``instant_ms`` that is not excluded; None
        when there is none within :data:`SEARCH_HORIZON_DAYS`."""
        second = instant_ms // 1000
        if (self._named_by(second) is None) != self.invert:
            return instant_ms
        found = self._first_named(second) if self.invert else self._first_unnamed(second)
        return None if found is None else found * 1000

    # -- search -----------------------------------------------------------------------------------

    def _named_by(self, second: int) -> str | None:
        offset = offset_at(self.zone, second) if self._rules else 0
        for rule in self._rules:
            label = rule.match(second + offset)
            if label is not None:
                return label
        period = self._period_at(second)
        if period is None:
            return None
        return next(p.label for p in self._periods if p.start <= second < p.end)

    def _period_at(self, second: int) -> tuple[int, int] | None:
        index = bisect_right(self._starts, second) - 1
        if index >= 0 and second < self._ends[index]:
            return self._starts[index], self._ends[index]
        return None

    def _next_period_start(self, second: int) -> int | None:
        if self._period_at(second) is not None:
            return second
        index = bisect_right(self._starts, second)
        return self._starts[index] if index < len(self._starts) else None

    def _wall_match_end(self, wall: int) -> int | None:
        """The first wall time at or after ``wall`` that no wall rule names."""
        for _ in range(_MAX_STEPS):
            moved = False
            for rule in self._rules:
                end = rule.match_end(wall)
                if end is None:
                    return None
                if end != wall:
                    wall, moved = end, True
            if not moved:
                return wall
        raise RuntimeError(f"calendar {self.name!r}: rules did not settle")

    def _first_unnamed(self, second: int) -> int | None:
        limit = second + _HORIZON
        while second <= limit:
            segment = segment_at(self.zone, second)
            wall_end = self._wall_match_end(second + segment.offset)
            if wall_end is None:
                return None
            candidate = wall_end - segment.offset
            if segment.end is not None and candidate >= segment.end:
                second = segment.end
                continue
            period = self._period_at(candidate)
            if period is None:
                return candidate if candidate <= limit else None
            second = period[1]
        return None

    def _first_named(self, second: int) -> int | None:
        limit = second + _HORIZON
        while second <= limit:
            segment = segment_at(self.zone, second)
            walls = [rule.next_match(second + segment.offset) for rule in self._rules]
            found = [wall - segment.offset for wall in walls if wall is not None]
            in_segment = [c for c in found if segment.end is None or c < segment.end]
            period = self._next_period_start(second)
            candidates = in_segment + ([period] if period is not None else [])
            best = min(candidates, default=None)
            if best is not None and (in_segment or segment.end is None or best < segment.end):
                return best if best <= limit else None
            if segment.end is None:
                return None
            second = segment.end
        return None


@dataclass(frozen=True)
class CalendarSet:
    """The calendars of one job: a time is excluded when any of them excludes it."""

    calendars: tuple[Calendar, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.calendars)

    def is_excluded(self, instant_ms: int) -> Exclusion | None:
        for calendar in self.calendars:
            reason = calendar.is_excluded(instant_ms)
            if reason is not None:
                return reason
        return None

    def next_allowed(self, instant_ms: int) -> int | None:
        """The first instant at or after ``instant_ms`` that no calendar excludes, or None."""
        current = instant_ms
        limit = instant_ms + _HORIZON * 1000
        for _ in range(_MAX_STEPS):
            moved = False
            for calendar in self.calendars:
                allowed = calendar.next_allowed(current)
                if allowed is None or allowed > limit:
                    return None
                if allowed != current:
                    current, moved = allowed, True
            if not moved:
                return current
        return None


# -- parsing ------------------------------------------------------------------------------------------


def _list(spec: Mapping[str, object], key: str, limit: int) -> list[object]:
    value = spec.get(key)
    if value is None:
        return []
    if not isinstance(value, list | tuple):
        raise TimingError(key, "must be a list")
    if len(value) > limit:
        raise TimingError(key, f"at most {limit} entries, got {len(value)}")
    return list(value)


def parse_date(value: object, field: str) -> date:
    """A ``YYYY-MM-DD`` date within 1970-2099."""
    if isinstance(value, date) and not isinstance(value, datetime):
        parsed = value
    elif isinstance(value, str) and _DATE.fullmatch(value.strip()):
        try:
            parsed = date.fromisoformat(value.strip())
        except ValueError:
            raise TimingError(field, f"not a valid date: {value!r}") from None
    else:
        raise TimingError(field, f"must be a date as YYYY-MM-DD, got {value!r}")
    if not MIN_DATE <= parsed <= MAX_DATE:
        raise TimingError(field, f"must be within {MIN_DATE}..{MAX_DATE}, got {parsed}")
    return parsed


def _time_of_day(value: object, field: str, *, end: bool) -> int:
    match = _TIME.fullmatch(value.strip()) if isinstance(value, str) else None
    if match is None:
        raise TimingError(field, f"must be a time of day as HH:MM or HH:MM:SS, got {value!r}")
    hours, minutes, seconds = int(match["h"]), int(match["m"]), int(match["s"] or 0)
    if end and (hours, minutes, seconds) == (24, 0, 0):
        return DAY
    if hours > 23 or minutes > 59 or seconds > 59:
        hint = " (24:00 ends a day)" if end else ""
        raise TimingError(field, f"not a valid time of day: {value!r}{hint}")
    return hours * 3600 + minutes * 60 + seconds


def _object(value: object, field: str, keys: tuple[str, ...]) -> Mapping[str, object]:
    if not isinstance(value, Mapping):
        raise TimingError(field, f"must be an object with {' and '.join(keys)}")
    for key in keys:
        if key not in value:
            raise TimingError(f"{field}.{key}", "required")
    unknown = sorted(set(value) - set(keys))
    if unknown:
        raise TimingError(f"{field}.{unknown[0]}", "unknown key")
    return value


def parse_instant(value: object, field: str, zone: tzinfo) -> int:
    """An ISO 8601 date-time as epoch seconds; without an offset it is a wall time of ``zone``
    (a repeated one read as its first occurrence, one in a gap as the end of the gap)."""
    if isinstance(value, datetime):
        parsed = value
    elif isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise TimingError(field, f"must be an ISO 8601 date-time, got {value!r}") from None
    else:
        raise TimingError(field, f"must be an ISO 8601 date-time, got {value!r}")
    if not MIN_DATE.year <= parsed.year <= MAX_DATE.year:
        raise TimingError(field, f"must be within {MIN_DATE.year}-{MAX_DATE.year}, got {parsed.year}")
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        return instant_of_wall(zone, wall_of_naive(parsed))
    return int(parsed.timestamp())


def _parse_name(value: object) -> str:
    if not isinstance(value, str) or not _NAME.fullmatch(value.strip()):
        raise TimingError(
            "name", "must be 1-64 characters: letters, digits, space, _ . : - (the first a letter or digit)"
        )
    return value.strip()


def _parse_zone(value: object, default_zone: str) -> tuple[str, tzinfo]:
    text = default_zone if value is None else value
    if not isinstance(text, str):
        raise TimingError("zone", "must be an IANA time zone name")
    try:
        return text.strip(), resolve_zone(text)
    except ValueError as exc:
        raise TimingError("zone", str(exc)) from None


def _parse_days(spec: Mapping[str, object]) -> tuple[list[tuple[int, int, str]], list[str], list[object]]:
    ranges: list[tuple[int, int, str]] = []
    dates = [parse_date(v, f"dates[{i}]") for i, v in enumerate(_list(spec, "dates", MAX_DATES))]
    ranges += [(d.toordinal(), d.toordinal(), f"dates[{i}] ({d})") for i, d in enumerate(dates)]
    normal_ranges: list[object] = []
    for i, item in enumerate(_list(spec, "date_ranges", MAX_DATE_RANGES)):
        field = f"date_ranges[{i}]"
        entry = _object(item, field, ("start", "end"))
        start = parse_date(entry["start"], f"{field}.start")
        end = parse_date(entry["end"], f"{field}.end")
        if end < start:
            raise TimingError(f"{field}.end", f"is before start ({end} < {start})")
        ranges.append((start.toordinal(), end.toordinal(), f"{field} ({start}..{end})"))
        normal_ranges.append({"start": start.isoformat(), "end": end.isoformat()})
    return ranges, [d.isoformat() for d in dates], normal_ranges


def _parse_workdays(spec: Mapping[str, object]) -> frozenset[int] | None:
    if spec.get("workdays") is None:
        return None
    days: list[int] = []
    for i, item in enumerate(_list(spec, "workdays", 7)):
        day = _DAY_NUMBERS.get(item.strip().upper()) if isinstance(item, str) else None
        if day is None:
            raise TimingError(f"workdays[{i}]", f"must be a day name MON-SUN, got {item!r}")
        if day in days:
            raise TimingError(f"workdays[{i}]", f"{WEEKDAYS[day - 1]} is listed twice")
        days.append(day)
    if not days:
        raise TimingError("workdays", "must list at least one day (no workdays would exclude every time)")
    return frozenset(days)


def _parse_windows(spec: Mapping[str, object]) -> tuple[list[tuple[int, int, str]], list[object]]:
    windows: list[tuple[int, int, str]] = []
    normal: list[object] = []
    for i, item in enumerate(_list(spec, "day_windows", MAX_DAY_WINDOWS)):
        field = f"day_windows[{i}]"
        entry = _object(item, field, ("start", "end"))
        start = _time_of_day(entry["start"], f"{field}.start", end=False)
        end = _time_of_day(entry["end"], f"{field}.end", end=True)
        if end == start:
            raise TimingError(f"{field}.end", "equals start (an empty window)")
        label = f"{field} ({_clock(start)}-{_clock(end)})"
        if end > start:
            windows.append((start, end, label))
        else:
            windows.append((start, DAY, label))
            if end > 0:
                windows.append((0, end, label))
        normal.append({"start": _clock(start), "end": _clock(end)})
    return windows, normal


def _clock(second: int) -> str:
    hours, rest = divmod(second, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"{hours:02d}:{minutes:02d}" + (f":{seconds:02d}" if seconds else "")


def _parse_cron(spec: Mapping[str, object]) -> tuple[CronRule | None, str | None]:
    value = spec.get("cron")
    if value is None:
        return None, None
    if not isinstance(value, str):
        raise TimingError("cron", "must be a cron expression")
    try:
        quartz = to_quartz(value)
        return CronRule(CronExpression(quartz, "UTC"), f"cron ({quartz})"), quartz
    except CronParseError as exc:
        raise TimingError("cron", str(exc)) from None


def _parse_periods(spec: Mapping[str, object], zone: tzinfo) -> tuple[list[_Period], list[object]]:
    periods: list[_Period] = []
    normal: list[object] = []
    for i, item in enumerate(_list(spec, "periods", MAX_PERIODS)):
        field = f"periods[{i}]"
        entry = _object(item, field, ("start", "end"))
        start = parse_instant(entry["start"], f"{field}.start", zone)
        end = parse_instant(entry["end"], f"{field}.end", zone)
        if end <= start:
            raise TimingError(f"{field}.end", "must be after start")
        periods.append(_Period(start, end, f"{field} ({_iso(start)}..{_iso(end)})"))
        normal.append({"start": _iso(start), "end": _iso(end)})
    return periods, normal


def _iso(second: int) -> str:
    return datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_calendar(spec: Mapping[str, object], default_zone: str = "UTC") -> Calendar:
    """Validate a calendar spec; raises :class:`TimingError` naming the offending part."""
    if not isinstance(spec, Mapping):
        raise TimingError("calendar", "must be an object")
    unknown = sorted(set(spec) - set(_KEYS))
    if unknown:
        raise TimingError(unknown[0], f"unknown key (expected {', '.join(_KEYS)})")
    name = _parse_name(spec.get("name"))
    zone_name, zone = _parse_zone(spec.get("zone"), default_zone)
    invert = spec.get("invert", False)
    if not isinstance(invert, bool):
        raise TimingError("invert", "must be true or false")
    day_ranges, dates, date_ranges = _parse_days(spec)
    workdays = _parse_workdays(spec)
    if invert and workdays is not None:
        raise TimingError("workdays", "cannot be used with invert; list allowed days as dates or date_ranges")
    windows, day_windows = _parse_windows(spec)
    cron_rule, cron = _parse_cron(spec)
    periods, normal_periods = _parse_periods(spec, zone)
    rules: list[WallRule] = []
    if day_ranges:
        rules.append(DaysRule(day_ranges))
    if workdays is not None and len(workdays) < 7:
        rules.append(WorkdaysRule(workdays))
    if windows:
        rules.append(DayWindowsRule(windows))
    if cron_rule is not None:
        rules.append(cron_rule)
    if invert and not rules and not periods:
        raise TimingError("invert", "an inverted calendar that lists no times would exclude every time")
    normal: dict[str, object] = {"name": name, "zone": zone_name, "invert": invert}
    optional: dict[str, object] = {
        "dates": dates,
        "date_ranges": date_ranges,
        "workdays": None if workdays is None else [WEEKDAYS[d - 1] for d in sorted(workdays)],
        "day_windows": day_windows,
        "cron": cron,
        "periods": normal_periods,
    }
    normal.update({key: value for key, value in optional.items() if value})
    return Calendar(normal, zone, rules, periods)


def calendar_from_dates(name: str, dates: Iterable[str | date], zone: str = "UTC") -> Calendar:
    """A calendar of whole days from a list of dates (``"2026-10-01"`` or ``date``)."""
    listed = [d.isoformat() if isinstance(d, date) else d for d in dates]
    return parse_calendar({"name": name, "zone": zone, "dates": listed})
