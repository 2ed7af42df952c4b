"""Migrations on every backend: fresh install, idempotence, schema = tables.py, and adoption
of an existing XXL-JOB 2.4 database (reference tables with data, no jobring columns)."""

from __future__ import annotations

import ast
from datetime import datetime
from pathlib import Path
from typing import Any

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection

import jobring.admin.store.migrations as migrations
from jobring.admin.store import (
    NewLog,
    Store,
    create_engine,
    current_revision,
    head_revision,
    upgrade_database,
)
from jobring.admin.store.migrate import VERSION_TABLE
from jobring.admin.store.records import JobGroup
from jobring.admin.store.tables import metadata
from tests.dbs import backend_of


def _schema_diff(conn: Connection) -> list[Any]:
    context = MigrationContext.configure(conn, opts={"compare_type": True, "version_table": VERSION_TABLE})
    diffs = compare_metadata(context, metadata)
    if conn.dialect.name == "sqlite":
        # SQLite cannot add a constraint to an existing table; the same rule is a unique index.
        diffs = [
            d
            for d in diffs
            if not (
                isinstance(d, tuple)
                and d[0] in ("remove_index", "add_constraint")
                and "planned_time"
                in str(d[1].columns if d[0] == "remove_index" else [c.name for c in d[1].columns])
            )
        ]
    return diffs


async def test_fresh_upgrade_is_idempotent_and_matches_tables(fresh_db_url: str) -> None:
    engine = create_engine(fresh_db_url)
    try:
        assert await current_revision(engine) is None
        first = await upgrade_database(engine)
        assert (first.before, first.after, first.changed) == (None, head_revision(), True)
        second = await upgrade_database(engine)
        assert (second.before, second.after, second.changed) == (head_revision(), head_revision(), False)
        assert await current_revision(engine) == head_revision()
        async with engine.connect() as conn:
            assert await conn.run_sync(_schema_diff) == []
            locks = (await conn.execute(text("SELECT lock_name FROM xxl_job_lock"))).scalars().all()
            if backend_of(fresh_db_url) == "postgresql":
                # A workflow run's state (rewritten at every step) is compressed with lz4.
                compression = (await conn.execute(text(
                    "SELECT attcompression FROM pg_attribute WHERE attrelid = "
                    "'jobring_workflow_run'::regclass AND attname = 'state'"))).scalar()
                assert compression == b"l"  # a "char" column: bytes through asyncpg
        assert locks == ["schedule_lock"]
    finally:
        await engine.dispose()


