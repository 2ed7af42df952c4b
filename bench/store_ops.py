"""Storage layer costs per backend: the due scan against table size, and the batched writes
of one scheduling tick (fire inserts, next-time advance, result recording).

Run from the repository root: .venv/bin/python bench/store_ops.py [--backends sqlite,postgresql,mariadb]

Each backend gets a throwaway database (tests/dbs.py). Times are the best of 3 runs (the machine
is shared, so the best run is the least disturbed one).
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.dbs import acreate_test_database, adrop_test_database  # noqa: E402

from jobring.admin.store import HandleResult, JobGroup, NewLog, Store  # noqa: E402
from jobring.admin.store.tables import job_info  # noqa: E402

NOW = datetime(2026, 1, 1)
DUE = 100
BATCH = 1_000


async def _best(fn: Callable[[], Awaitable[object]], repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        await fn()
        best = min(best, time.perf_counter() - start)
    return best


async def _fill(store: Store, group: int, total: int) -> None:
    rows = [
        {
            "job_group": group,
            "job_desc": f"j{i}",
            "glue_type": "BEAN",
            # DUE jobs are due now; the rest run later (status 1) or are stopped (status 0)
            "trigger_status": 1 if i < DUE or i % 2 else 0,
            "trigger_next_time": 1_000 if i < DUE else 10_000_000 + i,
        }
        for i in range(total)
    ]
    async with store.engine.begin() as conn:
        await conn.execute(job_info.delete())
        for start in range(0, total, 5_000):
            await conn.execute(job_info.insert(), rows[start : start + 5_000])


async def _scan_cost(store: Store, group: int, total: int) -> float:
    await _fill(store, group, total)

    async def claim() -> None:
        got = await store.jobs.claim_due("bench", 2_000, 5_000, 1, BATCH)  # 1 ms lease: reclaimable
        assert len(got) == DUE

    return await _best(claim)


async def _tick_writes(store: Store, group: int) -> dict[str, float]:
    jobs = [j.id for j in await store.jobs.claim_due("bench", 3_000, 5_000, 60_000, DUE)]
    planned = iter(range(10**9))
    times: dict[str, float] = {}

    async def fires() -> None:
        base = next(planned) * BATCH
        await store.logs.insert_fires(
            [NewLog(group, jobs[i % len(jobs)], NOW, planned_time=base + i) for i in range(BATCH)]
        )

    times["insert_fires x1000"] = await _best(fires)
    times["advance x100"] = await _best(
        lambda: store.jobs.advance("bench", [(j, 1_000, 2_000) for j in jobs])
    )
    log_ids = [lg.id for lg in (await store.logs.list(limit=BATCH * 2)).items]
    batches = iter([log_ids[:BATCH], log_ids[BATCH:]])

    async def results() -> None:
        outcomes = await store.logs.record_results([HandleResult(i, 200, "ok", NOW) for i in next(batches)])
        assert len(outcomes) == BATCH

    await results()  # first call builds and compiles the statements
    times["record_results x1000"] = await _best(results, repeats=1)
    return times


async def run(backend: str) -> None:
    url = await acreate_test_database(backend)
    store = await Store.open(url)
    try:
        group = await store.groups.create(JobGroup(app_name="bench", title="b"), NOW)
        scans = {total: await _scan_cost(store, group, total) for total in (2_000, 20_000)}
        writes = await _tick_writes(store, group)
        scan_text = ", ".join(f"{total} jobs: {t * 1000:.1f} ms" for total, t in scans.items())
        print(
            f"| {backend} | claim {DUE} due ({scan_text}) | "
            + ", ".join(f"{k}: {v * 1000:.0f} ms" for k, v in writes.items())
            + " |"
        )
    finally:
        await store.close()
        await adrop_test_database(url)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--backends", default="sqlite,postgresql,mariadb")
    args = parser.parse_args()
    print(f"python {platform.python_version()} on {platform.machine()}, {datetime.now():%Y-%m-%d}")
    for backend in args.backends.split(","):
        asyncio.run(run(backend.strip()))


if __name__ == "__main__":
    main()
