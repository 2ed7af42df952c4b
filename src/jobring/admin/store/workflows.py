"""Workflows (``jobring_workflow*``): definitions with their versions, runs, node attempts.

A run's state is one JSON document advanced by compare-and-set on ``rev``
(:meth:`WorkflowRepository.advance`): the node attempts a step starts are inserted in the same
transaction, so a step and its start commands are stored together or not at all, and of two
admins that computed a step from the same revision only one stores it. Definitions are in
:mod:`~jobring.admin.store.workflow_definitions`, node attempts in
:mod:`~jobring.admin.store.workflow_attempts`, the records in
:mod:`~jobring.admin.store.workflow_records`.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from sqlalchemy import bindparam, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from jobring.admin.store.base import check_paging, chunks, new_id, to_record
from jobring.admin.store.records import JobInfo
from jobring.admin.store.tables import job_info, workflow_run
from jobring.admin.store.workflow_attempts import (
    NodeAttempts,
    advance_with_claimed_starts,
    claimed_attempts,
    insert_claimed_returning,
    insert_fire_rows,
    insert_starts,
    pending_attempts,
)
from jobring.admin.store.workflow_definitions import WorkflowDefinitions, lock_workflow_row
from jobring.admin.store.workflow_records import (
    MANAGED_BY_CODE,
    SMALL_STATE_CHARS,
    EndedNodeRun,
    FireRows,
    NewNodeRun,
    NodeRunRecord,
    NodeRunState,
    StoredStep,
    Withdrawal,
    WorkflowBusy,
    WorkflowGone,
    WorkflowNameTaken,
    WorkflowRecord,
    WorkflowRunRecord,
    decoded_run,
    dumps,
    listed_run,
    node_run_of,
)

__all__ = [
    "MANAGED_BY_CODE",
    "EndedNodeRun",
    "FireRows",
    "NewNodeRun",
    "NodeRunRecord",
    "NodeRunState",
    "StoredStep",
    "WorkflowBusy",
    "WorkflowGone",
    "WorkflowNameTaken",
    "WorkflowRecord",
    "WorkflowRepository",
    "WorkflowRunRecord",
    "Withdrawal",
    "decoded_run",
    "node_run_of",
]

_RUN_LIST_COLUMNS = [c for c in workflow_run.c if c.name not in ("state", "params")]


async def _state_text(doc: Mapping[str, Any] | str) -> str:
    # A run's state reaches megabytes (10,000 fan-out items with their messages): encoded in a
    # worker thread so the event loop keeps serving, and before the write transaction opens.
    # (The driver passes its states encoded already, small ones on the loop.)
    return doc if isinstance(doc, str) else await asyncio.to_thread(dumps, doc)


# Read before every node's fire: built once (see logs._TARGETS).
_JOBS = select(job_info).where(job_info.c.id.in_(bindparam("ids", expanding=True)))


async def _jobs_of(conn: AsyncConnection, attempts: Sequence[NodeRunRecord]) -> dict[int, JobInfo]:
    """The jobs the attempts run (a sub-workflow attempt runs none)."""
    jobs: dict[int, JobInfo] = {}
    for part in chunks(sorted({a.job_id for a in attempts if a.workflow_id is None})):
        rows = (await conn.execute(_JOBS, {"ids": part})).all()
        jobs.update({r.id: to_record(JobInfo, r) for r in rows})
    return jobs


class WorkflowRepository(WorkflowDefinitions, NodeAttempts):
    """Workflow definitions, runs and node attempts."""

    async def start_run(
        self,
        workflow_id: int,
        version: int,
        job_group: int,
        status: str,
        state: Mapping[str, Any] | str,
        triggered_by: str | None,
        now_ms: int,
        starts: Sequence[NewNodeRun],
        *,
        params: Mapping[str, Any] | None = None,
        parent_run_id: int | None = None,
        parent_node_run_id: int | None = None,
        alone: bool = False,
    ) -> int:
        """Record a run and the node attempts its first step starts; returns the run id.
        :class:`WorkflowGone` when the workflow was deleted (see :meth:`delete`) or is no
        longer in ``job_group`` (moved since it was read: the run would be recorded under a
        group the workflow has left). A child run names its parent run and node attempt
        (unique: IntegrityError when the attempt has started one already). ``alone``: only
        when no run of the workflow is running (:class:`WorkflowBusy` naming them otherwise),
        decided under the workflow row's exclusive lock, so of two such starts at once one
        waits for the other and finds its run."""
        text = await _state_text(state)
        params_text = None if params is None else await _state_text(params)  # up to 64 KiB
        async with self._db.write() as conn:
            if not await lock_workflow_row(conn, workflow_id, group=job_group, shared=not alone):
                raise WorkflowGone(f"workflow {workflow_id} does not exist in group {job_group}")
            if alone:
                # A plain read after the lock: PostgreSQL reads as of this statement, and
                # MariaDB's REPEATABLE READ takes its snapshot at the first plain read, so a run
                # committed by the start this one waited for is seen (no plain read may come
                # before the lock in this transaction).
                going = select(workflow_run.c.id).where(
                    workflow_run.c.workflow_id == workflow_id, workflow_run.c.status == "running"
                ).order_by(workflow_run.c.id).limit(5)
                if running := [int(i) for i in (await conn.execute(going)).scalars()]:
                    raise WorkflowBusy(workflow_id, running)
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
            await insert_starts(conn, run_id, starts, now_ms)
        return run_id

    async def get_run(self, run_id: int) -> WorkflowRunRecord | None:
        async with self._db.read() as conn:
            row = (await conn.execute(select(workflow_run).where(workflow_run.c.id == run_id))).first()
        if row is None:
            return None
        if len(row.state or "") + len(row.params or "") <= SMALL_STATE_CHARS:
            return decoded_run(row)
        return await asyncio.to_thread(decoded_run, row)  # like the encoding (see _state_text)

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
        return [listed_run(r) for r in rows], total

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
        state: Mapping[str, Any] | str,
        now_ms: int,
        starts: Sequence[NewNodeRun],
        *,
        claimed_by: str | None = None,
        fire_rows: FireRows | None = None,
    ) -> StoredStep | None:
        """Store a step computed from revision ``rev`` with the node attempts it starts, in one
        transaction; None (nothing stored) when the run is no longer at ``rev``. Returns the
        run's pending attempts and their jobs (the driver fires them without reading them
        again); ``claimed_by``: the attempts are inserted claimed by that node (as
        :meth:`claim` would), and those are returned (where the database has INSERT ...
        RETURNING, the step's attempts as that statement returned them). The jobs are read
        in the same transaction (on PostgreSQL with ``claimed_by``, by the step's one
        statement). ``fire_rows`` (with ``claimed_by``, where INSERT ... RETURNING exists): the
        job attempts' run-log rows are recorded in the same write (see :class:`FireRows`;
        without it none is, and the trigger records them as it fires)."""
        text = await _state_text(state)
        caps = await self._db.capabilities()
        returning = claimed_by is not None and caps.insert_returning
        if returning and starts and caps.backend == "postgresql":
            assert claimed_by is not None
            return await self._advance_in_one(run_id, rev, status, text, now_ms, starts, claimed_by,
                                              fire_rows)
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
                return None
            if not starts:
                return StoredStep([], {})
            if claimed_by is None:
                await insert_starts(conn, run_id, starts, now_ms)
                attempts = await pending_attempts(conn, run_id)
            elif returning:  # the attempts as inserted: no statement to read them back
                attempts = await insert_claimed_returning(conn, run_id, starts, now_ms, claimed_by)
            else:
                await insert_starts(conn, run_id, starts, now_ms, claimed_by)
                attempts = await claimed_attempts(conn, run_id, claimed_by, now_ms)
            jobs = await _jobs_of(conn, attempts)
            if fire_rows is None or not returning:
                return StoredStep(attempts, jobs)
            log_ids = await insert_fire_rows(conn, fire_rows, attempts, jobs)
        return StoredStep(attempts, jobs, log_ids, fire_rows.trigger_time_ms)

    async def _advance_in_one(
        self, run_id: int, rev: int, status: str, text: str, now_ms: int, starts: Sequence[NewNodeRun],
        claimed_by: str, fire_rows: FireRows | None,
    ) -> StoredStep | None:
        # PostgreSQL: the step, its claimed attempts, their jobs and their run-log rows in one
        # statement without BEGIN and COMMIT: one round trip instead of five (a read of the
        # jobs after it was another connection and round trip, 1-2.5 ms of each node start;
        # the row's INSERT at the fire another 1.5-2.5).
        values = {"status": status, "state": text, "ended_at": None if status == "running" else now_ms}
        async with self._db.write(alone=True) as conn:
            return await advance_with_claimed_starts(conn, run_id, rev, values, starts, now_ms, claimed_by,
                                                     fire_rows)
