"""/workflows: define and trigger workflows (their runs: :mod:`.workflow_runs`).

Permissions follow the jobs': a workflow belongs to an executor group (``job_group``: who may
see and edit it), and saving, triggering or repairing it also needs the right to operate the
group of every job its nodes run (checked again at each trigger and repair: jobs move).
``POST /workflows/validate`` runs a save's checks (create's, or with ``workflow_id`` an
update's) and stores nothing: the editor's "validate before save".
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Response
from pydantic import BaseModel, ConfigDict, Field, StrictBool

from jobring.admin.api.management.deps import Reader, Services, Writer, ensure_group_read, ensure_group_write
from jobring.admin.api.management.errors import ERROR_RESPONSES, ApiError, not_found
from jobring.admin.api.management.models import MAX_INT32, MAX_INT64, Line, PageOut
from jobring.admin.api.management.services import ManagementServices
from jobring.admin.api.management.workflow_schedules import WorkflowScheduleBrief, schedule_brief
from jobring.admin.security.principal import Principal
from jobring.admin.services.audit import AuditAction, Outcome
from jobring.admin.services.validation import check_json_value
from jobring.admin.services.workflow_access import check_tree, store_graphs
from jobring.admin.services.workflows import WorkflowDriver, WorkflowRunGone
from jobring.admin.store.workflow_schedules import WorkflowSchedule
from jobring.admin.store.workflows import MANAGED_BY_CODE, WorkflowBusy, WorkflowRecord
from jobring.core.workflow import (
    WorkflowGraph,
    WorkflowInvalid,
    check_run_budget,
    definition_changes,
    definition_summary,
    parse_workflow,
)
from jobring.core.workflow.overlap import Overlap

router = APIRouter(tags=["workflows"], responses=ERROR_RESPONSES)

WorkflowId = Annotated[int, Path(ge=1, le=MAX_INT32)]
RunId = Annotated[int, Path(ge=1, le=MAX_INT64)]
NodeKey = Annotated[str, Path(min_length=1, max_length=64)]


class WorkflowIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Line = Field(min_length=1, max_length=100)
    job_group: int = Field(
        ge=1, le=MAX_INT32, description="the owning executor group: who may see and edit it"
    )
    description: Line = Field(default="", max_length=255)
    nodes: list[dict[str, Any]] = Field(
        description="see docs/workflows.md: key, kind, job_id, params, join, ..."
    )
    edges: list[dict[str, Any]] = Field(default_factory=list, description='{"from", "to", "when"|"else"}')
    version: int | None = Field(
        default=None,
        ge=1,
        description="PUT (and validate with workflow_id): the version this edit started from "
        "(refused with 409 when another save came first)",
    )


class WorkflowOut(BaseModel):
    id: int
    name: str
    job_group: int
    description: str
    version: int
    created_by: str | None
    created_at: int = Field(description="epoch ms")
    updated_at: int = Field(description="epoch ms")
    managed_by: str | None = Field(
        default=None, description='"code": declared by an executor in its code (read-only here)'
    )
    nodes: list[dict[str, Any]]
    edges: list[dict[str, Any]]
    schedule: WorkflowScheduleBrief | None = Field(
        default=None, description="its schedule in short (null: none, it runs only when triggered)"
    )


class WorkflowCheckOut(BaseModel):
    valid: bool = Field(description="always true: a graph a save would refuse gets the save's answer (4xx)")
    nodes: int = Field(description="how many nodes")
    edges: int = Field(description="how many edges")
    order: list[str] = Field(description="the node keys in a topological order (parents before children)")
    roots: list[str] = Field(description="the nodes without parents: where a run starts")


class WorkflowTriggerIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    params: dict[str, Any] = Field(
        default_factory=dict, description="the run's starting context (JSON object)"
    )
    force: StrictBool = Field(  # true or false only: "yes" or 1 must not start a second run
        default=False,
        description="start even while a run of the workflow is running (without it, a workflow "
        "whose overlap rule is skip or queue_one answers 409 then)",
    )


class WorkflowTriggerOut(BaseModel):
    workflow_run_id: int


# -- helpers ------------------------------------------------------------------------------------


def driver_of(services: ManagementServices) -> WorkflowDriver:
    if services.workflows is None:
        raise ApiError(503, "workflows are not available on this node")
    return services.workflows


def _invalid(exc: WorkflowInvalid) -> ApiError:
    return ApiError(422, str(exc), exc.field)


def _parse(body: WorkflowIn) -> WorkflowGraph:
    check_json_value("nodes", body.nodes)  # stored as JSON (orjson): 64-bit integers at most
    check_json_value("edges", body.edges)
    try:
        graph = parse_workflow({"nodes": body.nodes, "edges": body.edges})
        check_run_budget(graph)
    except WorkflowInvalid as exc:
        raise _invalid(exc) from None
    return graph


async def check_jobs(
    services: ManagementServices,
    principal: Principal,
    graph: WorkflowGraph,
    workflow_id: int | None,
    owner_group: int,
) -> None:
    """Every node's job exists, is in a group the caller may operate and is in the
    workflow's own group ``owner_group``; every sub-workflow exists, is in that group, does not
    loop or nest too deep, and (at any depth) runs only such jobs (WorkflowInvalid -> 422)."""
    try:
        await check_tree(
            services.store,
            services.workflows.graph if services.workflows is not None else store_graphs(services.store),
            graph,
            workflow_id=workflow_id,
            owner_group=owner_group,
            may_operate=principal.can_write_group,
        )
    except WorkflowInvalid as exc:
        raise _invalid(exc) from None
    except WorkflowRunGone as exc:  # a sub-workflow deleted between two reads of the check
        raise ApiError(409, f"a sub-workflow was deleted while this was checked ({exc})", "nodes") from None


def _out(record: WorkflowRecord, schedule: WorkflowSchedule | None = None) -> WorkflowOut:
    return WorkflowOut(
        id=record.id,
        name=record.name,
        job_group=record.job_group,
        description=record.description,
        version=record.version,
        created_by=record.created_by,
        created_at=record.created_at,
        updated_at=record.updated_at,
        managed_by=record.managed_by,
        nodes=list(record.definition.get("nodes", [])),
        edges=list(record.definition.get("edges", [])),
        schedule=schedule_brief(schedule),
    )


async def _load(services: ManagementServices, principal: Principal, workflow_id: int) -> WorkflowRecord:
    record = await services.store.workflows.get(workflow_id)
    if record is None:
        raise not_found("workflow", workflow_id)
    ensure_group_read(principal, record.job_group, not_found("workflow", workflow_id))
    return record


# -- workflows ----------------------------------------------------------------------------------


@router.get("/workflows", response_model=PageOut[WorkflowOut], summary="List workflows")
async def list_workflows(
    services: Services,
    principal: Reader,
    job_group: Annotated[int | None, Query(ge=1, le=MAX_INT32)] = None,
    offset: Annotated[int, Query(ge=0, le=1_000_000)] = 0,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> PageOut[WorkflowOut]:
    groups = principal.readable_group_ids()
    if job_group is not None:
        groups = [job_group] if groups is None or job_group in groups else []
    records, total = await services.store.workflows.list(groups, offset, limit)
    schedules = await services.store.workflow_schedules.get_many([r.id for r in records])
    items = [_out(r, schedules.get(r.id)) for r in records]
    return PageOut[WorkflowOut](items=items, total=total, offset=offset, limit=limit)


async def _checked_new(body: WorkflowIn, services: ManagementServices, principal: Principal) -> WorkflowGraph:
    """What a create checks before it stores anything: the caller may operate the workflow's
    group, the graph parses, and its jobs and sub-workflows pass :func:`check_jobs`."""
    ensure_group_write(principal, body.job_group)
    graph = _parse(body)
    await check_jobs(services, principal, graph, None, body.job_group)
    return graph


async def _checked_edit(
    workflow_id: int, body: WorkflowIn, services: ManagementServices, principal: Principal
) -> tuple[WorkflowRecord, WorkflowGraph]:
    """What a save of a new version checks before it writes: the workflow is one the caller
    may see and operate (404 otherwise), the caller may operate the group it goes to, it is not
    declared in code (409), and the graph passes as for a create (checked as this workflow's:
    a sub-workflow leading back to it is a loop)."""
    record = await _load(services, principal, workflow_id)
    ensure_group_write(principal, record.job_group, not_found("workflow", workflow_id))
    ensure_group_write(principal, body.job_group)
    if record.managed_by == MANAGED_BY_CODE:
        raise ApiError(409, f"workflow {workflow_id} is declared in an executor's code: change it there "
                       "(it is saved again at the executor's next start)", "managed_by")
    graph = _parse(body)
    await check_jobs(services, principal, graph, workflow_id, body.job_group)
    return record, graph


def _stale(workflow_id: int, current: int, expected: int) -> ApiError:
    return ApiError(
        409,
        f"workflow {workflow_id} was saved meanwhile (now version {current}, "
        f"this edit started from {expected})",
        "version",
    )


@router.post("/workflows", response_model=WorkflowOut, status_code=201, summary="Create a workflow")
async def create_workflow(body: WorkflowIn, services: Services, principal: Writer) -> WorkflowOut:
    graph = await _checked_new(body, services, principal)
    workflow_id = await services.store.workflows.create(
        body.name,
        body.job_group,
        body.description,
        graph.to_json(),
        principal.user.username,
        services.now_ms(),
    )
    record = await services.store.workflows.get(workflow_id)
    assert record is not None
    await services.audit.record(
        principal,
        AuditAction.WORKFLOW_CREATE,
        target_type="workflow",
        target_id=workflow_id,
        group_id=body.job_group,
        after={"name": body.name, "nodes": len(graph.nodes), "version": 1},
    )
    return _out(record)


# Before the /workflows/{workflow_id} routes (a POST to /workflows/validate would not match
# them anyway: none of them is a POST).
@router.post(
    "/workflows/validate",
    response_model=WorkflowCheckOut,
    summary="Check a workflow as a save would, storing nothing",
)
async def validate_workflow(
    body: WorkflowIn,
    services: Services,
    principal: Writer,
    workflow_id: Annotated[
        int | None,
        Query(ge=1, le=MAX_INT32, description="check it as a new version of this workflow (as PUT would)"),
    ] = None,
) -> WorkflowCheckOut:
    """The checks of ``POST /workflows`` (or, with ``workflow_id``, of ``PUT /workflows/{id}``,
    ``version`` included) with their answers; nothing is stored or audited."""
    if workflow_id is None:
        graph = await _checked_new(body, services, principal)
    else:
        record, graph = await _checked_edit(workflow_id, body, services, principal)
        if body.version is not None and body.version != record.version:
            raise _stale(workflow_id, record.version, body.version)
    return WorkflowCheckOut(
        valid=True,
        nodes=len(graph.nodes),
        edges=len(graph.edges),
        order=list(graph.order),
        roots=[key for key in graph.order if not graph.parents[key]],
    )


@router.get(
    "/workflows/{workflow_id}", response_model=WorkflowOut, summary="A workflow and its current graph"
)
async def get_workflow(workflow_id: WorkflowId, services: Services, principal: Reader) -> WorkflowOut:
    record = await _load(services, principal, workflow_id)
    return _out(record, await services.store.workflow_schedules.get(workflow_id))


@router.put(
    "/workflows/{workflow_id}",
    response_model=WorkflowOut,
    summary="Save a new version of a workflow (runs keep the version they started with)",
)
async def update_workflow(
    workflow_id: WorkflowId, body: WorkflowIn, services: Services, principal: Writer
) -> WorkflowOut:
    record, graph = await _checked_edit(workflow_id, body, services, principal)
    expected = body.version if body.version is not None else record.version
    # Saved over the version checked above, in its group and managed in the console, or not
    # at all: an edit started from another version, or a move to another group meanwhile,
    # is refused in the write.
    version = None if expected != record.version else await services.store.workflows.update(
        workflow_id,
        body.name,
        body.job_group,
        body.description,
        graph.to_json(),
        principal.user.username,
        services.now_ms(),
        expected,
        owner_group=record.job_group,
        managed_by=None,
    )
    if version is None:
        raise _stale(workflow_id, record.version, expected)
    saved = await services.store.workflows.get(workflow_id)
    assert saved is not None
    before, after = _update_audit(record, saved)
    await services.audit.record(
        principal,
        AuditAction.WORKFLOW_UPDATE,
        target_type="workflow",
        target_id=workflow_id,
        group_id=body.job_group,
        before=before,
        after=after,
    )
    return _out(saved, await services.store.workflow_schedules.get(workflow_id))


_AUDITED = ("name", "description", "job_group", "version")


def _update_audit(record: WorkflowRecord, saved: WorkflowRecord) -> tuple[dict[str, Any], dict[str, Any]]:
    """before/after of an edit (the audit log keeps the fields that differ): name,
    description, group, version, and the graph in short (sha256, counts) with what changed in
    it node by node and edge by edge."""
    before: dict[str, Any] = {name: getattr(record, name) for name in _AUDITED}
    after: dict[str, Any] = {name: getattr(saved, name) for name in _AUDITED}
    changed = definition_changes(record.definition, saved.definition)
    if changed:
        before["graph"] = definition_summary(record.definition)
        after["graph"] = {**definition_summary(saved.definition), **changed}
    return before, after


@router.delete(
    "/workflows/{workflow_id}",
    status_code=204,
    response_class=Response,
    summary="Delete a workflow and its runs (refused while a run is running)",
)
async def delete_workflow(workflow_id: WorkflowId, services: Services, principal: Writer) -> Response:
    record = await _load(services, principal, workflow_id)
    ensure_group_write(principal, record.job_group, not_found("workflow", workflow_id))
    try:  # the check for running runs and the deletion are one transaction (no run is lost)
        # Only while the workflow is in the group checked above (moved meanwhile: not found).
        deleted = await services.store.workflows.delete(workflow_id, owner_group=record.job_group)
    except WorkflowBusy as exc:
        raise ApiError(
            409,
            f"workflow {workflow_id} has running runs ({', '.join(map(str, exc.run_ids))}); stop them first",
        ) from None
    if not deleted:
        raise not_found("workflow", workflow_id)
    await services.audit.record(
        principal,
        AuditAction.WORKFLOW_DELETE,
        target_type="workflow",
        target_id=workflow_id,
        group_id=record.job_group,
        before={"name": record.name},
    )
    return Response(status_code=204)


async def _overlap_of(services: ManagementServices, workflow_id: int) -> Overlap:
    """The workflow's overlap rule: its schedule's, else the default (one run at a time)."""
    schedule = await services.store.workflow_schedules.get(workflow_id)
    return Overlap.SKIP if schedule is None else Overlap(schedule.overlap)


@router.post(
    "/workflows/{workflow_id}/trigger",
    response_model=WorkflowTriggerOut,
    summary="Start a run of a workflow now",
)
async def trigger_workflow(
    workflow_id: WorkflowId, services: Services, principal: Writer, body: WorkflowTriggerIn | None = None
) -> WorkflowTriggerOut:
    record = await _load(services, principal, workflow_id)
    ensure_group_write(principal, record.job_group, not_found("workflow", workflow_id))
    body = body or WorkflowTriggerIn()
    params = body.params
    check_json_value("params", params)
    overlap = Overlap.ALLOW if body.force else await _overlap_of(services, workflow_id)
    driver = driver_of(services)
    try:  # deleted meanwhile: as if it had never been there
        graph = await driver.graph(record.id, record.version)
        await check_jobs(services, principal, graph, workflow_id, record.job_group)
        alone = overlap is not Overlap.ALLOW
        run_id, step = await driver.start_run(record, params, principal.user.username, alone=alone)
    except WorkflowRunGone:
        raise not_found("workflow", workflow_id) from None
    except WorkflowBusy as exc:
        going = ", ".join(map(str, exc.run_ids))
        refused = (f"workflow {workflow_id} has a run going ({going}) and its overlap rule, {overlap.value}, "
                   "runs one at a time: wait for it, stop it, or trigger with force")
        await services.audit.record(principal, AuditAction.WORKFLOW_TRIGGER, target_type="workflow",
                                    target_id=workflow_id, group_id=record.job_group, outcome=Outcome.FAILURE,
                                    details={"refused": refused, "version": record.version})
        raise ApiError(409, refused, "force") from None
    if not step.applied:
        raise ApiError(422, step.note or "the run could not start", "params")
    await services.audit.record(
        principal,
        AuditAction.WORKFLOW_TRIGGER,
        target_type="workflow",
        target_id=workflow_id,
        group_id=record.job_group,
        details={"workflow_run_id": run_id, "version": record.version, "force": body.force},
    )
    return WorkflowTriggerOut(workflow_run_id=run_id)
