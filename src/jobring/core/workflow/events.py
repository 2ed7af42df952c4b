"""What goes into the engine (events) and what comes out (commands).

Every event carries ``at_ms``, the instant it happened (the engine reads no clock). Events about
a node name the attempt (and the fan-out item) they are about; one about an attempt that is no
longer running is ignored, so a duplicated or late event changes nothing.

Repair events carry ``round``: the run's round when the user asked (the API read it with the
run); a repair for another round is refused, so a repeated request does not repair twice. None
applies to the current round.

A command is emitted only by the transition that creates it, and is identified by
:attr:`key`: ``(node, attempt, item)`` for node commands (item -1 for a whole node), the round
for :class:`FinishRun`. The integrator records the new state and its commands in one
transaction (state row with a version check, commands in an outbox keyed by the run and
``key``), then carries the commands out in order: so a node fires once per attempt even when
two admins handle the same callback or an admin dies half-way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TypeAlias

from jobring.core.expression import JsonValue
from jobring.core.workflow.state import RunStatus, WorkflowRun

__all__ = [
    "Command",
    "Event",
    "FinishRun",
    "KillJob",
    "MarkSucceeded",
    "NodeDispatched",
    "NodeFinished",
    "NodeTimedOut",
    "Outcome",
    "RerunFrom",
    "RetryFailed",
    "RunStarted",
    "StartJob",
    "StartSubworkflow",
    "Step",
    "StopRun",
    "StopSubworkflow",
]


class Outcome(StrEnum):
    """How a node's run ended. ``failed`` and ``timed_out`` are retried (up to the node's
    retries); ``killed`` (a user killed the job run) is not."""

    SUCCESS = "success"
    FAILED = "failed"
    KILLED = "killed"
    TIMED_OUT = "timed_out"


# -- events --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunStarted:
    """Start a run of graph ``version``. ``params`` seed the context; ``retries`` are the
    inherited retry counts (:func:`~jobring.core.workflow.access.inherited_retries`)."""

    at_ms: int
    version: int
    params: Mapping[str, JsonValue] = field(default_factory=dict)
    retries: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class NodeDispatched:
    """The start command of ``(node, attempt, item)`` became run ``run_id`` (a job run's log id,
    or a sub-workflow run's id)."""

    node: str
    attempt: int
    run_id: int
    at_ms: int
    item: int | None = None


@dataclass(frozen=True, slots=True)
class NodeFinished:
    """A node's run (a job run, one fan-out item's run, or a sub-workflow run) ended.
    ``message`` is the handle message; ``context`` what the handler added (for a sub-workflow:
    :func:`~jobring.core.workflow.context.context_changes` of its run). Additions count only
    when the attempt succeeds."""

    node: str
    attempt: int
    outcome: Outcome
    at_ms: int
    item: int | None = None
    run_id: int | None = None
    message: str = ""
    context: Mapping[str, object] | None = None


@dataclass(frozen=True, slots=True)
class NodeTimedOut:
    """The integrator's deadline for ``(node, attempt, item)`` passed without a result: the run
    is killed and the attempt counts as timed out."""

    node: str
    attempt: int
    at_ms: int
    item: int | None = None


@dataclass(frozen=True, slots=True)
class RetryFailed:
    """Repair a failed or stopped run: run its failed, stopped and upstream-skipped nodes again
    (fan-out nodes only their unsuccessful items), keeping what succeeded."""

    at_ms: int
    round: int | None = None


@dataclass(frozen=True, slots=True)
class MarkSucceeded:
    """Repair: take the failed (or stopped) ``node`` as succeeded and let the rest go on."""

    node: str
    at_ms: int
    round: int | None = None
    note: str = "marked as succeeded"


@dataclass(frozen=True, slots=True)
class StopRun:
    """Stop a running run: kill its running nodes, run nothing more."""

    at_ms: int
    round: int | None = None
    note: str = "stopped by a user"


@dataclass(frozen=True, slots=True)
class RerunFrom:
    """Repair an ended run: run ``node`` again (whatever its parents did) and then its
    descendants by their joins; everything else is kept."""

    node: str
    at_ms: int
    round: int | None = None


Event: TypeAlias = (RunStarted | NodeDispatched | NodeFinished | NodeTimedOut | RetryFailed | MarkSucceeded
                    | StopRun | RerunFrom)


# -- commands ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StartJob:
    """Fire job ``job_id`` for ``(node, attempt, item)``. ``params`` (already rendered) and
    ``timeout_s`` override the job's own when not None. Fire it with the job's own fail-retry
    turned off: the engine counts and starts the retries."""

    node: str
    attempt: int
    item: int | None
    job_id: int
    params: str | None
    timeout_s: int | None

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.node, self.attempt, -1 if self.item is None else self.item)


@dataclass(frozen=True, slots=True)
class StartSubworkflow:
    """Start a run of workflow ``workflow_id`` for ``(node, attempt)`` with ``params`` (a copy of
    this run's context) as its starting context."""

    node: str
    attempt: int
    workflow_id: int
    params: Mapping[str, JsonValue]
    timeout_s: int | None

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.node, self.attempt, -1)


@dataclass(frozen=True, slots=True)
class KillJob:
    """Kill the job run of ``(node, attempt, item)`` (``run_id`` when already known)."""

    node: str
    attempt: int
    item: int | None
    run_id: int | None

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.node, self.attempt, -1 if self.item is None else self.item)


@dataclass(frozen=True, slots=True)
class StopSubworkflow:
    """Stop the sub-workflow run of ``(node, attempt)``."""

    node: str
    attempt: int
    run_id: int | None

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.node, self.attempt, -1)


@dataclass(frozen=True, slots=True)
class FinishRun:
    """The run ended (again, after a repair: once per round) with ``status``."""

    status: RunStatus
    message: str
    round: int

    @property
    def key(self) -> tuple[str, int, int]:
        return ("", self.round, -1)


Command: TypeAlias = StartJob | StartSubworkflow | KillJob | StopSubworkflow | FinishRun


@dataclass(frozen=True, slots=True)
class Step:
    """The result of one event: the new state (the same object when nothing changed), the
    commands to carry out, and why the event was ignored or refused (None when applied)."""

    run: WorkflowRun | None
    commands: tuple[Command, ...] = ()
    note: str | None = None

    @property
    def applied(self) -> bool:
        return self.note is None
