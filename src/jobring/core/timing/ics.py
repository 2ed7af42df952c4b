"""Importing an iCalendar (``.ics``, RFC 5545) file as a calendar.

Each VEVENT becomes named times: an all-day event (``DTSTART;VALUE=DATE``) its days, from
DTSTART up to DTEND exclusive (one day without DTEND/DURATION); a timed event (with ``TZID``,
UTC ``Z``, or floating = the calendar's zone) a period ``[DTSTART, DTEND)`` (or DURATION).
Recurrences are expanded with ``python-dateutil``'s rrule: RRULE (any FREQ, COUNT, UNTIL,
BY* parts), RDATE and EXDATE; an event with a RECURRENCE-ID replaces that occurrence of its
series; CANCELLED events are left out. Open-ended rules are expanded up to ``until`` (a
parameter: the core reads no clock). Parsing uses the ``icalendar`` package.

Bounded work (an import is untrusted input): at most :data:`MAX_EVENTS` VEVENTs; each event's
days are clipped to ``[MIN_DATE, min(until, MAX_DATE)]`` before they are expanded; the date and
period caps are checked while adding; a rule whose day parts (BYMONTH, BYMONTHDAY, BYYEARDAY,
BYDAY's weekdays) match no day in that range is left out with a note instead of being searched
(``dateutil`` would look up to year 9999); a sub-daily rule may not start before ``MIN_DATE``.
Date arithmetic that overflows is refused naming ``ics``.

Whatever is left out or cut is reported in :attr:`IcsImport.notes`, never dropped silently.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

import icalendar
from dateutil.rrule import DAILY, rrule, rruleset, rrulestr

from jobring.core.cron import resolve_zone
from jobring.core.timing.calendars import MAX_DATE, MAX_DATES, MAX_PERIODS, MIN_DATE, Calendar, parse_calendar
from jobring.core.timing.errors import TimingError

MAX_OCCURRENCES = MAX_DATES
MAX_EVENTS = 5_000  # VEVENTs in one file


@dataclass(frozen=True)
class IcsImport:
    calendar: Calendar
    notes: tuple[str, ...]


@dataclass(frozen=True)
class _Event:
    label: str
    start: date | datetime
    end: date | datetime
    component: Any


def _value(component: Any, key: str) -> Any:
    prop = component.get(key)
    return None if prop is None else prop.dt


def _as_list(prop: Any) -> list[Any]:
    if prop is None:
        return []
    return list(prop) if isinstance(prop, list) else [prop]


def _event(component: Any, label: str) -> _Event | None:
    start = _value(component, "DTSTART")
    if start is None:
        raise TimingError("ics", f"{label}: DTSTART missing")
    end = _value(component, "DTEND")
    if end is None:
        duration = _value(component, "DURATION")
        if duration is None:
            duration = timedelta(days=1) if not isinstance(start, datetime) else timedelta(0)
        if not isinstance(duration, timedelta):
            raise TimingError("ics", f"{label}: DURATION is not a duration")
        end = start + duration
    if isinstance(start, datetime) != isinstance(end, datetime):
        raise TimingError("ics", f"{label}: DTSTART and DTEND must both be dates or both date-times")
    if end <= start:
        return None
    return _Event(label, start, end, component)


def _rrule_start(value: date | datetime) -> datetime:
    return value if isinstance(value, datetime) else datetime(value.year, value.month, value.day)


def _occurrences(
    event: _Event, until: date, replaced: set[object], cut: list[str]
) -> Iterator[date | datetime]:
    """The event's start times (its DTSTART first), expanded up to ``until`` inclusive; appends a
    note to ``cut`` when occurrences after ``until`` were left out."""
    component = event.component
    rules = _as_list(component.get("RRULE"))
    extra = [d.dt for prop in _as_list(component.get("RDATE")) for d in prop.dts]
    excluded = [d.dt for prop in _as_list(component.get("EXDATE")) for d in prop.dts]
    is_day = not isinstance(event.start, datetime)
    if not rules and not extra:
        if _key(event.start) not in replaced:
            yield event.start
        return
    dtstart = _rrule_start(event.start)
    series = _series(event.label, dtstart, rules, until, cut)
    try:
        series.rdate(dtstart)
        for added in extra:
            series.rdate(_rrule_start(added))
        for removed in excluded:
            series.exdate(_rrule_start(removed))
    except (ValueError, TypeError) as exc:
        raise TimingError("ics", f"{event.label}: cannot expand its recurrence: {exc}") from None
    limit = datetime(until.year, until.month, until.day, 23, 59, 59)
    if dtstart.tzinfo is not None:
        limit = limit.replace(tzinfo=dtstart.tzinfo)
    try:
        for occurrence in series:
            if occurrence > limit:
                cut.append(f"{event.label}: occurrences after {until} left out")
                return
            value: date | datetime = occurrence.date() if is_day else occurrence
            if _key(value) not in replaced:
                yield value
    except (ValueError, TypeError, OverflowError) as exc:
        raise TimingError("ics", f"{event.label}: cannot expand its recurrence: {exc}") from None


def _series(label: str, dtstart: datetime, rules: list[Any], until: date, cut: list[str]) -> rruleset:
    """The event's RRULEs; one matching no day up to ``until`` is left out (noted in ``cut``)."""
    series = rruleset()
    try:
        for rule in rules:
            text = rule.to_ical().decode()
            parsed = rrulestr(f"RRULE:{text}", dtstart=dtstart, ignoretz=False)
            assert isinstance(parsed, rrule)
            if _part(parsed, "_freq") > DAILY and dtstart.date() < MIN_DATE:
                raise TimingError("ics", f"{label}: a sub-daily RRULE must not start before {MIN_DATE}")
            if not _reachable(parsed, max(dtstart.date(), MIN_DATE), until):
                cut.append(f"{label}: its RRULE matches no day up to {until}, left out")
                continue
            series.rrule(parsed)
    except (ValueError, TypeError) as exc:
        if isinstance(exc, TimingError):
            raise
        raise TimingError("ics", f"{label}: cannot expand its recurrence: {exc}") from None
    return series


