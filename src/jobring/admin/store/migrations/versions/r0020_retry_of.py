"""Retries linked to their origin: ``xxl_job_log.retry_of`` is the run a retry re-runs (with
``attempt`` it tells the attempts of one run apart); null on first runs.

Revision ID: 0020
Revises: 0018
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    existing = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("xxl_job_log")}
    if "retry_of" not in existing:
        op.add_column("xxl_job_log", sa.Column("retry_of", sa.BigInteger, nullable=True))
    indexes = {ix["name"] for ix in sa.inspect(op.get_bind()).get_indexes("xxl_job_log")}
    if "ix_job_log_retry_of" not in indexes:
        # A run page lists the attempts of a run: the retries of it, of its retries, ...
        op.create_index("ix_job_log_retry_of", "xxl_job_log", ["retry_of"])


def downgrade() -> None:
    raise NotImplementedError("jobring migrations are forward-only")
