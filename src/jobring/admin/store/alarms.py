"""Alarm events (``jobring_alarm_event``): deadline and recovery alarms, claimed once per run."""

from __future__ import annotations

from sqlalchemy import delete, insert, select, update
from sqlalchemy.exc import IntegrityError

from jobring.admin.store.base import Repository
from jobring.admin.store.tables import alarm_event


class AlarmEventRepository(Repository):
    """One row per (run, kind): inserting it is the claim, so two admin nodes never both alarm.
    Failure alarms have a row too (claimed first on the run's alarm_status), so an alarm whose
    node died while sending it can be found and sent by another (``stale``/``retake``)."""

    async def claim(self, log_id: int, job_id: int, kind: str, now_ms: int) -> bool:
        """Record the alarm as taken (status -1); False when it already was, by any node."""
        try:
            async with self._db.write() as conn:
                await conn.execute(
                    insert(alarm_event).values(
                        log_id=log_id, job_id=job_id, kind=kind, status=-1, add_time=now_ms
                    )
                )
        except IntegrityError:
            return False
        return True

    async def set_status(self, log_id: int, kind: str, status: int) -> None:
        async with self._db.write() as conn:
            await conn.execute(
                update(alarm_event)
                .where(alarm_event.c.log_id == log_id, alarm_event.c.kind == kind)
                .values(status=status)
            )

    async def status(self, log_id: int, kind: str) -> int | None:
        """The event's status, or None when no such alarm was taken."""
        async with self._db.read() as conn:
            return (
                await conn.execute(
                    select(alarm_event.c.status).where(
                        alarm_event.c.log_id == log_id, alarm_event.c.kind == kind
                    )
                )
            ).scalar()

    async def taken(self, log_ids: list[int], kind: str) -> set[int]:
        """The ids among ``log_ids`` that already have an alarm of this kind."""
        if not log_ids:
            return set()
        async with self._db.read() as conn:
            rows = await conn.execute(
                select(alarm_event.c.log_id).where(
                    alarm_event.c.kind == kind, alarm_event.c.log_id.in_(log_ids)
                )
            )
            return {int(r) for r in rows.scalars()}

    async def stale(self, before_ms: int, limit: int = 100) -> list[tuple[int, int, str, int]]:
        """Alarms taken before ``before_ms`` and never finished (their node died while sending):
        (log id, job id, kind, taken at)."""
        stmt = (
            select(alarm_event.c.log_id, alarm_event.c.job_id, alarm_event.c.kind, alarm_event.c.add_time)
            .where(alarm_event.c.status == -1, alarm_event.c.add_time < before_ms)
            .order_by(alarm_event.c.id)
            .limit(limit)
        )
        async with self._db.read() as conn:
            return [
                (int(r.log_id), int(r.job_id), str(r.kind), int(r.add_time))
                for r in (await conn.execute(stmt)).all()
            ]

    async def retake(self, log_id: int, kind: str, taken_at: int, now_ms: int) -> bool:
        """Take a stale alarm over (compare-and-set on its time); True for the one node that did."""
        async with self._db.write() as conn:
            result = await conn.execute(
                update(alarm_event)
                .where(
                    alarm_event.c.log_id == log_id,
                    alarm_event.c.kind == kind,
                    alarm_event.c.status == -1,
                    alarm_event.c.add_time == taken_at,
                )
                .values(add_time=now_ms)
            )
            return result.rowcount > 0

    async def delete_before(self, before_ms: int) -> int:
        async with self._db.write() as conn:
            return (
                await conn.execute(delete(alarm_event).where(alarm_event.c.add_time < before_ms))
            ).rowcount
