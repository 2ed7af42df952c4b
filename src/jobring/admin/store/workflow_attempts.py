"""Node attempts (``jobring_workflow_node_run``): the outbox of a run's steps. An attempt is
inserted with the step that starts it (``pending``), claimed by one admin (``firing``), linked
to its job run (``running``) and marked ``ended`` once its result is applied to the run."""

from __future__ import annotations

import builtins
import dataclasses
import functools
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from sqlalchemy import String, TextualSelect, bindparam, column, delete, insert, select, text, update
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.dml import Update

from jobring.admin.store.base import Repository, chunks
from jobring.admin.store.records import JobInfo
from jobring.admin.store.tables import job_info, job_log, workflow_node_run, workflow_run
from jobring.admin.store.workflow_records import (
    EndedNodeRun,
    FireRows,
    NewNodeRun,
    NodeRunRecord,
    NodeRunState,
    StoredStep,
    Withdrawal,
    node_run_of,
)
from jobring.core.timefmt import naive_utc_ms

__all__ = [
    "NodeAttempts",
    "advance_with_claimed_starts",
    "claimed_attempts",
    "insert_claimed_returning",
    "insert_fire_rows",
    "insert_starts",
    "pending_attempts",
]


# Each node start runs these: built once (see logs._TARGETS).
_ID = workflow_node_run.c.id == bindparam("b_id")


def _claim_statement(stale: bool) -> Update:
    c = workflow_node_run.c
    taken = c.state == NodeRunState.PENDING
    if stale:  # or claimed by a node that never reported it fired
        taken = taken | ((c.state == NodeRunState.FIRING) & (c.claimed_at < bindparam("b_stale_before")))
    return (update(workflow_node_run).where(_ID, taken)
            .values(state=NodeRunState.FIRING, claimed_by=bindparam("b_node"), claimed_at=bindparam("b_now")))


_CLAIM, _CLAIM_STALE = _claim_statement(False), _claim_statement(True)
_FIRED = (update(workflow_node_run).where(_ID, workflow_node_run.c.state == NodeRunState.FIRING)
          .values(state=NodeRunState.RUNNING, log_id=bindparam("b_log_id")))
_ENDED = (update(workflow_node_run)
          .where(workflow_node_run.c.id.in_(bindparam("ids", expanding=True)),
                 workflow_node_run.c.state != NodeRunState.ENDED)
          .values(state=NodeRunState.ENDED, ended_at=bindparam("b_now")))


