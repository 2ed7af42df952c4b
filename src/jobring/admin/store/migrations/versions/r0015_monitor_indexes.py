"""An index for the fail monitor: unalarmed failures by trigger code (the handle code has one).

The fail monitor asks every few seconds for runs with alarm_status 0 whose trigger or handle
code is neither 0 nor 200. Successful runs keep alarm_status 0, so without an index per code
column that pass scanned the whole run log (about 250 ms on PostgreSQL, 1.1 s on MariaDB at
1,000,000 runs, bench/monitor_queries.py).

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    existing = {ix["name"] for ix in sa.inspect(op.get_bind()).get_indexes("xxl_job_log")}
    if "ix_job_log_alarm_trigger" not in existing:
        op.create_index("ix_job_log_alarm_trigger", "xxl_job_log", ["alarm_status", "trigger_code"])


def downgrade() -> None:
    raise NotImplementedError("jobring migrations are forward-only")
