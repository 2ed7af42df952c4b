"""The records and pure helpers of distributed runs: a parent run's join state
(``jobring_distributed_run``), its sub-tasks (``jobring_subtask``), the events applied to
them, and each sub-task kind's policy."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, cast

from sqlalchemy import ColumnElement
from sqlalchemy.engine import Row

from jobring.admin.store.records import GroupGuard
from jobring.admin.store.tables import subtask
from jobring.core.distributed import (
    CancelRequested,
    Dispatched,
    FailureTolerance,
    Finished,
    JoinError,
    Lost,
    Progress,
    RetryRequested,
    Task,
    TaskPolicy,
    TaskState,
)
from jobring.core.distributed.subtasks import TaskEvent

ROOT_RUNNING, ROOT_SUCCEEDED, ROOT_FAILED = "running", "succeeded", "failed"
KIND_MAP, KIND_SHARD, KIND_REDUCE = "map", "shard", "reduce"
# A broadcast parent (kind KIND_BCAST) has one part per executor (pinned to it: the row's
# executor_address is set when stored), a pre hook task and a post hook task (KIND_REDUCE,
# its name in reduce_task). Hook tasks are not counted in the parent's progress.
KIND_BCAST, KIND_PART, KIND_PRE = "bcast", "part", "pre"
HOOKS = (KIND_PRE, KIND_REDUCE)
MESSAGE_MAX = 2_000
# (succeeded, failed, running) a child in each state counts for (core.distributed.progress_of).
COUNTS = {
    TaskState.PENDING: (0, 0, 0),
    TaskState.RUNNING: (0, 0, 1),
    TaskState.SUCCEEDED: (1, 0, 0),
    TaskState.FAILED: (0, 1, 0),
    TaskState.CANCELLED: (0, 1, 0),
}
LOCK_CHUNK = 500
# Sub-tasks a retry puts back per write where the database has no ``Db.bulk_rows`` (row
# locks: larger writes than SQLite's, still a bounded number of rows locked at once).
RETRY_ROWS = 5_000


@dataclass(frozen=True, slots=True)
class DistributedRun:
    run_id: int
    job_id: int
    job_group: int
    kind: str
    phase: str
    attempt: int
    root_state: str
    root_msg: str | None
    params: str | None
    reduce_task: str | None
    tolerance: str | None
    max_retries: int
    total: int
    succeeded: int
    failed: int
    running: int
    result: str | None
    result_recorded: int
    created_at: int
    ended_at: int | None
    pre_task: str | None = None

    @property
    def progress(self) -> Progress:
        return Progress(self.total, self.succeeded, self.failed, self.running)


@dataclass(frozen=True, slots=True)
class SubTaskRow:
    id: int
    run_id: int
    job_group: int
    task_key: str
    task_name: str
    kind: str
    shard_index: int
    shard_total: int
    item: str | None
    status: str
    attempt: int
    failures: int
    losses: int
    executor_address: str | None
    result: str | None
    message: str | None
    created_at: int
    dispatched_at: int | None
    ended_at: int | None
    dispatched_by: str | None = None  # the admin node that claimed it (while running)
    log: str | None = None  # its handler's last log lines (the executor keeps 4 KiB)


# A row of ``select(subtask)`` is a SubTaskRow field for field: built positionally (a claim
# or a result batch reads thousands inside its write; by name costs twice as much).
assert [f.name for f in fields(SubTaskRow)] == [c.name for c in subtask.columns]
_by_position = cast(Callable[..., SubTaskRow], SubTaskRow)


def subtask_row(row: Row[Any]) -> SubTaskRow:
    """The record of a row of ``select(subtask)``."""
    return _by_position(*row)


@dataclass(frozen=True, slots=True)
class NewSubTask:
    key: str
    task_name: str
    kind: str = KIND_MAP
    item: str | None = None
    shard_index: int = 0
    shard_total: int = 0
    executor: str | None = None  # a broadcast part: the executor it must run on


@dataclass(frozen=True, slots=True)
class ClaimedTask:
    """A sub-task claimed for one dispatch: ``attempt`` is the attempt it was claimed as."""

    id: int
    run_id: int
    attempt: int
    key: str
    task_name: str
    kind: str
    item: str | None
    shard_index: int
    shard_total: int
    executor_address: str


@dataclass(frozen=True, slots=True)
class TaskUpdate:
    """An event for sub-task ``id``; ``result`` (JSON) and ``message`` go with a Finished."""

    id: int
    event: TaskEvent
    result: str | None = None
    message: str | None = None
    node: str | None = None  # with Dispatched: the admin node that claims it
    log: str | None = None  # with Finished: the handler's last log lines


def guard_sql(column: Any, guard: GroupGuard | None) -> list[ColumnElement[bool]]:
    if guard is None:
        return []
    if guard.only is not None:
        return [column.in_(sorted(guard.only))]
    return [column.not_in(sorted(guard.excluded))] if guard.excluded else []


def task_of(row: SubTaskRow) -> Task:
    return Task(TaskState(row.status), row.attempt, row.executor_address, row.failures, row.losses)


def policy_of(kind: str, max_retries: int) -> TaskPolicy:
    """Hooks are not retried (re-dispatched when lost); a broadcast part belongs to its
    executor: lost with it, it fails (not moved)."""
    if kind in HOOKS:
        return TaskPolicy(max_retries=0)
    if kind == KIND_PART:
        return TaskPolicy(max_retries=max_retries, max_redispatches=0)
    return TaskPolicy(max_retries=max_retries)


def tolerance_of(text: str | None) -> FailureTolerance:
    if not text:
        return FailureTolerance()
    try:
        return FailureTolerance.parse(text)
    except JoinError:
        return FailureTolerance()  # validated when the job is saved; an old value allows none


@dataclass(frozen=True, slots=True)
class JobSettings:
    tolerance: str | None
    max_retries: int
    handle_code: int


def new_values(row: SubTaskRow, new: Task, u: TaskUpdate, now_ms: int) -> dict[str, Any]:
    """The row's new columns (the same columns for every row: one batched UPDATE)."""
    values: dict[str, Any] = {
        "status": new.state.value,
        "attempt": new.attempt,
        "failures": new.failures,
        "losses": new.losses,
        "executor_address": new.executor,
        "result": row.result,
        "message": row.message,
        "dispatched_at": row.dispatched_at,
        "ended_at": row.ended_at,
        "dispatched_by": row.dispatched_by if new.state is TaskState.RUNNING else None,
        "log": None if isinstance(u.event, RetryRequested) else row.log,
    }
    event = u.event
    if isinstance(event, Dispatched):
        values["dispatched_by"] = u.node
    if new.state is TaskState.RUNNING and new.attempt != row.attempt:
        values["dispatched_at"] = now_ms
        values["ended_at"] = None
    if isinstance(event, Finished):
        values["result"] = u.result if event.ok else None
        values["message"] = (u.message or "")[:MESSAGE_MAX] or None
        values["log"] = u.log
    elif isinstance(event, Lost):
        values["message"] = (u.message or "its executor was lost")[:MESSAGE_MAX]
    elif isinstance(event, CancelRequested):
        values["message"] = u.message or "cancelled"
    elif isinstance(event, RetryRequested):
        values["message"] = None
        values["result"] = None
    if new.state.is_final:
        values["ended_at"] = now_ms
    return values

