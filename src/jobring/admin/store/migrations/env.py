"""Alembic environment: runs on a connection handed over by ``jobring.admin.store.migrate``."""

from __future__ import annotations

from alembic import context

from jobring.admin.store.migrate import VERSION_TABLE
from jobring.admin.store.tables import metadata

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run migrations through jobring.admin.store.upgrade_database or `jobring db upgrade`")

context.configure(connection=connection, target_metadata=metadata, version_table=VERSION_TABLE)
with context.begin_transaction():
    context.run_migrations()
