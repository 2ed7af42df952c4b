"""What a workflow node's handler added to the workflow context (issue 21).

* ``jobring_workflow_node_run.context_added``: the ``workflowContext`` of the attempt's callback
  (JSON text, at most 64 KiB), written with the result, in the same transaction and under the
  same group check; merged into the run's context when the attempt is applied as a success.

Revision ID: 0031
Revises: 0030
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0031"
down_revision = "0030"
branch_labels = None
depends_on = None

_LONG_TEXT = sa.Text().with_variant(mysql.MEDIUMTEXT(), "mysql", "mariadb")


def upgrade() -> None:
    columns = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("jobring_workflow_node_run")}
    if "context_added" not in columns:
        op.add_column("jobring_workflow_node_run", sa.Column("context_added", _LONG_TEXT, nullable=True))


def downgrade() -> None:
    raise NotImplementedError("jobring migrations are forward-only")
