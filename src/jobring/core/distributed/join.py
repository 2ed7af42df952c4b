"""The parent's join: its children's progress -> the parent's outcome, and when to reduce.

A parent run (sharded, map, map-reduce or broadcast) has ``total`` children (shards,
sub-tasks, executor runs). A child counts as *failed* only once it is final: failed after its
last retry, lost after its last re-dispatch, or cancelled.

**Failure tolerance.** The parent succeeds when at most ``allowed(total)`` children failed:

- ``max_failed`` (a count) and/or ``max_failed_percent`` (p); with both, the smaller applies;
  with neither, no failure is allowed.
- The percentage rule is exact (rational arithmetic, no floats): "at most p % failed" means
  ``failed / total <= p / 100``, so ``allowed = floor(total * p / 100)``. 1 % of 150 allows
  1 failure; 1 % of 99 allows none; 2.5 % of 200 allows 5.

**When the outcome is certain.** With ``f`` failed and ``r`` children not final yet:
failure is certain once ``f > allowed`` (no later result can undo it), success once
``f + r <= allowed`` (even if every remaining child fails). The parent finishes when every
child is final, or at once on certain failure when ``fail_fast`` is set (the remaining
children are then cancelled). It never finishes early on certain success: the reduce and the
child jobs need every result.

**Reduce, exactly once.** A map-reduce parent goes MAPPING -> REDUCING when the join
finishes with success, and only then: :func:`reduce_due` is that transition. The admin
applies it with a conditional update (``SET phase = 'reducing' WHERE id = :id AND phase =
'mapping' AND attempt = :attempt``): one node changes the row, and only that node dispatches
the reduce task, stored under :func:`reduce_key` (a unique key, so even a repeated dispatch
is one task). Duplicated or reordered child events cannot repeat it: once past MAPPING
the phase never returns to it, except by a user's retry, which starts a new attempt and so
a new key.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from fractions import Fraction

from jobring.core.fielderror import FieldError

__all__ = [
    "FailureTolerance",
    "JoinError",
    "JoinOutcome",
    "JoinVerdict",
    "ParentPhase",
    "Progress",
    "after_join",
    "after_reduce",
    "join",
    "reduce_due",
    "reduce_key",
]


class JoinError(FieldError):
    """Invalid join or retry input; ``field`` names the offending field."""


@dataclass(frozen=True, slots=True)
class Progress:
    """Children of a parent by state: done (succeeded + failed), running, pending (the rest)."""

    total: int
    succeeded: int = 0
    failed: int = 0
    running: int = 0

    def __post_init__(self) -> None:
        if min(self.total, self.succeeded, self.failed, self.running) < 0:
            raise JoinError("progress", "counts cannot be negative")
        if self.succeeded + self.failed + self.running > self.total:
            raise JoinError("progress", f"more children counted than the {self.total} there are")

    @property
    def done(self) -> int:
        return self.succeeded + self.failed

    @property
    def pending(self) -> int:
        return self.total - self.done - self.running

    @property
    def remaining(self) -> int:
        """Children not final yet (running or pending)."""
        return self.total - self.done


@dataclass(frozen=True, slots=True)
class FailureTolerance:
    """How many children may fail with the parent still a success (see the module docstring)."""

    max_failed: int | None = None
    max_failed_percent: Fraction | None = None

    def __post_init__(self) -> None:
        if self.max_failed is not None and self.max_failed < 0:
            raise JoinError("max_failed", "cannot be negative")
        if self.max_failed_percent is not None and not 0 <= self.max_failed_percent <= 100:
            raise JoinError("max_failed_percent", "must be between 0 and 100")

    @classmethod
    def parse(cls, text: str) -> FailureTolerance:
        """``"3"`` (a count), ``"1%"`` / ``"0.5 %"`` (a percentage, decimal, exact), or both
        separated by a comma (``"3, 1%"``: the smaller applies)."""
        count: int | None = None
        percent: Fraction | None = None
        parts = [p.strip() for p in text.split(",")]
        try:
            for value in parts:
                if value.endswith("%") and percent is None:
                    percent = Fraction(value[:-1].strip())
                elif not value.endswith("%") and count is None and value.isdigit():
                    count = int(value)
                else:
                    raise ValueError(value)
        except (ValueError, ZeroDivisionError):
            raise JoinError("failure_tolerance", f"not a count or a percentage: {text!r}") from None
        return cls(max_failed=count, max_failed_percent=percent)

    def allowed(self, total: int) -> int:
        """The most failed children a parent of ``total`` children may have and succeed."""
        limits = []
        if self.max_failed is not None:
            limits.append(self.max_failed)
        if self.max_failed_percent is not None:
            limits.append(int(total * self.max_failed_percent / 100))  # int() floors a non-negative
        return min(limits, default=0)


class JoinOutcome(StrEnum):
    UNDECIDED = "undecided"
    SUCCESS = "success"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class JoinVerdict:
    """``outcome``: the parent's outcome once certain (UNDECIDED before); ``finished``: the
    parent ends now with it; ``cancel_rest``: cancel the children not final (fail fast)."""

    outcome: JoinOutcome
    finished: bool
    cancel_rest: bool
    allowed_failures: int


def join(progress: Progress, tolerance: FailureTolerance, *, fail_fast: bool = False) -> JoinVerdict:
    """The parent's verdict for this progress. No children (an empty map) is a success."""
    allowed = tolerance.allowed(progress.total)
    if progress.failed > allowed:
        finish = fail_fast or progress.remaining == 0
        return JoinVerdict(JoinOutcome.FAILED, finish, finish and progress.remaining > 0, allowed)
    if progress.failed + progress.remaining <= allowed:
        return JoinVerdict(JoinOutcome.SUCCESS, progress.remaining == 0, False, allowed)
    return JoinVerdict(JoinOutcome.UNDECIDED, False, False, allowed)


