"""Catch-up after downtime or a pause: which missed instants fire now, which are skipped.

This is an opt-in per job (``catch_up`` in its timing rules) and sits beside the misfire
rules of :mod:`jobring.core.planning`, which it does not change: a job without a catch-up
window keeps them (a fire late by at most the misfire threshold fires as CRON; beyond it the
misfire strategy fires once now or does nothing). For a job with a window, when the loop
finds the job's planned instant late by more than the misfire threshold (or resumes it after
a pause), it calls :func:`catch_up` with the last instant handled and now:

- instants whose logical time is older than ``now - window`` are skipped (``catch_up_window``);
- ``each``: every missed instant within the window fires now, oldest first, up to ``limit``;
  the rest are skipped (``catch_up_limit``);
- ``once``: only the latest missed instant within the window fires; the others are skipped
  (``catch_up_once``);
- a missed instant is one whose due time (after a calendar move, before jitter) is at or
  before now; calendar skips, ``start_at``/``end_at`` and ``max_runs`` apply as in
  :func:`~jobring.core.timing.plan.plan_next`. Catch-up fires start now (no jitter).

Lists are bounded: at most :data:`~jobring.core.timing.plan.MAX_SKIPPED_LISTED` skipped instants
are listed (then ``more_skipped``); the latest missed instant is found by bisection, so a long
outage costs a few dozen schedule look-ups, not one per missed instant. Planning resumes from
``resume_after_ms``.
"""

from __future__ import annotations

from dataclasses import dataclass

from jobring.core.timefmt import iso_ms
from jobring.core.timing.plan import (
    MAX_SKIPPED_LISTED,
    PlannedFire,
    SkipKind,
    SkipList,
    SkippedFire,
    SkipReason,
    plan_next,
)
from jobring.core.timing.rules import CatchUpMode, TimingRules
from jobring.core.timing.timeline import Timeline


@dataclass(frozen=True, slots=True)
class CatchUp:
    fires: tuple[PlannedFire, ...]
    skipped: tuple[SkippedFire, ...]
    more_skipped: bool
    resume_after_ms: int


class _Walk:
    """plan_next step by step, gathering its calendar skips into one bounded list."""

    def __init__(self, timeline: Timeline, rules: TimingRules, job_id: int, runs: int) -> None:
        self.timeline, self.rules, self.job_id, self.runs = timeline, rules, job_id, runs
        self.skips = SkipList(MAX_SKIPPED_LISTED)

    def step(self, cursor: int, now_ms: int, until: int) -> tuple[PlannedFire | None, int]:
        """The next missed fire after ``cursor`` with a logical instant up to ``until``, and the
        cursor past it; or None, and the cursor past the calendar skips listed on the way (the
        rest are found again by ordinary planning from there: not lost)."""
        plan = plan_next(
            self.timeline, self.rules, self.job_id, cursor, self.runs, max_listed=self.skips.room
        )
        fire = plan.fire
        if fire is not None and fire.due_ms <= now_ms and fire.logical_ms <= until:
            self.skips.extend(plan.skipped, plan.more_skipped)
            return fire, plan.resume_after_ms
        limit = min(now_ms, until)
        listed = tuple(s for s in plan.skipped if s.logical_ms <= limit)
        self.skips.extend(listed, False)
        return None, max([cursor, *(s.logical_ms for s in listed)])

    def due_after(self, cursor: int, now_ms: int) -> PlannedFire | None:
        plan = plan_next(self.timeline, self.rules, self.job_id, cursor, self.runs, max_listed=0)
        return plan.fire if plan.fire is not None and plan.fire.due_ms <= now_ms else None

    def latest_due(self, low: int, now_ms: int) -> PlannedFire | None:
        """The missed fire with the latest logical instant after ``low``, by bisection on the cursor
        (fires after a cursor come due in logical order, so "one is due after x" is monotonic)."""
        if self.due_after(low, now_ms) is None:
            return None
        high = now_ms
        while high - low > 1:
            middle = (low + high) // 2
            if self.due_after(middle, now_ms) is not None:
                low = middle
            else:
                high = middle
        return self.due_after(low, now_ms)

    def has_instant(self, cursor: int, until: int) -> bool:
        """Whether an instant of the job (inside its validity window) lies in (cursor, until]."""
        start_at, end_at = self.rules.start_at_ms, self.rules.end_at_ms
        instant = self.timeline.next_after(cursor if start_at is None else max(cursor, start_at - 1))
        return instant is not None and instant <= until and (end_at is None or instant <= end_at)


