"""Engine creation, URL mapping, transient-error classification and the `jobring db` CLI."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import event, text
from sqlalchemy import exc as sa_exc

from jobring.admin.store import (
    Conflict,
    NotFound,
    ReferencedError,
    Store,
    StoreError,
    create_engine,
    head_revision,
    is_transient,
    normalize_url,
)
from jobring.cli import main
from tests.dbs import backend_of


@pytest.mark.parametrize(
    ("url", "driver"),
    [
        ("sqlite:///x.db", "sqlite+aiosqlite"),
        ("sqlite+aiosqlite:///x.db", "sqlite+aiosqlite"),
        ("postgresql://u@h/db", "postgresql+asyncpg"),
        ("postgres://u@h/db", "postgresql+asyncpg"),
        ("postgresql+asyncpg://u@h/db", "postgresql+asyncpg"),
        ("mysql://u@h/db", "mysql+aiomysql"),
        ("mariadb://u@h/db", "mariadb+aiomysql"),
    ],
)
def test_urls_map_to_async_drivers(url: str, driver: str) -> None:
    parsed = normalize_url(url)
    assert parsed.drivername == driver
    if driver.startswith(("mysql", "mariadb")):
        assert parsed.query["charset"] == "utf8mb4"


@pytest.mark.parametrize("url", ["oracle://u@h/db", "postgresql+psycopg2://u@h/db", "mssql://x", "not a url"])
def test_unsupported_urls_are_refused(url: str) -> None:
    with pytest.raises(ValueError, match="unsupported database URL|not a database URL"):
        create_engine(url)


async def test_sqlite_connection_settings(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'p.db'}")
    try:
        async with engine.connect() as conn:
            mode = (await conn.execute(text("PRAGMA journal_mode"))).scalar()
            timeout = (await conn.execute(text("PRAGMA busy_timeout"))).scalar()
            sync = (await conn.execute(text("PRAGMA synchronous"))).scalar()
        assert (mode, timeout, sync) == ("wal", 10_000, 1)
    finally:
        await engine.dispose()


def _dbapi_error(cls: type[sa_exc.DBAPIError], orig: Exception) -> sa_exc.DBAPIError:
    return cls("SELECT 1", {}, orig)


class _PgError(Exception):
    def __init__(self, sqlstate: str) -> None:
        super().__init__(f"pg error {sqlstate}")
        self.sqlstate = sqlstate


def test_is_transient_classification() -> None:
    assert is_transient(_dbapi_error(sa_exc.OperationalError, sqlite3.OperationalError("database is locked")))
    assert is_transient(_dbapi_error(sa_exc.OperationalError, _PgError("40P01")))  # deadlock
    assert is_transient(_dbapi_error(sa_exc.DBAPIError, _PgError("40001")))  # serialization
    assert is_transient(_dbapi_error(sa_exc.OperationalError, Exception(1213, "Deadlock found")))
    assert is_transient(_dbapi_error(sa_exc.OperationalError, Exception(2013, "Lost connection")))
    assert is_transient(sa_exc.TimeoutError("QueuePool limit reached"))
    assert is_transient(ConnectionRefusedError())
    assert not is_transient(_dbapi_error(sa_exc.IntegrityError, Exception(1062, "Duplicate entry")))
    assert not is_transient(_dbapi_error(sa_exc.ProgrammingError, _PgError("42601")))
    assert not is_transient(Conflict("taken"))
    assert not is_transient(ValueError("bad"))
    assert issubclass(NotFound, StoreError) and issubclass(ReferencedError, StoreError)


async def test_unreachable_server_error_is_transient() -> None:
    engine = create_engine("postgresql://postgres@127.0.0.1:1/none")
    try:
        with pytest.raises(Exception) as info:
            async with engine.connect():
                pass
        assert is_transient(info.value), repr(info.value)
    finally:
        await engine.dispose()


def test_cli_db_upgrade_and_current(fresh_db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    if backend_of(fresh_db_url) == "sqlite":
        # Reading a SQLite file that is not there would create it: refused instead.
        assert main(["db", "current", "--database-url", fresh_db_url]) == 2
        assert "no database at" in capsys.readouterr().err
    else:
        assert main(["db", "current", "--database-url", fresh_db_url]) == 0
        assert "revision none" in capsys.readouterr().out
    assert main(["db", "upgrade", "--database-url", fresh_db_url]) == 0
    assert f"upgraded schema from none to {head_revision()}" in capsys.readouterr().out
    assert main(["db", "upgrade", "--database-url", fresh_db_url]) == 0
    assert "nothing to do" in capsys.readouterr().out
    assert main(["db", "current", "--database-url", fresh_db_url]) == 0
    assert f"revision {head_revision()} (up to date)" in capsys.readouterr().out


def test_cli_db_url_from_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'env.db'}"
    monkeypatch.setenv("JOBRING_DATABASE_URL", url)
    monkeypatch.delenv("JOBRING_CONFIG", raising=False)
    assert main(["db", "upgrade"]) == 0
    assert str(tmp_path / "env.db") in capsys.readouterr().out


def test_cli_db_current_never_creates_the_default_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("JOBRING_DATABASE_URL", raising=False)
    monkeypatch.delenv("JOBRING_CONFIG", raising=False)
    assert main(["db", "upgrade", "--database-url", "sqlite:///elsewhere.db"]) == 0
    capsys.readouterr()
    assert main(["db", "current"]) == 2
    err = capsys.readouterr().err
    assert "no database at ./jobring.db" in err and "--database-url" in err
    assert not (tmp_path / "jobring.db").exists()
    assert main(["db", "current", "--database-url", "sqlite:///elsewhere.db"]) == 0
    assert f"revision {head_revision()} (up to date)" in capsys.readouterr().out
    (tmp_path / "jobring.toml").write_text('database_url = "sqlite:///elsewhere.db"\n')
    assert main(["db", "current", "--config", "jobring.toml"]) == 0


def test_cli_db_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["db", "upgrade", "--database-url", "oracle://x/y"]) == 2
    assert "unsupported database URL scheme 'oracle'" in capsys.readouterr().err
    assert main(["db", "upgrade", "--database-url", "postgresql://postgres@127.0.0.1:1/none"]) == 1
    assert "database upgrade failed" in capsys.readouterr().err


async def test_a_statement_cancelled_twice_still_lets_its_connection_close(tmp_path: Path) -> None:
    # A shutdown step left behind while its statement waits on SQLite's write lock, then
    # cancelled again by the event loop's close: SQLAlchemy stops the connection's worker
    # thread (forced close) and then waits for its graceful close, which asked aiosqlite to
    # stop a second time. Unanswered, that close hung the event loop's shutdown for good.
    path = tmp_path / "locked.db"
    engine = create_engine(f"sqlite:///{path}")
    async with engine.begin() as conn:
        await conn.execute(text("CREATE TABLE t (x INTEGER)"))
    blocker = sqlite3.connect(path, isolation_level=None, timeout=0)
    blocker.execute("BEGIN IMMEDIATE")

    async def write() -> None:
        async with engine.begin() as conn:
            await conn.execute(text("INSERT INTO t VALUES (1)"))

    others = asyncio.all_tasks()
    step = asyncio.create_task(write())
    done, _ = await asyncio.wait({step}, timeout=0.2)
    assert not done  # the blocker holds the write lock
    step.cancel()

    def graceful_close_pending() -> bool:
        return any(getattr(t.get_coro(), "__qualname__", "").endswith("_terminate_graceful_close")
                   for t in asyncio.all_tasks())

    async with asyncio.timeout(20):
        while not graceful_close_pending():  # noqa: ASYNC110 - SQLAlchemy's own task, no event
            await asyncio.sleep(0.01)
    step.cancel()  # what the event loop's close does to a task still pending
    await engine.dispose()
    blocker.execute("ROLLBACK")
    blocker.close()
    async with asyncio.timeout(20):
        while left := asyncio.all_tasks() - others - {asyncio.current_task()}:
            await asyncio.wait(left, timeout=1)
    assert step.cancelled()


PID = text("SELECT pg_backend_pid()")


async def test_a_read_on_postgresql_runs_its_statements_without_a_transaction(store: Store) -> None:
    xid = text("SELECT txid_current()")  # the transaction's id (assigned by the call)
    async with store.db.read() as conn:
        if store.db.backend != "postgresql":
            return  # SQLite, MariaDB: a plain transaction (MariaDB's REPEATABLE READ snapshot)
        first, second = (await conn.execute(xid)).scalar_one(), (await conn.execute(xid)).scalar_one()
        pid = (await conn.execute(PID)).scalar_one()
    assert first != second
    # Back in the pool, the same connection's writes are transactions.
    async with store.db.write() as conn:
        assert (await conn.execute(PID)).scalar_one() == pid
        assert (await conn.execute(xid)).scalar_one() == (await conn.execute(xid)).scalar_one()


async def test_a_write_declared_alone_runs_one_statement(store: Store) -> None:
    async with store.db.write(alone=True) as conn:
        await conn.execute(text("UPDATE xxl_job_lock SET lock_name = lock_name"))
    if store.db.backend != "postgresql":
        return  # a plain write transaction there
    # On PostgreSQL it has no transaction around it: a second statement would not be atomic
    # with the first, so it is refused, and the first stands.
    with pytest.raises(RuntimeError, match="second statement"):
        async with store.db.write(alone=True) as conn:
            await conn.execute(text("INSERT INTO xxl_job_lock (lock_name) VALUES ('alone-1')"))
            await conn.execute(text("INSERT INTO xxl_job_lock (lock_name) VALUES ('alone-2')"))
    async with store.db.read() as conn:
        names = set((await conn.execute(text("SELECT lock_name FROM xxl_job_lock"))).scalars())
        pid = (await conn.execute(PID)).scalar_one()
    assert "alone-1" in names and "alone-2" not in names
    # The connection's next writes are transactions again, with as many statements as they need.
    xid = text("SELECT txid_current()")
    async with store.db.write() as conn:
        assert (await conn.execute(PID)).scalar_one() == pid
        await conn.execute(text("DELETE FROM xxl_job_lock WHERE lock_name = 'alone-1'"))
        assert (await conn.execute(xid)).scalar_one() == (await conn.execute(xid)).scalar_one()


async def test_a_burst_larger_than_the_pool_waits_for_its_connections(db_url: str) -> None:
    # Overflow connections were closed as they came back, so each burst opened new ones (each
    # a server process, a login, its statements prepared again): the pool keeps its own.
    if backend_of(db_url) == "sqlite":
        pytest.skip("SQLite connections are files opened in process")
    engine = create_engine(db_url, pool_size=3)
    opened = 0

    def count(*_: object) -> None:
        nonlocal opened
        opened += 1

    event.listen(engine.sync_engine, "connect", count)
    holding = 0
    most = 0
    three_hold = asyncio.Event()

    async def transaction(release: asyncio.Event) -> None:
        nonlocal holding, most
        async with engine.connect() as conn:
            await conn.execute(text("SELECT 1"))
            holding += 1
            most = max(most, holding)
            if holding == 3:
                three_hold.set()
            await release.wait()
            holding -= 1

    try:
        for _ in range(2):
            release = asyncio.Event()
            three_hold.clear()
            burst = [asyncio.create_task(transaction(release)) for _ in range(8)]
            await asyncio.wait_for(three_hold.wait(), 10)
            release.set()
            await asyncio.wait_for(asyncio.gather(*burst), 10)
    finally:
        await engine.dispose()
    assert (opened, most) == (3, 3)
