"""The handlers an executor declares: ``xxl_job_registry.handlers`` (a JSON array of names,
NULL when the executor declared none), written with every heartbeat of a jobring executor.

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    existing = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("xxl_job_registry")}
    if "handlers" not in existing:
        op.add_column("xxl_job_registry", sa.Column(
            "handlers", sa.Text().with_variant(mysql.MEDIUMTEXT(), "mysql", "mariadb"), nullable=True))


def downgrade() -> None:
    raise NotImplementedError("jobring migrations are forward-only")
