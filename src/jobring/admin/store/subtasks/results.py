"""Sub-task events applied (results, losses, cancels), the parents' results recorded, and
"retry only the failed sub-tasks"."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from sqlalchemy import select, update

from jobring.admin.store.base import chunks, to_record
from jobring.admin.store.errors import NotFound
from jobring.admin.store.records import GroupGuard
from jobring.admin.store.subtasks.records import (
    KIND_PRE,
    KIND_REDUCE,
    ROOT_SUCCEEDED,
    DistributedRun,
    TaskUpdate,
)
from jobring.admin.store.subtasks.transitions import Transitions
from jobring.admin.store.tables import distributed_run, job_log, subtask
from jobring.core.distributed import ParentPhase, RetryRequested, TaskState, plan_retry


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

    async def retry_failed(self, run_id: int, now_ms: int) -> tuple[int, list[DistributedRun]]:
        """ "Retry only the failed sub-tasks" of an ended parent: its failed and cancelled
        sub-tasks go back to pending, the join attempt increases, the run is open again.
        Returns (sub-tasks retried, parents that ended at once). NotFound / JoinError."""
        async with self._db.write(bulk=True) as conn:
            ids = list(
                (
                    await conn.execute(
                        select(subtask.c.id)
                        .where(
                            subtask.c.run_id == run_id,
                            subtask.c.kind != KIND_REDUCE,
                            subtask.c.status.in_([TaskState.FAILED.value, TaskState.CANCELLED.value]),
                        )
                        .order_by(subtask.c.id)
                    )
                ).scalars()
            )
            rows = await self._lock_tasks(conn, ids, None)
            parent = await self._lock_parent(conn, run_id)
            if parent is None:
                raise NotFound(f"run {run_id} has no sub-tasks")
            plan = plan_retry(
                ParentPhase(parent.phase), parent.attempt, {i: TaskState(rows[i].status) for i in rows}
            )
            pre_again = any(rows[i].kind == KIND_PRE for i in plan.tasks)
            await conn.execute(
                update(distributed_run)
                .where(distributed_run.c.run_id == run_id)
                .values(
                    phase=(ParentPhase.PRE if pre_again else ParentPhase.MAPPING).value,
                    attempt=plan.attempt,
                    result_recorded=0,
                    ended_at=None,
                    root_state=ROOT_SUCCEEDED,
                    result=None,
                )
            )
            await self._apply(conn, [TaskUpdate(i, RetryRequested()) for i in plan.tasks], now_ms, None)
            # The run is open again: its next result is the new join's.
            await conn.execute(
                update(job_log)
                .where(job_log.c.id == run_id)
                .values(handle_code=0, handle_msg=None, handle_time=None, handle_time_ms=None, alarm_status=0)
            )
            ended = await self._join(conn, [run_id], now_ms)
        return len(plan.tasks), ended

