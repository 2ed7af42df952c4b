"""Run-log retention: deleting old runs in short batches, the console's "clear logs"."""

from __future__ import annotations

import asyncio
import builtins
from datetime import UTC, datetime, timedelta

from sqlalchemy import (
    ColumnElement,
    and_,
    delete,
    func,
    or_,
    select,
)

from jobring.admin.store.base import Repository, chunks
from jobring.admin.store.engine import utc_naive
from jobring.admin.store.records import ClearRule, Tally
from jobring.admin.store.subtasks import (
    delete_parents_of_deleted,
    delete_some_children,
    end_parents_of_deleted,
    open_among,
    parents_among,
)
from jobring.admin.store.tables import job_log

_RULE_AGE = {
    ClearRule.OLDER_THAN_1_DAY: timedelta(days=1),
    ClearRule.OLDER_THAN_1_WEEK: timedelta(weeks=1),
    ClearRule.OLDER_THAN_1_MONTH: timedelta(days=30),
    ClearRule.OLDER_THAN_3_MONTHS: timedelta(days=90),
    ClearRule.OLDER_THAN_6_MONTHS: timedelta(days=180),
    ClearRule.OLDER_THAN_1_YEAR: timedelta(days=365),
}
_RULE_KEEP = {
    ClearRule.KEEP_LAST_1K: 1_000,
    ClearRule.KEEP_LAST_10K: 10_000,
    ClearRule.KEEP_LAST_30K: 30_000,
    ClearRule.KEEP_LAST_100K: 100_000,
}


class LogRetention(Repository):
    """Deleting run logs."""

    async def count_older_than(self, before: datetime) -> int:
        """How many logs were triggered before ``before``."""
        async with self._db.read() as conn:
            return int((await conn.execute(select(func.count()).select_from(job_log).where(
                job_log.c.trigger_time < utc_naive(before)))).scalar_one())

    async def delete_older_than(self, before: datetime, batch: int = 1000, pause_s: float = 0.0) -> int:
        """Delete logs triggered before ``before``, ``batch`` rows per short transaction (with
        ``pause_s`` between them); returns the count."""
        return await self._delete_where([job_log.c.trigger_time < utc_naive(before)], batch, pause_s)

    async def job_ids_over(self, keep: int) -> builtins.list[int]:
        """Jobs with more than ``keep`` runs."""
        stmt = (select(job_log.c.job_id).group_by(job_log.c.job_id)
                .having(func.count() > keep).order_by(job_log.c.job_id))
        async with self._db.read() as conn:
            return [int(i) for i in (await conn.execute(stmt)).scalars()]

    async def delete_beyond_newest(
        self, job_id: int, keep: int, batch: int = 1000, pause_s: float = 0.0
    ) -> int:
        """Delete the job's runs older than its ``keep`` newest (by trigger time); returns the count."""
        async with self._db.read() as conn:
            pivot = (await conn.execute(
                select(job_log.c.trigger_time, job_log.c.id)
                .where(job_log.c.job_id == job_id)
                .order_by(job_log.c.trigger_time.desc(), job_log.c.id.desc())
                .offset(keep).limit(1))).first()
        if pivot is None:
            return 0
        older = or_(job_log.c.trigger_time < pivot.trigger_time,
                    and_(job_log.c.trigger_time == pivot.trigger_time, job_log.c.id <= pivot.id))
        return await self._delete_where([job_log.c.job_id == job_id, older], batch, pause_s)

    async def clear(
        self,
        rule: ClearRule,
        now: datetime,
        *,
        group_id: int | None = None,
        job_id: int | None = None,
        batch: int = 1000,
        tally: Tally | None = None,
    ) -> int:
        """The console's "clear logs": by age, keep the newest N, or all; optionally for one
        group and/or job. Returns how many rows were deleted (``tally`` counts them as they go)."""
        where: builtins.list[ColumnElement[bool]] = []
        if group_id:
            where.append(job_log.c.job_group == group_id)
        if job_id:
            where.append(job_log.c.job_id == job_id)
        if rule in _RULE_AGE:
            where.append(job_log.c.trigger_time <= utc_naive(now) - _RULE_AGE[rule])
        elif rule in _RULE_KEEP:
            keep = _RULE_KEEP[rule]
            async with self._db.read() as conn:
                pivot = (
                    await conn.execute(
                        select(job_log.c.id)
                        .where(*where)
                        .order_by(job_log.c.id.desc())
                        .offset(keep - 1)
                        .limit(1)
                    )
                ).scalar()
            if pivot is None:
                return 0
            where.append(job_log.c.id < pivot)
        return await self._delete_where(where, batch, tally=tally, now=now)

    async def _delete_where(
        self,
        where: builtins.list[ColumnElement[bool]],
        batch: int,
        pause_s: float = 0.0,
        tally: Tally | None = None,
        now: datetime | None = None,
    ) -> int:
        """Delete in short transactions: the ids are read without a lock, then deleted by
        primary key in a transaction of their own (the condition repeated: a run that no longer
        matches stays); ``pause_s`` between batches leaves room to other writers. No transaction
        changes more than ``batch`` rows (SQLite: ``Db.bulk_rows``, bulk writes that take turns
        between the scheduler's): a distributed run's sub-tasks go first, a part at a time (an
        interrupted delete leaves runs that the same delete again removes, not orphans), then
        the runs with their join state. A parent still open ends (failed) before its sub-tasks
        go, so a delete interrupted before its run leaves it ended, not waiting for ever for
        sub-tasks that are gone. ``tally`` counts the runs deleted as they go; ``now`` (default:
        the system clock) is when such a parent ends."""
        tally = tally if tally is not None else Tally()
        ending = now or datetime.now(UTC)
        size = min(batch, self._db.bulk_rows or batch)
        after = 0
        while True:
            # ``batch`` ids a read, deleted ``size`` a write: on SQLite the read may sort every
            # row of the filter (a group's: its index is by time), so no more reads than before.
            async with self._db.read() as conn:
                ids = list((await conn.execute(
                    select(job_log.c.id).where(*where, job_log.c.id > after)
                    .order_by(job_log.c.id).limit(batch)
                )).scalars())
                parents = await parents_among(conn, ids) if ids else []
                still_open = await open_among(conn, parents) if parents else []
            if not ids:
                return tally.count
            for some in chunks(still_open, max(1, size // 2)):  # two rows each
                async with self._db.write(bulk=True) as conn:
                    await end_parents_of_deleted(conn, some, where, ending)
            await self._delete_children(parents, where, size)
            gone: builtins.list[int] = []
            for part in chunks(ids, size):
                async with self._db.write(bulk=True) as conn:
                    result = await conn.execute(delete(job_log).where(job_log.c.id.in_(part), *where))
                    deleted = int(result.rowcount)
                    gone += await delete_parents_of_deleted(conn, part)
                tally.count += deleted  # once committed: a write that failed deleted nothing
            await self._delete_children(gone, None, size)
            after = ids[-1]
            if pause_s > 0:
                await asyncio.sleep(pause_s)

    async def _delete_children(
        self, run_ids: builtins.list[int], runs: builtins.list[ColumnElement[bool]] | None, size: int
    ) -> None:
        """The sub-tasks of ``run_ids`` (see ``delete_some_children``), ``size`` a write."""
        while run_ids:
            async with self._db.write(bulk=True) as conn:
                if await delete_some_children(conn, run_ids, runs, size) < size:
                    return
