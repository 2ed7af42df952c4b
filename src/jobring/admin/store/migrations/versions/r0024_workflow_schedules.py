"""Workflow schedules: ``jobring_workflow_schedule``, at most one row per workflow (cron or
fixed rate, time zone, misfire and overlap rules, the next planned instant).

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if "jobring_workflow_schedule" in sa.inspect(op.get_bind()).get_table_names():
        return
    op.create_table(
        "jobring_workflow_schedule",
        sa.Column("workflow_id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("schedule_type", sa.String(16), nullable=False),
        sa.Column("schedule_conf", sa.String(128), nullable=False, server_default=""),
        sa.Column("time_zone", sa.String(64), nullable=True),
        sa.Column("misfire_strategy", sa.String(32), nullable=False, server_default="DO_NOTHING"),
        sa.Column("overlap", sa.String(16), nullable=False, server_default="skip"),
        sa.Column("params", sa.Text, nullable=True),
        sa.Column("enabled", sa.Integer, nullable=False, server_default="0"),
        sa.Column("next_fire_at", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("queued_at", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("last_fire_at", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("last_result", sa.String(255), nullable=False, server_default=""),
        sa.Column("updated_by", sa.String(64), nullable=True),
        sa.Column("updated_at", sa.BigInteger, nullable=False),
        sa.Index("ix_workflow_schedule_due", "enabled", "next_fire_at"),
    )


def downgrade() -> None:
    raise NotImplementedError("jobring migrations are forward-only")
