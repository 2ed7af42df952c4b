"""Ids are never reused (issue #9 item 3): after a delete, the next row gets a new id on every
backend, also on a SQLite database created before migration 0005; deleting a group removes
it from users' permissions in the same transaction."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from alembic import command
from sqlalchemy import text

from jobring.admin.store import ClearRule, JobGroup, JobInfo, NewLog, Store, create_engine, upgrade_database
from jobring.admin.store.migrate import _config

NOW = datetime(2026, 4, 1, 8, 30, 0)


def _job(group: int) -> JobInfo:
    return JobInfo(job_group=group, job_desc="j", executor_handler="h", glue_type="BEAN")


def _log(job: int, group: int) -> NewLog:
    return NewLog(job_group=group, job_id=job, trigger_time=NOW, trigger_code=200, handle_code=0)


async def _assert_no_reuse(store: Store) -> None:
    group = await store.groups.create(JobGroup(app_name="g1", title="g"), NOW)
    assert await store.groups.delete(group)
    assert await store.groups.create(JobGroup(app_name="g2", title="g"), NOW) > group

    keep_group = await store.groups.create(JobGroup(app_name="g3", title="g"), NOW)
    job = await store.jobs.create(_job(keep_group))
    assert await store.jobs.delete(job)
    job2 = await store.jobs.create(_job(keep_group))
    assert job2 > job

    run = await store.logs.insert(_log(job2, keep_group))
    assert await store.logs.clear(ClearRule.ALL, NOW) >= 1
    assert await store.logs.insert(_log(job2, keep_group)) > run

    user = await store.users.create(username="u1", role=0)
    assert await store.users.delete(user)
    assert await store.users.create(username="u2", role=0) > user

    owner = await store.users.create(username="owner", role=0)
    token = await store.tokens.create(owner, "t", "h1", NOW)
    async with store.engine.begin() as conn:
        await conn.execute(text("DELETE FROM jobring_api_token"))
    assert await store.tokens.create(owner, "t", "h2", NOW) > token


async def test_deleted_ids_are_never_given_again(store: Store) -> None:
    await _assert_no_reuse(store)


async def test_sqlite_tables_made_before_0005_are_rebuilt_without_losing_rows(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'old.db'}"
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            await conn.run_sync(lambda c: command.upgrade(_config(c), "0003"))
            await conn.commit()
        # Raw SQL: later revisions add columns that the current table objects would insert.
        async with engine.begin() as conn:
            for i in range(3):
                await conn.execute(
                    text("INSERT INTO xxl_job_group (app_name, title, address_type) VALUES (:a, 't', 0)"),
                    {"a": f"a{i}"},
                )
            groups = [row[0] for row in (await conn.execute(text("SELECT id FROM xxl_job_group"))).all()]
            await conn.execute(text("DELETE FROM xxl_job_group WHERE id = :id"), {"id": groups[-1]})
        await upgrade_database(engine)
        store = Store(engine)
        assert [g.id for g in await store.groups.all()] == groups[:2]
        async with engine.connect() as conn:
            query = text("SELECT sql FROM sqlite_master WHERE name = 'xxl_job_log'")
            ddl = (await conn.execute(query)).scalar()
            indexes = (await conn.execute(text("SELECT name FROM sqlite_master WHERE type = 'index'"))).all()
        assert "AUTOINCREMENT" in str(ddl)
        assert "ux_job_log_planned_fire" in {name for (name,) in indexes}
        await _assert_no_reuse(store)
        await upgrade_database(engine)  # idempotent
    finally:
        await engine.dispose()


async def test_group_deletion_removes_it_from_permissions(store: Store) -> None:
    a = await store.groups.create(JobGroup(app_name="a", title="a"), NOW)
    b = await store.groups.create(JobGroup(app_name="b", title="b"), NOW)
    # A group id that contains the deleted one as a substring must stay.
    other = 10 * b + b
    only = await store.users.create(username="only", role=0, permission=str(b))
    mixed = await store.users.create(username="mixed", role=0, permission=f"{a},{b},{other}")
    assert await store.groups.delete(b)
    only_user = await store.users.get(only)
    mixed_user = await store.users.get(mixed)
    assert only_user is not None and only_user.permitted_group_ids == []
    assert mixed_user is not None and mixed_user.permitted_group_ids == [a, other]


async def test_a_table_copied_by_a_later_migration_keeps_its_high_water_mark(tmp_path: Path) -> None:
    """Migration 0010 copies xxl_job_group on SQLite; deleted ids above the survivors stay used."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'copied.db'}"
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            await conn.run_sync(lambda c: command.upgrade(_config(c), "0012"))  # just before 0010
            await conn.commit()
        async with engine.begin() as conn:
            for i in range(3):
                await conn.execute(
                    text("INSERT INTO xxl_job_group (app_name, title, address_type) VALUES (:a, 't', 0)"),
                    {"a": f"a{i}"},
                )
            await conn.execute(text("DELETE FROM xxl_job_group WHERE id > 1"))
        await upgrade_database(engine)
        store = Store(engine)
        assert await store.groups.create(JobGroup(app_name="new", title="t"), NOW) == 4
    finally:
        await engine.dispose()
