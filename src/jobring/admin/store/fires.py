"""Scheduled fires in the run log: rows recorded ahead of their instants, withdrawn when a
fire will not be sent, and settled when a node takes over a dead node's jobs."""

from __future__ import annotations

import builtins
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import ColumnElement, delete, or_, select, update

from jobring.admin.store.base import Repository, chunks
from jobring.admin.store.engine import utc_naive
from jobring.admin.store.tables import job_log


@dataclass(frozen=True, slots=True)
class UnconfirmedFire:
    """A scheduled fire recorded by a node that has not (yet) recorded its dispatch."""

    log_id: int
    job_id: int
    planned_time: int
    admin_node: str | None


_TRIGGER_FAILED = 500  # the protocol's failure code


def _unconfirmed() -> ColumnElement[bool]:
    # Recorded, no dispatch answer written: trigger code 0 and no dispatch time.
    return (job_log.c.trigger_code == 0) & job_log.c.dispatch_time.is_(None)


class FireRepository(Repository):
    """Scheduled fires (run-log rows with a planned instant) as the scheduler handles them."""

    async def withdraw(self, log_ids: Sequence[int]) -> int:
        """Delete fires recorded ahead that will not be sent (only rows still unconfirmed,
        so a fire already sent is never removed); returns how many. Their planned instants
        can then be recorded again."""
        removed = 0
        async with self._db.write() as conn:
            for part in chunks(list(log_ids)):
                result = await conn.execute(delete(job_log).where(job_log.c.id.in_(part), _unconfirmed()))
                removed += int(result.rowcount)
        return removed

    async def unconfirmed(
        self, job_ids: Collection[int], other_than_node: str
    ) -> builtins.list[UnconfirmedFire]:
        """The scheduled fires of ``job_ids`` recorded by nodes other than ``other_than_node``
        whose dispatch is not recorded, oldest instant first."""
        found: builtins.list[UnconfirmedFire] = []
        node = job_log.c.admin_node
        async with self._db.read() as conn:
            for part in chunks(sorted(job_ids)):
                rows = (await conn.execute(
                    select(job_log.c.id, job_log.c.job_id, job_log.c.planned_time, node)
                    .where(job_log.c.job_id.in_(part), job_log.c.planned_time.is_not(None), _unconfirmed(),
                           or_(node.is_(None), node != other_than_node)))).all()
                found.extend(UnconfirmedFire(int(r.id), int(r.job_id), int(r.planned_time), r.admin_node)
                             for r in rows)
        found.sort(key=lambda f: (f.job_id, f.planned_time))
        return found

    async def undispatched_before(self, triggered_before: datetime, limit: int = 1000) -> builtins.list[int]:
        """Ids of recorded fires (any trigger type) still undispatched that were triggered at
        or before the instant."""
        stmt = (select(job_log.c.id)
                .where(job_log.c.trigger_code == 0, job_log.c.handle_code == 0,
                       job_log.c.trigger_time <= utc_naive(triggered_before))
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
