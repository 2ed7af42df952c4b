"""Workflows (``/workflows``) and their runs (``/workflow-runs``): define, trigger, observe, repair."""

from __future__ import annotations

from typing import Any

from jobring.client.call import (
    ApiGroup,
    Call,
    Endpoint,
    JsonObject,
    M,
    as_nothing,
    as_object,
    compact,
    delete,
    get,
    post,
    put,
)
from jobring.client.core import path_part
from jobring.client.page import Page, as_page


def _workflow(workflow_id: int) -> str:
    return f"/workflows/{path_part(workflow_id)}"


def _run(run_id: int) -> str:
    return f"/workflow-runs/{path_part(run_id)}"


def list_workflows(*, group: int | None = None, offset: int = 0, limit: int = 50) -> Call[Page]:
    """Workflows the caller may see, newest first."""
    return get("/workflows", as_page, job_group=group, offset=offset, limit=limit)


def get_workflow(workflow_id: int) -> Call[JsonObject]:
    """One workflow with its current graph (``nodes``, ``edges``, ``version``)."""
    return get(_workflow(workflow_id), as_object)


def create_workflow(definition: dict[str, Any]) -> Call[JsonObject]:
    """Create a workflow from ``{"name", "job_group", "nodes", "edges", ...}``."""
    return post("/workflows", as_object, definition)


def validate_workflow(definition: dict[str, Any], workflow_id: int | None = None) -> Call[JsonObject]:
    """Check a definition as a create would (as a save of workflow ``workflow_id`` would, when
    given), storing nothing: ``{"valid", "nodes", "edges", "order", "roots"}``, or the save's
    refusal (an :class:`~jobring.client.errors.AdminApiError` naming the field and the node)."""
    return post("/workflows/validate", as_object, definition, workflow_id=workflow_id)


def update_workflow(workflow_id: int, definition: dict[str, Any]) -> Call[JsonObject]:
    """Save a new version (give ``version``: the one the edit started from, to refuse lost updates)."""
    return put(_workflow(workflow_id), as_object, definition)


def delete_workflow(workflow_id: int) -> Call[None]:
    """Delete a workflow and its runs (refused while one runs)."""
    return delete(_workflow(workflow_id), as_nothing)


def trigger_workflow(workflow_id: int, params: dict[str, Any] | None = None, force: bool = False
                     ) -> Call[JsonObject]:
    """Start a run now; ``params`` is its starting context: ``{"workflow_run_id": id}``. While a
    run is going, a workflow whose overlap rule is ``skip`` or ``queue_one`` refuses it (409)
    unless ``force``."""
    body: dict[str, Any] = {"params": params or {}}
    if force:
        body["force"] = True
    return post(_workflow(workflow_id) + "/trigger", as_object, body)


def get_schedule(workflow_id: int) -> Call[JsonObject]:
    """A workflow's schedule, with its next fire times."""
    return get(_workflow(workflow_id) + "/schedule", as_object)


def set_schedule(workflow_id: int, schedule: dict[str, Any]) -> Call[JsonObject]:
    """Set the schedule (``schedule_type``, ``schedule_conf``, ``schedule_timezone``,
    ``misfire_strategy``, ``overlap``, ``params``, ``enabled``)."""
    return put(_workflow(workflow_id) + "/schedule", as_object, schedule)


def list_runs(*, workflow: int | None = None, state: str | None = None, offset: int = 0,
              limit: int = 50) -> Call[Page]:
    """Workflow runs, newest first; ``state``: running, success, failed or stopped."""
    return get("/workflow-runs", as_page, workflow_id=workflow, state=state, offset=offset, limit=limit)


def get_run(run_id: int) -> Call[JsonObject]:
    """A workflow run: its state, context and nodes."""
    return get(_run(run_id), as_object)


def stop_run(run_id: int, round: int | None = None) -> Call[JsonObject]:
    """Stop a running run (its running nodes are killed)."""
    return post(_run(run_id) + "/stop", as_object, compact({"round": round}))


def retry_run(run_id: int, round: int | None = None) -> Call[JsonObject]:
    """Retry a failed or stopped run from its failed nodes."""
    return post(_run(run_id) + "/retry", as_object, compact({"round": round}))


def mark_succeeded(run_id: int, node: str, round: int | None = None) -> Call[JsonObject]:
    """Take a failed node as succeeded and let the rest go on."""
    path = _run(run_id) + f"/nodes/{path_part(node)}/mark-succeeded"
    return post(path, as_object, compact({"round": round}))


def rerun_from(run_id: int, node: str, round: int | None = None) -> Call[JsonObject]:
    """Run an ended run again from ``node``."""
    return post(_run(run_id) + f"/nodes/{path_part(node)}/rerun", as_object, compact({"round": round}))


class WorkflowsApi(ApiGroup[M]):
    """Workflows: jobs wired into a graph (docs/workflows.md)."""

    list = Endpoint(list_workflows)
    get = Endpoint(get_workflow)
    create = Endpoint(create_workflow)
    validate = Endpoint(validate_workflow)
    update = Endpoint(update_workflow)
    delete = Endpoint(delete_workflow)
    trigger = Endpoint(trigger_workflow)
    schedule = Endpoint(get_schedule)
    set_schedule = Endpoint(set_schedule)
    runs = Endpoint(list_runs)
    run = Endpoint(get_run)
    stop = Endpoint(stop_run)
    retry = Endpoint(retry_run)
    mark_succeeded = Endpoint(mark_succeeded)
    rerun_from = Endpoint(rerun_from)
