"""Helpers the repositories share: row mapping and paging."""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any, TypeVar

from sqlalchemy import ColumnElement, Select, Table, Update, bindparam, case, func, literal, select, update
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
    *,
    count_cap: int | None = None,
    after: Sequence[ColumnElement[bool]] = (),
) -> Page[R]:
    """The page ``offset``/``limit`` of the rows matching ``where`` (and ``after``, a keyset
    condition that does not narrow the total). Over ``count_cap`` matching rows the count
    stops there: ``total_exact`` is then False and the total an estimate (PostgreSQL's planner
    estimate when larger, else the cap plus one)."""
    check_paging(offset, limit)
    if count_cap is None:
        count_stmt = select(func.count()).select_from(table).where(*where)
        total, exact = int((await conn.execute(count_stmt)).scalar_one()), True
    else:
        # Counting stops at the cap: the rows past it are never read.
        capped = select(literal(1)).select_from(table).where(*where).limit(count_cap + 1).subquery()
        total = int((await conn.execute(select(func.count()).select_from(capped))).scalar_one())
        exact = total <= count_cap
        if not exact:
            total = max(total, await planner_estimate(conn, select(table.c[0]).where(*where)))
    stmt: Select[Any] = select(table).where(*where, *after).order_by(*order_by).offset(offset).limit(limit)
    rows = (await conn.execute(stmt)).all()
    return Page([to_record(cls, r) for r in rows], total, exact)


async def planner_estimate(conn: AsyncConnection, stmt: Select[Any]) -> int:
    """PostgreSQL's estimate of the rows ``stmt`` returns (0 on other backends). The values
    are rendered into the SQL text, so callers pass only numbers, instants and constants."""
    if conn.dialect.name != "postgresql":
        return 0
    sql = str(stmt.compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True}))
    plan = (await conn.exec_driver_sql("EXPLAIN (FORMAT JSON) " + sql)).scalar_one()
    if isinstance(plan, str):
        plan = json.loads(plan)
    return int(plan[0]["Plan"]["Plan Rows"])


class Repository:
    """Base of the repositories: holds the shared ``Db``."""

    def __init__(self, db: Db) -> None:
        self._db = db


# Rows per CASE-UPDATE: at most 100 x 15,000 characters of message, well under MySQL's
# default max_allowed_packet (16 MiB) even at 4 bytes per character.
UPDATE_CHUNK = 100


async def update_rows(
    conn: AsyncConnection,
    table: Table,
    rows: dict[int, dict[str, Any]],
    *,
    keep_when_null: tuple[str, ...] = (),
    match: dict[str, Any] | None = None,
) -> int:
    """Give each row (by ``id``) its own values with one ``UPDATE ... SET c = CASE WHEN id =
    ... END`` per chunk: one round trip per 100 rows (executemany of UPDATE is a loop on
    aiomysql and slow on asyncpg). Columns in ``keep_when_null`` keep their value where the
    new one is None; ``match`` adds ``column = value`` conditions. Returns rows matched."""
    matched = 0
    extra = match or {}
    ids = list(rows)
    for part in chunks(ids, UPDATE_CHUNK):
        columns = tuple(rows[part[0]])
        stmt = _case_update(table, columns, len(part), keep_when_null, tuple(extra))
        params: dict[str, Any] = {f"m_{name}": value for name, value in extra.items()}
        for k, row_id in enumerate(part):
            params[f"i{k}"] = row_id
            for n, name in enumerate(columns):
                params[f"v{n}_{k}"] = rows[row_id][name]
        matched += (await conn.execute(stmt, params)).rowcount
    return matched


@functools.lru_cache(maxsize=512)
def _case_update(
    table: Table, columns: tuple[str, ...], size: int, keep_when_null: tuple[str, ...], match: tuple[str, ...]
) -> Update:
    # Built once per shape with named parameters, so SQLAlchemy's compiled cache applies.
    key = table.c.id
    ids = [bindparam(f"i{k}", type_=key.type) for k in range(size)]
    values: dict[str, Any] = {}
    for n, name in enumerate(columns):
        column = table.c[name]
        new = case(
            *((key == ids[k], bindparam(f"v{n}_{k}", type_=column.type)) for k in range(size)),
            else_=column,
        )
        values[name] = func.coalesce(new, column) if name in keep_when_null else new
    where: list[ColumnElement[bool]] = [key.in_(ids)]
    where.extend(table.c[name] == bindparam(f"m_{name}", type_=table.c[name].type) for name in match)
    return update(table).where(*where).values(**values)