def _part(rule: rrule, name: str) -> Any:
    """A BY part as dateutil normalised it (defaults from DTSTART filled in); no public accessor."""
    return getattr(rule, name)


def _reachable(rule: rrule, first: date, last: date) -> bool:
    """Whether some day in ``[first, last]`` passes the rule's day parts (weekday ordinals,
    BYSETPOS, and BYWEEKNO with WKST other than MO are not checked: they only narrow further).
    At most ~47,000 days."""
    months = _part(rule, "_bymonth")
    monthdays, negative_monthdays = _part(rule, "_bymonthday"), _part(rule, "_bynmonthday")
    yeardays = _part(rule, "_byyearday")
    # Week numbers checked as ISO weeks, which they are when weeks start on Monday (the default).
    weeks = _part(rule, "_byweekno") if _part(rule, "_wkst") == 0 else None
    weekdays = set(_part(rule, "_byweekday") or ()) | {w for w, _ in (_part(rule, "_bynweekday") or ())}
    day = first
    while day <= last:
        if months and day.month not in months:
            day = (day.replace(day=1) + timedelta(days=32)).replace(day=1)
            continue
        if (
            (not (monthdays or negative_monthdays) or _monthday_ok(day, monthdays, negative_monthdays))
            and (not yeardays or _yearday_ok(day, yeardays))
            and (not weekdays or day.weekday() in weekdays)
            and (not weeks or _week_ok(day, weeks))
        ):
            return True
        day += timedelta(days=1)
    return False


def _monthday_ok(day: date, positive: tuple[int, ...], negative: tuple[int, ...]) -> bool:
    if day.day in positive:
        return True
    following = (day.replace(day=1) + timedelta(days=32)).replace(day=1)
    return (day - following).days in negative


def _week_ok(day: date, weeks: tuple[int, ...]) -> bool:
    year, week, _ = day.isocalendar()
    count = date(year, 12, 28).isocalendar().week
    return week in weeks or week - count - 1 in weeks


def _yearday_ok(day: date, yeardays: tuple[int, ...]) -> bool:
    ordinal = day.timetuple().tm_yday
    length = 366 if date(day.year, 12, 31).timetuple().tm_yday == 366 else 365
    return ordinal in yeardays or ordinal - length - 1 in yeardays


