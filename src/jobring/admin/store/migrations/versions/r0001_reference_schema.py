"""XXL-JOB 2.4's reference tables, created only where absent (an existing database is adopted).

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_MYSQL: dict[str, Any] = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4"}
_LONG_TEXT = sa.Text().with_variant(mysql.MEDIUMTEXT(), "mysql", "mariadb")


def _id() -> sa.Column[int]:
    return sa.Column("id", sa.Integer, primary_key=True, autoincrement=True)


def _create_missing(existing: set[str]) -> None:
    if "xxl_job_info" not in existing:
        op.create_table(
            "xxl_job_info",
            _id(),
            sa.Column("job_group", sa.Integer, nullable=False),
            sa.Column("job_desc", sa.String(255), nullable=False),
            sa.Column("add_time", sa.DateTime),
            sa.Column("update_time", sa.DateTime),
            sa.Column("author", sa.String(64)),
            sa.Column("alarm_email", sa.String(255)),
            sa.Column("schedule_type", sa.String(50), nullable=False, server_default="NONE"),
            sa.Column("schedule_conf", sa.String(128)),
            sa.Column("misfire_strategy", sa.String(50), nullable=False, server_default="DO_NOTHING"),
            sa.Column("executor_route_strategy", sa.String(50)),
            sa.Column("executor_handler", sa.String(255)),
            sa.Column("executor_param", sa.String(512)),
            sa.Column("executor_block_strategy", sa.String(50)),
            sa.Column("executor_timeout", sa.Integer, nullable=False, server_default="0"),
            sa.Column("executor_fail_retry_count", sa.Integer, nullable=False, server_default="0"),
            sa.Column("glue_type", sa.String(50), nullable=False),
            sa.Column("glue_source", _LONG_TEXT),
            sa.Column("glue_remark", sa.String(128)),
            sa.Column("glue_updatetime", sa.DateTime),
            sa.Column("child_jobid", sa.String(255)),
            sa.Column("trigger_status", sa.SmallInteger, nullable=False, server_default="0"),
            sa.Column("trigger_last_time", sa.BigInteger, nullable=False, server_default="0"),
            sa.Column("trigger_next_time", sa.BigInteger, nullable=False, server_default="0"),
            **_MYSQL,
        )
    if "xxl_job_log" not in existing:
        op.create_table(
            "xxl_job_log",
            sa.Column(
                "id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True
            ),
            sa.Column("job_group", sa.Integer, nullable=False),
            sa.Column("job_id", sa.Integer, nullable=False),
            sa.Column("executor_address", sa.String(255)),
            sa.Column("executor_handler", sa.String(255)),
            sa.Column("executor_param", sa.String(512)),
            sa.Column("executor_sharding_param", sa.String(20)),
            sa.Column("executor_fail_retry_count", sa.Integer, nullable=False, server_default="0"),
            sa.Column("trigger_time", sa.DateTime),
            sa.Column("trigger_code", sa.Integer, nullable=False),
            sa.Column("trigger_msg", sa.Text),
            sa.Column("handle_time", sa.DateTime),
            sa.Column("handle_code", sa.Integer, nullable=False),
            sa.Column("handle_msg", sa.Text),
            sa.Column("alarm_status", sa.SmallInteger, nullable=False, server_default="0"),
            **_MYSQL,
        )
        op.create_index("I_trigger_time", "xxl_job_log", ["trigger_time"])
        op.create_index("I_handle_code", "xxl_job_log", ["handle_code"])
    if "xxl_job_log_report" not in existing:
        op.create_table(
            "xxl_job_log_report",
            _id(),
            sa.Column("trigger_day", sa.DateTime),
            sa.Column("running_count", sa.Integer, nullable=False, server_default="0"),
            sa.Column("suc_count", sa.Integer, nullable=False, server_default="0"),
            sa.Column("fail_count", sa.Integer, nullable=False, server_default="0"),
            sa.Column("update_time", sa.DateTime),
            sa.UniqueConstraint("trigger_day", name="i_trigger_day"),
            **_MYSQL,
        )
    if "xxl_job_logglue" not in existing:
        op.create_table(
            "xxl_job_logglue",
            _id(),
            sa.Column("job_id", sa.Integer, nullable=False),
            sa.Column("glue_type", sa.String(50)),
            sa.Column("glue_source", _LONG_TEXT),
            sa.Column("glue_remark", sa.String(128), nullable=False),
            sa.Column("add_time", sa.DateTime),
            sa.Column("update_time", sa.DateTime),
            **_MYSQL,
        )
    if "xxl_job_registry" not in existing:
        op.create_table(
            "xxl_job_registry",
            _id(),
            sa.Column("registry_group", sa.String(50), nullable=False),
            sa.Column("registry_key", sa.String(255), nullable=False),
            sa.Column("registry_value", sa.String(255), nullable=False),
            sa.Column("update_time", sa.DateTime),
            **_MYSQL,
        )
        op.create_index("i_g_k_v", "xxl_job_registry", ["registry_group", "registry_key", "registry_value"])
    if "xxl_job_group" not in existing:
        op.create_table(
            "xxl_job_group",
            _id(),
            sa.Column("app_name", sa.String(64), nullable=False),
            sa.Column("title", sa.String(12), nullable=False),
            sa.Column("address_type", sa.SmallInteger, nullable=False, server_default="0"),
            sa.Column("address_list", sa.Text),
            sa.Column("update_time", sa.DateTime),
            **_MYSQL,
        )
    if "xxl_job_user" not in existing:
        op.create_table(
            "xxl_job_user",
            _id(),
            sa.Column("username", sa.String(50), nullable=False),
            sa.Column("password", sa.String(50), nullable=False, server_default=""),
            sa.Column("role", sa.SmallInteger, nullable=False),
            sa.Column("permission", sa.String(255)),
            sa.UniqueConstraint("username", name="i_username"),
            **_MYSQL,
        )
    if "xxl_job_lock" not in existing:
        op.create_table("xxl_job_lock", sa.Column("lock_name", sa.String(50), primary_key=True), **_MYSQL)


def upgrade() -> None:
    bind = op.get_bind()
    _create_missing(set(sa.inspect(bind).get_table_names()))
    lock = sa.table("xxl_job_lock", sa.column("lock_name", sa.String))
    present = bind.execute(sa.select(lock.c.lock_name).where(lock.c.lock_name == "schedule_lock")).first()
    if present is None:
        op.bulk_insert(lock, [{"lock_name": "schedule_lock"}])


def downgrade() -> None:
    raise NotImplementedError("jobring does not drop the reference tables")
