"""Adopting an XXL-JOB database: schema shapes, the database's zone, legacy users and values,
monitors that leave XXL-JOB's history alone, and the live-Java-admin check."""

from __future__ import annotations

import asyncio
import hashlib
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import inspect, select, text, update

from jobring.admin.alarms import Alarmer, AlarmService
from jobring.admin.monitors.failures import FailMonitor
from jobring.admin.monitors.monitors import LostRunMonitor, ReportMonitor
from jobring.admin.monitors.retention import RetentionMonitor
from jobring.admin.security.passwords import hash_password, verify_password
from jobring.admin.security.roles import Role
from jobring.admin.services.adopt import resolve_database_state
from jobring.admin.services.bootstrap import apply_configured_admin_password
from jobring.admin.services.coexist import (
    ForeignRunWatch,
    JavaAdminAlive,
    java_admin_signs,
    refuse_if_java_admin_alive,
)
from jobring.admin.services.settings import AdminSettings
from jobring.admin.store import NewLog, Store, create_engine, upgrade_database
from jobring.admin.store.tables import job_log, job_user
from jobring.admin.store.xxl_schema import AdoptionRefused
from jobring.admin.store.zones import DATABASE_TIMEZONE_SETTING, database_zone, set_database_zone, zone_named
from jobring.cli import main
from jobring.cli.users import reset_password
from jobring.configbase import ConfigError
from tests.admin.api_harness import api_env
from tests.admin.scheduler.test_monitors import NOW, add_log, env  # noqa: F401 - the fixture
from tests.admin.trigger_kit import Env
from tests.dbs import backend_of
from tests.store.test_migrations import _reference_ddl

SHANGHAI = zone_named("Asia/Shanghai")


def md5(password: str) -> str:
    return hashlib.md5(password.encode(), usedforsecurity=False).hexdigest()


def _datetime_type(url: str) -> str:
    return "timestamp" if backend_of(url) == "postgresql" else "datetime"


# -- schema shapes ------------------------------------------------------------------------------


async def test_xxl_job_2_2_schema_gets_the_2_3_columns_filled(fresh_db_url: str) -> None:
    engine = create_engine(fresh_db_url)
    dt = _datetime_type(fresh_db_url)
    pk = {"sqlite": "INTEGER PRIMARY KEY", "postgresql": "SERIAL PRIMARY KEY"}.get(
        backend_of(fresh_db_url), "int NOT NULL AUTO_INCREMENT PRIMARY KEY")
    try:
        async with engine.begin() as conn:
            await conn.execute(text(
                f"CREATE TABLE xxl_job_info (id {pk}, job_group int NOT NULL,"
                " job_cron varchar(128) NOT NULL, job_desc varchar(255) NOT NULL,"
                f" add_time {dt} NULL, update_time {dt} NULL, author varchar(64), alarm_email varchar(255),"
                " executor_route_strategy varchar(50), executor_handler varchar(255),"
                " executor_param varchar(512), executor_block_strategy varchar(50),"
                " executor_timeout int NOT NULL DEFAULT 0, executor_fail_retry_count int NOT NULL DEFAULT 0,"
                " glue_type varchar(50) NOT NULL, glue_source text, glue_remark varchar(128),"
                f" glue_updatetime {dt} NULL, child_jobid varchar(255),"
                " trigger_status smallint NOT NULL DEFAULT 0,"
                " trigger_last_time bigint NOT NULL DEFAULT 0, trigger_next_time bigint NOT NULL DEFAULT 0)"))
            await conn.execute(text(
                f"CREATE TABLE xxl_job_group (id {pk}, app_name varchar(64) NOT NULL,"
                " title varchar(12) NOT NULL, address_type smallint NOT NULL DEFAULT 0, address_list text)"))
            await conn.execute(text("INSERT INTO xxl_job_group (app_name, title) VALUES ('app', 'App')"))
            await conn.execute(text(
                "INSERT INTO xxl_job_info (job_group, job_cron, job_desc, glue_type, executor_handler)"
                " VALUES (1, '0 0 2 * * ?', 'nightly', 'BEAN', 'demo')"))
        result = await upgrade_database(engine)
        assert result.after is not None
        store = Store(engine)
        job = await store.jobs.get(1)
        assert job is not None
        assert (job.schedule_type, job.schedule_conf) == ("CRON", "0 0 2 * * ?")
        assert job.misfire_strategy == "DO_NOTHING"
        assert await store.jobs.create(job) > 1  # job_cron is not set by jobring: nullable now
        assert (await upgrade_database(engine)).changed is False
    finally:
        await engine.dispose()


