"""What grows with the size of the store: start-up, memory, the due scan, retention under load.

Run from the repository root (PostgreSQL by default, MariaDB with --backend mariadb):
    .venv/bin/python bench/size.py [--jobs 10000 100000 1000000] [--retention-runs 500000]

For each size a throwaway database gets that many stored jobs (half running with their next
instant a day ahead, half stopped: the due index holds them all) plus 100 running FIX_RATE
(1 s) jobs due the moment the admin starts, against a fast loopback executor
(bench/fire_precision.py's). Measured: the time from the admin's launch to its first
dispatch, its RSS, the lateness of the 100 jobs' fires, and the due scan's execution time
(EXPLAIN ANALYZE of the claim statement). Then, at the last size, ``--retention-runs`` runs
older than the retention cut-off are added and deleted in the admin's retention batches
(LogRepository.delete_older_than, as the retention task calls it) while the admin fires:
the delete's duration and the fires' lateness p99 during it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psutil
from sqlalchemy import func, select, text

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import fire_precision as fp  # noqa: E402
from tests.dbs import acreate_test_database, adrop_test_database  # noqa: E402

from jobring.admin.store import Store, create_engine, upgrade_database  # noqa: E402
from jobring.admin.store.jobs import due_statement  # noqa: E402
from jobring.admin.store.tables import job_log  # noqa: E402

FIRING = 100
RETENTION_CUTOFF = datetime.now(UTC) - timedelta(days=30)


def _idle_jobs_sql(backend: str, jobs: int, group_id: int, next_ms: int) -> str:
    cols = ("job_group, job_desc, schedule_type, schedule_conf, misfire_strategy, executor_route_strategy, "
            "executor_handler, executor_param, executor_block_strategy, glue_type, trigger_status, "
            "trigger_next_time, add_time, update_time")
    values = (f"{group_id}, 'idle', 'CRON', '0 0 3 * * ?', 'DO_NOTHING', 'FIRST', 'bench', '', "
              f"'SERIAL_EXECUTION', 'BEAN', {{n}} % 2, {next_ms} + {{n}}, NOW(), NOW()")
    if backend == "postgresql":
        source = f"generate_series(1, {jobs}) g"
        return f"INSERT INTO xxl_job_info ({cols}) SELECT {values.format(n='g')} FROM {source}"
    return f"INSERT INTO xxl_job_info ({cols}) SELECT {values.format(n='seq')} FROM seq_1_to_{jobs}"


def _old_runs_sql(backend: str, runs: int) -> str:
    cols = "job_group, job_id, trigger_time, trigger_code, handle_time, handle_code, alarm_status"
    if backend == "postgresql":
        return (f"INSERT INTO xxl_job_log ({cols}) SELECT 1, 1, TIMESTAMP '2026-01-01 00:00:00' + "
                f"(g * INTERVAL '1 second'), 200, TIMESTAMP '2026-01-01 00:00:00', 200, 0 "
                f"FROM generate_series(1, {runs}) g")
    return (f"INSERT INTO xxl_job_log ({cols}) SELECT 1, 1, TIMESTAMP '2026-01-01 00:00:00' + "
            f"INTERVAL seq SECOND, 200, TIMESTAMP '2026-01-01 00:00:00', 200, 0 FROM seq_1_to_{runs}")


async def _load_idle(url: str, backend: str, jobs: int, group_id: int) -> float:
    store = Store(create_engine(url))
    started = time.perf_counter()
    try:
        async with store.engine.begin() as conn:
            next_ms = int(time.time() * 1000) + 86_400_000
            await conn.execute(text(_idle_jobs_sql(backend, jobs, group_id, next_ms)))
        async with store.engine.begin() as conn:
            analyze = "ANALYZE TABLE xxl_job_info" if backend == "mariadb" else "ANALYZE xxl_job_info"
            await conn.execute(text(analyze))
    finally:
        await store.close()
    return time.perf_counter() - started


async def _due_scan_ms(url: str, backend: str) -> float:
    store = Store(create_engine(url))
    try:
        now = int(time.time() * 1000)
        stmt = due_statement("bench-probe", now, now + 5_000, 20_000, backend, skip_locked=True)
        sql = str(stmt.compile(store.engine.sync_engine, compile_kwargs={"literal_binds": True}))
        async with store.engine.begin() as conn:
            if backend == "postgresql":
                plan = [r[0] for r in (await conn.execute(text("EXPLAIN ANALYZE " + sql))).all()]
                return float(next(line for line in plan if line.startswith("Execution Time")).split()[2])
            started = time.perf_counter()
            await conn.execute(text(sql))
            return (time.perf_counter() - started) * 1000
    finally:
        await store.close()


async def _first_dispatch_ms(url: str) -> int | None:
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            value = (await conn.execute(select(func.min(job_log.c.dispatch_time)))).scalar_one()
            return None if value is None else int(value)
    finally:
        await engine.dispose()


async def _retention(url: str, backend: str, runs: int) -> tuple[float, int]:
    store = Store(create_engine(url))
    try:
        async with store.engine.begin() as conn:
            await conn.execute(text(_old_runs_sql(backend, runs)))
        started = time.perf_counter()
        deleted = await store.logs.delete_older_than(RETENTION_CUTOFF, 2000, 0.02)
        return time.perf_counter() - started, deleted
    finally:
        await store.close()


def _lateness_p99(url: str, starts: list[int], t1: int, t2: int) -> tuple[float, int, int]:
    fired, expected, doubled, lateness = asyncio.run(fp._measure(url, starts, t1, t2))
    return fp._quantile(lateness, 0.99), max(0, expected - fired), doubled


def run_size(backend: str, jobs: int, seconds: float, retention_runs: int) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="jobring-size-"))
    url = asyncio.run(acreate_test_database(backend, workdir))
    asyncio.run(upgrade_database(url))
    executor_port, admin_port = fp.free_port(), fp.free_port()
    env = fp.admin_env()
    fake = subprocess.Popen([sys.executable, fp.__file__, "fake-executor", "--port", str(executor_port)])
    admin: subprocess.Popen[bytes] | None = None
    try:
        fp._wait_for_port(executor_port)
        launch_ms = int(time.time() * 1000) + 20_000
        starts = asyncio.run(fp._create_jobs(url, FIRING, launch_ms, "spread", executor_port))
        loaded = asyncio.run(_load_idle(url, backend, jobs - FIRING, 1))
        due_ms = asyncio.run(_due_scan_ms(url, backend))
        time.sleep(max(0.0, (launch_ms - time.time() * 1000) / 1000))
        launched = int(time.time() * 1000)
        admin = subprocess.Popen(
            [sys.executable, "-m", "jobring.cli", "admin", "--database-url", url, "--port", str(admin_port),
             "--log-level", "warning"], env=env, cwd=workdir)
        proc = psutil.Process(admin.pid)
        first = None
        while first is None and time.time() * 1000 < launched + 60_000:
            time.sleep(0.1)
            first = asyncio.run(_first_dispatch_ms(url))
        t1 = int(time.time() * 1000) + 2_000
        t2 = t1 + int(seconds * 1000)
        rss = 0
        while time.time() * 1000 < t2 + 1_000:
            rss = max(rss, proc.memory_info().rss)
            time.sleep(0.5)
        p99, missed, doubled = _lateness_p99(url, starts, t1, t2)
        start_s = (first - launched) / 1000 if first is not None else float("nan")
        print(f"| {backend} | {jobs:,} jobs (loaded in {loaded:.0f} s) | first dispatch {start_s:.1f} s "
              f"after launch | RSS {rss / 2**20:.0f} MiB | due scan {due_ms:.1f} ms | fire p99 {p99:.0f} ms, "
              f"missed {missed}, doubled {doubled} |", flush=True)
        if retention_runs:
            r1 = int(time.time() * 1000)
            took, deleted = asyncio.run(_retention(url, backend, retention_runs))
            r2 = int(time.time() * 1000)
            time.sleep(3)
            p99, missed, doubled = _lateness_p99(url, starts, r1, r2)
            print(f"| {backend} | retention: {deleted:,} runs deleted in {took:.1f} s (batches of 2,000) "
                  f"while firing | | | | fire p99 {p99:.0f} ms, missed {missed}, doubled {doubled} |",
                  flush=True)
    finally:
        fp.stop_processes([admin, fake])
        asyncio.run(adrop_test_database(url))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--backend", default="postgresql", choices=("postgresql", "mariadb"))
    parser.add_argument("--jobs", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--retention-runs", type=int, default=500_000, help="0: skip the retention case")
    args = parser.parse_args()
    print(f"# {platform.node()}, {os.cpu_count()} cores, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, "
          f"load {os.getloadavg()[0]:.1f}")
    for i, jobs in enumerate(args.jobs):
        run_size(args.backend, jobs, args.seconds, args.retention_runs if i == len(args.jobs) - 1 else 0)


if __name__ == "__main__":
    main()
