"""A workflow run's state compressed with lz4 on PostgreSQL.

Every step of a workflow run writes its whole state document back (``jobring_workflow_run.state``,
85-140 KB for a run of 1,000 finished nodes), which PostgreSQL compresses before storing it out
of line. With its default (pglz) such an UPDATE took 2.0-2.8 ms on the test machine, with lz4
0.9-1.7 ms (bench/RESULTS.md, issue 21); reading it back is cheaper too. Rows stored before keep
their compression until they are written again. Only on PostgreSQL 14 and later built with lz4;
nothing changes elsewhere.

Revision ID: 0034
Revises: 0033
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0034"
down_revision = "0033"
branch_labels = None
depends_on = None

_HAS_LZ4 = sa.text(
    "SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'")


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql" or not bind.execute(_HAS_LZ4).scalar():
        return  # before PostgreSQL 14 the setting does not exist: no row, None
    op.execute("ALTER TABLE jobring_workflow_run ALTER COLUMN state SET COMPRESSION lz4")


def downgrade() -> None:
    raise NotImplementedError("jobring migrations are forward-only")
