"""Flow control (issue 22, item 3): ``flow`` (JSON settings: limits, concurrency key, rate,
priority) on ``xxl_job_info`` and ``xxl_job_group``; ``jobring_flow_run`` (runs flow control
holds, waiting or running), ``jobring_flow_bucket`` (rate-limit token buckets) and
``jobring_flow_turn`` (round-robin turns of the keys with runs waiting).

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    for table in ("xxl_job_info", "xxl_job_group"):
        if "flow" not in {c["name"] for c in inspector.get_columns(table)}:
            op.add_column(table, sa.Column("flow", sa.Text, nullable=True))
    tables = set(inspector.get_table_names())
    if "jobring_flow_run" not in tables:
        op.create_table(
            "jobring_flow_run",
            sa.Column("log_id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True,
                      autoincrement=False),
            sa.Column("job_group", sa.Integer, nullable=False),
            sa.Column("job_id", sa.Integer, nullable=False),
            sa.Column("scopes", sa.Text, nullable=False),
            sa.Column("fair_key", sa.String(300), nullable=False),
            sa.Column("priority", sa.SmallInteger, nullable=False),
            sa.Column("enqueued_ms", sa.BigInteger, nullable=False),
            sa.Column("started_ms", sa.BigInteger, nullable=True),
            sa.Index("ix_flow_run_group", "job_group", "started_ms"),
            mysql_engine="InnoDB",
            mysql_charset="utf8mb4",
        )
    if "jobring_flow_bucket" not in tables:
        op.create_table(
            "jobring_flow_bucket",
            sa.Column("scope", sa.String(300), primary_key=True),
            sa.Column("job_group", sa.Integer, nullable=False),
            sa.Column("level", sa.BigInteger, nullable=False),
            sa.Column("stamp_ms", sa.BigInteger, nullable=False),
            sa.Index("ix_flow_bucket_group", "job_group"),
            mysql_engine="InnoDB",
            mysql_charset="utf8mb4",
        )
    if "jobring_flow_turn" not in tables:
        op.create_table(
            "jobring_flow_turn",
            sa.Column("fair_key", sa.String(300), primary_key=True),
            sa.Column("job_group", sa.Integer, nullable=False),
            sa.Column("turn", sa.BigInteger, nullable=False),
            sa.Index("ix_flow_turn_group", "job_group"),
            mysql_engine="InnoDB",
            mysql_charset="utf8mb4",
        )


def downgrade() -> None:
    raise NotImplementedError("jobring migrations are forward-only")
