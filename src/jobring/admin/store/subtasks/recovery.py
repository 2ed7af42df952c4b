"""Sub-tasks claimed by an admin node that died: which they are, and those an executor has."""

from __future__ import annotations

from sqlalchemy import select

from jobring.admin.store.subtasks.transitions import Transitions
from jobring.admin.store.tables import scheduler_node, subtask
from jobring.core.distributed import TaskState


class Recovery(Transitions):
    """The running sub-tasks of dead admin nodes."""

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

