"""One admission pass: limits combine, the three policies, rate limits, the state it hands back."""

from __future__ import annotations

from jobring.core.flow.admission import Cancelled, FlowSnapshot, RunningRun, Skipped, Waiting, admit
from jobring.core.flow.ordering import QueuedRun
from jobring.core.flow.ratelimit import TOKEN_UNITS, BucketState, RateLimit, full_bucket
from jobring.core.flow.scopes import ConcurrencyLimit, OnLimit, group_scope, job_scope, key_scope, run_scopes

T0 = 1_700_000_000_000
JOB1, JOB2, GROUP = job_scope(1), job_scope(2), group_scope(9)


def queued(run_id: int, job: int = 1, tenant: str | None = None, at: int = 0, new: bool = False,
           priority: int = 2, group_key: str | None = None) -> QueuedRun:
    return QueuedRun(run_id, run_scopes(job, 9, job_key=tenant, group_key=group_key), T0 + at, priority, new)


def running(run_id: int, job: int = 1, tenant: str | None = None, at: int = -1000) -> RunningRun:
    return RunningRun(run_id, run_scopes(job, 9, job_key=tenant), T0 + at)


def test_without_limits_everything_starts_in_queue_order() -> None:
    decision = admit(FlowSnapshot([queued(1, at=2), queued(2, job=2, at=1), queued(3, at=3)]), T0 + 10)
    assert decision.start == (2, 1, 3)
    assert not decision.waiting and not decision.skip and not decision.cancel and not decision.buckets
    # Every key emptied its queue: no turn to keep.
    assert decision.turns == {} and decision.forget == () and decision.wake_ms is None


def test_turns_are_kept_while_a_key_waits_and_forgotten_when_it_empties() -> None:
    limits = {JOB1: ConcurrencyLimit(1)}
    runs = [queued(1, at=0), queued(2, at=1), queued(3, job=2, at=2), queued(4, job=3, at=3)]
    stored = {"job:1": 5, "job:2": 4, "job:7": 1}
    decision = admit(FlowSnapshot(runs, [], limits, turns=stored), T0 + 10)
    # job:3 (no turn) joins at the largest stored turn (5), behind job:2 (4) and job:1 (5, older head).
    assert decision.start == (3, 1, 4)
    assert decision.waiting == (Waiting(2, full=(JOB1,)),)
    assert decision.turns == {"job:1": 7}  # job 1 still waits: its new turn is kept
    assert decision.forget == ("job:2", "job:7")


def test_a_new_key_that_waits_gets_its_turn_stored() -> None:
    limits = {JOB1: ConcurrencyLimit(1)}
    decision = admit(FlowSnapshot([queued(1)], [running(100)], limits, turns={"job:2": 8}), T0)
    assert decision.turns == {"job:1": 0} and decision.forget == ("job:2",)


def test_job_group_and_key_limits_combine() -> None:
    key_a = key_scope(JOB1, "a")
    limits = {JOB1: ConcurrencyLimit(2), GROUP: ConcurrencyLimit(4), key_a: ConcurrencyLimit(1)}
    runs = [queued(1, tenant="a"), queued(2, tenant="a", at=1), queued(3, tenant="b", at=2),
            queued(4, tenant="c", at=3), queued(5, job=2, at=4), queued(6, job=2, at=5)]
    decision = admit(FlowSnapshot(runs, [running(100, job=2)], limits), T0 + 10)
    # Turns: a, b, c, job 2, then a and job 2 again. Run 1 takes key a's only slot, run 3 fills
    # job 1 (so run 4 waits), run 5 fills the group (job 2 already had one running).
    assert decision.start == (1, 3, 5)
    assert decision.waiting == (Waiting(4, full=(JOB1,)), Waiting(2, full=(JOB1, GROUP, key_a)),
                                Waiting(6, full=(GROUP,)))


