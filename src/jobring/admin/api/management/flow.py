"""Flow control endpoints: a group's flow settings, and cancelling a queued run.

A job's flow settings are its ``flow`` field (``POST``/``PATCH /jobs``); queued runs are
listed by ``GET /runs?state=queued``.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from jobring.admin.api.management.deps import Services, Writer, ensure_group_read, ensure_group_write
from jobring.admin.api.management.errors import ERROR_RESPONSES, ApiError, not_found
from jobring.admin.api.management.flowmodels import FlowIn, flow_out, flow_text
from jobring.admin.api.management.groups import _out as group_out
from jobring.admin.api.management.models import MAX_INT32, MAX_INT64, GroupOut, RunOut
from jobring.admin.services.audit import AuditAction
from jobring.core.runstate import FLOW_CANCEL_PREFIX

router = APIRouter(tags=["flow control"], responses=ERROR_RESPONSES)


@router.put("/groups/{group_id}/flow", response_model=GroupOut,
            summary="Set the flow control of every job of a group (an empty body: none)")
async def set_group_flow(
    group_id: Annotated[int, Path(ge=1, le=MAX_INT32)], body: FlowIn, services: Services, principal: Writer,
) -> GroupOut:
    missing = not_found("executor group", group_id)
    ensure_group_write(principal, group_id, missing)
    before = await services.store.groups.get(group_id)
    if before is None:
        raise missing
    text = flow_text(body)
    if not await services.store.flow.set_group_flow(group_id, text):
        raise missing
    if services.trigger is not None:
        services.trigger.forget_groups()  # scheduled fires read groups through a short cache
        services.trigger.flow.changed(group_id)  # a raised limit may start queued runs
    old, new = flow_out(before.flow), flow_out(text)
    await services.audit.record(
        principal, AuditAction.GROUP_FLOW, target_type="group", target_id=group_id, group_id=group_id,
        before={"flow": None if old is None else old.model_dump()},
        after={"flow": None if new is None else new.model_dump()})
    group = await services.store.groups.get(group_id)
    if group is None:
        raise missing
    return await group_out(services, group)


@router.post("/runs/{run_id}/cancel", response_model=RunOut, summary="Cancel a queued run")
async def cancel_run(
    run_id: Annotated[int, Path(ge=1, le=MAX_INT64)], services: Services, principal: Writer,
) -> RunOut:
    entry = await services.store.logs.get(run_id)
    if entry is None:
        raise not_found("run", run_id)
    ensure_group_read(principal, entry.job_group, not_found("run", run_id))
    ensure_group_write(principal, entry.job_group, not_found("run", run_id))
    message = f"{FLOW_CANCEL_PREFIX}: cancelled by {principal.user.username} while queued"
    # The group is checked again inside the write: only a run of a group this user may write.
    cancelled = await services.store.flow.cancel_queued(run_id, [entry.job_group], message, services.now_ms())
    if cancelled is None:
        raise ApiError(409, f"run {run_id} is not queued")
    if services.trigger is not None:
        services.trigger.flow.changed(entry.job_group)  # a run behind it (same key) may start
    await services.audit.record(principal, AuditAction.RUN_CANCEL, target_type="run", target_id=run_id,
                                group_id=entry.job_group, details={"job_id": entry.job_id})
    return RunOut.of(cancelled, services.now_ms())
