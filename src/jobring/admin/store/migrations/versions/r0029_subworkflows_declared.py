"""Sub-workflow runs and workflows declared in code (issue 21).

* ``jobring_workflow_run.parent_run_id`` / ``parent_node_run_id``: a sub-workflow node's run
  names the parent run and the node attempt that started it (unique: an attempt starts at
  most one child run, whichever admin fires it); ``params``: the run's starting context (a
  child hands back what it changed against it).
* ``jobring_workflow_node_run.workflow_id``: the workflow a sub-workflow attempt runs (its
  ``job_id`` is 0).
* ``jobring_workflow.managed_by``: ``code`` for a workflow an executor declares (read-only
  in the console and the API), null otherwise.

Revision ID: 0029
Revises: 0028
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None

_LONG_TEXT = sa.Text().with_variant(mysql.MEDIUMTEXT(), "mysql", "mariadb")


def _columns(inspector: sa.Inspector, table: str) -> set[str]:
    return {c["name"] for c in inspector.get_columns(table)}


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    runs = _columns(inspector, "jobring_workflow_run")
    if "parent_run_id" not in runs:
        op.add_column("jobring_workflow_run", sa.Column("parent_run_id", sa.BigInteger, nullable=True))
    if "parent_node_run_id" not in runs:
        op.add_column("jobring_workflow_run", sa.Column("parent_node_run_id", sa.BigInteger, nullable=True))
    if "params" not in runs:
        op.add_column("jobring_workflow_run", sa.Column("params", _LONG_TEXT, nullable=True))
    indexes = {ix["name"] for ix in sa.inspect(op.get_bind()).get_indexes("jobring_workflow_run")}
    if "ux_workflow_run_parent_node" not in indexes:
        op.create_index("ux_workflow_run_parent_node", "jobring_workflow_run", ["parent_node_run_id"],
                        unique=True)
    if "workflow_id" not in _columns(inspector, "jobring_workflow_node_run"):
        op.add_column("jobring_workflow_node_run", sa.Column("workflow_id", sa.Integer, nullable=True))
    if "managed_by" not in _columns(inspector, "jobring_workflow"):
        op.add_column("jobring_workflow", sa.Column("managed_by", sa.String(16), nullable=True))


def downgrade() -> None:
    raise NotImplementedError("jobring migrations are forward-only")