class ParentPhase(StrEnum):
    PRE = "pre"  # a broadcast's pre hook runs; its success moves it to MAPPING
    MAPPING = "mapping"
    # A user's retry puts the failed children back in several writes: nothing is dispatched
    # and the join waits until all are back, then the phase goes to MAPPING (or PRE).
    RETRYING = "retrying"
    REDUCING = "reducing"
    SUCCEEDED = "succeeded"
    FAILED = "failed"

    @property
    def is_final(self) -> bool:
        return self in (ParentPhase.SUCCEEDED, ParentPhase.FAILED)


def after_join(phase: ParentPhase, verdict: JoinVerdict, *, has_reduce: bool) -> ParentPhase:
    """The parent's phase after its children's progress changed (only MAPPING moves)."""
    if phase is not ParentPhase.MAPPING or not verdict.finished:
        return phase
    if verdict.outcome is JoinOutcome.FAILED:
        return ParentPhase.FAILED
    return ParentPhase.REDUCING if has_reduce else ParentPhase.SUCCEEDED


def reduce_due(phase: ParentPhase, verdict: JoinVerdict, *, has_reduce: bool) -> bool:
    """True exactly for the MAPPING -> REDUCING transition: start the reduce task now."""
    return phase is ParentPhase.MAPPING and (
        after_join(phase, verdict, has_reduce=has_reduce) is ParentPhase.REDUCING)


def after_reduce(phase: ParentPhase, ok: bool) -> ParentPhase:
    """The parent's phase once its reduce task is final (anything else leaves it as it is)."""
    if phase is not ParentPhase.REDUCING:
        return phase
    return ParentPhase.SUCCEEDED if ok else ParentPhase.FAILED


def reduce_key(parent_run_id: int, attempt: int) -> str:
    """The reduce task's unique key: one per parent and join attempt."""
    return f"reduce:{parent_run_id}:{attempt}"
