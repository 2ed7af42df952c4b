"""Contract tests of ``store.overlap`` on every backend: a job's runs in progress from the run log,
and its waiting fires (each fire waits once; a node takes one by deleting it)."""

from __future__ import annotations

from datetime import datetime

from jobring.admin.store import JobGroup, JobInfo, NewLog, Store
from jobring.admin.store.records import HandleResult, TriggerResult

NOW = datetime(2026, 3, 10, 12, 0, 0)
T0 = 1_773_144_000_000


async def _job(store: Store) -> tuple[int, int]:
    group = await store.groups.create(JobGroup(app_name="ov-app", title="O"), NOW)
    return group, await store.jobs.create(JobInfo(job_group=group, job_desc="j", executor_handler="h"))


async def test_runs_in_progress_are_those_without_an_outcome(store: Store) -> None:
    group, job = await _job(store)
    _, other = await _job(store)
    ids = await store.logs.insert_fires([
        NewLog(group, job, NOW, trigger_type="CRON", planned_time=T0 + i) for i in range(4)
    ] + [NewLog(group, other, NOW, trigger_type="CRON", planned_time=T0)])
    a, b, c, d, _ = (i for i in ids if i is not None)
    await store.logs.update_trigger_results([
        TriggerResult(a, "http://e:9999", 200, "ok"),
        TriggerResult(b, "http://e:9999", 200, "ok"),
        TriggerResult(c, None, 500, "no address"),
    ])
    await store.logs.record_results([HandleResult(b, 200, "done", NOW)])
    running = await store.overlap.in_progress(job)
    # a: sent, no result; d: recorded, not sent yet. b ended, c's trigger failed.
    assert [(r.id, r.executor_address) for r in running] == [(a, "http://e:9999"), (d, None)]
    assert [r.id for r in await store.overlap.in_progress(job, limit=1)] == [a]


async def test_waiting_fires_wait_once_oldest_first_and_are_taken_once(store: Store) -> None:
    group, job = await _job(store)
    assert await store.overlap.wait(job, group, T0 + 2_000, T0 + 2_000, "CRON", T0)
    assert await store.overlap.wait(job, group, T0 + 1_000, T0 + 1_000, "MISFIRE", T0)
    assert not await store.overlap.wait(job, group, T0 + 1_000, T0 + 1_000, "CRON", T0)  # waits already
    waiting = await store.overlap.waiting(job)
    assert [(w.planned_time, w.trigger_type) for w in waiting] == [
        (T0 + 1_000, "MISFIRE"), (T0 + 2_000, "CRON")]
    assert await store.overlap.jobs_waiting() == [job]
    assert await store.overlap.take(waiting[0].id)
    assert not await store.overlap.take(waiting[0].id)  # another node took it
    assert await store.overlap.remove_fires(job, [T0 + 2_000, T0 + 9]) == 1
    assert await store.overlap.count() == 0 and await store.overlap.jobs_waiting() == []
    assert await store.overlap.wait(job, group, T0, T0, "CRON", T0)
    assert await store.overlap.remove_for_job(job) == 1
