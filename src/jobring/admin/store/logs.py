"""Run logs (``xxl_job_log``): fire inserts, trigger and handle results, child-fire budgets,
alarm status. Reads are in :mod:`.log_reads`, retention in :mod:`.log_retention`, the SQL of
the run states in :mod:`.log_conditions`."""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from dataclasses import fields
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    bindparam,
    exists,
    func,
    insert,
    null,
    select,
    union_all,
    update,
)
from sqlalchemy.dialects import mysql as mysql_dialect
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.dml import Update
from sqlalchemy.sql.elements import BindParameter

from jobring.admin.store.base import (
    UPDATE_CHUNK,
    Member,
    chunks,
    new_id,
    update_rows,
)
from jobring.admin.store.engine import MARIADB_QUIET, utc_naive
from jobring.admin.store.errors import Conflict
from jobring.admin.store.log_reads import LogReads
from jobring.admin.store.log_retention import LogRetention
from jobring.admin.store.records import (
    FirstResult,
    GroupGuard,
    HandleResult,
    NewLog,
    ParentLink,
    ResultOutcome,
    RunLink,
    TriggerResult,
)
from jobring.admin.store.tables import distributed_run, job_info, job_log, workflow_node_run
from jobring.core.timefmt import iso_ms

# MySQL TEXT holds 65,535 bytes: 15,000 characters fit even at 4 bytes each.
HANDLE_MSG_MAX = MSG_MAX = 15_000
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


