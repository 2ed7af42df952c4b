"""Run logs (``xxl_job_log``): fire inserts, trigger and handle results, monitors, retention."""

from __future__ import annotations

import asyncio
import builtins
import operator
from collections.abc import Collection, Sequence
from dataclasses import fields
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Select,
    and_,
    bindparam,
    case,
    delete,
    false,
    func,
    insert,
    literal_column,
    not_,
    or_,
    select,
    true,
    update,
)
from sqlalchemy.dialects import mysql as mysql_dialect
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from jobring.admin.store.base import (
    UPDATE_CHUNK,
    Member,
    Repository,
    chunks,
    fetch_page,
    new_id,
    to_record,
    update_rows,
)
from jobring.admin.store.engine import MARIADB_QUIET, utc_naive
from jobring.admin.store.errors import Conflict
from jobring.admin.store.records import (
    ClearRule,
    DayCount,
    GroupGuard,
    HandleResult,
    LogEntry,
    LogStatus,
    NewLog,
    Page,
    ResultOutcome,
    RunCursor,
    RunLink,
    TriggerResult,
)
from jobring.admin.store.run_estimate import estimate_runs
from jobring.admin.store.subtasks import delete_children_of_deleted, lost_parents_condition
from jobring.admin.store.tables import job_group, job_log
from jobring.core.runstate import (
    DISCARD_MARK,
    FLOW_CANCEL_PREFIX,
    KILLED_BY_USER,
    KILLED_SUFFIXES,
    LOST_DISPATCH_PREFIX,
    LOST_PREFIX,
    LOST_RESULT_MSG,
    QUEUED_PREFIX,
    SKIP_PREFIX,
    RunState,
)
from jobring.core.timefmt import iso_ms

# MySQL TEXT holds 65,535 bytes: 15,000 characters fit even at 4 bytes each.
HANDLE_MSG_MAX = MSG_MAX = 15_000
_OK_CODES = (0, 200)
_LIMITS = {
    "executor_address": 255,
    "executor_handler": 255,
    "executor_param": 512,
    "executor_sharding_param": 20,
    "trigger_type": 20,
    "admin_node": 64,
}


_NEW_LOG_FIELDS = tuple(f.name for f in fields(NewLog))
_NEW_LOG_VALUES = operator.attrgetter(*_NEW_LOG_FIELDS)  # one C call per row (a row per fire)


def _row(log: NewLog) -> dict[str, Any]:
    values = dict(zip(_NEW_LOG_FIELDS, _NEW_LOG_VALUES(log), strict=True))
    values["trigger_time"] = utc_naive(log.trigger_time)
    if values["trigger_msg"] is not None:
        values["trigger_msg"] = values["trigger_msg"][:MSG_MAX]
    for name, size in _LIMITS.items():
        if values[name] is not None and len(values[name]) > size:
            values[name] = values[name][:size]
    return values


_RESULT_BY_ID = (
    update(job_log)
    .where(job_log.c.id == bindparam("b_id"))
    .values(
        executor_address=bindparam("executor_address"),
        trigger_code=bindparam("trigger_code"),
        trigger_msg=bindparam("trigger_msg"),
        dispatch_time=func.coalesce(bindparam("dispatch_time", type_=job_log.c.dispatch_time.type),
                                    job_log.c.dispatch_time),
        executor_sharding_param=func.coalesce(
            bindparam("executor_sharding_param", type_=job_log.c.executor_sharding_param.type),
            job_log.c.executor_sharding_param),
    )
)


def _failed() -> ColumnElement[bool]:
    return or_(job_log.c.trigger_code.not_in(_OK_CODES), job_log.c.handle_code.not_in(_OK_CODES))


def _not_ok_ranges(code: Any) -> ColumnElement[bool]:
    """``code NOT IN (0, 200)`` as ranges, which every backend can scan an index by."""
    low, high = _OK_CODES
    return or_(code < low, and_(code > low, code < high), code > high)


