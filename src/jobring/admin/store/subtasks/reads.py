"""Reading distributed runs (the run page, the reduce's input, callbacks) and forgetting
them with their run (retention)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import UTC, datetime

from sqlalchemy import ColumnElement, and_, delete, func, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from jobring.admin.store.base import Repository, chunks, to_record
from jobring.admin.store.engine import utc_naive
from jobring.admin.store.records import GroupGuard
from jobring.admin.store.subtasks.records import (
    HOOKS,
    ROOT_RUNNING,
    DistributedRun,
    SubTaskRow,
    guard_sql,
    subtask_row,
)
from jobring.admin.store.tables import distributed_run, job_log, subtask
from jobring.core.distributed import ParentPhase, TaskState
from jobring.core.enums import HandleCode

CLEARED_MSG = ("ended: its sub-tasks were deleted by a run-log clear (or retention) that did "
               "not get to the run itself; the same clear again removes it")
_FINAL = (ParentPhase.SUCCEEDED.value, ParentPhase.FAILED.value)


class Reads(Repository):
    """Parents and sub-tasks as the run page, the reduce and callbacks read them."""


    async def get(self, run_id: int) -> DistributedRun | None:
        async with self._db.read() as conn:
            row = (
                await conn.execute(select(distributed_run).where(distributed_run.c.run_id == run_id))
            ).first()
        return None if row is None else to_record(DistributedRun, row)

    async def get_many(self, run_ids: Collection[int]) -> dict[int, DistributedRun]:
        found: dict[int, DistributedRun] = {}
        async with self._db.read() as conn:
            for part in chunks(sorted(set(run_ids))):
                stmt = select(distributed_run).where(distributed_run.c.run_id.in_(part))
                for row in (await conn.execute(stmt)).all():
                    found[int(row.run_id)] = to_record(DistributedRun, row)
        return found

    async def retrying(self, after_run_id: int = 0, limit: int = 100) -> list[DistributedRun]:
        """Parents whose "retry the failed sub-tasks" is under way (or was interrupted), by
        run id after ``after_run_id`` (keyset)."""
        stmt = (select(distributed_run)
                .where(distributed_run.c.phase == ParentPhase.RETRYING.value,
                       distributed_run.c.run_id > after_run_id)
                .order_by(distributed_run.c.run_id).limit(limit))
        async with self._db.read() as conn:
            return [to_record(DistributedRun, r) for r in (await conn.execute(stmt)).all()]

    async def page(
        self, run_id: int, *, status: str | None = None, after_id: int = 0, limit: int = 100
    ) -> list[SubTaskRow]:
        """Sub-tasks of the run by id after ``after_id`` (keyset), optionally of one status."""
        where: list[ColumnElement[bool]] = [subtask.c.run_id == run_id, subtask.c.id > after_id]
        if status is not None:
            where.append(subtask.c.status == status)
        async with self._db.read() as conn:
            rows = (
                await conn.execute(select(subtask).where(*where).order_by(subtask.c.id).limit(limit))
            ).all()
        return [subtask_row(r) for r in rows]

    async def results(
        self, run_id: int, *, after_id: int = 0, limit: int = 1_000, guard: GroupGuard | None = None
    ) -> list[tuple[int, str, str | None]]:
        """(id, key, result JSON) of the run's succeeded children, by id after ``after_id``."""
        async with self._db.read() as conn:
            rows = (
                await conn.execute(
                    select(subtask.c.id, subtask.c.task_key, subtask.c.result)
                    .where(
                        subtask.c.run_id == run_id,
                        subtask.c.id > after_id,
                        subtask.c.kind.not_in(HOOKS),
                        subtask.c.status == TaskState.SUCCEEDED.value,
                        *guard_sql(subtask.c.job_group, guard),
                    )
                    .order_by(subtask.c.id)
                    .limit(limit)
                )
            ).all()
        return [(int(r.id), r.task_key, r.result) for r in rows]

    async def counts(self, run_id: int) -> dict[str, int]:
        """Sub-tasks of the run by status (children and reduce tasks)."""
        async with self._db.read() as conn:
            rows = (
                await conn.execute(
                    select(subtask.c.status, func.count())
                    .where(subtask.c.run_id == run_id)
                    .group_by(subtask.c.status)
                )
            ).all()
        return {str(s): int(n) for s, n in rows}