def _key(value: date | datetime) -> object:
    """A comparable identity for a RECURRENCE-ID / occurrence start."""
    if isinstance(value, datetime):
        return value.astimezone(UTC) if value.tzinfo is not None else value
    return value


def _parse(text: str | bytes) -> Any:
    try:
        return icalendar.Calendar.from_ical(text)
    except (ValueError, IndexError, KeyError) as exc:
        raise TimingError("ics", f"not a valid iCalendar file: {exc}") from None


def calendar_from_ics(
    name: str,
    text: str | bytes,
    *,
    until: date,
    zone: str = "UTC",
    invert: bool = False,
) -> IcsImport:
    """Build a calendar from ``.ics`` text; recurrences are expanded up to ``until``."""
    try:
        resolve_zone(zone)
    except ValueError as exc:
        raise TimingError("zone", str(exc)) from None
    until = min(until, MAX_DATE)
    document = _parse(text)
    notes: list[str] = []
    events, replaced = _events(document, notes)
    days: set[date] = set()
    periods: list[dict[str, str]] = []
    count = 0
    for event in events:
        uid = str(event.component.get("UID", "")) or "no UID"
        overrides = set() if event.component.get("RECURRENCE-ID") is not None else replaced.get(uid, set())
        length = event.end - event.start  # type: ignore[operator]
        for start in _occurrences(event, until, overrides, notes):
            count += 1
            if count > MAX_OCCURRENCES:
                raise TimingError(
                    "ics", f"more than {MAX_OCCURRENCES} occurrences up to {until}; import less"
                )
            if isinstance(start, datetime):
                periods.append({"start": _text(start), "end": _text(_plus(start, length, event.label))})
                if len(periods) > MAX_PERIODS:
                    raise TimingError("ics", f"more than {MAX_PERIODS} periods up to {until}; import less")
            else:
                _add_days(days, start, length.days, until)
    if not days and not periods:
        raise TimingError("ics", "no events to import")
    spec: dict[str, object] = {"name": name, "zone": zone, "invert": invert}
    spec["dates"] = [d.isoformat() for d in sorted(d for d in days if d <= MAX_DATE)]
    spec["periods"] = periods
    return IcsImport(parse_calendar(spec), tuple(notes))


def _events(document: Any, notes: list[str]) -> tuple[list[_Event], dict[str, set[object]]]:
    """The file's events to expand (at most MAX_EVENTS) and the occurrences overridden per UID."""
    events: list[_Event] = []
    replaced: dict[str, set[object]] = {}
    for index, component in enumerate(document.walk("VEVENT")):
        if index >= MAX_EVENTS:
            raise TimingError("ics", f"more than {MAX_EVENTS} events; import less")
        uid = str(component.get("UID", "")) or "no UID"
        label = f"VEVENT {index} (UID {uid})"
        if str(component.get("STATUS", "")).upper() == "CANCELLED":
            notes.append(f"{label}: cancelled, left out")
            continue
        recurrence_id = _value(component, "RECURRENCE-ID")
        if recurrence_id is not None:
            replaced.setdefault(uid, set()).add(_key(recurrence_id))
        try:
            event = _event(component, label)
        except (OverflowError, ValueError) as exc:
            if isinstance(exc, TimingError):
                raise
            raise TimingError("ics", f"{label}: its times are out of range: {exc}") from None
        if event is None:
            notes.append(f"{label}: ends at or before its start, left out")
            continue
        events.append(event)
    return events, replaced


def _plus(start: datetime, length: timedelta, label: str) -> datetime:
    try:
        return start + length
    except OverflowError:
        raise TimingError("ics", f"{label}: ends after year 9999") from None


def _add_days(days: set[date], start: date, length: int, until: date) -> None:
    """The all-day occurrence's days within ``[MIN_DATE, until]`` (clipped before expanding),
    the date cap checked while adding."""
    first = max(start, MIN_DATE)
    last = until if (until - start).days < length else start + timedelta(days=length - 1)
    day = first
    while day <= last:
        days.add(day)
        if len(days) > MAX_DATES:
            raise TimingError("ics", f"more than {MAX_DATES} days up to {until}; import less")
        day += timedelta(days=1)


def _text(value: datetime) -> str:
    """ISO text; a floating time stays without offset (the calendar's zone reads it)."""
    if value.tzinfo is None:
        return value.isoformat()
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
