"""Keeping SQLite's AUTOINCREMENT high-water mark across a table copy.

Alembic's batch mode rebuilds a SQLite table to alter a column; the copy's ``sqlite_sequence``
row ends at the highest id still present, so ids deleted above it would be handed out again
(and a new group would inherit a deleted one's permissions). Migrations that copy a table
wrap the copy in :func:`sqlite_sequence_kept`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa


@contextmanager
def sqlite_sequence_kept(bind: sa.Connection, table: str) -> Iterator[None]:
    """Restore ``table``'s AUTOINCREMENT counter after the block (no-op off SQLite)."""
    if bind.dialect.name != "sqlite" or not _has_sequence_table(bind):
        yield
        return
    params = {"name": table}
    before = bind.execute(sa.text("SELECT seq FROM sqlite_sequence WHERE name = :name"), params).scalar()
    yield
    if before is None:
        return
    params["seq"] = before
    updated = bind.execute(
        sa.text("UPDATE sqlite_sequence SET seq = MAX(seq, :seq) WHERE name = :name"), params
    )
    if updated.rowcount == 0:
        bind.execute(sa.text("INSERT INTO sqlite_sequence (name, seq) VALUES (:name, :seq)"), params)


def _has_sequence_table(bind: sa.Connection) -> bool:
    found = bind.execute(
        sa.text("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'sqlite_sequence'")
    ).first()
    return found is not None