def unalarmed_failure_statements(after_id: int, limit: int, backend: str) -> list[Select[Any]]:
    """The fail monitor's query, one statement per code column.

    Almost every run keeps alarm_status 0 (successes are never alarmed), so "status 0 and
    failed" is asked as index range scans over (alarm_status, code), one per code column;
    each costs what it finds, not what the table holds. "id + 0": the planners must not walk
    the primary key in id order (they expect many matches: the columns correlate).
    """
    statements = []
    for code in (job_log.c.handle_code, job_log.c.trigger_code):
        failed = _not_ok_ranges(code)
        if backend == "sqlite":
            # SQLite's statistics hold no per-value counts: say that failures are rare.
            failed = func.likelihood(failed, literal_column("0.001"))
        statements.append(
            select(job_log)
            .where(job_log.c.alarm_status == 0, failed, job_log.c.id + 0 > after_id)
            .order_by(job_log.c.id + 0)
            .limit(limit)
        )
    return statements


_STATUS_FILTERS: dict[LogStatus, Any] = {
    LogStatus.SUCCESS: lambda: job_log.c.handle_code == 200,
    LogStatus.FAIL: _failed,
    LogStatus.RUNNING: lambda: and_(job_log.c.trigger_code == 200, job_log.c.handle_code == 0),
}

def _msg(column: Any) -> ColumnElement[str]:
    # NULL messages compare as empty text, so NOT(...) below never turns NULL.
    return func.coalesce(column, "")


# The markers hold no LIKE wildcard (``%`` or ``_``): a test checks it.
def _killed_msg() -> ColumnElement[bool]:
    msg = _msg(job_log.c.handle_msg)
    return or_(
        msg.like(KILLED_BY_USER + "%"),
        msg.like(FLOW_CANCEL_PREFIX + "%"),
        *(msg.like("%" + s) for s in KILLED_SUFFIXES),
    )


def _lost_dispatch_msg() -> ColumnElement[bool]:
    return _msg(job_log.c.trigger_msg).like(LOST_DISPATCH_PREFIX + "%")


def _discard_msg() -> ColumnElement[bool]:
    """A skipped run's message: the executor's DISCARD_LATER or the admin's skip (calendar,
    overlap, catch-up)."""
    msg = _msg(job_log.c.trigger_msg)
    return or_(msg.like("%" + DISCARD_MARK + "%"), msg.like(SKIP_PREFIX + "%"))


def queued_msg() -> ColumnElement[bool]:
    """A run flow control holds back (with trigger code 0): its message says why it waits."""
    return _msg(job_log.c.trigger_msg).like(QUEUED_PREFIX + "%")


def state_condition(state: RunState, now_ms: int) -> ColumnElement[bool]:
    """The rows in ``state`` at ``now_ms``: :func:`jobring.core.runstate.run_state` as SQL."""
    handle, trigger = job_log.c.handle_code, job_log.c.trigger_code
    handled = and_(handle != 0, handle != 200, handle != 502)
    unhandled_refused = and_(handle == 0, trigger != 0, trigger != 200)
    lost_result = or_(_msg(job_log.c.handle_msg) == LOST_RESULT_MSG,
                      _msg(job_log.c.handle_msg).like(LOST_PREFIX + "%"))
    not_sent = and_(handle == 0, trigger == 0)
    waiting = and_(not_sent, queued_msg())
    not_queued = not_(queued_msg())
    conditions: dict[RunState, Any] = {
        RunState.SUCCESS: lambda: handle == 200,
        RunState.TIMED_OUT: lambda: handle == 502,
        RunState.KILLED: lambda: and_(handled, _killed_msg()),
        RunState.LOST: lambda: or_(
            and_(handled, not_(_killed_msg()), lost_result),
            and_(unhandled_refused, _lost_dispatch_msg()),
        ),
        RunState.FAILED: lambda: or_(
            and_(handled, not_(_killed_msg()), not_(lost_result)),
            and_(unhandled_refused, not_(_lost_dispatch_msg()), not_(_discard_msg())),
        ),
        RunState.SKIPPED: lambda: and_(unhandled_refused, not_(_lost_dispatch_msg()), _discard_msg()),
        RunState.RUNNING: lambda: and_(handle == 0, trigger == 200),
        RunState.QUEUED: lambda: waiting,
        RunState.SCHEDULED: lambda: and_(
            not_sent, not_queued, job_log.c.planned_time.is_not(None), job_log.c.planned_time > now_ms
        ),
        RunState.DISPATCHING: lambda: and_(
            not_sent, not_queued, or_(job_log.c.planned_time.is_(None), job_log.c.planned_time <= now_ms)
        ),
    }
    result: ColumnElement[bool] = conditions[state]()
    return result


