"""Read-only aggregates for the console's dashboard, limited to a set of executor groups:
fires recorded ahead, and what each scheduling admin node holds and how late its fires left."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo

from sqlalchemy import ColumnElement, func, select

from jobring.admin.store.base import Repository
from jobring.admin.store.engine import utc_naive
from jobring.admin.store.log_conditions import state_condition
from jobring.admin.store.tables import job_info, job_log, scheduler_node
from jobring.core.runstate import RunState


@dataclass(frozen=True, slots=True)
class NodeActivity:
    """One scheduling node: until when it announced itself alive, the jobs it holds a lease
    on, and the lateness (dispatch minus planned instant) of its recent scheduled fires."""

    node_id: str
    alive_until: int
    held_jobs: int
    fires: int
    lateness_avg_ms: float | None
    lateness_max_ms: int | None


class InsightRepository(Repository):
    """Dashboard aggregates (each query is bounded by a day or a time window)."""

    async def scheduled_count(
        self, day: datetime, group_ids: Sequence[int] | None, now_ms: int, *, zone: tzinfo = UTC
    ) -> int:
        """Fires of the calendar day ``day`` of ``zone`` (a naive midnight label, as
        :meth:`counts_by_day` takes it) of ``group_ids`` recorded ahead and not yet due at
        ``now_ms``."""
        midnight = day.replace(hour=0, minute=0, second=0, microsecond=0, tzinfo=None)
        where = [
            job_log.c.trigger_time >= utc_naive(midnight.replace(tzinfo=zone)),
            job_log.c.trigger_time < utc_naive((midnight + timedelta(days=1)).replace(tzinfo=zone)),
            state_condition(RunState.SCHEDULED, now_ms),
        ]
        if group_ids is not None:
            where.append(job_log.c.job_group.in_(list(group_ids)))
        async with self._db.read() as conn:
            found = await conn.execute(select(func.count()).select_from(job_log).where(*where))
            return int(found.scalar_one())

    async def node_activity(
        self, now_ms: int, since_ms: int, group_ids: Sequence[int] | None = None
    ) -> list[NodeActivity]:
        """Nodes alive at ``now_ms`` or that fired since ``since_ms``, with the jobs of
        ``group_ids`` they hold and the lateness of those jobs' fires planned since then."""
        job_scope: list[ColumnElement[bool]] = []
        log_scope: list[ColumnElement[bool]] = []
        if group_ids is not None:
            job_scope.append(job_info.c.job_group.in_(list(group_ids)))
            log_scope.append(job_log.c.job_group.in_(list(group_ids)))
        late = job_log.c.dispatch_time - job_log.c.planned_time
        async with self._db.read() as conn:
            alive = {
                r.node_id: int(r.alive_until)
                for r in await conn.execute(
                    select(scheduler_node.c.node_id, scheduler_node.c.alive_until).where(
                        scheduler_node.c.alive_until >= now_ms
                    )
                )
            }
            held = {
                r.lease_owner: int(r.n)
                for r in await conn.execute(
                    select(job_info.c.lease_owner, func.count().label("n"))
                    .where(job_info.c.lease_owner.is_not(None), job_info.c.lease_until >= now_ms, *job_scope)
                    .group_by(job_info.c.lease_owner)
                )
            }
            fired = {
                r.admin_node: (int(r.n), r.avg, r.max)
                for r in await conn.execute(
                    select(
                        job_log.c.admin_node,
                        func.count().label("n"),
                        func.avg(late).label("avg"),
                        func.max(late).label("max"),
                    )
                    .where(
                        job_log.c.planned_time >= since_ms,
                        job_log.c.dispatch_time.is_not(None),
                        job_log.c.admin_node.is_not(None),
                        *log_scope,
                    )
                    .group_by(job_log.c.admin_node)
                )
            }
        found: list[NodeActivity] = []
        for node in sorted(set(alive) | set(held) | set(fired)):
            count, avg, most = fired.get(node, (0, None, None))
            found.append(NodeActivity(
                node_id=node,
                alive_until=alive.get(node, 0),
                held_jobs=held.get(node, 0),
                fires=count,
                lateness_avg_ms=None if avg is None else float(avg),
                lateness_max_ms=None if most is None else int(most),
            ))
        return found
