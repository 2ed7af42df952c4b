"""Engine creation per dialect, and the transaction helpers every repository uses."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from jobring.admin.store.sqlite_connection import sqlite_connector
from jobring.admin.store.sqlite_onehop import new_dbapi
from jobring.admin.store.write_gate import WriteGate, gate_for

_ASYNC_DRIVERS = {
    "sqlite": "sqlite+aiosqlite",
    "sqlite+aiosqlite": "sqlite+aiosqlite",
    "postgresql": "postgresql+asyncpg",
    "postgres": "postgresql+asyncpg",
    "postgresql+asyncpg": "postgresql+asyncpg",
    "mysql": "mysql+aiomysql",
    "mysql+aiomysql": "mysql+aiomysql",
    "mariadb": "mariadb+aiomysql",
    "mariadb+aiomysql": "mariadb+aiomysql",
}

# Execution option that makes a SQLite transaction start with BEGIN IMMEDIATE (take the
# write lock up front, so a read-then-write transaction cannot fail on lock upgrade).
SQLITE_IMMEDIATE = "jobring_sqlite_immediate"
# How long a bulk write waits for its turn in this process (as SQLite's busy_timeout below).
SQLITE_WRITE_WAIT_S = 10.0
# Rows a bulk write changes per transaction on SQLite: each holds the one write lock while its
# rows are read, decided on and written; the scheduler's writes wait at most one such.
SQLITE_BULK_ROWS = 250
# Execution option that silences MariaDB's per-row warnings of one INSERT IGNORE.
MARIADB_QUIET = "jobring_mariadb_quiet"
# Key of a PostgreSQL connection's info while it runs a write declared alone (Db.write): the
# statements it has run.
_ALONE = "jobring_alone"
# Connections a PostgreSQL/MySQL/MariaDB engine keeps (the admin's ``database_pool_size``).
DEFAULT_POOL_SIZE = 20


def normalize_url(url: str | URL) -> URL:
    """Map a database URL to its asyncio driver; ValueError for anything unsupported."""
    try:
        parsed = make_url(url) if isinstance(url, str) else url
    except ArgumentError as exc:
        raise ValueError(f"not a database URL: {url!s}: {exc}") from exc
    name = parsed.drivername
    target = _ASYNC_DRIVERS.get(name)
    if target is None:
        supported = "sqlite[+aiosqlite], postgresql[+asyncpg], mysql[+aiomysql], mariadb[+aiomysql]"
        raise ValueError(f"unsupported database URL scheme {name!r}; supported: {supported}")
    parsed = parsed.set(drivername=target)
    if target.startswith(("mysql", "mariadb")) and "charset" not in parsed.query:
        parsed = parsed.update_query_dict({"charset": "utf8mb4"})
    return parsed


def _on_sqlite_connect(dbapi_connection: Any, _record: Any) -> None:
    # Let SQLAlchemy's "begin" event issue BEGIN itself (pysqlite's own handling defers it
    # and cannot do BEGIN IMMEDIATE).
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA busy_timeout=10000")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=OFF")
    finally:
        cursor.close()


def _on_sqlite_begin(conn: Any) -> None:
    immediate = conn.get_execution_options().get(SQLITE_IMMEDIATE, False)
    conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


def _on_mysql_before_execute(
    conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool
) -> tuple[str, Any]:
    if context is not None and context.execution_options.get(MARIADB_QUIET):
        # aiomysql turns every server warning into a Python warning; duplicates skipped by
        # INSERT IGNORE are expected, so keep them out of the warning list.
        statement = "SET STATEMENT max_error_count=0 FOR " + statement
    return statement, parameters


def _on_postgresql_before_execute(
    conn: Any, _cursor: Any, statement: str, _parameters: Any, _context: Any, _executemany: bool
) -> None:
    info = conn.info
    if _ALONE in info:
        info[_ALONE] += 1
        if info[_ALONE] > 1:
            raise RuntimeError(f"a write declared alone ran a second statement: {statement[:80]}")


def create_engine(
    url: str | URL, *, pool_size: int = DEFAULT_POOL_SIZE, max_overflow: int = 0, echo: bool = False
) -> AsyncEngine:
    """Create an async engine for ``url`` with the settings jobring relies on per dialect.

    SQLite: WAL, busy_timeout 10 s, synchronous=NORMAL, transactions begun explicitly (so
    ``BEGIN IMMEDIATE`` works). PostgreSQL/MySQL/MariaDB: a pool of ``pool_size`` connections
    kept open (``max_overflow`` more are closed as they come back), without per-checkout
    pings; MySQL/MariaDB use utf8mb4. Plain ``sqlite://``, ``postgresql://``,
    ``mysql://`` and ``mariadb://`` URLs are mapped to aiosqlite, asyncpg and aiomysql.
    """
    parsed = normalize_url(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        # One thread hand-off per statement (sqlite_onehop.py), not five.
        engine = create_async_engine(parsed, echo=echo, async_creator=sqlite_connector(parsed, timeout_s=10),
                                     module=new_dbapi())
        event.listen(engine.sync_engine, "connect", _on_sqlite_connect)
        event.listen(engine.sync_engine, "begin", _on_sqlite_begin)
        return engine
    engine = create_async_engine(
        parsed,
        echo=echo,
        # No pre-ping per checkout (a round trip on every transaction): a connection found
        # dead fails its one operation, SQLAlchemy then invalidates the pool, and callers
        # (the scheduling loop, the monitors) retry on their next round with a log line.
        pool_pre_ping=False,
        # No overflow by default: an overflow connection is closed when it comes back to a
        # full pool, so every burst of more transactions than the pool holds opened new ones
        # (1,280 in 30 s of a 1,000-node workflow bench), each paying a server process, its
        # login and, on its first use of a statement, the prepare and the driver's type
        # lookups again (7 ms for one array-typed statement on the path of a node start).
        pool_size=pool_size,
        max_overflow=max_overflow,
        pool_recycle=3600,
        pool_timeout=30,
    )
    if backend in ("mysql", "mariadb"):
        event.listen(engine.sync_engine, "before_cursor_execute", _on_mysql_before_execute, retval=True)
    elif backend == "postgresql":
        event.listen(engine.sync_engine, "before_cursor_execute", _on_postgresql_before_execute)
    return engine


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What the connected server can do, learned on first connect."""

    backend: str  # "sqlite", "postgresql", "mariadb", "mysql"
    skip_locked: bool
    insert_returning: bool
    update_returning: bool


