"""Run-log retention on a big run table: batched deletes vs one DELETE, with a writer probe.

Loads ``--rows`` runs (default 1,000,000; half older than the retention) into a throwaway
PostgreSQL and/or MariaDB database (tests/dbs.py), then deletes the old half with the admin's
batched delete (``LogRepository.delete_older_than``: ids read without a lock, deleted by
primary key in short transactions of ``--batch`` rows, a short pause between them) while a
probe task keeps inserting a run and recording its result, as the scheduler and callbacks do,
and records a late result for a random old run (locking that row). The probe's worst latency
shows how long writers were held up. With ``--compare-single``
the table is loaded again and the old half deleted with one ``DELETE ... WHERE trigger_time <``
statement, for comparison.

    .venv/bin/python bench/retention.py --backends postgresql,mariadb --rows 1000000
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import delete, func, select, text  # noqa: E402
from tests.dbs import acreate_test_database, adrop_test_database  # noqa: E402

from jobring.admin.store import HandleResult, NewLog, Store  # noqa: E402
from jobring.admin.store.tables import job_log  # noqa: E402

NOW = datetime(2026, 11, 23, tzinfo=UTC)
CUTOFF = NOW - timedelta(days=30)
JOBS = 100


def _fill_sql(backend: str, rows: int) -> str:
    # Row g: job (g % 100) + 1; trigger times rise with the id over the 60 days before NOW (as in
    # life: older runs have lower ids), so half the rows are before the cutoff.
    cols = (
        "job_group, job_id, executor_handler, executor_param, trigger_time, trigger_code, trigger_msg, "
        "handle_time, handle_code, handle_msg, alarm_status"
    )
    if backend == "postgresql":
        return (
            f"INSERT INTO xxl_job_log ({cols}) SELECT 1, (g % {JOBS}) + 1, 'demo', 'p', "
            f"TIMESTAMP '2026-09-24 00:00:00' + (g * INTERVAL '1 second' * {60 * 86400 // rows}), 200, "
            f"'trigger ok', TIMESTAMP '2026-11-23 00:00:00', 200, 'done', 0 FROM generate_series(1, {rows}) g"
        )
    return (
        f"INSERT INTO xxl_job_log ({cols}) SELECT 1, (seq % {JOBS}) + 1, 'demo', 'p', "
        f"TIMESTAMP '2026-09-24 00:00:00' + INTERVAL (seq * {60 * 86400 // rows}) SECOND, 200, "
        f"'trigger ok', TIMESTAMP '2026-11-23 00:00:00', 200, 'done', 0 FROM seq_1_to_{rows}"
    )


async def _fill(store: Store, backend: str, rows: int) -> float:
    started = time.perf_counter()
    async with store.engine.begin() as conn:
        await conn.execute(text(_fill_sql(backend, rows)))
    if backend == "postgresql":
        async with store.engine.connect() as conn:
            await (await conn.get_raw_connection()).driver_connection.execute("ANALYZE xxl_job_log")
    return time.perf_counter() - started


async def _probe(store: Store, stop: asyncio.Event, latencies: list[float], old_ids: tuple[int, int]) -> None:
    """Every 20 ms, time what the admin does to the run table meanwhile: insert a run and record
    its result (scheduler, callbacks), and record a late result for an old run (a callback
    spooled for days, the lost-run monitor): ``record_results`` locks that row FOR UPDATE,
    so it waits for any delete transaction holding it."""
    rng = random.Random(7)
    while not stop.is_set():
        started = time.perf_counter()
        log_id = await store.logs.insert(
            NewLog(job_group=1, job_id=999_999, trigger_time=NOW, trigger_code=200)
        )
        await store.logs.record_results([HandleResult(log_id, 200, "ok", NOW)])
        await store.logs.record_results([HandleResult(rng.randint(*old_ids), 200, "late", NOW)])
        latencies.append(time.perf_counter() - started)
        await asyncio.sleep(0.02)


async def _with_probe(store: Store, work: object, old_ids: tuple[int, int]) -> tuple[float, list[float]]:
    latencies: list[float] = []
    stop = asyncio.Event()
    probe = asyncio.create_task(_probe(store, stop, latencies, old_ids))
    await asyncio.sleep(0.5)
    baseline = len(latencies)
    started = time.perf_counter()
    assert asyncio.iscoroutine(work)
    await work
    took = time.perf_counter() - started
    stop.set()
    await probe
    return took, latencies[baseline:]


def _describe(latencies: list[float]) -> str:
    if not latencies:
        return "no probe"
    ordered = sorted(latencies)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return (
        f"probe n={len(ordered)} median {statistics.median(ordered) * 1000:.1f} ms, "
        f"p99 {p99 * 1000:.0f} ms, max {ordered[-1] * 1000:.0f} ms"
    )


async def _old_ids(store: Store, rows: int) -> tuple[int, int]:
    """The id range of the runs before the cutoff (the first half loaded)."""
    async with store.engine.connect() as conn:
        low = int((await conn.execute(select(func.min(job_log.c.id)))).scalar_one())
    return low, low + rows // 2 - 1


async def _count(store: Store) -> int:
    async with store.engine.connect() as conn:
        return int((await conn.execute(select(func.count()).select_from(job_log))).scalar_one())


async def _single_delete(store: Store) -> int:
    async with store.engine.begin() as conn:
        return (
            await conn.execute(delete(job_log).where(job_log.c.trigger_time < CUTOFF.replace(tzinfo=None)))
        ).rowcount


async def run(backend: str, rows: int, batch: int, pause: float, compare: bool) -> None:
    url = await acreate_test_database(backend)
    store = await Store.open(url)
    try:
        filled = await _fill(store, backend, rows)
        print(f"| {backend} | {rows:,} rows loaded in {filled:.0f} s |")
        deleted: list[int] = []

        async def batched() -> None:
            deleted.append(await store.logs.delete_older_than(CUTOFF, batch, pause))

        took, lat = await _with_probe(store, batched(), await _old_ids(store, rows))
        print(
            f"| {backend} | batched ({batch}/stmt, {pause * 1000:.0f} ms pause) | deleted {deleted[0]:,} in "
            f"{took:.1f} s ({deleted[0] / took:,.0f} rows/s) | {_describe(lat)} "
            f"| left {await _count(store):,} |"
        )
        if compare:
            async with store.engine.begin() as conn:
                await conn.execute(delete(job_log))
            await _fill(store, backend, rows)
            single: list[int] = []

            async def one() -> None:
                single.append(await _single_delete(store))

            took, lat = await _with_probe(store, one(), await _old_ids(store, rows))
            print(f"| {backend} | one DELETE | deleted {single[0]:,} in {took:.1f} s | {_describe(lat)} |")
    finally:
        await store.close()
        await adrop_test_database(url)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--backends", default="postgresql,mariadb")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=2000)
    parser.add_argument("--pause", type=float, default=0.02)
    parser.add_argument("--compare-single", action="store_true")
    args = parser.parse_args()
    print(
        f"python {platform.python_version()} on {platform.machine()}, "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, "
        f"load {os.getloadavg()[0]:.1f}"
    )
    for backend in args.backends.split(","):
        asyncio.run(run(backend.strip(), args.rows, args.batch, args.pause, args.compare_single))


if __name__ == "__main__":
    main()