class NodeAttempts(Repository):
    """The node attempts of workflow runs."""

    async def node_runs(self, run_id: int) -> builtins.list[NodeRunRecord]:
        stmt = (
            select(workflow_node_run)
            .where(workflow_node_run.c.workflow_run_id == run_id)
            .order_by(workflow_node_run.c.id)
        )
        async with self._db.read() as conn:
            return [node_run_of(r) for r in (await conn.execute(stmt)).all()]

    async def pending_node_runs(self, run_id: int) -> builtins.list[NodeRunRecord]:
        """The run's attempts stored and not yet claimed (read after each step, so it does not
        read every attempt of a large run)."""
        async with self._db.read() as conn:
            return await pending_attempts(conn, run_id)

    async def node_run(self, node_run_id: int) -> NodeRunRecord | None:
        async with self._db.read() as conn:
            row = (
                await conn.execute(select(workflow_node_run).where(workflow_node_run.c.id == node_run_id))
            ).first()
        return None if row is None else node_run_of(row)

    async def node_runs_of_logs(self, log_ids: Collection[int]) -> builtins.list[NodeRunRecord]:
        """The node attempts carried out by these job runs."""
        found: builtins.list[NodeRunRecord] = []
        async with self._db.read() as conn:
            for part in chunks(sorted(set(log_ids))):
                rows = await conn.execute(
                    select(workflow_node_run).where(workflow_node_run.c.log_id.in_(part))
                )
                found.extend(node_run_of(r) for r in rows.all())
        return found

    async def claim(
        self, node_run_id: int, node_id: str, now_ms: int, stale_before_ms: int | None = None
    ) -> bool:
        """Take a pending attempt to fire it (or, with ``stale_before_ms``, one another node
        claimed before that instant and never reported fired); True when this call got it."""
        params = {"b_id": node_run_id, "b_node": node_id, "b_now": now_ms}
        if stale_before_ms is not None:
            params["b_stale_before"] = stale_before_ms
        async with self._db.write(alone=True) as conn:
            result = await conn.execute(_CLAIM if stale_before_ms is None else _CLAIM_STALE, params)
            return result.rowcount == 1

    async def keep_claims(
        self, node_run_ids: Collection[int], node_id: str, now_ms: int
    ) -> builtins.set[int]:
        """Renew ``node_id``'s claims of these attempts (claimed at ``now_ms``, so none is
        stale for another ``stale_ms``), in one write that takes only those it still holds
        (firing, claimed by it); returns their ids. An attempt another admin took over, or
        already fired, is left as it is."""
        ids = sorted(set(node_run_ids))
        held: builtins.set[int] = set()
        async with self._db.write() as conn:
            for part in chunks(ids):
                mine = (
                    workflow_node_run.c.id.in_(part),
                    workflow_node_run.c.state == NodeRunState.FIRING,
                    workflow_node_run.c.claimed_by == node_id,
                )
                result = await conn.execute(update(workflow_node_run).where(*mine).values(claimed_at=now_ms))
                if result.rowcount == len(part):
                    held.update(part)
                elif result.rowcount:  # some were taken over or fired meanwhile: which?
                    renewed = workflow_node_run.c.claimed_at == now_ms
                    stmt = select(workflow_node_run.c.id).where(*mine, renewed)
                    held.update(int(i) for i in (await conn.execute(stmt)).scalars())
        return held

    async def fired(self, node_run_id: int, log_id: int) -> bool:
        """The attempt's job run is ``log_id`` (firing -> running)."""
        async with self._db.write(alone=True) as conn:
            return (await conn.execute(_FIRED, {"b_id": node_run_id, "b_log_id": log_id})).rowcount == 1

    async def ended(self, node_run_ids: Collection[int], now_ms: int) -> int:
        """Mark attempts ended (their result was applied to the run)."""
        changed = 0
        parts = chunks(sorted(set(node_run_ids)))
        if not parts:
            return 0  # no write to open
        async with self._db.write(alone=len(parts) == 1) as conn:
            for part in parts:
                changed += int((await conn.execute(_ENDED, {"ids": part, "b_now": now_ms})).rowcount)
        return changed

    async def to_fire(self, now_ms: int, stale_ms: int, limit: int = 500) -> builtins.list[NodeRunRecord]:
        """Attempts nobody fired: pending ones, and those claimed more than ``stale_ms`` ago
        and not reported fired (their admin may have died)."""
        stmt = (
            select(workflow_node_run)
            .where(
                (workflow_node_run.c.state == NodeRunState.PENDING)
                | (
                    (workflow_node_run.c.state == NodeRunState.FIRING)
                    & (workflow_node_run.c.claimed_at < now_ms - stale_ms)
                )
            )
            .order_by(workflow_node_run.c.id)
            .limit(limit)
        )
        async with self._db.read() as conn:
            return [node_run_of(r) for r in (await conn.execute(stmt)).all()]

    async def log_of_node_run(self, node_run_id: int) -> int | None:
        """The job run recorded for this attempt, if any (read through the unique key)."""
        stmt = select(job_log.c.id).where(job_log.c.workflow_node_run_id == node_run_id)
        async with self._db.read() as conn:
            found = (await conn.execute(stmt)).scalar_one_or_none()
        return None if found is None else int(found)

    async def withdraw_unsent(self, node_run_id: int, log_id: int, node_id: str, now_ms: int) -> Withdrawal:
        """Delete the job run recorded for this attempt (see FireRows) while it is still
        unconfirmed (no dispatch answer, no result) and end the attempt, in one write, while it
        is still ``node_id``'s claim. The claim is read locked (SQLite: the write transaction
        excludes other writers), so a takeover's claim either comes first (TAKEN_OVER: that
        admin owns the attempt and its run, and may have sent it again; nothing is changed) or
        waits for this write and finds the attempt ended. An attempt whose row is gone (its
        run deleted) has its unconfirmed run deleted too."""
        claim = select(workflow_node_run.c.claimed_by).where(workflow_node_run.c.id == node_run_id)
        c = job_log.c
        unconfirmed = delete(job_log).where(
            c.id == log_id, c.workflow_node_run_id == node_run_id, c.trigger_code == 0,
            c.dispatch_time.is_(None), c.handle_code == 0,
        )
        async with self._db.write() as conn:
            if conn.dialect.name != "sqlite":
                claim = claim.with_for_update()
            owner = (await conn.execute(claim)).first()
            if owner is not None and owner.claimed_by != node_id:
                return Withdrawal.TAKEN_OVER
            deleted = int((await conn.execute(unconfirmed)).rowcount)
            await conn.execute(_ENDED, {"ids": [node_run_id], "b_now": now_ms})
        return Withdrawal.WITHDRAWN if deleted else Withdrawal.SENT

    async def running_with_results(self, limit: int = 500) -> builtins.list[EndedNodeRun]:
        """Running attempts whose job run has ended (a result, or a failed trigger)."""
        stmt = (
            select(
                workflow_node_run,
                job_log.c.trigger_code,
                job_log.c.trigger_msg,
                job_log.c.handle_code,
                job_log.c.handle_msg,
            )
            .join(job_log, job_log.c.id == workflow_node_run.c.log_id)
            .where(
                workflow_node_run.c.state == NodeRunState.RUNNING,
                (job_log.c.handle_code != 0)
                | ((job_log.c.trigger_code != 0) & (job_log.c.trigger_code != 200)),
            )
            .order_by(workflow_node_run.c.id)
            .limit(limit)
        )
        async with self._db.read() as conn:
            rows = (await conn.execute(stmt)).all()
        out = []
        for row in rows:
            values = dict(row._asdict())
            extra = {k: values.pop(k) for k in ("trigger_code", "trigger_msg", "handle_code", "handle_msg")}
            out.append(
                EndedNodeRun(
                    NodeRunRecord(**values),
                    int(extra["trigger_code"]),
                    extra["trigger_msg"],
                    int(extra["handle_code"]),
                    extra["handle_msg"],
                )
            )
        return out



