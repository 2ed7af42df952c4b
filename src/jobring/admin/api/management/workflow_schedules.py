"""/workflows/{id}/schedule: when a workflow runs by itself (docs/workflows.md#scheduling).

Reading it needs read access to the workflow's group, changing it write access (as editing the
workflow). The schedule types, cron syntax, time zones and misfire rules are the jobs'.
"""

from __future__ import annotations

import hashlib
from typing import Annotated, Any, Literal

import orjson
from fastapi import APIRouter, Path
from pydantic import BaseModel, ConfigDict, Field

from jobring.admin.api.management.deps import Reader, Services, Writer, ensure_group_read, ensure_group_write
from jobring.admin.api.management.errors import ERROR_RESPONSES, not_found
from jobring.admin.api.management.models import MAX_INT32
from jobring.admin.api.management.services import ManagementServices
from jobring.admin.security.principal import Principal
from jobring.admin.services.audit import AuditAction
from jobring.admin.services.validation import (
    FieldError,
    check_json_value,
    check_schedule,
    check_text,
    check_timezone,
    quartz_conf,
)
from jobring.admin.store.workflow_schedules import WorkflowSchedule
from jobring.admin.store.workflows import WorkflowRecord
from jobring.core.oneshot import ONCE, canonical_once, workflow_schedule
from jobring.core.schedule import ScheduleError, next_fire_times

router = APIRouter(tags=["workflows"], responses=ERROR_RESPONSES)

WorkflowId = Annotated[int, Path(ge=1, le=MAX_INT32)]
PARAMS_MAX_BYTES = 64 * 1024
PREVIEW_COUNT = 5


class WorkflowScheduleIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schedule_type: Literal["NONE", "CRON", "FIX_RATE", "ONCE"] = "NONE"
    schedule_conf: str = Field(
        default="",
        max_length=128,
        description="cron expression, seconds for FIX_RATE, or for ONCE a date and time "
        "(2026-12-01T02:00:00, in schedule_timezone unless it carries an offset)",
    )
    schedule_timezone: str | None = Field(
        default=None, max_length=64, description="IANA zone (null: the admin's)"
    )
    misfire_strategy: Literal["DO_NOTHING", "FIRE_ONCE_NOW"] = "DO_NOTHING"
    overlap: Literal["skip", "queue_one", "allow"] = Field(
        default="skip", description="a fire while a run is going: skip it, let one wait, or start another run"
    )
    params: dict[str, Any] = Field(default_factory=dict, description="the scheduled runs' starting context")
    enabled: bool = Field(default=False, description="started: fires at its instants")


class WorkflowScheduleOut(BaseModel):
    workflow_id: int
    schedule_type: str
    schedule_conf: str
    schedule_timezone: str | None
    misfire_strategy: str
    overlap: str
    params: dict[str, Any]
    enabled: bool
    next_fire_at: int | None = Field(description="epoch ms of the next planned fire (null: none)")
    next_times: list[int] = Field(description="the next few fire times (epoch ms), also while stopped")
    queued: bool = Field(description="a fire is waiting for the running run to end (overlap queue_one)")
    spent: bool = Field(default=False, description="a started ONCE schedule whose instant has passed")
    last_fire_at: int | None
    last_result: str
    updated_by: str | None
    updated_at: int | None


def _out(
    workflow_id: int, schedule: WorkflowSchedule | None, default_zone: str, now: int
) -> WorkflowScheduleOut:
    if schedule is None:
        return WorkflowScheduleOut(
            workflow_id=workflow_id, schedule_type="NONE", schedule_conf="", schedule_timezone=None,
            misfire_strategy="DO_NOTHING", overlap="skip", params={}, enabled=False, next_fire_at=None,
            next_times=[], queued=False, last_fire_at=None, last_result="", updated_by=None, updated_at=None,
        )
    try:
        zone = schedule.time_zone or default_zone
        plan = workflow_schedule(schedule.schedule_type, schedule.schedule_conf, zone)
        times = next_fire_times(plan, now, PREVIEW_COUNT)
    except ValueError:  # a zone that vanished from the zone database: nothing to preview
        times = []
    return WorkflowScheduleOut(
        workflow_id=workflow_id,
        schedule_type=schedule.schedule_type,
        schedule_conf=schedule.schedule_conf,
        schedule_timezone=schedule.time_zone,
        misfire_strategy=schedule.misfire_strategy,
        overlap=schedule.overlap,
        params=dict(schedule.params),
        enabled=schedule.enabled,
        next_fire_at=schedule.next_fire_at or None,
        next_times=times,
        queued=schedule.queued_at > 0,
        spent=schedule.schedule_type == ONCE and schedule.enabled and not schedule.next_fire_at,
        last_fire_at=schedule.last_fire_at or None,
        last_result=schedule.last_result,
        updated_by=schedule.updated_by,
        updated_at=schedule.updated_at,
    )


