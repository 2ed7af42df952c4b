"""Distributed runs: a parent run's join state and its sub-tasks (``jobring_distributed_run``,
``jobring_subtask``; the model is :mod:`jobring.core.distributed`).

Every transition is applied inside one write transaction that locks the sub-task rows (in id
order) and then their parents (in run order), so two admin nodes handling the same result, or
a result and a loss of the same attempt, change a row once: the pure ``apply_event`` decides
on the locked row, and only the rows it changed move the parent's counters. The join runs in
the same write: a parent whose children are all final moves out of ``mapping`` there, and
the reduce task is inserted there under its unique key, so it starts exactly once.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import ColumnElement, and_, delete, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from jobring.admin.store.base import Repository, chunks, to_record, update_rows
from jobring.admin.store.errors import Conflict, NotFound
from jobring.admin.store.records import GroupGuard
from jobring.admin.store.tables import distributed_run, job_info, job_log, scheduler_node, subtask
from jobring.core.distributed import (
    MAX_SUBTASKS,
    CancelRequested,
    Dispatched,
    FailureTolerance,
    Finished,
    JoinError,
    JoinOutcome,
    Lost,
    ParentPhase,
    Progress,
    RetryRequested,
    Task,
    TaskPolicy,
    TaskState,
    after_reduce,
    apply_event,
    executors_outcome,
    join,
    plan_retry,
    reduce_key,
)
from jobring.core.distributed.subtasks import TaskEvent

__all__ = [
    "KIND_BCAST",
    "KIND_PART",
    "KIND_PRE",
    "ClaimedTask",
    "DistributedRepository",
    "DistributedRun",
    "NewSubTask",
    "SubTaskRow",
    "TaskUpdate",
]

ROOT_RUNNING, ROOT_SUCCEEDED, ROOT_FAILED = "running", "succeeded", "failed"
KIND_MAP, KIND_SHARD, KIND_REDUCE = "map", "shard", "reduce"
# A broadcast parent (kind KIND_BCAST) has one part per executor (pinned to it: the row's
# executor_address is set when stored), a pre hook task and a post hook task (KIND_REDUCE,
# its name in reduce_task). Hook tasks are not counted in the parent's progress.
KIND_BCAST, KIND_PART, KIND_PRE = "bcast", "part", "pre"
_HOOKS = (KIND_PRE, KIND_REDUCE)
_MESSAGE_MAX = 2_000
# (succeeded, failed, running) a child in each state counts for (core.distributed.progress_of).
_COUNTS = {
    TaskState.PENDING: (0, 0, 0),
    TaskState.RUNNING: (0, 0, 1),
    TaskState.SUCCEEDED: (1, 0, 0),
    TaskState.FAILED: (0, 1, 0),
    TaskState.CANCELLED: (0, 1, 0),
}
_LOCK_CHUNK = 500


@dataclass(frozen=True, slots=True)
class DistributedRun:
    run_id: int
    job_id: int
    job_group: int
    kind: str
    phase: str
    attempt: int
    root_state: str
    root_msg: str | None
    params: str | None
    reduce_task: str | None
    tolerance: str | None
    max_retries: int
    total: int
    succeeded: int
    failed: int
    running: int
    result: str | None
    result_recorded: int
    created_at: int
    ended_at: int | None
    pre_task: str | None = None

    @property
    def progress(self) -> Progress:
        return Progress(self.total, self.succeeded, self.failed, self.running)


@dataclass(frozen=True, slots=True)
class SubTaskRow:
    id: int
    run_id: int
    job_group: int
    task_key: str
    task_name: str
    kind: str
    shard_index: int
    shard_total: int
    item: str | None
    status: str
    attempt: int
    failures: int
    losses: int
    executor_address: str | None
    result: str | None
    message: str | None
    created_at: int
    dispatched_at: int | None
    ended_at: int | None
    dispatched_by: str | None = None  # the admin node that claimed it (while running)
    log: str | None = None  # its handler's last log lines (the executor keeps 4 KiB)


@dataclass(frozen=True, slots=True)
class NewSubTask:
    key: str
    task_name: str
    kind: str = KIND_MAP
    item: str | None = None
    shard_index: int = 0
    shard_total: int = 0
    executor: str | None = None  # a broadcast part: the executor it must run on


@dataclass(frozen=True, slots=True)
class ClaimedTask:
    """A sub-task claimed for one dispatch: ``attempt`` is the attempt it was claimed as."""

    id: int
    run_id: int
    attempt: int
    key: str
    task_name: str
    kind: str
    item: str | None
    shard_index: int
    shard_total: int
    executor_address: str


@dataclass(frozen=True, slots=True)
class TaskUpdate:
    """An event for sub-task ``id``; ``result`` (JSON) and ``message`` go with a Finished."""

    id: int
    event: TaskEvent
    result: str | None = None
    message: str | None = None
    node: str | None = None  # with Dispatched: the admin node that claims it
    log: str | None = None  # with Finished: the handler's last log lines


def _guard_sql(column: Any, guard: GroupGuard | None) -> list[ColumnElement[bool]]:
    if guard is None:
        return []
    if guard.only is not None:
        return [column.in_(sorted(guard.only))]
    return [column.not_in(sorted(guard.excluded))] if guard.excluded else []


def _task(row: SubTaskRow) -> Task:
    return Task(TaskState(row.status), row.attempt, row.executor_address, row.failures, row.losses)


def _policy(kind: str, max_retries: int) -> TaskPolicy:
    """Hooks are not retried (re-dispatched when lost); a broadcast part belongs to its
    executor: lost with it, it fails (not moved)."""
    if kind in _HOOKS:
        return TaskPolicy(max_retries=0)
    if kind == KIND_PART:
        return TaskPolicy(max_retries=max_retries, max_redispatches=0)
    return TaskPolicy(max_retries=max_retries)


def _tolerance(text: str | None) -> FailureTolerance:
    if not text:
        return FailureTolerance()
    try:
        return FailureTolerance.parse(text)
    except JoinError:
        return FailureTolerance()  # validated when the job is saved; an old value allows none


class DistributedRepository(Repository):
    """Parent runs' join state and their sub-tasks."""

    # --- parents ----------------------------------------------------------------------------

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

    async def _lock_parent(self, conn: AsyncConnection, run_id: int) -> DistributedRun | None:
        stmt = select(distributed_run).where(distributed_run.c.run_id == run_id).with_for_update()
        row = (await conn.execute(stmt)).first()
        return None if row is None else to_record(DistributedRun, row)

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
            .where(job_log.c.id == run_id, *_guard_sql(job_log.c.job_group, guard))
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
        async with self._db.write() as conn:
            job_id, group, params, settings = await self._open_run(conn, run_id, guard)
            parent = await self._lock_parent(conn, run_id)
            if parent is None:
                if settings.handle_code != 0:
                    raise Conflict(f"run {run_id} has already ended")
                await conn.execute(
                    insert(distributed_run).values(
                        run_id=run_id,
                        job_id=job_id,
                        job_group=group,
                        kind=KIND_MAP,
                        phase=ParentPhase.MAPPING.value,
                        attempt=1,
                        root_state=ROOT_RUNNING,
                        params=params,
                        reduce_task=reduce_task,
                        tolerance=settings.tolerance,
                        max_retries=settings.max_retries,
                        created_at=now_ms,
                    )
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
        async with self._db.write() as conn:
            if await self._lock_parent(conn, run_id) is not None:
                return False
            await conn.execute(
                insert(distributed_run).values(
                    run_id=run_id,
                    job_id=job_id,
                    job_group=group,
                    kind=KIND_SHARD,
                    phase=ParentPhase.MAPPING.value,
                    attempt=1,
                    root_state=ROOT_SUCCEEDED,
                    params=params,
                    tolerance=tolerance,
                    max_retries=max_retries,
                    total=shard_count,
                    created_at=now_ms,
                )
            )
            shards = [
                NewSubTask(f"s/{i}", task_name, KIND_SHARD, None, i, shard_count) for i in range(shard_count)
            ]
            await self._insert(conn, run_id, group, shards, now_ms)
            await self._join(conn, [run_id], now_ms)
            return True

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
        async with self._db.write() as conn:
            if await self._lock_parent(conn, run_id) is not None:
                return False
            await conn.execute(
                insert(distributed_run).values(
                    run_id=run_id,
                    job_id=job_id,
                    job_group=group,
                    kind=KIND_BCAST,
                    phase=(ParentPhase.PRE if pre else ParentPhase.MAPPING).value,
                    attempt=1,
                    root_state=ROOT_SUCCEEDED,
                    params=params,
                    reduce_task=post,
                    pre_task=pre,
                    tolerance=tolerance,
                    max_retries=max_retries,
                    total=len(executors),
                    created_at=now_ms,
                )
            )
            count = len(executors)
            tasks = [
                NewSubTask(f"b/{i}", task_name, KIND_PART, None, i, count, executor=address)
                for i, address in enumerate(executors)
            ]
            if pre:
                tasks.append(NewSubTask(f"pre:{run_id}:1", pre, KIND_PRE))
            await self._insert(conn, run_id, group, tasks, now_ms)
            await self._join(conn, [run_id], now_ms)
            return True

    @staticmethod
    async def _insert(
        conn: AsyncConnection, run_id: int, group: int, tasks: Sequence[NewSubTask], now_ms: int
    ) -> None:
        rows = [
            {
                "run_id": run_id,
                "job_group": group,
                "task_key": t.key,
                "task_name": t.task_name,
                "kind": t.kind,
                "shard_index": t.shard_index,
                "shard_total": t.shard_total,
                "item": t.item,
                "status": TaskState.PENDING.value,
                "attempt": 0,
                "failures": 0,
                "losses": 0,
                "created_at": now_ms,
                "executor_address": t.executor,
            }
            for t in tasks
        ]
        for part in chunks(rows):
            await conn.execute(insert(subtask), list(part))

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
                        root_msg=(msg or "")[:_MESSAGE_MAX] or None,
                    )
                )
                if not ok:
                    await self._cancel_rest(conn, run_id, now_ms)
            ended = await self._join(conn, sorted(taken), now_ms)
        return taken, ended

    # --- sub-task transitions ---------------------------------------------------------------

    async def apply(
        self,
        updates: Sequence[TaskUpdate],
        now_ms: int,
        *,
        guard: GroupGuard | None = None,
    ) -> tuple[int, list[DistributedRun]]:
        """Apply events to sub-tasks (the guard's groups only); returns how many rows changed
        and the parents that ended now."""
        if not updates:
            return 0, []
        async with self._db.write() as conn:
            changed, runs, ended = await self._apply(conn, updates, now_ms, guard)
            ended += await self._join(conn, sorted(runs), now_ms)
        return changed, ended

    async def _apply(
        self,
        conn: AsyncConnection,
        updates: Sequence[TaskUpdate],
        now_ms: int,
        guard: GroupGuard | None,
        locked: dict[int, SubTaskRow] | None = None,
    ) -> tuple[int, set[int], list[DistributedRun]]:
        """(rows changed, parents whose progress changed, parents their reduce task ended).
        ``locked``: the rows, already locked by the caller in this write."""
        rows = locked if locked is not None else await self._lock_tasks(conn, [u.id for u in updates], guard)
        parents = {
            run_id: await self._lock_parent(conn, run_id)
            for run_id in sorted({r.run_id for r in rows.values()})
        }
        writes: dict[int, dict[str, Any]] = {}
        deltas: dict[int, tuple[int, int, int]] = {}
        reduced: dict[int, tuple[bool, str | None, str | None]] = {}
        pre_done: dict[int, tuple[bool, str | None, str | None]] = {}
        for u in updates:
            row = rows.get(u.id)
            parent = parents.get(row.run_id) if row is not None else None
            if row is None or parent is None:
                continue
            new = apply_event(_task(row), u.event, _policy(row.kind, parent.max_retries))
            if new is None:
                continue
            values = _values(row, new, u, now_ms)
            writes[row.id] = values
            if row.kind in _HOOKS:
                if new.state.is_final:
                    done = reduced if row.kind == KIND_REDUCE else pre_done
                    done[row.run_id] = (new.state is TaskState.SUCCEEDED, u.result, u.message)
            else:
                (s0, f0, r0), (s1, f1, r1) = _COUNTS[TaskState(row.status)], _COUNTS[new.state]
                ds, df, dr = deltas.get(row.run_id, (0, 0, 0))
                deltas[row.run_id] = (ds + s1 - s0, df + f1 - f0, dr + r1 - r0)
            rows[row.id] = replace(
                row,
                status=values["status"],
                attempt=values["attempt"],
                failures=values["failures"],
                losses=values["losses"],
                executor_address=values["executor_address"],
            )
        if writes:
            await update_rows(conn, subtask, writes)
        for run_id, (ds, df, dr) in deltas.items():
            if ds or df or dr:
                await conn.execute(
                    update(distributed_run)
                    .where(distributed_run.c.run_id == run_id)
                    .values(
                        succeeded=distributed_run.c.succeeded + ds,
                        failed=distributed_run.c.failed + df,
                        running=distributed_run.c.running + dr,
                    )
                )
        ended, moved = await self._hooks_ended(conn, parents, pre_done, reduced, now_ms)
        return len(writes), moved | set(deltas), ended

    async def _hooks_ended(
        self,
        conn: AsyncConnection,
        parents: dict[int, DistributedRun | None],
        pre_done: dict[int, tuple[bool, str | None, str | None]],
        reduced: dict[int, tuple[bool, str | None, str | None]],
        now_ms: int,
    ) -> tuple[list[DistributedRun], set[int]]:
        """Parents whose pre hook or reduce / post hook task is final: (ended, to join)."""
        ended: list[DistributedRun] = []
        moved: set[int] = set()
        for run_id, (ok, result, msg) in pre_done.items():
            failed = await self._pre_ended(conn, run_id, ok, result, msg, now_ms)
            if failed is not None:
                ended.append(failed)
            else:
                moved.add(run_id)
        for run_id, (ok, result, msg) in reduced.items():
            parent = parents[run_id]
            assert parent is not None
            phase = after_reduce(ParentPhase(parent.phase), ok)
            if parent.kind == KIND_BCAST and phase is ParentPhase.SUCCEEDED:
                # The post hook succeeded; the run's outcome is still the executors' parts'.
                outcome, _ = executors_outcome(parent.progress, _tolerance(parent.tolerance))
                phase = ParentPhase(outcome.value)
            if phase.value != parent.phase:
                root_msg = msg if not ok else parent.root_msg
                await conn.execute(
                    update(distributed_run)
                    .where(distributed_run.c.run_id == run_id)
                    .values(phase=phase.value, result=result, root_msg=root_msg, ended_at=now_ms)
                )
                ended.append(
                    replace(parent, phase=phase.value, result=result, root_msg=root_msg, ended_at=now_ms)
                )
        return ended, moved

    async def _pre_ended(
        self, conn: AsyncConnection, run_id: int, ok: bool, result: str | None, msg: str | None, now_ms: int
    ) -> DistributedRun | None:
        """A broadcast's pre hook is final: on success the parts may run (they get its result
        as their item) and the join may go on; on failure the run fails (returned), its parts
        cancelled."""
        if ok:
            moved = await conn.execute(
                update(distributed_run)
                .where(distributed_run.c.run_id == run_id, distributed_run.c.phase == ParentPhase.PRE.value)
                .values(phase=ParentPhase.MAPPING.value)
            )
            if moved.rowcount == 1 and result is not None:
                await conn.execute(
                    update(subtask)
                    .where(subtask.c.run_id == run_id, subtask.c.kind == KIND_PART)
                    .values(item=result)
                )
            return None
        failed = await conn.execute(
            update(distributed_run)
            .where(distributed_run.c.run_id == run_id, distributed_run.c.phase == ParentPhase.PRE.value)
            .values(
                phase=ParentPhase.FAILED.value,
                root_state=ROOT_FAILED,
                root_msg=f"pre hook failed: {msg or ''}"[:_MESSAGE_MAX],
                ended_at=now_ms,
            )
        )
        if failed.rowcount != 1:
            return None
        await self._cancel_rest(conn, run_id, now_ms)
        return await self._lock_parent(conn, run_id)

    @staticmethod
    async def _lock_tasks(
        conn: AsyncConnection, ids: Sequence[int], guard: GroupGuard | None
    ) -> dict[int, SubTaskRow]:
        rows: dict[int, SubTaskRow] = {}
        for part in chunks(sorted(set(ids)), _LOCK_CHUNK):
            stmt = (
                select(subtask)
                .where(subtask.c.id.in_(part), *_guard_sql(subtask.c.job_group, guard))
                .order_by(subtask.c.id)
                .with_for_update()
            )
            for row in (await conn.execute(stmt)).all():
                rows[int(row.id)] = to_record(SubTaskRow, row)
        return rows

    async def _cancel_rest(self, conn: AsyncConnection, run_id: int, now_ms: int) -> None:
        ids = list(
            (
                await conn.execute(
                    select(subtask.c.id).where(
                        subtask.c.run_id == run_id,
                        subtask.c.status.in_([TaskState.PENDING.value, TaskState.RUNNING.value]),
                    )
                )
            ).scalars()
        )
        if ids:
            await self._apply(conn, [TaskUpdate(int(i), CancelRequested()) for i in ids], now_ms, None)

    async def _join(self, conn: AsyncConnection, run_ids: Sequence[int], now_ms: int) -> list[DistributedRun]:
        """Move each parent that can move (the join), inside the caller's write; returns the
        parents that ended now."""
        ended: list[DistributedRun] = []
        for run_id in run_ids:
            parent = await self._lock_parent(conn, run_id)
            if (
                parent is None
                or parent.phase != ParentPhase.MAPPING.value
                or parent.root_state == ROOT_RUNNING
            ):
                continue
            verdict = join(parent.progress, _tolerance(parent.tolerance))
            if parent.root_state == ROOT_FAILED:
                if parent.progress.running:
                    continue  # cancelled children settle first (never: cancel is immediate)
                phase = ParentPhase.FAILED
            elif not verdict.finished:
                continue
            elif parent.kind == KIND_BCAST and parent.reduce_task:
                phase = ParentPhase.REDUCING  # the post hook runs whatever the parts' outcome
            elif verdict.outcome is JoinOutcome.FAILED:
                phase = ParentPhase.FAILED
            else:
                phase = ParentPhase.REDUCING if parent.reduce_task else ParentPhase.SUCCEEDED
            values: dict[str, Any] = {"phase": phase.value}
            if phase.is_final:
                values["ended_at"] = now_ms
            # The guard of "reduce exactly once": the phase moves only from MAPPING, under the
            # row lock, and the reduce task's key is unique per join attempt.
            moved = await conn.execute(
                update(distributed_run)
                .where(
                    distributed_run.c.run_id == run_id,
                    distributed_run.c.phase == ParentPhase.MAPPING.value,
                    distributed_run.c.attempt == parent.attempt,
                )
                .values(**values)
            )
            if moved.rowcount != 1:
                continue
            if phase is ParentPhase.REDUCING:
                assert parent.reduce_task is not None
                item = None
                if parent.kind == KIND_BCAST:  # the post hook's ctx.item: how the parts ended
                    p = parent.progress
                    item = json.dumps({"total": p.total, "succeeded": p.succeeded, "failed": p.failed})
                await self._insert(
                    conn,
                    run_id,
                    parent.job_group,
                    [NewSubTask(reduce_key(run_id, parent.attempt), parent.reduce_task, KIND_REDUCE, item)],
                    now_ms,
                )
            else:
                ended.append(replace(parent, phase=phase.value, ended_at=now_ms))
        return ended

    # --- dispatch ---------------------------------------------------------------------------

    async def pending_runs(self, limit: int = 100) -> list[DistributedRun]:
        """Open parents with sub-tasks waiting for a dispatch. From the parents (few), each
        probing its pending sub-tasks by index: not a scan of every pending sub-task (a large
        map has 100,000s), asked at every dispatch round."""
        waiting = (
            select(subtask.c.id)
            .where(subtask.c.run_id == distributed_run.c.run_id, subtask.c.status == TaskState.PENDING.value)
            .exists()
        )
        open_phases = [ParentPhase.PRE.value, ParentPhase.MAPPING.value, ParentPhase.REDUCING.value]
        async with self._db.read() as conn:
            rows = (
                await conn.execute(
                    select(distributed_run)
                    .where(distributed_run.c.phase.in_(open_phases), waiting)
                    .order_by(distributed_run.c.run_id)
                    .limit(limit)
                )
            ).all()
        return [to_record(DistributedRun, r) for r in rows]

    async def claim(
        self,
        run_id: int,
        slots: Sequence[tuple[str, int]],
        now_ms: int,
        *,
        parts: bool = True,
        node: str | None = None,
    ) -> list[ClaimedTask]:
        """Claim up to ``count`` pending sub-tasks of the run for each ``(executor, count)``
        (PENDING -> RUNNING, a new attempt), skipping rows another node holds. A broadcast
        part goes to its own executor only (``parts`` False: none, the pre hook runs). The
        rows name ``node`` while they run (see :meth:`claimed_by_dead_nodes`)."""
        wanted = sum(n for _, n in slots)
        if wanted <= 0:
            return []
        caps = await self._db.capabilities()
        async with self._db.write() as conn:
            stmt = (
                select(subtask)
                .where(
                    subtask.c.run_id == run_id,
                    subtask.c.status == TaskState.PENDING.value,
                    *([] if parts else [subtask.c.kind != KIND_PART]),
                )
                .order_by(subtask.c.id)
                .limit(wanted)
            )
            stmt = stmt.with_for_update(skip_locked=True) if caps.skip_locked else stmt.with_for_update()
            rows = [to_record(SubTaskRow, r) for r in (await conn.execute(stmt)).all()]
            if not rows:
                return []
            updates: list[TaskUpdate] = []
            claimed: list[ClaimedTask] = []
            # Round-robin over the executors with room left: a small map spreads over all.
            room = {address: count for address, count in slots if count > 0}
            order = list(room)
            turn = 0
            for row in rows:
                if row.kind == KIND_PART:  # pinned: its executor, or not now
                    address = row.executor_address or ""
                    if room.get(address, 0) <= 0:
                        continue
                else:
                    while room[order[turn % len(order)]] == 0:
                        turn += 1
                    address = order[turn % len(order)]
                    turn += 1
                room[address] -= 1
                attempt = row.attempt + 1
                updates.append(TaskUpdate(row.id, Dispatched(attempt, address), node=node))
                claimed.append(ClaimedTask(row.id, run_id, attempt, row.task_key, row.task_name, row.kind,
                                           row.item, row.shard_index, row.shard_total, address))
            if updates:
                await self._apply(conn, updates, now_ms, None, {r.id: r for r in rows})
        return claimed

    async def running_tasks(self, group_id: int, limit: int = 5_000) -> list[tuple[int, int, str | None]]:
        """(id, attempt, executor) of the group's running sub-tasks."""
        async with self._db.read() as conn:
            rows = (
                await conn.execute(
                    select(subtask.c.id, subtask.c.attempt, subtask.c.executor_address)
                    .where(subtask.c.status == TaskState.RUNNING.value, subtask.c.job_group == group_id)
                    .order_by(subtask.c.id)
                    .limit(limit)
                )
            ).all()
        return [(int(r.id), int(r.attempt), r.executor_address) for r in rows]

    async def claimed_by_dead_nodes(
        self, now_ms: int, me: str, limit: int = 5_000
    ) -> list[tuple[int, int, str | None]]:
        """(id, attempt, node) of running sub-tasks claimed by an admin node no longer alive
        (not announced alive at ``now_ms``): it may have died before it sent them. Those it
        sent may still be running on their executors; they are dispatched again too (at least
        once: the late result of the earlier attempt is ignored)."""
        async with self._db.read() as conn:
            # Two reads, not a sub-select: the tables' text collations differ on MariaDB.
            alive = set(
                (
                    await conn.execute(
                        select(scheduler_node.c.node_id).where(scheduler_node.c.alive_until >= now_ms)
                    )
                ).scalars()
            )
            rows = (
                await conn.execute(
                    select(subtask.c.id, subtask.c.attempt, subtask.c.dispatched_by)
                    .where(
                        subtask.c.status == TaskState.RUNNING.value,
                        subtask.c.dispatched_by.is_not(None),
                        subtask.c.dispatched_by.not_in(sorted(alive | {me})),
                    )
                    .order_by(subtask.c.id)
                    .limit(limit)
                )
            ).all()
        return [(int(r.id), int(r.attempt), r.dispatched_by) for r in rows]

    async def pending_parts(self, limit: int = 5_000) -> list[tuple[int, int, str | None]]:
        """(id, group, executor) of broadcast parts waiting for their executor."""
        async with self._db.read() as conn:
            # The open broadcasts first (few): the pending sub-tasks of a large map are many.
            runs = list(
                (
                    await conn.execute(
                        select(distributed_run.c.run_id).where(
                            distributed_run.c.kind == KIND_BCAST,
                            distributed_run.c.phase.in_([ParentPhase.PRE.value, ParentPhase.MAPPING.value]),
                        )
                    )
                ).scalars()
            )
            if not runs:
                return []
            rows = (
                await conn.execute(
                    select(subtask.c.id, subtask.c.job_group, subtask.c.executor_address)
                    .where(
                        subtask.c.run_id.in_(runs),
                        subtask.c.status == TaskState.PENDING.value,
                        subtask.c.kind == KIND_PART,
                    )
                    .order_by(subtask.c.id)
                    .limit(limit)
                )
            ).all()
        return [(int(r.id), int(r.job_group), r.executor_address) for r in rows]

    async def load(self, group_id: int) -> dict[str, int]:
        """Running sub-tasks of the group per executor address."""
        async with self._db.read() as conn:
            rows = (
                await conn.execute(
                    select(subtask.c.executor_address, func.count())
                    .where(subtask.c.status == TaskState.RUNNING.value, subtask.c.job_group == group_id)
                    .group_by(subtask.c.executor_address)
                )
            ).all()
        return {str(a): int(n) for a, n in rows if a is not None}

    async def running_groups(self) -> list[int]:
        async with self._db.read() as conn:
            return [
                int(g)
                for g in (
                    await conn.execute(
                        select(subtask.c.job_group)
                        .where(subtask.c.status == TaskState.RUNNING.value)
                        .group_by(subtask.c.job_group)
                    )
                ).scalars()
            ]

    # --- the parent's result ----------------------------------------------------------------

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
        async with self._db.write() as conn:
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

    # --- reading ----------------------------------------------------------------------------

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
        return [to_record(SubTaskRow, r) for r in rows]

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
                        subtask.c.kind.not_in(_HOOKS),
                        subtask.c.status == TaskState.SUCCEEDED.value,
                        *_guard_sql(subtask.c.job_group, guard),
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

    async def delete_runs(self, run_ids: Sequence[int]) -> int:
        """Forget the parents and sub-tasks of deleted runs (retention)."""
        deleted = 0
        async with self._db.write() as conn:
            for part in chunks(sorted(set(run_ids))):
                deleted += (await conn.execute(delete(subtask).where(subtask.c.run_id.in_(part)))).rowcount
                await conn.execute(delete(distributed_run).where(distributed_run.c.run_id.in_(part)))
        return deleted


