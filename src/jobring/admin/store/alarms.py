"""Alarm events (``jobring_alarm_event``): deadline and recovery alarms, claimed once per run."""

from __future__ import annotations

from sqlalchemy import delete, insert, select, update
from sqlalchemy.exc import IntegrityError

from jobring.admin.store.base import Repository
from jobring.admin.store.tables import alarm_event


class AlarmEventRepository(Repository):
    """One row per (run, kind): inserting it is the claim, so two admin nodes never both alarm."""

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

    async def delete_before(self, before_ms: int) -> int:
        async with self._db.write() as conn:
            return (
                await conn.execute(delete(alarm_event).where(alarm_event.c.add_time < before_ms))
            ).rowcount
