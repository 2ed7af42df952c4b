"""Cost of the admin monitors' run-log queries as the run log grows.

Run from the repository root:
    .venv/bin/python bench/monitor_queries.py [--backends postgresql,mariadb,sqlite] [--rows 1000000]

A throwaway database is migrated and filled with ``--rows`` runs over the 60 days before a
fixed instant, as a busy admin leaves them: almost all succeeded (alarm_status stays 0 on
success, as in XXL-JOB), 0.5 % failed and already alarmed, 20 failed and waiting for their
alarm, 200 still running. Then each query a monitor pass makes is timed (median of
``--repeats`` after one warm-up): the fail monitor's unalarmed failures, the lost-run
monitor's running runs without a live executor, the runs still open on one address, and the
deadline monitor's unfinished runs of one job. A pass should cost what its result costs,
not what the table holds.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import text  # noqa: E402
from tests.dbs import acreate_test_database, adrop_test_database  # noqa: E402

from jobring.admin.store import Store  # noqa: E402

NOW = datetime(2026, 11, 23, tzinfo=UTC)
NOW_MS = int(NOW.timestamp() * 1000)
JOBS = 100
COLS = ("job_group, job_id, executor_address, executor_handler, trigger_time, trigger_code, "
        "handle_time, handle_code, alarm_status")


def _fill_sql(backend: str, rows: int) -> list[str]:
    step = 60 * 86400 // rows or 1
    # Row g: job (g % 100) + 1, trigger times rising with the id; every 200th run failed and
    # was alarmed (alarm_status 3); the rest succeeded.
    values = (
        "1, ({g} % {jobs}) + 1, 'http://10.0.0.1:9999', 'demo', {ts}, 200, {ts}, "
        "CASE WHEN {g} % 200 = 0 THEN 500 ELSE 200 END, CASE WHEN {g} % 200 = 0 THEN 3 ELSE 0 END"
    )
    if backend == "postgresql":
        ts = f"TIMESTAMP '2026-09-24 00:00:00' + ({{g}} * INTERVAL '1 second' * {step})"
        sel = values.format(g="g", jobs=JOBS, ts=ts.format(g="g"))
        fill = f"INSERT INTO xxl_job_log ({COLS}) SELECT {sel} FROM generate_series(1, {rows}) g"
    elif backend == "mariadb":
        ts = f"TIMESTAMP '2026-09-24 00:00:00' + INTERVAL (seq * {step}) SECOND"
        sel = values.format(g="seq", jobs=JOBS, ts=ts)
        fill = f"INSERT INTO xxl_job_log ({COLS}) SELECT {sel} FROM seq_1_to_{rows}"
    else:
        ts = f"datetime('2026-09-24 00:00:00', '+' || (value * {step}) || ' seconds')"
        sel = values.format(g="value", jobs=JOBS, ts=ts)
        fill = (f"WITH RECURSIVE s(value) AS (SELECT 1 UNION ALL SELECT value + 1 FROM s "
                f"WHERE value < {rows}) INSERT INTO xxl_job_log ({COLS}) SELECT {sel} FROM s")
    recent = "TIMESTAMP '2026-11-22 23:50:00'" if backend != "sqlite" else "'2026-11-22 23:50:00'"
    extra = [
        # 20 failures waiting for their alarm, 200 runs still running (one job, recent).
        f"INSERT INTO xxl_job_log ({COLS}) SELECT 1, 7, 'http://10.0.0.2:9999', 'demo', {recent}, 200, "
        f"{recent}, 500, 0 FROM xxl_job_log WHERE id <= 20",
        f"INSERT INTO xxl_job_log ({COLS}) SELECT 1, 7, 'http://10.0.0.2:9999', 'demo', {recent}, 200, "
        f"NULL, 0, 0 FROM xxl_job_log WHERE id <= 200",
    ]
    return [fill, *extra]


async def _fill(store: Store, backend: str, rows: int) -> float:
    started = time.perf_counter()
    async with store.engine.begin() as conn:
        for statement in _fill_sql(backend, rows):
            await conn.execute(text(statement))
    async with store.engine.begin() as conn:
        analyze = "ANALYZE TABLE xxl_job_log" if backend == "mariadb" else "ANALYZE xxl_job_log"
        await conn.execute(text(analyze))
    return time.perf_counter() - started


async def _median_ms(call: Callable[[], Awaitable[Any]], repeats: int) -> tuple[float, int]:
    found = len(await call())
    took = []
    for _ in range(repeats):
        started = time.perf_counter()
        await call()
        took.append((time.perf_counter() - started) * 1000)
    return statistics.median(took), found


async def run(backend: str, rows: int, repeats: int) -> None:
    url = await acreate_test_database(backend)
    store = await Store.open(url)
    try:
        filled = await _fill(store, backend, rows)
        print(f"| {backend} | {rows:,} runs loaded in {filled:.0f} s | | |")
        queries: dict[str, Callable[[], Awaitable[Any]]] = {
            "fail monitor: failed_unalarmed": lambda: store.logs.failed_unalarmed(1000),
            "lost runs: lost_runs": lambda: store.logs.lost_runs(
                NOW - timedelta(seconds=10), ["http://10.0.0.1:9999"]),
            "lost runs: running_on(address)": lambda: store.logs.running_on("http://10.0.0.2:9999", NOW_MS),
            "deadline: unfinished_between(job)": lambda: store.logs.unfinished_between(
                7, NOW_MS - 3_600_000, NOW_MS),
        }
        for name, call in queries.items():
            median, found = await _median_ms(call, repeats)
            print(f"| {backend} | {name} | {found} rows | {median:.1f} ms |")
    finally:
        await store.close()
        await adrop_test_database(url)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--backends", default="postgresql,mariadb,sqlite")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    print(f"# {platform.node()} {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, rows={args.rows:,}")
    print("| backend | query | result | median |\n|---|---|---|---|")
    for backend in args.backends.split(","):
        asyncio.run(run(backend, args.rows, args.repeats))


if __name__ == "__main__":
    main()
