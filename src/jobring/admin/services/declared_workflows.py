"""Workflows declared in an executor's code (``executor.workflow(...)``), applied by the admin
when the executor sends its declarations (``api/jobring/declareJobs``, after the jobs).

A declared node names its job by handler (``"job": "extract"``): the group's job for that
handler managed by code, else its console job; a sub-workflow node names a workflow of the
group (``"workflow": "part"``; a workflow declared earlier in the same request is found).
The result is checked as a saved workflow is (:func:`parse_workflow`, the run budget and
:func:`check_tree` for the group), one refusal naming the workflow and the node.

Per (group, name): a missing workflow is created managed by code (``managed_by = "code"``);
one managed by code is saved as a new version when its definition or description changed
(runs keep the version they started with); a workflow of that name made in the console is
never taken over (skipped and reported, as for jobs). A workflow managed by code that the
request no longer declares is *detached*: it becomes an ordinary workflow that the console
may edit (nothing is deleted, its runs and schedule stay). Managed by code means read-only
in the API and the console: the code is where it is changed.

A declaration may carry a ``schedule`` (the fields of ``PUT /workflows/{id}/schedule``, checked
by the same rules, refusals naming ``schedule.<field>``). A declared schedule follows the code:
it is stored managed by code (read-only in the API and the console), replaced when the declared
schedule changes (the next instant planned again from now; an unchanged declaration leaves the
planned instant and a waiting fire alone), and removed when the declaration drops it (the
workflow then runs only when triggered). A schedule set in the console on a workflow whose
declaration has none is left alone; a detached workflow keeps its schedule, editable again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from jobring.admin.services.audit import Actor, AuditAction, AuditLog
from jobring.admin.services.validation import FieldError
from jobring.admin.services.workflow_access import GraphSource, check_tree
from jobring.admin.services.workflow_schedule_rules import (
    MISFIRES,
    OVERLAPS,
    SCHEDULE_TYPES,
    ScheduleSpec,
    audit_view,
    checked,
    planned,
    spec_of,
)
from jobring.admin.services.workflows import WorkflowRunGone
from jobring.admin.store.workflow_schedules import WorkflowSchedule
from jobring.admin.store.workflows import MANAGED_BY_CODE, WorkflowGone, WorkflowNameTaken
from jobring.core.clock import Clock
from jobring.core.text import one_line_problem
from jobring.core.workflow import WorkflowInvalid, check_run_budget, parse_workflow
from jobring.errors import JobringError

if TYPE_CHECKING:
    from jobring.admin.store import Store

__all__ = [
    "MAX_WORKFLOWS",
    "DeclaredWorkflows",
    "WorkflowDeclaration",
    "WorkflowDeclarationError",
    "parse_workflow_declarations",
]

MAX_WORKFLOWS = 100


@dataclass(frozen=True)
class WorkflowDeclaration:
    name: str
    description: str
    nodes: list[dict[str, Any]]
    edges: list[dict[str, Any]]
    schedule: ScheduleSpec | None = None  # None: the code declares no schedule


# A declared schedule's keys (the API's names) -> the values each may take (a type or the choices).
_SCHEDULE_FIELDS: dict[str, Any] = {
    "schedule_type": SCHEDULE_TYPES,
    "schedule_conf": str,
    "schedule_timezone": (str, type(None)),
    "misfire_strategy": MISFIRES,
    "overlap": OVERLAPS,
    "params": dict,
    "enabled": bool,
}


@dataclass(frozen=True)
class _ScheduleChange:
    before: WorkflowSchedule | None
    after: WorkflowSchedule | None  # None: removed


class WorkflowDeclarationError(JobringError):
    """A refused workflow declaration: ``workflow`` its name, ``field`` the JSON path."""

    def __init__(self, workflow: str | None, field: str | None, message: str) -> None:
        where = f"declared workflow {workflow!r}" if workflow else "declared workflows"
        super().__init__(f"{where}: {message}")
        self.workflow, self.field = workflow, field


def _text(value: object, name: str | None, field: str, limit: int) -> str:
    if not isinstance(value, str) or len(value) > limit or one_line_problem(value):
        raise WorkflowDeclarationError(name, field, f"{field}: one line of at most {limit} characters")
    return value


def _objects(value: object, name: str, field: str) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise WorkflowDeclarationError(name, field, f"{field}: a list of objects is required")
    return [dict(v) for v in value]


def parse_workflow_declarations(raw: object) -> list[WorkflowDeclaration] | None:
    """The declared workflows of a request (None: the executor sends none, an older one that
    knows nothing of them: its group's workflows are left alone)."""
    if raw is None:
        return None
    if not isinstance(raw, list) or len(raw) > MAX_WORKFLOWS:
        raise WorkflowDeclarationError(None, "workflows", f"workflows: a list of at most {MAX_WORKFLOWS}")
    found: dict[str, WorkflowDeclaration] = {}
    for item in raw:
        if not isinstance(item, dict):
            raise WorkflowDeclarationError(None, "workflows", "workflows: each is an object")
        name = _text(item.get("name"), None, "name", 100).strip()
        if not name:
            raise WorkflowDeclarationError(None, "name", "name: required")
        if name in found:
            raise WorkflowDeclarationError(name, "name", "name: declared twice")
        found[name] = WorkflowDeclaration(
            name,
            _text(item.get("description", ""), name, "description", 255),
            _objects(item.get("nodes"), name, "nodes"),
            _objects(item.get("edges", []), name, "edges"),
            _schedule_spec(item.get("schedule"), name),
        )
    return list(found.values())


def _schedule_spec(raw: object, name: str) -> ScheduleSpec | None:
    """A declaration's ``schedule`` in shape (its values are checked when applied)."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise WorkflowDeclarationError(name, "schedule", "schedule: an object is required")
    for key, value in raw.items():
        allowed = _SCHEDULE_FIELDS.get(key)
        if allowed is None:
            # The key is the executor's text: logged and echoed, so one short line at most.
            shown = key if key.isidentifier() and len(key) <= 64 else f"{key!r:.64}"
            field = f"schedule.{shown}"
            raise WorkflowDeclarationError(name, field, f"{field}: not a schedule field")
        if isinstance(allowed, tuple) and all(isinstance(a, str) for a in allowed):
            if value not in allowed:
                raise WorkflowDeclarationError(
                    name, f"schedule.{key}", f"schedule.{key}: one of {', '.join(allowed)}"
                )
        elif not isinstance(value, allowed) or (allowed is str and isinstance(value, bool)):
            raise WorkflowDeclarationError(name, f"schedule.{key}", f"schedule.{key}: wrong type")
    if "schedule_type" not in raw:
        raise WorkflowDeclarationError(name, "schedule.schedule_type", "schedule.schedule_type: required")
    return ScheduleSpec(
        schedule_type=raw["schedule_type"],
        schedule_conf=raw.get("schedule_conf", ""),
        time_zone=raw.get("schedule_timezone"),
        misfire_strategy=raw.get("misfire_strategy", "DO_NOTHING"),
        overlap=raw.get("overlap", "skip"),
        params=raw.get("params", {}),
        enabled=raw.get("enabled", True),
    )


class DeclaredWorkflows:
    """Applies one group's declared workflows (see the module docstring)."""

    def __init__(
        self, store: Store, audit: AuditLog, clock: Clock, graphs: GraphSource, *, default_zone: str = "UTC"
    ) -> None:
        self._store, self._audit, self._clock, self._graphs = store, audit, clock, graphs
        self._zone = default_zone

    async def apply(
        self, group_id: int, actor: Actor, declarations: list[WorkflowDeclaration], jobs: Mapping[str, int]
    ) -> dict[str, Any]:
        """Create, update and detach; ``jobs``: the group's job id per handler."""
        out: dict[str, list[Any]] = {"created": [], "updated": [], "detached": [], "skipped": [],
                                     "schedules": []}
        for decl in declarations:
            existing = (await self._store.workflow_children.by_name(group_id)).get(decl.name)
            if existing is not None and existing.managed_by != MANAGED_BY_CODE:
                out["skipped"].append(
                    {
                        "workflow": decl.name,
                        "workflow_id": existing.id,
                        "reason": f"workflow {existing.id} of this name is managed in the console",
                    }
                )
                continue
            definition = await self._definition(
                group_id, decl, None if existing is None else existing.id, jobs
            )
            now = self._clock.now_ms()
            # Checked before anything of this workflow is written: a bad schedule refuses it whole.
            wid_before = None if existing is None else existing.id
            schedule = await self._schedule_change(decl, wid_before, actor, now)
            if existing is None:
                try:
                    wid = await self._store.workflows.create(
                        decl.name,
                        group_id,
                        decl.description,
                        definition,
                        actor.name,
                        now,
                        managed_by=MANAGED_BY_CODE,
                    )
                except WorkflowNameTaken as exc:  # created since it was read (another replica, node)
                    out["skipped"].append({"workflow": decl.name, "workflow_id": exc.workflow_id,
                                           "reason": f"{exc}: created meanwhile (by another executor's "
                                           "declaration or in the console)"})
                    continue
                await self._audit.record(
                    actor,
                    AuditAction.WORKFLOW_CREATE,
                    target_type="workflow",
                    target_id=wid,
                    group_id=group_id,
                    after={"name": decl.name, "nodes": len(decl.nodes), "version": 1},
                )
                out["created"].append(wid)
                await self._apply_schedule(decl.name, wid, group_id, actor, schedule, out)
                continue
            await self._apply_schedule(decl.name, existing.id, group_id, actor, schedule, out)
            record = await self._store.workflows.get(existing.id)
            if record is None or (record.definition == definition and record.description == decl.description):
                continue
            version = await self._store.workflows.update(
                existing.id,
                decl.name,
                group_id,
                decl.description,
                definition,
                actor.name,
                now,
                record.version,
                owner_group=group_id,  # not once detached or moved to another group meanwhile
                managed_by=MANAGED_BY_CODE,
            )
            if version is not None:
                await self._audit.record(
                    actor,
                    AuditAction.WORKFLOW_UPDATE,
                    target_type="workflow",
                    target_id=existing.id,
                    group_id=group_id,
                    before={"version": record.version},
                    after={"version": version},
                )
                out["updated"].append(existing.id)
        declared = {d.name for d in declarations}
        for name, wf in (await self._store.workflow_children.by_name(group_id)).items():
            if wf.managed_by == MANAGED_BY_CODE and name not in declared:
                await self._store.workflow_children.set_managed_by(wf.id, None)
                await self._store.workflow_schedules.set_managed_by(wf.id, None)
                await self._audit.record(
                    actor,
                    AuditAction.WORKFLOW_UPDATE,
                    target_type="workflow",
                    target_id=wf.id,
                    group_id=group_id,
                    before={"managed_by": MANAGED_BY_CODE},
                    after={"managed_by": None},
                )
                out["detached"].append(wf.id)
        return out

    async def _schedule_change(
        self, decl: WorkflowDeclaration, workflow_id: int | None, actor: Actor, now: int
    ) -> _ScheduleChange | None:
        """What the declared schedule changes in the stored one (None: nothing)."""
        before = None if workflow_id is None else await self._store.workflow_schedules.get(workflow_id)
        ours = before is not None and before.managed_by == MANAGED_BY_CODE
        if decl.schedule is None:
            return _ScheduleChange(before, None) if ours else None
        try:
            spec = checked(decl.schedule, self._zone)
            if ours and before is not None and spec_of(before) == spec:
                return None
            after = planned(workflow_id or 0, spec, self._zone, now, before, actor.name, MANAGED_BY_CODE)
        except FieldError as exc:
            field = f"schedule.{exc.field}"
            raise WorkflowDeclarationError(decl.name, field, f"schedule.{exc}") from None
        return _ScheduleChange(before, after)

    async def _apply_schedule(
        self,
        name: str,
        workflow_id: int,
        group_id: int,
        actor: Actor,
        change: _ScheduleChange | None,
        out: dict[str, list[Any]],
    ) -> None:
        if change is None:
            return
        if change.after is None:
            await self._store.workflow_schedules.delete(workflow_id)
            after = None
        else:
            after = replace(change.after, workflow_id=workflow_id)
            try:
                await self._store.workflow_schedules.put(after, owner_group=group_id)
            except WorkflowGone:  # deleted or moved to another group since it was read
                out["skipped"].append({"workflow": name, "workflow_id": workflow_id, "reason": f"workflow "
                                       f"{workflow_id} left this group while its schedule was declared"})
                return
        await self._audit.record(
            actor,
            AuditAction.WORKFLOW_SCHEDULE,
            target_type="workflow",
            target_id=workflow_id,
            group_id=group_id,
            before=audit_view(change.before),
            after=audit_view(after),
        )
        out["schedules"].append(workflow_id)

    async def _definition(
        self, group_id: int, decl: WorkflowDeclaration, workflow_id: int | None, jobs: Mapping[str, int]
    ) -> dict[str, object]:
        """The declaration with handlers and workflow names resolved, checked as a save is."""
        workflows = await self._store.workflow_children.by_name(group_id)
        nodes = []
        for index, node in enumerate(decl.nodes):
            node = dict(node)
            key = node.get("key")
            if "job_id" in node or "workflow_id" in node:
                raise WorkflowDeclarationError(
                    decl.name,
                    f"nodes[{index}]",
                    f"nodes[{index}] (node {key!r}): "
                    "name the job by handler (job) and a workflow by name (workflow)",
                )
            if "job" in node:
                handler = node.pop("job")
                if not isinstance(handler, str) or handler not in jobs:
                    raise WorkflowDeclarationError(
                        decl.name,
                        f"nodes[{index}].job",
                        f"nodes[{index}].job (node {key!r}): this group has no job "
                        f"with handler {handler!r:.80}",
                    )
                node["job_id"] = jobs[handler]
            if "workflow" in node:
                name = node.pop("workflow")
                target = workflows.get(name) if isinstance(name, str) else None
                if target is None:
                    raise WorkflowDeclarationError(
                        decl.name,
                        f"nodes[{index}].workflow",
                        f"nodes[{index}].workflow (node {key!r}): this group has no "
                        f"workflow named {name!r:.80} (declare it first)",
                    )
                node["workflow_id"] = target.id
            nodes.append(node)
        try:
            graph = parse_workflow({"nodes": nodes, "edges": decl.edges})
            check_run_budget(graph)
            await check_tree(
                self._store,
                self._graphs,
                graph,
                workflow_id=workflow_id,
                owner_group=group_id,
                may_operate=lambda g: g == group_id,
            )
        except WorkflowInvalid as exc:
            raise WorkflowDeclarationError(decl.name, exc.field, str(exc)) from None
        except WorkflowRunGone as exc:  # a sub-workflow deleted between two reads of the check
            raise WorkflowDeclarationError(decl.name, "nodes", f"a sub-workflow was deleted while this "
                                           f"was checked ({exc})") from None
        return graph.to_json()
