"""The next fire of a job under its timing rules, and the instants skipped on the way.

:func:`plan_next` walks the job's timeline after an instant and applies, in this order:

1. ``max_runs``: with ``runs_so_far >= max_runs`` nothing fires any more (skipped instants do
   not count as runs).
2. the validity window: instants before ``start_at`` are not part of the schedule (nothing is
   recorded); the first instant after ``end_at`` ends it.
3. calendars (judged at the instant, in each calendar's zone): an excluded instant is
   ``skip``-ped (listed with the calendar's name and part, for a ``skipped`` run record) or
   ``move``-d to the next allowed time. Several instants of one excluded span move as one: the
   *last* of them fires at the allowed time (it stands for the most recent data), the earlier
   ones are skipped. A move whose allowed time is past ``end_at``, or beyond the search horizon,
   is a skip.
4. jitter: the fire starts ``jitter_delay`` after its (possibly moved) time, a delay derived from
   (job id, logical instant) by blake2b (so every admin node computes the same value), at most
   ``jitter_ms``, always before the next instant of the timeline and never past ``end_at``.
   Calendars judge the time before jitter.

The fire's *logical* instant (its identity with the job id, and its business time) is always
the timeline instant, whatever the move or jitter. After a fire, plan again from
``resume_after_ms``. At most :data:`MAX_SKIPPED_LISTED` skipped instants are listed per call (then
``more_skipped``; the rest are jumped over, span by span), at most :data:`MAX_PLAN_STEPS`
timeline instants are looked at, and nothing further than :data:`PLAN_HORIZON_MS` ahead.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from hashlib import blake2b

from jobring.core.schedule import MAX_PREVIEW_COUNT
from jobring.core.timefmt import iso_ms
from jobring.core.timing.calendars import Exclusion
from jobring.core.timing.rules import CalendarAction, TimingRules
from jobring.core.timing.timeline import DAY_MS, Timeline

MAX_SKIPPED_LISTED = 100
MAX_PLAN_STEPS = 2_000
PLAN_HORIZON_MS = 3_660 * DAY_MS


class SkipKind(StrEnum):
    CALENDAR = "calendar"  # a calendar excludes the instant
    CALENDAR_MERGED = "calendar_merged"  # excluded; a later instant of the span moves instead
    CATCH_UP_WINDOW = "catch_up_window"  # missed, older than the catch-up window
    CATCH_UP_ONCE = "catch_up_once"  # missed, a later missed instant fires instead
    CATCH_UP_LIMIT = "catch_up_limit"  # missed, over the catch-up limit
    NOT_CAUGHT_UP = "not_caught_up"  # missed by more than the misfire threshold, no catch-up


@dataclass(frozen=True, slots=True)
class SkipReason:
    kind: SkipKind
    detail: str
    calendar: str | None = None

    @property
    def text(self) -> str:
        return self.detail


@dataclass(frozen=True, slots=True)
class SkippedFire:
    logical_ms: int
    reason: SkipReason


@dataclass(frozen=True, slots=True)
class PlannedFire:
    """``logical_ms``: the instant it stands for; ``fire_at_ms``: when to start it (moved time
    plus jitter); ``moved_by``: the exclusion that moved it, if any."""

    logical_ms: int
    fire_at_ms: int
    jitter_ms: int = 0
    moved_by: Exclusion | None = None

    @property
    def due_ms(self) -> int:
        """The time before jitter (the logical instant, or the allowed time it moved to)."""
        return self.fire_at_ms - self.jitter_ms


class PlanEnd(StrEnum):
    SCHEDULE_ENDED = "schedule_ended"  # the timeline has no further instant
    END_AT = "end_at"  # the next instant is after end_at
    MAX_RUNS = "max_runs"  # the job has run max_runs times
    NO_ALLOWED_TIME = "no_allowed_time"  # calendars allow nothing within the horizon; retry later
    SEARCH_LIMIT = "search_limit"  # MAX_PLAN_STEPS instants looked at; plan again from resume


@dataclass(frozen=True, slots=True)
class Plan:
    fire: PlannedFire | None
    skipped: tuple[SkippedFire, ...]
    more_skipped: bool
    resume_after_ms: int
    end: PlanEnd | None = None


def jitter_delay(job_id: int, logical_ms: int, bound_ms: int) -> int:
    """A delay in ``[0, bound_ms]`` that depends only on (job id, logical instant)."""
    if bound_ms <= 0:
        return 0
    digest = blake2b(f"{job_id}:{logical_ms}".encode(), digest_size=8, person=b"jobring-jitter").digest()
    return int.from_bytes(digest, "big") % (bound_ms + 1)


def _planned(
    timeline: Timeline, rules: TimingRules, job_id: int, logical: int, due: int, moved_by: Exclusion | None
) -> PlannedFire:
    bound = rules.jitter_ms
    if bound > 0:
        following = timeline.next_after(due)
        if following is not None:
            bound = min(bound, following - due - 1)
        if rules.end_at_ms is not None:
            bound = min(bound, rules.end_at_ms - due)
    delay = jitter_delay(job_id, logical, bound)
    return PlannedFire(logical, due + delay, delay, moved_by)


class SkipList:
    """Skipped instants listed up to a limit; ``more`` once one more could not be listed."""

    def __init__(self, limit: int) -> None:
        self._listed: list[SkippedFire] = []
        self._limit = limit
        self.more = False
        self.nothing_allowed = False
        # The last allowed time found and the excluded instant it was found from: every time
        # between them is excluded, so an instant in between has the same next allowed time.
        self.allowed_from: tuple[int, int] | None = None

    @property
    def full(self) -> bool:
        return len(self._listed) >= self._limit

    @property
    def room(self) -> int:
        return max(0, self._limit - len(self._listed))

    @property
    def items(self) -> tuple[SkippedFire, ...]:
        return tuple(self._listed)

    def add(self, instant: int, reason: SkipReason) -> None:
        if self.full:
            self.more = True
        else:
            self._listed.append(SkippedFire(instant, reason))

    def extend(self, skipped: tuple[SkippedFire, ...], more: bool) -> None:
        for item in skipped:
            self.add(item.logical_ms, item.reason)
        self.more = self.more or more


def _calendar_reason(exclusion: Exclusion, kind: SkipKind = SkipKind.CALENDAR, note: str = "") -> SkipReason:
    return SkipReason(kind, exclusion.text + note, exclusion.calendar)


def _on_excluded(
    timeline: Timeline, rules: TimingRules, job_id: int, instant: int, exclusion: Exclusion, skips: SkipList
) -> PlannedFire | int | None:
    """An excluded instant: the moved fire, or the cursor to go on from (the instant is skipped),
    or None when calendars allow no time within the horizon."""
    # Once calendars allow nothing ahead, later instants of this search need not look again.
    known = skips.allowed_from
    if skips.nothing_allowed:
        allowed = None
    elif known is not None and known[0] <= instant < known[1]:
        allowed = known[1]  # within the excluded span already searched (a long span: no search per instant)
    else:
        allowed = rules.calendars.next_allowed(instant)
        skips.allowed_from = None if allowed is None else (instant, allowed)
    skips.nothing_allowed = allowed is None
    end_at = rules.end_at_ms
    movable = allowed is not None and (end_at is None or allowed <= end_at)
    if rules.calendar_action is CalendarAction.MOVE and allowed is not None and movable:
        following = timeline.next_after(instant)
        if following is None or following >= allowed:
            return _planned(timeline, rules, job_id, instant, allowed, exclusion)
        note = f"; a later instant moves to {iso_ms(allowed)}"
        skips.add(instant, _calendar_reason(exclusion, SkipKind.CALENDAR_MERGED, note))
        if skips.full:
            # Jump to the last instant before the allowed time: it is the one that moves.
            last = timeline.previous_before(allowed)
            if last is not None and last > following:
                skips.more = True
                return last - 1
        return instant
    note = "" if movable or rules.calendar_action is CalendarAction.SKIP else "; no allowed time to move to"
    skips.add(instant, _calendar_reason(exclusion, note=note))
    if allowed is None:
        # Nothing allowed within the horizon: go on listing instants (end_at may come first).
        return None if skips.full else instant
    if skips.full:
        # Jump the rest of the excluded span: its instants are skipped, not listed.
        following = timeline.next_after(instant)
        if following is not None and following < allowed:
            skips.more = True
            return allowed - 1
    return instant


def plan_next(
    timeline: Timeline,
    rules: TimingRules,
    job_id: int,
    after_ms: int,
    runs_so_far: int,
    *,
    max_listed: int = MAX_SKIPPED_LISTED,
) -> Plan:
    """The first fire after ``after_ms`` under ``rules`` and the instants skipped before it."""
    if rules.max_runs is not None and runs_so_far >= rules.max_runs:
        return Plan(None, (), False, after_ms, PlanEnd.MAX_RUNS)
    cursor = after_ms
    if rules.start_at_ms is not None and cursor < rules.start_at_ms - 1:
        cursor = rules.start_at_ms - 1
    skips = SkipList(max_listed)
    horizon = max(cursor, after_ms) + PLAN_HORIZON_MS
    calendars, end_at = rules.calendars, rules.end_at_ms

    def done(fire: PlannedFire | None, resume: int, end: PlanEnd | None = None) -> Plan:
        return Plan(fire, skips.items, skips.more, resume, end)

    for _ in range(MAX_PLAN_STEPS):
        instant = timeline.next_after(cursor)
        if instant is None:
            return done(None, cursor, PlanEnd.SCHEDULE_ENDED)
        if end_at is not None and instant > end_at:
            return done(None, cursor, PlanEnd.END_AT)
        if instant > horizon:
            return done(None, cursor, PlanEnd.NO_ALLOWED_TIME)
        exclusion = calendars.is_excluded(instant) if calendars else None
        if exclusion is None:
            return done(_planned(timeline, rules, job_id, instant, instant, None), instant)
        outcome = _on_excluded(timeline, rules, job_id, instant, exclusion, skips)
        if isinstance(outcome, PlannedFire):
            return done(outcome, instant)
        if outcome is None:
            return done(None, instant, PlanEnd.NO_ALLOWED_TIME)
        cursor = outcome
    return done(None, cursor, PlanEnd.SEARCH_LIMIT)


@dataclass(frozen=True, slots=True)
class Preview:
    fires: tuple[PlannedFire, ...]
    skipped: tuple[SkippedFire, ...]
    end: PlanEnd | None


def preview(
    timeline: Timeline, rules: TimingRules, job_id: int, after_ms: int, runs_so_far: int, count: int
) -> Preview:
    """The next ``count`` fires (what the API, CLI and console show), with the skipped instants
    between them (at most MAX_SKIPPED_LISTED in all)."""
    if not 0 <= count <= MAX_PREVIEW_COUNT:
        raise ValueError(f"count must be 0-{MAX_PREVIEW_COUNT}, got {count}")
    fires: list[PlannedFire] = []
    skipped: list[SkippedFire] = []
    cursor, runs = after_ms, runs_so_far
    end: PlanEnd | None = None
    while len(fires) < count:
        plan = plan_next(timeline, rules, job_id, cursor, runs, max_listed=MAX_SKIPPED_LISTED - len(skipped))
        skipped.extend(plan.skipped)
        if plan.fire is None:
            end = plan.end
            break
        fires.append(plan.fire)
        cursor, runs = plan.resume_after_ms, runs + 1
    return Preview(tuple(fires), tuple(skipped), end)
