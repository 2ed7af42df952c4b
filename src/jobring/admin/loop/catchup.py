"""Catch-up windows in the scheduling loop (issue 24 item 4).

A job whose timing has ``catch_up`` does not go by its misfire strategy when its planned fire is
late by more than the misfire threshold (after an admin outage, a database outage, or a pause:
a job started again with a catch-up window resumes at its first instant after the pause within
the window). Instead :func:`jobring.core.timing.catch_up` decides over every instant missed
since: those within the window fire now (each, oldest first, up to the limit; or only the latest
one), older ones are recorded as ``skipped`` runs (``skipped by catch-up: ...``), and the job
resumes after the last of them. Catch-up fires are MISFIRE runs whose identity (and logical
time) is the instant they stand for. Jobs without a window never come here.
"""

from __future__ import annotations

from dataclasses import dataclass

from jobring.admin.loop.timed import TimedSchedule
from jobring.core.timing import SkippedFire, catch_up


@dataclass(frozen=True, slots=True)
class CaughtUp:
    fires: tuple[int, ...]  # the missed instants to fire now, oldest first
    skipped: tuple[SkippedFire, ...]  # to record as skipped runs
    next_ms: int | None  # where the job resumes (None: its schedule ended)


def catch_up_due(schedule: TimedSchedule, planned_ms: int, now_ms: int) -> CaughtUp | None:
    """The catch-up of a late fire of ``schedule`` at ``planned_ms`` (None: the job has no
    catch-up window; the misfire rules apply)."""
    rules = schedule.rules
    if rules.catch_up is None or planned_ms <= 0:
        return None
    logical = schedule.logical_of(planned_ms) or planned_ms
    result = catch_up(schedule.timeline, rules, schedule.job_id, logical - 1, now_ms,
                      schedule.runs_at(now_ms))
    fires = tuple(f.logical_ms for f in result.fires)
    for instant in fires:
        schedule.count_fire(instant)
    following = schedule.next_fire_ms(max(result.resume_after_ms, *fires))
    return CaughtUp(fires, result.skipped, following)
