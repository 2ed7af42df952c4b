"""Workflows: their definitions (one row per saved version), their runs and the runs of their
nodes; ``xxl_job_log.workflow_node_run_id`` ties a job run to the node attempt it carries out
(unique: an attempt is recorded in the run log at most once, whichever admin fires it).

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

_LONG_TEXT = sa.Text().with_variant(mysql.MEDIUMTEXT(), "mysql", "mariadb")


def _id() -> sa.Column[int]:
    return sa.Column(
        "id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True
    )


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    tables = set(inspector.get_table_names())
    if "jobring_workflow" not in tables:
        op.create_table(
            "jobring_workflow",
            sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
            sa.Column("name", sa.String(100), nullable=False),
            sa.Column("job_group", sa.Integer, nullable=False),
            sa.Column("description", sa.String(255), nullable=False, server_default=""),
            sa.Column("version", sa.Integer, nullable=False),
            sa.Column("created_by", sa.String(64), nullable=True),
            sa.Column("created_at", sa.BigInteger, nullable=False),
            sa.Column("updated_at", sa.BigInteger, nullable=False),
            sa.Index("ix_workflow_group", "job_group"),
            sqlite_autoincrement=True,
        )
    if "jobring_workflow_version" not in tables:
        op.create_table(
            "jobring_workflow_version",
            sa.Column("workflow_id", sa.Integer, primary_key=True, autoincrement=False),
            sa.Column("version", sa.Integer, primary_key=True, autoincrement=False),
            sa.Column("definition", _LONG_TEXT, nullable=False),
            sa.Column("created_by", sa.String(64), nullable=True),
            sa.Column("created_at", sa.BigInteger, nullable=False),
        )
    if "jobring_workflow_run" not in tables:
        op.create_table(
            "jobring_workflow_run",
            _id(),
            sa.Column("workflow_id", sa.Integer, nullable=False),
            sa.Column("version", sa.Integer, nullable=False),
            sa.Column("job_group", sa.Integer, nullable=False),
            sa.Column("status", sa.String(16), nullable=False),
            sa.Column("rev", sa.Integer, nullable=False, server_default="0"),
            sa.Column("state", _LONG_TEXT, nullable=False),
            sa.Column("triggered_by", sa.String(64), nullable=True),
            sa.Column("started_at", sa.BigInteger, nullable=False),
            sa.Column("ended_at", sa.BigInteger, nullable=True),
            sa.Index("ix_workflow_run_workflow", "workflow_id", "id"),
            sa.Index("ix_workflow_run_status", "status"),
            sqlite_autoincrement=True,
        )
    if "jobring_workflow_node_run" not in tables:
        op.create_table(
            "jobring_workflow_node_run",
            _id(),
            sa.Column("workflow_run_id", sa.BigInteger, nullable=False),
            sa.Column("node_key", sa.String(64), nullable=False),
            sa.Column("item", sa.Integer, nullable=False, server_default="-1"),
            sa.Column("attempt", sa.Integer, nullable=False),
            sa.Column("job_id", sa.Integer, nullable=False),
            sa.Column("params", sa.String(512), nullable=True),
            sa.Column("timeout_s", sa.Integer, nullable=True),
            sa.Column("state", sa.String(16), nullable=False),
            sa.Column("log_id", sa.BigInteger, nullable=True),
            sa.Column("claimed_by", sa.String(64), nullable=True),
            sa.Column("claimed_at", sa.BigInteger, nullable=True),
            sa.Column("created_at", sa.BigInteger, nullable=False),
            sa.Column("ended_at", sa.BigInteger, nullable=True),
            sa.UniqueConstraint(
                "workflow_run_id", "node_key", "item", "attempt", name="ux_workflow_node_attempt"
            ),
            sa.Index("ix_workflow_node_run_log", "log_id"),
            sa.Index("ix_workflow_node_run_state", "state"),
            sqlite_autoincrement=True,
        )
    existing = {c["name"] for c in inspector.get_columns("xxl_job_log")}
    if "workflow_node_run_id" not in existing:
        op.add_column("xxl_job_log", sa.Column("workflow_node_run_id", sa.BigInteger, nullable=True))
    indexes = {ix["name"] for ix in sa.inspect(op.get_bind()).get_indexes("xxl_job_log")}
    uniques = {uq["name"] for uq in sa.inspect(op.get_bind()).get_unique_constraints("xxl_job_log")}
    if "ux_job_log_workflow_node" not in indexes | uniques:
        op.create_index("ux_job_log_workflow_node", "xxl_job_log", ["workflow_node_run_id"], unique=True)


def downgrade() -> None:
    raise NotImplementedError("jobring migrations are forward-only")