def _start_rows(
    run_id: int, starts: Sequence[NewNodeRun], now_ms: int, claimed_by: str | None
) -> builtins.list[dict[str, object]]:
    return [
        {
            "workflow_run_id": run_id,
            "node_key": s.node_key,
            "item": s.item,
            "attempt": s.attempt,
            "job_id": s.job_id,
            "params": s.params,
            "timeout_s": s.timeout_s,
            "state": NodeRunState.PENDING if claimed_by is None else NodeRunState.FIRING,
            "claimed_by": claimed_by,
            "claimed_at": None if claimed_by is None else now_ms,
            "created_at": now_ms,
            "workflow_id": s.workflow_id,
        }
        for s in starts
    ]


async def insert_starts(
    conn: AsyncConnection,
    run_id: int,
    starts: Sequence[NewNodeRun],
    now_ms: int,
    claimed_by: str | None = None,
) -> None:
    """Insert a step's attempts: pending, or already claimed by the node ``claimed_by``."""
    if not starts:
        return
    await conn.execute(insert(workflow_node_run), _start_rows(run_id, starts, now_ms, claimed_by))


async def insert_claimed_returning(
    conn: AsyncConnection, run_id: int, starts: Sequence[NewNodeRun], now_ms: int, claimed_by: str
) -> builtins.list[NodeRunRecord]:
    """Insert a step's attempts claimed by ``claimed_by`` and return them as inserted, in one
    statement (INSERT ... RETURNING: SQLite 3.35+, PostgreSQL, MariaDB 10.5+), oldest first."""
    if not starts:
        return []
    stmt = insert(workflow_node_run).returning(*workflow_node_run.c)
    rows = (await conn.execute(stmt, _start_rows(run_id, starts, now_ms, claimed_by))).all()
    return sorted((node_run_of(r) for r in rows), key=lambda a: a.id)


# A start's own values, one array each: the columns are named as NewNodeRun's fields.
_PER_ATTEMPT = tuple(f.name for f in dataclasses.fields(NewNodeRun))
# The job of an attempt comes back beside it, its columns named with this prefix, and the
# run-log row recorded for it (FireRows) as this column.
_JOB = "j_"
_LOG_ID = "logged_id"


# The run-log row of a job attempt recorded by its step (FireRows): these columns, bound once
# per statement, and the job's and the attempt's as the SELECT in _logged reads them.
_LOGGED = {
    "trigger_time": job_log.c.trigger_time.type,
    "trigger_type": job_log.c.trigger_type.type,
    "admin_node": job_log.c.admin_node.type,
    "sent_time": job_log.c.sent_time.type,
    "group": job_log.c.job_group.type,
}


def _records(attempt: NodeRunRecord, job: JobInfo, rows: FireRows) -> bool:
    """Whether a step records this attempt's run-log row (see FireRows; _logged's WHERE)."""
    return (attempt.workflow_id is None and job.job_group == rows.job_group
            and (job.timing is None or "params_template" not in job.timing))


