"""Run-log conditions as SQL: failures, the fail monitor's query, and the run states
(:func:`jobring.core.runstate.run_state` as SQL; a test keeps them equal)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Select,
    and_,
    false,
    func,
    literal_column,
    not_,
    or_,
    select,
    true,
)

from jobring.admin.store.records import LogStatus
from jobring.admin.store.tables import job_log
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

_OK_CODES = (0, 200)


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

