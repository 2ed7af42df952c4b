"""Workflow schedules (``jobring_workflow_schedule``): one row at most per workflow.

Several admins sweep the same rows: a planned instant is fired by the admin whose
compare-and-set moves ``next_fire_at`` on from it (:meth:`WorkflowScheduleRepository.claim`),
and a fire waiting under the ``queue_one`` overlap rule is started by the one whose
compare-and-set clears ``queued_at`` (:meth:`WorkflowScheduleRepository.take_queued`).
"""

from __future__ import annotations

import builtins
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
from sqlalchemy import and_, case, delete, func, insert, or_, select, update
from sqlalchemy.exc import IntegrityError

from jobring.admin.store.base import Repository, chunks
from jobring.admin.store.tables import workflow_schedule
from jobring.admin.store.workflow_definitions import lock_workflow_row
from jobring.admin.store.workflow_records import WorkflowGone

__all__ = ["WorkflowSchedule", "WorkflowScheduleRepository"]


@dataclass(frozen=True, slots=True)
class WorkflowSchedule:
    """A workflow's schedule; ``next_fire_at`` 0: nothing planned (stopped, or manual only)."""

    workflow_id: int
    schedule_type: str
    schedule_conf: str
    time_zone: str | None
    misfire_strategy: str
    overlap: str
    enabled: bool
    updated_at: int
    params: Mapping[str, Any] = field(default_factory=dict)
    next_fire_at: int = 0
    queued_at: int = 0
    last_fire_at: int = 0
    last_result: str = ""
    updated_by: str | None = None
    managed_by: str | None = None  # "code": declared with its workflow in an executor's code


def _record(row: Any) -> WorkflowSchedule:
    values = dict(row._asdict())
    raw = values.pop("params")
    values["enabled"] = bool(values["enabled"])
    return WorkflowSchedule(**values, params=orjson.loads(raw) if raw else {})


