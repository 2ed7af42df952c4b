"""Indexes for the console's run listings and dashboard on large logs: newest first with the
id tie-break (keyset paging), by executor group, and by planned instant (node lateness).

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

INDEXES = {
    "ix_job_log_time_id": ["trigger_time", "id"],
    "ix_job_log_group_time": ["job_group", "trigger_time"],
    "ix_job_log_planned": ["planned_time"],
}


def upgrade() -> None:
    existing = {ix["name"] for ix in sa.inspect(op.get_bind()).get_indexes("xxl_job_log")}
    for name, columns in INDEXES.items():
        if name not in existing:
            op.create_index(name, "xxl_job_log", columns)


def downgrade() -> None:
    raise NotImplementedError("jobring migrations are forward-only")
