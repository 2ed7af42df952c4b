"""Importing an iCalendar (``.ics``, RFC 5545) file as a calendar.

Each VEVENT becomes named times: an all-day event (``DTSTART;VALUE=DATE``) its days, from
DTSTART up to DTEND exclusive (one day without DTEND/DURATION); a timed event (with ``TZID``,
UTC ``Z``, or floating = the calendar's zone) a period ``[DTSTART, DTEND)`` (or DURATION).
Recurrences are expanded with ``python-dateutil``'s rrule: RRULE (any FREQ, COUNT, UNTIL,
BY* parts), RDATE and EXDATE; an event with a RECURRENCE-ID replaces that occurrence of its
series; CANCELLED events are left out. Open-ended rules are expanded up to ``until`` (a
parameter: the core reads no clock). Parsing uses the ``icalendar`` package.

Whatever is left out or cut is reported in :attr:`IcsImport.notes`, never dropped silently.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

import icalendar
from dateutil.rrule import rruleset, rrulestr

from jobring.core.cron import resolve_zone
from jobring.core.timing.calendars import MAX_DATE, MAX_DATES, MAX_PERIODS, Calendar, parse_calendar
from jobring.core.timing.errors import TimingError

MAX_OCCURRENCES = MAX_DATES


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
    series = rruleset()
    try:
        for rule in rules:
            text = rule.to_ical().decode()
            series.rrule(rrulestr(f"RRULE:{text}", dtstart=dtstart, ignoretz=False))  # type: ignore[arg-type]
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
    except (ValueError, TypeError) as exc:
        raise TimingError("ics", f"{event.label}: cannot expand its recurrence: {exc}") from None


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
    events: list[_Event] = []
    replaced: dict[str, set[object]] = {}
    for index, component in enumerate(document.walk("VEVENT")):
        uid = str(component.get("UID", "")) or "no UID"
        label = f"VEVENT {index} (UID {uid})"
        if str(component.get("STATUS", "")).upper() == "CANCELLED":
            notes.append(f"{label}: cancelled, left out")
            continue
        recurrence_id = _value(component, "RECURRENCE-ID")
        if recurrence_id is not None:
            replaced.setdefault(uid, set()).add(_key(recurrence_id))
        event = _event(component, label)
        if event is None:
            notes.append(f"{label}: ends at or before its start, left out")
            continue
        events.append(event)
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
                periods.append({"start": _text(start), "end": _text(start + length)})
            else:
                days.update(start + timedelta(days=n) for n in range(length.days))
    if len(periods) > MAX_PERIODS or len(days) > MAX_DATES:
        raise TimingError("ics", f"more than {MAX_DATES} days or {MAX_PERIODS} periods; import less")
    if not days and not periods:
        raise TimingError("ics", "no events to import")
    spec: dict[str, object] = {"name": name, "zone": zone, "invert": invert}
    spec["dates"] = [d.isoformat() for d in sorted(d for d in days if d <= MAX_DATE)]
    spec["periods"] = periods
    return IcsImport(parse_calendar(spec), tuple(notes))


def _text(value: datetime) -> str:
    """ISO text; a floating time stays without offset (the calendar's zone reads it)."""
    if value.tzinfo is None:
        return value.isoformat()
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
