"""Jobs (``xxl_job_info``): CRUD, listing, and the lease-based claiming of due jobs."""

from __future__ import annotations

import builtins
import operator
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, replace
from typing import Any

from sqlalchemy import ColumnElement, Select, delete, func, insert, or_, select, update

from jobring.admin.store.base import (
    UPDATE_CHUNK,
    Repository,
    chunks,
    fetch_page,
    like_pattern,
    new_id,
    to_record,
    update_rows,
)
from jobring.admin.store.engine import utc_naive
from jobring.admin.store.errors import Conflict, NotFound
from jobring.admin.store.records import HeldJobs, JobInfo, JobSort, Page
from jobring.admin.store.tables import job_info
from jobring.core.enums import ManagedBy

_LEASE_FIELDS = ("id", "lease_owner", "lease_until", "add_time")
# What changes on a job row without its update_time changing (the loop's own writes, start/
# stop, GLUE saves): with update_time, a cached row whose values here match is still current.
_SIGNATURE = ("update_time", "glue_updatetime", "trigger_status", "trigger_next_time", "trigger_last_time")
_signature = operator.attrgetter(*_SIGNATURE)
_signature_select = select(job_info.c.id, *(job_info.c[name] for name in _SIGNATURE))
_ADVANCE_SHAPES = (4, 8, 16, 32, 64, UPDATE_CHUNK)
_DATETIME_FIELDS = ("add_time", "update_time", "glue_updatetime")
_CODE = ManagedBy.CODE.value


def _described(expect: Mapping[str, Any]) -> str:
    return ", ".join(f"{name} {value}" for name, value in expect.items())


def _retired(cutoff_ms: int) -> tuple[ColumnElement[bool], ...]:
    return (job_info.c.managed_by == _CODE, job_info.c.declared_by_executor == 0,
            job_info.c.declared_retired_at.is_not(None), job_info.c.declared_retired_at <= cutoff_ms)


def _values(job: JobInfo, exclude: Iterable[str]) -> dict[str, Any]:
    values = {k: v for k, v in asdict(job).items() if k not in exclude}
    for name in _DATETIME_FIELDS:
        if values.get(name) is not None:
            values[name] = utc_naive(values[name])
    return values


_SORTS = {
    JobSort.ID_DESC: (job_info.c.id.desc(),),
    JobSort.ID_ASC: (job_info.c.id.asc(),),
    JobSort.NEXT_TIME: (job_info.c.trigger_next_time.asc(), job_info.c.id.asc()),
    JobSort.DESC: (job_info.c.job_desc.asc(), job_info.c.id.asc()),
}


