from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from jobring.admin.services.demo_seed import DEMO_APP_NAME, seed_demo
from jobring.admin.services.settings import AdminSettings
from jobring.admin.store import Store
from jobring.cli.local import prepare_local
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


async def test_prepare_local_puts_the_demo_executor_in_its_group_before_the_admin_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A demo job left running fires as soon as the scheduling loop starts after a restart: the
    # demo executor's address must already be there (it listens before the admin serves).
    settings = AdminSettings(database_url=f"sqlite:///{tmp_path / 'local.db'}",
                             admin_password="A-long-pw-123")
    token = await prepare_local(settings, 19990)
    assert token
    store = await Store.open(settings.database_url, upgrade=False)
    try:
        group = await store.groups.by_app_name(DEMO_APP_NAME)
        assert group is not None and group.addresses == ["http://127.0.0.1:19990/"]
    finally:
        await store.close()
    assert "created the demo group" in capsys.readouterr().err