def _reference_ddl(backend: str) -> list[str]:
    """XXL-JOB 2.4's tables as its MySQL script creates them, transcribed per dialect."""
    if backend == "mariadb":
        pk_int, pk_big, tail = (
            "int(11) NOT NULL AUTO_INCREMENT",
            "bigint(20) NOT NULL AUTO_INCREMENT",
            (" ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"),
        )
        medium, tiny = "mediumtext", "tinyint(4)"
    elif backend == "postgresql":
        pk_int, pk_big, tail, medium, tiny = "SERIAL", "BIGSERIAL", "", "text", "smallint"
    else:
        pk_int, pk_big, tail, medium, tiny = "INTEGER", "INTEGER", "", "text", "smallint"
    return [
        f"""CREATE TABLE xxl_job_info (id {pk_int}, job_group int NOT NULL, job_desc varchar(255) NOT NULL,
            add_time datetime_t DEFAULT NULL, update_time datetime_t DEFAULT NULL,
            author varchar(64) DEFAULT NULL,
            alarm_email varchar(255) DEFAULT NULL, schedule_type varchar(50) NOT NULL DEFAULT 'NONE',
            schedule_conf varchar(128) DEFAULT NULL,
            misfire_strategy varchar(50) NOT NULL DEFAULT 'DO_NOTHING',
            executor_route_strategy varchar(50) DEFAULT NULL, executor_handler varchar(255) DEFAULT NULL,
            executor_param varchar(512) DEFAULT NULL, executor_block_strategy varchar(50) DEFAULT NULL,
            executor_timeout int NOT NULL DEFAULT '0', executor_fail_retry_count int NOT NULL DEFAULT '0',
            glue_type varchar(50) NOT NULL, glue_source {medium}, glue_remark varchar(128) DEFAULT NULL,
            glue_updatetime datetime_t DEFAULT NULL, child_jobid varchar(255) DEFAULT NULL,
            trigger_status {tiny} NOT NULL DEFAULT '0', trigger_last_time bigint NOT NULL DEFAULT '0',
            trigger_next_time bigint NOT NULL DEFAULT '0', PRIMARY KEY (id)){tail}""",
        f"""CREATE TABLE xxl_job_log (id {pk_big}, job_group int NOT NULL, job_id int NOT NULL,
            executor_address varchar(255) DEFAULT NULL, executor_handler varchar(255) DEFAULT NULL,
            executor_param varchar(512) DEFAULT NULL, executor_sharding_param varchar(20) DEFAULT NULL,
            executor_fail_retry_count int NOT NULL DEFAULT '0', trigger_time datetime_t DEFAULT NULL,
            trigger_code int NOT NULL, trigger_msg text, handle_time datetime_t DEFAULT NULL,
            handle_code int NOT NULL, handle_msg text, alarm_status {tiny} NOT NULL DEFAULT '0',
            PRIMARY KEY (id)){tail}""",
        "CREATE INDEX I_trigger_time ON xxl_job_log (trigger_time)",
        "CREATE INDEX I_handle_code ON xxl_job_log (handle_code)",
        f"""CREATE TABLE xxl_job_log_report (id {pk_int}, trigger_day datetime_t DEFAULT NULL,
            running_count int NOT NULL DEFAULT '0', suc_count int NOT NULL DEFAULT '0',
            fail_count int NOT NULL DEFAULT '0', update_time datetime_t DEFAULT NULL, PRIMARY KEY (id),
            CONSTRAINT i_trigger_day UNIQUE (trigger_day)){tail}""",
        f"""CREATE TABLE xxl_job_logglue (id {pk_int}, job_id int NOT NULL,
            glue_type varchar(50) DEFAULT NULL,
            glue_source {medium}, glue_remark varchar(128) NOT NULL, add_time datetime_t DEFAULT NULL,
            update_time datetime_t DEFAULT NULL, PRIMARY KEY (id)){tail}""",
        f"""CREATE TABLE xxl_job_registry (id {pk_int}, registry_group varchar(50) NOT NULL,
            registry_key varchar(255) NOT NULL, registry_value varchar(255) NOT NULL,
            update_time datetime_t DEFAULT NULL, PRIMARY KEY (id)){tail}""",
        "CREATE INDEX i_g_k_v ON xxl_job_registry (registry_group, registry_key, registry_value)",
        f"""CREATE TABLE xxl_job_group (id {pk_int}, app_name varchar(64) NOT NULL,
            title varchar(12) NOT NULL,
            address_type {tiny} NOT NULL DEFAULT '0', address_list text, update_time datetime_t DEFAULT NULL,
            PRIMARY KEY (id)){tail}""",
        f"""CREATE TABLE xxl_job_user (id {pk_int}, username varchar(50) NOT NULL,
            password varchar(50) NOT NULL,
            role {tiny} NOT NULL, permission varchar(255) DEFAULT NULL, PRIMARY KEY (id),
            CONSTRAINT i_username UNIQUE (username)){tail}""",
        f"CREATE TABLE xxl_job_lock (lock_name varchar(50) NOT NULL, PRIMARY KEY (lock_name)){tail}",
        "INSERT INTO xxl_job_group (id, app_name, title, address_type, address_list, update_time)"
        " VALUES (1, 'xxl-job-executor-sample', 'Sample', 0, NULL, '2018-11-03 22:21:31')",
        "INSERT INTO xxl_job_info (id, job_group, job_desc, add_time, update_time, author, alarm_email,"
        " schedule_type, schedule_conf, misfire_strategy, executor_route_strategy, executor_handler,"
        " executor_param, executor_block_strategy, executor_timeout, executor_fail_retry_count, glue_type,"
        " glue_source, glue_remark, glue_updatetime, child_jobid, trigger_status, trigger_next_time)"
        " VALUES (1, 1, 'test job 1', '2018-11-03 22:21:31', '2018-11-03 22:21:31', 'XXL', '', 'CRON',"
        " '0 0 0 * * ? *', 'DO_NOTHING', 'FIRST', 'demoJobHandler', '', 'SERIAL_EXECUTION', 0, 0, 'BEAN',"
        " '', 'GLUE init', '2018-11-03 22:21:31', '', 1, 1700000000000)",
        "INSERT INTO xxl_job_log (job_group, job_id, trigger_time, trigger_code, handle_code)"
        " VALUES (1, 1, '2023-11-14 22:13:20', 200, 200)",
        "INSERT INTO xxl_job_user (id, username, password, role, permission)"
        " VALUES (1, 'admin', 'e10adc3949ba59abbe56e057f20f883e', 1, NULL)",
        "INSERT INTO xxl_job_lock (lock_name) VALUES ('schedule_lock')",
    ]


