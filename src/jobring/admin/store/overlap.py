"""Overlap policies (issue 24): a job's runs in progress, as the run log has them, and its fires
waiting for them to end (``jobring_overlap_wait``).

A waiting fire keeps its identity (job id, planned instant) under a unique key, so it waits at
most once whichever admin decided it. A node starts one by deleting its row first
(:meth:`OverlapRepository.take`): of two nodes only the one whose delete found the row fires it.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import delete, func, insert, select
from sqlalchemy.exc import IntegrityError

from jobring.admin.store.base import Repository
from jobring.admin.store.tables import job_log, overlap_wait

_NOT_ENDED_CODES = (0, 200)  # recorded (pending) or sent, with no result yet


@dataclass(frozen=True, slots=True)
class RunInProgress:
    id: int
    executor_address: str | None
    job_group: int


@dataclass(frozen=True, slots=True)
class WaitingFire:
    id: int
    job_id: int
    job_group: int
    planned_time: int  # the fire's identity in the run log
    logical_time: int
    trigger_type: str
    created_at: int


class OverlapRepository(Repository):
    """Runs in progress of a job, and its waiting fires."""

    async def in_progress(self, job_id: int, limit: int = 1_000) -> builtins.list[RunInProgress]:
        """The job's runs without an outcome (recorded or sent, no result; any trigger type)."""
        stmt = (
            select(job_log.c.id, job_log.c.executor_address, job_log.c.job_group)
            .where(job_log.c.job_id == job_id, job_log.c.handle_code == 0,
                   job_log.c.trigger_code.in_(_NOT_ENDED_CODES))
            .order_by(job_log.c.id)
            .limit(limit)
        )
        async with self._db.read() as conn:
            return [RunInProgress(int(r.id), r.executor_address, int(r.job_group))
                    for r in (await conn.execute(stmt)).all()]

    async def wait(self, job_id: int, job_group: int, planned_time: int, logical_time: int,
                   trigger_type: str, now_ms: int) -> bool:
        """Add a waiting fire; False when that fire waits already."""
        values = {"job_id": job_id, "job_group": job_group, "planned_time": planned_time,
                  "logical_time": logical_time, "trigger_type": trigger_type, "created_at": now_ms}
        try:
            async with self._db.write() as conn:
                await conn.execute(insert(overlap_wait).values(**values))
        except IntegrityError:
            return False
        return True

    async def waiting(self, job_id: int, limit: int = 1_000) -> builtins.list[WaitingFire]:
        """The job's waiting fires, oldest first."""
        stmt = (select(overlap_wait).where(overlap_wait.c.job_id == job_id)
                .order_by(overlap_wait.c.planned_time, overlap_wait.c.id).limit(limit))
        async with self._db.read() as conn:
            return [WaitingFire(**r._asdict()) for r in (await conn.execute(stmt)).all()]

    async def jobs_waiting(self, limit: int = 1_000) -> builtins.list[int]:
        """Ids of the jobs with waiting fires."""
        stmt = select(overlap_wait.c.job_id).distinct().order_by(overlap_wait.c.job_id).limit(limit)
        async with self._db.read() as conn:
            return [int(v) for v in (await conn.execute(stmt)).scalars()]

    async def count(self) -> int:
        async with self._db.read() as conn:
            return int((await conn.execute(select(func.count()).select_from(overlap_wait))).scalar_one())

    async def take(self, wait_id: int) -> bool:
        """Remove a waiting fire to start (or drop) it; False when another node took it."""
        async with self._db.write() as conn:
            result = await conn.execute(delete(overlap_wait).where(overlap_wait.c.id == wait_id))
            return bool(result.rowcount)

    async def remove(self, wait_ids: Sequence[int]) -> int:
        if not wait_ids:
            return 0
        async with self._db.write() as conn:
            result = await conn.execute(delete(overlap_wait).where(overlap_wait.c.id.in_(list(wait_ids))))
            return int(result.rowcount)

    async def remove_fires(self, job_id: int, planned_times: Sequence[int]) -> int:
        """Drop these waiting fires of the job (replaced by a newer one)."""
        if not planned_times:
            return 0
        stmt = delete(overlap_wait).where(overlap_wait.c.job_id == job_id,
                                          overlap_wait.c.planned_time.in_(list(planned_times)))
        async with self._db.write() as conn:
            return int((await conn.execute(stmt)).rowcount)

    async def remove_for_job(self, job_id: int) -> int:
        """Drop every waiting fire of the job (deleted, or its policy no longer buffers)."""
        async with self._db.write() as conn:
            result = await conn.execute(delete(overlap_wait).where(overlap_wait.c.job_id == job_id))
            return int(result.rowcount)
