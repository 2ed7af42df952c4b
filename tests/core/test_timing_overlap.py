"""Overlap policies (Temporal's six), decided over all runs of a job."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobring.core.timing import (
    MAX_BUFFERED,
    OverlapAction,
    OverlapPolicy,
    OverlapState,
    decide_due,
    decide_finished,
    drain,
)

A, B = OverlapAction, OverlapPolicy


def test_nothing_running_starts_whatever_the_policy() -> None:
    for policy in OverlapPolicy:
        decision = decide_due(policy, OverlapState(), 100)
        assert (decision.action, decision.start, decision.state) == (A.START, 100, OverlapState())


@pytest.mark.parametrize(
    ("policy", "action", "start", "stop", "buffered"),
    [
        (B.SKIP, A.SKIP, None, set(), ()),
        (B.BUFFER_ONE, A.BUFFER, None, set(), (200,)),
        (B.BUFFER_ALL, A.BUFFER, None, set(), (200,)),
        (B.CANCEL_OTHER, A.CANCEL_THEN_START, None, {1, 2}, (200,)),
        (B.TERMINATE_OTHER, A.TERMINATE_THEN_START, 200, {1, 2}, ()),
        (B.ALLOW_ALL, A.START, 200, set(), ()),
    ],
)
def test_a_fire_while_runs_are_in_progress(
    policy: OverlapPolicy, action: OverlapAction, start: int | None, stop: set[int], buffered: tuple[int, ...]
) -> None:
    decision = decide_due(policy, OverlapState(frozenset({1, 2})), 200)
    assert (decision.action, decision.start, set(decision.stop), decision.state.buffered) == (
        action,
        start,
        stop,
        buffered,
    )
    if action is A.SKIP:
        assert decision.reason is not None and "policy skip" in decision.reason


def test_buffer_one_keeps_the_first_waiting_fire() -> None:
    state = decide_due(B.BUFFER_ONE, OverlapState(frozenset({1}), (200,)), 300)
    assert state.action is A.SKIP and state.state.buffered == (200,) and "buffer_one" in (state.reason or "")


def test_cancel_other_replaces_a_waiting_fire() -> None:
    first = decide_due(B.CANCEL_OTHER, OverlapState(frozenset({1})), 200)
    second = decide_due(B.CANCEL_OTHER, first.state, 300)
    assert second.state.buffered == (300,) and second.dropped == (200,) and second.stop == frozenset({1})
    finished = decide_finished(second.state, 1)
    assert (finished.action, finished.start, finished.state) == (A.START, 300, OverlapState())


def test_buffer_all_is_capped() -> None:
    full = OverlapState(frozenset({1}), tuple(range(MAX_BUFFERED)))
    decision = decide_due(B.BUFFER_ALL, full, 10**6)
    assert decision.action is A.SKIP and decision.state == full


def test_finished_starts_the_oldest_waiting_fire_only_when_nothing_runs() -> None:
    state = OverlapState(frozenset({1, 2}), (200, 300))
    still = decide_finished(state, 1)
    assert still.action is A.NOTHING and still.state == OverlapState(frozenset({2}), (200, 300))
    last = decide_finished(still.state, 2)
    assert (last.action, last.start, last.state) == (A.START, 200, OverlapState(frozenset(), (300,)))
    assert last.state.started(9).running == frozenset({9})


def test_waiting_fires_without_runs_must_be_drained_first() -> None:
    stale = OverlapState(frozenset(), (200,))
    with pytest.raises(ValueError):
        decide_due(B.BUFFER_ALL, stale, 300)
    drained = drain(stale)
    assert (drained.action, drained.start, drained.state) == (A.START, 200, OverlapState())
    assert drain(OverlapState(frozenset({1}), (200,))).action is A.NOTHING


# -- property: a simulated job under each policy ------------------------------------------------------


@dataclass
class Simulation:
    policy: OverlapPolicy
    state: OverlapState = field(default_factory=OverlapState)
    started: list[int] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)
    stopped: list[int] = field(default_factory=list)
    next_run: int = 0
    runs: dict[int, int] = field(default_factory=dict)  # run id -> fire
    max_running: int = 0

    def start(self, fire: int) -> None:
        self.next_run += 1
        self.runs[self.next_run] = fire
        self.started.append(fire)
        self.state = self.state.started(self.next_run)
        self.max_running = max(self.max_running, len(self.state.running))

    def due(self, fire: int) -> None:
        decision = decide_due(self.policy, self.state, fire)
        self.state = decision.state
        self.skipped.extend(decision.dropped)
        self.stopped.extend(decision.stop)
        if decision.action is A.SKIP:
            self.skipped.append(fire)
        if decision.start is not None:
            self.start(decision.start)

    def finish(self, index: int) -> None:
        if not self.state.running:
            return
        run = sorted(self.state.running)[index % len(self.state.running)]
        decision = decide_finished(self.state, run)
        self.state = decision.state
        if decision.start is not None:
            self.start(decision.start)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(list(OverlapPolicy)), st.lists(st.one_of(st.none(), st.integers(0, 5)), max_size=40))
def test_policies_keep_their_promises(policy: OverlapPolicy, events: list[int | None]) -> None:
    """``None`` is a fire coming due (fires are 0, 1, 2 ...), an int a run ending."""
    sim = Simulation(policy)
    fires = 0
    for event in events:
        if event is None:
            sim.due(fires)
            fires += 1
        else:
            sim.finish(event)
    waiting = list(sim.state.buffered)
    # Every fire is accounted for exactly once: started, skipped (or dropped), or still waiting.
    assert sorted(sim.started + sim.skipped + waiting) == list(range(fires))
    # Fires start in the order they came due.
    assert sim.started == sorted(sim.started)
    if policy is not OverlapPolicy.ALLOW_ALL:
        # One run at a time: a cancelled run ends before its replacement starts, a terminated one
        # is gone at once.
        assert sim.max_running <= 1
    if policy is OverlapPolicy.ALLOW_ALL:
        assert sim.started == list(range(fires)) and not sim.skipped
    if policy is OverlapPolicy.BUFFER_ALL:
        assert not sim.skipped
    if policy in (OverlapPolicy.BUFFER_ONE, OverlapPolicy.CANCEL_OTHER):
        assert len(waiting) <= 1
    if policy in (OverlapPolicy.SKIP, OverlapPolicy.TERMINATE_OTHER, OverlapPolicy.ALLOW_ALL):
        assert not waiting
    if policy is OverlapPolicy.TERMINATE_OTHER:
        assert not sim.skipped and sim.started == list(range(fires))