def _now_fire(fire: PlannedFire, now_ms: int) -> PlannedFire:
    return PlannedFire(fire.logical_ms, now_ms, 0, fire.moved_by)


def catch_up(
    timeline: Timeline, rules: TimingRules, job_id: int, last_ms: int, now_ms: int, runs_so_far: int
) -> CatchUp:
    """Missed instants after ``last_ms`` (the last instant handled) up to ``now_ms``."""
    if rules.catch_up is None:
        raise ValueError("the job has no catch-up rules")
    window_start = now_ms - rules.catch_up.window_ms
    walk = _Walk(timeline, rules, job_id, runs_so_far)
    old = SkipReason(
        SkipKind.CATCH_UP_WINDOW, f"missed; older than the catch-up window (before {iso_ms(window_start)})"
    )
    if rules.catch_up.mode is CatchUpMode.ONCE:
        return _once(walk, last_ms, now_ms, window_start, old)
    return _each(walk, last_ms, now_ms, window_start, old, rules.catch_up.limit)


def _each(walk: _Walk, cursor: int, now_ms: int, window_start: int, old: SkipReason, limit: int) -> CatchUp:
    fires: list[PlannedFire] = []
    over = SkipReason(SkipKind.CATCH_UP_LIMIT, f"missed; over the catch-up limit of {limit} fires")
    skips = walk.skips
    while True:
        if skips.full and cursor < window_start - 1:
            # No room to list old instants: jump over them.
            skips.more = skips.more or walk.has_instant(cursor, window_start - 1)
            cursor = window_start - 1
        elif skips.full and len(fires) >= limit:
            # No room to list instants over the limit: jump to the latest missed one.
            latest = walk.latest_due(cursor, now_ms)
            skips.more = skips.more or latest is not None
            cursor = cursor if latest is None else latest.logical_ms
            break
        fire, following = walk.step(cursor, now_ms, now_ms)
        cursor = following
        if fire is None:
            break
        if fire.logical_ms < window_start:
            skips.add(fire.logical_ms, old)
        elif len(fires) < limit:
            fires.append(_now_fire(fire, now_ms))
            walk.runs += 1
        else:
            skips.add(fire.logical_ms, over)
    return CatchUp(tuple(fires), skips.items, skips.more, cursor)


def _once(walk: _Walk, cursor: int, now_ms: int, window_start: int, old: SkipReason) -> CatchUp:
    latest = walk.latest_due(max(cursor, window_start - 1), now_ms)
    # Catch-up lists what lies before the fire it keeps (or the instants older than the window).
    until = window_start - 1 if latest is None else latest.logical_ms - 1
    superseded = old
    if latest is not None:
        superseded = SkipReason(
            SkipKind.CATCH_UP_ONCE,
            f"missed; the latest missed instant ({iso_ms(latest.logical_ms)}) fires instead",
        )
    skips = walk.skips
    while cursor < until:
        if skips.full:
            skips.more = skips.more or walk.has_instant(cursor, until)
            cursor = until
            break
        fire, cursor = walk.step(cursor, now_ms, until)
        if fire is None:
            break
        skips.add(fire.logical_ms, old if fire.logical_ms < window_start else superseded)
    if latest is None:
        return CatchUp((), skips.items, skips.more, cursor)
    # Anything before the kept fire not listed is given up; what lies after it is left to
    # ordinary planning (which resumes from it).
    skips.more = skips.more or walk.has_instant(cursor, until)
    return CatchUp((_now_fire(latest, now_ms),), skips.items, skips.more, latest.logical_ms)