class WorkflowScheduleRepository(Repository):
    """Workflow schedules and the claims that fire them."""

    async def get(self, workflow_id: int) -> WorkflowSchedule | None:
        stmt = select(workflow_schedule).where(workflow_schedule.c.workflow_id == workflow_id)
        async with self._db.read() as conn:
            row = (await conn.execute(stmt)).first()
        return None if row is None else _record(row)

    async def get_many(self, workflow_ids: Collection[int]) -> dict[int, WorkflowSchedule]:
        out: dict[int, WorkflowSchedule] = {}
        async with self._db.read() as conn:
            for part in chunks(list(workflow_ids)):
                stmt = select(workflow_schedule).where(workflow_schedule.c.workflow_id.in_(part))
                for row in (await conn.execute(stmt)).all():
                    record = _record(row)
                    out[record.workflow_id] = record
        return out

    async def put(self, schedule: WorkflowSchedule, *, unless_managed_by: str | None = None,
                  owner_group: int | None = None) -> bool:
        """Store ``schedule`` in place of the workflow's current one (a waiting fire is dropped).
        A stored schedule keeps its ``last_fire_at`` and ``last_result``: they are the sweep's,
        and a fire it records while the caller edits must not be undone by the caller's copy.
        ``unless_managed_by``: store nothing and return False when the current one is managed
        by that, checked in the write (a declaration stored since the caller read it stays).
        ``owner_group``: :class:`WorkflowGone` unless the workflow is (still) in that group,
        checked in the write with its row locked (the caller's permission check was made on
        that group; a deletion or a move to another group since then wins)."""
        settings = {
            "schedule_type": schedule.schedule_type,
            "schedule_conf": schedule.schedule_conf,
            "time_zone": schedule.time_zone,
            "misfire_strategy": schedule.misfire_strategy,
            "overlap": schedule.overlap,
            "params": orjson.dumps(dict(schedule.params)).decode(),
            "enabled": int(schedule.enabled),
            "next_fire_at": schedule.next_fire_at,
            "queued_at": 0,
            "updated_by": schedule.updated_by,
            "updated_at": schedule.updated_at,
            "managed_by": schedule.managed_by,
        }
        c = workflow_schedule.c
        replaced = [c.workflow_id == schedule.workflow_id]
        if unless_managed_by is not None:
            replaced.append(or_(c.managed_by.is_(None), c.managed_by != unless_managed_by))
        planned = schedule.next_fire_at
        # An instant the sweep fired since the caller planned it (read before it came) is not
        # planned again: the sweep's next one stays. Decided in the write, on the row as stored
        # (a stopped or spent schedule, next 0, takes the caller's instant).
        fired_since = and_(c.next_fire_at > 0, c.last_fire_at >= planned)
        next_fire_at = case((fired_since, c.next_fire_at), else_=planned) if planned else 0
        try:
            # An update, else an insert: one portable upsert. A stored row counts as matched
            # even when nothing changes (SQLAlchemy connects to MySQL with CLIENT.FOUND_ROWS).
            async with self._db.write() as conn:
                # Exclusive: a deletion or a group move waits for this write, and so does another
                # put of this schedule (two first puts at once would both insert: one would fail).
                wid = schedule.workflow_id
                if owner_group is not None and not await lock_workflow_row(conn, wid, group=owner_group):
                    raise WorkflowGone(f"workflow {wid} does not exist in group {owner_group}")
                updated = await conn.execute(update(workflow_schedule).where(*replaced)
                                             .values(**{**settings, "next_fire_at": next_fire_at}))
                if updated.rowcount:
                    return True
                # A row kept by the condition (or inserted meanwhile) makes this insert fail.
                await conn.execute(insert(workflow_schedule).values(
                    workflow_id=schedule.workflow_id, last_fire_at=schedule.last_fire_at,
                    last_result=schedule.last_result, **settings))
        except IntegrityError:
            current = await self.get(schedule.workflow_id)
            if unless_managed_by is None or current is None or current.managed_by != unless_managed_by:
                raise
            return False
        return True

    async def delete(self, workflow_id: int) -> bool:
        async with self._db.write() as conn:
            result = await conn.execute(
                delete(workflow_schedule).where(workflow_schedule.c.workflow_id == workflow_id)
            )
        return bool(result.rowcount)

    async def set_managed_by(self, workflow_id: int, managed_by: str | None) -> None:
        """Hand the schedule to the code ("code") or to the console (None)."""
        stmt = (
            update(workflow_schedule)
            .where(workflow_schedule.c.workflow_id == workflow_id)
            .values(managed_by=managed_by)
        )
        async with self._db.write() as conn:
            await conn.execute(stmt)

    async def due(self, now_ms: int, limit: int = 100) -> builtins.list[WorkflowSchedule]:
        """Started schedules whose planned instant has come, and fires waiting for a run to end:
        two reads, each with its own ``limit``, so waiting fires never hide a due instant."""
        c = workflow_schedule.c
        instants = (
            select(workflow_schedule)
            .where(c.enabled == 1, c.next_fire_at > 0, c.next_fire_at <= now_ms)
            .order_by(c.next_fire_at)
            .limit(limit)
        )
        waiting = select(workflow_schedule).where(c.queued_at > 0).order_by(c.queued_at).limit(limit)
        async with self._db.read() as conn:
            rows = [_record(r) for r in (await conn.execute(instants)).all()]
            seen = {r.workflow_id for r in rows}
            queued = [_record(r) for r in (await conn.execute(waiting)).all()]
        rows += [r for r in queued if r.workflow_id not in seen]
        return rows

    async def earliest(self) -> int | None:
        """The soonest planned instant of the started schedules (None: none planned)."""
        c = workflow_schedule.c
        stmt = select(func.min(c.next_fire_at)).where(c.enabled == 1, c.next_fire_at > 0)
        async with self._db.read() as conn:
            value = (await conn.execute(stmt)).scalar_one_or_none()
        return None if value is None else int(value)

    async def claim(
        self, workflow_id: int, planned_ms: int, next_ms: int, *, queued_at: int, result: str
    ) -> bool:
        """Move the schedule from ``planned_ms`` on to ``next_ms`` (0: nothing more planned);
        True for the one caller that did (it fires ``planned_ms``)."""
        c = workflow_schedule.c
        stmt = (
            update(workflow_schedule)
            .where(c.workflow_id == workflow_id, c.enabled == 1, c.next_fire_at == planned_ms)
            .values(
                next_fire_at=next_ms, queued_at=queued_at, last_fire_at=planned_ms, last_result=result[:255]
            )
        )
        async with self._db.write() as conn:
            return (await conn.execute(stmt)).rowcount == 1

    async def take_queued(self, workflow_id: int, queued_at: int) -> bool:
        """Clear the waiting fire ``queued_at``; True for the one caller that did (it starts it)."""
        c = workflow_schedule.c
        stmt = (
            update(workflow_schedule)
            .where(c.workflow_id == workflow_id, c.queued_at == queued_at)
            .values(queued_at=0)
        )
        async with self._db.write() as conn:
            return (await conn.execute(stmt)).rowcount == 1

    async def note(self, workflow_id: int, result: str) -> None:
        """What the last fire did (shown with the schedule)."""
        stmt = (
            update(workflow_schedule)
            .where(workflow_schedule.c.workflow_id == workflow_id)
            .values(last_result=result[:255])
        )
        async with self._db.write() as conn:
            await conn.execute(stmt)
