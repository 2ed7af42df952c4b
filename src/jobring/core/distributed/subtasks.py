"""A child's life (shard, sub-task, reduce task): dispatches, retries, lost executors, and a
user's "retry only the failed ones".

Every dispatch is a new *attempt* (1, 2, ...). A result or a loss names the attempt it is
about; one for another attempt, or for a child no longer running, changes nothing, so
duplicated, late or reordered events are harmless. The admin stores a child as a row and
applies a transition with a conditional update on the old ``(state, attempt)``
(``UPDATE ... WHERE id = :id AND state = :state AND attempt = :attempt``): of two nodes
handling the same event one changes the row; only that one applies the progress change
(:func:`progress_after`) to the parent.

- A handler failure is retried up to ``max_retries`` times; then the child is FAILED.
- An attempt lost with its executor (SIGKILL, a lost result) is dispatched again, to any
  live executor, up to ``max_redispatches`` times, without using a retry; a late result of
  the lost attempt is ignored (the work may run twice: at-least-once, like any retry).
- A cancelled child (a user, or the parent failing fast) is CANCELLED; it counts as failed.
- The user's retry of a finished parent puts its FAILED and CANCELLED children back to
  PENDING with fresh budgets (:func:`plan_retry`); succeeded children keep their results.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Generic, TypeVar

from jobring.core.distributed.join import JoinError, ParentPhase, Progress

__all__ = [
    "CancelRequested",
    "Dispatched",
    "Finished",
    "Lost",
    "RetryPlan",
    "RetryRequested",
    "Task",
    "TaskEvent",
    "TaskPolicy",
    "TaskState",
    "apply_event",
    "plan_retry",
    "progress_after",
    "progress_of",
    "retry_attempt",
]

K = TypeVar("K")


class TaskState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_final(self) -> bool:
        return self in (TaskState.SUCCEEDED, TaskState.FAILED, TaskState.CANCELLED)


@dataclass(frozen=True, slots=True)
class TaskPolicy:
    max_retries: int = 0
    max_redispatches: int = 3

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise JoinError("max_retries", "cannot be negative")
        if self.max_redispatches < 0:
            raise JoinError("max_redispatches", "cannot be negative")


@dataclass(frozen=True, slots=True)
class Task:
    """A child's stored state: ``attempt`` dispatches so far, on ``executor`` the last one;
    ``failures`` and ``losses`` count against the policy's budgets."""

    state: TaskState = TaskState.PENDING
    attempt: int = 0
    executor: str | None = None
    failures: int = 0
    losses: int = 0


@dataclass(frozen=True, slots=True)
class Dispatched:
    """The admin sends ``attempt`` to ``executor`` (recorded before the call)."""

    attempt: int
    executor: str


@dataclass(frozen=True, slots=True)
class Finished:
    """The executor's result of ``attempt``."""

    attempt: int
    ok: bool


@dataclass(frozen=True, slots=True)
class Lost:
    """``attempt`` is lost: its executor died, or its result never came."""

    attempt: int


@dataclass(frozen=True, slots=True)
class CancelRequested:
    pass


@dataclass(frozen=True, slots=True)
class RetryRequested:
    pass


TaskEvent = Dispatched | Finished | Lost | CancelRequested | RetryRequested


def _running_event(task: Task, event: TaskEvent, policy: TaskPolicy) -> Task | None:
    if isinstance(event, Finished) and event.attempt == task.attempt:
        if event.ok:
            return replace(task, state=TaskState.SUCCEEDED)
        failures = task.failures + 1
        state = TaskState.PENDING if failures <= policy.max_retries else TaskState.FAILED
        return replace(task, state=state, failures=failures)
    if isinstance(event, Lost) and event.attempt == task.attempt:
        losses = task.losses + 1
        state = TaskState.PENDING if losses <= policy.max_redispatches else TaskState.FAILED
        return replace(task, state=state, losses=losses)
    return None


def apply_event(task: Task, event: TaskEvent, policy: TaskPolicy) -> Task | None:
    """The child after ``event``, or None when the event changes nothing (a duplicate, a
    result of another attempt, or an event that does not apply in the child's state)."""
    if isinstance(event, CancelRequested):
        return None if task.state.is_final else replace(task, state=TaskState.CANCELLED)
    if isinstance(event, RetryRequested):
        if task.state not in (TaskState.FAILED, TaskState.CANCELLED):
            return None
        return replace(task, state=TaskState.PENDING, failures=0, losses=0)
    if task.state is TaskState.PENDING:
        if isinstance(event, Dispatched) and event.attempt == task.attempt + 1:
            return replace(task, state=TaskState.RUNNING, attempt=event.attempt, executor=event.executor)
        return None
    if task.state is TaskState.RUNNING:
        return _running_event(task, event, policy)
    return None


def _counts(state: TaskState) -> tuple[int, int, int]:
    """(succeeded, failed, running) for one child in ``state``."""
    if state is TaskState.SUCCEEDED:
        return (1, 0, 0)
    if state in (TaskState.FAILED, TaskState.CANCELLED):
        return (0, 1, 0)
    if state is TaskState.RUNNING:
        return (0, 0, 1)
    return (0, 0, 0)


def progress_of(states: Iterable[TaskState]) -> Progress:
    """The parent's progress recounted from its children's states."""
    succeeded = failed = running = total = 0
    for state in states:
        s, f, r = _counts(state)
        succeeded, failed, running, total = succeeded + s, failed + f, running + r, total + 1
    return Progress(total, succeeded, failed, running)


def progress_after(progress: Progress, old: TaskState, new: TaskState) -> Progress:
    """The parent's progress after one child moved from ``old`` to ``new`` (the deltas an
    ``UPDATE parent SET succeeded = succeeded + :ds, ...`` applies)."""
    (s0, f0, r0), (s1, f1, r1) = _counts(old), _counts(new)
    return Progress(progress.total, progress.succeeded + s1 - s0, progress.failed + f1 - f0,
                    progress.running + r1 - r0)


@dataclass(frozen=True, slots=True)
class RetryPlan(Generic[K]):
    """The children to put back to PENDING, and the parent's new attempt (its phase goes back
    to MAPPING; with no child to retry, the join then starts the reduce again)."""

    tasks: tuple[K, ...]
    attempt: int


def retry_attempt(phase: ParentPhase, attempt: int, *, failed: bool) -> int:
    """The join attempt "retry only the failed sub-tasks" runs under, for a parent in ``phase``
    (``failed``: it has a FAILED or CANCELLED child): the next one, or for a retry interrupted
    midway (RETRYING) its own, so that repeating the request completes it. JoinError when
    the parent has not finished, or when it succeeded with nothing failed."""
    if phase is ParentPhase.RETRYING:
        return attempt
    if not phase.is_final:
        raise JoinError("state", f"the run is still {phase.value}: retry it once it has finished")
    if not failed and phase is ParentPhase.SUCCEEDED:
        raise JoinError("state", "nothing failed: there is nothing to retry")
    return attempt + 1


def plan_retry(phase: ParentPhase, attempt: int, tasks: Mapping[K, TaskState]) -> RetryPlan[K]:
    """What "retry only the failed sub-tasks" does for a finished parent: its FAILED and
    CANCELLED children (in key order) under :func:`retry_attempt`."""
    failed = tuple(sorted((k for k, s in tasks.items() if s in (TaskState.FAILED, TaskState.CANCELLED)),
                          key=str))
    return RetryPlan(failed, retry_attempt(phase, attempt, failed=bool(failed)))
