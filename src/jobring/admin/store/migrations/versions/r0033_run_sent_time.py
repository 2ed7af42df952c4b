"""The instant a run was sent with (its ``logDateTime``), kept exactly.

* ``xxl_job_log.sent_time``: epoch ms. A run's identity on an executor is (run id,
  ``logDateTime``); the admin asks executors about a run, reads its log, kills it and sends an
  unsure fire again by that pair. Read back from ``trigger_time`` alone it may be wrong: a
  DATETIME column drops or rounds the milliseconds, and in a database zone's repeated hour
  (DST ending) it reads back an hour early. Rows written before this revision, or by an
  XXL-JOB admin sharing the database, have none: their instant is worked out as before.

Revision ID: 0033
Revises: 0032
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0033"
down_revision = "0032"
branch_labels = None
depends_on = None


def upgrade() -> None:
    columns = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("xxl_job_log")}
    if "sent_time" not in columns:
        op.add_column("xxl_job_log", sa.Column("sent_time", sa.BigInteger, nullable=True))


def downgrade() -> None:
    raise NotImplementedError("jobring migrations are forward-only")