def utc_naive(value: datetime) -> datetime:
    """A datetime as stored in reference DATETIME columns: naive UTC, whole seconds."""
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return value.replace(microsecond=0)


class Db:
    """An engine plus the transaction shapes the repositories use."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self._caps: Capabilities | None = None
        # Tests set this to exercise the MySQL (no RETURNING) code paths on MariaDB.
        self.force_no_returning = False
        # SQLite: this process's bulk writes take turns between the others (write_gate.py).
        self._gate: WriteGate | None = None
        # Rows per transaction of a bulk write that can be split (None: all in one).
        self.bulk_rows: int | None = None
        if engine.dialect.name == "sqlite":
            database = engine.url.database
            in_memory = not database or database == ":memory:" or database.startswith("file::memory:")
            self._gate = gate_for(f"memory:{id(engine)}" if in_memory else os.path.realpath(database or ""))
            self.bulk_rows = SQLITE_BULK_ROWS

    @property
    def backend(self) -> str:
        name = self.engine.dialect.name
        return "mariadb" if name == "mysql" and getattr(self.engine.dialect, "is_mariadb", False) else name

    async def capabilities(self) -> Capabilities:
        if self._caps is None:
            async with self.engine.connect():
                pass  # the dialect learns the server version on first connect
            dialect = self.engine.dialect
            version = dialect.server_version_info or ()
            backend = self.backend
            if backend == "postgresql":
                skip_locked = True
            elif backend == "mariadb":
                skip_locked = tuple(version[:2]) >= (10, 6)
            elif backend == "mysql":
                skip_locked = tuple(version[:1]) >= (8,)
            else:
                skip_locked = False
            self._caps = Capabilities(backend, skip_locked, bool(dialect.insert_returning),
                                      bool(dialect.update_returning))
        if self.force_no_returning:
            return Capabilities(self._caps.backend, self._caps.skip_locked, False, False)
        return self._caps

    @asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncConnection]:
        """A connection for reads: in a plain transaction (committed at the end), except on
        PostgreSQL, where each statement runs on its own (autocommit)."""
        if self.engine.dialect.name == "postgresql":
            # At PostgreSQL's READ COMMITTED each statement of a transaction takes its own
            # snapshot anyway: the transaction would only add a BEGIN and a COMMIT, a round
            # trip each (~0.2 ms of a read here).
            async with self._autocommit() as conn:
                yield conn
            return
        async with self.engine.connect() as conn, conn.begin():
            yield conn

    @asynccontextmanager
    async def _autocommit(self) -> AsyncIterator[AsyncConnection]:
        async with self.engine.connect() as conn:
            await conn.execution_options(isolation_level="AUTOCOMMIT")
            yield conn

    @asynccontextmanager
    async def write(
        self, *, read_committed: bool = False, bulk: bool = False, alone: bool = False
    ) -> AsyncIterator[AsyncConnection]:
        """A connection in a write transaction: ``BEGIN IMMEDIATE`` on SQLite. ``bulk`` (for
        floods of writes no instant waits for, such as a large map's sub-tasks): on SQLite
        one at a time, in arrival order, between this process's ordinary writes
        (``write_gate``).

        ``read_committed`` on MySQL/MariaDB: InnoDB then releases the locks of scanned rows
        that do not match (REPEATABLE READ would hold them until commit).

        ``alone``: the body executes exactly one statement (a second one raises), which is
        atomic on its own: on PostgreSQL it then runs without BEGIN and COMMIT, two round
        trips less.
        """
        if alone and self.engine.dialect.name == "postgresql":
            async with self._autocommit() as conn:
                info = conn.info
                info[_ALONE] = 0
                try:
                    yield conn
                finally:
                    del info[_ALONE]
            return
        if self._gate is None:
            async with self._write(read_committed) as conn:
                yield conn
            return
        async with self._gate.turn(bulk=bulk, timeout_s=SQLITE_WRITE_WAIT_S), self._write(False) as conn:
            yield conn

    @asynccontextmanager
    async def _write(self, read_committed: bool) -> AsyncIterator[AsyncConnection]:
        async with self.engine.connect() as conn:
            name = self.engine.dialect.name
            if name == "sqlite":
                await conn.execution_options(**{SQLITE_IMMEDIATE: True})
            elif read_committed and name in ("mysql", "mariadb"):
                await conn.execution_options(isolation_level="READ COMMITTED")
            async with conn.begin():
                yield conn
