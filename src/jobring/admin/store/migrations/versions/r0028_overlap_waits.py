"""Overlap policies (issue 24): ``jobring_overlap_wait``, the fires of a job waiting for its
running runs to end (policies ``buffer_one``, ``buffer_all``, ``cancel_other``). A waiting fire
keeps its identity (job id, planned instant), unique, so it waits at most once.

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    if "jobring_overlap_wait" not in set(inspector.get_table_names()):
        op.create_table(
            "jobring_overlap_wait",
            sa.Column(
                "id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True
            ),
            sa.Column("job_id", sa.Integer, nullable=False),
            sa.Column("job_group", sa.Integer, nullable=False),
            sa.Column("planned_time", sa.BigInteger, nullable=False),
            sa.Column("logical_time", sa.BigInteger, nullable=False),
            sa.Column("trigger_type", sa.String(16), nullable=False),
            sa.Column("created_at", sa.BigInteger, nullable=False),
            sa.UniqueConstraint("job_id", "planned_time", name="ux_overlap_wait"),
            sqlite_autoincrement=True,
        )


def downgrade() -> None:
    raise NotImplementedError("jobring migrations are forward-only")