async def insert_fire_rows(
    conn: AsyncConnection, rows: FireRows, attempts: Sequence[NodeRunRecord], jobs: Mapping[int, JobInfo]
) -> dict[int, int]:
    """Record the attempts' run-log rows (see FireRows) in the step's transaction, as _logged
    does in PostgreSQL's one statement: attempt id -> log id (needs INSERT ... RETURNING)."""
    at = rows.trigger_time_ms
    values = [
        {"job_group": job.job_group, "job_id": job.id, "trigger_time": naive_utc_ms(at),
         "executor_handler": job.executor_handler,
         "executor_param": attempt.params if attempt.params is not None else job.executor_param or "",
         "executor_fail_retry_count": 0, "trigger_code": 0, "handle_code": 0,
         "trigger_type": rows.trigger_type, "attempt": 1, "admin_node": rows.admin_node, "child_depth": 0,
         "workflow_node_run_id": attempt.id, "sent_time": at}
        for attempt in attempts
        if (job := jobs.get(attempt.job_id)) is not None and _records(attempt, job, rows)
    ]
    if not values:
        return {}
    stmt = insert(job_log).returning(job_log.c.id, job_log.c.workflow_node_run_id)
    return {int(r.workflow_node_run_id): int(r.id) for r in (await conn.execute(stmt, values)).all()}


def _logged(quote: Callable[[str], str]) -> str:
    """The CTE that records the job attempts' run-log rows (see FireRows)."""
    columns = ", ".join(quote(n) for n in (
        "job_group", "job_id", "trigger_time", "executor_handler", "executor_param",
        "executor_fail_retry_count", "trigger_code", "handle_code", "trigger_type", "attempt",
        "admin_node", "child_depth", "workflow_node_run_id", "sent_time"))
    return (
        f"logged AS (INSERT INTO {quote(job_log.name)} ({columns}) "
        f"SELECT j.job_group, j.id, :l_trigger_time, j.executor_handler, "
        f"COALESCE(ins.params, j.executor_param, ''), 0, 0, 0, :l_trigger_type, 1, "
        f":l_admin_node, 0, ins.id, :l_sent_time FROM ins JOIN {quote(job_info.name)} AS j "
        f"ON j.id = ins.job_id WHERE ins.workflow_id IS NULL AND j.job_group = :l_group "
        f"AND (j.timing IS NULL OR j.timing NOT LIKE '%params_template%') "
        f"RETURNING id, workflow_node_run_id)"
    )


@functools.lru_cache(maxsize=8)
def _advance_with_claimed_starts(dialect: Dialect, record: bool) -> TextualSelect:
    # WITH moved AS (UPDATE run ... WHERE rev = :rev RETURNING id), ins AS (INSERT INTO attempts
    # SELECT moved.id, v.* FROM moved, unnest(arrays) AS v RETURNING cols)[, logged AS (INSERT
    # INTO run logs SELECT ... FROM ins JOIN jobs RETURNING id)] SELECT cols, job cols[, log id]
    # FROM ins LEFT JOIN jobs[ LEFT JOIN logged]
    quote = dialect.identifier_preparer.quote

    def array_type(name: str) -> str:
        # Without a length: an explicit cast to VARCHAR(n) would cut a longer value where the
        # column's own check refuses it.
        sql_type = workflow_node_run.c[name].type
        return "VARCHAR" if isinstance(sql_type, String) else sql_type.compile(dialect=dialect)

    arrays = ", ".join(f"CAST(:a_{name} AS {array_type(name)}[])" for name in _PER_ATTEMPT)
    columns = ", ".join(quote(name) for name in ("workflow_run_id", *_PER_ATTEMPT, "state", "claimed_by",
                                                 "claimed_at", "created_at"))
    values = ", ".join(f"v.{quote(name)}" for name in _PER_ATTEMPT)
    names = ", ".join(quote(name) for name in _PER_ATTEMPT)
    # The columns this code knows, not *: a column a newer version added must not break it.
    known = ", ".join(quote(c.name) for c in workflow_node_run.c)
    attempt_columns = ", ".join(f"ins.{quote(c.name)}" for c in workflow_node_run.c)
    job_columns = ", ".join(f"j.{quote(c.name)} AS {quote(_JOB + c.name)}" for c in job_info.c)
    statement = text(
        f"WITH moved AS (UPDATE {quote(workflow_run.name)} SET rev = :rev + 1, status = :status, "
        f"state = :state, ended_at = :ended_at WHERE id = :run_id AND rev = :rev RETURNING id), "
        f"ins AS (INSERT INTO {quote(workflow_node_run.name)} ({columns}) "
        f"SELECT moved.id, {values}, :firing, :claimed_by, :claimed_at, :created_at "
        f"FROM moved, unnest({arrays}) AS v({names}) RETURNING {known})"
        + (f", {_logged(quote)} " if record else " ")
        + f"SELECT {attempt_columns}, {job_columns}"
        + (f", logged.id AS {quote(_LOG_ID)} " if record else " ")
        + f"FROM ins LEFT JOIN {quote(job_info.name)} AS j ON j.id = ins.job_id AND ins.workflow_id IS NULL "
        + ("LEFT JOIN logged ON logged.workflow_node_run_id = ins.id " if record else "")
        + "ORDER BY ins.id"
    )
    if record:
        statement = statement.bindparams(*(bindparam(f"l_{name}", type_=t) for name, t in _LOGGED.items()))
    return statement.columns(  # typed: the jobs' columns are read as a select of the table reads them
        *(column(c.name, c.type) for c in workflow_node_run.c),
        *(column(_JOB + c.name, c.type) for c in job_info.c),
        *((column(_LOG_ID, job_log.c.id.type),) if record else ()),
    )


