"""Job timing rules in the management API: validation against the calendars a job may use,
the stored form, the next fire under the rules, previews with the excluded instants, and the
pause note (issue 24).

A job in group G may use the global calendars and G's own. A calendar's name is unique, so a
job's timing names calendars; an edited calendar touches the jobs that use it, which makes the
scheduling loop plan them again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

import orjson

from jobring.admin.api.management.models import JobTiming
from jobring.admin.api.management.services import ManagementServices
from jobring.admin.api.management.timemodels import PreviewExcluded, PreviewFire, TimingPreview
from jobring.admin.loop.ports import Schedule as LoopSchedule
from jobring.admin.loop.timed import (
    calendar_names,
    compile_calendars,
    normalized_timing,
    timeline_of,
    timing_rules,
    wrap,
)
from jobring.admin.services.validation import FieldError
from jobring.admin.store.calendars import CalendarRow
from jobring.admin.store.records import JobInfo
from jobring.admin.trigger.logical import check_params_template, params_templated
from jobring.core.schedule import Schedule
from jobring.core.timing import (
    Calendar,
    TimingError,
    TimingRules,
    parse_pause_note,
    parse_timing_rules,
    preview,
)


def iso(epoch_ms: int) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000, tz=UTC).isoformat().replace("+00:00", "Z")


def usable_by(rows: Sequence[CalendarRow], group_id: int) -> list[CalendarRow]:
    """The calendars a job of ``group_id`` may use: the global ones and the group's."""
    return [row for row in rows if row.job_group is None or row.job_group == group_id]


async def calendars_for(
    services: ManagementServices, group_id: int, names: Sequence[str]
) -> dict[str, Calendar]:
    """The named calendars a job of ``group_id`` may use, compiled (others are left out: the
    rules then name them as unknown)."""
    rows = usable_by(await services.store.calendars.by_names(list(names)), group_id)
    return compile_calendars({row.name: row.spec for row in rows})


def _field(exc: TimingError) -> FieldError:
    return FieldError(f"timing.{exc.field}", exc.problem)


async def timing_text(services: ManagementServices, timing: JobTiming | None, group_id: int) -> str | None:
    """Validate a job's timing as sent; its stored JSON (None: no rules). FieldError names the
    field (``timing.calendars[0]``)."""
    if timing is None:
        return None
    spec = timing.model_dump(exclude_none=True)
    names = [n for n in spec.get("calendars", []) if isinstance(n, str)]
    calendars = await calendars_for(services, group_id, names)
    try:
        rules = parse_timing_rules(spec, calendars)
    except TimingError as exc:
        raise _field(exc) from None
    normal = normalized_timing(rules)
    return None if normal is None else orjson.dumps(normal).decode()


def check_template(job: JobInfo) -> None:
    """A job whose params are a template must have params that parse (FieldError naming
    ``executor_param``)."""
    if params_templated(job):
        problem = check_params_template(job.executor_param)
        if problem is not None:
            raise FieldError("executor_param", f"not a valid template (timing.params_template): {problem}")


async def check_stored_timing(services: ManagementServices, job: JobInfo) -> None:
    """The stored timing still holds for the job's group (e.g. after it moved to another)."""
    if not job.timing:
        return
    calendars = await calendars_for(services, job.job_group, calendar_names(job.timing))
    try:
        timing_rules(job.timing, calendars)
    except TimingError as exc:
        raise _field(exc) from None


async def rules_of(services: ManagementServices, job: JobInfo) -> TimingRules | None:
    """The job's stored timing as rules (None: none)."""
    if not job.timing:
        return None
    calendars = await calendars_for(services, job.job_group, calendar_names(job.timing))
    try:
        return timing_rules(job.timing, calendars)
    except TimingError as exc:
        raise _field(exc) from None


async def timed_schedule(services: ManagementServices, job: JobInfo, schedule: Schedule,
                         now_ms: int) -> LoopSchedule:
    """``schedule`` under the job's rules, as the scheduling loop plans it (its runs so far
    counted for ``max_runs``)."""
    rules = await rules_of(services, job)
    if rules is None:
        return schedule
    runs = 0 if rules.max_runs is None else await services.store.calendars.runs_before(job.id, now_ms + 1)
    return wrap(schedule, rules, job.id, runs_before=runs, counted_from=now_ms + 1)


def catch_up_from(job: JobInfo, now_ms: int) -> int | None:
    """Where a job started again resumes when it has a catch-up window: the later of its pause
    (the pause note's time) and the window's start; None: from now (no window, or no note)."""
    if not job.timing or '"catch_up"' not in job.timing or not job.pause_note:
        return None
    try:
        window = int(orjson.loads(job.timing)["catch_up"]["window_seconds"]) * 1000
        paused_at = int(orjson.loads(job.pause_note)["at"])
    except (ValueError, KeyError, TypeError):
        return None
    return min(now_ms, max(paused_at, now_ms - window))


def pause_note_text(by: str, reason: str | None, at_ms: int) -> str:
    """A pause note's stored JSON; FieldError naming ``reason``."""
    try:
        note = parse_pause_note(by, reason, at_ms)
    except TimingError as exc:
        raise FieldError(exc.field, exc.problem) from None
    return orjson.dumps({"by": note.by, "reason": note.reason, "at": note.at_ms}).decode()


def timing_preview(schedule: Schedule, rules: TimingRules, job_id: int, after_ms: int, runs: int,
                   count: int) -> TimingPreview:
    """The next ``count`` fires under ``rules`` and the instants the calendars exclude on the way."""
    found = preview(timeline_of(schedule, rules.dst), rules, job_id, after_ms, runs, count)
    return TimingPreview(
        fires=[PreviewFire(logical=f.logical_ms, fire_at=f.fire_at_ms, fire_at_iso=iso(f.fire_at_ms),
                           moved_by=None if f.moved_by is None else f.moved_by.text) for f in found.fires],
        excluded=[PreviewExcluded(instant=s.logical_ms, instant_iso=iso(s.logical_ms), reason=s.reason.text,
                                  calendar=s.reason.calendar) for s in found.skipped],
        more_excluded=len(found.skipped) >= 100,
        end=None if found.end is None else found.end.value,
    )


def used_by_map(jobs: Mapping[int, JobInfo], name: str) -> list[int]:
    """Ids of the jobs whose timing names the calendar (checked exactly)."""
    return sorted(job_id for job_id, job in jobs.items() if name in calendar_names(job.timing))
