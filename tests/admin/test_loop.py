"""The scheduling loop on a manual clock with in-memory ports (no database, no sleeps)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from jobring.admin.scheduler.loop import LoopConfig, LoopState
from tests.admin.loop_fakes import T0, Harness, fix_rate_job


@pytest.fixture
async def h() -> AsyncIterator[Harness]:
    harness = Harness()
    yield harness
    for loop in harness.loops.values():
        await loop.stop()


async def test_fires_exactly_at_planned_instants_and_advances_after_recording(h: Harness) -> None:
    h.table.put(fix_rate_job(1, T0 + 2_000))
    loop = h.loop()
    await loop.start()
    await h.advance_to(T0 + 1_999)
    assert h.runlog.fired() == []
    await h.advance_to(T0 + 2_000, step_ms=1)
    assert h.runlog.fired() == [(1, T0 + 2_000)]
    assert h.runlog.records[0].at_ms == T0 + 2_000
    assert h.runlog.records[0].trigger_type == "CRON"
    await h.advance_to(T0 + 4_500)
    assert h.runlog.fired() == [(1, T0 + 2_000), (1, T0 + 3_000), (1, T0 + 4_000)]
    job = h.table.jobs[1]
    # The database names the first instant not yet recorded, never one further ahead.
    assert (job.trigger_last_time, job.trigger_next_time) == (T0 + 4_000, T0 + 5_000)
    assert list(loop.stats.lateness_ms) == [0, 0, 0]


async def test_database_never_runs_ahead_of_recorded_fires(h: Harness) -> None:
    h.table.put(fix_rate_job(1, T0 + 1_000))
    await h.loop().start()
    await h.advance_to(T0 + 6_000, step_ms=7)
    recorded = {p for _, p in h.runlog.fired(1)}
    for _, job_id, last, nxt in h.table.advances:
        assert job_id == 1
        assert last in recorded
        assert nxt == last + 1_000


async def test_fires_due_at_one_instant_go_out_in_one_batch(h: Harness) -> None:
    for job_id in (1, 2, 3):
        h.table.put(fix_rate_job(job_id, T0 + 1_500))
    h.table.put(fix_rate_job(4, T0 + 1_501))
    await h.loop().start()
    await h.advance_to(T0 + 1_501, step_ms=1)
    sizes = [sorted(f.job.id for f in batch) for batch in h.runlog.batches]
    assert sizes == [[1, 2, 3], [4]]


async def test_misfire_do_nothing_skips_and_plans_from_now(h: Harness) -> None:
    h.table.put(fix_rate_job(1, T0 - 10_000, misfire_strategy="DO_NOTHING"))
    await h.loop().start()
    await h.advance_to(T0 + 500)
    assert h.runlog.fired() == []
    assert h.table.jobs[1].trigger_next_time == T0 + 1_000
    await h.advance_to(T0 + 1_000, step_ms=1)
    assert h.runlog.fired() == [(1, T0 + 1_000)]


async def test_misfire_fire_once_now_fires_the_missed_instant_once(h: Harness) -> None:
    h.table.put(fix_rate_job(1, T0 - 10_000, misfire_strategy="FIRE_ONCE_NOW"))
    await h.loop().start()
    await h.advance_to(T0 + 500)
    assert [(r.job_id, r.planned_ms, r.trigger_type, r.at_ms) for r in h.runlog.records] == [
        (1, T0 - 10_000, "MISFIRE", T0)
    ]
    assert h.table.jobs[1].trigger_next_time == T0 + 1_000
    assert h.loops["n1"].stats.misfired == 1


async def test_late_by_less_than_threshold_fires_now_and_keeps_the_grid(h: Harness) -> None:
    h.table.put(fix_rate_job(1, T0 - 3_000 + 250, misfire_strategy="DO_NOTHING"))
    await h.loop().start()
    await h.advance_to(T0 + 1_300, step_ms=1)
    assert [(r.planned_ms, r.trigger_type, r.at_ms) for r in h.runlog.records] == [
        (T0 - 2_750, "CRON", T0),
        (T0 + 250, "CRON", T0 + 250),
        (T0 + 1_250, "CRON", T0 + 1_250),
    ]


async def test_cron_job_fires_in_its_own_time_zone() -> None:
    # 08:00:00 every day; T0 is 2023-11-14 22:13:20 UTC.
    h = Harness(start_ms=T0, tz="UTC")
    tokyo_8am = 1_700_002_800_000  # 2023-11-15 08:00 Asia/Tokyo = 2023-11-14 23:00 UTC
    h.table.put(replace(fix_rate_job(1, tokyo_8am), schedule_type="CRON", schedule_conf="0 0 8 * * ?",
                        schedule_timezone="Asia/Tokyo"))
    loop = h.loop()
    await loop.start()
    try:
        h.clock.set(tokyo_8am - 3_000)
        await h.advance_to(tokyo_8am, step_ms=500)
        assert h.runlog.fired() == [(1, tokyo_8am)]
        await h.advance_to(tokyo_8am + 1_500)
        job = h.table.jobs[1]
        assert job.trigger_next_time == tokyo_8am + 86_400_000
        # The next instant is far off: the lease is given back.
        assert job.lease_owner is None
        assert ("n1", 1) in h.table.released
    finally:
        await loop.stop()


async def test_stopped_job_is_dropped_within_one_cycle(h: Harness) -> None:
    h.table.put(fix_rate_job(1, T0 + 1_000))
    await h.loop().start()
    await h.advance_to(T0 + 1_200)
    assert h.runlog.fired() == [(1, T0 + 1_000)]
    h.table.jobs[1] = replace(h.table.jobs[1], trigger_status=0)
    await h.advance_to(T0 + 6_000)
    # The cycle at T0+2000 reads the stop; the fire due at that very instant may still go out.
    assert all(p <= T0 + 2_000 for _, p in h.runlog.fired())
    assert h.loops["n1"].held_job_ids == []
    assert ("n1", 1) in h.table.released


async def test_edited_schedule_is_replanned_from_the_database(h: Harness) -> None:
    h.table.put(fix_rate_job(1, T0 + 1_000))
    await h.loop().start()
    await h.advance_to(T0 + 1_500)
    # An edit elsewhere: every 2 s from T0+3_700.
    h.table.jobs[1] = replace(h.table.jobs[1], schedule_conf="2", trigger_next_time=T0 + 3_700)
    await h.advance_to(T0 + 8_000, step_ms=50)
    fired = [p for _, p in h.runlog.fired(1)]
    assert fired[-3:] == [T0 + 3_700, T0 + 5_700, T0 + 7_700]
    assert len(fired) == len(set(fired))


async def test_failed_fire_batch_is_not_advanced_and_is_retried_from_the_database(h: Harness) -> None:
    h.table.put(fix_rate_job(1, T0 + 1_000))
    h.runlog.fail_next = 1
    loop = h.loop()
    await loop.start()
    await h.advance_to(T0 + 1_500)
    assert h.runlog.fired() == []
    assert h.table.jobs[1].trigger_next_time == T0 + 1_000
    await h.advance_to(T0 + 2_500)
    # The next cycle re-read it and fired the still-unrecorded instant (late, < 5 s).
    assert h.runlog.fired()[:1] == [(1, T0 + 1_000)]
    assert loop.stats.batch_failures == 1


async def test_claim_errors_are_survived(h: Harness) -> None:
    h.table.put(fix_rate_job(1, T0 + 1_000))
    loop = h.loop()
    h.leases["n1"].fail_claims = True
    await loop.start()
    await h.advance_to(T0 + 1_500)
    assert h.runlog.fired() == []
    h.leases["n1"].fail_claims = False
    await h.advance_to(T0 + 2_100)
    assert h.runlog.fired() == [(1, T0 + 1_000), (1, T0 + 2_000)]


async def test_fires_wait_for_the_send_fence(h: Harness) -> None:
    """No fire planned beyond the committed send fence goes out: a node taking over would
    take such fires as never sent and send them itself."""
    h.table.put(fix_rate_job(1, T0 + 1_000))
    loop = h.loop()
    await loop.start()
    await h.advance_to(T0 + 1_100)
    h.leases["n1"].fail_fence = True
    fence = h.table.fences["n1"]
    assert T0 + 2_000 <= fence < T0 + 3_000
    await h.advance_to(T0 + 4_500)
    assert [p for _, p in h.runlog.fired()] == [T0 + 1_000, T0 + 2_000]
    h.leases["n1"].fail_fence = False
    await h.advance_to(T0 + 5_100)
    late = h.runlog.records[2]
    assert late.planned_ms == T0 + 3_000 and late.at_ms > T0 + 4_500
    assert all(r.planned_ms <= h.table.fences["n1"] for r in h.runlog.records)


async def test_taken_over_job_resumes_after_what_its_previous_holder_sent(h: Harness) -> None:
    h.table.put(fix_rate_job(1, T0 + 1_000, lease_owner="dead", lease_until=T0 - 1))
    loop = h.loop()
    h.leases["n1"].sent_before = {1: T0 + 2_000}
    await loop.start()
    await h.advance_to(T0 + 4_100)
    assert h.leases["n1"].settled[0] == [1]
    assert [p for _, p in h.runlog.fired()] == [T0 + 3_000, T0 + 4_000]
    # Where it resumes is stored first; nothing is fired for the instants passed over.
    assert h.table.advances[0] == ("n1", 1, T0 + 2_000, T0 + 3_000)


async def test_takeover_resuming_beyond_the_window_releases_the_job(h: Harness) -> None:
    h.table.put(fix_rate_job(1, T0 + 1_000, seconds=60, lease_owner="dead", lease_until=T0 - 1))
    loop = h.loop()
    h.leases["n1"].sent_before = {1: T0 + 1_000}
    await loop.start()
    await h.advance_to(T0 + 3_000)
    job = h.table.jobs[1]
    assert (job.trigger_next_time, job.trigger_last_time) == (T0 + 61_000, T0 + 1_000)
    assert job.lease_owner is None and loop.held_job_ids == []
    assert h.runlog.fired() == []


async def test_a_takeover_whose_settling_failed_is_settled_by_the_next_cycle(h: Harness) -> None:
    h.table.put(fix_rate_job(1, T0 + 1_500, lease_owner="dead", lease_until=T0 - 1))
    loop = h.loop()
    leases = h.leases["n1"]
    leases.sent_before, leases.fail_settle = {1: T0 + 1_500}, 1
    await loop.start()
    await h.advance_to(T0 + 2_600)
    # The claim committed before settling failed: the next cycle finds the job held but unknown.
    assert leases.settled[:2] == [[1], [1]]
    assert [p for _, p in h.runlog.fired()] == [T0 + 2_500]


async def test_lost_lease_stops_fires_before_they_are_sent() -> None:
    h = Harness(config=LoopConfig(lease_ms=3_000))
    h.table.put(fix_rate_job(1, T0 + 500))
    loop = h.loop()
    await loop.start()
    try:
        await h.advance_to(T0 + 600)
        h.leases["n1"].fail_claims = True  # cannot renew any more
        await h.advance_to(T0 + 6_000)
        fired = [p for _, p in h.runlog.fired()]
        # Lease taken at T0 lasts to T0+3000; with the 500 ms guard nothing goes out from T0+2500.
        assert fired == [T0 + 500, T0 + 1_500]
        assert loop.held_job_ids == []
    finally:
        h.leases["n1"].fail_claims = False
        await loop.stop()


async def test_schedule_type_none_and_broken_schedules_are_stopped_not_fired(h: Harness) -> None:
    h.table.put(replace(fix_rate_job(1, T0 + 500), schedule_type="NONE"))
    h.table.put(replace(fix_rate_job(2, T0 + 500), schedule_type="CRON", schedule_conf="not a cron"))
    await h.loop().start()
    await h.advance_to(T0 + 2_000)
    assert h.runlog.fired() == []
    assert sorted(h.table.ended) == [1, 2]
    assert h.table.jobs[1].trigger_status == 0


async def test_stop_records_in_flight_fires_and_releases_leases(h: Harness) -> None:
    h.table.put(fix_rate_job(1, T0 + 1_000))
    loop = h.loop()
    await loop.start()
    await h.advance_to(T0 + 1_000, step_ms=1)
    await loop.stop()
    job = h.table.jobs[1]
    assert job.lease_owner is None
    assert job.trigger_next_time == T0 + 2_000
    h.loops.clear()


async def test_two_nodes_share_jobs_without_double_fires(h: Harness) -> None:
    for job_id in range(1, 21):
        h.table.put(fix_rate_job(job_id, T0 + 1_000 + job_id * 37))
    await h.loop("a").start()
    await h.loop("b").start()
    await h.advance_to(T0 + 10_000, step_ms=50)
    # Both schedule: the first to claim gives back what exceeds its share.
    held = sorted(len(h.loops[n].held_job_ids) for n in ("a", "b"))
    assert sum(held) == 20 and held[1] - held[0] <= 3, held
    late = [r for r in h.runlog.records if r.at_ms >= T0 + 5_000]
    assert {r.node for r in late} == {"a", "b"}
    assert not [r for r in h.runlog.records if r.duplicate]
    fired = h.runlog.fired()
    assert len(fired) == len(set(fired))
    for job_id in range(1, 21):
        planned = sorted(p for j, p in fired if j == job_id)
        first = T0 + 1_000 + job_id * 37
        assert planned == list(range(first, T0 + 10_001, 1_000)), job_id


async def test_dead_node_jobs_are_taken_over_after_the_lease_without_double_fires() -> None:
    h = Harness(config=LoopConfig(lease_ms=3_000))
    for job_id in range(1, 6):
        h.table.put(fix_rate_job(job_id, T0 + 1_000 + job_id * 100, misfire_strategy="FIRE_ONCE_NOW"))
    a = h.loop("a")
    await a.start()
    await h.advance_to(T0 + 2_050, step_ms=10)
    assert {r.node for r in h.runlog.records} == {"a"}
    # Node a dies: its tasks vanish without releasing anything.
    for task in a._tasks:
        task.cancel()
    await h.advance_to(T0 + 2_100)
    b = h.loop("b")
    await b.start()
    try:
        await h.advance_to(T0 + 12_000, step_ms=50)
        by_b = [r for r in h.runlog.records if r.node == "b" and not r.duplicate]
        assert by_b, "the survivor never took over"
        fired = h.runlog.fired()
        assert len(fired) == len(set(fired))
        for job_id in range(1, 6):
            planned = sorted(p for j, p in fired if j == job_id)
            # Continues on the job's grid up to the end.
            assert planned[-1] == T0 + 11_000 + job_id * 100
    finally:
        await b.stop()
        h.loops.clear()


async def test_the_loop_state_goes_from_new_to_running_to_stopped(h: Harness) -> None:
    h.table.put(fix_rate_job(1, T0 + 1_000))
    loop = h.loop()
    assert loop.state is LoopState.NEW and not loop.running
    await loop.start()
    assert loop.state is LoopState.RUNNING and loop.running
    await h.advance_to(T0 + 1_500)
    assert loop.held_job_ids == [1]
    await loop.stop()
    assert loop.state is LoopState.STOPPED and not loop.running
    assert loop.held_job_ids == [] and loop.stats.held == 0
