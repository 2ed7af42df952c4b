"""Scheduler node table (liveness and send fences) and the index a node's lease renewal uses.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    if "ix_job_info_lease_owner" not in {ix["name"] for ix in inspector.get_indexes("xxl_job_info")}:
        op.create_index("ix_job_info_lease_owner", "xxl_job_info", ["lease_owner"])
    if "jobring_scheduler_node" not in set(inspector.get_table_names()):
        op.create_table(
            "jobring_scheduler_node",
            sa.Column("node_id", sa.String(64), primary_key=True),
            sa.Column("alive_until", sa.BigInteger, nullable=False, server_default="0"),
            sa.Column("send_fence", sa.BigInteger, nullable=False, server_default="0"),
            mysql_engine="InnoDB",
            mysql_charset="utf8mb4",
        )
    # Node announcements used to live in the settings table; they are short-lived.
    setting = sa.table("jobring_setting", sa.column("name", sa.String))
    op.execute(sa.delete(setting).where(setting.c.name.like("scheduler!_node:%", escape="!")))


def downgrade() -> None:
    raise NotImplementedError("jobring migrations are forward-only")
