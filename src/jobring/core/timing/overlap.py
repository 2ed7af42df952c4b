"""Overlap policies: what a due fire does while runs of the same job are still in progress.

Temporal's six policies, decided in the admin over all the job's runs on every executor
(XXL-JOB's block strategies stay what they are: an executor's decision about its own queue):

==================  ===========================================================================
policy              a fire that comes due while a run is in progress ...
==================  ===========================================================================
skip                is skipped (recorded as ``skipped``, reason overlap)
buffer_one          waits and starts when the running ones have ended; at most one waits, later
                    fires are skipped while one waits ("only the first one is started")
buffer_all          waits; all waiting fires start one after the other, oldest first, each when
                    the previous runs have ended (at most :data:`MAX_BUFFERED` wait)
cancel_other        cancels the running ones and starts when they have ended; a newer fire
                    replaces one that is still waiting
terminate_other     terminates the running ones and starts at once
allow_all           starts at once (the default: today's behaviour)
==================  ===========================================================================

The state is the set of running run ids and the waiting fires (their logical instants, oldest
first); each decision returns the new state. When a run ends, :func:`decide_finished` starts
the oldest waiting fire once no run is left. Nothing here reads a clock or a store.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

MAX_BUFFERED = 1_000


class OverlapPolicy(StrEnum):
    SKIP = "skip"
    BUFFER_ONE = "buffer_one"
    BUFFER_ALL = "buffer_all"
    CANCEL_OTHER = "cancel_other"
    TERMINATE_OTHER = "terminate_other"
    ALLOW_ALL = "allow_all"


class OverlapAction(StrEnum):
    START = "start"  # start ``start`` now
    SKIP = "skip"  # record the new fire as skipped
    BUFFER = "buffer"  # the new fire waits (it is in ``state.buffered``)
    CANCEL_THEN_START = "cancel_then_start"  # cancel ``stop``; the new fire waits until they end
    TERMINATE_THEN_START = "terminate_then_start"  # terminate ``stop`` and start ``start`` now
    NOTHING = "nothing"  # (decide_finished) runs are still in progress, or nothing waits


@dataclass(frozen=True, slots=True)
class OverlapState:
    running: frozenset[int] = frozenset()
    buffered: tuple[int, ...] = ()

    def started(self, run_id: int) -> OverlapState:
        """The state once the loop has started a run for the decision's ``start``."""
        return replace(self, running=self.running | {run_id})


@dataclass(frozen=True, slots=True)
class OverlapDecision:
    action: OverlapAction
    state: OverlapState
    start: int | None = None
    stop: frozenset[int] = frozenset()
    dropped: tuple[int, ...] = ()  # waiting fires given up (replaced or over the limit): skipped
    reason: str | None = None  # why the new fire is skipped, for the run record


def _while_running(policy: OverlapPolicy, state: OverlapState, fire: int) -> OverlapDecision:
    running, buffered = state.running, state.buffered
    if policy is OverlapPolicy.ALLOW_ALL:
        return OverlapDecision(OverlapAction.START, state, start=fire)
    if policy is OverlapPolicy.TERMINATE_OTHER:
        return OverlapDecision(
            OverlapAction.TERMINATE_THEN_START, OverlapState(), start=fire, stop=running, dropped=buffered
        )
    if policy is OverlapPolicy.CANCEL_OTHER:
        return OverlapDecision(
            OverlapAction.CANCEL_THEN_START, OverlapState(running, (fire,)), stop=running, dropped=buffered
        )
    if policy is OverlapPolicy.BUFFER_ONE and not buffered:
        return OverlapDecision(OverlapAction.BUFFER, OverlapState(running, (fire,)))
    if policy is OverlapPolicy.BUFFER_ALL and len(buffered) < MAX_BUFFERED:
        return OverlapDecision(OverlapAction.BUFFER, OverlapState(running, (*buffered, fire)))
    if policy is OverlapPolicy.SKIP:
        reason = "overlap: a run of this job is still in progress (policy skip)"
    elif policy is OverlapPolicy.BUFFER_ONE:
        reason = "overlap: a fire already waits for the running one (policy buffer_one)"
    else:
        reason = f"overlap: {MAX_BUFFERED} fires already wait (policy buffer_all)"
    return OverlapDecision(OverlapAction.SKIP, state, reason=reason)


def decide_due(policy: OverlapPolicy, state: OverlapState, fire: int) -> OverlapDecision:
    """What to do with the fire ``fire`` (its logical instant) that is due now.

    Fires wait only while runs are in progress; a state with waiting fires and no run (rebuilt
    after a restart) must go through :func:`drain` first, else ValueError.
    """
    if state.running:
        return _while_running(policy, state, fire)
    if state.buffered:
        raise ValueError("fires wait but nothing runs: drain() the state before deciding a new fire")
    return OverlapDecision(OverlapAction.START, state, start=fire)


def decide_finished(state: OverlapState, run_id: int) -> OverlapDecision:
    """A run of the job ended (success, failure, cancelled, terminated): start the oldest waiting
    fire once no run is left."""
    return drain(OverlapState(state.running - {run_id}, state.buffered))


def drain(state: OverlapState) -> OverlapDecision:
    """Start the oldest waiting fire if no run is in progress; else nothing."""
    if state.running or not state.buffered:
        return OverlapDecision(OverlapAction.NOTHING, state)
    return OverlapDecision(
        OverlapAction.START, OverlapState(state.running, state.buffered[1:]), start=state.buffered[0]
    )
