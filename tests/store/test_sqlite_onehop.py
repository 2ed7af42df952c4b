"""SQLite statements as one thread hand-off each (store/sqlite_onehop.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine

from jobring.admin.store import create_engine
from jobring.admin.store.engine import Db
from jobring.admin.store.sqlite_connection import StopOnceConnection


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(f"sqlite:///{tmp_path / 'one.db'}")
    async with engine.begin() as conn:
        await conn.execute(text("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)"))
    try:
        yield engine
    finally:
        await engine.dispose()


@pytest.fixture
def hand_offs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The calls handed to a connection's worker thread, by name."""
    calls: list[str] = []
    real = StopOnceConnection._execute

    async def counted(self: StopOnceConnection, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        calls.append(getattr(fn, "__name__", type(fn).__name__))
        return await real(self, fn, *args, **kwargs)

    monkeypatch.setattr(StopOnceConnection, "_execute", counted)
    return calls


async def test_a_write_transaction_is_one_hand_off_per_statement(
    engine: AsyncEngine, hand_offs: list[str]
) -> None:
    # BEGIN IMMEDIATE with the first statement, the second, COMMIT; the pool's rollback of the
    # returned connection is skipped (no transaction is open). SQLAlchemy's own adapter made
    # 12 calls here.
    db = Db(engine)
    async with db.write() as conn:
        await conn.execute(text("INSERT INTO t (v) VALUES ('a'), ('b')"))
        rows = (await conn.execute(text("SELECT id, v FROM t ORDER BY id"))).all()
    assert [tuple(r) for r in rows] == [(1, "a"), (2, "b")]
    assert len(hand_offs) == 3, hand_offs


async def test_a_transaction_without_a_statement_makes_no_call(
    engine: AsyncEngine, hand_offs: list[str]
) -> None:
    db = Db(engine)
    async with db.write():
        pass
    async with db.read():
        pass
    assert hand_offs == []
    async with db.read() as conn:  # the held-back BEGIN was dropped, not sent twice
        assert (await conn.execute(text("SELECT count(*) FROM t"))).scalar() == 0


async def test_the_write_lock_is_held_from_the_first_statement(engine: AsyncEngine, tmp_path: Path) -> None:
    db = Db(engine)
    other = create_engine(f"sqlite:///{tmp_path / 'one.db'}")
    try:
        async with db.write() as conn:
            await conn.execute(text("SELECT 1"))  # BEGIN IMMEDIATE went with it
            async with other.connect() as second:
                raw = await second.get_raw_connection()
                aio = raw.driver_connection
                assert isinstance(aio, StopOnceConnection)

                def try_lock(connection: Any) -> str:
                    connection.execute("PRAGMA busy_timeout=0")
                    try:
                        connection.execute("BEGIN IMMEDIATE")
                    except Exception as exc:
                        return str(exc)
                    connection.execute("ROLLBACK")
                    return "locked by nobody"

                answer = await aio.call(try_lock)
                assert answer == "database is locked", answer
    finally:
        await other.dispose()


async def test_a_begin_that_fails_fails_its_statement_and_leaves_the_connection_usable(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    blocker = create_engine(f"sqlite:///{tmp_path / 'one.db'}")
    db = Db(engine)
    try:
        async with blocker.connect() as held:
            aio = (await held.get_raw_connection()).driver_connection
            assert isinstance(aio, StopOnceConnection)
            await aio.call(lambda c: c.execute("BEGIN IMMEDIATE"))
            async with engine.connect() as conn:
                waiter = (await conn.get_raw_connection()).driver_connection
                assert isinstance(waiter, StopOnceConnection)
                await waiter.call(lambda c: c.execute("PRAGMA busy_timeout=0"))
            with pytest.raises(OperationalError, match="locked"):
                async with db.write() as conn:
                    await conn.execute(text("INSERT INTO t (v) VALUES ('x')"))
            await aio.call(lambda c: c.execute("ROLLBACK"))
        async with db.write() as conn:
            await conn.execute(text("INSERT INTO t (v) VALUES ('y')"))
        async with db.read() as conn:
            assert (await conn.execute(text("SELECT v FROM t"))).scalars().all() == ["y"]
    finally:
        await blocker.dispose()


async def test_results_rowcounts_and_returning_are_as_before(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        inserted = await conn.execute(text("INSERT INTO t (v) VALUES ('a'), ('b'), ('c')"))
        assert inserted.rowcount == 3
        back = await conn.execute(text("INSERT INTO t (v) VALUES ('d') RETURNING id, v"))
        assert [tuple(r) for r in back.all()] == [(4, "d")]
        many = await conn.execute(text("UPDATE t SET v = :v WHERE id = :id"),
                                  [{"v": "x", "id": 1}, {"v": "y", "id": 2}])
        assert many.rowcount == 2
        none = await conn.execute(text("UPDATE t SET v = 'z' WHERE id = 99"))
        assert none.rowcount == 0
    async with engine.connect() as conn:
        first = (await conn.execute(text("SELECT v FROM t ORDER BY id"))).first()
        assert first is not None and first.v == "x"


async def test_a_failed_transaction_is_rolled_back(engine: AsyncEngine) -> None:
    with pytest.raises(RuntimeError):
        async with engine.begin() as conn:
            await conn.execute(text("INSERT INTO t (v) VALUES ('lost')"))
            raise RuntimeError("boom")
    async with engine.connect() as conn:
        assert (await conn.execute(text("SELECT count(*) FROM t"))).scalar() == 0


async def test_a_rollback_is_skipped_only_with_nothing_begun_or_on_its_way(engine: AsyncEngine) -> None:
    async with engine.connect() as conn:
        raw = await conn.get_raw_connection()
        aio = raw.driver_connection
        assert isinstance(aio, StopOnceConnection)
        assert aio.nothing_begun()
        gate = asyncio.Event()
        loop = asyncio.get_running_loop()

        def held(connection: Any) -> None:
            asyncio.run_coroutine_threadsafe(gate.wait(), loop).result(5)
            connection.execute("BEGIN")

        on_its_way = asyncio.ensure_future(aio.call(held))
        await asyncio.sleep(0)  # the task queues its call at its first step
        assert not aio.nothing_begun()  # a BEGIN is queued or running: the rollback must go
        gate.set()
        await on_its_way
        assert not aio.nothing_begun()  # a transaction is open
        await aio.rollback()
        assert aio.nothing_begun()


async def test_a_streamed_first_statement_runs_inside_its_transaction(engine: AsyncEngine) -> None:
    db = Db(engine)
    async with db.write() as conn:
        streamed = await conn.stream(text("SELECT count(*) FROM t"))
        assert [tuple(r) async for r in streamed] == [(0,)]
        raw = await conn.get_raw_connection()
        aio = raw.driver_connection
        assert isinstance(aio, StopOnceConnection)
        assert await aio.call(lambda c: c.in_transaction)  # BEGIN IMMEDIATE went before it