def states_condition(states: Collection[RunState], now_ms: int) -> ColumnElement[bool]:
    """Rows in any of ``states``. The states split the rows, so a long list is asked as "not
    in the others" (the default listing, all but ``scheduled``, is one cheap condition)."""
    wanted = set(states)
    if not wanted:
        return false()
    others = set(RunState) - wanted
    if not others:
        return true()
    if len(others) < len(wanted):
        return not_(or_(*(state_condition(s, now_ms) for s in sorted(others))))
    return or_(*(state_condition(s, now_ms) for s in sorted(wanted)))


_RULE_AGE = {
    ClearRule.OLDER_THAN_1_DAY: timedelta(days=1),
    ClearRule.OLDER_THAN_1_WEEK: timedelta(weeks=1),
    ClearRule.OLDER_THAN_1_MONTH: timedelta(days=30),
    ClearRule.OLDER_THAN_3_MONTHS: timedelta(days=90),
    ClearRule.OLDER_THAN_6_MONTHS: timedelta(days=180),
    ClearRule.OLDER_THAN_1_YEAR: timedelta(days=365),
}
_RULE_KEEP = {
    ClearRule.KEEP_LAST_1K: 1_000,
    ClearRule.KEEP_LAST_10K: 10_000,
    ClearRule.KEEP_LAST_30K: 30_000,
    ClearRule.KEEP_LAST_100K: 100_000,
}


