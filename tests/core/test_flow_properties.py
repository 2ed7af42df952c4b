"""Properties of admission: limits hold, no run waits for nothing, no run starves, and the
1,000-runs-at-30 scenario of issue 22 on two admin nodes sharing one store."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from jobring.core.flow.admission import Admission, FlowSnapshot, RunningRun, admit
from jobring.core.flow.ordering import QueuedRun, effective_priority
from jobring.core.flow.ratelimit import BucketState, RateLimit, bucket_now, take
from jobring.core.flow.scopes import ConcurrencyLimit, OnLimit, Scope, group_scope, run_scopes

T0 = 1_700_000_000_000
TICK_MS = 1_000


@st.composite
def snapshots(draw: st.DrawFn, policies: tuple[OnLimit, ...] = tuple(OnLimit)) -> FlowSnapshot:
    jobs = draw(st.integers(1, 4))
    tenants = ["a", "b", "c", None]

    def scopes() -> tuple[Scope, ...]:
        return run_scopes(draw(st.integers(1, jobs)), 1, group_key=draw(st.sampled_from(tenants)))

    every = {s for j in range(1, jobs + 1) for t in tenants for s in run_scopes(j, 1, group_key=t)}
    limited = draw(st.lists(st.sampled_from(sorted(every)), unique=True, max_size=len(every)))
    limits = {s: ConcurrencyLimit(draw(st.integers(1, 4)), draw(st.sampled_from(policies))) for s in limited}
    rated = draw(st.lists(st.sampled_from(sorted(every)), unique=True, max_size=3))
    rates = {s: RateLimit(draw(st.integers(1, 5)), 1000, draw(st.none() | st.integers(1, 3))) for s in rated}
    buckets = {s: BucketState(draw(st.integers(0, 3_000_000)), T0 - draw(st.integers(0, 2000))) for s in rated
               if draw(st.booleans())}
    running = [RunningRun(1000 + i, scopes(), T0 - draw(st.integers(0, 10_000)))
               for i in range(draw(st.integers(0, 8)))]
    queued = [QueuedRun(i, scopes(), T0 - draw(st.integers(0, 300_000)), draw(st.sampled_from([1, 2, 3])),
                        draw(st.booleans())) for i in range(draw(st.integers(0, 25)))]
    return FlowSnapshot(queued, running, limits, rates, buckets)


def counts_after(snapshot: FlowSnapshot, decision: Admission) -> Counter[Scope]:
    cancelled = {c.run_id for c in decision.cancel}
    by_id = {q.run_id: q for q in snapshot.queued}
    active = [r.scopes for r in snapshot.running if r.run_id not in cancelled]
    active += [by_id[i].scopes for i in decision.start]
    return Counter(s for scopes in active for s in scopes)


@settings(max_examples=150, deadline=None)
@given(snapshots())
def test_every_run_has_one_fate_and_no_started_scope_goes_over_its_limit(snapshot: FlowSnapshot) -> None:
    decision = admit(snapshot, T0)
    queued_ids = [q.run_id for q in snapshot.queued]
    cancelled_new = [c.run_id for c in decision.cancel if c.run_id in queued_ids]
    fates = [*decision.start, *(w.run_id for w in decision.waiting), *(s.run_id for s in decision.skip),
             *cancelled_new]
    assert sorted(fates) == sorted(queued_ids)
    assert set(decision.queue) == {w.run_id for w in decision.waiting} & {q.run_id for q in snapshot.queued
                                                                          if q.new}
    counts = counts_after(snapshot, decision)
    by_id = {q.run_id: q for q in snapshot.queued}
    touched = {s for i in decision.start for s in by_id[i].scopes}
    for scope, limit in snapshot.limits.items():
        if scope in touched:
            assert counts[scope] <= limit.max_running, scope
    # Each started run took a token in every rated scope: never more than the bucket held.
    for write in decision.buckets:
        used = sum(1 for i in decision.start if write.scope in by_id[i].scopes)
        rate = snapshot.rates[write.scope]
        state: BucketState | None = bucket_now(rate, write.old, T0)
        for _ in range(used):
            state = take(rate, state, T0)
            assert state is not None, (write, used)
        assert state is not None and write.new.level <= state.level  # replaced runs spent tokens too


@settings(max_examples=200, deadline=None)
@given(snapshots(policies=(OnLimit.QUEUE, OnLimit.SKIP)))
def test_no_run_waits_while_it_could_start(snapshot: FlowSnapshot) -> None:
    decision = admit(snapshot, T0)
    counts = counts_after(snapshot, decision)
    buckets = dict(snapshot.buckets)
    buckets.update({w.scope: w.new for w in decision.buckets})
    by_id = {q.run_id: q for q in snapshot.queued}
    for wait in decision.waiting:
        if wait.behind is not None:
            continue
        run = by_id[wait.run_id]
        limits, rates = snapshot.limits, snapshot.rates
        full = [s for s in run.scopes if s in limits and counts[s] >= limits[s].max_running]
        empty = [s for s in run.scopes if s in rates and take(rates[s], buckets.get(s), T0) is None]
        assert full or empty, wait


@dataclass
class Store:
    """The rows the admin would keep: queued runs, active runs with their end, turns, buckets."""

    queued: dict[int, QueuedRun] = field(default_factory=dict)
    running: dict[int, tuple[RunningRun, int]] = field(default_factory=dict)
    turns: dict[str, int] = field(default_factory=dict)
    buckets: dict[Scope, BucketState] = field(default_factory=dict)
    finished: set[int] = field(default_factory=set)

    def snapshot(self, limits: dict[Scope, ConcurrencyLimit], rates: dict[Scope, RateLimit]) -> FlowSnapshot:
        return FlowSnapshot(list(self.queued.values()), [r for r, _ in self.running.values()], limits, rates,
                            dict(self.buckets), dict(self.turns))

    def apply(self, decision: Admission, now_ms: int, duration: random.Random | int) -> None:
        for write in decision.buckets:
            assert self.buckets.get(write.scope) == write.old  # the conditional UPDATE matches
            self.buckets[write.scope] = write.new
        self.turns.update(decision.turns)
        for key in decision.forget:
            del self.turns[key]
        for run_id in decision.start:
            run = self.queued.pop(run_id)
            ticks = duration if isinstance(duration, int) else duration.randint(1, 3)
            self.running[run_id] = (RunningRun(run_id, run.scopes, now_ms), now_ms + ticks * TICK_MS)
        for skipped in decision.skip:
            self.queued.pop(skipped.run_id)

    def finish_due(self, now_ms: int) -> None:
        for run_id, (_, end) in list(self.running.items()):
            if end <= now_ms:
                del self.running[run_id]
                self.finished.add(run_id)


def test_a_limit_of_30_over_1000_due_runs_on_two_nodes_is_never_exceeded() -> None:
    group = group_scope(1)
    limits = {group: ConcurrencyLimit(30)}
    rng = random.Random(22)
    store = Store()
    for i in range(1000):
        run = QueuedRun(i, run_scopes(i % 40, 1, group_key=f"tenant-{i % 7}"), T0, rng.choice([1, 2, 3]))
        store.queued[i] = run
    now, peak = T0, 0
    while len(store.finished) < 1000:
        assert now < T0 + 1000 * TICK_MS, "the 1,000 runs did not finish"
        for _node in ("admin-1", "admin-2"):  # the nodes admit in turn (under the admission lock)
            store.apply(admit(store.snapshot(limits, {}), now, max_starts=17), now, rng)
            peak = max(peak, len(store.running))
            assert len(store.running) <= 30
            now += TICK_MS // 2
            store.finish_due(now)
    assert peak == 30


@st.composite
def arrival_patterns(draw: st.DrawFn) -> list[list[tuple[str, int, int]]]:
    """Per tick, the arrivals: (key, job, priority)."""
    keys = draw(st.lists(st.sampled_from("abcdefgh"), min_size=1, max_size=5, unique=True))
    arrival = st.tuples(st.sampled_from(keys), st.integers(1, 3), st.sampled_from([1, 2, 3]))
    return draw(st.lists(st.lists(arrival, max_size=3), min_size=1, max_size=15))


@settings(max_examples=100, deadline=None)
@given(pattern=arrival_patterns(), group_max=st.integers(1, 3), job_max=st.integers(1, 2),
       durations=st.randoms(use_true_random=False))
def test_a_queued_run_starts_within_one_turn_per_key_once_capacity_frees(
    pattern: list[list[tuple[str, int, int]]], group_max: int, job_max: int, durations: random.Random,
) -> None:
    # The bound: while a run stays first in its key at the top priority level, the passes that
    # find room for it but start something else number at most the other keys waiting when it
    # got there (each of them goes once, then behind it). It stops being first only when an
    # older run of its key ages up to the top level: finitely often.
    aging_ms = 3 * TICK_MS
    group = group_scope(1)
    limits: dict[Scope, ConcurrencyLimit] = {group: ConcurrencyLimit(group_max)}
    limits.update({s: ConcurrencyLimit(job_max) for j in (1, 2, 3) for s in run_scopes(j, 1)[:1]})
    store = Store()
    bound: dict[int, int] = {}  # first-in-key run -> other keys waiting when it got there
    missed: Counter[int] = Counter()
    next_id, now = 0, T0
    for tick in range(len(pattern) + 300):
        store.finish_due(now)
        for key, job, priority in pattern[tick] if tick < len(pattern) else ():
            store.queued[next_id] = QueuedRun(next_id, run_scopes(job, 1, group_key=key), now, priority)
            next_id += 1
        if tick >= len(pattern) and not store.queued:
            break
        heads = first_in_each_key(store.queued.values(), now, aging_ms)
        keys_waiting = len({run.key for run in store.queued.values()})
        bound = {run.run_id: bound.get(run.run_id, keys_waiting - 1) for run in heads}
        counts = Counter(s for r, _ in store.running.values() for s in r.scopes)
        decision = admit(store.snapshot(limits, {}), now, aging_ms=aging_ms)
        for run in heads:
            room = all(counts[s] < limits[s].max_running for s in run.scopes if s in limits)
            if room and run.run_id not in decision.start:
                missed[run.run_id] += 1
                assert missed[run.run_id] <= bound[run.run_id], (run.run_id, tick)
            elif run.run_id in decision.start:
                missed.pop(run.run_id, None)
        for run_id in set(missed) - set(bound):
            del missed[run_id]  # no longer first in its key: a new count when it is again
        store.apply(decision, now, durations)
        now += TICK_MS
    assert not store.queued, "queued runs did not drain"


def first_in_each_key(runs: Iterable[QueuedRun], now_ms: int, aging_ms: int) -> list[QueuedRun]:
    """Each key's first run, when it is at the top priority level."""
    best: dict[str, tuple[tuple[int, int, int], QueuedRun]] = {}
    for run in runs:
        rank = (-effective_priority(run, now_ms, aging_ms), run.enqueued_ms, run.run_id)
        if run.key not in best or rank < best[run.key][0]:
            best[run.key] = (rank, run)
    return [run for rank, run in best.values() if rank[0] == -3]
