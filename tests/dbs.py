"""Throwaway databases for tests, one per caller, on every supported backend.

``create_test_database(backend)`` returns the URL of a new, empty database
(``jobring_t_<random>`` on PostgreSQL/MariaDB, a file in a temporary directory for SQLite);
``drop_test_database(url)`` removes it. Both are plain functions so end-to-end tests that
start processes can use them; the fixtures in ``tests/conftest.py`` build on them.

Servers: PostgreSQL at ``JOBRING_TEST_PG_URL`` (default postgres@127.0.0.1:5432), MariaDB
at ``JOBRING_TEST_MARIADB_URL`` (default root@127.0.0.1:3306). An unreachable server raises
``BackendUnavailable``; the fixtures skip on it, or fail when ``CI=true``.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import tempfile
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import aiomysql
import asyncpg
from sqlalchemy.engine import URL, make_url

BACKENDS = ("sqlite", "postgresql", "mariadb")
SERVER_URLS = {
    "postgresql": os.environ.get("JOBRING_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres"),
    "mariadb": os.environ.get("JOBRING_TEST_MARIADB_URL", "mysql://root@127.0.0.1:3306/mysql"),
}
DB_PREFIX = "jobring_t_"
CONNECT_TIMEOUT = 5.0

T = TypeVar("T")


class BackendUnavailable(Exception):
    """The backend's server cannot be reached; the message says which and why."""


def must_fail_when_unavailable() -> bool:
    """On CI a missing PostgreSQL/MariaDB is an error, not a reason to skip."""
    return os.environ.get("CI", "").lower() == "true"


def run_in_fresh_loop(factory: Callable[[], Awaitable[T]]) -> T:
    """Run ``factory()`` to completion on a new event loop in a thread (usable inside a loop)."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(_as_coroutine(factory))
        except BaseException as exc:  # handed to the caller below
            box["error"] = exc

    thread = threading.Thread(target=target, name="test-db-admin")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


async def _as_coroutine(factory: Callable[[], Awaitable[T]]) -> T:
    return await factory()


async def _pg_connect(database: str | None = None) -> Any:
    server = make_url(SERVER_URLS["postgresql"])
    try:
        return await asyncpg.connect(
            host=server.host or "127.0.0.1",
            port=server.port or 5432,
            user=server.username or "postgres",
            password=server.password,
            database=database or server.database or "postgres",
            timeout=CONNECT_TIMEOUT,
        )
    except (TimeoutError, OSError, asyncpg.PostgresError) as exc:
        raise BackendUnavailable(f"PostgreSQL at {server.host}:{server.port} is unreachable: {exc}") from exc


async def _maria_connect() -> Any:
    server = make_url(SERVER_URLS["mariadb"])
    try:
        return await aiomysql.connect(
            host=server.host or "127.0.0.1",
            port=server.port or 3306,
            user=server.username or "root",
            password=server.password or "",
            connect_timeout=CONNECT_TIMEOUT,
            autocommit=True,
        )
    except (TimeoutError, OSError, aiomysql.Error) as exc:
        raise BackendUnavailable(f"MariaDB at {server.host}:{server.port} is unreachable: {exc}") from exc


def _server_url(backend: str, database: str) -> URL:
    server = make_url(SERVER_URLS[backend])
    return server.set(database=database)


async def acreate_test_database(backend: str, directory: str | os.PathLike[str] | None = None) -> str:
    """Create an empty database on ``backend``; returns its URL (async form)."""
    if backend == "sqlite":
        folder = Path(directory) if directory is not None else Path(tempfile.mkdtemp(prefix=DB_PREFIX))
        return f"sqlite+aiosqlite:///{folder / (DB_PREFIX + secrets.token_hex(4) + '.db')}"
    name = DB_PREFIX + secrets.token_hex(6)
    if backend == "postgresql":
        conn = await _pg_connect()
        try:
            await conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            await conn.close()
        return _server_url(backend, name).set(drivername="postgresql+asyncpg").render_as_string(False)
    if backend == "mariadb":
        conn = await _maria_connect()
        try:
            async with conn.cursor() as cur:
                await cur.execute(
                    f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"
                )
        finally:
            conn.close()
        return _server_url(backend, name).set(drivername="mysql+aiomysql").render_as_string(False)
    raise ValueError(f"unknown backend {backend!r}; expected one of {BACKENDS}")


async def adrop_test_database(url: str) -> None:
    """Drop a database made by ``acreate_test_database`` (async form); missing is fine."""
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    name = parsed.database or ""
    if backend == "sqlite":
        _remove_sqlite_files(Path(name))
        return
    if not name.startswith(DB_PREFIX):
        raise ValueError(f"refusing to drop {name!r}: not a test database")
    if backend == "postgresql":
        conn = await _pg_connect()
        try:
            await conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = $1 AND pid <> pg_backend_pid()",
                name,
            )
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        finally:
            await conn.close()
        return
    conn = await _maria_connect()
    try:
        async with conn.cursor() as cur:
            await cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
    finally:
        conn.close()


def _remove_sqlite_files(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    if path.parent.name.startswith(DB_PREFIX):
        shutil.rmtree(path.parent, ignore_errors=True)


def create_test_database(backend: str, directory: str | os.PathLike[str] | None = None) -> str:
    """Create an empty database on ``backend`` ("sqlite", "postgresql", "mariadb"); returns its URL.

    Raises BackendUnavailable when the server cannot be reached.
    """
    return run_in_fresh_loop(lambda: acreate_test_database(backend, directory))


def drop_test_database(url: str) -> None:
    """Drop a database made by ``create_test_database``."""
    run_in_fresh_loop(lambda: adrop_test_database(url))


def backend_of(url: str) -> str:
    """ "sqlite", "postgresql" or "mariadb" for a test database URL."""
    name = make_url(url).get_backend_name()
    return "mariadb" if name in ("mysql", "mariadb") else name
