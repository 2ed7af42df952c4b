from __future__ import annotations

from datetime import datetime

from jobring.admin.demo_seed import DEMO_APP_NAME, seed_demo
from jobring.admin.store import Store
from jobring.core.schedule import parse_schedule

NOW = datetime(2026, 11, 22, 12, 0, 0)


async def test_seed_creates_stopped_valid_demo_jobs_once(sqlite_store: Store) -> None:
    first = await seed_demo(sqlite_store, NOW)
    assert first.created_jobs == 4
    again = await seed_demo(sqlite_store, NOW)
    assert again == type(first)(first.group_id, 0, first.access_token)

    group = await sqlite_store.groups.by_app_name(DEMO_APP_NAME)
    assert group is not None and group.id == first.group_id
    # The demo executor's credential is the demo group's own token.
    assert group.access_token == first.access_token and len(first.access_token) >= 40
    page = await sqlite_store.jobs.list(group_ids=[first.group_id])
    assert page.total == 4
    for job in page.items:
        assert job.trigger_status == 0
        parse_schedule(job.schedule_type, job.schedule_conf, "UTC")  # each schedule is valid
    assert {job.executor_handler for job in page.items} == {"hello", "shard", "slow", "fail"}


async def test_seed_gives_an_older_demo_group_a_token(sqlite_store: Store) -> None:
    first = await seed_demo(sqlite_store, NOW)
    await sqlite_store.groups.set_access_token(first.group_id, None)
    again = await seed_demo(sqlite_store, NOW)
    group = await sqlite_store.groups.by_app_name(DEMO_APP_NAME)
    assert group is not None and again.access_token and group.access_token == again.access_token
