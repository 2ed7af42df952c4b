"""Workflow definitions (``jobring_workflow``, ``jobring_workflow_version``): a workflow and
its saved versions; deleting one deletes its runs and node attempts too."""

from __future__ import annotations

import builtins
from collections.abc import Collection, Mapping
from typing import Any

import orjson
from sqlalchemy import ColumnElement, Select, and_, delete, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from jobring.admin.store.base import Repository, check_paging, chunks, new_id
from jobring.admin.store.tables import job_group as group_table
from jobring.admin.store.tables import (
    workflow,
    workflow_node_run,
    workflow_run,
    workflow_schedule,
    workflow_version,
)
from jobring.admin.store.workflow_records import WorkflowBusy, WorkflowNameTaken, WorkflowRecord, dumps

__all__ = ["WorkflowDefinitions", "lock_workflow_row"]


class WorkflowDefinitions(Repository):
    """Workflows and their versions."""

    async def create(
        self,
        name: str,
        job_group: int,
        description: str,
        definition: Mapping[str, Any],
        created_by: str | None,
        now_ms: int,
        managed_by: str | None = None,
    ) -> int:
        """A new workflow at version 1; returns its id (``managed_by`` "code": declared by an
        executor, and then :class:`WorkflowNameTaken` when the group has a workflow of that
        name: checked in the write with the group's row locked, so two replicas of one executor
        declaring at once, through two admin nodes, create it once)."""
        async with self._db.write() as conn:
            if managed_by is not None:
                await conn.execute(select(group_table.c.id).where(group_table.c.id == job_group)
                                   .with_for_update())
                alike = (await conn.execute(select(workflow.c.id, workflow.c.name).where(
                    workflow.c.job_group == job_group, workflow.c.name == name))).all()
                # The exact name: a collation that ignores case finds "Nightly" for "nightly".
                taken = [row.id for row in alike if row.name == name]
                if taken:
                    raise WorkflowNameTaken(name, int(min(taken)))
            workflow_id = new_id(
                await conn.execute(
                    insert(workflow).values(
                        name=name,
                        job_group=job_group,
                        description=description,
                        version=1,
                        created_by=created_by,
                        created_at=now_ms,
                        updated_at=now_ms,
                        managed_by=managed_by,
                    )
                )
            )
            await conn.execute(
                insert(workflow_version).values(
                    workflow_id=workflow_id,
                    version=1,
                    definition=dumps(definition),
                    created_by=created_by,
                    created_at=now_ms,
                )
            )
        return workflow_id

    async def update(
        self,
        workflow_id: int,
        name: str,
        job_group: int,
        description: str,
        definition: Mapping[str, Any],
        updated_by: str | None,
        now_ms: int,
        expected_version: int,
        *,
        owner_group: int | None = None,
        managed_by: str | None = None,
    ) -> int | None:
        """Save a new version over ``expected_version``; returns the new version, or None when
        the workflow is gone or another save came first. With ``owner_group``: only while the
        workflow is in that group and managed by ``managed_by`` (None: the console), checked
        in the write (the caller's permission check was made on that group)."""
        version = expected_version + 1
        where = [workflow.c.id == workflow_id, workflow.c.version == expected_version]
        if owner_group is not None:
            where += [workflow.c.job_group == owner_group, _managed_by_is(managed_by)]
        async with self._db.write() as conn:
            result = await conn.execute(
                update(workflow)
                .where(*where)
                .values(
                    name=name,
                    job_group=job_group,
                    description=description,
                    version=version,
                    updated_at=now_ms,
                )
            )
            if result.rowcount != 1:
                return None
            await conn.execute(
                insert(workflow_version).values(
                    workflow_id=workflow_id,
                    version=version,
                    definition=dumps(definition),
                    created_by=updated_by,
                    created_at=now_ms,
                )
            )
        return version

    async def get(self, workflow_id: int) -> WorkflowRecord | None:
        """The workflow with its current definition."""
        stmt = _with_definition().where(workflow.c.id == workflow_id)
        async with self._db.read() as conn:
            row = (await conn.execute(stmt)).first()
        return None if row is None else _record(row)

    async def definition(self, workflow_id: int, version: int) -> dict[str, Any] | None:
        """The graph of one saved version."""
        stmt = select(workflow_version.c.definition).where(
            workflow_version.c.workflow_id == workflow_id, workflow_version.c.version == version
        )
        async with self._db.read() as conn:
            raw = (await conn.execute(stmt)).scalar_one_or_none()
        return None if raw is None else dict(orjson.loads(raw))

    async def list(
        self, group_ids: Collection[int] | None, offset: int = 0, limit: int = 50
    ) -> tuple[builtins.list[WorkflowRecord], int]:
        """Workflows of these groups (None: all), newest first, with the total."""
        check_paging(offset, limit)
        where = [] if group_ids is None else [workflow.c.job_group.in_(list(group_ids))]
        stmt = (
            _with_definition()
            .where(*where)
            .order_by(workflow.c.id.desc())
            .offset(offset)
            .limit(limit)
        )
        async with self._db.read() as conn:
            rows = (await conn.execute(stmt)).all()
            total = int(
                (await conn.execute(select(func.count()).select_from(workflow).where(*where))).scalar_one()
            )
        return [_record(row) for row in rows], total

    async def delete(self, workflow_id: int, *, owner_group: int | None = None) -> bool:
        """Delete the workflow, its versions, runs and node attempts; False when it was gone
        (or, with ``owner_group``, is no longer in that group: checked in the write).

        Refused (:class:`WorkflowBusy`) while a run is running, checked in the same transaction
        with the workflow's row locked: a run starting meanwhile (:meth:`start_run` locks the
        row too) either comes first and is seen here, or finds the workflow gone."""
        async with self._db.write() as conn:
            if not await lock_workflow_row(conn, workflow_id, group=owner_group):
                return False
            running = (
                await conn.execute(
                    select(workflow_run.c.id)
                    .where(workflow_run.c.workflow_id == workflow_id, workflow_run.c.status == "running")
                    .order_by(workflow_run.c.id)
                    .limit(5)
                    .with_for_update()
                )
            ).scalars().all()
            if running:
                raise WorkflowBusy(workflow_id, [int(i) for i in running])
            runs = (
                (
                    await conn.execute(
                        select(workflow_run.c.id).where(workflow_run.c.workflow_id == workflow_id)
                    )
                )
                .scalars()
                .all()
            )
            for part in chunks(list(runs)):
                await conn.execute(
                    delete(workflow_node_run).where(workflow_node_run.c.workflow_run_id.in_(part))
                )
            await conn.execute(delete(workflow_run).where(workflow_run.c.workflow_id == workflow_id))
            await conn.execute(delete(workflow_version).where(workflow_version.c.workflow_id == workflow_id))
            schedule_row = workflow_schedule.c.workflow_id == workflow_id
            await conn.execute(delete(workflow_schedule).where(schedule_row))
            result = await conn.execute(delete(workflow).where(workflow.c.id == workflow_id))
            return bool(result.rowcount)


async def lock_workflow_row(conn: AsyncConnection, workflow_id: int, *, group: int | None = None,
                            shared: bool = False) -> bool:
    """Lock the workflow's row for the rest of the transaction (``shared``: as a reader, so
    that a deletion or a group move waits); False when it is gone, or not in ``group``."""
    where = [workflow.c.id == workflow_id]
    if group is not None:
        where.append(workflow.c.job_group == group)
    locked = select(workflow.c.id).where(*where).with_for_update(read=shared)
    return (await conn.execute(locked)).first() is not None


def _managed_by_is(managed_by: str | None) -> ColumnElement[bool]:
    return workflow.c.managed_by.is_(None) if managed_by is None else workflow.c.managed_by == managed_by


def _with_definition() -> Select[Any]:
    """Workflows joined to their current version's definition."""
    return select(workflow, workflow_version.c.definition).join(
        workflow_version,
        and_(
            workflow_version.c.workflow_id == workflow.c.id,
            workflow_version.c.version == workflow.c.version,
        ),
    )


def _record(row: Any) -> WorkflowRecord:
    values = dict(row._asdict())
    definition = values.pop("definition")
    return WorkflowRecord(**values, definition=orjson.loads(definition))
