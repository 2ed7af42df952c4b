"""Flow control's state: runs held (waiting or running), token buckets, round-robin turns.

Every admission pass of a group is one transaction that first locks the group's row
(``SELECT ... FOR UPDATE`` on PostgreSQL/MariaDB; SQLite's ``BEGIN IMMEDIATE`` is the single
writer), so two admin nodes never decide for the same group at once: what one node starts
is counted by the next. The repository reads the group's state, hands it to the caller's
``decide`` (the pure admission, ``jobring.core.flow``) and writes the outcome before the
lock is released. Every run's scopes belong to its group (job, group, keys of either), so
one lock per group covers all of them.

A run counts as running from its admission until its run-log row ends (a result, a failed
trigger, a kill, a skip): each pass drops the rows whose run ended, so no release needs to
be written when a run finishes.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy import and_, delete, exists, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from jobring.admin.store.base import Repository, chunks, to_record, update_rows
from jobring.admin.store.records import LogEntry
from jobring.admin.store.tables import flow_bucket, flow_run, flow_turn, job_group, job_info, job_log
from jobring.core.runstate import QUEUED_PREFIX
from jobring.errors import JobringError

__all__ = [
    "FlowAdmitted",
    "FlowArrival",
    "FlowOutcome",
    "FlowRepository",
    "FlowRow",
    "FlowView",
]

_FAILED = 500
_MSG_MAX = 15_000


@dataclass(frozen=True, slots=True)
class FlowArrival:
    """A run recorded just now (trigger code 0) that the pass admits or queues."""

    log_id: int
    job_id: int
    scopes: tuple[str, ...]
    fair_key: str
    priority: int
    sharding: str | None = None  # a broadcast's shard ("index/total"), kept on its row if it waits


@dataclass(frozen=True, slots=True)
class FlowRow:
    """A stored run held by flow control; ``started_ms`` None while it waits."""

    log_id: int
    job_id: int
    scopes: tuple[str, ...]
    fair_key: str
    priority: int
    enqueued_ms: int
    started_ms: int | None


@dataclass(frozen=True, slots=True)
class FlowView:
    """A group's flow state as read under its lock."""

    group_id: int
    group_flow: str | None
    job_flows: Mapping[int, str | None]
    queued: Sequence[FlowRow]
    active: Sequence[FlowRow]
    buckets: Mapping[str, tuple[int, int]]
    turns: Mapping[str, int]
    queued_per_job: Mapping[int, int] = field(default_factory=dict)  # every waiting run, not only ``queued``


@dataclass
class FlowOutcome:
    """What to write. ``queue``: arrivals to store as queued, with the reason they wait (the
    run-log message after ``queued: ``); ``skip``: runs to end as skipped (trigger message);
    ``cancel``: runs to end as cancelled (handle message); ``buckets``: scope -> (old, new),
    old None for a bucket without a row."""

    start: list[int] = field(default_factory=list)
    queue: dict[int, str] = field(default_factory=dict)
    skip: dict[int, str] = field(default_factory=dict)
    cancel: dict[int, str] = field(default_factory=dict)
    buckets: dict[str, tuple[tuple[int, int] | None, tuple[int, int]]] = field(default_factory=dict)
    turns: dict[str, int] = field(default_factory=dict)
    forget: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class FlowAdmitted:
    """What the pass did: the arrivals and the stored runs it started (the latter's rows, to
    dispatch), the running runs it cancelled (to kill on their executors)."""

    started_arrivals: tuple[int, ...]
    started_queued: tuple[LogEntry, ...]
    cancelled_running: tuple[LogEntry, ...]
    outcome: FlowOutcome


class BucketRace(JobringError, RuntimeError):
    """A bucket row changed under the group's lock (a writer that did not take it)."""


def _row(r: object) -> FlowRow:
    return FlowRow(int(r.log_id), int(r.job_id), tuple(json.loads(r.scopes)), str(r.fair_key),  # type: ignore[attr-defined]
                   int(r.priority), int(r.enqueued_ms), None if r.started_ms is None else int(r.started_ms))  # type: ignore[attr-defined]


def _naive(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).replace(tzinfo=None, microsecond=0)


