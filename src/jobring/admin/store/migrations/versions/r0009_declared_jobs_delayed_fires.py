"""Jobs declared by executors (``declared_spec``, ``declared_by_executor`` on xxl_job_info) and
delayed one-shot fires (``jobring_delayed_fire``), each created only where missing.

Revision ID: 0012
Revises: 0008
Create Date: 2026-11-23

The file is named by its place in the chain (after 0008, before 0010); its revision id stays
0012, the one databases already record.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0008"
branch_labels = None
depends_on = None

TABLE = "jobring_delayed_fire"


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    columns = {c["name"] for c in inspector.get_columns("xxl_job_info")}
    if "declared_spec" not in columns:
        op.add_column("xxl_job_info", sa.Column("declared_spec", sa.Text, nullable=True))
    if "declared_by_executor" not in columns:
        op.add_column(
            "xxl_job_info",
            sa.Column("declared_by_executor", sa.SmallInteger, nullable=False, server_default="0"),
        )
    if TABLE not in set(inspector.get_table_names()):
        op.create_table(
            TABLE,
            sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True,
                      autoincrement=True),
            sa.Column("job_id", sa.Integer, nullable=False),
            sa.Column("job_group", sa.Integer, nullable=False),
            sa.Column("fire_at", sa.BigInteger, nullable=False),
            sa.Column("executor_param", sa.String(512), nullable=True),
            sa.Column("addresses", sa.Text, nullable=True),
            sa.Column("created_by", sa.String(64), nullable=True),
            sa.Column("created_at", sa.BigInteger, nullable=False),
            sqlite_autoincrement=True,
            mysql_engine="InnoDB",
            mysql_charset="utf8mb4",
        )
        inspector = sa.inspect(op.get_bind())
    existing = {ix["name"] for ix in inspector.get_indexes(TABLE)}
    if "ix_delayed_fire_at" not in existing:
        op.create_index("ix_delayed_fire_at", TABLE, ["fire_at"])
    if "ix_delayed_fire_job" not in existing:
        op.create_index("ix_delayed_fire_job", TABLE, ["job_id"])


def downgrade() -> None:
    raise NotImplementedError("jobring migrations are forward-only")
