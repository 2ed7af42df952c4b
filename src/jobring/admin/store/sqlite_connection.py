"""aiosqlite connections whose close always ends, even after a cancelled statement.

aiosqlite runs each connection's statements on a worker thread that ends at the first stop
request; a second stop request queued behind it is never answered. SQLAlchemy asks twice when
a statement is cancelled and then cancelled again while it still runs (a shutdown step left
behind past its time, then the event loop's close): its forced close stops the thread, its
graceful close waits for a second stop forever, and so does the event loop's close
(``asyncio.run`` in an admin process, a test's teardown). Here a connection's stop is
requested once and every later request waits on that one.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import aiosqlite
from sqlalchemy.dialects.sqlite.aiosqlite import dialect as aiosqlite_dialect
from sqlalchemy.engine import URL

_NOT_STOPPED: Any = object()


class StopOnceConnection(aiosqlite.Connection):
    """An aiosqlite connection whose worker thread is asked to stop at most once."""

    def __init__(self, connector: Callable[[], sqlite3.Connection], iter_chunk_size: int) -> None:
        super().__init__(connector, iter_chunk_size)
        self._stop_requested: asyncio.Future[Any] | None = _NOT_STOPPED
        # As SQLAlchemy does for the connections it creates itself: a forgotten connection's
        # thread must not keep the process alive.
        self._thread.daemon = True
        # Calls queued (counted on the event loop's thread) and finished (counted on the
        # worker thread): equal when none is queued or running (see ``nothing_begun``).
        self._queued = 0
        self._finished = 0
        # A transaction's BEGIN, held back to go with its first statement (sqlite_onehop.py).
        self.deferred_begin: str | None = None

    async def _execute(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        def counted() -> Any:
            try:
                return fn(*args, **kwargs)
            finally:
                self._finished += 1  # only this connection's worker thread writes it

        self._queued += 1
        return await super()._execute(counted)  # type: ignore[no-untyped-call]

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(sqlite3_connection, *args)`` on the worker thread, as one hand-off."""
        return await self._execute(self._run_with_connection, fn, *args)

    def _run_with_connection(self, fn: Callable[..., Any], *args: Any) -> Any:
        return fn(self._conn, *args)

    def take_begin(self) -> str | None:
        """The held-back BEGIN, to send now (None: there is none); it is held back no more."""
        begin, self.deferred_begin = self.deferred_begin, None
        return begin

    def nothing_begun(self) -> bool:
        """True when no call is queued or running and no transaction is open: a rollback
        would do nothing. (With a call on its way, e.g. a ``BEGIN`` whose caller was
        cancelled, the answer is False: the transaction may be about to open.)"""
        connection = self._connection
        return (connection is not None and self._queued == self._finished
                and not connection.in_transaction)

    def stop(self) -> asyncio.Future[Any] | None:
        if self._stop_requested is _NOT_STOPPED:
            self._stop_requested = super().stop()
        else:
            self._running = False
        return self._stop_requested


def sqlite_connector(url: URL, *, timeout_s: float) -> Callable[[], Awaitable[aiosqlite.Connection]]:
    """An ``async_creator`` for SQLAlchemy that opens ``url`` (a ``sqlite+aiosqlite`` URL) as
    SQLAlchemy's own aiosqlite dialect would, with a ``StopOnceConnection``."""
    args, params = aiosqlite_dialect().create_connect_args(url)
    params["timeout"] = timeout_s
    connect = partial(sqlite3.connect, *args, **params)

    async def create() -> aiosqlite.Connection:
        return await StopOnceConnection(connect, 64)

    return create
