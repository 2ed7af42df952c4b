"""Backfill planning: the runs that fill in a time range or a list of dates.

A request names either a range ``start``..``end`` (both included; ISO 8601 with an offset, or
epoch ms) or ``dates`` (``YYYY-MM-DD`` in the job's zone: every instant on those local days),
an ``order`` (``oldest_first`` or ``newest_first``), a ``parallelism`` cap (runs of the backfill
in progress at once, 1-:data:`MAX_BACKFILL_PARALLELISM`) and ``dry_run`` (list, start nothing).

The instants are the job's timeline (its cron with its DST rules, or its FIX_RATE grid).
Calendars are ignored by default (a backfill is an explicit request); with
``honour_calendars: true`` excluded instants are listed as skipped instead. ``start_at``,
``end_at``, ``max_runs``, jitter and calendar moves do not apply. Each run carries its logical
instant and its data interval (previous timeline instant, this instant). At most
:data:`MAX_BACKFILL_RUNS` instants per request (an error asks to narrow it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, timedelta, tzinfo
from enum import StrEnum

from jobring.core.cron import resolve_zone
from jobring.core.timing.calendars import CalendarSet, parse_date
from jobring.core.timing.errors import TimingError, parse_choice
from jobring.core.timing.plan import SkipKind, SkippedFire, SkipReason
from jobring.core.timing.rules import parse_instant_ms
from jobring.core.timing.timeline import Timeline
from jobring.core.timing.zones import instant_of_wall, wall_of_day

MAX_BACKFILL_RUNS = 10_000
MAX_BACKFILL_DATES = 1_000
MAX_BACKFILL_PARALLELISM = 64
_KEYS = ("start", "end", "dates", "order", "parallelism", "honour_calendars", "dry_run")


class BackfillOrder(StrEnum):
    OLDEST_FIRST = "oldest_first"
    NEWEST_FIRST = "newest_first"


@dataclass(frozen=True)
class BackfillRequest:
    start_ms: int | None = None
    end_ms: int | None = None
    dates: tuple[date, ...] = ()
    order: BackfillOrder = BackfillOrder.OLDEST_FIRST
    parallelism: int = 1
    honour_calendars: bool = False
    dry_run: bool = False


@dataclass(frozen=True, slots=True)
class BackfillRun:
    logical_ms: int
    interval_start_ms: int | None
    interval_end_ms: int


@dataclass(frozen=True)
class BackfillPlan:
    runs: tuple[BackfillRun, ...]  # in the order they start
    skipped: tuple[SkippedFire, ...]  # excluded by a calendar (honour_calendars only), oldest first
    parallelism: int
    dry_run: bool

    def next_to_start(self, started: int, running: int) -> tuple[BackfillRun, ...]:
        """The runs to start now, given how many have started and how many are in progress."""
        room = max(0, self.parallelism - running)
        return self.runs[started : started + room]


def _flag(spec: Mapping[str, object], key: str) -> bool:
    value = spec.get(key, False)
    if not isinstance(value, bool):
        raise TimingError(key, "must be true or false")
    return value


def parse_backfill_request(spec: Mapping[str, object]) -> BackfillRequest:
    """Validate a backfill request; errors name the field."""
    if not isinstance(spec, Mapping):
        raise TimingError("backfill", "must be an object")
    unknown = sorted(set(spec) - set(_KEYS))
    if unknown:
        raise TimingError(unknown[0], f"unknown key (expected {', '.join(_KEYS)})")
    has_range = spec.get("start") is not None or spec.get("end") is not None
    if has_range == (spec.get("dates") is not None):
        raise TimingError("start", "give either start and end, or dates")
    start = end = None
    dates: tuple[date, ...] = ()
    if has_range:
        for key in ("start", "end"):
            if spec.get(key) is None:
                raise TimingError(key, "required with a range")
        start, end = parse_instant_ms(spec["start"], "start"), parse_instant_ms(spec["end"], "end")
        if end < start:
            raise TimingError("end", "is before start")
    else:
        listed = spec["dates"]
        if not isinstance(listed, list | tuple) or not listed:
            raise TimingError("dates", "must be a non-empty list of dates (YYYY-MM-DD)")
        if len(listed) > MAX_BACKFILL_DATES:
            raise TimingError("dates", f"at most {MAX_BACKFILL_DATES} dates, got {len(listed)}")
        dates = tuple(sorted({parse_date(value, f"dates[{i}]") for i, value in enumerate(listed)}))
    parallelism = spec.get("parallelism", 1)
    if (
        isinstance(parallelism, bool)
        or not isinstance(parallelism, int)
        or not 1 <= parallelism <= MAX_BACKFILL_PARALLELISM
    ):
        raise TimingError(
            "parallelism", f"must be a whole number 1-{MAX_BACKFILL_PARALLELISM}, got {parallelism!r}"
        )
    return BackfillRequest(
        start_ms=start,
        end_ms=end,
        dates=dates,
        order=parse_choice(BackfillOrder, spec.get("order", "oldest_first"), "order"),
        parallelism=parallelism,
        honour_calendars=_flag(spec, "honour_calendars"),
        dry_run=_flag(spec, "dry_run"),
    )


def _spans(request: BackfillRequest, zone: tzinfo) -> list[tuple[int, int, str]]:
    """Inclusive instant spans to enumerate, each with the field to blame when it is too big."""
    if request.start_ms is not None and request.end_ms is not None:
        return [(request.start_ms, request.end_ms, "end")]
    spans: list[tuple[int, int, str]] = []
    for day in request.dates:
        first = instant_of_wall(zone, wall_of_day(day)) * 1000
        following = instant_of_wall(zone, wall_of_day(day + timedelta(days=1))) * 1000
        spans.append((first, following - 1, "dates"))
    return spans


def plan_backfill(
    timeline: Timeline, request: BackfillRequest, zone: str | tzinfo, calendars: CalendarSet | None = None
) -> BackfillPlan:
    """The runs of a backfill (and, honouring calendars, the instants they exclude)."""
    job_zone = resolve_zone(zone)
    runs: list[BackfillRun] = []
    skipped: list[SkippedFire] = []
    honour = request.honour_calendars and calendars is not None and bool(calendars)
    previous: int | None = None
    for first, last, field in _spans(request, job_zone):
        instant = timeline.next_after(first - 1)
        if instant is not None and instant <= last and instant != _next_of(timeline, previous):
            previous = timeline.previous_before(instant)
        while instant is not None and instant <= last:
            if len(runs) + len(skipped) >= MAX_BACKFILL_RUNS:
                raise TimingError(field, f"more than {MAX_BACKFILL_RUNS} instants; narrow the request")
            exclusion = calendars.is_excluded(instant) if honour and calendars is not None else None
            if exclusion is None:
                runs.append(BackfillRun(instant, previous, instant))
            else:
                skipped.append(
                    SkippedFire(instant, SkipReason(SkipKind.CALENDAR, exclusion.text, exclusion.calendar))
                )
            previous, instant = instant, timeline.next_after(instant)
    if request.order is BackfillOrder.NEWEST_FIRST:
        runs.reverse()
    return BackfillPlan(tuple(runs), tuple(skipped), request.parallelism, request.dry_run)


def _next_of(timeline: Timeline, instant: int | None) -> int | None:
    return None if instant is None else timeline.next_after(instant)
