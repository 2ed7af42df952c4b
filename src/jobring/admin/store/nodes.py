"""Scheduling admin nodes (``jobring_scheduler_node``): liveness and send fences."""

from __future__ import annotations

from collections.abc import Collection

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from jobring.admin.store.base import Repository, chunks
from jobring.admin.store.tables import scheduler_node


class SchedulerNodeRepository(Repository):
    """One row per scheduling node (every process start has a new node id).

    ``alive_until`` (epoch ms) is renewed every cycle; 0 after a clean stop. ``send_fence``
    is the latest planned instant the node may send a fire for: it is raised ahead of time
    and committed before any fire beyond it goes out, so a node that takes over a dead
    node's jobs knows that fires planned after the fence were never sent.
    """

    async def announce(self, node_id: str, alive_until_ms: int) -> None:
        """Record that ``node_id`` schedules until ``alive_until_ms`` (0: it is leaving)."""
        await self._write(node_id, "alive_until", alive_until_ms, only_raise=False)

    async def raise_fence(self, node_id: str, fence_ms: int) -> None:
        """Let ``node_id`` send fires planned up to ``fence_ms`` (a fence never moves back)."""
        await self._write(node_id, "send_fence", fence_ms, only_raise=True)

    async def live_count(self, now_ms: int) -> int:
        """How many nodes are announced as scheduling at ``now_ms``."""
        stmt = select(func.count()).select_from(scheduler_node).where(scheduler_node.c.alive_until >= now_ms)
        async with self._db.read() as conn:
            return int((await conn.execute(stmt)).scalar_one())

    async def send_fences(self, node_ids: Collection[str]) -> dict[str, int]:
        """The send fence of each known node among ``node_ids``."""
        found: dict[str, int] = {}
        async with self._db.read() as conn:
            for part in chunks(sorted(node_ids)):
                rows = (await conn.execute(
                    select(scheduler_node.c.node_id, scheduler_node.c.send_fence)
                    .where(scheduler_node.c.node_id.in_(part)))).all()
                found.update({r.node_id: int(r.send_fence) for r in rows})
        return found

    async def forget(self, gone_before_ms: int) -> int:
        """Delete nodes neither alive nor fencing since ``gone_before_ms``; returns how many."""
        node = scheduler_node.c
        gone = (node.alive_until < gone_before_ms) & (node.send_fence < gone_before_ms)
        # Found by a plain read, deleted by key (the condition checked again): a DELETE scanning
        # the table on MariaDB locks every node's row until its commit, and a node paused inside
        # it would hold up every other node's heartbeat and fence.
        async with self._db.read() as conn:
            node_ids = list((await conn.execute(select(node.node_id).where(gone))).scalars())
        removed = 0
        for part in chunks(sorted(node_ids)):
            async with self._db.write(read_committed=True) as conn:
                result = await conn.execute(delete(scheduler_node).where(node.node_id.in_(part), gone))
                removed += int(result.rowcount)
        return removed

    async def _write(self, node_id: str, column: str, value: int, *, only_raise: bool) -> None:
        """Set one column of the node's row, creating the row when missing (the node's own
        tasks may race to create it)."""
        row = scheduler_node.c.node_id == node_id
        target = scheduler_node.c[column]
        for _ in range(5):
            async with self._db.write() as conn:
                stmt = update(scheduler_node).where(row, *([target < value] if only_raise else []))
                if (await conn.execute(stmt.values({column: value}))).rowcount:
                    return
                current = (await conn.execute(select(target).where(row))).scalar_one_or_none()
            if current is not None:
                if current == value or (only_raise and current > value):
                    return  # already so (a driver counting changed rows reports 0)
                continue  # the row appeared after the update looked: update it now
            try:
                async with self._db.write() as conn:
                    await conn.execute(insert(scheduler_node).values({"node_id": node_id, column: value}))
                return
            except IntegrityError:
                continue  # inserted meanwhile: update it
        raise RuntimeError(f"could not write {column} of scheduler node {node_id}")
