"""Adopting an XXL-JOB database: what is there, whether jobring can take it, what it keeps.

``check_adoptable`` runs before every schema upgrade (``jobring db upgrade`` included), so an
unsupported shape is refused before anything changes instead of "upgraded" and then failing.
``inspect_database`` gathers the report ``jobring db adopt`` prints; ``record_adoption``
stores what every admin node must agree on (the database's zone, the boundary between
XXL-JOB's history and jobring's runs).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from jobring.admin.store import Store
from jobring.admin.store.tables import metadata
from jobring.admin.store.zones import DATABASE_TIMEZONE_SETTING, set_database_zone, zone_named
from jobring.configbase import ConfigError

ADOPTED_FROM_SETTING = "adopted_from_xxl_job"
ADOPTED_AT_SETTING = "adopted_at"  # epoch ms
# Runs with an id up to this one are XXL-JOB's history: monitors never mark them lost or retry them.
LEGACY_LOG_ID_MAX_SETTING = "adopted_log_id_max"
# The zone crons of jobs without their own zone fire in, unless JOBRING_TIMEZONE is set.
DEFAULT_TIMEZONE_SETTING = "default_timezone"
GLUE_GRANTED_SETTING = "adopted_users_glue_granted"  # epoch ms; XXL-JOB's GLUE rule applied once

# XXL-JOB 2.4's own columns (jobring's additions to these tables are not listed).
XXL_JOB_COLUMNS: dict[str, frozenset[str]] = {
    "xxl_job_info": frozenset(
        {
            "id",
            "job_group",
            "job_desc",
            "add_time",
            "update_time",
            "author",
            "alarm_email",
            "schedule_type",
            "schedule_conf",
            "misfire_strategy",
            "executor_route_strategy",
            "executor_handler",
            "executor_param",
            "executor_block_strategy",
            "executor_timeout",
            "executor_fail_retry_count",
            "glue_type",
            "glue_source",
            "glue_remark",
            "glue_updatetime",
            "child_jobid",
            "trigger_status",
            "trigger_last_time",
            "trigger_next_time",
        }
    ),
    "xxl_job_log": frozenset(
        {
            "id",
            "job_group",
            "job_id",
            "executor_address",
            "executor_handler",
            "executor_param",
            "executor_sharding_param",
            "executor_fail_retry_count",
            "trigger_time",
            "trigger_code",
            "trigger_msg",
            "handle_time",
            "handle_code",
            "handle_msg",
            "alarm_status",
        }
    ),
    "xxl_job_log_report": frozenset(
        {"id", "trigger_day", "running_count", "suc_count", "fail_count", "update_time"}
    ),
    "xxl_job_logglue": frozenset(
        {"id", "job_id", "glue_type", "glue_source", "glue_remark", "add_time", "update_time"}
    ),
    "xxl_job_registry": frozenset({"id", "registry_group", "registry_key", "registry_value", "update_time"}),
    "xxl_job_group": frozenset({"id", "app_name", "title", "address_type", "address_list", "update_time"}),
    "xxl_job_user": frozenset({"id", "username", "password", "role", "permission"}),
    "xxl_job_lock": frozenset({"lock_name"}),
}
# Reference columns older releases lack that migration 0013 adds (and fills) itself.
ADDED_BY_MIGRATION = frozenset(
    {
        ("xxl_job_info", "schedule_type"),
        ("xxl_job_info", "schedule_conf"),
        ("xxl_job_info", "misfire_strategy"),
        ("xxl_job_group", "update_time"),
        ("xxl_job_log_report", "update_time"),
    }
)
# Legacy columns jobring's inserts do not set but migration 0013 makes nullable.
RELAXED_BY_MIGRATION = frozenset({("xxl_job_info", "job_cron")})
log = logging.getLogger(__name__)


class AdoptionRefused(Exception):
    """The database holds an XXL-JOB schema jobring cannot adopt; the message says why and what to do."""


@dataclass(frozen=True, slots=True)
class SchemaFinding:
    """What the schema says: the XXL-JOB release family, and why it cannot be adopted (if so)."""

    is_xxl_job: bool
    version: str
    problems: list[str] = field(default_factory=list)

    @property
    def adoptable(self) -> bool:
        return not self.problems


def detect_schema(conn: Connection) -> SchemaFinding:
    """Recognise the XXL-JOB release from the tables and columns (2.0 .. 2.5)."""
    inspector = sa.inspect(conn)
    tables = set(inspector.get_table_names())
    if "xxl_job_info" not in tables:
        return SchemaFinding(False, "none")
    if any(t.startswith("xxl_job_qrtz_") for t in tables):
        return SchemaFinding(
            True,
            "2.0 or older (Quartz tables)",
            [
                "XXL-JOB 2.0 and older schedule through Quartz tables, which jobring does not read; "
                "upgrade the database to XXL-JOB 2.1 or later with XXL-JOB's own upgrade SQL first"
            ],
        )
    columns = {
        t: {str(c["name"]): c for c in inspector.get_columns(t)} for t in tables if t.startswith("xxl_job_")
    }
    info = columns["xxl_job_info"]
    if "trigger_status" not in info:
        return SchemaFinding(
            True,
            "2.0 or older",
            [
                "xxl_job_info has no trigger_status column (XXL-JOB 2.0 or older); upgrade the database to "
                "XXL-JOB 2.1 or later with XXL-JOB's own upgrade SQL first"
            ],
        )
    version = "2.1-2.2 (job_cron)" if "job_cron" in info and "schedule_type" not in info else "2.3-2.5"
    problems: list[str] = []
    for table, reference in XXL_JOB_COLUMNS.items():
        if table not in columns:
            continue  # created by the upgrade
        present = columns[table]
        missing = sorted(reference - present.keys())
        problems.extend(
            f"{table}.{name} is missing" for name in missing if (table, name) not in ADDED_BY_MIGRATION
        )
        known = reference | {c.name for c in metadata.tables[table].columns}
        for name, col in present.items():
            blocking = not col.get("nullable", True) and col.get("default") is None
            if name not in known and blocking and (table, name) not in RELAXED_BY_MIGRATION:
                problems.append(f"{table}.{name} is NOT NULL without a default (jobring cannot insert rows)")
    if problems:
        problems.append(
            f"this looks like XXL-JOB {version} with local changes; jobring adopts the "
            "unmodified XXL-JOB 2.1-2.5 schemas"
        )
    return SchemaFinding(True, version, problems)


def check_adoptable(conn: Connection) -> SchemaFinding:
    """Raise AdoptionRefused for an XXL-JOB schema jobring cannot adopt; else the finding."""
    finding = detect_schema(conn)
    if not finding.adoptable:
        raise AdoptionRefused(
            f"cannot adopt this XXL-JOB {finding.version} database; nothing was changed:\n  - "
            + "\n  - ".join(finding.problems)
        )
    return finding


def mark_xxl_job_history(conn: Connection, finding: SchemaFinding) -> None:
    """Record (once) that this database came from XXL-JOB and where its history ends, and
    give the users XXL-JOB created its GLUE rule (they may edit GLUE on their groups)."""
    import time

    max_id = conn.execute(sa.text("SELECT coalesce(max(id), 0) FROM xxl_job_log")).scalar()
    present = {str(r[0]) for r in conn.execute(sa.text("SELECT name FROM jobring_setting"))}
    now_ms = str(int(time.time() * 1000))
    values = {
        ADOPTED_FROM_SETTING: finding.version,
        LEGACY_LOG_ID_MAX_SETTING: str(int(max_id or 0)),
        ADOPTED_AT_SETTING: now_ms,
        GLUE_GRANTED_SETTING: now_ms,
    }
    if GLUE_GRANTED_SETTING not in present:
        conn.execute(
            sa.text(
                "UPDATE xxl_job_user SET glue_permission = :yes"
                " WHERE password <> '' AND password_hash IS NULL"
            ),
            {"yes": True},
        )
    for name, value in values.items():
        if name not in present:
            conn.execute(
                sa.text("INSERT INTO jobring_setting (name, value) VALUES (:n, :v)"), {"n": name, "v": value}
            )


@dataclass(slots=True)
class AdoptionReport:
    """What ``jobring db adopt`` found (counts from the database as it is)."""

    finding: SchemaFinding
    jobring_revision: str | None = None
    groups: list[str] = field(default_factory=list)
    jobs: int = 0
    running_jobs: int = 0
    glue_jobs: int = 0
    jobs_by_type: dict[str, int] = field(default_factory=dict)
    users: int = 0
    admins: int = 0
    md5_users: int = 0
    logs: int = 0
    oldest_log: datetime | None = None  # as stored (wall time in the database's zone)
    newest_log: datetime | None = None
    in_flight_runs: int = 0
    unalarmed_failures: int = 0
    glue_versions: int = 0
    registry_rows: int = 0
    max_log_id: int = 0
    server_zone: str | None = None
    stored_zone: str | None = None
    adopted_from: str | None = None


def _scalar(conn: Connection, sql: str) -> Any:
    return conn.execute(sa.text(sql)).scalar()


def gather_report(conn: Connection, jobring_revision: str | None) -> AdoptionReport:
    """Count what the database holds (read only; works before and after the upgrade)."""
    report = AdoptionReport(detect_schema(conn), jobring_revision)
    if not report.finding.is_xxl_job or not report.finding.adoptable:
        return report
    inspector = sa.inspect(conn)
    tables = set(inspector.get_table_names())
    info_cols = {c["name"] for c in inspector.get_columns("xxl_job_info")}
    report.groups = [
        str(r[0]) for r in conn.execute(sa.text("SELECT app_name FROM xxl_job_group ORDER BY id"))
    ]
    report.jobs = int(_scalar(conn, "SELECT count(*) FROM xxl_job_info"))
    report.running_jobs = int(_scalar(conn, "SELECT count(*) FROM xxl_job_info WHERE trigger_status = 1"))
    report.glue_jobs = int(_scalar(conn, "SELECT count(*) FROM xxl_job_info WHERE glue_type <> 'BEAN'"))
    kind = "schedule_type" if "schedule_type" in info_cols else "'CRON (job_cron)'"
    report.jobs_by_type = {
        str(k): int(n)
        for k, n in conn.execute(sa.text(f"SELECT {kind}, count(*) FROM xxl_job_info GROUP BY 1"))
    }
    if "xxl_job_user" in tables:
        user_cols = {c["name"] for c in inspector.get_columns("xxl_job_user")}
        report.users = int(_scalar(conn, "SELECT count(*) FROM xxl_job_user"))
        report.admins = int(_scalar(conn, "SELECT count(*) FROM xxl_job_user WHERE role = 1"))
        no_hash = " AND password_hash IS NULL" if "password_hash" in user_cols else ""
        report.md5_users = int(
            _scalar(conn, f"SELECT count(*) FROM xxl_job_user WHERE password <> ''{no_hash}")
        )
    if "xxl_job_log" in tables:
        report.logs = int(_scalar(conn, "SELECT count(*) FROM xxl_job_log"))
        report.oldest_log = _scalar(conn, "SELECT min(trigger_time) FROM xxl_job_log")
        report.newest_log = _scalar(conn, "SELECT max(trigger_time) FROM xxl_job_log")
        report.max_log_id = int(_scalar(conn, "SELECT coalesce(max(id), 0) FROM xxl_job_log"))
        report.in_flight_runs = int(
            _scalar(conn, "SELECT count(*) FROM xxl_job_log WHERE trigger_code = 200 AND handle_code = 0")
        )
        report.unalarmed_failures = int(
            _scalar(
                conn,
                "SELECT count(*) FROM xxl_job_log WHERE alarm_status = 0 AND handle_code NOT IN (0, 200)"
                " AND NOT (trigger_code = 200 AND handle_code = 0)",
            )
        )
    if "xxl_job_logglue" in tables:
        report.glue_versions = int(_scalar(conn, "SELECT count(*) FROM xxl_job_logglue"))
    if "xxl_job_registry" in tables:
        report.registry_rows = int(_scalar(conn, "SELECT count(*) FROM xxl_job_registry"))
    if conn.dialect.name == "mysql":
        zone = conn.execute(sa.text("SELECT @@global.time_zone, @@system_time_zone")).first()
        if zone is not None:
            report.server_zone = f"{zone[0]} (system: {zone[1]})"
    if "jobring_setting" in tables:
        stored: dict[str, str] = dict(conn.execute(sa.text("SELECT name, value FROM jobring_setting")).all())
        report.stored_zone = stored.get(DATABASE_TIMEZONE_SETTING)
        report.adopted_from = stored.get(ADOPTED_FROM_SETTING)
    return report


async def record_adoption(
    store: Store, report: AdoptionReport, zone_name: str, now_ms: int
) -> dict[str, str]:
    """Store the adoption's settings (first adoption wins; a rerun changes nothing) and give
    adopted users XXL-JOB's GLUE rule. Returns the settings as stored."""
    first = await store.settings.get(GLUE_GRANTED_SETTING) is None
    values = {
        DATABASE_TIMEZONE_SETTING: zone_name,
        DEFAULT_TIMEZONE_SETTING: zone_name,
        LEGACY_LOG_ID_MAX_SETTING: str(report.max_log_id),
        ADOPTED_AT_SETTING: str(now_ms),
        ADOPTED_FROM_SETTING: report.finding.version,
    }
    stored = {name: await store.settings.get_or_create(name, value) for name, value in values.items()}
    if first and await store.settings.get_or_create(GLUE_GRANTED_SETTING, str(now_ms)) == str(now_ms):
        # XXL-JOB lets every user edit the GLUE code of the groups they may use; keep that
        # for the users it created (the admin may change it per user afterwards).
        await store.users.grant_glue_to_legacy_users()
    return stored


