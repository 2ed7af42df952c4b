"""Adopting an XXL-JOB database: what is there, whether jobring can take it, what it keeps.

The schema checks that run before every upgrade (``jobring db upgrade`` included) are in
:mod:`jobring.admin.store.xxl_schema`. ``gather_report`` gathers the report ``jobring db
adopt`` prints; ``record_adoption`` stores what every admin node must agree on (the
database's zone, the boundary between XXL-JOB's history and jobring's runs).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from jobring.admin.store import Store
from jobring.admin.store.xxl_schema import (
    ADOPTED_AT_SETTING,
    ADOPTED_FROM_SETTING,
    DEFAULT_TIMEZONE_SETTING,
    GLUE_GRANTED_SETTING,
    LEGACY_LOG_ID_MAX_SETTING,
    SchemaFinding,
    detect_schema,
)
from jobring.admin.store.zones import DATABASE_TIMEZONE_SETTING, set_database_zone, zone_named
from jobring.configbase import ConfigError

log = logging.getLogger(__name__)


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
