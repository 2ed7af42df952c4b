"""Workflows (``jobring_workflow*``): definitions with their versions, runs, node attempts.

A run's state is one JSON document advanced by compare-and-set on ``rev``
(:meth:`WorkflowRepository.advance`): the node attempts a step starts are inserted in the same
transaction, so a step and its start commands are stored together or not at all, and of two
admins that computed a step from the same revision only one stores it.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy import and_, delete, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from jobring.admin.store.base import Repository, check_paging, chunks, new_id
from jobring.admin.store.tables import (
    job_log,
    workflow,
    workflow_node_run,
    workflow_run,
    workflow_schedule,
    workflow_version,
)
from jobring.errors import JobringError

__all__ = [
    "MANAGED_BY_CODE",
    "NewNodeRun",
    "NodeRunRecord",
    "NodeRunState",
    "WorkflowBusy",
    "WorkflowGone",
    "WorkflowRecord",
    "WorkflowRepository",
    "WorkflowRunRecord",
    "EndedNodeRun",
]


MANAGED_BY_CODE = "code"
"""``jobring_workflow.managed_by`` of a workflow declared in an executor's code."""


class NodeRunState:
    """The states of a node attempt row (see ``tables.workflow_node_run``)."""

    PENDING = "pending"
    FIRING = "firing"
    RUNNING = "running"
    ENDED = "ended"


class WorkflowGone(JobringError, LookupError):
    """The workflow was deleted (a run cannot start)."""


class WorkflowBusy(JobringError):
    """The workflow has running runs (``run_ids``, a few of them): it may not be deleted."""

    def __init__(self, workflow_id: int, run_ids: builtins.list[int]) -> None:
        super().__init__(f"workflow {workflow_id} has running runs")
        self.run_ids = run_ids


@dataclass(frozen=True, slots=True)
class WorkflowRecord:
    id: int
    name: str
    job_group: int
    description: str
    version: int
    created_by: str | None
    created_at: int
    updated_at: int
    definition: dict[str, Any]
    managed_by: str | None = None


@dataclass(frozen=True, slots=True)
class WorkflowRunRecord:
    """A run; ``state`` is the engine's document (None in lists, which do not read it)."""

    id: int
    workflow_id: int
    version: int
    job_group: int
    status: str
    rev: int
    triggered_by: str | None
    started_at: int
    ended_at: int | None
    parent_run_id: int | None = None
    parent_node_run_id: int | None = None
    state: dict[str, Any] | None = None
    params: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class NewNodeRun:
    """A node attempt to start (an engine StartJob or StartSubworkflow command)."""

    node_key: str
    item: int  # -1: not a fan-out item
    attempt: int
    job_id: int  # 0 for a sub-workflow attempt
    params: str | None
    timeout_s: int | None
    workflow_id: int | None = None  # the workflow a sub-workflow attempt runs


@dataclass(frozen=True, slots=True)
class NodeRunRecord:
    id: int
    workflow_run_id: int
    node_key: str
    item: int
    attempt: int
    job_id: int
    params: str | None
    timeout_s: int | None
    state: str
    log_id: int | None
    claimed_by: str | None
    claimed_at: int | None
    created_at: int
    ended_at: int | None
    workflow_id: int | None = None
    context_added: str | None = None  # JSON: what the handler added to the context


@dataclass(frozen=True, slots=True)
class EndedNodeRun:
    """A running node attempt whose job run has a result (or failed to trigger)."""

    node_run: NodeRunRecord
    trigger_code: int
    trigger_msg: str | None
    handle_code: int
    handle_msg: str | None


def _dumps(doc: Mapping[str, Any]) -> str:
    return orjson.dumps(doc).decode()


async def _state_text(doc: Mapping[str, Any]) -> str:
    # A run's state reaches megabytes (10,000 fan-out items with their messages): encoded in a
    # worker thread so the event loop keeps serving, and before the write transaction opens.
    return await asyncio.to_thread(_dumps, doc)


def _run(row: Any, with_state: bool) -> WorkflowRunRecord:
    values = dict(row._asdict())
    raw = values.pop("state", None)
    params = values.pop("params", None)
    return WorkflowRunRecord(**values, state=orjson.loads(raw) if with_state and raw is not None else None,
                             params=orjson.loads(params) if with_state and params is not None else None)


def decoded_run(row: Any) -> WorkflowRunRecord:
    """A run row with its state and params decoded."""
    return _run(row, with_state=True)


