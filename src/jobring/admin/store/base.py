"""Helpers the repositories share: row mapping and paging."""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import (
    ColumnElement,
    Select,
    Table,
    TextClause,
    TypeDecorator,
    Update,
    bindparam,
    case,
    func,
    literal,
    select,
    text,
    update,
)
from sqlalchemy.engine import CursorResult, Dialect, Row
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


@dataclass(frozen=True, slots=True)
class Member:
    """A ``column IN (values)`` (``inside``) or ``NOT IN`` condition of :func:`update_rows`."""

    column: str
    values: tuple[int, ...]
    inside: bool = True


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
    member: Member | None = None,
) -> int:
    """Give each row (by ``id``) its own values: on PostgreSQL one ``UPDATE ... FROM
    unnest(arrays)`` for all rows; on SQLite (without ``member``) one executemany of a one-row
    UPDATE; elsewhere (or for decorated column types) one ``UPDATE ...
    SET c = CASE WHEN id = ... END`` per chunk, one round trip per 100 rows (executemany of
    UPDATE is a loop on aiomysql and slow on asyncpg). Columns in ``keep_when_null`` keep
    their value where the new one is None; ``match`` adds ``column = value`` conditions;
    ``member`` adds ``column [NOT] IN (values)``. Returns rows matched."""
    matched = 0
    extra = match or {}
    member_shape = None if member is None else (member.column, member.inside)
    ids = list(rows)
    if not ids:
        return 0
    columns = tuple(rows[ids[0]])
    if conn.dialect.name == "postgresql" and not any(
            isinstance(table.c[name].type, TypeDecorator) for name in columns):
        # One statement for all rows, whatever their number: the values travel as arrays.
        # A flush of thousands of rows is then one round trip (not one per 100 rows, each
        # waiting for a busy event loop) and no CASE of 100 branches to plan per chunk.
        unnest = _unnest_update(table, columns, keep_when_null, tuple(extra), conn.dialect,
                                member_shape)
        arrays: dict[str, Any] = {f"m_{name}": value for name, value in extra.items()}
        if member is not None:
            arrays["g_set"] = list(member.values)
        arrays["ids"] = ids
        for n, name in enumerate(columns):
            arrays[f"v{n}"] = [rows[row_id][name] for row_id in ids]
        return int((await conn.execute(unnest, arrays)).rowcount)
    if conn.dialect.name == "sqlite" and member is None:
        # One executemany of a one-row UPDATE: SQLite runs it in one call on the connection's
        # thread. Each statement is an await, and while a write waits for the event loop it
        # holds the database's one write lock: 20 CASE chunks of a 2,000-row claim cost 20
        # turns of a busy loop with the lock held (other jobs' fires waited behind them).
        one_row = _row_update(table, columns, keep_when_null, tuple(extra))
        each = [
            {"b_id": row_id, **{f"m_{name}": value for name, value in extra.items()},
             **{f"v_{name}": rows[row_id][name] for name in columns}}
            for row_id in ids
        ]
        return int((await conn.execute(one_row, each)).rowcount)
    for part in chunks(ids, UPDATE_CHUNK):
        stmt = _case_update(table, columns, len(part), keep_when_null, tuple(extra), member_shape)
        params: dict[str, Any] = {f"m_{name}": value for name, value in extra.items()}
        if member is not None:
            params["g_set"] = list(member.values)
        for k, row_id in enumerate(part):
            params[f"i{k}"] = row_id
            for n, name in enumerate(columns):
                params[f"v{n}_{k}"] = rows[row_id][name]
        matched += (await conn.execute(stmt, params)).rowcount
    return matched


@functools.lru_cache(maxsize=64)
def _unnest_update(
    table: Table, columns: tuple[str, ...], keep_when_null: tuple[str, ...], match: tuple[str, ...],
    dialect: Dialect, member: tuple[str, bool] | None = None,
) -> TextClause:
    # UPDATE t SET c = v.c FROM unnest(ids, values...) AS v(id, c...) WHERE t.id = v.id
    quote = dialect.identifier_preparer.quote
    key = table.c.id
    arrays = [f"CAST(:ids AS {key.type.compile(dialect=dialect)}[])"]
    names = ["id"]
    sets = []
    for n, name in enumerate(columns):
        column = table.c[name]
        arrays.append(f"CAST(:v{n} AS {column.type.compile(dialect=dialect)}[])")
        names.append(f"v{n}")
        value = f"coalesce(v.v{n}, t.{quote(name)})" if name in keep_when_null else f"v.v{n}"
        sets.append(f"{quote(name)} = {value}")
    where = ["t.id = v.id"] + [f"t.{quote(name)} = :m_{name}" for name in match]
    if member is not None:
        name, inside = member
        array = f"CAST(:g_set AS {table.c[name].type.compile(dialect=dialect)}[])"
        where.append(f"t.{quote(name)} = ANY({array})" if inside else f"t.{quote(name)} <> ALL({array})")
    return text(f"UPDATE {quote(table.name)} AS t SET {', '.join(sets)} "
                f"FROM unnest({', '.join(arrays)}) AS v({', '.join(names)}) WHERE {' AND '.join(where)}")


@functools.lru_cache(maxsize=64)
def _row_update(
    table: Table, columns: tuple[str, ...], keep_when_null: tuple[str, ...], match: tuple[str, ...]
) -> Update:
    # UPDATE t SET c = :v_c, ... WHERE id = :b_id AND m = :m_m, for executemany.
    values: dict[str, Any] = {}
    for name in columns:
        column = table.c[name]
        new = bindparam(f"v_{name}", type_=column.type)
        values[name] = func.coalesce(new, column) if name in keep_when_null else new
    where: list[ColumnElement[bool]] = [table.c.id == bindparam("b_id", type_=table.c.id.type)]
    where.extend(table.c[name] == bindparam(f"m_{name}", type_=table.c[name].type) for name in match)
    return update(table).where(*where).values(**values)


@functools.lru_cache(maxsize=512)
def _case_update(
    table: Table, columns: tuple[str, ...], size: int, keep_when_null: tuple[str, ...],
    match: tuple[str, ...], member: tuple[str, bool] | None = None,
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
    if member is not None:
        name, inside = member
        values_set = bindparam("g_set", expanding=True, type_=table.c[name].type)
        where.append(table.c[name].in_(values_set) if inside else table.c[name].not_in(values_set))
    return update(table).where(*where).values(**values)
