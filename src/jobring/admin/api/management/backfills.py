"""/jobs/{id}/backfill and /backfills: fill in a job's past instants (issue 24, docs/time.md).

A backfill lists the job's instants in a range or on some dates (its cron with its DST rules,
or its FIX_RATE grid; calendars only when asked), in the order asked, and the admin starts them
as ``BACKFILL`` runs, at most ``parallelism`` in progress at once; each run carries its logical
time and data interval. A dry run lists the instants and starts nothing.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Annotated, Literal

import orjson
from fastapi import APIRouter, Path, Query, Response
from pydantic import BaseModel, ConfigDict, Field, StrictBool

from jobring.admin.api.management import jobservice, timing
from jobring.admin.api.management.deps import Reader, Services, Writer, ensure_group_read, ensure_group_write
from jobring.admin.api.management.errors import ERROR_RESPONSES, not_found
from jobring.admin.api.management.models import MAX_INT32, InstantOrMs, Strict
from jobring.admin.api.management.services import ManagementServices
from jobring.admin.security.principal import Principal
from jobring.admin.services.audit import AuditAction
from jobring.admin.services.validation import FieldError
from jobring.admin.store.backfills import BackfillCaps, BackfillInstant, BackfillRow, BackfillStatus
from jobring.admin.store.records import JobInfo
from jobring.core.schedule import CronSchedule, FixRateSchedule, ScheduleError, parse_schedule
from jobring.core.timing import (
    MAX_BACKFILL_PARALLELISM,
    BackfillPlan,
    TimingError,
    parse_backfill_request,
    plan_backfill,
    timeline_for,
)
from jobring.errors import Conflict

router = APIRouter(tags=["backfills"], responses=ERROR_RESPONSES)

JobId = Annotated[int, Path(ge=1, le=MAX_INT32)]
BackfillId = Annotated[int, Path(ge=1, le=2**53)]
MAX_RUNNING_PER_JOB = 10  # running backfills of one job at once
MAX_RUNNING_PER_GROUP = 50  # of one group's jobs: one group cannot crowd out the others
MAX_RUNNING_TOTAL = 500  # in all: what the runner walks each tick
DateText = Annotated[str, Field(max_length=10, description="YYYY-MM-DD in the job's zone",
                                 json_schema_extra={"format": "calendar-date"})]


class BackfillIn(Strict):
    """A range (``start`` .. ``end``, both included) or a list of ``dates`` (local days)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{
        "start": "2026-03-01T00:00:00Z", "end": "2026-03-30T00:00:00Z", "order": "oldest_first",
        "parallelism": 3, "dry_run": True,
    }]})

    start: InstantOrMs | None = Field(default=None, description="ISO 8601 with an offset, or epoch ms")
    end: InstantOrMs | None = Field(default=None, description="ISO 8601 with an offset, or epoch ms")
    dates: Annotated[list[DateText], Field(min_length=1, max_length=1_000)] | None = None
    order: Literal["oldest_first", "newest_first"] = "oldest_first"
    parallelism: Annotated[int, Field(ge=1, le=MAX_BACKFILL_PARALLELISM)] = 1
    honour_calendars: StrictBool = Field(
        default=False,
        description="list instants the job's calendars exclude as skipped instead of running them")
    dry_run: StrictBool = Field(default=False, description="list the instants, start nothing")


class BackfillInstantOut(BaseModel):
    logical: int = Field(description="the instant the run stands for, epoch ms")
    logical_iso: str
    interval_start: int | None = Field(default=None,
                                       description="the data interval's start (previous instant)")


class BackfillSkippedOut(BaseModel):
    instant: int
    instant_iso: str
    reason: str


class BackfillOut(BaseModel):
    """A backfill (``id`` null for a dry run) and its progress."""

    id: int | None = None
    job_id: int
    job_group: int
    status: str = Field(description="running, done, cancelled; dry_run for a dry run")
    total: int = Field(description="instants to run")
    parallelism: int
    order: str
    started: int = Field(default=0, description="instants handed out to be started")
    running: int = Field(default=0, description="runs in progress (retries included)")
    succeeded: int = Field(default=0, description="instants with a successful run")
    failed: int = Field(default=0, description="instants whose runs ended, none successful")
    created_by: str | None = None
    created_at: int | None = None
    ended_at: int | None = None
    instants: list[BackfillInstantOut] | None = Field(default=None,
                                                      description="a dry run's instants, in order")
    skipped: list[BackfillSkippedOut] | None = Field(default=None, description="excluded by a calendar")


def _iso(epoch_ms: int) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).isoformat().replace("+00:00", "Z")


async def plan_for(services: ManagementServices, job: JobInfo, body: BackfillIn) -> BackfillPlan:
    """The backfill's plan for ``job``; FieldError naming the field."""
    zone = job.schedule_timezone or services.settings.timezone or "UTC"
    try:
        request = parse_backfill_request(body.model_dump(exclude_none=True))
    except TimingError as exc:
        raise FieldError(exc.field, exc.problem) from None
    try:
        schedule = parse_schedule(job.schedule_type or "NONE", job.schedule_conf, zone)
    except (ScheduleError, ValueError) as exc:  # the job as stored, not the request: 409
        raise Conflict(f"the job's schedule does not parse: {exc}", "schedule_conf") from None
    if not isinstance(schedule, CronSchedule | FixRateSchedule):
        raise Conflict("a backfill needs a job with a CRON or FIX_RATE schedule", "schedule_type")
    rules = await timing.rules_of(services, job)
    timeline = timeline_for(schedule, None if rules is None else rules.dst, anchor_ms=0)
    try:
        return plan_backfill(timeline, request, zone, None if rules is None else rules.calendars)
    except TimingError as exc:
        raise FieldError(exc.field, exc.problem) from None


