"""A job's instants in both directions: the schedule (with its DST rules) as a timeline.

``next_after(t)`` is the first instant strictly after ``t``; ``previous_before(t)`` the last one
strictly before ``t`` (for data intervals, catch-up and backfill). All in epoch milliseconds.

- CRON: the instants of :class:`~jobring.core.timing.dst.DstCron`; going back is a binary
  search over ``next_after`` (it is monotonic), at most :data:`MAX_LOOKBACK_MS` back.
- FIX_RATE: a grid of ``interval`` through an anchor instant (the job's current planned
  instant); on the grid ``next_after`` equals ``FixRateSchedule.next_fire_ms``.
- NONE: no instants.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from jobring.core.planning import NextFire
from jobring.core.schedule import CronSchedule, FixRateSchedule, Schedule
from jobring.core.timing.dst import DstCron, DstRules

DAY_MS = 86_400_000
# Leap-day crons (29 FEB) go 8 years without a fire around 2100; nine years back covers them.
MAX_LOOKBACK_MS = 9 * 366 * DAY_MS


class Timeline(Protocol):
    def next_after(self, after_ms: int) -> int | None:
        """The first instant strictly after ``after_ms``, or None."""
        ...

    def previous_before(self, before_ms: int) -> int | None:
        """The last instant strictly before ``before_ms``, or None."""
        ...


@dataclass(frozen=True)
class GridTimeline:
    """Instants given by a monotonic NextFire (a cron expression in its zone)."""

    next_fire: NextFire

    def next_after(self, after_ms: int) -> int | None:
        return self.next_fire(after_ms)

    def previous_before(self, before_ms: int) -> int | None:
        def has_instant_before(after: int) -> bool:
            found = self.next_fire(after)
            return found is not None and found < before_ms

        step = 1000
        low = before_ms - 1 - step
        while not has_instant_before(low):
            if step > MAX_LOOKBACK_MS:
                return None
            step *= 2
            low = before_ms - 1 - step
        # Largest ``after`` with an instant in (after, before): that instant is the previous one.
        high = before_ms - 1
        while high - low > 1:
            middle = (low + high) // 2
            if has_instant_before(middle):
                low = middle
            else:
                high = middle
        return self.next_fire(low)


@dataclass(frozen=True)
class FixedRateTimeline:
    """``anchor + k * interval`` for every integer k."""

    interval_ms: int
    anchor_ms: int

    def next_after(self, after_ms: int) -> int:
        return self.anchor_ms + ((after_ms - self.anchor_ms) // self.interval_ms + 1) * self.interval_ms

    def previous_before(self, before_ms: int) -> int:
        return self.anchor_ms + ((before_ms - self.anchor_ms - 1) // self.interval_ms) * self.interval_ms


@dataclass(frozen=True)
class EmptyTimeline:
    def next_after(self, after_ms: int) -> None:
        return None

    def previous_before(self, before_ms: int) -> None:
        return None


def timeline_for(schedule: Schedule, dst: DstRules | None = None, anchor_ms: int = 0) -> Timeline:
    """The timeline of a parsed schedule. DST rules apply to CRON only; ``anchor_ms`` places a
    FIX_RATE grid (pass the job's current planned instant)."""
    if isinstance(schedule, CronSchedule):
        return GridTimeline(DstCron(schedule.expression, dst or DstRules()).next_fire_ms)
    if isinstance(schedule, FixRateSchedule):
        return FixedRateTimeline(schedule.interval_seconds * 1000, anchor_ms)
    return EmptyTimeline()
