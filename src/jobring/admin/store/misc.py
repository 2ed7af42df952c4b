"""Daily reports, GLUE history, and the schedule lock."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.dialects import mysql as mysql_dialect
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection

from jobring.admin.store.base import Repository, new_id, to_record
from jobring.admin.store.engine import utc_naive
from jobring.admin.store.errors import NotFound, is_transient
from jobring.admin.store.records import DayCount, GlueVersion, ReportTotals
from jobring.admin.store.tables import SCHEDULE_LOCK, job_info, job_lock, job_log_report, job_logglue

log = logging.getLogger(__name__)
_UPSERT_ATTEMPTS = 4


def _midnight(day: datetime) -> datetime:
    return utc_naive(day).replace(hour=0, minute=0, second=0)


class ReportRepository(Repository):
    """``xxl_job_log_report``: one row of counts per day."""

    async def upsert_day(self, day: datetime, running: int, success: int, fail: int, now: datetime) -> None:
        """Store the counts of ``day`` (its midnight), replacing earlier ones."""
        values = {
            "running_count": running,
            "suc_count": success,
            "fail_count": fail,
            "update_time": utc_naive(now),
        }
        trigger_day = _midnight(day)
        row = {"trigger_day": trigger_day, **values}
        backend = self._db.backend
        # One statement (no savepoint): MariaDB ends the whole transaction on a deadlock, so
        # a savepoint around a plain INSERT could not be rolled back to.
        if backend in ("mariadb", "mysql"):
            stmt: Any = mysql_dialect.insert(job_log_report).values(**row).on_duplicate_key_update(**values)
        elif backend == "postgresql":
            stmt = pg_dialect.insert(job_log_report).values(**row).on_conflict_do_update(
                index_elements=["trigger_day"], set_=values)
        else:
            stmt = sqlite_dialect.insert(job_log_report).values(**row).on_conflict_do_update(
                index_elements=["trigger_day"], set_=values)
        for attempt in range(_UPSERT_ATTEMPTS):
            try:
                async with self._db.write() as conn:
                    await conn.execute(stmt)
                return
            except DBAPIError as exc:
                # Concurrent upserts of a new day can deadlock on InnoDB's key locks.
                if attempt + 1 == _UPSERT_ATTEMPTS or not is_transient(exc):
                    raise
                log.info("report upsert for %s hit %s; retrying", trigger_day.date(), exc.orig)
                await asyncio.sleep(0.02 * 2**attempt)

    async def range(self, from_day: datetime, to_day: datetime) -> list[DayCount]:
        """Stored days from ``from_day`` to ``to_day`` inclusive, oldest first."""
        stmt = (
            select(job_log_report)
            .where(
                job_log_report.c.trigger_day >= _midnight(from_day),
                job_log_report.c.trigger_day <= _midnight(to_day),
            )
            .order_by(job_log_report.c.trigger_day)
        )
        async with self._db.read() as conn:
            rows = (await conn.execute(stmt)).all()
        return [DayCount(r.trigger_day, r.running_count, r.suc_count, r.fail_count) for r in rows]

    async def totals(self) -> ReportTotals:
        """Sums over every stored day."""
        stmt = select(
            func.sum(job_log_report.c.running_count),
            func.sum(job_log_report.c.suc_count),
            func.sum(job_log_report.c.fail_count),
        )
        async with self._db.read() as conn:
            running, success, fail = (await conn.execute(stmt)).one()
        return ReportTotals(int(running or 0), int(success or 0), int(fail or 0))


class GlueRepository(Repository):
    """GLUE sources: the job's current source plus a history of saved versions."""

    async def save(
        self, job_id: int, glue_type: str, source: str, remark: str, now: datetime, keep: int = 30
    ) -> int:
        """Set the job's GLUE fields and append a history version, keeping the newest ``keep``.

        Returns the new version's id; NotFound when the job does not exist.
        """
        stamp = utc_naive(now)
        async with self._db.write() as conn:
            result = await conn.execute(
                update(job_info)
                .where(job_info.c.id == job_id)
                .values(
                    glue_type=glue_type,
                    glue_source=source,
                    glue_remark=remark,
                    glue_updatetime=stamp,
                    update_time=stamp,
                )
            )
            if result.rowcount == 0:
                raise NotFound(f"job {job_id} does not exist")
            inserted = await conn.execute(
                insert(job_logglue).values(
                    job_id=job_id,
                    glue_type=glue_type,
                    glue_source=source,
                    glue_remark=remark,
                    add_time=stamp,
                    update_time=stamp,
                )
            )
            version_id = new_id(inserted)
            stale = list(
                (
                    await conn.execute(
                        select(job_logglue.c.id)
                        .where(job_logglue.c.job_id == job_id)
                        .order_by(job_logglue.c.id.desc())
                        .offset(keep)
                        .limit(10_000)
                    )
                ).scalars()
            )
            if stale:
                await conn.execute(delete(job_logglue).where(job_logglue.c.id.in_(stale)))
            return version_id

    async def history(self, job_id: int) -> list[GlueVersion]:
        """The job's saved versions, newest first."""
        stmt = select(job_logglue).where(job_logglue.c.job_id == job_id).order_by(job_logglue.c.id.desc())
        async with self._db.read() as conn:
            return [to_record(GlueVersion, r) for r in (await conn.execute(stmt)).all()]

    async def get_version(self, version_id: int) -> GlueVersion | None:
        """One saved version, or ``None``."""
        async with self._db.read() as conn:
            row = (await conn.execute(select(job_logglue).where(job_logglue.c.id == version_id))).first()
        return None if row is None else to_record(GlueVersion, row)

    async def delete_for_job(self, job_id: int) -> int:
        """Delete a job's history (when the job is deleted); returns how many rows."""
        async with self._db.write() as conn:
            return (await conn.execute(delete(job_logglue).where(job_logglue.c.job_id == job_id))).rowcount


class ScheduleLock(Repository):
    """The reference's global scheduling lock (one row in ``xxl_job_lock``)."""

    @asynccontextmanager
    async def schedule_lock(self) -> AsyncIterator[AsyncConnection]:
        """Hold ``schedule_lock`` for the body: ``SELECT ... FOR UPDATE`` in its own
        transaction (SQLite: BEGIN IMMEDIATE). Yields the connection; the transaction
        commits (releasing the lock) when the body ends, rolls back if it raises."""
        async with self._db.write() as conn:
            stmt = select(job_lock.c.lock_name).where(job_lock.c.lock_name == SCHEDULE_LOCK)
            if self._db.engine.dialect.name != "sqlite":
                stmt = stmt.with_for_update()
            if (await conn.execute(stmt)).first() is None:
                raise NotFound("the schedule_lock row is missing; run `jobring db upgrade`")
            yield conn