def _out(row: BackfillRow, order: str, running: int = 0, succeeded: int = 0, failed: int = 0) -> BackfillOut:
    return BackfillOut(
        id=row.id, job_id=row.job_id, job_group=row.job_group, status=row.status, total=row.total,
        parallelism=row.parallelism, order=order, started=row.started, running=running,
        succeeded=succeeded, failed=failed, created_by=row.created_by, created_at=row.created_at,
        ended_at=row.ended_at,
    )


async def _with_progress(services: ManagementServices, row: BackfillRow) -> BackfillOut:
    progress = await services.store.backfills.progress(row.id)
    order = str(orjson.loads(row.request).get("order", "oldest_first"))
    return _out(row, order, progress.running, progress.succeeded, progress.failed)


@router.post(
    "/jobs/{job_id}/backfill", response_model=BackfillOut, status_code=201,
    summary="Backfill a job's past instants (or, with dry_run, list them)",
)
async def create_backfill(
    job_id: JobId, body: BackfillIn, services: Services, principal: Writer, response: Response
) -> BackfillOut:
    job = await jobservice.load_job_for_write(services, principal, job_id)
    plan = await plan_for(services, job, body)
    skipped = [BackfillSkippedOut(instant=s.logical_ms, instant_iso=_iso(s.logical_ms), reason=s.reason.text)
               for s in plan.skipped]
    if plan.dry_run:
        response.status_code = 200
        return BackfillOut(
            job_id=job.id, job_group=job.job_group, status="dry_run", total=len(plan.runs),
            parallelism=plan.parallelism, order=body.order, skipped=skipped,
            instants=[BackfillInstantOut(logical=r.logical_ms, logical_iso=_iso(r.logical_ms),
                                         interval_start=r.interval_start_ms) for r in plan.runs],
        )
    if not plan.runs:
        raise FieldError("start" if body.dates is None else "dates", "no instant of the job's schedule in it")
    store = services.store
    request = body.model_dump(exclude={"dry_run"}, exclude_none=True)
    instants = [BackfillInstant(r.logical_ms, r.interval_start_ms) for r in plan.runs]
    # The caps and the caller's groups are checked again inside the insert, under the job's
    # lock: a job moved to another group meanwhile, or concurrent requests, cannot slip past.
    backfill_id = await store.backfills.create(
        job.id, job.job_group, orjson.dumps(request).decode(), instants, plan.parallelism,
        principal.user.username, services.now_ms(), group_ids=principal.readable_group_ids(),
        caps=BackfillCaps(MAX_RUNNING_PER_JOB, MAX_RUNNING_PER_GROUP, MAX_RUNNING_TOTAL))
    await services.audit.job_event(principal, AuditAction.JOB_BACKFILL, job, backfill=backfill_id,
                                   total=len(instants), parallelism=plan.parallelism, order=body.order)
    if services.backfills is not None:
        services.backfills.wake()
    row = await store.backfills.get(backfill_id)
    assert row is not None
    out = _out(replace(row, job_group=job.job_group), body.order)
    out.skipped = skipped
    return out


@router.get("/jobs/{job_id}/backfills", response_model=list[BackfillOut],
            summary="A job's backfills, newest first")
async def list_backfills(
    job_id: JobId, services: Services, principal: Reader,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
) -> list[BackfillOut]:
    job = await jobservice.load_job_for_read(services, principal, job_id)
    rows = await services.store.backfills.for_job(job.id, limit)
    return [await _with_progress(services, replace(row, job_group=job.job_group)) for row in rows]


async def _load(services: ManagementServices, principal: Principal, backfill_id: int) -> BackfillRow:
    """The backfill, with its job's current group (the one its runs fire in, the one that
    decides who sees it), when the caller may see that group."""
    row = await services.store.backfills.get(backfill_id)
    if row is None:
        raise not_found("backfill", backfill_id)
    job = await services.store.jobs.get(row.job_id)
    if job is not None:
        row = replace(row, job_group=job.job_group)
    ensure_group_read(principal, row.job_group, not_found("backfill", backfill_id))
    return row


@router.get("/backfills/{backfill_id}", response_model=BackfillOut, summary="A backfill and its progress")
async def get_backfill(backfill_id: BackfillId, services: Services, principal: Reader) -> BackfillOut:
    return await _with_progress(services, await _load(services, principal, backfill_id))


@router.delete(
    "/backfills/{backfill_id}", response_model=BackfillOut,
    summary="Cancel a backfill: no further instant starts (runs in progress finish)",
)
async def cancel_backfill(backfill_id: BackfillId, services: Services, principal: Writer) -> BackfillOut:
    row = await _load(services, principal, backfill_id)
    ensure_group_write(principal, row.job_group, not_found("backfill", backfill_id))
    now = services.now_ms()
    groups = principal.readable_group_ids()
    if not await services.store.backfills.end(row.id, BackfillStatus.CANCELLED, now, group_ids=groups):
        current = await services.store.backfills.get(row.id)
        if current is None or current.status == BackfillStatus.RUNNING:  # its job moved meanwhile
            raise not_found("backfill", backfill_id)
        raise Conflict(f"backfill {row.id} has already ended ({current.status})")
    job = await services.store.jobs.get(row.job_id)
    if job is not None:
        await services.audit.job_event(principal, AuditAction.JOB_BACKFILL_CANCEL, job, backfill=row.id)
    updated = await services.store.backfills.get(row.id)
    assert updated is not None
    return await _with_progress(services, replace(updated, job_group=row.job_group))
