"""Dashboard aggregates on every backend: runs per day of some groups, admin node activity."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import update

from jobring.admin.store import Store
from jobring.admin.store.records import JobGroup, JobInfo, NewLog
from jobring.admin.store.tables import job_info

NOW = datetime(2026, 3, 10, 12, 0, 0)
NOW_MS = 1_773_144_000_000  # 2026-03-10T12:00:00Z


async def _groups(store: Store) -> tuple[int, int]:
    a = await store.groups.create(JobGroup(app_name="ins-a", title="A"), NOW)
    b = await store.groups.create(JobGroup(app_name="ins-b", title="B"), NOW)
    return a, b


async def test_counts_by_day_of_some_groups(store: Store) -> None:
    a, b = await _groups(store)
    job = await store.jobs.create(JobInfo(job_group=a, job_desc="x"))
    runs = ((a, 200, 200, 9), (a, 200, 500, 9), (a, 200, 0, 10), (b, 200, 200, 10))
    for group, trigger, handle, day in runs:
        await store.logs.insert(NewLog(job_group=group, job_id=job, trigger_time=datetime(2026, 3, day, 8),
                                       trigger_code=trigger, handle_code=handle))
    days = await store.logs.counts_by_day(datetime(2026, 3, 9), NOW, [a])
    assert [(d.day.day, d.running, d.success, d.fail) for d in days] == [(9, 0, 1, 1), (10, 1, 0, 0)]
    everyone = await store.logs.counts_by_day(datetime(2026, 3, 10), NOW)
    assert [(d.running, d.success, d.fail) for d in everyone] == [(1, 1, 0)]


async def test_node_activity(store: Store) -> None:
    a, b = await _groups(store)
    await store.nodes.announce("node-1", NOW_MS + 10_000)
    jobs = [await store.jobs.create(JobInfo(job_group=g, job_desc="x", trigger_status=1)) for g in (a, a, b)]
    async with store.db.write() as conn:
        await conn.execute(update(job_info).where(job_info.c.id.in_(jobs)).values(
            lease_owner="node-1", lease_until=NOW_MS + 5_000))
    for planned, late, node in ((NOW_MS - 3_000, 3, "node-1"), (NOW_MS - 2_000, 8, "node-1"),
                                (NOW_MS - 1_000, 40, "node-old")):
        await store.logs.insert(NewLog(job_group=a, job_id=jobs[0], trigger_time=NOW, trigger_code=200,
                                       planned_time=planned, dispatch_time=planned + late, admin_node=node))
    found = await store.insights.node_activity(NOW_MS, NOW_MS - 3_600_000, [a])
    assert [(n.node_id, n.alive_until > NOW_MS, n.held_jobs, n.fires, n.lateness_max_ms) for n in found] == [
        ("node-1", True, 2, 2, 8),
        ("node-old", False, 0, 1, 40),
    ]
    assert found[0].lateness_avg_ms == 5.5
    everyone = await store.insights.node_activity(NOW_MS, NOW_MS - 3_600_000)
    assert everyone[0].held_jobs == 3