class JobRepository(Repository):
    """Jobs. Leases (``lease_owner``/``lease_until``) are only written by the claim methods."""

    async def get(self, job_id: int) -> JobInfo | None:
        """The job, or ``None``."""
        async with self._db.read() as conn:
            row = (await conn.execute(select(job_info).where(job_info.c.id == job_id))).first()
        return None if row is None else to_record(JobInfo, row)

    async def get_many(self, job_ids: Iterable[int]) -> dict[int, JobInfo]:
        """The jobs that exist among ``job_ids``, by id."""
        ids = sorted(set(job_ids))
        found: dict[int, JobInfo] = {}
        async with self._db.read() as conn:
            for part in chunks(ids):
                rows = (await conn.execute(select(job_info).where(job_info.c.id.in_(part)))).all()
                found.update({r.id: to_record(JobInfo, r) for r in rows})
        return found

    async def create(self, job: JobInfo) -> int:
        """Insert ``job`` (its ``id`` and lease fields are ignored); returns the new id."""
        values = _values(job, ("id", "lease_owner", "lease_until"))
        async with self._db.write() as conn:
            result = await conn.execute(insert(job_info).values(**values))
            return new_id(result)

    async def update(self, job: JobInfo, *, expect: Mapping[str, Any] | None = None) -> None:
        """Write every field of ``job`` except id, add_time and the lease; NotFound if absent.
        ``expect``: column values the stored row must still have (checked in the same
        statement), else Conflict and nothing is written."""
        values = _values(job, _LEASE_FIELDS)
        conditions = [job_info.c[name] == value for name, value in (expect or {}).items()]
        async with self._db.write() as conn:
            result = await conn.execute(
                update(job_info).where(job_info.c.id == job.id, *conditions).values(**values))
            if result.rowcount == 0 and conditions:
                exists = (await conn.execute(select(job_info.c.id).where(job_info.c.id == job.id))).first()
                if exists is not None:
                    raise Conflict(f"job {job.id} changed meanwhile (no longer {_described(expect or {})})")
            if result.rowcount == 0:
                raise NotFound(f"job {job.id} does not exist")

    async def delete(self, job_id: int) -> bool:
        """Delete the job; False when it did not exist. (Its logs and GLUE history stay.)"""
        async with self._db.write() as conn:
            result = await conn.execute(delete(job_info).where(job_info.c.id == job_id))
            return result.rowcount > 0

    async def list(
        self,
        *,
        group_ids: Sequence[int] | None = None,
        trigger_status: int | None = None,
        desc: str | None = None,
        handler: str | None = None,
        author: str | None = None,
        offset: int = 0,
        limit: int = 20,
        sort: JobSort = JobSort.ID_DESC,
    ) -> Page[JobInfo]:
        """A page of jobs. ``group_ids`` restricts to those groups (empty list: nothing);
        ``desc``/``handler``/``author`` are substring filters; ``trigger_status`` exact."""
        where: builtins.list[ColumnElement[bool]] = []
        if group_ids is not None:
            where.append(job_info.c.job_group.in_(list(group_ids)))
        if trigger_status is not None:
            where.append(job_info.c.trigger_status == trigger_status)
        for column, text in (
            (job_info.c.job_desc, desc),
            (job_info.c.executor_handler, handler),
            (job_info.c.author, author),
        ):
            if text:
                where.append(column.like(like_pattern(text), escape="\\"))
        async with self._db.read() as conn:
            return await fetch_page(conn, job_info, JobInfo, where, _SORTS[sort], offset, limit)

    async def set_status(
        self, job_id: int, status: int, next_time: int, *, last_time: int | None = None,
        pause_note: str | None = None, clear_note: bool = False,
    ) -> None:
        """Start/stop a job: set trigger_status and trigger_next_time (and optionally last);
        ``pause_note`` (JSON) records a pause, ``clear_note`` forgets it (a start)."""
        values: dict[str, Any] = {"trigger_status": status, "trigger_next_time": next_time}
        if last_time is not None:
            values["trigger_last_time"] = last_time
        if pause_note is not None or clear_note:
            values["pause_note"] = pause_note
        async with self._db.write() as conn:
            result = await conn.execute(update(job_info).where(job_info.c.id == job_id).values(**values))
            if result.rowcount == 0:
                raise NotFound(f"job {job_id} does not exist")

    async def count_due(self, window_end_ms: int) -> int:
        """How many running jobs are due by ``window_end_ms`` (read through ``ix_job_info_due``)."""
        stmt = select(func.count()).select_from(job_info).where(
            job_info.c.trigger_status == 1, job_info.c.trigger_next_time <= window_end_ms)
        async with self._db.read() as conn:
            return int((await conn.execute(stmt)).scalar_one())

    async def with_deadline(self) -> builtins.list[JobInfo]:
        """Jobs that have a deadline alarm (``deadline_minutes`` set)."""
        async with self._db.read() as conn:
            stmt = select(job_info).where(job_info.c.deadline_minutes.is_not(None))
            rows = (await conn.execute(stmt)).all()
        return [to_record(JobInfo, r) for r in rows]
    async def in_group(self, group_id: int) -> builtins.list[JobInfo]:
        """Every job of the group, by id."""
        stmt = select(job_info).where(job_info.c.job_group == group_id).order_by(job_info.c.id)
        async with self._db.read() as conn:
            return [to_record(JobInfo, r) for r in (await conn.execute(stmt)).all()]

    async def count_in_group(self, group_id: int) -> int:
        """How many jobs belong to the group."""
        page = await self.list(group_ids=[group_id], limit=1)
        return page.total

    async def count_managed_by_code(self, group_id: int) -> int:
        """How many jobs of the group its executor's declarations manage (retired ones too)."""
        stmt = select(func.count()).select_from(job_info).where(
            job_info.c.job_group == group_id, job_info.c.managed_by == _CODE)
        async with self._db.read() as conn:
            return int((await conn.execute(stmt)).scalar_one())

    async def retired_before(self, cutoff_ms: int, limit: int = 100) -> builtins.list[JobInfo]:
        """Jobs managed by code that the code stopped declaring at or before ``cutoff_ms``."""
        stmt = (select(job_info).where(*_retired(cutoff_ms))
                .order_by(job_info.c.declared_retired_at, job_info.c.id).limit(limit))
        async with self._db.read() as conn:
            return [to_record(JobInfo, r) for r in (await conn.execute(stmt)).all()]

    async def delete_retired(self, job_id: int, cutoff_ms: int) -> bool:
        """Delete the job if it is still retired since ``cutoff_ms`` or earlier (not declared
        again, not taken back by an admin in the meantime); True when deleted."""
        async with self._db.write() as conn:
            result = await conn.execute(delete(job_info).where(job_info.c.id == job_id, *_retired(cutoff_ms)))
            return result.rowcount > 0

    async def children(self, job_id: int) -> builtins.list[JobInfo]:
        """The existing jobs listed in this job's ``child_jobid`` (in that order)."""
        job = await self.get(job_id)
        if job is None:
            return []
        found = await self.get_many(job.child_job_ids)
        return [found[i] for i in job.child_job_ids if i in found]

    async def parents(self, job_id: int) -> builtins.list[JobInfo]:
        """Jobs whose ``child_jobid`` lists ``job_id``."""
        needle = str(job_id)
        stmt = select(job_info).where(job_info.c.child_jobid.like(f"%{needle}%")).order_by(job_info.c.id)
        async with self._db.read() as conn:
            rows = (await conn.execute(stmt)).all()
        jobs = [to_record(JobInfo, r) for r in rows]
        return [j for j in jobs if job_id in j.child_job_ids]

    # -- claiming due jobs -------------------------------------------------------------

    async def claim_due(
        self, node_id: str, now_ms: int, window_end_ms: int, lease_ms: int, limit: int,
        *, new_only: bool = False,
    ) -> builtins.list[JobInfo]:
        """Lease up to ``limit`` running jobs due by ``window_end_ms`` to ``node_id``.

        A job is claimable when its lease expired (``lease_until < now_ms``) or is already
        ours (renewed here; with ``new_only``, only expired ones: a node renews its own with
        :meth:`renew_held`). Rows are locked with ``FOR UPDATE SKIP LOCKED`` where the server
        supports it (PostgreSQL, MariaDB 10.6+, MySQL 8), so concurrent nodes get disjoint
        sets; SQLite takes its single write lock (BEGIN IMMEDIATE). Oldest
        ``trigger_next_time`` first, read through ``ix_job_info_due``. Returns the jobs with
        the new lease.
        """
        if limit <= 0:
            return []
        caps = await self._db.capabilities()
        until = now_ms + lease_ms
        stmt = due_statement(node_id, now_ms, window_end_ms, limit, caps.backend, caps.skip_locked,
                             new_only=new_only)
        async with self._db.write(read_committed=True) as conn:
            rows = (await conn.execute(stmt)).all()
            if not rows:
                return []
            for part in chunks([r.id for r in rows]):
                await conn.execute(
                    update(job_info)
                    .where(job_info.c.id.in_(part))
                    .values(lease_owner=node_id, lease_until=until)
                )
        return [_with_lease(to_record(JobInfo, r), node_id, until) for r in rows]

    async def renew_held(self, node_id: str, until_ms: int, known: Mapping[int, JobInfo]) -> HeldJobs:
        """Extend every lease ``node_id`` holds to ``until_ms`` and say what it holds.

        ``known``: the rows the caller has (by id). Only jobs not among them, or whose row
        changed since (update time, GLUE time, status, last/next time differ), are read in
        full: a node renewing a thousand held jobs every second reads a few narrow columns
        of each and the whole row of the few that changed. Statements have a fixed shape
        (no id lists), so the database's prepared statements are reused.
        """
        held = job_info.c.lease_owner == node_id
        async with self._db.write(read_committed=True) as conn:
            await conn.execute(update(job_info).where(held).values(lease_until=until_ms))
            rows = (await conn.execute(_signature_select.where(held))).all()
            ids = frozenset(r[0] for r in rows)
            stale: builtins.list[int] = []
            for r in rows:
                mine = known.get(r[0])
                if mine is None or _signature(mine) != tuple(r[1:]):
                    stale.append(r[0])
            changed: builtins.list[JobInfo] = []
            for part in chunks(stale):
                fresh = (await conn.execute(select(job_info).where(job_info.c.id.in_(part)))).all()
                changed.extend(_with_lease(to_record(JobInfo, r), node_id, until_ms) for r in fresh)
        return HeldJobs(ids, changed)

    async def advance(self, node_id: str, updates: Sequence[tuple[int, int, int]]) -> int:
        """Apply ``(job_id, trigger_last_time, trigger_next_time)`` for jobs ``node_id`` holds.

        Rows whose lease moved to another node are left alone. Returns how many applied.
        """
        rows = {
            job_id: {"trigger_last_time": last, "trigger_next_time": nxt} for job_id, last, nxt in updates
        }
        if not rows:
            return 0
        # Padded with ids that cannot exist to a few statement sizes: each size is compiled once.
        count = len(rows)
        size = next((n for n in _ADVANCE_SHAPES if n >= count), -(-count // UPDATE_CHUNK) * UPDATE_CHUNK)
        filler = next(iter(rows.values()))
        for k in range(1, size - count + 1):
            rows[-k] = filler
        async with self._db.write(read_committed=True) as conn:
            applied = await update_rows(conn, job_info, rows, match={"lease_owner": node_id})
        return applied

    async def renew_leases(self, node_id: str, job_ids: Sequence[int], until_ms: int) -> int:
        """Extend ``node_id``'s leases on ``job_ids`` to ``until_ms``; returns how many it still held."""
        return await self._set_lease(node_id, job_ids, {"lease_until": until_ms})

    async def release(self, node_id: str, job_ids: Sequence[int]) -> int:
        """Give up ``node_id``'s leases on ``job_ids``; returns how many were released."""
        return await self._set_lease(node_id, job_ids, {"lease_owner": None, "lease_until": 0})

    async def _set_lease(self, node_id: str, job_ids: Sequence[int], values: dict[str, Any]) -> int:
        count = 0
        async with self._db.write(read_committed=True) as conn:
            for part in chunks(list(job_ids)):
                result = await conn.execute(
                    update(job_info)
                    .where(job_info.c.id.in_(part), job_info.c.lease_owner == node_id)
                    .values(**values)
                )
                count += result.rowcount
        return count


def due_statement(
    node_id: str, now_ms: int, window_end_ms: int, limit: int, backend: str, skip_locked: bool,
    *, new_only: bool = False,
) -> Select[Any]:
    """The due-job scan of ``claim_due`` (exposed so tests can EXPLAIN it)."""
    claimable = job_info.c.lease_until < now_ms
    stmt = (
        select(job_info)
        .where(
            job_info.c.trigger_status == 1,
            job_info.c.trigger_next_time <= window_end_ms,
            claimable if new_only else or_(claimable, job_info.c.lease_owner == node_id),
        )
        .order_by(job_info.c.trigger_next_time)
        .limit(limit)
    )
    if backend != "sqlite":
        stmt = stmt.with_for_update(skip_locked=skip_locked)
    return stmt


def _with_lease(job: JobInfo, owner: str, until: int) -> JobInfo:
    return replace(job, lease_owner=owner, lease_until=until)
