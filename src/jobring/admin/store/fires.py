"""Scheduled fires in the run log: rows recorded ahead of their instants, withdrawn when a
fire will not be sent, and settled when a node takes over a dead node's jobs."""

from __future__ import annotations

import builtins
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import ColumnElement, and_, delete, func, or_, select, update

from jobring.admin.store.base import Repository, chunks, to_record
from jobring.admin.store.engine import utc_naive
from jobring.admin.store.records import LogEntry
from jobring.admin.store.tables import job_info, job_log
from jobring.core.runstate import QUEUED_PREFIX


@dataclass(frozen=True, slots=True)
class RecordedFire:
    """A scheduled fire in the run log; ``confirmed`` once its dispatch answer is recorded."""

    log_id: int
    job_id: int
    planned_time: int
    admin_node: str | None
    confirmed: bool


_TRIGGER_FAILED = 500  # the protocol's failure code


def _not_queued() -> ColumnElement[bool]:
    # A run flow control holds back was never sent, and is not lost: it waits for room.
    return ~func.coalesce(job_log.c.trigger_msg, "").like(QUEUED_PREFIX + "%")


def _unconfirmed() -> ColumnElement[bool]:
    # Recorded, no dispatch answer written: trigger code 0 and no dispatch time.
    return (job_log.c.trigger_code == 0) & job_log.c.dispatch_time.is_(None)


class FireRepository(Repository):
    """Scheduled fires (run-log rows with a planned instant) as the scheduler handles them."""

    async def withdraw(self, log_ids: Sequence[int], holder: str) -> int:
        """Delete fires recorded ahead that will not be sent; returns how many. Only rows still
        unconfirmed (a fire already sent is never removed) of jobs leased to ``holder``: a
        node that lost a job's lease leaves its rows to the node that took the job over. The
        planned instants of the deleted rows can be recorded again."""
        removed = 0
        held = select(job_info.c.id).where(job_info.c.lease_owner == holder)
        async with self._db.write() as conn:
            for part in chunks(list(log_ids)):
                result = await conn.execute(delete(job_log).where(
                    job_log.c.id.in_(part), _unconfirmed(), _not_queued(), job_log.c.job_id.in_(held)))
                removed += int(result.rowcount)
        return removed

    async def recorded_since(
        self, since: Mapping[int, int], other_than_node: str
    ) -> builtins.list[RecordedFire]:
        """The scheduled fires of each job in ``since`` (job id -> instant) planned at or after
        that instant and recorded by nodes other than ``other_than_node``, per job oldest
        first (read through the unique key on job id + planned time)."""
        found: builtins.list[RecordedFire] = []
        node = job_log.c.admin_node
        columns = (job_log.c.id, job_log.c.job_id, job_log.c.planned_time, node,
                   job_log.c.trigger_code, job_log.c.dispatch_time, job_log.c.trigger_msg)
        async with self._db.read() as conn:
            for part in chunks(sorted(since.items()), 100):
                stmt = select(*columns).where(
                    or_(*(and_(job_log.c.job_id == job_id, job_log.c.planned_time >= start)
                          for job_id, start in part)),
                    or_(node.is_(None), node != other_than_node))
                found.extend(
                    RecordedFire(int(r.id), int(r.job_id), int(r.planned_time), r.admin_node,
                                 r.trigger_code != 0 or r.dispatch_time is not None
                                 # queued: flow control sends it, never the takeover
                                 or (r.trigger_msg or "").startswith(QUEUED_PREFIX))
                    for r in (await conn.execute(stmt)).all())
        found.sort(key=lambda f: (f.job_id, f.planned_time))
        return found

    async def still_unconfirmed(self, log_ids: Sequence[int]) -> builtins.list[LogEntry]:
        """The rows among ``log_ids`` that still have neither a dispatch answer nor a result
        (a callback may arrive before the trigger result is written)."""
        found: builtins.list[LogEntry] = []
        async with self._db.read() as conn:
            for part in chunks(sorted(set(log_ids))):
                rows = await conn.execute(select(job_log).where(
                    job_log.c.id.in_(part), _unconfirmed(), job_log.c.handle_code == 0, _not_queued()))
                found.extend(to_record(LogEntry, r) for r in rows.all())
        return found

    async def undispatched_before(
        self, triggered_before: datetime, limit: int = 1000, *, after_id: int = 0
    ) -> builtins.list[int]:
        """Ids (above ``after_id``) of recorded fires (any trigger type) still undispatched
        that were triggered at or before the instant."""
        stmt = (select(job_log.c.id)
                .where(job_log.c.id > after_id, job_log.c.trigger_code == 0, job_log.c.handle_code == 0,
                       job_log.c.trigger_time <= utc_naive(triggered_before), _not_queued())
                .order_by(job_log.c.id).limit(limit))
        async with self._db.read() as conn:
            return [int(i) for i in (await conn.execute(stmt)).scalars()]

    async def fail_unconfirmed(self, log_ids: Sequence[int], message: str) -> int:
        """Mark recorded fires whose dispatch never got recorded as trigger failures (so the
        fail monitor retries and alarms them). Conditional on trigger code 0: a dispatch
        answer recorded meanwhile is kept. Returns how many were marked."""
        changed = 0
        async with self._db.write() as conn:
            for part in chunks(list(log_ids)):
                result = await conn.execute(
                    update(job_log).where(job_log.c.id.in_(part), job_log.c.trigger_code == 0)
                    .values(trigger_code=_TRIGGER_FAILED, trigger_msg=message))
                changed += int(result.rowcount)
        return changed
