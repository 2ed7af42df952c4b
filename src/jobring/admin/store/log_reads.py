"""Reading run logs: one run, a run's attempts, pages for the console, what the monitors
look for, counts per day."""

from __future__ import annotations

import builtins
from collections.abc import Collection, Sequence
from datetime import UTC, datetime, timedelta, tzinfo

from sqlalchemy import (
    ColumnElement,
    and_,
    bindparam,
    case,
    func,
    not_,
    or_,
    select,
)

from jobring.admin.store.base import (
    Repository,
    fetch_page,
    to_record,
)
from jobring.admin.store.engine import utc_naive
from jobring.admin.store.log_conditions import (
    _OK_CODES,
    _STATUS_FILTERS,
    state_condition,
    states_condition,
    unalarmed_failure_statements,
)
from jobring.admin.store.records import (
    DayCount,
    LogEntry,
    LogStatus,
    Page,
    ParentLink,
    RunCursor,
    RunLink,
)
from jobring.admin.store.run_estimate import estimate_runs
from jobring.admin.store.subtasks import lost_parents_condition
from jobring.admin.store.tables import job_group, job_info, job_log
from jobring.core.runstate import RunState

# Read after every successful callback: built once (see logs._TARGETS).
_PARENT_LINKS = (
    select(job_log.c.id, job_log.c.job_id, job_log.c.job_group, job_log.c.root_run_id, job_log.c.child_depth,
           job_info.c.child_jobid, job_info.c.alarm_recovery)
    .join(job_info, job_info.c.id == job_log.c.job_id)
    .where(job_log.c.id.in_(bindparam("ids", expanding=True))))


