"""Workflow schedules declared in code (issue 21).

* ``jobring_workflow_schedule.managed_by``: ``code`` for a schedule an executor declares with
  its workflow (it follows the code: read-only in the console and the API, replaced when the
  declaration changes, removed when the declaration drops it), null for one set in the console.

Revision ID: 0032
Revises: 0031
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0032"
down_revision = "0031"
branch_labels = None
depends_on = None


def upgrade() -> None:
    columns = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("jobring_workflow_schedule")}
    if "managed_by" not in columns:
        op.add_column("jobring_workflow_schedule", sa.Column("managed_by", sa.String(16), nullable=True))


def downgrade() -> None:
    raise NotImplementedError("jobring migrations are forward-only")
