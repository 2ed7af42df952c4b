"""Backfills (``jobring_backfill``) and the progress of their runs in the run log.

A backfill row holds its instants in start order and a cursor, ``started``: how many of them
were handed out to be fired. A node hands out the next ones by compare-and-set on the cursor
(:meth:`BackfillRepository.hand_out`), so two admins never hand out the same instant and the
parallelism cap holds across them. A run of a backfill carries ``backfill_id``, its logical time
and its attempt under a unique key: an instant handed out twice (after a node died) is recorded
once.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

import orjson
from sqlalchemy import ColumnElement, and_, func, insert, select, update

from jobring.admin.store.base import Repository, new_id
from jobring.admin.store.tables import backfill, job_log

SUCCESS = 200


class BackfillStatus(StrEnum):
    RUNNING = "running"  # instants left to start or runs in progress
    DONE = "done"  # every instant started and every run ended
    CANCELLED = "cancelled"  # no further instant starts


@dataclass(frozen=True, slots=True)
class BackfillInstant:
    logical_ms: int
    interval_start_ms: int | None


@dataclass(frozen=True, slots=True)
class BackfillRow:
    id: int
    job_id: int
    job_group: int
    status: str
    request: str  # the request as accepted (JSON)
    total: int
    parallelism: int
    started: int
    claimed_at: int | None
    created_by: str | None
    created_at: int
    ended_at: int | None


@dataclass(frozen=True, slots=True)
class BackfillProgress:
    """The runs of a backfill as the run log has them."""

    recorded: int  # instants with a first attempt in the run log
    running: int  # runs not ended (dispatching or running; retries included)
    succeeded: int  # instants with a successful attempt
    failed: int  # instants recorded, ended, none successful (a retry may still come)


_ROW_COLUMNS = [c for c in backfill.c if c.name != "instants"]


def _row(row: object) -> BackfillRow:
    return BackfillRow(**row._asdict())  # type: ignore[attr-defined]


def _not_ended() -> ColumnElement[bool]:
    return and_(job_log.c.handle_code == 0, job_log.c.trigger_code.in_((0, SUCCESS)))


class BackfillRepository(Repository):
    """Backfill requests, their hand-out cursor and their runs' progress."""

    async def create(
        self, job_id: int, job_group: int, request: str, instants: Sequence[BackfillInstant],
        parallelism: int, created_by: str | None, now_ms: int,
    ) -> int:
        values = {
            "job_id": job_id, "job_group": job_group, "status": BackfillStatus.RUNNING.value,
            "request": request, "total": len(instants), "parallelism": parallelism, "started": 0,
            "created_by": created_by, "created_at": now_ms,
            "instants": orjson.dumps([[i.logical_ms, i.interval_start_ms] for i in instants]).decode(),
        }
        async with self._db.write() as conn:
            return new_id(await conn.execute(insert(backfill).values(**values)))

    async def get(self, backfill_id: int) -> BackfillRow | None:
        async with self._db.read() as conn:
            row = (await conn.execute(select(*_ROW_COLUMNS).where(backfill.c.id == backfill_id))).first()
        return None if row is None else _row(row)

    async def for_job(self, job_id: int, limit: int = 100) -> builtins.list[BackfillRow]:
        """The job's backfills, newest first."""
        stmt = (select(*_ROW_COLUMNS).where(backfill.c.job_id == job_id)
                .order_by(backfill.c.id.desc()).limit(limit))
        async with self._db.read() as conn:
            return [_row(r) for r in (await conn.execute(stmt)).all()]

    async def running(self, limit: int = 500) -> builtins.list[BackfillRow]:
        stmt = (select(*_ROW_COLUMNS).where(backfill.c.status == BackfillStatus.RUNNING.value)
                .order_by(backfill.c.id).limit(limit))
        async with self._db.read() as conn:
            return [_row(r) for r in (await conn.execute(stmt)).all()]

    async def instants(self, backfill_id: int) -> builtins.list[BackfillInstant]:
        """The backfill's instants in start order."""
        async with self._db.read() as conn:
            stmt = select(backfill.c.instants).where(backfill.c.id == backfill_id)
            text = (await conn.execute(stmt)).scalar()
        if text is None:
            return []
        return [BackfillInstant(int(a), None if b is None else int(b)) for a, b in orjson.loads(text)]

    async def hand_out(self, backfill_id: int, started: int, count: int, now_ms: int) -> bool:
        """Advance the cursor from ``started`` by ``count`` (the caller then fires those
        instants); False when another node moved it first or the backfill no longer runs."""
        stmt = (
            update(backfill)
            .where(backfill.c.id == backfill_id, backfill.c.started == started,
                   backfill.c.status == BackfillStatus.RUNNING.value)
            .values(started=started + count, claimed_at=now_ms)
        )
        async with self._db.write() as conn:
            return bool((await conn.execute(stmt)).rowcount)

    async def end(self, backfill_id: int, status: BackfillStatus, now_ms: int, *,
                  job_group: int | None = None) -> bool:
        """Move a running backfill to ``status`` (done or cancelled); False when it had ended
        (or, with ``job_group``, belongs to another group: checked inside the write)."""
        stmt = (
            update(backfill)
            .where(backfill.c.id == backfill_id, backfill.c.status == BackfillStatus.RUNNING.value)
            .values(status=status.value, ended_at=now_ms)
        )
        if job_group is not None:
            stmt = stmt.where(backfill.c.job_group == job_group)
        async with self._db.write() as conn:
            return bool((await conn.execute(stmt)).rowcount)

    async def progress(self, backfill_id: int) -> BackfillProgress:
        mine = job_log.c.backfill_id == backfill_id
        async with self._db.read() as conn:
            recorded = (await conn.execute(
                select(func.count()).where(mine, job_log.c.attempt == 1))).scalar_one()
            running_rows = (await conn.execute(
                select(func.count(), func.count(job_log.c.logical_time.distinct())).where(mine, _not_ended())
            )).one()
            succeeded = (await conn.execute(
                select(func.count(job_log.c.logical_time.distinct()))
                .where(mine, job_log.c.handle_code == SUCCESS)
            )).scalar_one()
        running, running_instants = int(running_rows[0]), int(running_rows[1])
        failed = max(0, int(recorded) - int(succeeded) - running_instants)
        return BackfillProgress(int(recorded), running, int(succeeded), failed)

    async def recorded_instants(self, backfill_id: int) -> set[int]:
        """The logical instants of the backfill with a first attempt in the run log."""
        stmt = select(job_log.c.logical_time).where(
            job_log.c.backfill_id == backfill_id, job_log.c.attempt == 1)
        async with self._db.read() as conn:
            return {int(v) for v in (await conn.execute(stmt)).scalars() if v is not None}

    async def running_runs(self, backfill_id: int) -> builtins.list[int]:
        """Ids of the backfill's runs not ended."""
        stmt = select(job_log.c.id).where(job_log.c.backfill_id == backfill_id, _not_ended())
        async with self._db.read() as conn:
            return [int(v) for v in (await conn.execute(stmt)).scalars()]
