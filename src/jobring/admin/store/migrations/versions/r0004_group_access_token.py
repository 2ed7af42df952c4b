"""Per-group executor access tokens: ``xxl_job_group.access_token``.

Groups that exist before this revision get no token: they keep working with the global
token (``JOBRING_ACCESS_TOKEN``) until an admin gives them one (rotate).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    if "access_token" not in {c["name"] for c in inspector.get_columns("xxl_job_group")}:
        op.add_column("xxl_job_group", sa.Column("access_token", sa.String(128), nullable=True))


def downgrade() -> None:
    raise NotImplementedError("jobring migrations are forward-only")