async def test_quartz_era_schema_is_refused_before_anything_changes(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'old.db'}")
    try:
        async with engine.begin() as conn:
            await conn.execute(text("CREATE TABLE xxl_job_qrtz_triggers (name varchar(64))"))
            await conn.execute(text(
                "CREATE TABLE xxl_job_info (id int PRIMARY KEY, job_group int, job_cron varchar(128))"))
        with pytest.raises(AdoptionRefused, match="Quartz"):
            await upgrade_database(engine)
        async with engine.connect() as conn:
            tables = await conn.run_sync(lambda c: set(inspect(c).get_table_names()))
        assert tables == {"xxl_job_qrtz_triggers", "xxl_job_info"}
    finally:
        await engine.dispose()


# -- the database's zone ------------------------------------------------------------------------


async def test_datetime_columns_are_written_and_read_in_the_database_zone(store: Store) -> None:
    utc = datetime(2026, 3, 1, 1, 30, 0)
    try:
        set_database_zone(store.engine, SHANGHAI)
        log_id = await add_log(store, 1, at=utc)
        async with store.db.read() as conn:
            raw_sql = f"SELECT trigger_time FROM xxl_job_log WHERE id = {log_id}"
            raw = (await conn.execute(text(raw_sql))).scalar()
            since = (await conn.execute(
                select(job_log.c.id).where(job_log.c.trigger_time >= utc - timedelta(seconds=1)))).all()
        assert str(raw).startswith("2026-03-01 09:30:00")  # wall time in Shanghai
        entry = await store.logs.get(log_id)
        assert entry is not None and entry.trigger_time == utc  # naive UTC again
        assert [r[0] for r in since] == [log_id]  # compared in the same zone
    finally:
        set_database_zone(store.engine, UTC)


async def test_nodes_agree_on_the_database_zone(sqlite_store: Store) -> None:
    state = await resolve_database_state(sqlite_store, None, None)
    assert (state.database_timezone, state.default_timezone, state.adopted_from) == ("UTC", "UTC", None)
    await sqlite_store.settings.set(DATABASE_TIMEZONE_SETTING, "Asia/Shanghai")
    await sqlite_store.settings.set("default_timezone", "Asia/Shanghai")
    state = await resolve_database_state(sqlite_store, None, None)
    assert (state.database_timezone, state.default_timezone) == ("Asia/Shanghai", "Asia/Shanghai")
    assert database_zone(sqlite_store.engine) == SHANGHAI
    assert (await resolve_database_state(sqlite_store, None, "UTC")).default_timezone == "UTC"
    with pytest.raises(ConfigError, match="records 'Asia/Shanghai'"):
        await resolve_database_state(sqlite_store, "UTC", None)
    set_database_zone(sqlite_store.engine, UTC)


# -- the adoption command -----------------------------------------------------------------------


async def _xxl_job_sqlite(path: Path) -> str:
    url = f"sqlite:///{path}"
    engine = create_engine(url)
    try:
        async with engine.begin() as conn:
            for statement in _reference_ddl("sqlite"):
                await conn.execute(text(statement.replace("datetime_t", "datetime")))
    finally:
        await engine.dispose()
    return url


