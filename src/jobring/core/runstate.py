"""A run's one explicit state, derived from its run-log row (pure: "now" is passed in).

A row is read in this order (the first rule that applies wins):

1. ``handle_code`` set (the executor or a monitor reported a result):
   - 200: ``success``;
   - 502: ``timed_out`` (the executor's timeout code);
   - another code whose ``handle_msg`` says the run was killed: ``killed``. Kill markers are
     the executor's suffixes ``" [job running, killed]"`` / ``" [job not executed, in the job
     queue, killed.]"`` (kill from the admin, cover-early, executor stop; XXL-JOB's Java
     executors write the same) and the admin's own ``"killed by user"`` prefix;
   - another code whose ``handle_msg`` is the lost-run monitor's ``"Job result lost..."``, or
     starts with its ``"lost:"`` marker (the run's executor unregistered, stopped beating or
     restarted): ``lost`` (the executor died or its result never came);
   - anything else: ``failed``.
2. ``trigger_code`` set and not 200 (the dispatch did not start the run):
   - the lost-run monitor's "recorded but never dispatched" message: ``lost``;
   - the executor's DISCARD_LATER answer ("block strategy effect：Discard Later", the previous
     run is still going), or the admin's skip (``"skipped by calendar ..."``: a calendar of
     the job excludes the instant; ``"skipped by overlap: ..."``, ``"skipped by catch-up:
     ..."``: the job's overlap policy or catch-up window left it out; ``"skipped by flow limit
     ..."``: a flow limit whose policy is skip): ``skipped``;
   - anything else: ``failed``.
3. ``trigger_code`` 200 and no result yet: ``running``.
4. ``trigger_code`` 0: the row was recorded before its ``/run`` call. One that flow control
   holds back (``trigger_msg`` starting ``"queued: "``, the reason it waits) is ``queued``;
   a fire recorded ahead whose planned instant is still in the future is ``scheduled``; one
   due (or a manual trigger, which has no planned instant) is ``dispatching``.

``admin.store.log_conditions.state_condition`` is the same rules as SQL; a test keeps them equal.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "CALENDAR_SKIP_PREFIX",
    "SKIP_PREFIX",
    "DISCARD_MARK",
    "FLOW_CANCEL_PREFIX",
    "FLOW_SKIP_PREFIX",
    "KILLED_BY_USER",
    "KILLED_SUFFIXES",
    "KILL_REASON",
    "LOST_DISPATCH_PREFIX",
    "LOST_PREFIX",
    "LOST_RESULT_MSG",
    "QUEUED_PREFIX",
    "RunState",
    "duration_ms",
    "killed_by_user",
    "run_state",
]

# Markers written by the executor (worker.py, same as XXL-JOB's), the kill API and the monitors.
KILLED_SUFFIXES = (" [job running, killed]", " [job not executed, in the job queue, killed.]")
KILLED_BY_USER = "killed by user"
LOST_RESULT_MSG = "Job result lost, marked as failure"
LOST_PREFIX = "lost:"  # the lost-run monitor's marker of runs whose executor went away
# The executor's reason for a kill asked by the admin (XXL-JOB's text; the run's callback may
# arrive before the kill API records "killed by user").
KILL_REASON = "scheduling center kill job."
LOST_DISPATCH_PREFIX = "Trigger Fail: the fire was recorded but never dispatched"
DISCARD_MARK = "block strategy effect：Discard Later"
# The admin's record of an instant it did not run (trigger_msg of a ``skipped`` row): a calendar
# excluded it, the job's overlap policy or its catch-up window left it out (issue 24).
SKIP_PREFIX = "skipped by "
CALENDAR_SKIP_PREFIX = SKIP_PREFIX + "calendar "
# Flow control (jobring.core.flow): a run waiting for room (trigger_msg, with trigger_code 0),
# one a full limit skipped (trigger_msg), one cancelled (handle_msg: by the cancel_oldest
# policy, or by a user while it was queued).
QUEUED_PREFIX = "queued: "
FLOW_SKIP_PREFIX = SKIP_PREFIX + "flow limit "
FLOW_CANCEL_PREFIX = "cancelled by flow control"

_OK = 200
_TIMEOUT = 502


class RunState(StrEnum):
    """The states a run can be in (see the module docstring for how each is recognised)."""

    SCHEDULED = "scheduled"
    DISPATCHING = "dispatching"
    RUNNING = "running"
    SUCCESS = "success"
    FAILED = "failed"
    KILLED = "killed"
    TIMED_OUT = "timed_out"
    LOST = "lost"
    SKIPPED = "skipped"
    QUEUED = "queued"

    @property
    def is_final(self) -> bool:
        """True once the run has ended (no further state change is expected)."""
        return self not in _NOT_FINAL

    @property
    def is_active(self) -> bool:
        """Dispatching or running: counted as "running" by the dashboard."""
        return self in (RunState.DISPATCHING, RunState.RUNNING)


_NOT_FINAL = frozenset({RunState.SCHEDULED, RunState.QUEUED, RunState.DISPATCHING, RunState.RUNNING})


def _is_killed(msg: str) -> bool:
    return (msg.startswith((KILLED_BY_USER, FLOW_CANCEL_PREFIX))
            or any(msg.endswith(s) for s in KILLED_SUFFIXES))


def killed_by_user(handle_msg: str | None) -> bool:
    """True for a run a user killed (the kill API's message, or the executor's callback of
    that kill): such a run is not retried. A run killed by its executor's block strategy
    (COVER_EARLY) or by an executor stop is not a user's decision and is retried."""
    msg = handle_msg or ""
    return (msg.startswith((KILLED_BY_USER, FLOW_CANCEL_PREFIX))
            or (msg.startswith(KILL_REASON) and _is_killed(msg)))


def run_state(
    *,
    trigger_code: int,
    handle_code: int,
    now_ms: int,
    trigger_msg: str | None = None,
    handle_msg: str | None = None,
    planned_time: int | None = None,
) -> RunState:
    """The state of a run-log row at ``now_ms`` (epoch ms)."""
    if handle_code != 0:
        if handle_code == _OK:
            return RunState.SUCCESS
        if handle_code == _TIMEOUT:
            return RunState.TIMED_OUT
        msg = handle_msg or ""
        if _is_killed(msg):
            return RunState.KILLED
        if msg == LOST_RESULT_MSG or msg.startswith(LOST_PREFIX):
            return RunState.LOST
        return RunState.FAILED
    if trigger_code == _OK:
        return RunState.RUNNING
    if trigger_code != 0:
        msg = trigger_msg or ""
        if msg.startswith(LOST_DISPATCH_PREFIX):
            return RunState.LOST
        if DISCARD_MARK in msg or msg.startswith(SKIP_PREFIX):
            return RunState.SKIPPED
        return RunState.FAILED
    if trigger_msg is not None and trigger_msg.startswith(QUEUED_PREFIX):
        return RunState.QUEUED
    if planned_time is not None and planned_time > now_ms:
        return RunState.SCHEDULED
    return RunState.DISPATCHING


def duration_ms(*, started_ms: int | None, finished_ms: int | None) -> int | None:
    """How long a finished run took (never negative: rows written before the millisecond result
    time existed have whole seconds); ``None`` while it has not finished or never started."""
    if started_ms is None or finished_ms is None:
        return None
    return max(0, finished_ms - started_ms)
