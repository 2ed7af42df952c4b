"""Scheduler nodes say which database session lock proves them alive (``lock_key``; 0: none),
so the other nodes can take a dead node's jobs over as soon as its session is gone.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    columns = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("jobring_scheduler_node")}
    if "lock_key" not in columns:
        op.add_column("jobring_scheduler_node",
                      sa.Column("lock_key", sa.BigInteger(), nullable=False, server_default="0"))


def downgrade() -> None:
    raise NotImplementedError("jobring migrations are forward-only")