@dataclass(frozen=True, slots=True)
class JobSettings:
    tolerance: str | None
    max_retries: int
    handle_code: int


def _values(row: SubTaskRow, new: Task, u: TaskUpdate, now_ms: int) -> dict[str, Any]:
    """The row's new columns (the same columns for every row: one batched UPDATE)."""
    values: dict[str, Any] = {
        "status": new.state.value,
        "attempt": new.attempt,
        "failures": new.failures,
        "losses": new.losses,
        "executor_address": new.executor,
        "result": row.result,
        "message": row.message,
        "dispatched_at": row.dispatched_at,
        "ended_at": row.ended_at,
        "dispatched_by": row.dispatched_by if new.state is TaskState.RUNNING else None,
        "log": None if isinstance(u.event, RetryRequested) else row.log,
    }
    event = u.event
    if isinstance(event, Dispatched):
        values["dispatched_by"] = u.node
    if new.state is TaskState.RUNNING and new.attempt != row.attempt:
        values["dispatched_at"] = now_ms
        values["ended_at"] = None
    if isinstance(event, Finished):
        values["result"] = u.result if event.ok else None
        values["message"] = (u.message or "")[:_MESSAGE_MAX] or None
        values["log"] = u.log
    elif isinstance(event, Lost):
        values["message"] = (u.message or "its executor was lost")[:_MESSAGE_MAX]
    elif isinstance(event, CancelRequested):
        values["message"] = u.message or "cancelled"
    elif isinstance(event, RetryRequested):
        values["message"] = None
        values["result"] = None
    if new.state.is_final:
        values["ended_at"] = now_ms
    return values


def lost_parents_condition() -> ColumnElement[bool]:
    """Runs whose root task ended and that wait for their join: never "lost" with the
    executor that ran the root (their result is the join's)."""
    waiting = select(distributed_run.c.run_id).where(distributed_run.c.root_state != ROOT_RUNNING)
    return and_(job_log.c.id.not_in(waiting))


async def delete_children_of_deleted(conn: AsyncConnection, run_ids: Sequence[int]) -> None:
    """Retention: the sub-tasks and join state of those of ``run_ids`` no longer in the run log."""
    still = select(job_log.c.id).where(job_log.c.id.in_(list(run_ids)))
    await conn.execute(
        delete(subtask).where(subtask.c.run_id.in_(list(run_ids)), subtask.c.run_id.not_in(still))
    )
    await conn.execute(
        delete(distributed_run).where(
            distributed_run.c.run_id.in_(list(run_ids)), distributed_run.c.run_id.not_in(still)
        )
    )
