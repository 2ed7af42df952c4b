"""/workflow-runs: observe and repair workflow runs (docs/workflows.md#repairing-a-run).

Reading a run needs read access to its workflow's group; a repair needs write access there and
the right to operate the group of every job its graph runs (checked again at each repair: jobs
move), as a trigger does (:mod:`.workflows`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query
from pydantic import BaseModel, ConfigDict, Field

from jobring.admin.api.management.deps import Reader, Services, Writer, ensure_group_read, ensure_group_write
from jobring.admin.api.management.errors import ERROR_RESPONSES, ApiError, not_found
from jobring.admin.api.management.models import MAX_INT32, MAX_INT64, PageOut
from jobring.admin.api.management.services import ManagementServices
from jobring.admin.api.management.workflows import check_jobs, driver_of
from jobring.admin.security.principal import Principal
from jobring.admin.services.audit import AuditAction, Outcome
from jobring.admin.services.workflows import WorkflowRunGone
from jobring.admin.store.workflows import WorkflowRunRecord
from jobring.core.workflow import (
    Event,
    MarkSucceeded,
    RerunFrom,
    RetryFailed,
    StopRun,
    WorkflowGraph,
    run_from_json,
)

router = APIRouter(tags=["workflows"], responses=ERROR_RESPONSES)

RunId = Annotated[int, Path(ge=1, le=MAX_INT64)]
NodeKey = Annotated[str, Path(min_length=1, max_length=64)]


class NodeRunOut(BaseModel):
    key: str
    kind: str
    job_id: int | None
    workflow_id: int | None = Field(default=None, description="a sub-workflow node's workflow")
    state: str = Field(description="waiting, running, success, failed, skipped, stopped")
    run_id: int | None = Field(
        description="the job run (run log id) of the latest attempt; of a sub-workflow node, its workflow run"
    )
    attempt: int
    started_at: int | None = Field(description="epoch ms")
    ended_at: int | None = Field(description="epoch ms")
    duration_ms: int | None
    message: str
    skip_reason: str | None
    marked_succeeded: bool
    items: list[dict[str, Any]] | None = Field(
        default=None, description="fan-out items: state, run_id, attempt"
    )


class WorkflowRunSummaryOut(BaseModel):
    id: int
    workflow_id: int
    version: int
    job_group: int
    state: str = Field(description="running, success, failed, stopped")
    triggered_by: str | None
    started_at: int
    ended_at: int | None
    parent_run_id: int | None = Field(
        default=None, description="the workflow run whose sub-workflow node started this run"
    )


class WorkflowRunOut(WorkflowRunSummaryOut):
    round: int = Field(description="repair round: repairs name it so a repeated click repairs once")
    message: str
    context: dict[str, Any]
    nodes: list[NodeRunOut]
    edges: list[dict[str, Any]]


class RepairIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    round: int | None = Field(default=None, ge=0, description="the run's round as last read (null: current)")


async def _load_run(services: ManagementServices, principal: Principal, run_id: int) -> WorkflowRunRecord:
    record = await services.store.workflows.get_run(run_id)
    if record is None:
        raise not_found("workflow run", run_id)
    ensure_group_read(principal, record.job_group, not_found("workflow run", run_id))
    return record


def _summary(record: WorkflowRunRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "workflow_id": record.workflow_id,
        "version": record.version,
        "job_group": record.job_group,
        "state": record.status,
        "triggered_by": record.triggered_by,
        "started_at": record.started_at,
        "ended_at": record.ended_at,
        "parent_run_id": record.parent_run_id,
    }


# -- runs ---------------------------------------------------------------------------------------


@router.get("/workflow-runs", response_model=PageOut[WorkflowRunSummaryOut], summary="List workflow runs")
async def list_workflow_runs(
    services: Services,
    principal: Reader,
    workflow_id: Annotated[int | None, Query(ge=1, le=MAX_INT32)] = None,
    state: Annotated[Literal["running", "success", "failed", "stopped"] | None, Query()] = None,
    offset: Annotated[int, Query(ge=0, le=1_000_000)] = 0,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> PageOut[WorkflowRunSummaryOut]:
    records, total = await services.store.workflows.list_runs(
        workflow_id=workflow_id,
        group_ids=principal.readable_group_ids(),
        status=state,
        offset=offset,
        limit=limit,
    )
    return PageOut[WorkflowRunSummaryOut](
        items=[WorkflowRunSummaryOut(**_summary(r)) for r in records], total=total, offset=offset, limit=limit
    )


async def _run_out(services: ManagementServices, record: WorkflowRunRecord) -> WorkflowRunOut:
    assert record.state is not None
    run = run_from_json(record.state)
    driver = driver_of(services)
    try:
        graph = await driver.graph(record.workflow_id, record.version)
    except WorkflowRunGone:  # its workflow deleted since the run was read
        raise not_found("workflow run", record.id) from None
    nodes = []
    for key in graph.order:
        node, rec = graph.nodes[key], run.node(key)
        items = None
        if rec.items is not None:
            items = [
                {
                    "index": i,
                    "state": u.status.value,
                    "run_id": u.run_id,
                    "attempt": u.attempt,
                    "message": u.message,
                }
                for i, u in enumerate(rec.items)
            ]
        nodes.append(
            NodeRunOut(
                key=key,
                kind=node.kind.value,
                job_id=node.job_id,
                workflow_id=node.workflow_id,
                state=rec.status.value,
                run_id=rec.run_id,
                attempt=rec.attempt,
                started_at=rec.started_ms,
                ended_at=rec.ended_ms,
                duration_ms=rec.duration_ms,
                message=rec.message,
                skip_reason=rec.skip.value if rec.skip else None,
                marked_succeeded=rec.marked,
                items=items,
            )
        )
    return WorkflowRunOut(
        **_summary(record),
        round=run.round,
        message=run.message,
        context=dict(run.context),
        nodes=nodes,
        edges=_edges(graph),
    )


def _edges(graph: WorkflowGraph) -> list[dict[str, Any]]:
    edges = graph.to_json()["edges"]
    assert isinstance(edges, list)
    return edges


@router.get("/workflow-runs/{run_id}", response_model=WorkflowRunOut, summary="A workflow run and its nodes")
async def get_workflow_run(run_id: RunId, services: Services, principal: Reader) -> WorkflowRunOut:
    return await _run_out(services, await _load_run(services, principal, run_id))


async def _repair(
    services: ManagementServices, principal: Principal, run_id: int, event: Event, action: AuditAction
) -> WorkflowRunOut:
    record = await _load_run(services, principal, run_id)
    ensure_group_write(principal, record.job_group, not_found("workflow run", run_id))
    if record.parent_run_id is not None and not isinstance(event, StopRun):
        raise ApiError(409, f"workflow run {run_id} is a sub-workflow run of workflow run "
                       f"{record.parent_run_id}: repair that run (a retry there runs this workflow again)")
    driver = driver_of(services)
    try:
        if not isinstance(event, StopRun):  # a stop starts nothing: a job deleted since may not hold it up
            graph = await driver.graph(record.workflow_id, record.version)
            await check_jobs(services, principal, graph, record.workflow_id, record.job_group)
        step = await driver.apply(run_id, event)
    except WorkflowRunGone:
        raise not_found("workflow run", run_id) from None
    await services.audit.record(
        principal,
        action,
        target_type="workflow_run",
        target_id=run_id,
        group_id=record.job_group,
        outcome=Outcome.SUCCESS if step.applied else Outcome.FAILURE,
        details={"workflow_id": record.workflow_id, "refused": step.note},
    )
    if not step.applied:
        raise ApiError(409, step.note or "refused")
    updated = await services.store.workflows.get_run(run_id)
    if updated is None:  # its workflow deleted right after (a stopped run does not hold that up)
        raise not_found("workflow run", run_id)
    return await _run_out(services, updated)


def _round(body: RepairIn | None) -> int | None:
    return None if body is None else body.round


@router.post(
    "/workflow-runs/{run_id}/stop",
    response_model=WorkflowRunOut,
    summary="Stop a running workflow run (kills its running nodes)",
)
async def stop_workflow_run(
    run_id: RunId, services: Services, principal: Writer, body: RepairIn | None = None
) -> WorkflowRunOut:
    event = StopRun(services.now_ms(), _round(body), note=f"stopped by {principal.user.username}")
    return await _repair(services, principal, run_id, event, AuditAction.WORKFLOW_RUN_STOP)


@router.post(
    "/workflow-runs/{run_id}/retry",
    response_model=WorkflowRunOut,
    summary="Retry a failed or stopped run from its failed nodes (keeps what succeeded)",
)
async def retry_workflow_run(
    run_id: RunId, services: Services, principal: Writer, body: RepairIn | None = None
) -> WorkflowRunOut:
    event = RetryFailed(services.now_ms(), _round(body))
    return await _repair(services, principal, run_id, event, AuditAction.WORKFLOW_RUN_RETRY)


@router.post(
    "/workflow-runs/{run_id}/nodes/{key}/mark-succeeded",
    response_model=WorkflowRunOut,
    summary="Take a failed or stopped node as succeeded and let the rest go on",
)
async def mark_node_succeeded(
    run_id: RunId, key: NodeKey, services: Services, principal: Writer, body: RepairIn | None = None
) -> WorkflowRunOut:
    event = MarkSucceeded(
        key, services.now_ms(), _round(body), note=f"marked as succeeded by {principal.user.username}"
    )
    return await _repair(services, principal, run_id, event, AuditAction.WORKFLOW_RUN_MARK)


@router.post(
    "/workflow-runs/{run_id}/nodes/{key}/rerun",
    response_model=WorkflowRunOut,
    summary="Run an ended run again from this node (then its descendants)",
)
async def rerun_from_node(
    run_id: RunId, key: NodeKey, services: Services, principal: Writer, body: RepairIn | None = None
) -> WorkflowRunOut:
    event = RerunFrom(key, services.now_ms(), _round(body))
    return await _repair(services, principal, run_id, event, AuditAction.WORKFLOW_RUN_RERUN)