class LogRepository(Repository):
    """Run logs."""

    async def insert(self, log: NewLog) -> int:
        """Insert one log row; returns its id. A duplicate planned fire raises Conflict."""
        try:
            async with self._db.write() as conn:
                result = await conn.execute(insert(job_log).values(**_row(log)))
                return new_id(result)
        except IntegrityError as exc:
            planned = "?" if log.planned_time is None else iso_ms(log.planned_time)
            raise Conflict(f"job {log.job_id} already has a fire planned at {planned}") from exc

    async def insert_fires(self, rows: Sequence[NewLog]) -> list[int | None]:
        """Insert many log rows in one transaction; returns ids in input order.

        A row with ``planned_time`` whose (job_id, planned_time) already exists (in the
        table or earlier in ``rows``) is skipped and gets ``None``: this is how a fire is
        recorded at most once across nodes.
        """
        if not rows:
            return []
        caps = await self._db.capabilities()
        ids: list[int | None] = [None] * len(rows)
        planned = [(i, r) for i, r in enumerate(rows) if r.planned_time is not None]
        unplanned = [(i, r) for i, r in enumerate(rows) if r.planned_time is None]
        async with self._db.write() as conn:
            for i, row in unplanned:
                result = await conn.execute(insert(job_log).values(**_row(row)))
                ids[i] = new_id(result)
            if caps.insert_returning:
                for part in chunks(planned):
                    await self._insert_planned_returning(conn, caps.backend, part, ids)
            else:
                for i, row in planned:
                    ids[i] = await _insert_one_ignoring_duplicate(conn, row)
        return ids

    async def _insert_planned_returning(
        self, conn: AsyncConnection, backend: str, part: Sequence[tuple[int, NewLog]], ids: list[int | None]
    ) -> None:
        values = [_row(r) for _, r in part]
        returning = (job_log.c.id, job_log.c.job_id, job_log.c.planned_time)
        stmt: Any
        if backend == "postgresql":
            stmt = pg_dialect.insert(job_log).on_conflict_do_nothing().returning(*returning)
        elif backend == "sqlite":
            stmt = sqlite_dialect.insert(job_log).on_conflict_do_nothing().returning(*returning)
        else:
            stmt = (
                mysql_dialect.insert(job_log)
                .prefix_with("IGNORE")
                .returning(*returning)
                .execution_options(**{MARIADB_QUIET: True})
            )
        # executemany: SQLAlchemy's "insertmanyvalues" sends multi-row INSERTs from one cached
        # compiled statement. Skipped rows return nothing, so rows are matched by their key.
        got = {(r.job_id, r.planned_time): int(r.id) for r in (await conn.execute(stmt, values)).all()}
        for i, row in part:
            # The first row of a key gets its id; a later duplicate in the same batch, None.
            ids[i] = got.pop((row.job_id, row.planned_time), None)

    async def update_trigger_results(self, results: Sequence[TriggerResult]) -> int:
        """Store each dispatch's address, trigger code/message, dispatch time (and shard
        param when given). Returns how many log rows were updated (missing ids are skipped)."""
        if not results:
            return 0
        rows = {
            r.log_id: {
                "executor_address": None if r.executor_address is None else r.executor_address[:255],
                "trigger_code": r.trigger_code,
                "trigger_msg": None if r.trigger_msg is None else r.trigger_msg[:MSG_MAX],
                "dispatch_time": r.dispatch_time,
                "executor_sharding_param": r.executor_sharding_param,
            }
            for r in results
        }
        if self._db.backend == "sqlite":
            # One UPDATE by id run for every row (executemany: a loop in the driver thread);
            # the CASE update below compares each row with every id of its chunk.
            params = [{"b_id": log_id, **values} for log_id, values in rows.items()]
            async with self._db.write() as conn:
                return int((await conn.execute(_RESULT_BY_ID, params)).rowcount)
        _pad_to_shape(rows)
        async with self._db.write() as conn:
            # Missing ids simply match nothing: the count is of the rows that exist.
            return await update_rows(conn, job_log, rows,
                                     keep_when_null=("dispatch_time", "executor_sharding_param"))

    async def append_trigger_msg(self, log_ids: Sequence[int], text: str) -> int:
        """Append ``text`` to the trigger message of each run, in the statement itself: the
        row's other columns (a dispatch confirmed meanwhile) are left as they are now.
        Returns how many rows were updated."""
        if not log_ids:
            return 0
        appended = func.coalesce(job_log.c.trigger_msg, "") + text
        async with self._db.write() as conn:
            result = await conn.execute(
                update(job_log).where(job_log.c.id.in_(sorted(set(log_ids))))
                .values(trigger_msg=func.substr(appended, 1, MSG_MAX))
            )
            return int(result.rowcount)

    async def record_results(
        self, results: Sequence[HandleResult], *, guard: GroupGuard | None = None
    ) -> list[ResultOutcome]:
        """Record executor callbacks, each only if the log has no result yet (handle_code 0).

        Messages are capped at 15,000 characters. Returns one outcome per input item: a
        second result for the same log (in the table or earlier in ``results``) is a repeat.

        ``guard`` (an executor token's groups): a log of another group is answered as not
        found, and the guard is part of the UPDATE itself, so no row the token may not
        report is ever written, whenever it was created. A log that does not exist when the
        batch is read is not found for good: it is never written by this call, even when a
        fire inserts it a moment later.
        """
        if not results:
            return []
        wanted = [r.log_id for r in results]
        if guard is not None:
            # Without the write lock first: a flood of unknown (or other groups') ids costs a
            # read, never a write transaction that the scheduler's inserts would wait for.
            async with self._db.read() as conn:
                seen = await _existing_ids(conn, wanted, lock=False)
            wanted = [i for i, (_, group) in seen.items() if guard.allows(group)]
        if not wanted:
            return [ResultOutcome.NOT_FOUND] * len(results)
        outcomes: list[ResultOutcome] = []
        rows: dict[int, dict[str, Any]] = {}
        async with self._db.write() as conn:
            # Lock the rows first (in id order, so concurrent batches cannot deadlock): the
            # decision below then holds until commit.
            found = await _existing_ids(conn, wanted, lock=self._db.backend != "sqlite")
            for r in results:
                row = found.get(r.log_id)
                if row is None or (guard is not None and not guard.allows(row[1])):
                    outcomes.append(ResultOutcome.NOT_FOUND)
                elif row[0] != 0 or r.log_id in rows:
                    outcomes.append(ResultOutcome.REPEAT)
                else:
                    outcomes.append(ResultOutcome.APPLIED)
                    rows[r.log_id] = {
                        "handle_code": r.handle_code,
                        "handle_msg": None if r.handle_msg is None else r.handle_msg[:HANDLE_MSG_MAX],
                        "handle_time": utc_naive(r.handle_time),
                        "handle_time_ms": _epoch_ms(r.handle_time),
                    }
            updated = await update_rows(conn, job_log, rows, match={"handle_code": 0},
                                        member=_guard_condition(guard)) if rows else 0
            if updated != len(rows):
                # Not expected with the rows locked; still, what follows a result (children,
                # retries, alarms) must only follow a row this statement really wrote.
                written = await _written_ids(conn, rows)
                outcomes = [ResultOutcome.NOT_FOUND if o is ResultOutcome.APPLIED and r.log_id not in written
                            else o for r, o in zip(results, outcomes, strict=True)]
        return outcomes

    async def append_handle_msgs(self, messages: dict[int, str]) -> None:
        """Set the handle message of runs whose result this node just recorded (the child
        jobs' summary appended to the executor's message)."""
        if not messages:
            return
        async with self._db.write() as conn:
            rows = {i: {"handle_msg": m[:HANDLE_MSG_MAX]} for i, m in messages.items()}
            await update_rows(conn, job_log, rows)

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

    async def reserve_child_fires(self, root_run_id: int, wanted: int, budget: int) -> int:
        """Take up to ``wanted`` child fires from the budget of the tree rooted at run
        ``root_run_id`` (its ``child_fires`` stays at most ``budget``); returns how many were
        granted, 0 when the budget is used up or the root run no longer exists. The root row
        is locked for the read and the update, so admin nodes never grant more together."""
        if wanted <= 0:
            return 0
        async with self._db.write() as conn:
            used = (await conn.execute(
                select(job_log.c.child_fires).where(job_log.c.id == root_run_id).with_for_update()
            )).scalar()
            if used is None:
                return 0
            granted = max(0, min(wanted, budget - int(used)))
            if granted:
                await conn.execute(update(job_log).where(job_log.c.id == root_run_id)
                                   .values(child_fires=job_log.c.child_fires + granted))
            return granted

    async def set_alarm_status(self, log_id: int, expected: int, new: int) -> bool:
        """Compare-and-set alarm_status; True when this call changed it."""
        async with self._db.write() as conn:
            result = await conn.execute(
                update(job_log)
                .where(job_log.c.id == log_id, job_log.c.alarm_status == expected)
                .values(alarm_status=new)
            )
            return result.rowcount > 0

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

    async def count_older_than(self, before: datetime) -> int:
        """How many logs were triggered before ``before``."""
        async with self._db.read() as conn:
            return int((await conn.execute(select(func.count()).select_from(job_log).where(
                job_log.c.trigger_time < utc_naive(before)))).scalar_one())

    async def delete_older_than(self, before: datetime, batch: int = 1000, pause_s: float = 0.0) -> int:
        """Delete logs triggered before ``before``, ``batch`` rows per short transaction (with
        ``pause_s`` between them); returns the count."""
        return await self._delete_where([job_log.c.trigger_time < utc_naive(before)], batch, pause_s)

    async def job_ids_over(self, keep: int) -> builtins.list[int]:
        """Jobs with more than ``keep`` runs."""
        stmt = (select(job_log.c.job_id).group_by(job_log.c.job_id)
                .having(func.count() > keep).order_by(job_log.c.job_id))
        async with self._db.read() as conn:
            return [int(i) for i in (await conn.execute(stmt)).scalars()]

    async def delete_beyond_newest(
        self, job_id: int, keep: int, batch: int = 1000, pause_s: float = 0.0
    ) -> int:
        """Delete the job's runs older than its ``keep`` newest (by trigger time); returns the count."""
        async with self._db.read() as conn:
            pivot = (await conn.execute(
                select(job_log.c.trigger_time, job_log.c.id)
                .where(job_log.c.job_id == job_id)
                .order_by(job_log.c.trigger_time.desc(), job_log.c.id.desc())
                .offset(keep).limit(1))).first()
        if pivot is None:
            return 0
        older = or_(job_log.c.trigger_time < pivot.trigger_time,
                    and_(job_log.c.trigger_time == pivot.trigger_time, job_log.c.id <= pivot.id))
        return await self._delete_where([job_log.c.job_id == job_id, older], batch, pause_s)

    async def clear(
        self,
        rule: ClearRule,
        now: datetime,
        *,
        group_id: int | None = None,
        job_id: int | None = None,
        batch: int = 1000,
    ) -> int:
        """The console's "clear logs": by age, keep the newest N, or all; optionally for one
        group and/or job. Returns how many rows were deleted."""
        where: builtins.list[ColumnElement[bool]] = []
        if group_id:
            where.append(job_log.c.job_group == group_id)
        if job_id:
            where.append(job_log.c.job_id == job_id)
        if rule in _RULE_AGE:
            where.append(job_log.c.trigger_time <= utc_naive(now) - _RULE_AGE[rule])
        elif rule in _RULE_KEEP:
            keep = _RULE_KEEP[rule]
            async with self._db.read() as conn:
                pivot = (
                    await conn.execute(
                        select(job_log.c.id)
                        .where(*where)
                        .order_by(job_log.c.id.desc())
                        .offset(keep - 1)
                        .limit(1)
                    )
                ).scalar()
            if pivot is None:
                return 0
            where.append(job_log.c.id < pivot)
        return await self._delete_where(where, batch)

    async def _delete_where(
        self, where: builtins.list[ColumnElement[bool]], batch: int, pause_s: float = 0.0
    ) -> int:
        """Delete in batches: the ids are read without a lock, then deleted by primary key in
        a short transaction of their own (the condition repeated), so the table is never
        locked for long; ``pause_s`` between batches leaves room to other writers."""
        total = 0
        after = 0
        while True:
            async with self._db.read() as conn:
                ids = list((await conn.execute(
                    select(job_log.c.id).where(*where, job_log.c.id > after)
                    .order_by(job_log.c.id).limit(batch)
                )).scalars())
            if not ids:
                return total
            async with self._db.write() as conn:
                result = await conn.execute(delete(job_log).where(job_log.c.id.in_(ids), *where))
                total += result.rowcount
                await delete_children_of_deleted(conn, ids)
            after = ids[-1]
            if pause_s > 0:
                await asyncio.sleep(pause_s)

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