@dataclass(frozen=True, slots=True)
class DatabaseState:
    """What an admin node learns from the database at start (see ``resolve_database_state``)."""

    database_timezone: str
    default_timezone: str
    adopted_from: str | None
    legacy_log_id_max: int


async def resolve_database_state(
    store: Store, configured_zone: str | None, configured_default: str | None
) -> DatabaseState:
    """Agree with the database on its DATETIME zone (ConfigError when this node's differs),
    apply it to the store, and read the adoption's settings."""
    stored = await store.settings.all()
    zone = stored.get(DATABASE_TIMEZONE_SETTING)
    if configured_zone is not None:
        _check_zone("database_timezone", configured_zone)
        if zone is None:
            zone = await store.settings.get_or_create(DATABASE_TIMEZONE_SETTING, configured_zone)
        if zone != configured_zone:
            raise ConfigError(
                f"database_timezone: this node is configured with {configured_zone!r} but the database "
                f"records {zone!r} (every node must read its times alike); remove JOBRING_DATABASE_TIMEZONE "
                "or set it to the recorded zone"
            )
    if zone is None and stored.get(ADOPTED_FROM_SETTING) is not None:
        log.warning(
            "this database came from XXL-JOB but records no database_timezone: its DATETIME columns "
            "are read as UTC; run `jobring db adopt --database-timezone ZONE` (ZONE: XXL-JOB's "
            "serverTimezone, e.g. Asia/Shanghai) unless XXL-JOB ran in UTC"
        )
    zone = zone or "UTC"
    set_database_zone(store.engine, _check_zone("database_timezone (stored)", zone))
    default = configured_default or stored.get(DEFAULT_TIMEZONE_SETTING) or "UTC"
    _check_zone("timezone", default)
    return DatabaseState(
        zone, default, stored.get(ADOPTED_FROM_SETTING), int(stored.get(LEGACY_LOG_ID_MAX_SETTING, "0") or 0)
    )


def _check_zone(name: str, zone: str) -> tzinfo:
    try:
        return zone_named(zone)
    except ValueError as exc:
        raise ConfigError(f"{name}: {exc}") from None