class LogRepository(LogReads, LogRetention):
    """Run logs: the writes here, the reads in :mod:`.log_reads`, retention in
    :mod:`.log_retention`."""

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
        # One statement (one row unplanned, or one part of planned rows with RETURNING) needs
        # no transaction around it: a workflow node's or a manual run's fire, most scheduled ones.
        # (Without RETURNING a planned row is a savepoint and an INSERT.) A part of CHUNK rows
        # is one statement as long as SQLAlchemy's insertmanyvalues batch holds it (1,000 rows
        # and 32,700 parameters on PostgreSQL); a second one would fail Db.write's guard.
        alone = len(unplanned) + len(chunks(planned)) == 1 and (caps.insert_returning or not planned)
        async with self._db.write(alone=alone) as conn:
            for i, row in unplanned:
                ids[i] = new_id(await conn.execute(_INSERT_LOG, _row(row)))
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

    async def callback_targets(
        self, log_ids: Sequence[int], *, parents: bool
    ) -> tuple[dict[int, tuple[int, int]], set[int]]:
        """What a callback batch needs read before its write, in one read: log id ->
        (handle_code, job_group) of the runs that exist, and (with ``parents``) which of the
        ids are distributed parents (``jobring_distributed_run``)."""
        if not parents:
            async with self._db.read() as conn:
                return await _existing_ids(conn, log_ids, lock=False), set()
        seen: dict[int, tuple[int, int]] = {}
        found: set[int] = set()
        async with self._db.read() as conn:
            for part in chunks(sorted(set(log_ids))):
                for log_id, code, group in (await conn.execute(_TARGETS, {"ids": part})).all():
                    if group is None:  # a distributed parent's row
                        found.add(int(log_id))
                    else:
                        seen[int(log_id)] = (int(code), int(group))
        return seen, found

    async def record_results(
        self, results: Sequence[HandleResult], *, guard: GroupGuard | None = None,
        seen: Mapping[int, tuple[int, int]] | None = None,
    ) -> list[ResultOutcome]:
        """Record executor callbacks, each only if the log has no result yet (handle_code 0).

        Messages are capped at 15,000 characters. Returns one outcome per input item: a
        second result for the same log (in the table or earlier in ``results``) is a repeat.

        ``guard`` (an executor token's groups): a log of another group is answered as not
        found, and the guard is part of the UPDATE itself, so no row the token may not
        report is ever written, whenever it was created. A log that does not exist when the
        batch is read is not found for good: it is never written by this call, even when a
        fire inserts it a moment later. ``seen``: that read, made by the caller already
        (``callback_targets``, with the batch's other reads); None: made here.
        """
        if not results:
            return []
        wanted = [r.log_id for r in results]
        if guard is not None:
            # Without the write lock first: a flood of unknown (or other groups') ids costs a
            # read, never a write transaction that the scheduler's inserts would wait for.
            if seen is None:
                async with self._db.read() as conn:
                    seen = await _existing_ids(conn, wanted, lock=False)
            wanted = [i for i in sorted(set(wanted))
                      if (row := seen.get(i)) is not None and guard.allows(row[1])]
        if not wanted:
            return [ResultOutcome.NOT_FOUND] * len(results)
        if seen is not None and all(_had_result(seen.get(r.log_id), guard) for r in results):
            # A result only ever replaces handle_code 0: every run had one when read (an
            # executor sending a batch again), so no write transaction is opened.
            return [ResultOutcome.REPEAT] * len(results)
        if len(results) == 1 and (await self._db.capabilities()).update_returning:
            return [await self._record_one(results[0], guard)]
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
            # A workflow node's additions: only with a result this statement wrote (so under
            # the same group guard), on the attempt the run carries out. Other callbacks cost
            # nothing here.
            added = [(r.log_id, r.workflow_context) for r, o in zip(results, outcomes, strict=True)
                     if o is ResultOutcome.APPLIED and r.workflow_context is not None]
            for log_id, context in added:
                attempt = (select(job_log.c.workflow_node_run_id).where(job_log.c.id == log_id)
                           .scalar_subquery())
                await conn.execute(update(workflow_node_run).where(workflow_node_run.c.id == attempt)
                                   .values(context_added=context))
        return outcomes

    async def _record_one(self, result: HandleResult, guard: GroupGuard | None) -> ResultOutcome:
        """One result where UPDATE has RETURNING: the conditional UPDATE alone tells whether it
        wrote the row (no rows to lock first; one row cannot deadlock), so without workflow
        context additions it is one statement (on PostgreSQL one round trip, no BEGIN)."""
        if await self._write_one(result, guard, first_only=False) is not None:
            return ResultOutcome.APPLIED
        # Not written: a repeat if the run has a result (and the token may report it).
        async with self._db.read() as conn:
            row = (await _existing_ids(conn, [result.log_id], lock=False)).get(result.log_id)
        if row is None or (guard is not None and not guard.allows(row[1])) or row[0] == 0:
            return ResultOutcome.NOT_FOUND
        return ResultOutcome.REPEAT

    async def writes_lone_result_first(self) -> bool:
        """Whether a lone callback result is best written with :meth:`record_first_result`
        before anything is read: on PostgreSQL, where it is one statement and round trip, and
        one that matches nothing (an unknown run, a flood of them) takes no lock. Elsewhere
        the read first stays cheaper (SQLite would take its one write lock; MariaDB has no
        UPDATE ... RETURNING)."""
        return (await self._db.capabilities()).backend == "postgresql"

    async def record_first_result(self, result: HandleResult, guard: GroupGuard | None) -> FirstResult | None:
        """Record one result if it is its run's first, the run is of a group ``guard`` allows
        and not a distributed parent (whose root task's result goes to its join), all decided
        by the write itself, which also returns what :meth:`parent_links` would read of the
        run (no read after it); None, nothing written: :meth:`record_results` then tells why
        (a repeat, an unknown run or another group's, a distributed parent). Needs UPDATE ...
        RETURNING (None without it)."""
        if not (await self._db.capabilities()).update_returning:
            return None
        row = await self._write_one(result, guard, first_only=True)
        if row is None:
            return None
        if row.job_found is None:  # its job was deleted: no children, no recovery alarm
            return FirstResult(None)
        link = RunLink(result.log_id, int(row.job_id), int(row.job_group), row.root_run_id,
                       int(row.child_depth))
        return FirstResult(ParentLink(link, row.child_jobid, bool(row.alarm_recovery)))

    async def _write_one(self, result: HandleResult, guard: GroupGuard | None, *, first_only: bool) -> Any:
        member = _guard_condition(guard)
        msg, at = result.handle_msg, result.handle_time
        params: dict[str, Any] = {
            "b_id": result.log_id, "b_code": result.handle_code, "b_msg": msg and msg[:HANDLE_MSG_MAX],
            "b_time": utc_naive(at), "b_time_ms": _epoch_ms(at)}
        stmt = _RECORD_ONE[(None if member is None else member.inside, first_only)]
        if member is not None:
            params["b_groups"] = list(member.values)
        async with self._db.write(alone=result.workflow_context is None) as conn:
            written = (await conn.execute(stmt, params)).first()
            if written is not None and written[0] is not None and result.workflow_context is not None:
                await conn.execute(_CONTEXT_ADDED, {"b_id": written[0], "b_context": result.workflow_context})
        return written

    async def append_handle_msgs(self, messages: dict[int, str]) -> None:
        """Set the handle message of runs whose result this node just recorded (the child
        jobs' summary appended to the executor's message)."""
        if not messages:
            return
        async with self._db.write() as conn:
            rows = {i: {"handle_msg": m[:HANDLE_MSG_MAX]} for i, m in messages.items()}
            await update_rows(conn, job_log, rows)

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


