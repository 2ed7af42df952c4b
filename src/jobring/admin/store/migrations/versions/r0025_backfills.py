"""Backfills and logical time (issue 24): ``jobring_backfill`` (one row per backfill request:
its instants, parallelism cap and progress cursor), and on ``xxl_job_log`` the run's logical
time, the start of its data interval and its backfill (unique with the logical time and the
attempt: an instant of a backfill is recorded at most once per attempt, whichever admin fires
it).

Revision ID: 0025
Revises: 0024
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None

_LONG_TEXT = sa.Text().with_variant(mysql.MEDIUMTEXT(), "mysql", "mariadb")


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    if "jobring_backfill" not in set(inspector.get_table_names()):
        op.create_table(
            "jobring_backfill",
            sa.Column(
                "id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True
            ),
            sa.Column("job_id", sa.Integer, nullable=False),
            sa.Column("job_group", sa.Integer, nullable=False),
            sa.Column("status", sa.String(16), nullable=False),
            sa.Column("request", sa.Text, nullable=False),
            sa.Column("instants", _LONG_TEXT, nullable=False),
            sa.Column("total", sa.Integer, nullable=False),
            sa.Column("parallelism", sa.Integer, nullable=False),
            sa.Column("started", sa.Integer, nullable=False, server_default="0"),
            sa.Column("claimed_at", sa.BigInteger, nullable=True),
            sa.Column("created_by", sa.String(64), nullable=True),
            sa.Column("created_at", sa.BigInteger, nullable=False),
            sa.Column("ended_at", sa.BigInteger, nullable=True),
            sa.Index("ix_backfill_job", "job_id", "id"),
            sa.Index("ix_backfill_status", "status"),
            sqlite_autoincrement=True,
        )
    existing = {c["name"] for c in inspector.get_columns("xxl_job_log")}
    for name in ("logical_time", "data_interval_start", "backfill_id"):
        if name not in existing:
            op.add_column("xxl_job_log", sa.Column(name, sa.BigInteger, nullable=True))
    bind = op.get_bind()
    indexes = {ix["name"] for ix in sa.inspect(bind).get_indexes("xxl_job_log")}
    uniques = {uq["name"] for uq in sa.inspect(bind).get_unique_constraints("xxl_job_log")}
    if "ux_job_log_backfill" not in indexes | uniques:
        op.create_index(
            "ux_job_log_backfill", "xxl_job_log", ["backfill_id", "logical_time", "attempt"], unique=True
        )


def downgrade() -> None:
    raise NotImplementedError("jobring migrations are forward-only")
