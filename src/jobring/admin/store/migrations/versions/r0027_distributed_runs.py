"""Distributed runs (issue 23): a parent run's join state (``jobring_distributed_run``, one row
per parent run: phase, join attempt, progress counters), its sub-tasks in a table of their own
(``jobring_subtask``: shards, map sub-tasks and the reduce task; unique per run and key), and
two job fields: ``shard_count`` (0: not sharded) and ``failure_tolerance``.

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None

_LONG_TEXT = sa.Text().with_variant(mysql.MEDIUMTEXT(), "mysql", "mariadb")


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    tables = set(inspector.get_table_names())
    if "jobring_distributed_run" not in tables:
        op.create_table(
            "jobring_distributed_run",
            sa.Column("run_id", sa.BigInteger, primary_key=True, autoincrement=False),
            sa.Column("job_id", sa.Integer, nullable=False),
            sa.Column("job_group", sa.Integer, nullable=False),
            sa.Column("kind", sa.String(8), nullable=False),
            sa.Column("phase", sa.String(16), nullable=False),
            sa.Column("attempt", sa.Integer, nullable=False, server_default="1"),
            sa.Column("root_state", sa.String(16), nullable=False),
            sa.Column("root_msg", sa.Text, nullable=True),
            sa.Column("params", sa.String(512), nullable=True),
            sa.Column("reduce_task", sa.String(64), nullable=True),
            sa.Column("tolerance", sa.String(32), nullable=True),
            sa.Column("max_retries", sa.Integer, nullable=False, server_default="0"),
            sa.Column("total", sa.Integer, nullable=False, server_default="0"),
            sa.Column("succeeded", sa.Integer, nullable=False, server_default="0"),
            sa.Column("failed", sa.Integer, nullable=False, server_default="0"),
            sa.Column("running", sa.Integer, nullable=False, server_default="0"),
            sa.Column("result", _LONG_TEXT, nullable=True),
            sa.Column("result_recorded", sa.SmallInteger, nullable=False, server_default="0"),
            sa.Column("created_at", sa.BigInteger, nullable=False),
            sa.Column("ended_at", sa.BigInteger, nullable=True),
            sa.Index("ix_distributed_run_phase", "phase"),
        )
    if "jobring_subtask" not in tables:
        op.create_table(
            "jobring_subtask",
            sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True,
                      autoincrement=True),
            sa.Column("run_id", sa.BigInteger, nullable=False),
            sa.Column("job_group", sa.Integer, nullable=False),
            sa.Column("task_key", sa.String(191), nullable=False),
            sa.Column("task_name", sa.String(64), nullable=False),
            sa.Column("kind", sa.String(8), nullable=False),
            sa.Column("shard_index", sa.Integer, nullable=False, server_default="0"),
            sa.Column("shard_total", sa.Integer, nullable=False, server_default="0"),
            sa.Column("item", _LONG_TEXT, nullable=True),
            sa.Column("status", sa.String(16), nullable=False),
            sa.Column("attempt", sa.Integer, nullable=False, server_default="0"),
            sa.Column("failures", sa.Integer, nullable=False, server_default="0"),
            sa.Column("losses", sa.Integer, nullable=False, server_default="0"),
            sa.Column("executor_address", sa.String(255), nullable=True),
            sa.Column("result", _LONG_TEXT, nullable=True),
            sa.Column("message", sa.Text, nullable=True),
            sa.Column("created_at", sa.BigInteger, nullable=False),
            sa.Column("dispatched_at", sa.BigInteger, nullable=True),
            sa.Column("ended_at", sa.BigInteger, nullable=True),
            sa.UniqueConstraint("run_id", "task_key", name="ux_subtask_run_key"),
            sa.Index("ix_subtask_run_status", "run_id", "status", "id"),
            sa.Index("ix_subtask_status_executor", "status", "executor_address"),
            sqlite_autoincrement=True,
        )
    existing = {c["name"] for c in inspector.get_columns("xxl_job_info")}
    if "shard_count" not in existing:
        op.add_column("xxl_job_info",
                      sa.Column("shard_count", sa.Integer, nullable=False, server_default="0"))
    if "failure_tolerance" not in existing:
        op.add_column("xxl_job_info", sa.Column("failure_tolerance", sa.String(32), nullable=True))


def downgrade() -> None:
    raise NotImplementedError("jobring migrations are forward-only")
