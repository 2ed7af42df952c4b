"""Adopt XXL-JOB 2.1/2.2 schemas: the 2.3 columns they lack, filled as XXL-JOB 2.3 did.

XXL-JOB 2.3 replaced ``xxl_job_info.job_cron`` by ``schedule_type``/``schedule_conf``/
``misfire_strategy`` and added ``xxl_job_group.update_time``. A database of the older shape
gets those columns, its cron jobs become ``CRON`` jobs with the same expression, and
``job_cron`` is kept (nullable now, so jobring's inserts, which do not set it, work; a
rollback to the old Java admin still finds its column). 2.0 (Quartz era) and other shapes
are refused before any migration runs (``jobring.admin.store.xxl_schema.check_adoptable``).
Nothing happens on databases that already have the columns.

Revision ID: 0013
Revises: 0010
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from jobring.admin.store.sqlite_ids import sqlite_sequence_kept

revision = "0013"
down_revision = "0010"
branch_labels = None
depends_on = None


def _columns(inspector: sa.Inspector, table: str) -> dict[str, dict[str, object]]:
    return {str(c["name"]): dict(c) for c in inspector.get_columns(table)}


def upgrade() -> None:
    bind = op.get_bind()
    inspector = sa.inspect(bind)
    tables = set(inspector.get_table_names())
    if "xxl_job_info" in tables:
        info = _columns(inspector, "xxl_job_info")
        added = "schedule_type" not in info
        if added:
            op.add_column("xxl_job_info", sa.Column(
                "schedule_type", sa.String(50), nullable=False, server_default="NONE"))
        if "schedule_conf" not in info:
            op.add_column("xxl_job_info", sa.Column("schedule_conf", sa.String(128), nullable=True))
        if "misfire_strategy" not in info:
            op.add_column("xxl_job_info", sa.Column(
                "misfire_strategy", sa.String(50), nullable=False, server_default="DO_NOTHING"))
        if "job_cron" in info:
            if added:
                bind.execute(sa.text(
                    "UPDATE xxl_job_info SET schedule_type = 'CRON', schedule_conf = job_cron"
                    " WHERE job_cron IS NOT NULL AND job_cron <> ''"
                ))
            if not info["job_cron"].get("nullable", True):
                sqlite_kwargs = {"sqlite_autoincrement": True}  # keep ids never reused (0005)
                with (
                    sqlite_sequence_kept(op.get_bind(), "xxl_job_info"),
                    op.batch_alter_table("xxl_job_info", table_kwargs=sqlite_kwargs) as batch,
                ):
                    batch.alter_column("job_cron", existing_type=sa.String(128), nullable=True)
    if "xxl_job_group" in tables and "update_time" not in _columns(inspector, "xxl_job_group"):
        op.add_column("xxl_job_group", sa.Column("update_time", sa.DateTime, nullable=True))
    if "xxl_job_log_report" in tables and "update_time" not in _columns(inspector, "xxl_job_log_report"):
        op.add_column("xxl_job_log_report", sa.Column("update_time", sa.DateTime, nullable=True))


def downgrade() -> None:
    raise NotImplementedError("jobring migrations are forward-only")