def node_run_of(row: Any) -> NodeRunRecord:
    """A node attempt row."""
    return NodeRunRecord(**row._asdict())


_RUN_LIST_COLUMNS = [c for c in workflow_run.c if c.name not in ("state", "params")]


class WorkflowRepository(Repository):
    """Workflow definitions, runs and node attempts."""

    # -- definitions ------------------------------------------------------------------------------

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
        executor)."""
        async with self._db.write() as conn:
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
                    definition=_dumps(definition),
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
    ) -> int | None:
        """Save a new version over ``expected_version``; returns the new version, or None when
        the workflow is gone or another save came first."""
        version = expected_version + 1
        async with self._db.write() as conn:
            result = await conn.execute(
                update(workflow)
                .where(workflow.c.id == workflow_id, workflow.c.version == expected_version)
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
                    definition=_dumps(definition),
                    created_by=updated_by,
                    created_at=now_ms,
                )
            )
        return version

    async def get(self, workflow_id: int) -> WorkflowRecord | None:
        """The workflow with its current definition."""
        stmt = (
            select(workflow, workflow_version.c.definition)
            .join(
                workflow_version,
                and_(
                    workflow_version.c.workflow_id == workflow.c.id,
                    workflow_version.c.version == workflow.c.version,
                ),
            )
            .where(workflow.c.id == workflow_id)
        )
        async with self._db.read() as conn:
            row = (await conn.execute(stmt)).first()
        if row is None:
            return None
        values = dict(row._asdict())
        definition = values.pop("definition")
        return WorkflowRecord(**values, definition=orjson.loads(definition))

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
            select(workflow, workflow_version.c.definition)
            .join(
                workflow_version,
                and_(
                    workflow_version.c.workflow_id == workflow.c.id,
                    workflow_version.c.version == workflow.c.version,
                ),
            )
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
        out = []
        for row in rows:
            values = dict(row._asdict())
            definition = values.pop("definition")
            out.append(WorkflowRecord(**values, definition=orjson.loads(definition)))
        return out, total

    async def delete(self, workflow_id: int) -> bool:
        """Delete the workflow, its versions, runs and node attempts; False when it was gone.

        Refused (:class:`WorkflowBusy`) while a run is running, checked in the same transaction
        with the workflow's row locked: a run starting meanwhile (:meth:`start_run` locks the
        row too) either comes first and is seen here, or finds the workflow gone."""
        async with self._db.write() as conn:
            locked = select(workflow.c.id).where(workflow.c.id == workflow_id).with_for_update()
            if (await conn.execute(locked)).first() is None:
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

    # -- runs -------------------------------------------------------------------------------------

    async def start_run(
        self,
        workflow_id: int,
        version: int,
        job_group: int,
        status: str,
        state: Mapping[str, Any],
        triggered_by: str | None,
        now_ms: int,
        starts: Sequence[NewNodeRun],
        *,
        params: Mapping[str, Any] | None = None,
        parent_run_id: int | None = None,
        parent_node_run_id: int | None = None,
    ) -> int:
        """Record a run and the node attempts its first step starts; returns the run id.
        :class:`WorkflowGone` when the workflow was deleted (see :meth:`delete`). A child run
        names its parent run and node attempt (unique: IntegrityError when the attempt has
        started one already)."""
        text = await _state_text(state)
        params_text = None if params is None else await _state_text(params)  # up to 64 KiB
        async with self._db.write() as conn:
            shared = select(workflow.c.id).where(workflow.c.id == workflow_id).with_for_update(read=True)
            if (await conn.execute(shared)).first() is None:
                raise WorkflowGone(f"workflow {workflow_id} does not exist")
            run_id = new_id(
                await conn.execute(
                    insert(workflow_run).values(
                        workflow_id=workflow_id,
                        version=version,
                        job_group=job_group,
                        status=status,
                        rev=0,
                        state=text,
                        triggered_by=triggered_by,
                        started_at=now_ms,
                        ended_at=now_ms if status != "running" else None,
                        params=params_text,
                        parent_run_id=parent_run_id,
                        parent_node_run_id=parent_node_run_id,
                    )
                )
            )
            await _insert_starts(conn, run_id, starts, now_ms)
        return run_id

    async def get_run(self, run_id: int) -> WorkflowRunRecord | None:
        async with self._db.read() as conn:
            row = (await conn.execute(select(workflow_run).where(workflow_run.c.id == run_id))).first()
        # Decoded in a worker thread, like the encoding (see _state_text).
        return None if row is None else await asyncio.to_thread(decoded_run, row)

    async def list_runs(
        self,
        *,
        workflow_id: int | None = None,
        group_ids: Collection[int] | None = None,
        status: str | None = None,
        offset: int = 0,
        limit: int = 50,
    ) -> tuple[builtins.list[WorkflowRunRecord], int]:
        """Runs (without their state document), newest first, with the total."""
        check_paging(offset, limit)
        where: builtins.list[Any] = []
        if workflow_id is not None:
            where.append(workflow_run.c.workflow_id == workflow_id)
        if group_ids is not None:
            where.append(workflow_run.c.job_group.in_(list(group_ids)))
        if status is not None:
            where.append(workflow_run.c.status == status)
        stmt = (
            select(*_RUN_LIST_COLUMNS)
            .where(*where)
            .order_by(workflow_run.c.id.desc())
            .offset(offset)
            .limit(limit)
        )
        async with self._db.read() as conn:
            rows = (await conn.execute(stmt)).all()
            total = int(
                (
                    await conn.execute(select(func.count()).select_from(workflow_run).where(*where))
                ).scalar_one()
            )
        return [_run(r, with_state=False) for r in rows], total

    async def running_run_ids(self, workflow_id: int) -> builtins.list[int]:
        stmt = select(workflow_run.c.id).where(
            workflow_run.c.workflow_id == workflow_id, workflow_run.c.status == "running"
        )
        async with self._db.read() as conn:
            return [int(i) for i in (await conn.execute(stmt)).scalars()]

    async def advance(
        self,
        run_id: int,
        rev: int,
        status: str,
        state: Mapping[str, Any],
        now_ms: int,
        starts: Sequence[NewNodeRun],
    ) -> bool:
        """Store a step computed from revision ``rev`` with the node attempts it starts, in one
        transaction; False (nothing stored) when the run is no longer at ``rev``."""
        text = await _state_text(state)
        async with self._db.write() as conn:
            result = await conn.execute(
                update(workflow_run)
                .where(workflow_run.c.id == run_id, workflow_run.c.rev == rev)
                .values(
                    rev=rev + 1,
                    status=status,
                    state=text,
                    ended_at=None if status == "running" else now_ms,
                )
            )
            if result.rowcount != 1:
                return False
            await _insert_starts(conn, run_id, starts, now_ms)
        return True

    # -- node attempts ----------------------------------------------------------------------------

    async def node_runs(self, run_id: int) -> builtins.list[NodeRunRecord]:
        stmt = (
            select(workflow_node_run)
            .where(workflow_node_run.c.workflow_run_id == run_id)
            .order_by(workflow_node_run.c.id)
        )
        async with self._db.read() as conn:
            return [node_run_of(r) for r in (await conn.execute(stmt)).all()]

    async def pending_node_runs(self, run_id: int) -> builtins.list[NodeRunRecord]:
        """The run's attempts stored and not yet claimed (read after each step, so it does not
        read every attempt of a large run)."""
        stmt = (
            select(workflow_node_run)
            .where(
                workflow_node_run.c.workflow_run_id == run_id,
                workflow_node_run.c.state == NodeRunState.PENDING,
            )
            .order_by(workflow_node_run.c.id)
        )
        async with self._db.read() as conn:
            return [node_run_of(r) for r in (await conn.execute(stmt)).all()]

    async def node_run(self, node_run_id: int) -> NodeRunRecord | None:
        async with self._db.read() as conn:
            row = (
                await conn.execute(select(workflow_node_run).where(workflow_node_run.c.id == node_run_id))
            ).first()
        return None if row is None else node_run_of(row)

    async def node_runs_of_logs(self, log_ids: Collection[int]) -> builtins.list[NodeRunRecord]:
        """The node attempts carried out by these job runs."""
        found: builtins.list[NodeRunRecord] = []
        async with self._db.read() as conn:
            for part in chunks(sorted(set(log_ids))):
                rows = await conn.execute(
                    select(workflow_node_run).where(workflow_node_run.c.log_id.in_(part))
                )
                found.extend(node_run_of(r) for r in rows.all())
        return found

    async def claim(
        self, node_run_id: int, node_id: str, now_ms: int, stale_before_ms: int | None = None
    ) -> bool:
        """Take a pending attempt to fire it (or, with ``stale_before_ms``, one another node
        claimed before that instant and never reported fired); True when this call got it."""
        cond = workflow_node_run.c.state == NodeRunState.PENDING
        if stale_before_ms is not None:
            cond = cond | (
                (workflow_node_run.c.state == NodeRunState.FIRING)
                & (workflow_node_run.c.claimed_at < stale_before_ms)
            )
        async with self._db.write() as conn:
            result = await conn.execute(
                update(workflow_node_run)
                .where(workflow_node_run.c.id == node_run_id, cond)
                .values(state=NodeRunState.FIRING, claimed_by=node_id, claimed_at=now_ms)
            )
            return result.rowcount == 1

    async def fired(self, node_run_id: int, log_id: int) -> bool:
        """The attempt's job run is ``log_id`` (firing -> running)."""
        async with self._db.write() as conn:
            result = await conn.execute(
                update(workflow_node_run)
                .where(
                    workflow_node_run.c.id == node_run_id, workflow_node_run.c.state == NodeRunState.FIRING
                )
                .values(state=NodeRunState.RUNNING, log_id=log_id)
            )
            return result.rowcount == 1

    async def ended(self, node_run_ids: Collection[int], now_ms: int) -> int:
        """Mark attempts ended (their result was applied to the run)."""
        changed = 0
        async with self._db.write() as conn:
            for part in chunks(sorted(set(node_run_ids))):
                result = await conn.execute(
                    update(workflow_node_run)
                    .where(workflow_node_run.c.id.in_(part), workflow_node_run.c.state != NodeRunState.ENDED)
                    .values(state=NodeRunState.ENDED, ended_at=now_ms)
                )
                changed += int(result.rowcount)
        return changed

    async def to_fire(self, now_ms: int, stale_ms: int, limit: int = 500) -> builtins.list[NodeRunRecord]:
        """Attempts nobody fired: pending ones, and those claimed more than ``stale_ms`` ago
        and not reported fired (their admin may have died)."""
        stmt = (
            select(workflow_node_run)
            .where(
                (workflow_node_run.c.state == NodeRunState.PENDING)
                | (
                    (workflow_node_run.c.state == NodeRunState.FIRING)
                    & (workflow_node_run.c.claimed_at < now_ms - stale_ms)
                )
            )
            .order_by(workflow_node_run.c.id)
            .limit(limit)
        )
        async with self._db.read() as conn:
            return [node_run_of(r) for r in (await conn.execute(stmt)).all()]

    async def log_of_node_run(self, node_run_id: int) -> int | None:
        """The job run recorded for this attempt, if any (read through the unique key)."""
        stmt = select(job_log.c.id).where(job_log.c.workflow_node_run_id == node_run_id)
        async with self._db.read() as conn:
            found = (await conn.execute(stmt)).scalar_one_or_none()
        return None if found is None else int(found)

    async def running_with_results(self, limit: int = 500) -> builtins.list[EndedNodeRun]:
        """Running attempts whose job run has ended (a result, or a failed trigger)."""
        stmt = (
            select(
                workflow_node_run,
                job_log.c.trigger_code,
                job_log.c.trigger_msg,
                job_log.c.handle_code,
                job_log.c.handle_msg,
            )
            .join(job_log, job_log.c.id == workflow_node_run.c.log_id)
            .where(
                workflow_node_run.c.state == NodeRunState.RUNNING,
                (job_log.c.handle_code != 0)
                | ((job_log.c.trigger_code != 0) & (job_log.c.trigger_code != 200)),
            )
            .order_by(workflow_node_run.c.id)
            .limit(limit)
        )
        async with self._db.read() as conn:
            rows = (await conn.execute(stmt)).all()
        out = []
        for row in rows:
            values = dict(row._asdict())
            extra = {k: values.pop(k) for k in ("trigger_code", "trigger_msg", "handle_code", "handle_msg")}
            out.append(
                EndedNodeRun(
                    NodeRunRecord(**values),
                    int(extra["trigger_code"]),
                    extra["trigger_msg"],
                    int(extra["handle_code"]),
                    extra["handle_msg"],
                )
            )
        return out


async def _insert_starts(
    conn: AsyncConnection, run_id: int, starts: Sequence[NewNodeRun], now_ms: int
) -> None:
    if not starts:
        return
    await conn.execute(
        insert(workflow_node_run),
        [
            {
                "workflow_run_id": run_id,
                "node_key": s.node_key,
                "item": s.item,
                "attempt": s.attempt,
                "job_id": s.job_id,
                "params": s.params,
                "timeout_s": s.timeout_s,
                "state": NodeRunState.PENDING,
                "created_at": now_ms,
                "workflow_id": s.workflow_id,
            }
            for s in starts
        ],
    )
