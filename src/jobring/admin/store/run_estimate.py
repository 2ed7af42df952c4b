"""How many runs match a filter when counting them all costs too much: extrapolated from time.

The run listing counts at most a cap of matching rows (``fetch_page``'s ``count_cap``). Beyond,
the newest ``cap + 1`` rows span some time; the matching rows overall span from the oldest to
the newest. At an even rate, the total is the cap times the ratio of the two spans. Three
index reads (the newest row, the row at the cap, the oldest row), rounded to two significant
digits: an honest "about 50,000", not "about 1,001".
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import ColumnElement, select
from sqlalchemy.ext.asyncio import AsyncConnection

from jobring.admin.store.tables import job_log

__all__ = ["estimate_runs", "round_estimate"]


def round_estimate(value: float) -> int:
    """``value`` to two significant digits (50,191 -> 50,000; 1,234 -> 1,200)."""
    n = int(round(value))
    if n < 100:
        return n
    step = 10 ** (len(str(n)) - 2)
    return int(round(n / step) * step)


async def _time_at(conn: AsyncConnection, where: Sequence[ColumnElement[bool]], *, newest: bool,
                   skip: int = 0) -> datetime | None:
    t, i = job_log.c.trigger_time, job_log.c.id
    order = (t.desc(), i.desc()) if newest else (t.asc(), i.asc())
    stmt = select(t).where(*where, t.is_not(None)).order_by(*order).offset(skip).limit(1)
    value = (await conn.execute(stmt)).scalar()
    return value if isinstance(value, datetime) else None


async def estimate_runs(conn: AsyncConnection, where: Sequence[ColumnElement[bool]], cap: int) -> int | None:
    """The estimated number of runs matching ``where`` (known to be more than ``cap``), or
    None when the newest ``cap + 1`` of them share one instant (no rate to extrapolate)."""
    newest = await _time_at(conn, where, newest=True)
    at_cap = await _time_at(conn, where, newest=True, skip=cap)
    oldest = await _time_at(conn, where, newest=False)
    if newest is None or at_cap is None or oldest is None:
        return None
    recent = (newest - at_cap).total_seconds()
    if recent <= 0:
        return None
    overall = (newest - oldest).total_seconds()
    return max(cap + 1, round_estimate((cap + 1) * overall / recent))
