"""Sub-workflow runs and declared workflows: the reads and writes that tie runs and workflows
together beyond one row of ``jobring_workflow*`` (see :mod:`jobring.admin.store.workflows`).

A child run names the node attempt that started it (``parent_node_run_id``, unique), so the
driver finds a node's child run, the sweep finds running sub-workflow attempts whose child
has ended, and the start of a child walks up its ancestors to refuse a loop.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass

from sqlalchemy import select, update

from jobring.admin.store.base import Repository
from jobring.admin.store.tables import workflow, workflow_node_run, workflow_run
from jobring.admin.store.workflows import (
    NodeRunRecord,
    NodeRunState,
    WorkflowRunRecord,
    decoded_run,
    node_run_of,
)

__all__ = ["DeclaredWorkflow", "EndedChild", "WorkflowChildRepository"]


@dataclass(frozen=True, slots=True)
class EndedChild:
    """A running sub-workflow attempt whose child run has ended."""

    node_run: NodeRunRecord
    child_run_id: int


@dataclass(frozen=True, slots=True)
class DeclaredWorkflow:
    """A workflow of a group by name: its id, version and whether code manages it."""

    id: int
    name: str
    version: int
    managed_by: str | None


class WorkflowChildRepository(Repository):
    """Child runs of sub-workflow nodes, and workflows by name for declarations."""

    async def child_of(self, node_run_id: int) -> WorkflowRunRecord | None:
        """The run a sub-workflow attempt started (with its state), if any."""
        stmt = select(workflow_run).where(workflow_run.c.parent_node_run_id == node_run_id)
        async with self._db.read() as conn:
            row = (await conn.execute(stmt)).first()
        return None if row is None else decoded_run(row)

    async def running_with_ended_child(self, limit: int = 500) -> builtins.list[EndedChild]:
        """Running sub-workflow attempts whose child run is no longer running (the child's end
        was not handed to the parent: an admin stopped in between)."""
        child = workflow_run.alias("child")
        stmt = (
            select(workflow_node_run, child.c.id.label("child_run_id"))
            .join(child, child.c.parent_node_run_id == workflow_node_run.c.id)
            .where(workflow_node_run.c.state == NodeRunState.RUNNING, child.c.status != "running")
            .order_by(workflow_node_run.c.id)
            .limit(limit)
        )
        async with self._db.read() as conn:
            rows = (await conn.execute(stmt)).all()
        out = []
        for row in rows:
            values = dict(row._asdict())
            child_id = int(values.pop("child_run_id"))
            out.append(EndedChild(NodeRunRecord(**values), child_id))
        return out

    async def running_subworkflows(self, limit: int = 500) -> builtins.list[NodeRunRecord]:
        """Running sub-workflow attempts (for their deadlines)."""
        stmt = (
            select(workflow_node_run)
            .where(
                workflow_node_run.c.state == NodeRunState.RUNNING,
                workflow_node_run.c.workflow_id.is_not(None),
                workflow_node_run.c.timeout_s > 0,
            )
            .order_by(workflow_node_run.c.id)
            .limit(limit)
        )
        async with self._db.read() as conn:
            return [node_run_of(r) for r in (await conn.execute(stmt)).all()]

    async def ancestors(self, run_id: int, limit: int) -> builtins.list[int]:
        """The workflow ids above run ``run_id``: its own workflow first, then its parent's, up
        to ``limit`` entries."""
        out: builtins.list[int] = []
        current: int | None = run_id
        async with self._db.read() as conn:
            while current is not None and len(out) < limit:
                row = (
                    await conn.execute(
                        select(workflow_run.c.workflow_id, workflow_run.c.parent_run_id).where(
                            workflow_run.c.id == current
                        )
                    )
                ).first()
                if row is None:
                    break
                out.append(int(row.workflow_id))
                current = None if row.parent_run_id is None else int(row.parent_run_id)
        return out

    async def link(self, node_run_id: int) -> bool:
        """The attempt's child run is started (firing -> running)."""
        async with self._db.write() as conn:
            result = await conn.execute(
                update(workflow_node_run)
                .where(
                    workflow_node_run.c.id == node_run_id, workflow_node_run.c.state == NodeRunState.FIRING
                )
                .values(state=NodeRunState.RUNNING)
            )
            return result.rowcount == 1

    async def by_name(self, group_id: int) -> dict[str, DeclaredWorkflow]:
        """The group's workflows by name (of several with one name: the oldest)."""
        stmt = (
            select(workflow.c.id, workflow.c.name, workflow.c.version, workflow.c.managed_by)
            .where(workflow.c.job_group == group_id)
            .order_by(workflow.c.id.desc())
        )
        async with self._db.read() as conn:
            rows = (await conn.execute(stmt)).all()
        return {r.name: DeclaredWorkflow(int(r.id), r.name, int(r.version), r.managed_by) for r in rows}

    async def set_managed_by(self, workflow_id: int, managed_by: str | None) -> None:
        async with self._db.write() as conn:
            await conn.execute(
                update(workflow).where(workflow.c.id == workflow_id).values(managed_by=managed_by)
            )