async def test_adopts_existing_xxl_job_database(fresh_db_url: str) -> None:
    backend = backend_of(fresh_db_url)
    datetime_type = "timestamp" if backend == "postgresql" else "datetime"
    engine = create_engine(fresh_db_url)
    try:
        async with engine.begin() as conn:
            for statement in _reference_ddl(backend):
                await conn.execute(text(statement.replace("datetime_t", datetime_type)))
            if backend == "postgresql":  # explicit ids above did not move the sequences
                for table in ("xxl_job_info", "xxl_job_group", "xxl_job_user"):
                    await conn.execute(
                        text(f"SELECT setval('{table}_id_seq', (SELECT max(id) FROM {table}))")
                    )
        result = await upgrade_database(engine)
        assert (result.before, result.after) == (None, head_revision())
        assert (await upgrade_database(engine)).changed is False

        store = Store(engine)
        job = await store.jobs.get(1)
        assert job is not None
        assert (job.job_desc, job.executor_handler, job.schedule_conf, job.trigger_next_time) == (
            "test job 1",
            "demoJobHandler",
            "0 0 0 * * ? *",
            1_700_000_000_000,
        )
        assert (job.lease_owner, job.lease_until, job.schedule_timezone) == (None, 0, None)
        assert job.add_time == datetime(2018, 11, 3, 22, 21, 31)
        admin = await store.users.by_username("admin")
        assert admin is not None
        # XXL-JOB's users may edit GLUE on their groups: adopted users keep that.
        assert (admin.role, admin.password_hash, admin.must_change_password, admin.glue_permission) == (
            1,
            None,
            False,
            True,
        )
        [old_log] = (await store.logs.list(job_id=1)).items
        assert (old_log.handle_code, old_log.planned_time, old_log.trigger_type) == (200, None, None)

        # the adopted database works for jobring's own operations
        assert [j.id for j in await store.jobs.claim_due("n1", 1, 1_700_000_000_000, 5_000, 10)] == [1]
        ids = await store.logs.insert_fires(
            [NewLog(1, 1, datetime(2026, 1, 1), planned_time=1_700_000_000_000)] * 2
        )
        assert ids[0] is not None and ids[1] is None
        assert await store.users.create(username="ops", role=0, now=datetime(2026, 1, 1)) > 1
        assert await store.jobs.create(job) > 1
        assert await store.settings.get_or_create("k", "v") == "v"
        # XXL-JOB's varchar(12) title is widened (r0010): longer titles are stored whole.
        long_title = "Billing and invoicing"
        billing = JobGroup(app_name="billing", title=long_title)
        new_group = await store.groups.create(billing, datetime(2026, 1, 1))
        stored_group = await store.groups.get(new_group)
        assert stored_group is not None and stored_group.title == long_title
        async with store.lock.schedule_lock():
            pass
        async with engine.connect() as conn:
            locks = (await conn.execute(text("SELECT count(*) FROM xxl_job_lock"))).scalar_one()
            names = await conn.run_sync(lambda c: set(inspect(c).get_table_names()))
        assert locks == 1
        assert {"jobring_setting", "jobring_api_token", VERSION_TABLE} <= names
    finally:
        await engine.dispose()


def test_the_migration_files_are_named_in_chain_order() -> None:
    # Reading the folder top to bottom walks the chain from the first revision to the head;
    # revision ids never change (databases record them), file names may.
    versions = Path(migrations.__file__).parent / "versions"
    links: dict[str, tuple[str | None, str]] = {}
    for path in sorted(versions.glob("r*.py")):
        values = {t.id: n.value.value for n in ast.parse(path.read_text()).body
                  if isinstance(n, ast.Assign) for t in n.targets
                  if isinstance(t, ast.Name) and isinstance(n.value, ast.Constant)}
        links[path.name] = (values["down_revision"], values["revision"])
    chain: list[str] = []
    previous: str | None = None
    for name, (down, revision) in links.items():
        assert down == previous, f"{name} revises {down}, but the file before it is revision {previous}"
        chain.append(revision)
        previous = revision
    assert chain[-1] == head_revision() and len(set(chain)) == len(chain)