def _epoch_ms(value: datetime) -> int:
    aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    return int(aware.timestamp() * 1000)


_SHAPES = (4, 8, 16, 32, 64, UPDATE_CHUNK)


def _pad_to_shape(rows: dict[int, dict[str, Any]]) -> None:
    """Pad with rows of ids that cannot exist (negative) to one of a few statement sizes, so
    the per-size compiled ``CASE`` statement is reused instead of compiled for every count."""
    if not rows:
        return
    count = len(rows)
    size = next((s for s in _SHAPES if s >= count), -(-count // UPDATE_CHUNK) * UPDATE_CHUNK)
    filler = next(iter(rows.values()))
    for k in range(1, size - count + 1):
        rows[-k] = filler


async def _existing_ids(
    conn: AsyncConnection, log_ids: Sequence[int], *, lock: bool
) -> dict[int, tuple[int, int]]:
    """log id -> (handle_code, job_group) for the ids that exist; ``lock``: SELECT ... FOR UPDATE."""
    found: dict[int, tuple[int, int]] = {}
    for part in chunks(sorted(set(log_ids))):
        stmt = (
            select(job_log.c.id, job_log.c.handle_code, job_log.c.job_group)
            .where(job_log.c.id.in_(part)).order_by(job_log.c.id)
        )
        if lock:
            stmt = stmt.with_for_update()
        found.update({int(i): (int(c), int(g)) for i, c, g in (await conn.execute(stmt)).all()})
    return found


async def _written_ids(conn: AsyncConnection, rows: dict[int, dict[str, Any]]) -> set[int]:
    """The ids of ``rows`` that hold the values just written (same transaction)."""
    written: set[int] = set()
    for part in chunks(sorted(rows)):
        stmt = (select(job_log.c.id, job_log.c.handle_code, job_log.c.handle_time_ms)
                .where(job_log.c.id.in_(part)))
        for i, code, ms in (await conn.execute(stmt)).all():
            row = rows[int(i)]
            if code == row["handle_code"] and ms == row["handle_time_ms"]:
                written.add(int(i))
    return written


def _guard_condition(guard: GroupGuard | None) -> Member | None:
    if guard is None:
        return None
    if guard.only is not None:
        return Member("job_group", tuple(sorted(guard.only)))
    if not guard.excluded:
        return None
    return Member("job_group", tuple(sorted(guard.excluded)), inside=False)


async def _insert_one_ignoring_duplicate(conn: AsyncConnection, row: NewLog) -> int | None:
    # MySQL without RETURNING: a duplicate key fails only this statement, the transaction
    # goes on (InnoDB rolls back the statement, not the transaction).
    try:
        async with conn.begin_nested():
            result = await conn.execute(insert(job_log).values(**_row(row)))
    except IntegrityError:
        return None
    return new_id(result)
