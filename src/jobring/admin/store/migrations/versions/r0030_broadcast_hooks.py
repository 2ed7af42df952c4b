"""Broadcast with pre/post hooks (issue 23): two job fields, ``broadcast_pre`` and
``broadcast_post`` (handler names; a job of route SHARDING_BROADCAST with either runs as one
parent run: the pre hook once, one part per executor, the post hook once), and the pre hook's
name on the parent run (``jobring_distributed_run.pre_task``); and the admin node that claimed a
running sub-task (``jobring_subtask.dispatched_by``): the running sub-tasks of a node that
died (perhaps between a claim and its send) are dispatched again by another node; and a
sub-task's last log lines (``jobring_subtask.log``), shown on the run page.

Revision ID: 0030
Revises: 0029
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0030"
down_revision = "0029"
branch_labels = None
depends_on = None


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    jobs = {c["name"] for c in inspector.get_columns("xxl_job_info")}
    if "broadcast_pre" not in jobs:
        op.add_column("xxl_job_info", sa.Column("broadcast_pre", sa.String(64), nullable=True))
    if "broadcast_post" not in jobs:
        op.add_column("xxl_job_info", sa.Column("broadcast_post", sa.String(64), nullable=True))
    runs = {c["name"] for c in inspector.get_columns("jobring_distributed_run")}
    if "pre_task" not in runs:
        op.add_column("jobring_distributed_run", sa.Column("pre_task", sa.String(64), nullable=True))
    tasks = {c["name"] for c in inspector.get_columns("jobring_subtask")}
    if "dispatched_by" not in tasks:
        op.add_column("jobring_subtask", sa.Column("dispatched_by", sa.String(64), nullable=True))
    if "log" not in tasks:
        op.add_column("jobring_subtask", sa.Column("log", sa.Text, nullable=True))


def downgrade() -> None:
    raise NotImplementedError("jobring migrations are forward-only")
