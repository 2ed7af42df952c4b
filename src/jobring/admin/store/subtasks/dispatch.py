"""Sub-task dispatch: the parents with pending sub-tasks, the claim of a dispatch round, the
running sub-tasks per executor (the pump's window) and those waiting for their executor."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import func, select

from jobring.admin.store.base import to_record
from jobring.admin.store.subtasks.records import (
    KIND_BCAST,
    KIND_PART,
    ClaimedTask,
    DistributedRun,
    SubTaskRow,
    TaskUpdate,
    subtask_row,
)
from jobring.admin.store.subtasks.transitions import Transitions
from jobring.admin.store.tables import distributed_run, subtask
from jobring.core.distributed import Dispatched, ParentPhase, TaskState


class Dispatch(Transitions):
    """What the sub-task pump reads and claims."""

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
        # Round-robin over the executors with room left: a small map spreads over all.
        room = {address: count for address, count in slots if count > 0}
        caps = await self._db.capabilities()
        claimed: list[ClaimedTask] = []
        after = 0
        while (wanted := sum(room.values())) > 0:
            limit = min(wanted, self._db.bulk_rows or wanted)  # SQLite: short writes, several
            async with self._db.write(bulk=True) as conn:
                stmt = (
                    select(subtask)
                    .where(
                        subtask.c.run_id == run_id,
                        subtask.c.status == TaskState.PENDING.value,
                        subtask.c.id > after,
                        *([] if parts else [subtask.c.kind != KIND_PART]),
                    )
                    .order_by(subtask.c.id)
                    .limit(limit)
                )
                stmt = stmt.with_for_update(skip_locked=True) if caps.skip_locked else stmt.with_for_update()
                rows = [subtask_row(r) for r in (await conn.execute(stmt)).all()]
                if not rows:
                    break
                after = rows[-1].id
                updates = _assign(rows, room, len(claimed), node)
                if updates:
                    await self._apply(conn, updates, now_ms, None, {r.id: r for r in rows})
            by_id = {r.id: r for r in rows}
            for u in updates:
                row, sent = by_id[u.id], u.event
                assert isinstance(sent, Dispatched)
                claimed.append(ClaimedTask(
                    row.id, run_id, sent.attempt, row.task_key, row.task_name, row.kind, row.item,
                    row.shard_index, row.shard_total, sent.executor,
                ))
            if len(rows) < limit:
                break
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



def _assign(
    rows: Sequence[SubTaskRow], room: dict[str, int], turn: int, node: str | None
) -> list[TaskUpdate]:
    """Each row's executor (a broadcast part: its own, or none now), taking from ``room``;
    the others round-robin over the executors with room, from ``turn`` on."""
    order = list(room)
    updates: list[TaskUpdate] = []
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
        updates.append(TaskUpdate(row.id, Dispatched(row.attempt + 1, address), node=node))
    return updates