def lost_parents_condition() -> ColumnElement[bool]:
    """Runs whose root task ended and that wait for their join: never "lost" with the
    executor that ran the root (their result is the join's)."""
    waiting = select(distributed_run.c.run_id).where(distributed_run.c.root_state != ROOT_RUNNING)
    return and_(job_log.c.id.not_in(waiting))


async def parents_among(conn: AsyncConnection, run_ids: Sequence[int]) -> list[int]:
    """Those of ``run_ids`` that are distributed parents (only they have sub-tasks)."""
    stmt = select(distributed_run.c.run_id).where(distributed_run.c.run_id.in_(list(run_ids)))
    return [int(i) for i in (await conn.execute(stmt)).scalars()]


async def open_among(conn: AsyncConnection, run_ids: Sequence[int]) -> list[int]:
    """Those of the parents ``run_ids`` that have not ended."""
    stmt = select(distributed_run.c.run_id).where(
        distributed_run.c.run_id.in_(list(run_ids)), distributed_run.c.phase.not_in(_FINAL))
    return sorted(int(i) for i in (await conn.execute(stmt)).scalars())


async def delete_some_children(
    conn: AsyncConnection, run_ids: Sequence[int], runs: Sequence[ColumnElement[bool]] | None, limit: int
) -> int:
    """Retention, a bounded part at a time: delete up to ``limit`` sub-tasks of those of
    ``run_ids`` that are in the run log and match ``runs`` (conditions on it), or with
    ``runs`` None of those no longer in the run log. Returns how many it found: fewer than
    ``limit``, none are left."""
    ids = list(run_ids)
    logged = select(job_log.c.id).where(job_log.c.id.in_(ids), *(runs or ()))
    of_runs = subtask.c.run_id.not_in(logged) if runs is None else subtask.c.run_id.in_(logged)
    # No order: a sort by id would read every child of the runs at each part.
    found = list((await conn.execute(
        select(subtask.c.id).where(subtask.c.run_id.in_(ids), of_runs).limit(limit)
    )).scalars())
    if found:
        await conn.execute(delete(subtask).where(subtask.c.id.in_(found), of_runs))
    return len(found)


async def end_parents_of_deleted(
    conn: AsyncConnection, run_ids: Sequence[int], runs: Sequence[ColumnElement[bool]], now: datetime
) -> int:
    """Retention, before their sub-tasks are deleted: those of ``run_ids`` in the run log
    matching ``runs`` that are still open end failed, their result written on the run
    (neither retried nor alarmed: it is being deleted). Their sub-tasks go before their run,
    in several writes: a delete interrupted in between would otherwise leave a parent waiting
    for ever for sub-tasks that are gone. Returns how many ended (two rows changed each)."""
    logged = select(job_log.c.id).where(job_log.c.id.in_(list(run_ids)), *runs)
    open_ = select(distributed_run.c.run_id).where(
        distributed_run.c.run_id.in_(logged), distributed_run.c.phase.not_in(_FINAL))
    ids = [int(i) for i in (await conn.execute(open_)).scalars()]
    if not ids:
        return 0
    now_ms = int(now.replace(tzinfo=now.tzinfo or UTC).timestamp() * 1000)
    await conn.execute(
        update(job_log)
        .where(job_log.c.id.in_(ids), job_log.c.handle_code == 0)
        .values(handle_code=int(HandleCode.FAIL), handle_msg=CLEARED_MSG, handle_time=utc_naive(now),
                handle_time_ms=now_ms, alarm_status=1)
    )
    ended = await conn.execute(
        update(distributed_run)
        .where(distributed_run.c.run_id.in_(ids), distributed_run.c.phase.not_in(_FINAL))
        .values(phase=ParentPhase.FAILED.value, root_msg=CLEARED_MSG, ended_at=now_ms, result_recorded=1)
    )
    return int(ended.rowcount)


async def delete_parents_of_deleted(conn: AsyncConnection, run_ids: Sequence[int]) -> list[int]:
    """Retention: the join state of those of ``run_ids`` no longer in the run log (inside the
    write that deleted them). Returns the parents among ``run_ids``: their sub-tasks left
    (a map call that raced the delete) are deleted next (:func:`delete_some_children`)."""
    parents = await parents_among(conn, run_ids)
    if parents:
        still = select(job_log.c.id).where(job_log.c.id.in_(parents))
        await conn.execute(
            delete(distributed_run).where(
                distributed_run.c.run_id.in_(parents), distributed_run.c.run_id.not_in(still)
            )
        )
    return parents