def test_a_waiting_head_holds_back_its_key() -> None:
    limits = {JOB1: ConcurrencyLimit(1)}
    runs = [queued(1, group_key="a"), queued(2, job=2, group_key="a", at=1)]
    decision = admit(FlowSnapshot(runs, [running(100)], limits), T0)
    # Run 2 (job 2, no limit) is in the group's key a behind run 1: FIFO inside a key.
    assert decision.start == ()
    assert decision.waiting == (Waiting(1, full=(JOB1,)), Waiting(2, behind=1))


def test_skip_drops_new_and_queued_runs_that_find_the_limit_full() -> None:
    limits = {JOB1: ConcurrencyLimit(2, OnLimit.SKIP)}
    runs = [queued(1, at=0), queued(2, at=1, new=True), queued(3, at=2, new=True)]
    decision = admit(FlowSnapshot(runs, [running(100)], limits), T0 + 5)
    assert decision.start == (1,)
    assert decision.skip == (Skipped(2, JOB1), Skipped(3, JOB1))
    assert decision.queue == () and decision.waiting == ()


def test_skip_also_applies_to_runs_left_waiting_behind_another() -> None:
    limits = {JOB1: ConcurrencyLimit(1, OnLimit.SKIP), JOB2: ConcurrencyLimit(1)}
    runs = [queued(1, job=2, tenant="a"), queued(2, job=1, tenant="a", at=1, new=True)]
    decision = admit(FlowSnapshot(runs, [running(100, job=2), running(101, job=1)], limits), T0)
    assert decision.waiting == (Waiting(1, full=(JOB2,)),)
    assert decision.skip == (Skipped(2, JOB1),)


def test_cancel_oldest_replaces_the_oldest_active_run() -> None:
    limits = {JOB1: ConcurrencyLimit(2, OnLimit.CANCEL_OLDEST)}
    active = [running(100, at=-50), running(101, at=-90)]
    decision = admit(FlowSnapshot([queued(1, new=True)], active, limits), T0)
    assert decision.start == (1,)
    assert decision.cancel == (Cancelled(101, JOB1, for_run=1),)


def test_cancel_oldest_among_simultaneous_arrivals_keeps_the_newest() -> None:
    limits = {JOB1: ConcurrencyLimit(1, OnLimit.CANCEL_OLDEST)}
    runs = [queued(i, at=i, new=True) for i in (1, 2, 3)]
    decision = admit(FlowSnapshot(runs, [running(100)], limits), T0 + 10)
    assert decision.start == (3,)
    assert [(c.run_id, c.for_run) for c in decision.cancel] == [(100, 1), (1, 2), (2, 3)]


def test_cancel_oldest_waits_when_another_full_limit_says_queue() -> None:
    limits = {JOB1: ConcurrencyLimit(1, OnLimit.CANCEL_OLDEST), GROUP: ConcurrencyLimit(1)}
    decision = admit(FlowSnapshot([queued(1)], [running(100)], limits), T0)
    assert decision.start == () and decision.cancel == ()
    assert decision.waiting == (Waiting(1, full=(JOB1, GROUP)),)


def test_one_victim_can_free_two_scopes() -> None:
    replace = ConcurrencyLimit(1, OnLimit.CANCEL_OLDEST)
    limits = {JOB1: replace, GROUP: replace}
    decision = admit(FlowSnapshot([queued(1)], [running(100)], limits), T0)
    assert decision.start == (1,) and decision.cancel == (Cancelled(100, JOB1, 1),)


