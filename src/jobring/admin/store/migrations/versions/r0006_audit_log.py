"""The audit log table (``jobring_audit``) and its indexes, each created only where missing.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

TABLE = "jobring_audit"
_LONG_TEXT = sa.Text().with_variant(mysql.MEDIUMTEXT(), "mysql", "mariadb")
_INDEXES: list[tuple[str, list[str]]] = [
    ("ix_audit_at", ["at"]),
    ("ix_audit_action", ["action"]),
    ("ix_audit_actor", ["actor"]),
    ("ix_audit_target", ["target_type", "target_id"]),
    ("ix_audit_group", ["group_id"]),
]


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    if TABLE not in set(inspector.get_table_names()):
        op.create_table(
            TABLE,
            sa.Column(
                "id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True
            ),
            sa.Column("at", sa.BigInteger, nullable=False),
            sa.Column("actor_id", sa.Integer, nullable=True),
            sa.Column("actor", sa.String(64), nullable=False),
            sa.Column("actor_kind", sa.String(16), nullable=False),
            sa.Column("token_id", sa.Integer, nullable=True),
            sa.Column("source", sa.String(64), nullable=True),
            sa.Column("action", sa.String(32), nullable=False),
            sa.Column("target_type", sa.String(16), nullable=True),
            sa.Column("target_id", sa.String(64), nullable=True),
            sa.Column("group_id", sa.Integer, nullable=True),
            sa.Column("outcome", sa.String(16), nullable=False),
            sa.Column("details", _LONG_TEXT, nullable=True),
            # Never reuse an id on SQLite (a deleted newest record would otherwise be refilled).
            sqlite_autoincrement=True,
            mysql_engine="InnoDB",
            mysql_charset="utf8mb4",
        )
        inspector = sa.inspect(op.get_bind())
    existing = {ix["name"] for ix in inspector.get_indexes(TABLE)}
    for name, columns in _INDEXES:
        if name not in existing:
            op.create_index(name, TABLE, columns)


def downgrade() -> None:
    raise NotImplementedError("jobring migrations are forward-only")
