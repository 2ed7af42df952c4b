"""Parents and their sub-tasks stored: ``map`` calls (the first makes the run a parent),
sharded and broadcast fires, and the root task's own result."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from jobring.admin.store.base import chunks
from jobring.admin.store.errors import Conflict, NotFound
from jobring.admin.store.records import GroupGuard
from jobring.admin.store.subtasks.records import (
    KIND_BCAST,
    KIND_MAP,
    KIND_PART,
    KIND_PRE,
    KIND_SHARD,
    MESSAGE_MAX,
    ROOT_FAILED,
    ROOT_RUNNING,
    ROOT_SUCCEEDED,
    DistributedRun,
    JobSettings,
    NewSubTask,
    guard_sql,
)
from jobring.admin.store.subtasks.transitions import Transitions
from jobring.admin.store.tables import distributed_run, job_info, job_log, subtask
from jobring.core.distributed import MAX_SUBTASKS, ParentPhase, TaskState


class MapWrites(Transitions):
    """Map calls, sharded and broadcast parents, the root task's result."""

    async def _open_run(
        self,
        conn: AsyncConnection,
        run_id: int,
        guard: GroupGuard | None,
    ) -> tuple[int, int, str | None, JobSettings]:
        """(job id, group, parameter, job settings) of a running run the guard allows."""
        stmt = (
            select(
                job_log.c.job_id,
                job_log.c.job_group,
                job_log.c.executor_param,
                job_log.c.handle_code,
                job_info.c.failure_tolerance,
                job_info.c.executor_fail_retry_count,
            )
            .select_from(job_log.outerjoin(job_info, job_info.c.id == job_log.c.job_id))
            .where(job_log.c.id == run_id, *guard_sql(job_log.c.job_group, guard))
        )
        row = (await conn.execute(stmt)).first()
        if row is None:
            raise NotFound(f"no run {run_id} of the access token's executor groups")
        return (
            int(row.job_id),
            int(row.job_group),
            row.executor_param,
            JobSettings(row.failure_tolerance, int(row.executor_fail_retry_count or 0), int(row.handle_code)),
        )

    async def add_map_call(
        self,
        run_id: int,
        parent_key: str,
        tasks: Sequence[NewSubTask],
        reduce_task: str | None,
        now_ms: int,
        *,
        guard: GroupGuard | None = None,
    ) -> tuple[int, int]:
        """Store one ``map`` call's sub-tasks (those not stored yet: a repeated call creates
        nothing twice); the first call makes the run a parent. Returns (created, total).
        NotFound for a run the guard does not allow; Conflict once the run left ``mapping``
        or from a parent sub-task that is not running."""
        async with self._db.write(bulk=True) as conn:
            job_id, group, params, settings = await self._open_run(conn, run_id, guard)
            parent = await self._lock_parent(conn, run_id)
            if parent is None:
                if settings.handle_code != 0:
                    raise Conflict(f"run {run_id} has already ended")
                await self._new_parent(
                    conn, run_id, job_id, group, KIND_MAP, now_ms, phase=ParentPhase.MAPPING.value,
                    root_state=ROOT_RUNNING, params=params, reduce_task=reduce_task,
                    tolerance=settings.tolerance, max_retries=settings.max_retries,
                )
                parent = await self._lock_parent(conn, run_id)
                assert parent is not None
            if parent.phase != ParentPhase.MAPPING.value:
                raise Conflict(f"run {run_id} is {parent.phase}: it takes no more sub-tasks")
            if parent_key != "r":
                owner = (
                    await conn.execute(
                        select(subtask.c.status).where(
                            subtask.c.run_id == run_id, subtask.c.task_key == parent_key
                        )
                    )
                ).scalar()
                if owner != TaskState.RUNNING.value:
                    raise Conflict(f"sub-task {parent_key} of run {run_id} is not running")
            keys = [t.key for t in tasks]
            existing: set[str] = set()
            # A call is stored whole in one write, and every call with items has an item 0: no
            # row for the first key means none for any (the usual case, one indexed look-up; an
            # IN list of 1,000 keys is planned as a filter over the run's rows when the table
            # has no statistics, quadratic over a large map). A repeated call reads them all.
            first = (
                await conn.execute(
                    select(subtask.c.id).where(subtask.c.run_id == run_id, subtask.c.task_key == keys[0])
                )
            ).first() if keys else None
            for part in chunks(keys) if first is not None else []:
                existing.update(
                    (
                        await conn.execute(
                            select(subtask.c.task_key).where(
                                subtask.c.run_id == run_id, subtask.c.task_key.in_(part)
                            )
                        )
                    ).scalars()
                )
            new = [t for t in tasks if t.key not in existing]
            if parent.total + len(new) > MAX_SUBTASKS:
                raise Conflict(
                    f"run {run_id} would have {parent.total + len(new)} sub-tasks: "
                    f"MAX_SUBTASKS is {MAX_SUBTASKS}"
                )
            await self._insert(conn, run_id, group, new, now_ms)
            if new:
                await conn.execute(
                    update(distributed_run)
                    .where(distributed_run.c.run_id == run_id)
                    .values(total=distributed_run.c.total + len(new))
                )
            return len(new), parent.total + len(new)

    async def start_sharded(
        self,
        run_id: int,
        job_id: int,
        group: int,
        task_name: str,
        shard_count: int,
        params: str | None,
        tolerance: str | None,
        max_retries: int,
        now_ms: int,
    ) -> bool:
        """Make a just recorded run a sharded parent of ``shard_count`` sub-tasks (index/total);
        False when it already is one."""
        shards = [
            NewSubTask(f"s/{i}", task_name, KIND_SHARD, None, i, shard_count) for i in range(shard_count)
        ]
        return await self._start_parent(
            run_id, job_id, group, KIND_SHARD, shards, now_ms, phase=ParentPhase.MAPPING.value,
            params=params, tolerance=tolerance, max_retries=max_retries, total=shard_count,
        )

    async def start_broadcast(
        self,
        run_id: int,
        job_id: int,
        group: int,
        task_name: str,
        executors: Sequence[str],
        hooks: tuple[str | None, str | None],
        params: str | None,
        tolerance: str | None,
        max_retries: int,
        now_ms: int,
    ) -> bool:
        """Make a just recorded run a broadcast parent: one part per executor (pinned to it,
        index/total), and the hooks ``(pre, post)``; with a pre hook the parts wait for it
        (phase PRE). False when the run already is a parent."""
        pre, post = hooks
        count = len(executors)
        tasks = [
            NewSubTask(f"b/{i}", task_name, KIND_PART, None, i, count, executor=address)
            for i, address in enumerate(executors)
        ]
        if pre:
            tasks.append(NewSubTask(f"pre:{run_id}:1", pre, KIND_PRE))
        return await self._start_parent(
            run_id, job_id, group, KIND_BCAST, tasks, now_ms,
            phase=(ParentPhase.PRE if pre else ParentPhase.MAPPING).value, params=params,
            reduce_task=post, pre_task=pre, tolerance=tolerance, max_retries=max_retries, total=count,
        )

    async def _start_parent(
        self, run_id: int, job_id: int, group: int, kind: str, tasks: Sequence[NewSubTask], now_ms: int,
        **columns: object,
    ) -> bool:
        """A fired run made a parent whose root has nothing to run (its sub-tasks are stored
        with it); False when it already is one."""
        async with self._db.write() as conn:
            if await self._lock_parent(conn, run_id) is not None:
                return False
            await self._new_parent(conn, run_id, job_id, group, kind, now_ms, root_state=ROOT_SUCCEEDED,
                                   **columns)
            await self._insert(conn, run_id, group, tasks, now_ms)
            await self._join(conn, [run_id], now_ms)
            return True

    async def root_finished(
        self,
        results: Sequence[tuple[int, bool, str | None]],
        now_ms: int,
        *,
        guard: GroupGuard | None = None,
    ) -> tuple[set[int], list[DistributedRun]]:
        """The root task's results ``(run id, ok, message)``: returns the run ids that are
        parents (their result is the join's, not the root's) and the parents that ended now."""
        taken: set[int] = set()
        ended: list[DistributedRun] = []
        async with self._db.write() as conn:
            for run_id, ok, msg in sorted(results):
                parent = await self._lock_parent(conn, run_id)
                if parent is None or not (guard is None or guard.allows(parent.job_group)):
                    continue
                taken.add(run_id)
                if parent.root_state != ROOT_RUNNING:
                    continue
                await conn.execute(
                    update(distributed_run)
                    .where(distributed_run.c.run_id == run_id)
                    .values(
                        root_state=ROOT_SUCCEEDED if ok else ROOT_FAILED,
                        root_msg=(msg or "")[:MESSAGE_MAX] or None,
                    )
                )
                if not ok:
                    await self._cancel_rest(conn, run_id, now_ms)
            ended = await self._join(conn, sorted(taken), now_ms)
        return taken, ended

