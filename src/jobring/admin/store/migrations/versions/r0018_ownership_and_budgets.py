"""Who may manage a job and how far child jobs may fan out, and where a token came from.

- ``xxl_job_info.managed_by`` ("console" or "code"): an executor's declarations manage only
  the jobs they created or that an admin handed to the code; ``declared_retired_at`` (epoch
  ms) is when the code stopped declaring a job (deleted after a grace period).
- ``xxl_job_log.root_run_id``/``child_depth``: a child run's root trigger and its depth;
  ``child_fires``: on a root run, how many child fires its tree has used of its budget.
- ``jobring_api_token.parent_token_id``: the token a token was created with (revoking a
  token revokes the tokens made with it).

Revision ID: 0018
Revises: 0016
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0016"
branch_labels = None
depends_on = None


def _add_missing(table: str, *columns: sa.Column[object]) -> None:
    existing = {c["name"] for c in sa.inspect(op.get_bind()).get_columns(table)}
    for column in columns:
        if column.name not in existing:
            op.add_column(table, column)


def upgrade() -> None:
    _add_missing(
        "xxl_job_info",
        sa.Column("managed_by", sa.String(16), nullable=False, server_default="console"),
        sa.Column("declared_retired_at", sa.BigInteger, nullable=True),
    )
    # The jobs the code declares now were made (or adopted) by it.
    op.execute(sa.text("UPDATE xxl_job_info SET managed_by = 'code' WHERE declared_by_executor = 1"))
    indexes = {ix["name"] for ix in sa.inspect(op.get_bind()).get_indexes("xxl_job_info")}
    if "ix_job_info_retired" not in indexes:
        op.create_index("ix_job_info_retired", "xxl_job_info", ["declared_retired_at"])
    _add_missing(
        "xxl_job_log",
        sa.Column("root_run_id", sa.BigInteger, nullable=True),
        sa.Column("child_depth", sa.Integer, nullable=False, server_default="0"),
        sa.Column("child_fires", sa.Integer, nullable=False, server_default="0"),
    )
    _add_missing("jobring_api_token", sa.Column("parent_token_id", sa.Integer, nullable=True))


def downgrade() -> None:
    raise NotImplementedError("jobring migrations are forward-only")
