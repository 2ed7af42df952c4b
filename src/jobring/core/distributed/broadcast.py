"""A broadcast with pre/post hooks: the pre hook once, then every executor, then the post hook
once. A tiny state machine: the admin stores :class:`Broadcast`, feeds it events and carries
out the actions it returns.

::

    PRE --pre ok--> RUNNING --all executors done--> POST --post done--> SUCCEEDED / FAILED
     \\--pre failed--> FAILED (no executor runs, no post hook)

- The executors are fixed when the broadcast starts (the live ones then). An executor that
  dies mid-run counts as failed (a broadcast part belongs to its executor: it is not moved).
- The outcome of the executor runs follows the parent's failure tolerance
  (:func:`jobring.core.distributed.join.join`). The post hook runs whatever that outcome is
  (it sees the results, e.g. to clean up); the broadcast then succeeds when the executors'
  outcome is a success and the post hook succeeded.
- Events that do not fit the phase (a duplicate, an unknown executor, a late hook result)
  change nothing and return no action.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

from jobring.core.distributed.join import FailureTolerance, JoinError, JoinOutcome, Progress, join

__all__ = [
    "Broadcast",
    "BroadcastAction",
    "BroadcastEvent",
    "BroadcastPhase",
    "ExecutorDone",
    "Finish",
    "Hook",
    "HookDone",
    "RunHook",
    "RunOnExecutors",
    "check_hooks",
    "executors_outcome",
    "on_broadcast_event",
    "start_broadcast",
]

_HOOK_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,63}")


def check_hooks(pre: str | None, post: str | None, *, broadcast: bool, shard_count: int) -> None:
    """A job's hooks (handler names, None: none) are usable: JoinError naming the field.
    Hooks belong to a broadcast job (route SHARDING_BROADCAST) that is not also sharded."""
    for field, name in (("broadcast_pre", pre), ("broadcast_post", post)):
        if name is None:
            continue
        if not _HOOK_NAME.fullmatch(name):
            raise JoinError(field, f"{name[:80]!r} is not a handler name (a letter, then up to 63 "
                                   "letters, digits, '_', '.', '-')")
        if not broadcast:
            raise JoinError(field, "hooks need the route strategy SHARDING_BROADCAST")
        if shard_count:
            raise JoinError(field, "a broadcast with hooks runs one part per executor: set shard_count 0")


class BroadcastPhase(StrEnum):
    PRE = "pre"
    RUNNING = "running"
    POST = "post"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class Hook(StrEnum):
    PRE = "pre"
    POST = "post"


@dataclass(frozen=True, slots=True)
class Broadcast:
    """The stored state: the phase, the executors, those done and those failed among them,
    whether a post hook follows, and why it failed (None otherwise)."""

    phase: BroadcastPhase
    executors: frozenset[str]
    done: frozenset[str] = frozenset()
    failed: frozenset[str] = frozenset()
    has_post: bool = False
    reason: str | None = None

    @property
    def progress(self) -> Progress:
        running = len(self.executors) - len(self.done) if self.phase is BroadcastPhase.RUNNING else 0
        return Progress(len(self.executors), len(self.done) - len(self.failed), len(self.failed), running)


@dataclass(frozen=True, slots=True)
class RunHook:
    hook: Hook


@dataclass(frozen=True, slots=True)
class RunOnExecutors:
    executors: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Finish:
    phase: BroadcastPhase
    reason: str | None


@dataclass(frozen=True, slots=True)
class HookDone:
    hook: Hook
    ok: bool


@dataclass(frozen=True, slots=True)
class ExecutorDone:
    executor: str
    ok: bool


BroadcastAction = RunHook | RunOnExecutors | Finish
BroadcastEvent = HookDone | ExecutorDone
_Step = tuple[Broadcast, list[BroadcastAction]]


def _run_executors(state: Broadcast) -> _Step:
    running = replace(state, phase=BroadcastPhase.RUNNING)
    return running, [RunOnExecutors(tuple(sorted(state.executors)))]


def _finish(state: Broadcast, phase: BroadcastPhase, reason: str | None) -> _Step:
    return replace(state, phase=phase, reason=reason), [Finish(phase, reason)]


def start_broadcast(
    executors: Sequence[str], *, has_pre: bool, has_post: bool
) -> tuple[Broadcast, list[BroadcastAction]]:
    """The first state and actions. No executor: FAILED at once."""
    state = Broadcast(BroadcastPhase.PRE, frozenset(executors), has_post=has_post)
    if not state.executors:
        return _finish(state, BroadcastPhase.FAILED, "no executor to broadcast to")
    if has_pre:
        return state, [RunHook(Hook.PRE)]
    return _run_executors(state)


def executors_outcome(progress: Progress, tolerance: FailureTolerance) -> tuple[BroadcastPhase, str | None]:
    """SUCCEEDED or FAILED (with why) for the executors' parts once all are final, under the
    failure tolerance; the post hook's own result comes on top (:func:`on_broadcast_event`)."""
    verdict = join(progress, tolerance)
    if verdict.outcome is JoinOutcome.SUCCESS:
        return BroadcastPhase.SUCCEEDED, None
    return BroadcastPhase.FAILED, (f"{progress.failed} of {progress.total} executors failed "
                                   f"(at most {verdict.allowed_failures} allowed)")


def _executors_outcome(state: Broadcast, tolerance: FailureTolerance) -> tuple[BroadcastPhase, str | None]:
    return executors_outcome(state.progress, tolerance)


def on_broadcast_event(
    state: Broadcast, event: BroadcastEvent, tolerance: FailureTolerance
) -> tuple[Broadcast, list[BroadcastAction]]:
    """The state after ``event`` and what to do now (nothing for an event that does not fit)."""
    if isinstance(event, HookDone):
        if state.phase is BroadcastPhase.PRE and event.hook is Hook.PRE:
            if not event.ok:
                return _finish(state, BroadcastPhase.FAILED, "pre hook failed")
            return _run_executors(state)
        if state.phase is BroadcastPhase.POST and event.hook is Hook.POST:
            phase, reason = _executors_outcome(state, tolerance)
            if not event.ok:
                phase, reason = BroadcastPhase.FAILED, "post hook failed"
            return _finish(state, phase, reason)
        return state, []
    if state.phase is not BroadcastPhase.RUNNING or event.executor not in state.executors:
        return state, []
    if event.executor in state.done:
        return state, []
    state = replace(state, done=state.done | {event.executor},
                    failed=state.failed if event.ok else state.failed | {event.executor})
    if state.done != state.executors:
        return state, []
    if state.has_post:
        return replace(state, phase=BroadcastPhase.POST), [RunHook(Hook.POST)]
    return _finish(state, *_executors_outcome(state, tolerance))
