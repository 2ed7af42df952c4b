"""What to do with a job's planned fire at a given instant: pure scheduling decisions.

The scheduling loop asks :func:`decide_fire` when a job's planned instant comes up (or
when it claims a job whose stored ``trigger_next_time`` is already in the past). The
rules follow XXL-JOB's schedule loop:

* more than :data:`MISFIRE_THRESHOLD_MS` late: the misfire strategy applies to that
  instant. FIRE_ONCE_NOW fires once now (trigger type MISFIRE), DO_NOTHING skips; either
  way the instants passed over that are also beyond the threshold go with it (no burst of
  stale fires), and the job resumes at its first instant that is not (on the job's grid,
  see below): those still within the threshold fire late, one by one.
* due (late by at most the threshold, or exactly on time): fire (trigger type CRON). The
  next instant is the schedule's next one after it, even when that is due already: a
  fire delayed by a short outage (a database restart, a lock session re-established, a
  takeover) is sent late, and so is every instant that came due meanwhile, as long as it
  is within the threshold. XXL-JOB plans a late fire's next instant from "now" instead,
  passing over the instants in between; it also recomputes a FIX_RATE job from "now" and
  so shifts its phase, where here the next instant is found by stepping along the
  schedule from the planned one, keeping the job's own grid.

The identity of a fire is ``(job id, planned instant)``: a misfire fire keeps the missed
instant as its identity, so two nodes that both handle the same miss collide on the run
log's unique key instead of firing twice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from jobring.core.enums import MisfireStrategy, TriggerType
from jobring.core.timefmt import iso_ms

MISFIRE_THRESHOLD_MS = 5_000

# Stepping along the grid after a late fire is bounded; past this the schedule is asked for
# the first instant after now directly (same result, possibly a different FIX_RATE phase).
_MAX_CATCH_UP_STEPS = 64

NextFire = Callable[[int], "int | None"]
"""A schedule's "first instant strictly after t" (epoch ms), None when it never fires again."""


@dataclass(frozen=True, slots=True)
class FireDecision:
    """The outcome for one planned instant.

    ``planned_ms`` is the fire's identity when ``trigger_type`` is set (a fire happens now);
    ``next_ms`` is the job's following planned instant, None when the schedule has ended.
    """

    planned_ms: int
    trigger_type: TriggerType | None
    next_ms: int | None

    @property
    def fires(self) -> bool:
        return self.trigger_type is not None


def first_after(next_fire: NextFire, planned_ms: int, now_ms: int) -> int | None:
    """The first instant after ``planned_ms`` that is not before ``now_ms``, stepping along the
    schedule from ``planned_ms`` (so missed instants in between are skipped, the grid kept)."""
    candidate = next_fire(planned_ms)
    for _ in range(_MAX_CATCH_UP_STEPS):
        if candidate is None or candidate >= now_ms:
            return candidate
        following = next_fire(candidate)
        if following is not None and following <= candidate:
            raise ValueError(f"schedule went backwards: {following} after {candidate}")
        candidate = following
    return next_fire(now_ms - 1)


def decide_fire(
    planned_ms: int,
    now_ms: int,
    misfire_strategy: str,
    next_fire: NextFire,
    misfire_threshold_ms: int = MISFIRE_THRESHOLD_MS,
) -> FireDecision:
    """Decide the fate of ``planned_ms`` at ``now_ms``; call it only when ``planned_ms <= now_ms``.

    A non-positive ``planned_ms`` means the job was never planned (e.g. written by hand):
    nothing fires and the next instant is computed from now.
    """
    if planned_ms > now_ms:
        raise ValueError(f"planned instant {iso_ms(planned_ms)} is still ahead of now {iso_ms(now_ms)}")
    if planned_ms <= 0:
        return FireDecision(planned_ms, None, next_fire(now_ms))
    if now_ms - planned_ms > misfire_threshold_ms:
        fire_once = misfire_strategy == MisfireStrategy.FIRE_ONCE_NOW
        # Resume at the first instant within the threshold (found along the job's own grid):
        # the ones before it are missed with this one, those after it fire late.
        next_ms = first_after(next_fire, planned_ms, now_ms - misfire_threshold_ms)
        return FireDecision(planned_ms, TriggerType.MISFIRE if fire_once else None, next_ms)
    return FireDecision(planned_ms, TriggerType.CRON, next_fire(planned_ms))
