"""Contract tests of ``store.flow`` (flow control's held runs, buckets, turns) on every backend:
admission passes under the group lock, two stores (two admin nodes) admitting at once never
exceed a limit, queued runs and their state, cancel, the fire queries leaving queued runs alone."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime, timedelta

from jobring.admin.store import JobGroup, JobInfo, NewLog, Store, create_engine
from jobring.admin.store.flow import FlowArrival, FlowOutcome, FlowView
from jobring.admin.store.records import HandleResult, TriggerResult
from jobring.core.flow import (
    BucketState,
    ConcurrencyLimit,
    FlowSnapshot,
    QueuedRun,
    RateLimit,
    RunningRun,
    admit,
)
from jobring.core.flow.scopes import Scope
from jobring.core.runstate import QUEUED_PREFIX, RunState

NOW = datetime(2026, 3, 10, 12, 0, 0)
NOW_MS = 1_773_144_000_000


async def _setup(store: Store) -> tuple[int, int]:
    group = await store.groups.create(JobGroup(app_name="flow-app", title="Flow"), NOW)
    job = await store.jobs.create(JobInfo(job_group=group, job_desc="j", executor_handler="h",
                                          flow='{"max_concurrent_runs":3}'))
    return group, job


async def _record(store: Store, group: int, job: int, n: int) -> list[int]:
    ids = await store.logs.insert_fires([NewLog(group, job, NOW) for _ in range(n)])
    return [i for i in ids if i is not None]


def _decider(limit: int, rate: RateLimit | None = None, now: int = NOW_MS):
    def decide(view: FlowView, arrivals: Sequence[FlowArrival]) -> FlowOutcome:
        scopes = lambda texts: tuple(Scope.parse(t) for t in texts)  # noqa: E731
        queued = [QueuedRun(r.log_id, scopes(r.scopes), r.enqueued_ms, r.priority) for r in view.queued]
        queued += [QueuedRun(a.log_id, scopes(a.scopes), now, a.priority, new=True) for a in arrivals]
        running = [RunningRun(r.log_id, scopes(r.scopes), r.started_ms or 0) for r in view.active]
        job_scopes = {s for q in queued for s in q.scopes if s.kind == "job"}
        limits = {s: ConcurrencyLimit(limit) for s in job_scopes}
        rates = dict.fromkeys(job_scopes, rate) if rate else {}
        buckets = {Scope.parse(k): BucketState(*v) for k, v in view.buckets.items()}
        a = admit(FlowSnapshot(queued, running, limits, rates, buckets, view.turns), now)
        return FlowOutcome(
            start=list(a.start), queue=dict.fromkeys(a.queue, "full"),
            buckets={str(b.scope): (None if b.old is None else (b.old.level, b.old.stamp_ms),
                                    (b.new.level, b.new.stamp_ms)) for b in a.buckets},
            turns=dict(a.turns), forget=list(a.forget))
    return decide


def _arrivals(job: int, group: int, ids: list[int]) -> list[FlowArrival]:
    return [FlowArrival(i, job, (f"job:{job}", f"group:{group}"), f"job:{job}", 2) for i in ids]


async def test_admission_starts_up_to_the_limit_and_queues_the_rest(store: Store) -> None:
    group, job = await _setup(store)
    ids = await _record(store, group, job, 5)
    done = await store.flow.admission(group, _arrivals(job, group, ids), NOW_MS, _decider(3))
    assert done.started_arrivals == tuple(ids[:3]) and done.started_queued == ()
    page = await store.logs.list(job_id=job, states=[RunState.QUEUED], now_ms=NOW_MS, limit=10)
    assert sorted(e.id for e in page.items) == ids[3:]
    assert all((e.trigger_msg or "").startswith(QUEUED_PREFIX) for e in page.items)
    assert await store.flow.waiting_groups() == [group]
    # Nothing ended: a pass starts nothing.
    again = await store.flow.admission(group, [], NOW_MS, _decider(3))
    assert again.outcome.start == []
    # Two runs end (one succeeded, one failed to dispatch): two queued runs start.
    await store.logs.record_results([HandleResult(ids[0], 200, "ok", NOW)])
    await store.logs.update_trigger_results([TriggerResult(ids[1], None, 500, "refused")])
    later = await store.flow.admission(group, [], NOW_MS + 1, _decider(3))
    assert [e.id for e in later.started_queued] == ids[3:]
    started = await store.logs.get(ids[3])
    assert started is not None and started.trigger_msg is None and started.trigger_code == 0
    assert await store.flow.waiting_groups() == []
    held = await store.flow.held(group)
    assert sorted(r.log_id for r in held) == ids[2:] and all(r.started_ms is not None for r in held)


async def test_queued_runs_are_left_alone_by_the_fire_queries(store: Store) -> None:
    group, job = await _setup(store)
    ids = await _record(store, group, job, 4)
    await store.flow.admission(group, _arrivals(job, group, ids), NOW_MS, _decider(3))
    later = NOW + timedelta(hours=1)
    assert await store.fires.undispatched_before(later) == ids[:3]  # not the queued one
    assert [e.id for e in await store.fires.still_unconfirmed(ids)] == ids[:3]


async def test_two_nodes_admitting_at_once_never_exceed_the_limit(store: Store, db_url: str) -> None:
    group, job = await _setup(store)
    other = Store(create_engine(db_url, pool_size=10))
    try:
        ids = await _record(store, group, job, 40)
        batches = [ids[i:i + 4] for i in range(0, len(ids), 4)]
        nodes = [store, other]
        await asyncio.gather(*(nodes[n % 2].flow.admission(group, _arrivals(job, group, b), NOW_MS,
                                                            _decider(3)) for n, b in enumerate(batches)))
        held = await store.flow.held(group)
        assert len([r for r in held if r.started_ms is not None]) == 3
        assert len([r for r in held if r.started_ms is None]) == 37
    finally:
        await other.close()


async def test_rate_limit_buckets_are_shared(store: Store, db_url: str) -> None:
    group, job = await _setup(store)
    other = Store(create_engine(db_url, pool_size=10))
    try:
        ids = await _record(store, group, job, 6)
        rate = RateLimit(2, 1_000)
        decide = _decider(100, rate)
        first = await store.flow.admission(group, _arrivals(job, group, ids[:3]), NOW_MS, decide)
        second = await other.flow.admission(group, _arrivals(job, group, ids[3:]), NOW_MS, decide)
        assert len(first.started_arrivals) == 2 and second.started_arrivals == ()
        later = NOW_MS + 1_000
        refilled = await other.flow.admission(group, [], later, _decider(100, rate, later))
        assert len(refilled.started_queued) == 2
    finally:
        await other.close()


async def test_cancel_queued_checks_the_group_inside_the_write(store: Store) -> None:
    group, job = await _setup(store)
    ids = await _record(store, group, job, 4)
    await store.flow.admission(group, _arrivals(job, group, ids), NOW_MS, _decider(3))
    msg = "cancelled by flow control (bob)"
    assert await store.flow.cancel_queued(ids[3], [group + 1], msg, NOW_MS) is None
    assert await store.flow.cancel_queued(ids[0], None, msg, NOW_MS) is None
    entry = await store.flow.cancel_queued(ids[3], [group], msg, NOW_MS)
    assert entry is not None and entry.handle_code == 500
    page = await store.logs.list(job_id=job, states=[RunState.KILLED], now_ms=NOW_MS, limit=10)
    assert [e.id for e in page.items] == [ids[3]]
    assert await store.flow.waiting_groups() == []


async def test_group_and_job_flow_fields_round_trip(store: Store) -> None:
    group, job = await _setup(store)
    assert await store.flow.set_group_flow(group, '{"max_concurrent_runs":30}')
    assert not await store.flow.set_group_flow(group + 99, None)
    stored = await store.groups.get(group)
    assert stored is not None and stored.flow == '{"max_concurrent_runs":30}'
    loaded = await store.jobs.get(job)
    assert loaded is not None and loaded.flow == '{"max_concurrent_runs":3}'
