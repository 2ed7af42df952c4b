"""Alarm targets and rules, retry back-off, run attempts, disabled addresses, alarm events.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-23
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_JOB_COLUMNS = (
    sa.Column("alarm_targets", sa.Text, nullable=True),
    sa.Column("alarm_on", sa.String(20), nullable=False, server_default="failure_final"),
    sa.Column("alarm_recovery", sa.Boolean, nullable=False, server_default="0"),
    sa.Column("deadline_minutes", sa.Integer, nullable=True),
    sa.Column("executor_fail_retry_interval_s", sa.Integer, nullable=False, server_default="0"),
    sa.Column("retry_backoff", sa.String(20), nullable=False, server_default="fixed"),
    sa.Column("retry_backoff_max_s", sa.Integer, nullable=False, server_default="3600"),
)


def _add_missing(inspector: sa.Inspector, table: str, columns: tuple[sa.Column[Any], ...]) -> None:
    have = {c["name"] for c in inspector.get_columns(table)}
    for column in columns:
        if column.name not in have:
            op.add_column(table, column)


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    _add_missing(inspector, "xxl_job_info", _JOB_COLUMNS)
    _add_missing(
        inspector, "xxl_job_log", (sa.Column("attempt", sa.Integer, nullable=False, server_default="1"),)
    )
    _add_missing(inspector, "xxl_job_group", (sa.Column("disabled_addresses", sa.Text, nullable=True),))
    if "jobring_alarm_event" not in set(inspector.get_table_names()):
        op.create_table(
            "jobring_alarm_event",
            sa.Column(
                "id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True
            ),
            sa.Column("log_id", sa.BigInteger, nullable=False),
            sa.Column("job_id", sa.Integer, nullable=False),
            sa.Column("kind", sa.String(20), nullable=False),
            sa.Column("status", sa.SmallInteger, nullable=False, server_default="-1"),
            sa.Column("add_time", sa.BigInteger, nullable=False, server_default="0"),
            sa.UniqueConstraint("log_id", "kind", name="ux_alarm_event_log_kind"),
            mysql_engine="InnoDB",
            mysql_charset="utf8mb4",
        )
        op.create_index("ix_alarm_event_time", "jobring_alarm_event", ["add_time"])


def downgrade() -> None:
    raise NotImplementedError("jobring migrations are forward-only")
