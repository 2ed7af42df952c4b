"""Named calendars (``jobring_calendar``): the times jobs must not fire (issue 24).

A calendar's ``spec`` is the normalised JSON of :func:`jobring.core.timing.parse_calendar`;
the store keeps it as text and does not interpret it. ``job_group`` None: a global calendar.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import delete, func, insert, not_, select, update
from sqlalchemy.exc import IntegrityError

from jobring.admin.store.base import Repository, like_pattern, new_id
from jobring.admin.store.errors import Conflict
from jobring.admin.store.tables import calendar, job_info, job_log
from jobring.core.runstate import SKIP_PREFIX


@dataclass(frozen=True, slots=True)
class CalendarRow:
    """A stored calendar: ``spec`` is its JSON text, ``update_time`` epoch ms."""

    id: int
    name: str
    job_group: int | None
    spec: str
    update_time: int
    updated_by: str | None


def _record(row: object) -> CalendarRow:
    return CalendarRow(**row._asdict())  # type: ignore[attr-defined]


class CalendarRepository(Repository):
    """Calendars by id and name; names are unique across groups (jobs reference them by name)."""

    async def create(self, name: str, job_group: int | None, spec: str, now_ms: int, by: str | None) -> int:
        """Store a calendar; Conflict when the name is taken."""
        values = {"name": name, "job_group": job_group, "spec": spec, "update_time": now_ms, "updated_by": by}
        try:
            async with self._db.write() as conn:
                return new_id(await conn.execute(insert(calendar).values(**values)))
        except IntegrityError as exc:
            raise Conflict(f"a calendar named {name!r} already exists") from exc

    async def get(self, calendar_id: int) -> CalendarRow | None:
        async with self._db.read() as conn:
            row = (await conn.execute(select(calendar).where(calendar.c.id == calendar_id))).first()
        return None if row is None else _record(row)

    async def by_names(self, names: Sequence[str]) -> builtins.list[CalendarRow]:
        """The calendars with these names (those that exist), by name."""
        if not names:
            return []
        stmt = select(calendar).where(calendar.c.name.in_(list(names))).order_by(calendar.c.name)
        async with self._db.read() as conn:
            return [_record(r) for r in (await conn.execute(stmt)).all()]

    async def list(self, group_ids: Sequence[int] | None = None) -> builtins.list[CalendarRow]:
        """Global calendars and those of ``group_ids`` (None: every calendar), by name."""
        stmt = select(calendar)
        if group_ids is not None:
            stmt = stmt.where(calendar.c.job_group.is_(None) | calendar.c.job_group.in_(list(group_ids)))
        async with self._db.read() as conn:
            return [_record(r) for r in (await conn.execute(stmt.order_by(calendar.c.name))).all()]

    async def version(self) -> tuple[int, int]:
        """(count, latest update time): changes whenever a calendar is added, edited or removed
        (a removal lowers the count; an edit raises the time). The scheduling loop polls it."""
        stmt = select(func.count(), func.coalesce(func.max(calendar.c.update_time), 0)).select_from(calendar)
        async with self._db.read() as conn:
            count, latest = (await conn.execute(stmt)).one()
        return int(count), int(latest)

    async def update(self, calendar_id: int, spec: str, now_ms: int, by: str | None) -> bool:
        """Replace a calendar's spec (its name and group stay); False when it does not exist."""
        stmt = (update(calendar).where(calendar.c.id == calendar_id)
                .values(spec=spec, update_time=now_ms, updated_by=by))
        async with self._db.write() as conn:
            return int((await conn.execute(stmt)).rowcount) > 0

    async def delete(self, calendar_id: int) -> bool:
        async with self._db.write() as conn:
            result = await conn.execute(delete(calendar).where(calendar.c.id == calendar_id))
            return int(result.rowcount) > 0

    async def jobs_using(self, name: str) -> builtins.list[int]:
        """Ids of the jobs whose timing has the JSON string ``"name"`` (a text match: a job with
        another value spelled like the name is returned too; touching it is harmless)."""
        needle = like_pattern(f'"{name}"')
        stmt = select(job_info.c.id).where(job_info.c.timing.like(needle, escape="\\"))
        async with self._db.read() as conn:
            return [int(r[0]) for r in (await conn.execute(stmt.order_by(job_info.c.id))).all()]

    async def touch_jobs(self, job_ids: Sequence[int], now: datetime) -> None:
        """Set the jobs' update time: the scheduling loop re-plans a held job whose row changed
        (here, because a calendar it uses did)."""
        if not job_ids:
            return
        async with self._db.write() as conn:
            stmt = update(job_info).where(job_info.c.id.in_(list(job_ids))).values(update_time=now)
            await conn.execute(stmt)

    async def runs_before(self, job_id: int, before_ms: int) -> int:
        """The job's scheduled runs planned before ``before_ms`` (what ``max_runs`` counts):
        its run-log rows with a planned instant, skips (calendar, overlap, catch-up) left out."""
        stmt = (
            select(func.count()).select_from(job_log)
            .where(job_log.c.job_id == job_id, job_log.c.planned_time > 0, job_log.c.planned_time < before_ms,
                   not_(func.coalesce(job_log.c.trigger_msg, "").like(SKIP_PREFIX + "%")))
        )
        async with self._db.read() as conn:
            return int((await conn.execute(stmt)).scalar_one())
