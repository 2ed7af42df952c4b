"""Contract tests of ``store.backfills`` on every backend: the hand-out cursor (compare-and-set),
ending, progress from the run log, and the run log's unique key on (backfill, logical time,
attempt)."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import datetime

import pytest
from sqlalchemy.exc import IntegrityError

from jobring.admin.store import JobGroup, JobInfo, NewLog, Store
from jobring.admin.store.backfills import BackfillCaps, BackfillInstant, BackfillStatus
from jobring.admin.store.errors import Conflict, NotFound
from jobring.admin.store.records import HandleResult, TriggerResult

NOW = datetime(2026, 3, 10, 12, 0, 0)
T0 = 1_773_144_000_000
DAY = 86_400_000


async def _backfill(store: Store, count: int = 4) -> tuple[int, int, int]:
    group = await store.groups.create(JobGroup(app_name="bf-app", title="B"), NOW)
    job = await store.jobs.create(JobInfo(job_group=group, job_desc="j", executor_handler="h"))
    instants = [BackfillInstant(T0 + i * DAY, T0 + (i - 1) * DAY) for i in range(count)]
    backfill = await store.backfills.create(job, group, '{"parallelism": 2}', instants, 2, "alice", T0)
    return group, job, backfill


def _run(group: int, job: int, backfill: int, logical: int, attempt: int = 1) -> NewLog:
    return NewLog(group, job, NOW, executor_handler="h", trigger_type="BACKFILL", logical_time=logical,
                  data_interval_start=logical - DAY, backfill_id=backfill, attempt=attempt)


async def test_a_backfill_hands_out_its_instants_once_and_ends(store: Store) -> None:
    group, job, backfill = await _backfill(store)
    row = await store.backfills.get(backfill)
    assert row is not None and (row.status, row.total, row.parallelism, row.started, row.created_by) == (
        "running", 4, 2, 0, "alice")
    listed = await store.backfills.instants(backfill)
    assert [i.logical_ms for i in listed] == [T0 + i * DAY for i in range(4)]
    assert (await store.backfills.instants(backfill))[0].interval_start_ms == T0 - DAY
    assert await store.backfills.hand_out(backfill, 0, 2, T0 + 5)
    assert not await store.backfills.hand_out(backfill, 0, 2, T0 + 6)  # another node was first
    row = await store.backfills.get(backfill)
    assert row is not None and (row.started, row.claimed_at) == (2, T0 + 5)
    assert [r.id for r in await store.backfills.running()] == [backfill]
    assert [r.id for r in await store.backfills.for_job(job)] == [backfill]
    assert not await store.backfills.end(backfill, BackfillStatus.CANCELLED, T0, job_group=group + 1)
    assert await store.backfills.end(backfill, BackfillStatus.CANCELLED, T0 + 7, job_group=group)
    assert not await store.backfills.end(backfill, BackfillStatus.DONE, T0 + 8)
    assert not await store.backfills.hand_out(backfill, 2, 2, T0 + 9)  # cancelled: nothing more
    row = await store.backfills.get(backfill)
    assert row is not None and (row.status, row.ended_at) == ("cancelled", T0 + 7)
    assert await store.backfills.running() == []


async def test_backfill_progress_comes_from_the_run_log(store: Store) -> None:
    group, job, backfill = await _backfill(store)
    first, second, third = await store.logs.insert_fires(
        [_run(group, job, backfill, T0 + i * DAY) for i in range(3)])
    assert first and second and third
    progress = await store.backfills.progress(backfill)
    assert (progress.recorded, progress.running, progress.succeeded, progress.failed) == (3, 3, 0, 0)
    await store.logs.update_trigger_results([TriggerResult(third, None, 500, "no executor")])
    await store.logs.record_results(
        [HandleResult(first, 200, None, NOW), HandleResult(second, 500, "x", NOW)])
    progress = await store.backfills.progress(backfill)
    assert (progress.recorded, progress.running, progress.succeeded, progress.failed) == (3, 0, 1, 2)
    # A retry of the failed instant is a new attempt of it: in progress again, then a success.
    [retry] = await store.logs.insert_fires([_run(group, job, backfill, T0 + DAY, attempt=2)])
    assert retry is not None
    progress = await store.backfills.progress(backfill)
    assert (progress.recorded, progress.running, progress.succeeded, progress.failed) == (3, 1, 1, 1)
    assert await store.backfills.running_runs(backfill) == [retry]
    await store.logs.record_results([HandleResult(retry, 200, None, NOW)])
    progress = await store.backfills.progress(backfill)
    assert (progress.succeeded, progress.failed) == (2, 1)
    assert await store.backfills.recorded_instants(backfill) == {T0, T0 + DAY, T0 + 2 * DAY}
    entry = await store.logs.get(first)
    assert entry is not None and (entry.logical_time, entry.data_interval_start, entry.backfill_id) == (
        T0, T0 - DAY, backfill)


async def test_an_instant_of_a_backfill_is_recorded_once_per_attempt(store: Store) -> None:
    group, job, backfill = await _backfill(store)
    assert None not in await store.logs.insert_fires([_run(group, job, backfill, T0)])
    with pytest.raises(IntegrityError):
        await store.logs.insert_fires([_run(group, job, backfill, T0)])
    # Other backfills and plain runs with a logical time do not collide.
    _, _, other = await _backfill(store)
    plain = NewLog(group, job, NOW, executor_handler="h", trigger_type="MANUAL", logical_time=T0)
    assert None not in await store.logs.insert_fires([_run(group, job, other, T0), plain, plain])


async def test_backfill_caps_hold_under_concurrent_creates(store: Store) -> None:
    group, job, _ = await _backfill(store)
    other = await store.jobs.create(JobInfo(job_group=group, job_desc="k", executor_handler="h"))
    instants = [BackfillInstant(T0, None)]
    caps = BackfillCaps(per_job=3, per_group=5, total=100)

    async def create(job_id: int) -> int | None:
        try:
            return await store.backfills.create(job_id, group, "{}", instants, 1, "bob", T0, caps=caps)
        except Conflict:
            return None

    made = await asyncio.gather(*[create(job if n % 2 else other) for n in range(12)])
    # One is running already: the group cap (5) stops the rest, the job's (3) holds within it.
    assert sum(m is not None for m in made) == 4
    running = await store.backfills.running()
    assert len(running) == 5 and sum(r.job_id == job for r in running) <= 3


async def test_a_backfill_is_created_in_its_jobs_current_group_only(store: Store) -> None:
    group, job, backfill = await _backfill(store)
    other = await store.groups.create(JobGroup(app_name="bf-other", title="O"), NOW)
    with pytest.raises(NotFound):
        await store.backfills.create(job, group, "{}", [BackfillInstant(T0, None)], 1, "bob", T0,
                                     group_ids=[other])
    found = await store.jobs.get(job)
    assert found is not None
    await store.jobs.update(replace(found, job_group=other))
    assert not await store.backfills.end(backfill, BackfillStatus.CANCELLED, T0, group_ids=[group])
    made = await store.backfills.create(job, group, "{}", [BackfillInstant(T0, None)], 1, "bob", T0,
                                        group_ids=[other])
    row = await store.backfills.get(made)
    assert row is not None and row.job_group == other
    assert await store.backfills.end(backfill, BackfillStatus.CANCELLED, T0, group_ids=[other])
    page = await store.backfills.running(limit=1)
    assert [r.id for r in page] == [made] and await store.backfills.running(1, after_id=made) == []
