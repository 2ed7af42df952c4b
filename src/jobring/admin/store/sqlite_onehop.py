"""SQLAlchemy's aiosqlite adapter with one thread hand-off per statement.

aiosqlite runs each call of a connection on the connection's worker thread and hands the
answer back to the event loop: every call is two thread wake-ups. SQLAlchemy's adapter makes
four calls per statement (open a cursor, enter it, execute, fetch the rows) and a fifth to
close the cursor; a transaction adds ``BEGIN`` (through a cursor: three more), ``COMMIT`` and,
when the pool takes the connection back, a ``ROLLBACK`` of nothing. On a busy two-core machine
each wake-up can wait for a core: the wake-ups, not SQLite, were most of a workflow node's
start through an admin process (bench/RESULTS.md, issue 21, branch wfpath).

Here a statement is one call (cursor, execute, rows, close, done on the worker thread
together), and the pool's rollback of a connection with no transaction open is skipped (it
would do nothing: the check is made only when no call of the connection is queued or
running, so it cannot race a ``BEGIN`` still on its way). A transaction's ``BEGIN`` goes in
the hand-off of its first statement: nothing else runs on the connection between the two, so
the transaction and its lock (``BEGIN IMMEDIATE``) are what they were, taken a little later;
a transaction that runs no statement sends neither ``BEGIN`` nor ``COMMIT``. The SQL and the
results are unchanged; server-side cursors keep SQLAlchemy's own class.
"""

from __future__ import annotations

import collections
import sqlite3
from typing import Any

import aiosqlite
from sqlalchemy.dialects.sqlite.aiosqlite import (
    AsyncAdapt_aiosqlite_connection,
    AsyncAdapt_aiosqlite_cursor,
    AsyncAdapt_aiosqlite_dbapi,
)
from sqlalchemy.util import immutabledict
from sqlalchemy.util.concurrency import await_

from jobring.admin.store.sqlite_connection import StopOnceConnection

__all__ = ["OneHopConnection", "OneHopCursor", "OneHopDbapi", "new_dbapi"]

_Answer = tuple[Any, list[Any], int | None, int]
_BEGINS = frozenset({"BEGIN", "BEGIN IMMEDIATE"})


def _begin(conn: sqlite3.Connection, begin: str | None) -> None:
    """On the worker thread: the transaction's held-back ``BEGIN``, if any."""
    if begin is not None:
        conn.execute(begin)


def _statement(conn: sqlite3.Connection, begin: str | None, operation: str, parameters: Any) -> _Answer:
    """On the worker thread: run one statement (after the transaction's deferred ``BEGIN``)
    and take everything SQLAlchemy reads of it."""
    _begin(conn, begin)
    cursor = conn.cursor()
    try:
        if parameters is None:
            cursor.execute(operation)
        else:
            cursor.execute(operation, parameters)
        description = cursor.description
        rows = cursor.fetchall() if description else []
        return description, rows, cursor.lastrowid, cursor.rowcount
    finally:
        cursor.close()


def _statements(conn: sqlite3.Connection, begin: str | None, operation: str, seq_of_parameters: Any
                ) -> _Answer:
    _begin(conn, begin)
    cursor = conn.cursor()
    try:
        cursor.executemany(operation, seq_of_parameters)
        return None, [], cursor.lastrowid, cursor.rowcount
    finally:
        cursor.close()


class OneHopCursor(AsyncAdapt_aiosqlite_cursor):
    """A DBAPI cursor whose execute is one call on the connection's worker thread."""

    __slots__ = ("_answer_description", "_answer_lastrowid", "_answer_rowcount", "_size")

    def __init__(self, adapt_connection: Any) -> None:  # no aiosqlite cursor is opened
        self._adapt_connection = adapt_connection
        self._connection = adapt_connection._connection
        self._cursor = None  # type: ignore[assignment]
        self._soft_closed_memoized = immutabledict()
        self._rows = collections.deque()
        self._answer_description: Any = None
        self._answer_lastrowid: int | None = None
        self._answer_rowcount = -1
        self._size = 1

    @property
    def description(self) -> Any:
        return self._answer_description

    @property
    def rowcount(self) -> int:
        return self._answer_rowcount

    @property
    def lastrowid(self) -> int:
        return self._answer_lastrowid  # type: ignore[return-value]

    @property
    def arraysize(self) -> int:
        return self._size

    @arraysize.setter
    def arraysize(self, value: int) -> None:
        self._size = value

    async def _async_soft_close(self) -> None:
        return None  # nothing left open: the rows were taken with the statement

    def close(self) -> None:
        self._rows.clear()

    def setinputsizes(self, *inputsizes: Any) -> None:
        return None

    def execute(self, operation: Any, parameters: Any = None) -> Any:
        if operation in _BEGINS and not parameters:
            # Sent with the transaction's first statement, in its hand-off (see the module doc).
            self._connection.deferred_begin = operation
            self._answer_description, self._answer_rowcount = None, -1
            self._rows.clear()
            return None
        try:
            return await_(self._run(_statement, operation, parameters))
        except Exception as error:
            self._adapt_connection._handle_exception(error)

    def executemany(self, operation: Any, seq_of_parameters: Any) -> Any:
        try:
            return await_(self._run(_statements, operation, seq_of_parameters))
        except Exception as error:
            self._adapt_connection._handle_exception(error)

    async def _run(self, work: Any, operation: Any, parameters: Any) -> None:
        connection: StopOnceConnection = self._connection  # type: ignore[assignment]
        async with self._adapt_connection._execute_mutex:
            description, rows, lastrowid, rowcount = await connection.call(
                work, connection.take_begin(), operation, parameters)
        self._answer_description = description
        self._rows = collections.deque(rows)
        self._answer_lastrowid = lastrowid
        self._answer_rowcount = rowcount


class OneHopConnection(AsyncAdapt_aiosqlite_connection):
    """The adapted connection handing out :class:`OneHopCursor`; see the module doc."""

    __slots__ = ()

    _cursor_cls = OneHopCursor

    def cursor(self, server_side: bool = False) -> Any:
        connection = self._connection
        if server_side and isinstance(connection, StopOnceConnection) and connection.deferred_begin:
            # SQLAlchemy's own streaming cursor does not carry the held-back BEGIN: sent now.
            try:
                await_(connection.call(_begin, connection.take_begin()))
            except Exception as error:
                self._handle_exception(error)
        return super().cursor(server_side)

    def rollback(self) -> None:
        connection = self._connection
        if isinstance(connection, StopOnceConnection):
            if connection.take_begin() is not None:  # no statement ran: nothing was begun
                return
            if connection.nothing_begun():
                return
        super().rollback()

    def commit(self) -> None:
        connection = self._connection
        if isinstance(connection, StopOnceConnection) and connection.take_begin() is not None:
            return  # a transaction without a statement: nothing to commit
        super().commit()


class OneHopDbapi(AsyncAdapt_aiosqlite_dbapi):
    """The aiosqlite DBAPI module of SQLAlchemy, connecting as :class:`OneHopConnection`
    (given to ``create_async_engine(module=...)``)."""

    def connect(self, *arg: Any, **kw: Any) -> AsyncAdapt_aiosqlite_connection:
        adapted = super().connect(*arg, **kw)
        return OneHopConnection(self, adapted._connection)


def new_dbapi() -> OneHopDbapi:
    """The module to give ``create_async_engine(module=...)`` for a SQLite URL."""
    return OneHopDbapi(aiosqlite, sqlite3)
