"""Sub-task events applied (results, losses, cancels), the parents' results recorded, and
"retry only the failed sub-tasks"."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from sqlalchemy import ColumnElement, select, update

from jobring.admin.store.base import chunks, to_record
from jobring.admin.store.errors import NotFound
from jobring.admin.store.records import GroupGuard, Tally
from jobring.admin.store.subtasks.records import (
    KIND_PRE,
    KIND_REDUCE,
    RETRY_ROWS,
    ROOT_SUCCEEDED,
    DistributedRun,
    TaskUpdate,
)
from jobring.admin.store.subtasks.transitions import Transitions
from jobring.admin.store.tables import distributed_run, job_log, subtask
from jobring.core.distributed import ParentPhase, RetryRequested, TaskState, retry_attempt


class Results(Transitions):
    """Events applied to sub-tasks, and the parents' results."""

    async def apply(
        self,
        updates: Sequence[TaskUpdate],
        now_ms: int,
        *,
        guard: GroupGuard | None = None,
    ) -> tuple[int, list[DistributedRun]]:
        """Apply events to sub-tasks (the guard's groups only); returns how many rows changed
        and the parents that ended now."""
        changed, ended = 0, list[DistributedRun]()
        for part in chunks(updates, self._db.bulk_rows or len(updates) or 1):
            async with self._db.write(bulk=True) as conn:  # SQLite: short writes, several
                count, runs, done = await self._apply(conn, part, now_ms, guard)
                done += await self._join(conn, sorted(runs), now_ms)
            changed += count
            ended += done
        return changed, ended

    async def unrecorded(self, limit: int = 100) -> list[DistributedRun]:
        """Ended parents whose run has no result recorded yet."""
        async with self._db.read() as conn:
            rows = (
                await conn.execute(
                    select(distributed_run)
                    .where(
                        distributed_run.c.phase.in_([ParentPhase.SUCCEEDED.value, ParentPhase.FAILED.value]),
                        distributed_run.c.result_recorded == 0,
                    )
                    .order_by(distributed_run.c.run_id)
                    .limit(limit)
                )
            ).all()
        return [to_record(DistributedRun, r) for r in rows]

    async def mark_recorded(self, run_ids: Collection[int], attempts: dict[int, int]) -> None:
        async with self._db.write() as conn:
            for run_id in sorted(run_ids):
                await conn.execute(
                    update(distributed_run)
                    .where(distributed_run.c.run_id == run_id, distributed_run.c.attempt == attempts[run_id])
                    .values(result_recorded=1)
                )

    async def retry_failed(
        self, run_id: int, now_ms: int, *, tally: Tally | None = None
    ) -> tuple[int, list[DistributedRun]]:
        """ "Retry only the failed sub-tasks" of an ended parent: its failed and cancelled
        sub-tasks go back to pending, the join attempt increases, the run is open again.
        Returns (sub-tasks this call put back, parents that ended at once); ``tally`` counts
        them as they go. NotFound / JoinError.

        A large map has 100,000s of failed sub-tasks: one write would hold SQLite's lock for
        seconds. So the parent first becomes RETRYING under its new attempt (its sub-tasks
        are not dispatched, the join leaves it), its failed sub-tasks go back a short write
        at a time, and a last write opens it. A retry interrupted midway stays RETRYING; the
        same request again puts back the rest under the same attempt."""
        tally = tally if tally is not None else Tally()
        attempt = await self._start_retry(run_id)
        size = self._db.bulk_rows or RETRY_ROWS
        for status in (TaskState.FAILED, TaskState.CANCELLED):
            after: int | None = 0
            while after is not None:
                after = await self._retry_some(run_id, attempt, status, after, size, now_ms, tally)
        return tally.count, await self._end_retry(run_id, attempt, now_ms)

    async def _start_retry(self, run_id: int) -> int:
        """Make the ended parent RETRYING under its next attempt (or go on with its retry)."""
        async with self._db.write(bulk=True) as conn:
            parent = await self._lock_parent(conn, run_id)
            if parent is None:
                raise NotFound(f"run {run_id} has no sub-tasks")
            failed = (
                await conn.execute(select(subtask.c.id).where(*_retried(run_id, _RETRIED)).limit(1))
            ).first()
            attempt = retry_attempt(ParentPhase(parent.phase), parent.attempt, failed=failed is not None)
            if parent.phase == ParentPhase.RETRYING.value:
                return attempt
            await conn.execute(
                update(distributed_run)
                .where(distributed_run.c.run_id == run_id)
                .values(
                    phase=ParentPhase.RETRYING.value,
                    attempt=attempt,
                    result_recorded=0,
                    ended_at=None,
                    root_state=ROOT_SUCCEEDED,
                    result=None,
                )
            )
            # The run is open again: its next result is the new join's.
            await conn.execute(
                update(job_log)
                .where(job_log.c.id == run_id)
                .values(handle_code=0, handle_msg=None, handle_time=None, handle_time_ms=None, alarm_status=0)
            )
        return attempt

    async def _retry_some(
        self, run_id: int, attempt: int, status: TaskState, after: int, size: int, now_ms: int, tally: Tally
    ) -> int | None:
        """Put back up to ``size`` sub-tasks in ``status`` after id ``after``, in one write; the
        last id seen, or None when none is left (or the retry is no longer this attempt's:
        another request for it ended it)."""
        async with self._db.write(bulk=True) as conn:
            ids = list(
                (
                    await conn.execute(
                        select(subtask.c.id)
                        .where(*_retried(run_id, [status.value]), subtask.c.id > after)
                        .order_by(subtask.c.id)
                        .limit(size)
                    )
                ).scalars()
            )
            if not ids:
                return None
            rows = await self._lock_tasks(conn, ids, None)
            parent = await self._lock_parent(conn, run_id)
            if parent is None or (parent.phase, parent.attempt) != (ParentPhase.RETRYING.value, attempt):
                return None
            # Rows changed since they were read (another request for this retry) change nothing.
            retried = [TaskUpdate(i, RetryRequested()) for i in ids]
            changed, _, _ = await self._apply(conn, retried, now_ms, None, rows)
        tally.count += changed
        return int(ids[-1])

    async def _end_retry(self, run_id: int, attempt: int, now_ms: int) -> list[DistributedRun]:
        """Every failed sub-task is back: the parent opens (PRE when its pre hook runs again)
        and the join runs; returns the parents that ended at once."""
        async with self._db.write(bulk=True) as conn:
            parent = await self._lock_parent(conn, run_id)
            if parent is None or (parent.phase, parent.attempt) != (ParentPhase.RETRYING.value, attempt):
                return []  # another request for this retry opened it
            pre_again = (
                await conn.execute(
                    select(subtask.c.id)
                    .where(
                        subtask.c.run_id == run_id,
                        subtask.c.kind == KIND_PRE,
                        subtask.c.status == TaskState.PENDING.value,
                    )
                    .limit(1)
                )
            ).first()
            await conn.execute(
                update(distributed_run)
                .where(distributed_run.c.run_id == run_id)
                .values(phase=(ParentPhase.MAPPING if pre_again is None else ParentPhase.PRE).value)
            )
            return await self._join(conn, [run_id], now_ms)


_RETRIED = (TaskState.FAILED.value, TaskState.CANCELLED.value)


def _retried(run_id: int, statuses: Sequence[str]) -> list[ColumnElement[bool]]:
    """The run's children in ``statuses`` (not its reduce tasks: each attempt has its own)."""
    return [subtask.c.run_id == run_id, subtask.c.status.in_(statuses), subtask.c.kind != KIND_REDUCE]
