"""Broadcast with pre/post hooks: the sequence, and its invariants under any event order."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobring.core.distributed import JoinError
from jobring.core.distributed.broadcast import (
    BroadcastAction,
    BroadcastEvent,
    BroadcastPhase,
    ExecutorDone,
    Finish,
    Hook,
    HookDone,
    RunHook,
    RunOnExecutors,
    check_hooks,
    executors_outcome,
    on_broadcast_event,
    start_broadcast,
)
from jobring.core.distributed.join import FailureTolerance, Progress


def test_broadcast_pre_then_every_executor_then_post() -> None:
    tolerance = FailureTolerance()
    state, actions = start_broadcast(["b", "a"], has_pre=True, has_post=True)
    assert state.phase is BroadcastPhase.PRE and actions == [RunHook(Hook.PRE)]
    state, actions = on_broadcast_event(state, HookDone(Hook.PRE, ok=True), tolerance)
    assert state.phase is BroadcastPhase.RUNNING and actions == [RunOnExecutors(("a", "b"))]
    state, actions = on_broadcast_event(state, ExecutorDone("a", ok=True), tolerance)
    assert actions == [] and state.progress == Progress(2, succeeded=1, running=1)
    for event in (ExecutorDone("a", ok=False), ExecutorDone("zz", ok=True), HookDone(Hook.PRE, ok=True)):
        assert on_broadcast_event(state, event, tolerance) == (state, [])  # duplicate, unknown, late
    state, actions = on_broadcast_event(state, ExecutorDone("b", ok=True), tolerance)
    assert state.phase is BroadcastPhase.POST and actions == [RunHook(Hook.POST)]
    state, actions = on_broadcast_event(state, HookDone(Hook.POST, ok=True), tolerance)
    assert state.phase is BroadcastPhase.SUCCEEDED and actions == [Finish(BroadcastPhase.SUCCEEDED, None)]
    assert on_broadcast_event(state, HookDone(Hook.POST, ok=False), tolerance) == (state, [])


def test_a_failed_pre_hook_stops_the_broadcast() -> None:
    state, _ = start_broadcast(["a"], has_pre=True, has_post=True)
    state, actions = on_broadcast_event(state, HookDone(Hook.PRE, ok=False), FailureTolerance())
    assert state.phase is BroadcastPhase.FAILED
    assert actions == [Finish(BroadcastPhase.FAILED, "pre hook failed")]
    assert on_broadcast_event(state, ExecutorDone("a", ok=True), FailureTolerance()) == (state, [])


def test_post_runs_after_failures_and_the_outcome_follows_the_tolerance() -> None:
    for tolerance, expected in ((FailureTolerance(), BroadcastPhase.FAILED),
                                (FailureTolerance(max_failed=1), BroadcastPhase.SUCCEEDED)):
        state, _ = start_broadcast(["a", "b"], has_pre=False, has_post=True)
        state, _ = on_broadcast_event(state, ExecutorDone("a", ok=False), tolerance)
        state, actions = on_broadcast_event(state, ExecutorDone("b", ok=True), tolerance)
        assert actions == [RunHook(Hook.POST)]
        state, actions = on_broadcast_event(state, HookDone(Hook.POST, ok=True), tolerance)
        assert state.phase is expected
    state, _ = start_broadcast(["a"], has_pre=False, has_post=True)
    state, _ = on_broadcast_event(state, ExecutorDone("a", ok=True), FailureTolerance())
    state, actions = on_broadcast_event(state, HookDone(Hook.POST, ok=False), FailureTolerance())
    assert actions == [Finish(BroadcastPhase.FAILED, "post hook failed")]


def test_without_hooks_and_without_executors() -> None:
    state, actions = start_broadcast(["a"], has_pre=False, has_post=False)
    assert actions == [RunOnExecutors(("a",))]
    state, actions = on_broadcast_event(state, ExecutorDone("a", ok=False), FailureTolerance())
    assert actions == [Finish(BroadcastPhase.FAILED, "1 of 1 executors failed (at most 0 allowed)")]
    state, actions = start_broadcast([], has_pre=True, has_post=True)
    assert state.phase is BroadcastPhase.FAILED and actions == [Finish(BroadcastPhase.FAILED,
                                                                       "no executor to broadcast to")]


events = st.one_of(st.builds(HookDone, st.sampled_from(list(Hook)), st.booleans()),
                   st.builds(ExecutorDone, st.sampled_from(["a", "b", "c", "x"]), st.booleans()))


@settings(max_examples=300, deadline=None)
@given(has_pre=st.booleans(), has_post=st.booleans(), stream=st.lists(events, max_size=30),
       tolerance=st.sampled_from([FailureTolerance(), FailureTolerance(max_failed=1)]))
def test_hooks_and_executors_run_in_order_and_once(
    has_pre: bool, has_post: bool, stream: list[BroadcastEvent], tolerance: FailureTolerance
) -> None:
    state, actions = start_broadcast(["a", "b", "c"], has_pre=has_pre, has_post=has_post)
    log: list[BroadcastAction] = list(actions)
    pre_ok = not has_pre
    done: set[str] = set()
    for event in stream:
        before = state
        state, actions = on_broadcast_event(state, event, tolerance)
        log.extend(actions)
        if isinstance(event, HookDone) and event.hook is Hook.PRE and before.phase is BroadcastPhase.PRE:
            pre_ok = event.ok
        if isinstance(event, ExecutorDone) and before.phase is BroadcastPhase.RUNNING:
            done.add(event.executor)
        if before.phase in (BroadcastPhase.SUCCEEDED, BroadcastPhase.FAILED):
            assert state == before and not actions  # nothing happens after the end
    kinds = [type(a).__name__ + (f":{a.hook}" if isinstance(a, RunHook) else "") for a in log]
    expected_order = ["RunHook:pre", "RunOnExecutors", "RunHook:post", "Finish"]
    assert kinds == [k for k in expected_order if k in kinds]  # each at most once, in this order
    assert ("RunOnExecutors" in kinds) == pre_ok
    assert ("RunHook:post" in kinds) == (has_post and pre_ok and done >= {"a", "b", "c"})
    if "Finish" in kinds:
        assert state.phase in (BroadcastPhase.SUCCEEDED, BroadcastPhase.FAILED)
        if state.phase is BroadcastPhase.SUCCEEDED:
            assert len(state.failed) <= tolerance.allowed(3)


def test_check_hooks_names_the_field() -> None:
    check_hooks("snap", "report", broadcast=True, shard_count=0)
    check_hooks(None, None, broadcast=False, shard_count=8)  # no hooks: nothing to check
    for pre, post, broadcast, shards, field in [
        ("snap", None, False, 0, "broadcast_pre"),  # not a broadcast job
        (None, "9 lives", True, 0, "broadcast_post"),  # not a handler name
        (None, "report", True, 4, "broadcast_post"),  # also sharded
    ]:
        with pytest.raises(JoinError) as caught:
            check_hooks(pre, post, broadcast=broadcast, shard_count=shards)
        assert caught.value.field == field


def test_executors_outcome_follows_the_failure_tolerance() -> None:
    assert executors_outcome(Progress(4, 4, 0), FailureTolerance())[0] is BroadcastPhase.SUCCEEDED
    assert executors_outcome(Progress(4, 3, 1), FailureTolerance(max_failed=1))[0] is BroadcastPhase.SUCCEEDED
    phase, reason = executors_outcome(Progress(4, 2, 2), FailureTolerance(max_failed=1))
    assert (phase, reason) == (BroadcastPhase.FAILED, "2 of 4 executors failed (at most 1 allowed)")
