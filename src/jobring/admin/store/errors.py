"""Errors raised by the store, and which database errors are worth a retry."""

from __future__ import annotations

import asyncio

from sqlalchemy import exc as sa_exc

from jobring import errors
from jobring.errors import JobringError


class StoreError(JobringError):
    """Base class of every error the store raises on purpose."""


class NotFound(StoreError, errors.NotFound):
    """The record named by the call does not exist."""


class Conflict(StoreError, errors.Conflict):
    """The write would break a uniqueness rule (e.g. a username that is taken)."""


class ReferencedError(StoreError, errors.Conflict):
    """The record cannot be deleted because other records still reference it."""


def public_reason(exc: BaseException) -> str:
    """What may be said about ``exc`` outside the admin's log: a store error's own message,
    else only the error's class. A database error's text carries the SQL statement and its
    parameters (and a driver's message may quote a value), so none of it is ever repeated."""
    if isinstance(exc, StoreError):
        return str(exc)
    if isinstance(exc, sa_exc.DBAPIError):
        driver = "" if exc.orig is None else f", {type(exc.orig).__name__}"
        return f"database error ({type(exc).__name__}{driver})"
    if isinstance(exc, sa_exc.SQLAlchemyError):
        return f"database error ({type(exc).__name__})"
    return type(exc).__name__


# Driver error codes that mean "try again later" rather than "your statement is wrong".
_PG_TRANSIENT_SQLSTATES = frozenset(
    {
        "40001",
        "40P01",
        "55P03",
        "57P01",
        "57P02",
        "57P03",
        "08000",
        "08003",
        "08006",
        "08001",
        "08004",
        "53300",
    }
)
_MYSQL_TRANSIENT_CODES = frozenset({1205, 1213, 2002, 2003, 2006, 2013, 1040, 1053})


_PG_LOCKED_SQLSTATE = "55P03"
# MariaDB answers a row lock waited for too long (or a NOWAIT) with 1205, MySQL 8's NOWAIT with 3572.
_MYSQL_LOCKED_CODES = frozenset({1205, 3572})


def _driver_codes(exc: sa_exc.DBAPIError) -> tuple[str | None, int | None]:
    """The driver's PostgreSQL SQLSTATE and MySQL/MariaDB error number, where it has them."""
    orig = exc.orig
    sqlstate = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    args = getattr(orig, "args", ())
    number = args[0] if args and isinstance(args[0], int) else None
    return (sqlstate if isinstance(sqlstate, str) else None), number


def is_lock_wait(exc: BaseException) -> bool:
    """True when ``exc`` says a row was locked by another transaction past the statement's
    lock wait (MySQL/MariaDB 1205 or 3572, PostgreSQL 55P03): the session itself is fine."""
    if not isinstance(exc, sa_exc.DBAPIError):
        return False
    sqlstate, number = _driver_codes(exc)
    return sqlstate == _PG_LOCKED_SQLSTATE or number in _MYSQL_LOCKED_CODES


def is_transient(exc: BaseException) -> bool:
    """True when ``exc`` is a database error a caller may retry with backoff.

    Transient: lost or refused connections (``DBAPIError.connection_invalidated``, SQLAlchemy
    pool timeouts, OS-level connection errors), serialization failures and deadlocks
    (PostgreSQL 40001/40P01, MySQL 1213), lock wait timeouts (MySQL 1205, PostgreSQL 55P03),
    server shutdown/too many connections, and SQLite "database is locked"/"busy". Everything
    else (constraint violations, syntax, StoreError) is not transient. The store never
    retries by itself: callers decide.
    """
    if isinstance(exc, StoreError):
        return False
    if isinstance(exc, sa_exc.TimeoutError | ConnectionError | asyncio.TimeoutError):
        return True
    if isinstance(exc, sa_exc.DBAPIError):
        if exc.connection_invalidated:
            return True
        if isinstance(exc, sa_exc.IntegrityError | sa_exc.ProgrammingError):
            return False
        sqlstate, number = _driver_codes(exc)
        if sqlstate in _PG_TRANSIENT_SQLSTATES or number in _MYSQL_TRANSIENT_CODES:
            return True
        text = str(exc.orig).lower()
        if "database is locked" in text or "database is busy" in text:
            return True
        return isinstance(exc, sa_exc.OperationalError) and "connection" in text
    return False
