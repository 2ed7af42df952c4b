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
from sqlalchemy.ext.asyncio import AsyncConnection

from jobring.admin.store.base import Repository, new_id
from jobring.admin.store.errors import Conflict, NotFound
from jobring.admin.store.tables import backfill, job_group, job_info, job_log

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


@dataclass(frozen=True, slots=True)
class BackfillCaps:
    """Running backfills allowed at once: of one job, of one group (its jobs' current group),
    and in all. The first two hold exactly (counted under the job's and the group's row
    locks); the overall cap can be passed by the groups creating at the same instant."""

    per_job: int
    per_group: int
    total: int


def _row(row: object) -> BackfillRow:
    return BackfillRow(**row._asdict())  # type: ignore[attr-defined]


def _not_ended() -> ColumnElement[bool]:
    return and_(job_log.c.handle_code == 0, job_log.c.trigger_code.in_((0, SUCCESS)))


class BackfillRepository(Repository):
    """Backfill requests, their hand-out cursor and their runs' progress."""

    async def create(
        self, job_id: int, job_group: int, request: str, instants: Sequence[BackfillInstant],
        parallelism: int, created_by: str | None, now_ms: int, *,
        group_ids: Sequence[int] | None = None, caps: BackfillCaps | None = None,
    ) -> int:
        """Store a running backfill of the job in its current group (read under the job's
        lock, so a move to another group and this insert never interleave). NotFound when the
        job is gone or its group is not in ``group_ids`` (None: any group); Conflict past
        ``caps`` (counted in the same transaction)."""
        values = {
            "job_id": job_id, "status": BackfillStatus.RUNNING.value,
            "request": request, "total": len(instants), "parallelism": parallelism, "started": 0,
            "created_by": created_by, "created_at": now_ms,
            "instants": orjson.dumps([[i.logical_ms, i.interval_start_ms] for i in instants]).decode(),
        }
        async with self._db.write(read_committed=True) as conn:
            group = await self._lock_job(conn, job_id)
            if group is None or (group_ids is not None and group not in group_ids):
                raise NotFound(f"job {job_id} not found")
            if caps is not None:
                await self._check_caps(conn, job_id, group, caps)
            return new_id(await conn.execute(insert(backfill).values(**values, job_group=group)))

    @staticmethod
    async def _lock_job(conn: AsyncConnection, job_id: int) -> int | None:
        """Lock the job's row and then its group's (SQLite: the write transaction already
        excludes every other writer); the job's group, None when the job is gone."""
        stmt = select(job_info.c.job_group).where(job_info.c.id == job_id)
        if conn.dialect.name != "sqlite":
            stmt = stmt.with_for_update()
        group = (await conn.execute(stmt)).scalar_one_or_none()
        if group is not None and conn.dialect.name != "sqlite":
            await conn.execute(select(job_group.c.id).where(job_group.c.id == group).with_for_update())
        return None if group is None else int(group)

    @staticmethod
    async def _check_caps(conn: AsyncConnection, job_id: int, group: int, caps: BackfillCaps) -> None:
        running = backfill.c.status == BackfillStatus.RUNNING.value
        of_job = (await conn.execute(
            select(func.count()).where(running, backfill.c.job_id == job_id))).scalar_one()
        if of_job >= caps.per_job:
            raise Conflict(f"job {job_id} has {of_job} running backfills (at most {caps.per_job}); "
                           "cancel one or wait")
        # The group's jobs as they are now: a backfill follows its job to another group.
        of_group = (await conn.execute(
            select(func.count()).select_from(backfill.join(job_info, job_info.c.id == backfill.c.job_id))
            .where(running, job_info.c.job_group == group))).scalar_one()
        if of_group >= caps.per_group:
            raise Conflict(f"group {group} has {of_group} running backfills (at most {caps.per_group}); "
                           "cancel one or wait")
        total = (await conn.execute(select(func.count()).where(running))).scalar_one()
        if total >= caps.total:
            raise Conflict(f"{total} backfills are running (at most {caps.total} in all); try later")

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

    async def running(self, limit: int = 500, after_id: int = 0) -> builtins.list[BackfillRow]:
        """Running backfills by id, from after ``after_id`` (a page; the caller pages on)."""
        stmt = (select(*_ROW_COLUMNS).where(backfill.c.status == BackfillStatus.RUNNING.value,
                                            backfill.c.id > after_id)
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
                  job_group: int | None = None, group_ids: Sequence[int] | None = None) -> bool:
        """Move a running backfill to ``status`` (done or cancelled); False when it had ended
        (or, with ``job_group``, belongs to another group; with ``group_ids``, its job is now in
        none of them: both checked inside the write)."""
        stmt = (
            update(backfill)
            .where(backfill.c.id == backfill_id, backfill.c.status == BackfillStatus.RUNNING.value)
            .values(status=status.value, ended_at=now_ms)
        )
        if job_group is not None:
            stmt = stmt.where(backfill.c.job_group == job_group)
        if group_ids is not None:
            stmt = stmt.where(backfill.c.job_id.in_(
                select(job_info.c.id).where(job_info.c.job_group.in_(list(group_ids)))))
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
