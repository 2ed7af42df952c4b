"""Executor group titles up to 64 characters (XXL-JOB's varchar(12) cut "Billing and invoicing").

Revision ID: 0010
Revises: 0012
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from jobring.admin.store.sqlite_ids import sqlite_sequence_kept

revision = "0010"
down_revision = "0012"
branch_labels = None
depends_on = None

TITLE_LENGTH = 64


def upgrade() -> None:
    columns = {c["name"]: c for c in sa.inspect(op.get_bind()).get_columns("xxl_job_group")}
    length = getattr(columns["title"]["type"], "length", None)
    if length is None or length >= TITLE_LENGTH:
        return  # already widened (idempotent), or an unbounded text column
    # Batch mode: a plain ALTER on PostgreSQL and MySQL, a table copy on SQLite (which has
    # no ALTER COLUMN; the declared type is what a schema comparison reads).
    with (
        sqlite_sequence_kept(op.get_bind(), "xxl_job_group"),
        op.batch_alter_table("xxl_job_group", table_kwargs={"sqlite_autoincrement": True}) as batch,
    ):
        batch.alter_column(
            "title", existing_type=sa.String(length), type_=sa.String(TITLE_LENGTH), existing_nullable=False
        )


def downgrade() -> None:
    raise NotImplementedError("jobring migrations are forward-only")
