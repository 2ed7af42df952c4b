"""Contract tests of ``store.delayed`` and the declared-job columns on every backend."""

from __future__ import annotations

from datetime import datetime

from jobring.admin.store import JobGroup, JobInfo, NewLog, Store

NOW = datetime(2026, 3, 10, 12, 0, 0)
T0 = 1_773_144_000_000


async def test_delayed_fires_add_list_due_and_remove(store: Store) -> None:
    group = await store.groups.create(JobGroup(app_name="delayed-app", title="D"), NOW)
    job = await store.jobs.create(JobInfo(job_group=group, job_desc="j", executor_handler="h"))
    later = await store.delayed.add(job, group, T0 + 5_000, "p", ["http://a:9999/"], "alice", T0)
    sooner = await store.delayed.add(job, group, T0 + 1_000, None, None, "bob", T0)
    fire = await store.delayed.get(later)
    assert fire is not None and (fire.fire_at, fire.executor_param, fire.addresses, fire.created_by) == (
        T0 + 5_000, "p", ["http://a:9999/"], "alice")
    assert fire.planned_time == -later
    assert [f.id for f in await store.delayed.for_job(job)] == [sooner, later]
    assert [f.id for f in await store.delayed.due(T0 + 1_000)] == [sooner]
    assert await store.delayed.count_for_job(job) == 2
    assert await store.delayed.remove([sooner]) == 1 and await store.delayed.remove([sooner]) == 0
    assert await store.delayed.remove_for_job(job) == 1
    assert await store.delayed.for_job(job) == []


async def test_a_delayed_fire_is_recorded_once_and_next_to_a_scheduled_one(store: Store) -> None:
    group = await store.groups.create(JobGroup(app_name="delayed-log", title="D"), NOW)
    job = await store.jobs.create(JobInfo(job_group=group, job_desc="j", executor_handler="h"))
    fire = await store.delayed.add(job, group, T0, None, None, None, T0)

    def row(planned: int) -> NewLog:
        return NewLog(group, job, NOW, executor_handler="h", trigger_type="DELAYED", planned_time=planned)

    first = await store.logs.insert_fires([row(-fire), row(T0)])
    again = await store.logs.insert_fires([row(-fire)])
    assert None not in first and again == [None]


async def test_declared_columns_round_trip(store: Store) -> None:
    group = await store.groups.create(JobGroup(app_name="declared-app", title="D"), NOW)
    job_id = await store.jobs.create(JobInfo(job_group=group, job_desc="j", executor_handler="h",
                                             declared_spec='{"start": true}', declared_by_executor=1))
    job = await store.jobs.get(job_id)
    assert job is not None and (job.declared_spec, job.declared_by_executor) == ('{"start": true}', 1)
    assert [j.id for j in await store.jobs.in_group(group)] == [job_id]