# The callback path's statements, built once: building one costs more than executing it
# (~0.1 ms of construction and cache key each time, against ~0.03 ms for a statement built
# once, whose cache key SQLAlchemy keeps). Values are bound at execution.
_IDS: BindParameter[int] = bindparam("ids", expanding=True)
_INSERT_LOG = insert(job_log)  # a manual or workflow node's fire: one row, its values bound
_EXISTING = (select(job_log.c.id, job_log.c.handle_code, job_log.c.job_group)
             .where(job_log.c.id.in_(_IDS)).order_by(job_log.c.id))
_EXISTING_LOCKED = _EXISTING.with_for_update()
# The runs (id, handle code, group) and the distributed parents (id, NULL, NULL) among the ids.
_TARGETS = union_all(
    select(job_log.c.id, job_log.c.handle_code, job_log.c.job_group).where(job_log.c.id.in_(_IDS)),
    select(distributed_run.c.run_id, null(), null()).where(distributed_run.c.run_id.in_(_IDS)))


def _record_one_statement(groups: bool | None, first_only: bool) -> Update:
    # groups None: no guard; True: the run's group among b_groups; False: not among them.
    # first_only: not a distributed parent's run either, and what parent_links reads of the
    # run is returned with it (see record_first_result).
    c = job_log.c
    where = [c.id == bindparam("b_id"), c.handle_code == 0]
    if groups is not None:
        in_groups: BindParameter[int] = bindparam("b_groups", expanding=True)
        where.append(c.job_group.in_(in_groups) if groups else c.job_group.not_in(in_groups))
    if first_only:
        where.append(~exists().where(distributed_run.c.run_id == c.id))
    stmt = (update(job_log).where(*where)
            .values(handle_code=bindparam("b_code", type_=c.handle_code.type),
                    handle_msg=bindparam("b_msg", type_=c.handle_msg.type),
                    handle_time=bindparam("b_time", type_=c.handle_time.type),
                    handle_time_ms=bindparam("b_time_ms", type_=c.handle_time_ms.type)))
    if not first_only:
        return stmt.returning(c.workflow_node_run_id)

    def of_job(column: Any, name: str) -> Any:
        found = select(column).where(job_info.c.id == c.job_id).correlate(job_log)
        return found.scalar_subquery().label(name)

    return stmt.returning(c.workflow_node_run_id, c.job_id, c.job_group, c.root_run_id, c.child_depth,
                          of_job(job_info.c.id, "job_found"), of_job(job_info.c.child_jobid, "child_jobid"),
                          of_job(job_info.c.alarm_recovery, "alarm_recovery"))


# By (guard: None, or whether it lists the groups allowed; first_only), built once.
_RECORD_ONE = {(groups, first): _record_one_statement(groups, first)
               for groups in (None, True, False) for first in (False, True)}
_CONTEXT_ADDED = (update(workflow_node_run).where(workflow_node_run.c.id == bindparam("b_id"))
                  .values(context_added=bindparam("b_context", type_=workflow_node_run.c.context_added.type)))


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
    stmt = _EXISTING_LOCKED if lock else _EXISTING
    for part in chunks(sorted(set(log_ids))):
        rows = (await conn.execute(stmt, {"ids": part})).all()
        found.update({int(i): (int(c), int(g)) for i, c, g in rows})
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


def _had_result(row: tuple[int, int] | None, guard: GroupGuard | None) -> bool:
    """Whether a run read as ``row`` (handle_code, job_group) had a result this caller may see."""
    return row is not None and row[0] != 0 and (guard is None or guard.allows(row[1]))


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
