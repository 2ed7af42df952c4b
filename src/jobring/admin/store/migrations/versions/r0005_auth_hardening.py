"""Never-reused ids on SQLite, server-side sessions, API token expiry.

- SQLite hands out ``max(id) + 1`` for INTEGER PRIMARY KEY tables, so after a delete a
  new group, job, run or user got the old one's id (and with it stale permissions and
  executor logs). The tables are rebuilt with AUTOINCREMENT, which never reuses an id.
  PostgreSQL sequences and MySQL/MariaDB AUTO_INCREMENT never reuse ids already: no-op there.
  Ids deleted before this migration above the surviving maximum may still be given once.
- ``jobring_session``: server-side sessions (only a hash of the session id is stored).
- ``jobring_api_token.expires_at``: optional expiry of personal API tokens.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

AUTOINCREMENT_TABLES = ("xxl_job_group", "xxl_job_info", "xxl_job_log", "xxl_job_user", "jobring_api_token")


def _sqlite_has_autoincrement(bind: sa.Connection, table: str) -> bool:
    sql = bind.execute(
        sa.text("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = :name"), {"name": table}
    ).scalar()
    return sql is not None and "AUTOINCREMENT" in str(sql).upper()


def _rebuild_with_autoincrement(bind: sa.Connection, tables: set[str]) -> None:
    for table in AUTOINCREMENT_TABLES:
        if table not in tables or _sqlite_has_autoincrement(bind, table):
            continue
        # Batch mode copies the rows (keeping their ids) into a new table created with
        # AUTOINCREMENT, then re-creates the reflected indexes and unique constraints.
        with op.batch_alter_table(
            table, recreate="always", table_kwargs={"sqlite_autoincrement": True}
        ) as batch:
            batch.alter_column("id", existing_type=sa.Integer, autoincrement=True)


def upgrade() -> None:
    bind = op.get_bind()
    inspector = sa.inspect(bind)
    tables = set(inspector.get_table_names())
    if "jobring_api_token" in tables and "expires_at" not in {
        c["name"] for c in inspector.get_columns("jobring_api_token")
    }:
        op.add_column("jobring_api_token", sa.Column("expires_at", sa.DateTime, nullable=True))
    if bind.dialect.name == "sqlite":
        _rebuild_with_autoincrement(bind, tables)
    if "jobring_session" not in tables:
        op.create_table(
            "jobring_session",
            sa.Column("id_hash", sa.String(64), primary_key=True),
            sa.Column("user_id", sa.Integer, nullable=False),
            sa.Column("created", sa.BigInteger, nullable=False),
            sa.Column("expires", sa.BigInteger, nullable=False),
            sa.Column("last_seen", sa.BigInteger, nullable=False),
            sa.Column("revoked", sa.Boolean, nullable=False, server_default=sa.false()),
            mysql_engine="InnoDB",
            mysql_charset="utf8mb4",
        )
        op.create_index("ix_session_user", "jobring_session", ["user_id"])
        op.create_index("ix_session_expires", "jobring_session", ["expires"])


def downgrade() -> None:
    raise NotImplementedError("jobring migrations are forward-only")