class FlowRepository(Repository):
    """Flow control's rows (see the module docstring)."""

    async def waiting_groups(self) -> builtins.list[int]:
        """The groups with runs waiting."""
        stmt = select(flow_run.c.job_group).where(flow_run.c.started_ms.is_(None)).distinct()
        async with self._db.read() as conn:
            return sorted(int(g) for g in (await conn.execute(stmt)).scalars())

    async def ended_held(self, group_id: int) -> bool:
        """Whether a run the group holds as running has ended (or lost its row): a cheap look,
        outside any lock, before a pass that could then start a queued run."""
        alive = select(job_log.c.id).where(job_log.c.id == flow_run.c.log_id, job_log.c.handle_code == 0,
                                           job_log.c.trigger_code.in_((0, 200)))
        stmt = select(flow_run.c.log_id).where(flow_run.c.job_group == group_id,
                                               flow_run.c.started_ms.is_not(None), ~exists(alive)).limit(1)
        async with self._db.read() as conn:
            return (await conn.execute(stmt)).first() is not None

    async def held(self, group_id: int) -> builtins.list[FlowRow]:
        """The group's held runs (waiting and running), oldest first."""
        stmt = select(flow_run).where(flow_run.c.job_group == group_id).order_by(flow_run.c.log_id)
        async with self._db.read() as conn:
            return [_row(r) for r in (await conn.execute(stmt)).all()]

    async def set_group_flow(self, group_id: int, text: str | None) -> bool:
        """Store a group's flow settings; False when the group does not exist."""
        async with self._db.write() as conn:
            result = await conn.execute(update(job_group).where(job_group.c.id == group_id).values(flow=text))
            return int(result.rowcount) > 0

    async def _lock(self, conn: AsyncConnection, group_id: int) -> str | None:
        """Lock the group's row (SQLite: the write transaction already excludes every other
        writer); its flow settings."""
        stmt = select(job_group.c.flow).where(job_group.c.id == group_id)
        if conn.dialect.name != "sqlite":
            stmt = stmt.with_for_update()
        row = (await conn.execute(stmt)).first()
        return None if row is None else row.flow

    async def admission(
        self, group_id: int, arrivals: Sequence[FlowArrival], now_ms: int,
        decide: Callable[[FlowView, Sequence[FlowArrival]], FlowOutcome], *, max_queued: int = 5_000,
    ) -> FlowAdmitted:
        """One admission pass of a group in one transaction under the group's lock: read its
        state, ``decide``, write the outcome. Arrivals must be recorded rows of the group
        (trigger code 0) not yet held."""
        async with self._db.write(read_committed=True) as conn:
            group_flow = await self._lock(conn, group_id)
            rows = (await conn.execute(select(flow_run).where(flow_run.c.job_group == group_id)
                                       .where(flow_run.c.started_ms.is_not(None)))).all()
            active = [_row(r) for r in rows]
            ended = await self._ended(conn, [r.log_id for r in active])
            if ended:
                await self._drop(conn, ended)
                active = [r for r in active if r.log_id not in ended]
            queued = [_row(r) for r in (await conn.execute(
                select(flow_run).where(flow_run.c.job_group == group_id, flow_run.c.started_ms.is_(None))
                .order_by(flow_run.c.priority.desc(), flow_run.c.enqueued_ms, flow_run.c.log_id)
                .limit(max_queued))).all()]
            per_job = {int(r.job_id): int(r.n) for r in (await conn.execute(
                select(flow_run.c.job_id, func.count().label("n"))
                .where(flow_run.c.job_group == group_id, flow_run.c.started_ms.is_(None))
                .group_by(flow_run.c.job_id))).all()}
            job_ids = {r.job_id for r in queued} | {a.job_id for a in arrivals}
            job_flows: dict[int, str | None] = {}
            for part in chunks(sorted(job_ids)):
                for r in (await conn.execute(select(job_info.c.id, job_info.c.flow)
                                             .where(job_info.c.id.in_(part)))).all():
                    job_flows[int(r.id)] = r.flow
            buckets = {str(r.scope): (int(r.level), int(r.stamp_ms)) for r in (await conn.execute(
                select(flow_bucket).where(flow_bucket.c.job_group == group_id))).all()}
            turns = {str(r.fair_key): int(r.turn) for r in (await conn.execute(
                select(flow_turn).where(flow_turn.c.job_group == group_id))).all()}
            view = FlowView(group_id, group_flow, job_flows, queued, active, buckets, turns, per_job)
            outcome = decide(view, arrivals)
            return await self._apply(conn, group_id, view, arrivals, outcome, now_ms)

    @staticmethod
    async def _ended(conn: AsyncConnection, log_ids: Sequence[int]) -> set[int]:
        """Among ``log_ids``, the runs that ended (or whose row is gone)."""
        alive: set[int] = set()
        for part in chunks(list(log_ids)):
            alive.update(int(i) for i in (await conn.execute(
                select(job_log.c.id).where(job_log.c.id.in_(part), job_log.c.handle_code == 0,
                                           job_log.c.trigger_code.in_((0, 200))))).scalars())
        return set(log_ids) - alive

    @staticmethod
    async def _drop(conn: AsyncConnection, log_ids: Sequence[int] | set[int]) -> None:
        for part in chunks(sorted(log_ids)):
            await conn.execute(delete(flow_run).where(flow_run.c.log_id.in_(part)))

    async def _apply(self, conn: AsyncConnection, group_id: int, view: FlowView,
                     arrivals: Sequence[FlowArrival], outcome: FlowOutcome, now_ms: int) -> FlowAdmitted:
        by_arrival = {a.log_id: a for a in arrivals}
        queued_ids = {r.log_id for r in view.queued}
        still = await self._start_stored(conn, [i for i in outcome.start if i in queued_ids], now_ms)
        new_rows = [self._held_row(group_id, by_arrival[i], now_ms, now_ms)
                    for i in outcome.start if i in by_arrival]
        new_rows += [self._held_row(group_id, by_arrival[i], now_ms, None) for i in outcome.queue]
        for part in chunks(new_rows):
            await conn.execute(insert(flow_run), list(part))
        unsent = {"trigger_code": 0, "handle_code": 0}
        if outcome.queue:
            # A waiting broadcast shard keeps which shard it is for its later dispatch.
            await update_rows(conn, job_log, {i: {"trigger_msg": (QUEUED_PREFIX + why)[:_MSG_MAX],
                                                  "executor_sharding_param": by_arrival[i].sharding}
                                              for i, why in outcome.queue.items()},
                              match=unsent, keep_when_null=("executor_sharding_param",))
        if outcome.skip:
            await update_rows(conn, job_log, {i: {"trigger_code": _FAILED, "trigger_msg": msg[:_MSG_MAX],
                                                  "alarm_status": 1} for i, msg in outcome.skip.items()},
                              match=unsent)
            await self._drop(conn, list(outcome.skip))
        cancelled = await self._cancel(conn, outcome.cancel, set(by_arrival) | queued_ids, now_ms)
        await self._write_buckets(conn, group_id, outcome.buckets)
        await self._write_turns(conn, group_id, outcome)
        started_queued: list[LogEntry] = []
        for part in chunks(still):
            started_queued.extend(to_record(LogEntry, r) for r in (await conn.execute(
                select(job_log).where(job_log.c.id.in_(part)))).all())
        order = {log_id: n for n, log_id in enumerate(outcome.start)}
        started_queued.sort(key=lambda e: order[e.id])
        return FlowAdmitted(tuple(i for i in outcome.start if i in by_arrival), tuple(started_queued),
                            tuple(cancelled), outcome)

    async def _start_stored(self, conn: AsyncConnection, log_ids: Sequence[int], now_ms: int) -> list[int]:
        """Start stored queued runs; those no longer queued (a user cancelled one through
        another path) take no slot and are dropped. The ids started."""
        still = await self._still_queued(conn, log_ids)
        gone = set(log_ids) - set(still)
        if gone:
            await self._drop(conn, gone)
        if still:
            # Sent with the whole second it starts in (its logDateTime: the run's identity on
            # an executor and the day of its log file there), as any run not sent at its plan.
            sent = now_ms - now_ms % 1_000
            started = {"trigger_msg": None, "trigger_time": _naive(now_ms), "sent_time": sent}
            rows = dict.fromkeys(still, started)
            await update_rows(conn, job_log, rows, match={"trigger_code": 0, "handle_code": 0})
            for part in chunks(still):
                await conn.execute(update(flow_run).where(flow_run.c.log_id.in_(part))
                                   .values(started_ms=now_ms))
        return still

    async def _cancel(self, conn: AsyncConnection, cancel: Mapping[int, str], waiting: set[int],
                      now_ms: int) -> list[LogEntry]:
        """End cancelled runs; the rows of those that were running (to kill on executors)."""
        running: list[LogEntry] = []
        if not cancel:
            return running
        for part in chunks([i for i in cancel if i not in waiting]):
            running.extend(to_record(LogEntry, r) for r in (await conn.execute(
                select(job_log).where(job_log.c.id.in_(part), job_log.c.handle_code == 0))).all())
        await update_rows(conn, job_log, {i: {"handle_code": _FAILED, "handle_msg": msg[:_MSG_MAX],
                                              "handle_time": _naive(now_ms), "handle_time_ms": now_ms,
                                              "alarm_status": 1} for i, msg in cancel.items()},
                          match={"handle_code": 0})
        await self._drop(conn, list(cancel))
        return running

    @staticmethod
    async def _write_turns(conn: AsyncConnection, group_id: int, outcome: FlowOutcome) -> None:
        for part in chunks(sorted(set(outcome.forget) | set(outcome.turns))):
            await conn.execute(delete(flow_turn).where(flow_turn.c.fair_key.in_(part)))
        rows = [{"fair_key": k, "job_group": group_id, "turn": t} for k, t in outcome.turns.items()]
        for part in chunks(rows):
            await conn.execute(insert(flow_turn), list(part))

    @staticmethod
    def _held_row(group_id: int, arrival: FlowArrival, now_ms: int,
                  started_ms: int | None) -> dict[str, object]:
        return {"log_id": arrival.log_id, "job_group": group_id, "job_id": arrival.job_id,
                "scopes": json.dumps(list(arrival.scopes)), "fair_key": arrival.fair_key,
                "priority": arrival.priority, "enqueued_ms": now_ms, "started_ms": started_ms}

    @staticmethod
    async def _still_queued(conn: AsyncConnection, log_ids: Sequence[int]) -> builtins.list[int]:
        found: set[int] = set()
        for part in chunks(list(log_ids)):
            found.update(int(i) for i in (await conn.execute(select(job_log.c.id).where(
                job_log.c.id.in_(part), job_log.c.trigger_code == 0, job_log.c.handle_code == 0,
                func.coalesce(job_log.c.trigger_msg, "").like(QUEUED_PREFIX + "%")))).scalars())
        return [i for i in log_ids if i in found]

    @staticmethod
    async def _write_buckets(conn: AsyncConnection, group_id: int,
                             buckets: Mapping[str, tuple[tuple[int, int] | None, tuple[int, int]]]) -> None:
        for scope, (old, new) in sorted(buckets.items()):
            if old is None:
                await conn.execute(insert(flow_bucket).values(scope=scope, job_group=group_id,
                                                              level=new[0], stamp_ms=new[1]))
                continue
            # Compare-and-set (jobring.core.flow.ratelimit): under the group lock it always
            # matches; a miss means a writer bypassed the lock, and the pass is undone.
            result = await conn.execute(update(flow_bucket).where(
                flow_bucket.c.scope == scope, flow_bucket.c.level == old[0], flow_bucket.c.stamp_ms == old[1],
            ).values(level=new[0], stamp_ms=new[1]))
            if int(result.rowcount) != 1:
                raise BucketRace(f"rate-limit bucket {scope} changed during an admission pass")

    async def cancel_queued(self, log_id: int, group_ids: Sequence[int] | None, message: str,
                            now_ms: int) -> LogEntry | None:
        """Cancel a queued run (of one of ``group_ids``; None: any group) under its group's
        lock, so no admission starts it meanwhile. Its row after the change, or None when it
        is not a queued run of those groups."""
        async with self._db.write(read_committed=True) as conn:
            row = (await conn.execute(select(job_log.c.job_group).where(job_log.c.id == log_id))).first()
            if row is None or (group_ids is not None and int(row.job_group) not in group_ids):
                return None
            group_id = int(row.job_group)
            await self._lock(conn, group_id)
            queued = and_(job_log.c.id == log_id, job_log.c.job_group == group_id,
                          job_log.c.trigger_code == 0, job_log.c.handle_code == 0,
                          func.coalesce(job_log.c.trigger_msg, "").like(QUEUED_PREFIX + "%"))
            result = await conn.execute(update(job_log).where(queued).values(
                handle_code=_FAILED, handle_msg=message[:_MSG_MAX], handle_time=_naive(now_ms),
                handle_time_ms=now_ms, alarm_status=1))
            if int(result.rowcount) != 1:
                return None
            await conn.execute(delete(flow_run).where(flow_run.c.log_id == log_id))
            found = (await conn.execute(select(job_log).where(job_log.c.id == log_id))).first()
            return None if found is None else to_record(LogEntry, found)

    async def forget_group(self, group_id: int) -> None:
        """Drop a deleted group's buckets and turns (its runs' rows go with the runs)."""
        async with self._db.write() as conn:
            await conn.execute(delete(flow_bucket).where(flow_bucket.c.job_group == group_id))
            await conn.execute(delete(flow_turn).where(flow_turn.c.job_group == group_id))
            await conn.execute(delete(flow_run).where(flow_run.c.job_group == group_id))

