"""Calendars and job timing (issue 24): ``jobring_calendar`` (named calendars, global or owned
by one executor group), and on ``xxl_job_info`` the job's timing rules (``timing``, JSON:
calendars, calendar action, validity window, run limit, jitter), and the note of its last pause
(``pause_note``, JSON: who, why, when).

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

TABLE = "jobring_calendar"


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    existing = {c["name"] for c in inspector.get_columns("xxl_job_info")}
    if "timing" not in existing:
        op.add_column("xxl_job_info", sa.Column("timing", sa.Text, nullable=True))
    if "pause_note" not in existing:
        op.add_column("xxl_job_info", sa.Column("pause_note", sa.Text, nullable=True))
    if TABLE not in set(inspector.get_table_names()):
        op.create_table(
            TABLE,
            sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
            sa.Column("name", sa.String(64), nullable=False),
            sa.Column("job_group", sa.Integer, nullable=True),
            sa.Column("spec", sa.Text().with_variant(mysql.MEDIUMTEXT(), "mysql", "mariadb"), nullable=False),
            sa.Column("update_time", sa.BigInteger, nullable=False, server_default="0"),
            sa.Column("updated_by", sa.String(64), nullable=True),
            sa.UniqueConstraint("name", name="ux_calendar_name"),
            sqlite_autoincrement=True,
            mysql_engine="InnoDB",
            mysql_charset="utf8mb4",
        )


def downgrade() -> None:
    raise NotImplementedError("jobring migrations are forward-only")
