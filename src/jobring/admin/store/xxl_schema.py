"""The XXL-JOB schema as found in a database: which release it is, whether jobring can adopt
it, and the marks an adoption leaves (where XXL-JOB's history ends). The schema upgrade
(:mod:`jobring.admin.store.migrate`) checks and marks here before and after every upgrade;
:mod:`jobring.admin.services.adopt` reports and records the rest."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from jobring.admin.store.tables import metadata
from jobring.errors import JobringError

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


class AdoptionRefused(JobringError):
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
