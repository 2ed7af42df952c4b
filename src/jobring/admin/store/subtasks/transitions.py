"""The transitions of distributed runs, inside the caller's write transaction: events applied
to locked sub-task rows, the parents' counters, the join, and the hooks' outcomes.

Every transition locks the sub-task rows (in id order) and then their parents (in run
order), so two admin nodes handling the same result, or a result and a loss of the same
attempt, change a row once: the pure ``apply_event`` decides on the locked row, and only the
rows it changed move the parent's counters. The join runs in the same write: a parent whose
children are all final moves out of ``mapping`` there, and the reduce task is inserted there
under its unique key, so it starts exactly once.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from sqlalchemy import insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from jobring.admin.store.base import Repository, chunks, to_record, update_rows
from jobring.admin.store.records import GroupGuard
from jobring.admin.store.subtasks.records import (
    COUNTS,
    HOOKS,
    KIND_BCAST,
    KIND_PART,
    KIND_REDUCE,
    LOCK_CHUNK,
    MESSAGE_MAX,
    ROOT_FAILED,
    ROOT_RUNNING,
    DistributedRun,
    NewSubTask,
    SubTaskRow,
    TaskUpdate,
    guard_sql,
    new_values,
    policy_of,
    subtask_row,
    task_of,
    tolerance_of,
)
from jobring.admin.store.tables import distributed_run, subtask
from jobring.core.distributed import (
    CancelRequested,
    JoinOutcome,
    ParentPhase,
    TaskState,
    after_reduce,
    apply_event,
    executors_outcome,
    join,
    reduce_key,
)


class Transitions(Repository):
    """The writes every part of :class:`DistributedRepository` builds on."""

    async def _lock_parent(self, conn: AsyncConnection, run_id: int) -> DistributedRun | None:
        stmt = select(distributed_run).where(distributed_run.c.run_id == run_id).with_for_update()
        row = (await conn.execute(stmt)).first()
        return None if row is None else to_record(DistributedRun, row)

    @staticmethod
    async def _new_parent(
        conn: AsyncConnection, run_id: int, job_id: int, group: int, kind: str, now_ms: int, **columns: Any
    ) -> None:
        """Insert a parent's join state at its first attempt (``columns``: the rest)."""
        await conn.execute(
            insert(distributed_run).values(
                run_id=run_id, job_id=job_id, job_group=group, kind=kind, attempt=1, created_at=now_ms,
                **columns,
            )
        )

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
        # A row with several events in the batch: the next event sees the row as changed.
        repeated = {i for i, n in Counter(u.id for u in updates).items() if n > 1}
        deltas: dict[int, tuple[int, int, int]] = {}
        reduced: dict[int, tuple[bool, str | None, str | None]] = {}
        pre_done: dict[int, tuple[bool, str | None, str | None]] = {}
        for u in updates:
            row = rows.get(u.id)
            parent = parents.get(row.run_id) if row is not None else None
            if row is None or parent is None:
                continue
            new = apply_event(task_of(row), u.event, policy_of(row.kind, parent.max_retries))
            if new is None:
                continue
            values = new_values(row, new, u, now_ms)
            writes[row.id] = values
            if row.kind in HOOKS:
                if new.state.is_final:
                    done = reduced if row.kind == KIND_REDUCE else pre_done
                    done[row.run_id] = (new.state is TaskState.SUCCEEDED, u.result, u.message)
            else:
                (s0, f0, r0), (s1, f1, r1) = COUNTS[TaskState(row.status)], COUNTS[new.state]
                ds, df, dr = deltas.get(row.run_id, (0, 0, 0))
                deltas[row.run_id] = (ds + s1 - s0, df + f1 - f0, dr + r1 - r0)
            if row.id not in repeated:
                continue
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
                outcome, _ = executors_outcome(parent.progress, tolerance_of(parent.tolerance))
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
                root_msg=f"pre hook failed: {msg or ''}"[:MESSAGE_MAX],
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
        for part in chunks(sorted(set(ids)), LOCK_CHUNK):
            stmt = (
                select(subtask)
                .where(subtask.c.id.in_(part), *guard_sql(subtask.c.job_group, guard))
                .order_by(subtask.c.id)
                .with_for_update()
            )
            for row in (await conn.execute(stmt)).all():
                rows[int(row.id)] = subtask_row(row)
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
            verdict = join(parent.progress, tolerance_of(parent.tolerance))
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

