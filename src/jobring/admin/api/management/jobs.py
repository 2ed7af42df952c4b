"""/jobs: list, get, create, update, copy, delete, start, stop, trigger; /schedules/preview."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Response

from jobring.admin.api.management import jobservice, timing
from jobring.admin.api.management.deps import Reader, Services, Writer, ensure_group_read, ensure_group_write
from jobring.admin.api.management.errors import ERROR_RESPONSES, ApiError, bad_request, not_found
from jobring.admin.api.management.flowmodels import flow_text
from jobring.admin.api.management.models import (
    JOB_UPDATE_NOT_NULL,
    MAX_INT32,
    DelayedFireOut,
    JobCreate,
    JobOut,
    JobUpdate,
    JobUpdateOut,
    PageOut,
    Text,
    TriggerAtIn,
    TriggerIn,
    TriggerOut,
)
from jobring.admin.api.management.timemodels import PreviewFire, StopIn, TimedPreviewIn, TimedPreviewOut
from jobring.admin.security.principal import Principal
from jobring.admin.services.audit import AuditAction
from jobring.admin.services.validation import (
    FieldError,
    check_schedule,
    check_timezone,
    missing_group,
    quartz_conf,
)
from jobring.admin.store.delayed import DelayedFire
from jobring.admin.store.records import JobInfo, JobSort
from jobring.core.enums import ManagedBy
from jobring.core.schedule import next_fire_times, parse_schedule

router = APIRouter(tags=["jobs"], responses=ERROR_RESPONSES)

JobId = Annotated[int, Path(ge=1, le=MAX_INT32)]


def _child_list(ids: list[int] | None) -> str | None:
    return ",".join(str(i) for i in dict.fromkeys(ids or [])) or None


def _out(principal: Principal, job: JobInfo) -> JobOut:
    """The job as ``principal`` sees it: the credential parts of its alarm URLs only for those
    who may edit it (they could set them anyway); signing secrets for nobody."""
    return JobOut.of(job, reveal_urls=principal.can_write_group(job.job_group))


def job_from_create(body: JobCreate) -> JobInfo:
    data = body.model_dump(exclude={"child_job_ids", "alarm_targets", "timing", "flow"})
    targets = jobservice.alarm_targets_text(body.alarm_targets)
    data["schedule_conf"] = quartz_conf(body.schedule_type, body.schedule_conf)
    return JobInfo(**data, child_jobid=_child_list(body.child_job_ids), alarm_targets=targets,
                   flow=flow_text(body.flow))


def job_with_update(old: JobInfo, body: JobUpdate) -> JobInfo:
    changes: dict[str, Any] = body.model_dump(exclude_unset=True)
    for name in JOB_UPDATE_NOT_NULL:
        if name in changes and changes[name] is None:
            raise FieldError(name, "must not be null")
    if changes.get("schedule_conf") is not None and "schedule_type" not in changes:
        # A cron expression and a rate look alike: the type sent along says which it is.
        raise FieldError("schedule_type", "required with schedule_conf")
    changes.pop("timing", None)  # validated by the caller (it needs the calendars)
    if "flow" in changes:
        changes["flow"] = flow_text(body.flow)
    if changes.get("schedule_conf") is not None:
        changes["schedule_conf"] = quartz_conf(changes.get("schedule_type"), changes["schedule_conf"])
    if "child_job_ids" in changes:
        changes["child_jobid"] = _child_list(changes.pop("child_job_ids"))
    if "alarm_targets" in changes:
        changes["alarm_targets"] = jobservice.alarm_targets_text(changes["alarm_targets"], old)
    if changes.get("managed_by") == ManagedBy.CONSOLE:
        # Taken back from the code: its declarations no longer touch (nor retire) the job.
        changes.update(declared_by_executor=0, declared_spec=None, declared_retired_at=None)
    return replace(old, **changes)


@router.get("/jobs", response_model=PageOut[JobOut], summary="List jobs")
async def list_jobs(
    services: Services,
    principal: Reader,
    job_group: Annotated[int | None, Query(ge=1, le=MAX_INT32)] = None,
    trigger_status: Annotated[int | None, Query(ge=0, le=1, description="0 stopped, 1 running")] = None,
    desc: Annotated[Text | None, Query(max_length=255, description="substring of job_desc")] = None,
    handler: Annotated[Text | None, Query(max_length=255, description="substring of the handler")] = None,
    author: Annotated[Text | None, Query(max_length=64, description="substring of the author")] = None,
    sort: JobSort = JobSort.ID_DESC,
    offset: Annotated[int, Query(ge=0, le=MAX_INT32)] = 0,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> PageOut[JobOut]:
    if job_group is not None:
        ensure_group_read(principal, job_group)
        group_ids: list[int] | None = [job_group]
    else:
        group_ids = principal.readable_group_ids()
    page = await services.store.jobs.list(
        group_ids=group_ids,
        trigger_status=trigger_status,
        desc=desc,
        handler=handler,
        author=author,
        offset=offset,
        limit=limit,
        sort=sort,
    )
    return PageOut[JobOut](
        items=[_out(principal, j) for j in page.items], total=page.total, offset=offset, limit=limit
    )


@router.post("/jobs", response_model=JobOut, status_code=201, summary="Create a job (stopped)")
async def create_job(body: JobCreate, services: Services, principal: Writer) -> JobOut:
    ensure_group_write(principal, body.job_group, missing_group("job_group", body.job_group))
    timing_json = await timing.timing_text(services, body.timing, body.job_group)
    job = replace(job_from_create(body), timing=timing_json)
    timing.check_template(job)
    job = await jobservice.create_job(services, job, principal)
    await services.audit.job_event(principal, AuditAction.JOB_CREATE, job, snapshot=True)
    return _out(principal, job)


@router.get("/jobs/{job_id}", response_model=JobOut, summary="Get a job")
async def get_job(job_id: JobId, services: Services, principal: Reader) -> JobOut:
    job = await jobservice.load_job_for_read(services, principal, job_id)
    return _out(principal, job)


@router.patch(
    "/jobs/{job_id}",
    response_model=JobUpdateOut,
    summary="Update some fields of a job (only the fields sent are validated)",
)
async def update_job(job_id: JobId, body: JobUpdate, services: Services, principal: Writer) -> JobUpdateOut:
    old = await jobservice.load_job_for_write(services, principal, job_id)
    if body.managed_by is not None and body.managed_by != old.managed_by and not principal.is_admin:
        raise ApiError(403, "only an admin may hand a job to its executor's code or take it back",
                       "managed_by")
    new = job_with_update(old, body)
    if new.job_group != old.job_group:
        ensure_group_write(principal, new.job_group, missing_group("job_group", new.job_group))
    if "timing" in body.model_fields_set:
        new = replace(new, timing=await timing.timing_text(services, body.timing, new.job_group))
    elif new.job_group != old.job_group:
        await timing.check_stored_timing(services, new)
    timing.check_template(new)
    warnings: list[str] = []
    updated = await jobservice.update_job(services, old, new, principal, warnings)
    if services.trigger is not None and updated.flow != old.flow:
        services.trigger.flow.changed(old.job_group)  # a raised limit may start queued runs
    await services.audit.job_event(principal, AuditAction.JOB_UPDATE, updated, before=old)
    return JobUpdateOut(**_out(principal, updated).model_dump(), warnings=warnings)


@router.delete("/jobs/{job_id}", status_code=204, response_class=Response, summary="Delete a job")
async def delete_job(job_id: JobId, services: Services, principal: Writer) -> Response:
    job = await jobservice.load_job_for_write(services, principal, job_id)
    await jobservice.delete_job(services, job)
    await services.audit.job_event(principal, AuditAction.JOB_DELETE, job, snapshot=True)
    return Response(status_code=204)


@router.post(
    "/jobs/{job_id}/copy", response_model=JobOut, status_code=201, summary="Copy a job (the copy is stopped)"
)
async def copy_job(job_id: JobId, services: Services, principal: Writer) -> JobOut:
    job = await jobservice.load_job_for_write(services, principal, job_id)
    desc = (job.job_desc + " (copy)")[:255]
    # A copy is the console's: the executor's declaration keeps managing the original.
    copy = replace(job, job_desc=desc, lease_owner=None, lease_until=0, declared_spec=None,
                   declared_by_executor=0, managed_by=ManagedBy.CONSOLE.value, declared_retired_at=None)
    created = await jobservice.create_job(services, copy, principal)
    await services.audit.job_event(
        principal, AuditAction.JOB_CREATE, created, snapshot=True, copied_from=job.id
    )
    return _out(principal, created)


@router.post(
    "/jobs/{job_id}/start",
    response_model=JobOut,
    summary="Start scheduling a job (computes its next fire time)",
)
async def start_job(job_id: JobId, services: Services, principal: Writer) -> JobOut:
    job = await jobservice.load_job_for_write(services, principal, job_id)
    started = await jobservice.start_job(services, job)
    await services.audit.job_event(principal, AuditAction.JOB_START, started)
    return _out(principal, started)


@router.post("/jobs/{job_id}/stop", response_model=JobOut,
             summary="Stop (pause) scheduling a job; the note says who, why and when")
async def stop_job(
    job_id: JobId, services: Services, principal: Writer, body: StopIn | None = None
) -> JobOut:
    job = await jobservice.load_job_for_write(services, principal, job_id)
    reason = None if body is None else body.reason
    note = timing.pause_note_text(principal.user.username, reason, services.now_ms())
    stopped = await jobservice.stop_job(services, job, pause_note=note)
    await services.audit.job_event(principal, AuditAction.JOB_STOP, stopped, reason=reason or "")
    return _out(principal, stopped)


@router.post(
    "/jobs/{job_id}/trigger",
    response_model=TriggerOut,
    responses={503: ERROR_RESPONSES[400] | {"description": "Triggering unavailable"}},
    summary="Run a job once now",
)
async def trigger_job(
    job_id: JobId, services: Services, principal: Writer, body: TriggerIn | None = None
) -> TriggerOut:
    job = await jobservice.load_job_for_write(services, principal, job_id)
    body = body or TriggerIn(executor_param=None, addresses=None)
    result = await jobservice.trigger_job(services, job, body.executor_param, body.addresses)
    await services.audit.trigger_event(principal, job, result, body.executor_param, body.addresses)
    return TriggerOut(
        run_ids=result.log_ids, log_ids=result.log_ids, trigger_code=result.trigger_code,
        trigger_msg=result.trigger_msg,
    )


def _delayed_out(fire: DelayedFire) -> DelayedFireOut:
    iso = datetime.fromtimestamp(fire.fire_at / 1000, tz=UTC).isoformat().replace("+00:00", "Z")
    return DelayedFireOut(
        id=fire.id, job_id=fire.job_id, job_group=fire.job_group, fire_at=fire.fire_at, fire_at_iso=iso,
        executor_param=fire.executor_param, addresses=fire.addresses, created_by=fire.created_by,
        created_at=fire.created_at,
    )


@router.post(
    "/jobs/{job_id}/trigger-at",
    response_model=DelayedFireOut,
    status_code=201,
    summary="Run a job once at a later instant (durable; fired once by one admin node)",
)
async def trigger_job_at(
    job_id: JobId, body: TriggerAtIn, services: Services, principal: Writer
) -> DelayedFireOut:
    job = await jobservice.load_job_for_write(services, principal, job_id)
    if (body.at is None) == (body.delay_ms is None):
        raise FieldError("at", "give either at or delay_ms")
    now = services.now_ms()  # one instant: a delay of 1 ms is not "in the past" by the time it is checked
    if body.at is not None:
        fire_at, field = jobservice.parse_instant("at", body.at), "at"
    else:
        assert body.delay_ms is not None
        fire_at, field = now + body.delay_ms, "delay_ms"
    fire = await jobservice.trigger_at(
        services, job, fire_at, body.executor_param, body.addresses, principal.user.username, field=field,
        now=now,
    )
    await services.audit.job_event(
        principal, AuditAction.JOB_TRIGGER_AT, job, delayed_fire=fire.id, fire_at=fire.fire_at,
        executor_param=body.executor_param, addresses=body.addresses,
    )
    return _delayed_out(fire)


@router.get(
    "/jobs/{job_id}/delayed", response_model=list[DelayedFireOut], summary="A job's pending delayed runs"
)
async def list_delayed(job_id: JobId, services: Services, principal: Reader) -> list[DelayedFireOut]:
    job = await jobservice.load_job_for_read(services, principal, job_id)
    return [_delayed_out(f) for f in await services.store.delayed.for_job(job.id)]


@router.get(
    "/delayed-runs", response_model=list[DelayedFireOut],
    summary="Pending delayed runs of the caller's groups (or of one group or job), soonest first",
)
async def list_all_delayed(
    services: Services,
    principal: Reader,
    job_group: Annotated[int | None, Query(ge=1, le=MAX_INT32)] = None,
    job_id: Annotated[int | None, Query(ge=1, le=MAX_INT32)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> list[DelayedFireOut]:
    if job_group is not None:
        ensure_group_read(principal, job_group)
        group_ids: list[int] | None = [job_group]
    else:
        group_ids = principal.readable_group_ids()
    fires = await services.store.delayed.pending(group_ids, job_id, limit)
    return [_delayed_out(f) for f in fires]


@router.delete(
    "/jobs/{job_id}/delayed/{fire_id}", status_code=204, response_class=Response,
    summary="Cancel a pending delayed run",
)
async def cancel_delayed(
    job_id: JobId, fire_id: Annotated[int, Path(ge=1, le=MAX_INT32)], services: Services, principal: Writer
) -> Response:
    job = await jobservice.load_job_for_write(services, principal, job_id)
    fire = await services.store.delayed.get(fire_id)
    if fire is None or fire.job_id != job.id or not await services.store.delayed.remove([fire.id]):
        raise not_found("delayed run", fire_id)
    await services.audit.job_event(
        principal, AuditAction.JOB_DELAYED_CANCEL, job, delayed_fire=fire.id, fire_at=fire.fire_at
    )
    return Response(status_code=204)


@router.post(
    "/schedules/preview", response_model=TimedPreviewOut,
    summary="The next fire times of a schedule (under timing rules: calendars, window, jitter)"
)
async def preview_schedule(
    body: TimedPreviewIn, services: Services, principal: Reader
) -> TimedPreviewOut:
    zone = body.timezone or services.settings.timezone or "UTC"
    check_timezone("timezone", zone)
    conf = quartz_conf(body.schedule_type, body.schedule_conf)
    check_schedule(body.schedule_type, conf, zone)
    schedule = parse_schedule(body.schedule_type, conf, zone)
    after = body.after if body.after is not None else services.now_ms()
    job = None
    if body.job_id is not None:
        job = await jobservice.load_job_for_read(services, principal, body.job_id)
    if body.job_group is not None:
        ensure_group_read(principal, body.job_group, missing_group("job_group", body.job_group))
        if job is not None and body.job_group != job.job_group:
            # The calendars named are looked up in job_group: it must be the job's own.
            raise FieldError("job_group", f"must be job {job.id}'s group ({job.job_group}) or left out")
    group = body.job_group if body.job_group is not None else (None if job is None else job.job_group)
    text = job.timing if job is not None and body.timing is None else None
    if body.timing is not None:
        if group is None:
            raise bad_request("give job_group (or job_id): calendars are a group's", "job_group")
        text = await timing.timing_text(services, body.timing, group)
    try:
        if text is None:
            times = next_fire_times(schedule, after, body.count)
            return TimedPreviewOut(timezone=zone, times=times, times_iso=[timing.iso(t) for t in times],
                                   fires=[PreviewFire(logical=t, fire_at=t, fire_at_iso=timing.iso(t))
                                          for t in times])
        assert group is not None
        probe = replace(job or JobInfo(job_group=group), timing=text, job_group=group)
        rules = await timing.rules_of(services, probe)
        assert rules is not None
        runs = 0 if job is None or rules.max_runs is None else await services.store.calendars.runs_before(
            job.id, after + 1)
        found = timing.timing_preview(schedule, rules, 0 if job is None else job.id, after, runs, body.count)
    except (ValueError, OverflowError) as exc:
        raise bad_request(f"cannot compute fire times: {exc}", "after") from None
    times = [f.fire_at for f in found.fires]
    return TimedPreviewOut(timezone=zone, times=times, times_iso=[timing.iso(t) for t in times],
                           **found.model_dump())
