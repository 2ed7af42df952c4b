"""/runs/{id}/subtasks and /runs/{id}/retry-failed: a distributed run's progress, its
sub-tasks (keyset pages by id, filtered by status) and "retry only the failed sub-tasks"
(docs/distributed-jobs.md)."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query
from pydantic import BaseModel, Field

from jobring.admin.api.management.deps import Reader, Services, Writer, ensure_group_read, ensure_group_write
from jobring.admin.api.management.errors import ERROR_RESPONSES, ApiError, not_found
from jobring.admin.api.management.models import MAX_INT64
from jobring.admin.api.management.services import ManagementServices
from jobring.admin.security.principal import Principal
from jobring.admin.services.audit import AuditAction, Outcome
from jobring.admin.store.records import LogEntry, Tally
from jobring.admin.store.subtasks import DistributedRun, SubTaskRow
from jobring.errors import Refused

router = APIRouter(tags=["runs"], responses=ERROR_RESPONSES)

RunId = Annotated[int, Path(ge=1, le=MAX_INT64)]
SubTaskStatus = Literal["pending", "running", "succeeded", "failed", "cancelled"]


class ProgressOut(BaseModel):
    kind: str = Field(description="map (map / map-reduce), shard, or bcast (a broadcast with hooks)")
    phase: str = Field(description="pre (a broadcast's pre hook runs), mapping, reducing (the reduce or a "
                                   "broadcast's post hook runs), succeeded, failed; retrying while a retry "
                                   "of the failed sub-tasks puts them back")
    attempt: int = Field(description="join attempt: 1, then one more per retry of failed sub-tasks")
    root_state: str = Field(description="the run's own handler (it maps): running, succeeded, failed")
    total: int
    succeeded: int
    failed: int = Field(description="failed or cancelled, final")
    running: int
    pending: int
    failure_tolerance: str | None
    reduce_task: str | None = Field(description="the reduce handler, or a broadcast's post hook")
    pre_task: str | None = Field(None, description="a broadcast's pre hook")
    result: Any = Field(None, description="the reduce handler's (or post hook's) result (JSON)")


class SubTaskOut(BaseModel):
    id: int
    key: str = Field(description="r/0.17: item 17 of the run's first map call; s/3: shard 3; b/2: a "
                                 "broadcast's part 2; pre:... / reduce:...: the hooks, the reduce")
    task: str = Field(description="the handler it runs")
    kind: str = Field(description="map, shard, reduce (or a post hook), part (a broadcast's), pre (its hook)")
    shard_index: int
    shard_total: int
    status: SubTaskStatus
    attempt: int
    executor_address: str | None
    result: Any = Field(None, description="its handler's return value (JSON)")
    message: str | None
    log: str | None = Field(None, description="its handler's last log lines (ctx.log; the executor keeps "
                                              "the last 4 KiB)")
    created_at: int = Field(description="epoch ms")
    dispatched_at: int | None
    ended_at: int | None

    @classmethod
    def of(cls, row: SubTaskRow) -> SubTaskOut:
        return cls(id=row.id, key=row.task_key, task=row.task_name, kind=row.kind,
                   shard_index=row.shard_index, shard_total=row.shard_total,
                   status=row.status, attempt=row.attempt,  # type: ignore[arg-type]
                   executor_address=row.executor_address, result=_json(row.result), message=row.message,
                   log=row.log,
                   created_at=row.created_at, dispatched_at=row.dispatched_at, ended_at=row.ended_at)


class SubTaskPageOut(BaseModel):
    progress: ProgressOut | None = Field(description="null: the run neither mapped nor was sharded")
    items: list[SubTaskOut]
    next_after_id: int | None = Field(description="pass as after_id for the next page; null: last page")


class RetryFailedOut(BaseModel):
    retried: int = Field(description="sub-tasks put back to pending by this request (a retry interrupted "
                                     "midway leaves the run 'retrying': the same request again puts back "
                                     "the rest)")


def _json(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def _progress(run: DistributedRun) -> ProgressOut:
    p = run.progress
    return ProgressOut(kind=run.kind, phase=run.phase, attempt=run.attempt, root_state=run.root_state,
                       total=p.total, succeeded=p.succeeded, failed=p.failed, running=p.running,
                       pending=p.pending, failure_tolerance=run.tolerance, reduce_task=run.reduce_task,
                       pre_task=run.pre_task, result=_json(run.result))


async def _parent(services: ManagementServices, principal: Principal, run_id: int
                  ) -> tuple[LogEntry, DistributedRun]:
    entry = await services.store.logs.get(run_id)
    if entry is None:
        raise not_found("run", run_id)
    ensure_group_read(principal, entry.job_group, not_found("run", run_id))
    parent = await services.store.distributed.get(run_id)
    if parent is None or parent.job_group != entry.job_group:
        raise ApiError(404, f"run {run_id} has no sub-tasks (it neither mapped nor was sharded)")
    return entry, parent


@router.get("/runs/{run_id}/subtasks", response_model=SubTaskPageOut,
            summary="A distributed run's progress and sub-tasks (keyset pages by id)")
async def list_subtasks(
    run_id: RunId,
    services: Services,
    principal: Reader,
    status: SubTaskStatus | None = None,
    after_id: Annotated[int, Query(ge=0, le=MAX_INT64, description="the next_after_id of the last page")] = 0,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> SubTaskPageOut:
    entry = await services.store.logs.get(run_id)
    if entry is None:
        raise not_found("run", run_id)
    ensure_group_read(principal, entry.job_group, not_found("run", run_id))
    parent = await services.store.distributed.get(run_id)
    if parent is None or parent.job_group != entry.job_group:
        # Any run may be asked (the run page does): one without sub-tasks has none.
        return SubTaskPageOut(progress=None, items=[], next_after_id=None)
    rows = await services.store.distributed.page(run_id, status=status, after_id=after_id, limit=limit)
    return SubTaskPageOut(progress=_progress(parent), items=[SubTaskOut.of(r) for r in rows],
                          next_after_id=rows[-1].id if len(rows) == limit else None)


@router.post("/runs/{run_id}/retry-failed", response_model=RetryFailedOut,
             summary="Retry only the failed sub-tasks of an ended distributed run")
async def retry_failed(run_id: RunId, services: Services, principal: Writer) -> RetryFailedOut:
    entry, _ = await _parent(services, principal, run_id)
    ensure_group_write(principal, entry.job_group, not_found("run", run_id))
    if services.distributed is None:
        raise ApiError(503, "distributed runs are not available on this node")
    # Done in short writes: one that fails midway has put some back, and is audited with them.
    tally = Tally()
    try:
        retried = await services.distributed.retry_failed(run_id, tally)
    except Refused:
        raise  # refused before it changed anything
    except Exception:
        await services.audit.record(principal, AuditAction.RUN_RETRY_FAILED, target_type="run",
                                    target_id=run_id, group_id=entry.job_group, outcome=Outcome.FAILURE,
                                    details={"retried": tally.count})
        raise
    await services.audit.record(principal, AuditAction.RUN_RETRY_FAILED, target_type="run", target_id=run_id,
                                group_id=entry.job_group, details={"retried": retried})
    return RetryFailedOut(retried=retried)
