"""/workflows/{id}/schedule: when a workflow runs by itself (docs/workflows.md#scheduling).

Reading it needs read access to the workflow's group, changing it write access (as editing the
workflow). The schedule types, cron syntax, time zones and misfire rules are the jobs'.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path
from pydantic import BaseModel, ConfigDict, Field, StrictBool

from jobring.admin.api.management.deps import Reader, Services, Writer, ensure_group_read, ensure_group_write
from jobring.admin.api.management.errors import ERROR_RESPONSES, ApiError, not_found
from jobring.admin.api.management.models import MAX_INT32
from jobring.admin.api.management.services import ManagementServices
from jobring.admin.security.principal import Principal
from jobring.admin.services.audit import AuditAction
from jobring.admin.services.workflow_schedule_rules import ScheduleSpec, audit_view, checked, planned
from jobring.admin.store.workflow_schedules import WorkflowSchedule
from jobring.admin.store.workflows import MANAGED_BY_CODE, WorkflowGone, WorkflowRecord
from jobring.core.oneshot import ONCE, workflow_schedule
from jobring.core.schedule import next_fire_times

router = APIRouter(tags=["workflows"], responses=ERROR_RESPONSES)

WorkflowId = Annotated[int, Path(ge=1, le=MAX_INT32)]
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
    enabled: StrictBool = Field(default=False, description="started: fires at its instants")


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
    managed_by: str | None = Field(
        default=None, description='"code": declared with the workflow in an executor\'s code (read-only here)'
    )


class WorkflowScheduleBrief(BaseModel):
    """A workflow's schedule in short, as the workflow list shows it."""

    schedule_type: str = Field(description="CRON, FIX_RATE or ONCE (a NONE schedule is shown as null)")
    schedule_conf: str = Field(description="cron expression, seconds, or the one-shot date and time")
    schedule_timezone: str | None = Field(description="IANA zone (null: the admin's)")
    enabled: bool = Field(description="started: fires at its instants")
    next_fire_at: int | None = Field(description="epoch ms of the next planned fire (null: none)")
    managed_by: str | None = Field(description='"code": declared in an executor\'s code')


def schedule_brief(schedule: WorkflowSchedule | None) -> WorkflowScheduleBrief | None:
    """``schedule`` for the workflow list (None: none, or NONE: only run when triggered)."""
    if schedule is None or schedule.schedule_type == "NONE":
        return None
    return WorkflowScheduleBrief(
        schedule_type=schedule.schedule_type,
        schedule_conf=schedule.schedule_conf,
        schedule_timezone=schedule.time_zone,
        enabled=schedule.enabled,
        next_fire_at=schedule.next_fire_at or None,
        managed_by=schedule.managed_by,
    )


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
        managed_by=schedule.managed_by,
    )


def _declared(workflow_id: int) -> ApiError:
    return ApiError(409, f"the schedule of workflow {workflow_id} is declared in an executor's code: "
                    "change it there (it is applied again at the executor's next start)", "managed_by")


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
    before = await services.store.workflow_schedules.get(workflow_id)
    if before is not None and before.managed_by == MANAGED_BY_CODE:
        raise _declared(workflow_id)
    spec = ScheduleSpec(body.schedule_type, body.schedule_conf, body.schedule_timezone, body.misfire_strategy,
                        body.overlap, body.params, body.enabled)
    now = services.now_ms()
    schedule = planned(workflow_id, checked(spec, _zone(services)), _zone(services), now, before,
                       principal.user.username)
    # Checked again in the write: a declaration stored since the read above is not overwritten,
    # and the workflow is still in the group checked above.
    try:
        put = await services.store.workflow_schedules.put(schedule, unless_managed_by=MANAGED_BY_CODE,
                                                          owner_group=record.job_group)
    except WorkflowGone:
        raise not_found("workflow", workflow_id) from None
    if not put:
        raise _declared(workflow_id)
    await services.audit.record(
        principal,
        AuditAction.WORKFLOW_SCHEDULE,
        target_type="workflow",
        target_id=workflow_id,
        group_id=record.job_group,
        before=audit_view(before),
        after=audit_view(schedule),
    )
    # As stored: its last fire and result are the sweep's (put keeps them), not this copy's.
    stored = await services.store.workflow_schedules.get(workflow_id)
    return _out(workflow_id, stored or schedule, _zone(services), now)