def _once_conf(conf: str, zone: str) -> str:
    """A ONCE schedule's conf as stored (FieldError naming the field when it does not parse)."""
    try:
        workflow_schedule(ONCE, conf, zone)
    except ScheduleError as exc:
        name, _, _ = str(exc).partition(": ")
        raise FieldError("schedule_timezone" if name == "time_zone" else "schedule_conf", str(exc)) from None
    return canonical_once(conf)


def _digest(params: Any) -> dict[str, Any]:
    """Params in the audit log as their sha256 and size: they may carry secrets, and a change
    of them alone must still show."""
    data = orjson.dumps(dict(params), option=orjson.OPT_SORT_KEYS)
    return {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}


def _zone(services: ManagementServices) -> str:
    return services.settings.timezone or "UTC"


async def _load(services: ManagementServices, principal: Principal, workflow_id: int) -> WorkflowRecord:
    record = await services.store.workflows.get(workflow_id)
    if record is None:
        raise not_found("workflow", workflow_id)
    ensure_group_read(principal, record.job_group, not_found("workflow", workflow_id))
    return record


@router.get("/workflows/{workflow_id}/schedule", response_model=WorkflowScheduleOut,
            summary="A workflow's schedule with its next fire times")
async def get_workflow_schedule(
    workflow_id: WorkflowId, services: Services, principal: Reader
) -> WorkflowScheduleOut:
    await _load(services, principal, workflow_id)
    schedule = await services.store.workflow_schedules.get(workflow_id)
    return _out(workflow_id, schedule, _zone(services), services.now_ms())


@router.put("/workflows/{workflow_id}/schedule", response_model=WorkflowScheduleOut,
            summary="Set a workflow's schedule; start or stop it (enabled)")
async def put_workflow_schedule(
    workflow_id: WorkflowId, body: WorkflowScheduleIn, services: Services, principal: Writer
) -> WorkflowScheduleOut:
    record = await _load(services, principal, workflow_id)
    ensure_group_write(principal, record.job_group, not_found("workflow", workflow_id))
    # Stored, echoed and audited whatever the type: one line of plain text, a real zone.
    check_text("schedule_conf", body.schedule_conf, 128, one_line=True)
    check_text("schedule_timezone", body.schedule_timezone, 64, one_line=True)
    check_timezone("schedule_timezone", body.schedule_timezone)
    zone = body.schedule_timezone or _zone(services)
    conf = quartz_conf(body.schedule_type, body.schedule_conf.strip()) or ""
    if body.schedule_type == ONCE:
        conf = _once_conf(conf, zone)
    elif body.schedule_type != "NONE":
        check_schedule(body.schedule_type, conf, zone)
    elif body.enabled:
        raise FieldError("enabled", "a workflow without a schedule (NONE) cannot be started")
    check_json_value("params", body.params)
    if len(orjson.dumps(body.params)) > PARAMS_MAX_BYTES:  # the store's serializer
        raise FieldError("params", f"at most {PARAMS_MAX_BYTES // 1024} KiB")
    now = services.now_ms()
    before = await services.store.workflow_schedules.get(workflow_id)
    next_ms = workflow_schedule(body.schedule_type, conf, zone).next_fire_ms(now) if body.enabled else None
    if body.enabled and next_ms is None and body.schedule_type == ONCE:
        raise FieldError("schedule_conf", f"{conf} is in the past: a one-shot schedule starts only before it")
    schedule = WorkflowSchedule(
        workflow_id=workflow_id,
        schedule_type=body.schedule_type,
        schedule_conf=conf,
        time_zone=body.schedule_timezone,
        misfire_strategy=body.misfire_strategy,
        overlap=body.overlap,
        enabled=body.enabled,
        updated_at=now,
        params=body.params,
        next_fire_at=next_ms or 0,
        last_fire_at=before.last_fire_at if before else 0,
        last_result=before.last_result if before else "",
        updated_by=principal.user.username,
    )
    await services.store.workflow_schedules.put(schedule)
    fields = ("schedule_type", "schedule_conf", "time_zone", "misfire_strategy", "overlap", "enabled")
    await services.audit.record(
        principal,
        AuditAction.WORKFLOW_SCHEDULE,
        target_type="workflow",
        target_id=workflow_id,
        group_id=record.job_group,
        before=None if before is None else {**{f: getattr(before, f) for f in fields},
                                            "params": _digest(before.params)},
        after={**{f: getattr(schedule, f) for f in fields}, "params": _digest(schedule.params)},
    )
    return _out(workflow_id, schedule, _zone(services), now)
