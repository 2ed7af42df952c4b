"""Schema migrations run from code: ``upgrade_database`` and ``current_revision``."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from jobring.admin.store.engine import create_engine
from jobring.admin.store.xxl_schema import check_adoptable, mark_xxl_job_history

log = logging.getLogger("jobring.admin.store")
VERSION_TABLE = "jobring_alembic_version"
MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"


@dataclass(frozen=True, slots=True)
class UpgradeResult:
    """Revisions before and after an upgrade (``None``: the database had no jobring revision)."""

    before: str | None
    after: str | None

    @property
    def changed(self) -> bool:
        return self.before != self.after


def _config(connection: Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    """The newest revision shipped with this version of jobring."""
    head = ScriptDirectory.from_config(_config()).get_current_head()
    assert head is not None
    return head


def _current(connection: Connection) -> str | None:
    return MigrationContext.configure(
        connection, opts={"version_table": VERSION_TABLE}
    ).get_current_revision()


def _upgrade(connection: Connection) -> UpgradeResult:
    before = _current(connection)
    # An XXL-JOB schema jobring cannot run on is refused before anything changes.
    finding = check_adoptable(connection) if before is None else None
    command.upgrade(_config(connection), "head")
    if finding is not None and finding.is_xxl_job:
        # However it is adopted (db adopt, db upgrade, an admin's start), XXL-JOB's history is
        # marked so that monitors and retention leave it alone.
        mark_xxl_job_history(connection, finding)
    result = UpgradeResult(before, _current(connection))
    if result.changed:
        log.info("database schema upgraded from %s to %s", result.before or "none", result.after)
    return result


async def _with_engine(url_or_engine: str | AsyncEngine) -> tuple[AsyncEngine, bool]:
    if isinstance(url_or_engine, AsyncEngine):
        return url_or_engine, False
    return create_engine(url_or_engine), True


async def upgrade_database(url_or_engine: str | AsyncEngine) -> UpgradeResult:
    """Bring the database to the newest schema; safe to run again (and on an XXL-JOB 2.1-2.5
    database). ``jobring.admin.store.xxl_schema.AdoptionRefused`` for an XXL-JOB shape it cannot adopt."""
    engine, owned = await _with_engine(url_or_engine)
    try:
        async with engine.connect() as conn:
            result = await conn.run_sync(_upgrade)
            await conn.commit()
        return result
    finally:
        if owned:
            await engine.dispose()


async def current_revision(url_or_engine: str | AsyncEngine) -> str | None:
    """The database's jobring schema revision, ``None`` when it has none yet."""
    engine, owned = await _with_engine(url_or_engine)
    try:
        async with engine.connect() as conn:
            return await conn.run_sync(_current)
    finally:
        if owned:
            await engine.dispose()
