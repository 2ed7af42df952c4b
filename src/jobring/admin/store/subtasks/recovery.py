"""Sub-tasks claimed by an admin node that died: which they are, and those an executor holds
taken over by the node that asked (docs/distributed-jobs.md, "An admin node dies")."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import select, update

from jobring.admin.store.base import chunks
from jobring.admin.store.subtasks.transitions import Transitions
from jobring.admin.store.tables import scheduler_node, subtask
from jobring.core.distributed import TaskState


@dataclass(frozen=True, slots=True)
class Orphan:
    """A running sub-task claimed (as ``attempt``, for ``executor``) by a dead admin ``node``."""

    id: int
    run_id: int
    job_group: int
    attempt: int
    node: str
    executor: str | None


class Recovery(Transitions):
    """The running sub-tasks of dead admin nodes."""

    async def claimed_by_dead_nodes(self, now_ms: int, me: str, limit: int = 5_000) -> list[Orphan]:
        """Running sub-tasks claimed by an admin node no longer alive (not announced alive at
        ``now_ms``), by id: it may have died before it sent them, or after."""
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
                    select(subtask.c.id, subtask.c.run_id, subtask.c.job_group, subtask.c.attempt,
                           subtask.c.dispatched_by, subtask.c.executor_address)
                    .where(
                        subtask.c.status == TaskState.RUNNING.value,
                        subtask.c.dispatched_by.is_not(None),
                        subtask.c.dispatched_by.not_in(sorted(alive | {me})),
                    )
                    .order_by(subtask.c.id)
                    .limit(limit)
                )
            ).all()
        return [Orphan(int(r.id), int(r.run_id), int(r.job_group), int(r.attempt), str(r.dispatched_by),
                       r.executor_address) for r in rows]

    async def adopt(self, orphans: Sequence[Orphan], me: str) -> int:
        """Make ``me`` the dispatching node of these sub-tasks (their executor holds them: they
        are not sent again), each only while still running as the same attempt for the same
        dead node. Returns how many rows changed."""
        shapes: dict[tuple[int, str], list[int]] = {}
        for orphan in orphans:
            shapes.setdefault((orphan.attempt, orphan.node), []).append(orphan.id)
        changed = 0
        async with self._db.write(bulk=True) as conn:
            for (attempt, node), ids in sorted(shapes.items()):
                for part in chunks(sorted(ids)):
                    result = await conn.execute(
                        update(subtask)
                        .where(
                            subtask.c.id.in_(part),
                            subtask.c.status == TaskState.RUNNING.value,
                            subtask.c.attempt == attempt,
                            subtask.c.dispatched_by == node,
                        )
                        .values(dispatched_by=me)
                    )
                    changed += int(result.rowcount)
        return changed
