"""Doubles for the writes: the rows each transaction changed (any backend), a store whose
Nth bulk write fails, as an admin killed midway would leave the database, and a node paused
inside its writes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from jobring.admin.store import Store
from jobring.admin.store.engine import Db

_CHANGES = ("INSERT", "UPDATE", "DELETE")


@contextmanager
def rows_per_transaction(engine: AsyncEngine) -> Iterator[list[int]]:
    """Within the block: the rows each committed transaction inserted, updated or deleted,
    in commit order (reads count 0)."""
    counting: dict[int, int] = {}
    committed: list[int] = []

    def begun(conn: Connection) -> None:
        counting[id(conn)] = 0

    def executed(conn: Connection, cursor: Any, statement: str, parameters: Any, context: Any,
                 executemany: bool) -> None:
        if id(conn) in counting and statement.lstrip()[:6].upper() in _CHANGES:
            counting[id(conn)] += len(parameters) if executemany else max(cursor.rowcount, 0)

    def ended(conn: Connection) -> None:
        committed.append(counting.pop(id(conn), 0))

    def undone(conn: Connection) -> None:
        counting.pop(id(conn), None)

    hooks: list[tuple[str, Callable[..., None]]] = [
        ("begin", begun), ("after_cursor_execute", executed), ("commit", ended), ("rollback", undone),
    ]
    for name, hook in hooks:
        event.listen(engine.sync_engine, name, hook)
    try:
        yield committed
    finally:
        for name, hook in hooks:
            event.remove(engine.sync_engine, name, hook)


class Killed(Exception):
    """The admin died here (the write never began)."""


@contextmanager
def killed_at_write(store: Store, nth: int) -> Iterator[None]:
    """Within the block, the store's ``nth`` bulk write (counting from 1; the bounded writes
    are bulk ones) fails with :class:`Killed` before it begins, as if the admin died there."""
    original = store.db.write
    asked = 0

    def failing(**options: Any) -> AbstractAsyncContextManager[AsyncConnection]:
        nonlocal asked
        asked += options.get("bulk", False)
        if options.get("bulk", False) and asked == nth:
            return _refused()
        return original(**options)

    store.db.write = failing  # type: ignore[method-assign]
    try:
        yield
    finally:
        store.db.write = original  # type: ignore[method-assign]


@asynccontextmanager
async def _refused() -> AsyncIterator[AsyncConnection]:
    raise Killed
    yield  # pragma: no cover


class PausedBeforeCommit(Db):
    """An admin node paused (a long GC, SIGSTOP, a stalled VM) inside a write: the write's
    statements ran, its commit waits for ``resume``, its row locks stay held meanwhile."""

    def __init__(self, engine: AsyncEngine) -> None:
        super().__init__(engine)
        self.inside = asyncio.Event()
        self.resume = asyncio.Event()

    @asynccontextmanager
    async def write(self, *, read_committed: bool = False, bulk: bool = False,
                    alone: bool = False) -> AsyncIterator[AsyncConnection]:
        async with super().write(read_committed=read_committed, bulk=bulk, alone=alone) as conn:
            yield conn
            self.inside.set()
            await self.resume.wait()
