"""The result's instant in epoch milliseconds (``handle_time`` keeps whole seconds), so a run's
duration is measured to the millisecond.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    if "handle_time_ms" not in {c["name"] for c in inspector.get_columns("xxl_job_log")}:
        op.add_column("xxl_job_log", sa.Column("handle_time_ms", sa.BigInteger, nullable=True))


def downgrade() -> None:
    raise NotImplementedError("jobring migrations are forward-only")