class LogReads(Repository):
    """Reading run logs."""

    async def get(self, log_id: int) -> LogEntry | None:
        """The log row, or ``None``."""
        async with self._db.read() as conn:
            row = (await conn.execute(select(job_log).where(job_log.c.id == log_id))).first()
        return None if row is None else to_record(LogEntry, row)

    async def attempts(self, log_id: int, limit: int = 100) -> builtins.list[LogEntry]:
        """Every attempt of the run ``log_id`` belongs to, first run first: the runs it retried
        (``retry_of``, back to the first run) and the retries that followed it. Empty when
        the run does not exist. At most ``limit`` rows each way (a retry count is small)."""
        async with self._db.read() as conn:
            row = (await conn.execute(select(job_log).where(job_log.c.id == log_id))).first()
            if row is None:
                return []
            chain = [to_record(LogEntry, row)]
            while chain[0].retry_of is not None and len(chain) < limit:
                row = (await conn.execute(select(job_log).where(job_log.c.id == chain[0].retry_of))).first()
                if row is None:
                    break  # deleted by retention: the chain starts here
                chain.insert(0, to_record(LogEntry, row))
            for _ in range(limit):
                # A failed run is retried once (a broadcast shard alone): one row per step.
                row = (await conn.execute(select(job_log).where(job_log.c.retry_of == chain[-1].id)
                                          .order_by(job_log.c.id).limit(1))).first()
                if row is None:
                    break
                chain.append(to_record(LogEntry, row))
        return chain

    async def links(self, run_ids: Collection[int]) -> dict[int, RunLink]:
        """run id -> :class:`RunLink` for the runs among ``run_ids`` that exist; 500 ids per
        statement."""
        ids = sorted(set(run_ids))
        found: dict[int, RunLink] = {}
        async with self._db.read() as conn:
            for start in range(0, len(ids), 500):
                rows = await conn.execute(
                    select(job_log.c.id, job_log.c.job_id, job_log.c.job_group, job_log.c.root_run_id,
                           job_log.c.child_depth).where(job_log.c.id.in_(ids[start:start + 500])))
                found.update({int(r.id): RunLink(int(r.id), int(r.job_id), int(r.job_group), r.root_run_id,
                                                 int(r.child_depth)) for r in rows})
        return found

    async def parent_links(self, run_ids: Collection[int]) -> dict[int, ParentLink]:
        """run id -> :class:`ParentLink` for the runs among ``run_ids`` whose job exists, read
        with their jobs' child jobs and recovery alarm in one statement (500 ids each)."""
        ids = sorted(set(run_ids))
        found: dict[int, ParentLink] = {}
        async with self._db.read() as conn:
            for start in range(0, len(ids), 500):
                rows = await conn.execute(_PARENT_LINKS, {"ids": ids[start:start + 500]})
                found.update({int(r.id): ParentLink(
                    RunLink(int(r.id), int(r.job_id), int(r.job_group), r.root_run_id, int(r.child_depth)),
                    r.child_jobid, bool(r.alarm_recovery)) for r in rows})
        return found

    async def list(
        self,
        *,
        group_ids: Sequence[int] | None = None,
        job_id: int | None = None,
        status: LogStatus = LogStatus.ALL,
        states: Collection[RunState] | None = None,
        now_ms: int = 0,
        trigger_from: datetime | None = None,
        trigger_to: datetime | None = None,
        offset: int = 0,
        limit: int = 20,
        before: RunCursor | None = None,
        count_cap: int | None = None,
        oldest_first: bool = False,
    ) -> Page[LogEntry]:
        """A page of logs, newest first (trigger time, then id), filtered like the console's
        log page; ``states`` keeps the runs in one of these states at ``now_ms`` (see
        ``state_condition``). ``before``: only the rows after that one in this order (keyset
        paging: no rows skipped by reading, ties on trigger time broken by id); ``count_cap``:
        count at most that many rows, then estimate (``Page.total_exact``, see run_estimate);
        ``oldest_first``: the other way round (``before`` then means "after that row")."""
        where: builtins.list[ColumnElement[bool]] = []
        if group_ids is not None:
            where.append(job_log.c.job_group.in_(list(group_ids)))
        if job_id is not None:
            where.append(job_log.c.job_id == job_id)
        if status is not LogStatus.ALL:
            where.append(_STATUS_FILTERS[status]())
        if states is not None:
            where.append(states_condition(states, now_ms))
        if trigger_from is not None:
            where.append(job_log.c.trigger_time >= utc_naive(trigger_from))
        if trigger_to is not None:
            where.append(job_log.c.trigger_time <= utc_naive(trigger_to))
        after: builtins.list[ColumnElement[bool]] = []
        t, i = job_log.c.trigger_time, job_log.c.id
        order = (t.asc(), i.asc()) if oldest_first else (t.desc(), i.desc())
        if before is not None:
            at = utc_naive(before.trigger_time)
            # The plain "<=" (">=") lets every backend range-scan the trigger_time index.
            if oldest_first:
                after += [t >= at, or_(t > at, i > before.id)]
            else:
                after += [t <= at, or_(t < at, i < before.id)]
        async with self._db.read() as conn:
            page = await fetch_page(
                conn,
                job_log,
                LogEntry,
                where,
                order,
                offset,
                limit,
                count_cap=count_cap,
                after=after,
            )
            if not page.total_exact and count_cap is not None:
                estimate = await estimate_runs(conn, where, count_cap)
                if estimate is not None:
                    page = Page(page.items, estimate, False)
            return page

    async def failed_unalarmed(self, limit: int = 1000, *, after_id: int = 0) -> builtins.list[LogEntry]:
        """Failed logs (trigger or handle code not 0/200) whose alarm_status is still 0, with
        an id above ``after_id`` (an adopted database's history is never retried)."""
        found: dict[int, LogEntry] = {}
        async with self._db.read() as conn:
            for stmt in unalarmed_failure_statements(after_id, limit, self._db.backend):
                for row in (await conn.execute(stmt)).all():
                    entry = to_record(LogEntry, row)
                    found[entry.id] = entry
        return [found[log_id] for log_id in sorted(found)[:limit]]

    async def lost_runs(
        self, triggered_before: datetime, live_addresses: Collection[str], limit: int = 1000,
        *, after_id: int = 0, group_ids: Sequence[int] | None = None,
    ) -> builtins.list[LogEntry]:
        """Running logs (trigger 200, handle 0) triggered at or before the instant whose
        executor address has no live heartbeat (optionally only of these groups), with an id
        above ``after_id``."""
        where: builtins.list[ColumnElement[bool]] = [
            job_log.c.id > after_id,
            job_log.c.trigger_code == 200,
            job_log.c.handle_code == 0,
            job_log.c.trigger_time <= utc_naive(triggered_before),
            lost_parents_condition(),
        ]
        if group_ids is not None:
            where.append(job_log.c.job_group.in_(list(group_ids)))
        if live_addresses:
            where.append(
                or_(
                    job_log.c.executor_address.is_(None),
                    not_(job_log.c.executor_address.in_(list(live_addresses))),
                )
            )
        stmt = select(job_log).where(*where).order_by(job_log.c.id).limit(limit)
        async with self._db.read() as conn:
            return [to_record(LogEntry, r) for r in (await conn.execute(stmt)).all()]

    async def running_on(
        self, address: str, dispatched_before_ms: int, limit: int = 1000, *, app_name: str | None = None
    ) -> builtins.list[LogEntry]:
        """Runs without result on ``address`` dispatched before the instant (epoch ms); with
        ``app_name`` only the runs of that appname's groups."""
        before = datetime.fromtimestamp(dispatched_before_ms / 1000, tz=UTC)
        of_app: builtins.list[ColumnElement[bool]] = []
        if app_name is not None:
            groups_of_app = select(job_group.c.id).where(job_group.c.app_name == app_name)
            of_app.append(job_log.c.job_group.in_(groups_of_app))
        stmt = (
            select(job_log)
            .where(*of_app, job_log.c.handle_code == 0, job_log.c.trigger_code == 200,
                   job_log.c.executor_address == address, lost_parents_condition(),
                   or_(job_log.c.dispatch_time < dispatched_before_ms,
                       and_(job_log.c.dispatch_time.is_(None), job_log.c.trigger_time < utc_naive(before))))
            .order_by(job_log.c.id)
            .limit(limit)
        )
        async with self._db.read() as conn:
            return [to_record(LogEntry, r) for r in (await conn.execute(stmt)).all()]

    async def previous_finished(self, job_id: int, before_id: int) -> LogEntry | None:
        """The job's latest run before ``before_id`` that has an outcome (a result, or a
        failed trigger), or None."""
        stmt = (
            select(job_log)
            .where(job_log.c.job_id == job_id, job_log.c.id < before_id,
                   or_(job_log.c.handle_code != 0, job_log.c.trigger_code.not_in(_OK_CODES)))
            .order_by(job_log.c.id.desc())
            .limit(1)
        )
        async with self._db.read() as conn:
            row = (await conn.execute(stmt)).first()
        return None if row is None else to_record(LogEntry, row)

    async def unfinished_between(
        self, job_id: int, from_ms: int, to_ms: int, limit: int = 500
    ) -> builtins.list[LogEntry]:
        """The job's runs triggered in [from, to] (epoch ms) that have no outcome yet
        (pending or running). Uses the (job_id, trigger_time) index."""
        start = datetime.fromtimestamp(from_ms / 1000, tz=UTC)
        end = datetime.fromtimestamp(to_ms / 1000, tz=UTC)
        stmt = (
            select(job_log)
            .where(job_log.c.job_id == job_id,
                   job_log.c.trigger_time >= utc_naive(start), job_log.c.trigger_time <= utc_naive(end),
                   job_log.c.handle_code == 0, job_log.c.trigger_code.in_(_OK_CODES))
            .order_by(job_log.c.trigger_time)
            .limit(limit)
        )
        async with self._db.read() as conn:
            return [to_record(LogEntry, r) for r in (await conn.execute(stmt)).all()]

    async def counts_by_day(
        self, from_day: datetime, to_day: datetime, group_ids: Sequence[int] | None = None, *,
        zone: tzinfo = UTC, now_ms: int | None = None,
    ) -> builtins.list[DayCount]:
        """Running/success/fail counts per calendar day of ``zone`` (by trigger_time) from
        ``from_day``'s date to ``to_day``'s inclusive, one entry per day including empty days;
        ``DayCount.day`` is the day's naive midnight (a label). Only the runs of ``group_ids``
        when given. With ``now_ms``, fires recorded ahead and still ``scheduled`` then are not
        runs yet and are not counted."""
        start = from_day.replace(hour=0, minute=0, second=0, microsecond=0, tzinfo=None)
        end = to_day.replace(hour=0, minute=0, second=0, microsecond=0, tzinfo=None)
        running = case((and_(job_log.c.trigger_code.in_(_OK_CODES), job_log.c.handle_code == 0), 1), else_=0)
        success = case((job_log.c.handle_code == 200, 1), else_=0)
        not_scheduled = [] if now_ms is None else [not_(state_condition(RunState.SCHEDULED, now_ms))]
        days: builtins.list[DayCount] = []
        async with self._db.read() as conn:
            day = start
            while day <= end:
                low = utc_naive(day.replace(tzinfo=zone))
                high = utc_naive((day + timedelta(days=1)).replace(tzinfo=zone))
                stmt = select(func.count(), func.sum(running), func.sum(success)).where(
                    job_log.c.trigger_time >= low, job_log.c.trigger_time < high,
                    *not_scheduled,
                )
                if group_ids is not None:
                    stmt = stmt.where(job_log.c.job_group.in_(list(group_ids)))
                total, run_n, ok_n = (await conn.execute(stmt)).one()
                run_n, ok_n = int(run_n or 0), int(ok_n or 0)
                days.append(DayCount(day, run_n, ok_n, int(total) - run_n - ok_n))
                day += timedelta(days=1)
        return days

    async def for_job(self, job_id: int) -> builtins.list[LogEntry]:
        """Every log of one job, oldest first (tests and small tools)."""
        stmt = select(job_log).where(job_log.c.job_id == job_id).order_by(job_log.c.id)
        async with self._db.read() as conn:
            return [to_record(LogEntry, r) for r in (await conn.execute(stmt)).all()]

