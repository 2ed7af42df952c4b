"""Delayed one-shot fires (``jobring_delayed_fire``): runs asked for a later instant."""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from dataclasses import dataclass

import orjson
from sqlalchemy import delete, func, insert, select

from jobring.admin.store.base import Repository, chunks, new_id
from jobring.admin.store.tables import delayed_fire


@dataclass(frozen=True, slots=True)
class DelayedFire:
    """A run of ``job_id`` to fire once at ``fire_at`` (epoch ms)."""

    id: int
    job_id: int
    job_group: int
    fire_at: int
    executor_param: str | None
    addresses: list[str] | None
    created_by: str | None
    created_at: int

    @property
    def planned_time(self) -> int:
        """The run-log identity of this fire: negative, so it never meets a scheduled instant."""
        return -self.id


def _record(row: object) -> DelayedFire:
    values = dict(row._asdict())  # type: ignore[attr-defined]
    raw = values.pop("addresses")
    return DelayedFire(**values, addresses=None if raw is None else list(orjson.loads(raw)))


class DelayedFireRepository(Repository):
    """Pending delayed fires. A fire is removed once recorded in the run log (or cancelled)."""

    async def add(
        self, job_id: int, job_group: int, fire_at: int, executor_param: str | None,
        addresses: Sequence[str] | None, created_by: str | None, created_at: int,
    ) -> int:
        """Record a delayed fire; returns its id."""
        values = {
            "job_id": job_id, "job_group": job_group, "fire_at": fire_at,
            "executor_param": executor_param, "created_by": created_by, "created_at": created_at,
            "addresses": None if addresses is None else orjson.dumps(list(addresses)).decode(),
        }
        async with self._db.write() as conn:
            return new_id(await conn.execute(insert(delayed_fire).values(**values)))

    async def get(self, fire_id: int) -> DelayedFire | None:
        async with self._db.read() as conn:
            row = (await conn.execute(select(delayed_fire).where(delayed_fire.c.id == fire_id))).first()
        return None if row is None else _record(row)

    async def for_job(self, job_id: int, limit: int = 500) -> builtins.list[DelayedFire]:
        """The job's pending fires, soonest first."""
        stmt = (select(delayed_fire).where(delayed_fire.c.job_id == job_id)
                .order_by(delayed_fire.c.fire_at, delayed_fire.c.id).limit(limit))
        async with self._db.read() as conn:
            return [_record(r) for r in (await conn.execute(stmt)).all()]

    async def pending(
        self, group_ids: Sequence[int] | None = None, job_id: int | None = None, limit: int = 500
    ) -> builtins.list[DelayedFire]:
        """Pending fires of these groups (None: every group) or of one job, soonest first."""
        stmt = select(delayed_fire)
        if group_ids is not None:
            stmt = stmt.where(delayed_fire.c.job_group.in_(list(group_ids)))
        if job_id is not None:
            stmt = stmt.where(delayed_fire.c.job_id == job_id)
        stmt = stmt.order_by(delayed_fire.c.fire_at, delayed_fire.c.id).limit(limit)
        async with self._db.read() as conn:
            return [_record(r) for r in (await conn.execute(stmt)).all()]

    async def count_for_job(self, job_id: int) -> int:
        stmt = select(func.count()).select_from(delayed_fire).where(delayed_fire.c.job_id == job_id)
        async with self._db.read() as conn:
            return int((await conn.execute(stmt)).scalar_one())

    async def due(self, until_ms: int, limit: int = 500) -> builtins.list[DelayedFire]:
        """Pending fires at or before ``until_ms``, soonest first (read through ``ix_delayed_fire_at``)."""
        stmt = (select(delayed_fire).where(delayed_fire.c.fire_at <= until_ms)
                .order_by(delayed_fire.c.fire_at, delayed_fire.c.id).limit(limit))
        async with self._db.read() as conn:
            return [_record(r) for r in (await conn.execute(stmt)).all()]

    async def remove(self, fire_ids: Sequence[int]) -> int:
        """Delete these fires (idempotent); returns how many existed."""
        removed = 0
        async with self._db.write() as conn:
            for part in chunks(list(fire_ids)):
                result = await conn.execute(delete(delayed_fire).where(delayed_fire.c.id.in_(part)))
                removed += int(result.rowcount)
        return removed

    async def remove_for_job(self, job_id: int) -> int:
        """Delete every pending fire of the job (it was deleted)."""
        async with self._db.write() as conn:
            result = await conn.execute(delete(delayed_fire).where(delayed_fire.c.job_id == job_id))
            return int(result.rowcount)
