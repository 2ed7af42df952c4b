"""Helpers the repositories share: row mapping and paging."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from sqlalchemy import ColumnElement, Select, Table, func, select
from sqlalchemy.engine import CursorResult, Row
from sqlalchemy.ext.asyncio import AsyncConnection

from jobring.admin.store.engine import Db
from jobring.admin.store.records import Page

R = TypeVar("R")

CHUNK = 500  # rows per IN (...) list / multi-row statement


def to_record(cls: type[R], row: Row[Any] | Any) -> R:
    return cls(**row._asdict())


def new_id(result: CursorResult[Any]) -> int:
    """The primary key an INSERT produced."""
    key = result.inserted_primary_key
    if key is None or key[0] is None:
        raise RuntimeError("the database reported no primary key for the inserted row")
    return int(key[0])


def chunks(items: Sequence[Any], size: int = CHUNK) -> list[Sequence[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def check_paging(offset: int, limit: int) -> None:
    if offset < 0:
        raise ValueError(f"offset must be >= 0, got {offset}")
    if not 1 <= limit <= 10_000:
        raise ValueError(f"limit must be between 1 and 10000, got {limit}")


def like_pattern(text: str) -> str:
    """A LIKE pattern matching ``text`` as a literal substring (escape char ``\\``)."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


async def fetch_page(
    conn: AsyncConnection,
    table: Table,
    cls: type[R],
    where: list[ColumnElement[bool]],
    order_by: Sequence[Any],
    offset: int,
    limit: int,
) -> Page[R]:
    check_paging(offset, limit)
    count_stmt = select(func.count()).select_from(table).where(*where)
    total = int((await conn.execute(count_stmt)).scalar_one())
    stmt: Select[Any] = select(table).where(*where).order_by(*order_by).offset(offset).limit(limit)
    rows = (await conn.execute(stmt)).all()
    return Page([to_record(cls, r) for r in rows], total)


class Repository:
    """Base of the repositories: holds the shared ``Db``."""

    def __init__(self, db: Db) -> None:
        self._db = db