async def advance_with_claimed_starts(
    conn: AsyncConnection, run_id: int, rev: int, values: dict[str, Any], starts: Sequence[NewNodeRun],
    now_ms: int, claimed_by: str, fire_rows: FireRows | None = None,
) -> StoredStep | None:
    """PostgreSQL: store a step by compare-and-set on ``rev`` (``values``: the run's status,
    state and ended_at) and insert its attempts claimed, in one statement (a data-modifying
    CTE: the attempts are inserted only if the run moved) that reads their jobs too, and
    records their run-log rows with ``fire_rows``. The attempts as inserted, oldest first,
    their jobs by id (missing: deleted) and the rows recorded; None when the run is no longer
    at ``rev`` (``starts`` must not be empty)."""
    params: dict[str, Any] = {f"a_{name}": [getattr(s, name) for s in starts] for name in _PER_ATTEMPT}
    params.update(values, run_id=run_id, rev=rev, firing=NodeRunState.FIRING, claimed_by=claimed_by,
                  claimed_at=now_ms, created_at=now_ms)
    if fire_rows is not None:
        at = fire_rows.trigger_time_ms
        params.update(l_trigger_time=naive_utc_ms(at), l_sent_time=at,
                      l_trigger_type=fire_rows.trigger_type, l_admin_node=fire_rows.admin_node,
                      l_group=fire_rows.job_group)
    statement = _advance_with_claimed_starts(conn.dialect, fire_rows is not None)
    rows = (await conn.execute(statement, params)).all()
    if not rows:
        return None
    attempts, jobs, log_ids = [], {}, {}
    for row in rows:
        values_of = row._mapping
        attempt = NodeRunRecord(**{c.name: values_of[c.name] for c in workflow_node_run.c})
        attempts.append(attempt)
        if values_of[_JOB + "id"] is not None:
            job = JobInfo(**{c.name: values_of[_JOB + c.name] for c in job_info.c})
            jobs[job.id] = job
        if fire_rows is not None and values_of[_LOG_ID] is not None:
            log_ids[attempt.id] = int(values_of[_LOG_ID])
    return StoredStep(attempts, jobs, log_ids, 0 if fire_rows is None else fire_rows.trigger_time_ms)


async def pending_attempts(conn: AsyncConnection, run_id: int) -> builtins.list[NodeRunRecord]:
    """The run's attempts stored and not yet claimed, oldest first."""
    stmt = (
        select(workflow_node_run)
        .where(
            workflow_node_run.c.workflow_run_id == run_id,
            workflow_node_run.c.state == NodeRunState.PENDING,
        )
        .order_by(workflow_node_run.c.id)
    )
    return [node_run_of(r) for r in (await conn.execute(stmt)).all()]


async def claimed_attempts(
    conn: AsyncConnection, run_id: int, claimed_by: str, now_ms: int
) -> builtins.list[NodeRunRecord]:
    """The run's attempts that ``claimed_by`` inserted claimed at ``now_ms`` and has not fired."""
    stmt = (
        select(workflow_node_run)
        .where(
            workflow_node_run.c.workflow_run_id == run_id,
            workflow_node_run.c.state == NodeRunState.FIRING,
            workflow_node_run.c.claimed_by == claimed_by,
            workflow_node_run.c.created_at == now_ms,
            workflow_node_run.c.claimed_at == now_ms,
        )
        .order_by(workflow_node_run.c.id)
    )
    return [node_run_of(r) for r in (await conn.execute(stmt)).all()]
