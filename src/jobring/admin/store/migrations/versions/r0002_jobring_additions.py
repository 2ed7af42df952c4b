"""jobring's columns, tables and indexes, each added only where missing.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_MYSQL: dict[str, Any] = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4"}


def _columns() -> dict[str, list[sa.Column[object]]]:
    return {
        "xxl_job_info": [
            sa.Column("schedule_timezone", sa.String(64), nullable=True),
            sa.Column("lease_owner", sa.String(64), nullable=True),
            sa.Column("lease_until", sa.BigInteger, nullable=False, server_default="0"),
        ],
        "xxl_job_log": [
            sa.Column("trigger_type", sa.String(20), nullable=True),
            sa.Column("planned_time", sa.BigInteger, nullable=True),
            sa.Column("dispatch_time", sa.BigInteger, nullable=True),
            sa.Column("admin_node", sa.String(64), nullable=True),
        ],
        "xxl_job_user": [
            sa.Column("password_hash", sa.String(255), nullable=True),
            sa.Column("must_change_password", sa.Boolean, nullable=False, server_default=sa.false()),
            sa.Column("glue_permission", sa.Boolean, nullable=False, server_default=sa.false()),
            sa.Column("add_time", sa.DateTime, nullable=True),
        ],
    }


_INDEXES: list[tuple[str, str, list[str]]] = [
    ("ix_job_info_due", "xxl_job_info", ["trigger_status", "trigger_next_time"]),
    ("ix_job_info_group", "xxl_job_info", ["job_group"]),
    ("ix_job_log_job_time", "xxl_job_log", ["job_id", "trigger_time"]),
    ("ix_job_log_alarm", "xxl_job_log", ["alarm_status", "handle_code"]),
    ("ix_job_logglue_job", "xxl_job_logglue", ["job_id"]),
]


def _index_names(inspector: sa.Inspector, table: str) -> set[str]:
    names = {ix["name"] for ix in inspector.get_indexes(table) if ix["name"]}
    names |= {uc["name"] for uc in inspector.get_unique_constraints(table) if uc["name"]}
    return names


def upgrade() -> None:
    bind = op.get_bind()
    inspector = sa.inspect(bind)
    for table, columns in _columns().items():
        present = {c["name"] for c in inspector.get_columns(table)}
        for column in columns:
            if column.name not in present:
                op.add_column(table, column)
    for name, table, cols in _INDEXES:
        if name not in _index_names(inspector, table):
            op.create_index(name, table, cols)
    if "ux_job_log_planned_fire" not in _index_names(inspector, "xxl_job_log"):
        if bind.dialect.name == "sqlite":
            op.create_index("ux_job_log_planned_fire", "xxl_job_log", ["job_id", "planned_time"], unique=True)
        else:
            op.create_unique_constraint("ux_job_log_planned_fire", "xxl_job_log", ["job_id", "planned_time"])
    tables = set(inspector.get_table_names())
    if "jobring_setting" not in tables:
        op.create_table(
            "jobring_setting",
            sa.Column("name", sa.String(64), primary_key=True),
            sa.Column("value", sa.Text, nullable=False),
            sa.Column("update_time", sa.DateTime, nullable=True),
            **_MYSQL,
        )
    if "jobring_api_token" not in tables:
        op.create_table(
            "jobring_api_token",
            sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
            sa.Column("user_id", sa.Integer, nullable=False),
            sa.Column("name", sa.String(64), nullable=False),
            sa.Column("token_hash", sa.String(128), nullable=False),
            sa.Column("add_time", sa.DateTime, nullable=True),
            sa.Column("last_used_time", sa.DateTime, nullable=True),
            sa.Column("revoked", sa.Boolean, nullable=False, server_default=sa.false()),
            sa.UniqueConstraint("token_hash", name="ux_api_token_hash"),
            **_MYSQL,
        )
        op.create_index("ix_api_token_user", "jobring_api_token", ["user_id"])


def downgrade() -> None:
    raise NotImplementedError("jobring migrations are forward-only")