def test_db_adopt_dry_run_then_adopt_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import asyncio

    url = asyncio.run(_xxl_job_sqlite(tmp_path / "xxl.db"))
    assert main(["db", "adopt", "--database-url", url, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "XXL-JOB schema: 2.3-2.5" in out and "jobs: 1 (1 running" in out and "dry run" in out
    assert main(["db", "adopt", "--database-url", url]) == 2  # no zone, no terminal to ask
    assert "--database-timezone is required" in capsys.readouterr().err
    assert main(["db", "adopt", "--database-url", url, "--database-timezone", "Mars/Base"]) == 2
    assert main(["db", "adopt", "--database-url", url, "--database-timezone", "Asia/Shanghai",
                 "--executor-token", "a-Strong-executor-token-42"]) == 0
    out = capsys.readouterr().out
    assert "adopted" in out and "keep working unchanged" in out
    assert main(["db", "adopt", "--database-url", url, "--database-timezone", "Asia/Shanghai"]) == 0
    assert main(["db", "adopt", "--database-url", url, "--database-timezone", "UTC"]) == 2

    async def check() -> None:
        store = await Store.open(url, upgrade=False)
        try:
            settings = await store.settings.all()
            assert settings[DATABASE_TIMEZONE_SETTING] == "Asia/Shanghai"
            assert settings["adopted_log_id_max"] == "1" and settings["adopted_from_xxl_job"] == "2.3-2.5"
            admin = await store.users.by_username("admin")
            assert admin is not None and admin.glue_permission  # XXL-JOB's GLUE rule
        finally:
            await store.close()

    asyncio.run(check())


def test_db_upgrade_refuses_what_it_cannot_adopt(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import asyncio

    async def make() -> str:
        url = f"sqlite:///{tmp_path / 'v20.db'}"
        engine = create_engine(url)
        async with engine.begin() as conn:
            await conn.execute(text("CREATE TABLE xxl_job_info (id int PRIMARY KEY, job_cron varchar(128))"))
        await engine.dispose()
        return url

    url = asyncio.run(make())
    assert main(["db", "upgrade", "--database-url", url]) == 1
    assert "nothing was changed" in capsys.readouterr().err
    assert main(["db", "adopt", "--database-url", url, "--dry-run"]) == 1


# -- users --------------------------------------------------------------------------------------


async def _legacy_user(store: Store, name: str, password: str, role: Role, groups: str | None) -> int:
    user_id = await store.users.create(username=name, role=int(role), permission=groups)
    async with store.db.write() as conn:
        await conn.execute(update(job_user).where(job_user.c.id == user_id).values(password=md5(password)))
    return user_id


async def _stored_md5(store: Store, user_id: int) -> str:
    async with store.db.read() as conn:
        return str((await conn.execute(select(job_user.c.password).where(job_user.c.id == user_id))).scalar())


@pytest.mark.parametrize("keep", [False, True])
async def test_an_xxl_job_password_works_once_then_must_change(sqlite_store: Store, keep: bool) -> None:
    settings = AdminSettings(keep_xxl_job_passwords=keep)
    async with api_env(sqlite_store, settings=settings) as api, api.client() as http:
        user_id = await _legacy_user(sqlite_store, "legacy", "old-xxl-pass", Role.OPERATOR, str(api.group_a))
        wrong = await http.post("/auth/login", json={"username": "legacy", "password": "wrong"})
        assert wrong.status_code == 401
        assert wrong.json()["code"] == "auth.wrong_login"  # for the console to say in its language
        login = await http.post("/auth/login", json={"username": "legacy", "password": "old-xxl-pass"})
        assert login.status_code == 200, login.text
        me = login.json()["user"]
        assert me["must_change_password"] is True
        user = await sqlite_store.users.get(user_id)
        assert user is not None and verify_password(user.password_hash, "old-xxl-pass")
        assert user.permitted_group_ids == [api.group_a]  # exactly its groups
        assert (await http.get("/jobs")).status_code == 403
        headers = {"X-CSRF-Token": login.json()["csrf_token"]}
        weak = await http.post("/users/me/password", headers=headers,
                               json={"current_password": "old-xxl-pass", "new_password": "123456"})
        assert weak.status_code == 422  # the rules hold for the forced change too
        done = await http.post("/users/me/password", headers=headers,
                               json={"current_password": "old-xxl-pass", "new_password": "fresh new words 9"})
        assert done.status_code == 200, done.text
        assert await _stored_md5(sqlite_store, user_id) == (md5("old-xxl-pass") if keep else "")


async def test_offline_password_reset(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    store = await Store.open(url)
    try:
        user_id = await _legacy_user(store, "ops", "old-xxl-pass", Role.OPERATOR, None)
        await store.sessions.create("h" * 64, user_id, 0, 10**13)
        await store.tokens.create(user_id, "ci", "t" * 64, datetime(2026, 1, 1))
    finally:
        await store.close()
    password, revoked = await reset_password(url, "ops", keep_legacy=False)
    assert (revoked.sessions, revoked.tokens) == (1, 1)
    store = await Store.open(url, upgrade=False)
    try:
        user = await store.users.get(user_id)
        assert user is not None and user.must_change_password
        assert verify_password(user.password_hash, password)
        assert await _stored_md5(store, user_id) == ""
        assert (await store.sessions.get("h" * 64)).revoked  # type: ignore[union-attr]
        assert (await store.tokens.by_hash("t" * 64)).revoked  # type: ignore[union-attr]
        events = (await store.audit.list()).items
        assert sorted(e.action for e in events) == ["user.access_revoke", "user.password_reset"]
    finally:
        await store.close()
    with pytest.raises(LookupError):
        await reset_password(url, "nobody", keep_legacy=False)


async def test_configured_admin_password_on_an_existing_database(
    sqlite_store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    settings = AdminSettings(admin_password="configured admin pw 1")
    await sqlite_store.users.create(username="ops", role=0)
    caplog.set_level(logging.WARNING)
    assert not await apply_configured_admin_password(sqlite_store, settings)
    assert "none named 'admin'" in caplog.text
    admin_id = await _legacy_user(sqlite_store, "admin", "123456", Role.ADMIN, None)
    assert await apply_configured_admin_password(sqlite_store, settings)
    admin = await sqlite_store.users.get(admin_id)
    assert admin is not None and verify_password(admin.password_hash, "configured admin pw 1")
    await sqlite_store.users.set_password_hash(admin_id, hash_password("changed since 22"))
    assert not await apply_configured_admin_password(sqlite_store, settings)
    assert "already has a jobring password" in caplog.text


# -- legacy values on edit ----------------------------------------------------------------------


async def test_patch_keeps_legacy_values_it_does_not_touch(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as api, api.client("admin") as http:
        job_id = await api.add_job(api.group_a, executor_handler="demo ", alarm_email="ops-team",
                                   child_jobid="999")
        answer = await http.patch(f"/jobs/{job_id}", json={"job_desc": "renamed"})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        kept = (body["job_desc"], body["executor_handler"], body["alarm_email"])
        assert kept == ("renamed", "demo ", "ops-team")
        assert {w.split(":")[0] for w in body["warnings"]} >= {
            "kept the stored value of executor_handler", "kept the stored value of alarm_email",
            "kept the stored value of child_jobid"}
        changed = await http.patch(f"/jobs/{job_id}", json={"alarm_email": "still-no-at"})
        assert changed.status_code == 422 and changed.json()["field"] == "alarm_email"
        clean = await http.patch(f"/jobs/{job_id}", json={"executor_handler": "demo"})
        assert clean.status_code == 200 and "executor_handler" not in " ".join(clean.json()["warnings"])


# -- monitors and XXL-JOB's history -------------------------------------------------------------


async def test_monitors_leave_xxl_job_history_alone(env: Env, caplog: pytest.LogCaptureFixture) -> None:  # noqa: F811
    store = env.store
    job = await env.job()
    old = NOW - timedelta(days=20)
    running = await add_log(store, job.id, group=env.group_id, at=old, address="http://dead:1/", retry=3)
    failed = await add_log(store, job.id, group=env.group_id, at=old, handle_code=500, retry=3)
    undispatched = await add_log(store, job.id, group=env.group_id, at=old, trigger_code=0, retry=3)
    boundary = undispatched
    await LostRunMonitor(store, env.clock, legacy_log_id_max=boundary).tick()
    # A retry age limit that would allow them: the boundary alone keeps them untouched.
    alarms = AlarmService(store, Alarmer([]))
    await FailMonitor(store, env.trigger, alarms, env.clock, retry_max_age_s=10**9,
                      legacy_log_id_max=boundary).tick()
    for log_id, codes in ((running, (200, 0, 0)), (failed, (200, 500, 0)), (undispatched, (0, 0, 0))):
        entry = await store.logs.get(log_id)
        assert entry is not None and (entry.trigger_code, entry.handle_code, entry.alarm_status) == codes
    assert [e for e in await store.logs.for_job(job.id) if e.trigger_type == "RETRY"] == []
    caplog.set_level(logging.WARNING)
    held = RetentionMonitor(store, env.clock, AdminSettings(log_retention_days=7), hold=True)
    assert await held.clean_logs() == 0
    assert "3 run(s) older than 7 days are kept" in caplog.text
    assert len(await store.logs.for_job(job.id)) == 3
    confirmed = AdminSettings(log_retention_days=7, log_retention_confirm=True)
    assert await RetentionMonitor(store, env.clock, confirmed, hold=True).clean_logs() == 3


# -- a Java admin on the same database ----------------------------------------------------------


async def test_a_live_java_admin_stops_the_start_until_takeover(store: Store) -> None:
    now_ms = int(datetime(2026, 5, 1, tzinfo=UTC).timestamp() * 1000)
    now = datetime(2026, 5, 1)
    legacy = await add_log(store, 1, at=now - timedelta(minutes=1))
    assert await java_admin_signs(store, now_ms, legacy) == []  # adopted history: not a sign
    await add_log(store, 1, at=now - timedelta(hours=1))
    assert await java_admin_signs(store, now_ms, legacy) == []  # not recent
    await add_log(store, 1, at=now - timedelta(minutes=2))  # written by XXL-JOB after adoption
    with pytest.raises(JavaAdminAlive, match="--takeover"):
        await refuse_if_java_admin_alive(store, now_ms, legacy, takeover=False)
    await refuse_if_java_admin_alive(store, now_ms, legacy, takeover=True)
    if store.backend in ("mariadb", "mysql"):
        async with store.lock.schedule_lock():  # as XXL-JOB's scheduler holds it
            signs = await java_admin_signs(store, now_ms, 10**9)
        assert signs == ["xxl_job_lock 'schedule_lock' is held by another connection right now"]
        # jobring nodes starting together probe the row at once: none may see the others' probes.
        for _ in range(5):
            together = await asyncio.gather(*(java_admin_signs(store, now_ms, 10**9) for _ in range(6)))
            assert together == [[]] * 6
    async with store.db.write() as conn:
        await conn.execute(text("UPDATE xxl_job_log SET admin_node = 'n1'"))
    assert await java_admin_signs(store, now_ms, legacy) == []



async def test_a_java_admin_started_later_is_reported_while_running(
    sqlite_store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    watch = ForeignRunWatch(sqlite_store)
    await add_log(sqlite_store, 1)  # before the first look: history
    assert await watch.check() == 0
    await sqlite_store.logs.insert_fires([NewLog(1, 1, datetime(2026, 1, 1), admin_node="n1")])
    assert await watch.check() == 0
    caplog.set_level(logging.ERROR)
    await add_log(sqlite_store, 1)
    assert await watch.check() == 1
    assert "every job fires twice" in caplog.text
    assert await watch.check() == 0


async def test_a_plain_upgrade_of_an_xxl_job_database_marks_its_history(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = await _xxl_job_sqlite(tmp_path / "xxl.db")
    store = await Store.open(url)  # an admin's start upgrades it (no `db adopt`)
    try:
        settings = await store.settings.all()
        assert settings["adopted_log_id_max"] == "1" and settings["adopted_from_xxl_job"] == "2.3-2.5"
        caplog.set_level(logging.WARNING)
        state = await resolve_database_state(store, None, None)
        assert (state.legacy_log_id_max, state.database_timezone) == (1, "UTC")
        assert "records no database_timezone" in caplog.text
    finally:
        await store.close()
    fresh = await Store.open(f"sqlite:///{tmp_path / 'new.db'}")
    try:
        assert "adopted_from_xxl_job" not in await fresh.settings.all()
    finally:
        await fresh.close()


async def test_report_days_are_days_of_the_scheduling_zone(env: Env) -> None:  # noqa: F811
    store = env.store
    local_now = NOW.astimezone(SHANGHAI)
    local_today = local_now.replace(tzinfo=None, hour=0, minute=0, second=0, microsecond=0)
    start_utc = local_today.replace(tzinfo=SHANGHAI).astimezone(UTC)
    await add_log(store, 1, at=start_utc + timedelta(minutes=1), handle_code=200)  # today, local
    await add_log(store, 1, at=start_utc - timedelta(minutes=1), handle_code=200)  # yesterday, local
    await ReportMonitor(store, env.clock, report_zone="Asia/Shanghai").refresh_report()
    days = {d.day: d.success for d in await store.reports.range(local_today - timedelta(days=2), local_today)}
    assert days[local_today] == 1 and days[local_today - timedelta(days=1)] == 1


def test_reset_password_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import asyncio

    url = asyncio.run(_xxl_job_sqlite(tmp_path / "xxl.db"))
    assert main(["users", "reset-password", "admin", "--offline", "--database-url", url]) == 2
    assert "run `jobring db adopt` first" in capsys.readouterr().err
    assert main(["db", "upgrade", "--database-url", url]) == 0
    assert main(["users", "reset-password", "nobody", "--offline", "--database-url", url]) == 2
    assert "no user named 'nobody'" in capsys.readouterr().err
    assert main(["users", "reset-password", "admin", "--offline", "--database-url", url]) == 0
    captured = capsys.readouterr()
    password = captured.out.strip().splitlines()[-1]
    assert "must be changed at the next login" in captured.err and len(password) >= 16


@pytest.mark.parametrize(
    ("cron", "after_local", "expected_local"),
    [
        ("0 30 9 * * ?", "2026-11-23 09:30:00", "2026-11-24 09:30:00"),
        ("0 0/30 9-17 ? * MON-FRI", "2026-11-27 17:45:00", "2026-11-30 09:00:00"),  # Friday evening
        ("0 0 0 L * ?", "2026-11-23 00:00:00", "2026-11-30 00:00:00"),  # last day of the month
        ("0 15 10 ? * 6L", "2026-11-23 00:00:00", "2026-11-27 10:15:00"),  # last Friday
    ],
)
async def test_adopted_crons_fire_at_xxl_job_s_instants(
    sqlite_store: Store, cron: str, after_local: str, expected_local: str
) -> None:
    # What XXL-JOB's CronExpression gives in a JVM running in Asia/Shanghai.
    def instant(text_: str) -> int:
        return int(datetime.fromisoformat(text_).replace(tzinfo=SHANGHAI).timestamp() * 1000)

    settings = AdminSettings(timezone="Asia/Shanghai")  # as resolved from an adopted database
    async with api_env(sqlite_store, settings=settings) as api, api.client("admin") as http:
        answer = await http.post("/schedules/preview", json={
            "schedule_type": "CRON", "schedule_conf": cron, "count": 1, "after": instant(after_local)})
        assert answer.status_code == 200, answer.text
        assert answer.json()["times"] == [instant(expected_local)]


async def test_dashboard_counts_use_days_of_the_scheduling_zone(sqlite_store: Store) -> None:
    day = datetime(2026, 11, 23)
    start = day.replace(tzinfo=SHANGHAI).astimezone(UTC).replace(tzinfo=None)  # 2026-11-22 16:00 UTC
    await add_log(sqlite_store, 1, at=start + timedelta(minutes=5), handle_code=200)
    await add_log(sqlite_store, 1, at=start - timedelta(minutes=5), handle_code=200)  # the day before
    (by_zone,) = await sqlite_store.logs.counts_by_day(day, day, zone=SHANGHAI)
    (by_utc,) = await sqlite_store.logs.counts_by_day(day, day)
    assert (by_zone.day, by_zone.success) == (day, 1)
    assert by_utc.success == 0  # both runs fall on 2026-11-22 in UTC