def test_cancel_oldest_without_a_known_victim_waits() -> None:
    # The active run of job 1 is not in the snapshot's list for the group scope: nothing to cancel.
    limits = {GROUP: ConcurrencyLimit(1, OnLimit.CANCEL_OLDEST)}
    snapshot = FlowSnapshot([queued(1)], [RunningRun(100, (GROUP,), T0)], limits)
    assert admit(snapshot, T0).start == (1,)  # the victim is found by scope, whatever its job
    limits = {JOB1: ConcurrencyLimit(1, OnLimit.CANCEL_OLDEST)}
    snapshot = FlowSnapshot([queued(1), queued(2, at=1)], [], {**limits, GROUP: ConcurrencyLimit(1)})
    decision = admit(snapshot, T0 + 5)
    assert decision.start == (1,) and decision.waiting == (Waiting(2, full=(JOB1, GROUP)),)


def test_rate_limit_takes_tokens_and_says_when_to_wake() -> None:
    rate = RateLimit(limit=2, period_ms=1000)
    runs = [queued(i, tenant="t", at=i, new=i > 2) for i in range(1, 6)]
    scope = key_scope(JOB1, "t")
    decision = admit(FlowSnapshot(runs, rates={scope: rate}), T0 + 10)
    assert decision.start == (1, 2)
    assert decision.queue == (3, 4, 5)
    assert decision.waiting[0] == Waiting(3, rate_limited=(scope,))
    assert decision.buckets[0].old is None
    assert decision.buckets[0].new == BucketState(0, T0 + 10)
    assert decision.wake_ms == T0 + 10 + 500
    # Half a second later one token is back: one more start, the write based on the stored row.
    later = admit(FlowSnapshot(runs[2:], rates={scope: rate}, buckets={scope: decision.buckets[0].new},
                               turns=decision.turns), T0 + 510)
    assert later.start == (3,)
    assert later.buckets[0].old == BucketState(0, T0 + 10)
    assert later.buckets[0].new == BucketState(0, T0 + 510)


def test_rate_limit_and_concurrency_limit_both_must_have_room() -> None:
    rate = RateLimit(limit=1, period_ms=1000)
    limits = {JOB1: ConcurrencyLimit(5)}
    buckets = {JOB1: BucketState(0, T0)}
    decision = admit(FlowSnapshot([queued(1)], [], limits, {JOB1: rate}, buckets), T0 + 10)
    assert decision.start == () and decision.waiting == (Waiting(1, rate_limited=(JOB1,)),)
    assert decision.buckets == ()  # nothing taken, nothing to write


def test_unchanged_buckets_are_not_written() -> None:
    rate = RateLimit(limit=1, period_ms=1000)
    limits = {JOB1: ConcurrencyLimit(1)}
    snapshot = FlowSnapshot([queued(1)], [running(100)], limits, {JOB1: rate}, {JOB1: full_bucket(rate, T0)})
    assert admit(snapshot, T0 + 5).buckets == ()


def test_max_starts_bounds_a_pass_and_the_rest_wait_their_turn() -> None:
    runs = [queued(i, job=i, at=i) for i in range(1, 6)]
    decision = admit(FlowSnapshot(runs), T0 + 10, max_starts=2)
    assert decision.start == (1, 2)
    assert decision.waiting == tuple(Waiting(i) for i in (3, 4, 5))


def test_priority_decides_who_gets_the_last_slot() -> None:
    limits = {GROUP: ConcurrencyLimit(1)}
    runs = [queued(1, job=1, at=0, priority=1), queued(2, job=2, at=5, priority=3)]
    assert admit(FlowSnapshot(runs, [], limits), T0 + 10).start == (2,)


def test_a_run_above_the_limit_after_it_was_lowered_starts_nothing_new() -> None:
    limits = {JOB1: ConcurrencyLimit(1)}
    decision = admit(FlowSnapshot([queued(1)], [running(100), running(101)], limits), T0)
    assert decision.start == () and decision.waiting == (Waiting(1, full=(JOB1,)),)


def test_tokens_are_whole_units_in_written_state() -> None:
    rate = RateLimit(limit=3, period_ms=1000)
    decision = admit(FlowSnapshot([queued(1)], rates={JOB1: rate}), T0)
    assert decision.buckets[0].new.level == 2 * TOKEN_UNITS
