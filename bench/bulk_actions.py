"""Other jobs' fire lateness while a user's bulk action runs on SQLite: "retry the failed
sub-tasks" of a run with 100,000 failed sub-tasks, or "clear runs" of a group with 1,000,000
runs (and that failed parent with its 100,000 sub-tasks).

The database is seeded by SQL (the run ended failed: every sub-task failed at attempt 1; the
group has no executor, so nothing retried is dispatched), then an admin process starts with
``--other-jobs`` FIX_RATE 1 s jobs of another group on a recording executor. After a quiet
``--quiet-s`` the action is asked through the management API; the other jobs' lateness
(``dispatch_time - planned_time``) is reported for the fires planned in the quiet window
before it and in the action's window (p50 / p99 / max, and instants with no run). Run it
under the heavy-work lock, one action per hold:

    flock /tmp/jobring-heavy.lock python bench/bulk_actions.py --action retry
    flock /tmp/jobring-heavy.lock python bench/bulk_actions.py --action clear --runs 1000000
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import select, text
from tests.dbs import acreate_test_database, adrop_test_database
from tests.e2e.admin_nodes import (
    ADMIN_PASSWORD,
    RecordingExecutor,
    add_manual_group,
    kill,
    start_admin,
    start_jobs_together,
)

from jobring.admin.store import JobGroup, JobInfo, NewLog, Store
from jobring.admin.store.tables import job_log
from jobring.client import AsyncAdminClient

NOW = datetime(2026, 11, 23)


async def _seed(store: Store, subtasks: int, runs: int) -> tuple[int, int]:
    """(group, failed parent run): ``runs`` plain runs of the group, then the parent."""
    group = await store.groups.create(JobGroup(app_name="bench-bulk", title="bench", address_type=0), NOW)
    job = await store.jobs.create(JobInfo(job_group=group, job_desc="bench", executor_handler="fan_out"))
    now_ms = time.time_ns() // 1_000_000
    async with store.engine.begin() as conn:
        if runs:
            await conn.execute(text(
                "WITH RECURSIVE seq(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM seq WHERE g < :n) "
                "INSERT INTO xxl_job_log (job_group, job_id, executor_handler, executor_param, trigger_time, "
                "trigger_code, trigger_msg, handle_time, handle_code, handle_msg, alarm_status) "
                "SELECT :group, :job, 'fan_out', 'p', datetime('2026-09-24', '+' || g || ' seconds'), 200, "
                "'trigger ok', datetime('2026-11-23'), 200, 'done', 0 FROM seq"
            ), {"n": runs, "group": group, "job": job})
    run = await store.logs.insert(NewLog(job_group=group, job_id=job, trigger_time=NOW, trigger_code=200))
    async with store.engine.begin() as conn:
        await conn.execute(text(
            "INSERT INTO jobring_distributed_run (run_id, job_id, job_group, kind, phase, attempt, "
            "root_state, max_retries, total, succeeded, failed, running, result_recorded, created_at, "
            "ended_at) "
            "VALUES (:run, :job, :group, 'map', 'failed', 1, 'succeeded', 0, :n, 0, :n, 0, 1, :now, :now)"
        ), {"run": run, "job": job, "group": group, "n": subtasks, "now": now_ms})
        await conn.execute(text(
            "WITH RECURSIVE seq(g) AS (SELECT 0 UNION ALL SELECT g + 1 FROM seq WHERE g < :n - 1) "
            "INSERT INTO jobring_subtask (run_id, job_group, task_key, task_name, kind, item, status, "
            "attempt, failures, losses, executor_address, message, created_at, dispatched_at, ended_at) "
            "SELECT :run, :group, 'r/0.' || g, 'noop', 'map', g, 'failed', 1, 1, 0, 'http://gone/', 'boom', "
            ":now, :now, :now FROM seq"
        ), {"run": run, "group": group, "n": subtasks, "now": now_ms})
        await conn.execute(text(
            "UPDATE xxl_job_log SET handle_code = 500, handle_msg = 'failed', "
            "handle_time = '2026-11-23 00:00:00' WHERE id = :run"
        ), {"run": run})
    return group, run


def _percentile(values: list[int], share: float) -> int:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else -1


async def _lateness(store: Store, jobs: list[int], start_ms: int, end_ms: int) -> str:
    """The other jobs' fires planned in [start, end): lateness and instants with no run."""
    async with store.engine.connect() as conn:
        rows = (await conn.execute(
            select(job_log.c.planned_time, job_log.c.dispatch_time).where(
                job_log.c.job_id.in_(jobs), job_log.c.planned_time >= start_ms,
                job_log.c.planned_time < end_ms,
            )
        )).all()
    late = [int(r.dispatch_time) - int(r.planned_time) for r in rows if r.dispatch_time is not None]
    expected = len(jobs) * ((end_ms - start_ms) // 1000)
    return (f"{len(rows)} fires (~{expected} instants), lateness p50 {_percentile(late, 0.5)} ms, "
            f"p99 {_percentile(late, 0.99)} ms, max {max(late, default=-1)} ms, "
            f"undispatched {len(rows) - len(late)}")


async def main(args: argparse.Namespace) -> None:
    work = Path(tempfile.mkdtemp(prefix="jobring-bulk-"))
    url = await acreate_test_database("sqlite", work)
    store = await Store.open(url)
    recorder = RecordingExecutor()
    node = None
    try:
        started = time.perf_counter()
        group, run = await _seed(store, args.subtasks, args.runs if args.action == "clear" else 0)
        print(f"seeded {args.subtasks:,} failed sub-tasks"
              + (f" and {args.runs:,} runs" if args.action == "clear" else "")
              + f" in {time.perf_counter() - started:.0f} s")
        await recorder.start()
        manual = await add_manual_group(store, recorder.address)
        node = await start_admin(url, "bench", work)
        others, _ = await start_jobs_together(store, manual, args.other_jobs, 1000 // args.other_jobs, 2_000)
        await asyncio.sleep(2 + args.quiet_s)
        async with AsyncAdminClient(node.base_url, timeout=args.limit_s) as admin:
            await admin.login("admin", ADMIN_PASSWORD)
            began = time.time_ns() // 1_000_000
            if args.action == "retry":
                answer = await admin.runs.retry_failed(run)
            else:
                answer = await admin.runs.clear("all", group=group)
            ended = time.time_ns() // 1_000_000
        await asyncio.sleep(3)  # the last instants' runs are written
        print(f"{args.action}: {answer} in {(ended - began) / 1000:.1f} s")
        print(f"other jobs ({len(others)} FIX_RATE 1 s), quiet {args.quiet_s:.0f} s before: "
              + await _lateness(store, others, began - int(args.quiet_s * 1000), began))
        during = await _lateness(store, others, began, max(ended, began + 1000))
        print("other jobs during the action: " + during)
    finally:
        if node is not None:
            await kill(node)
        await recorder.stop()
        await store.close()
        await adrop_test_database(url)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--action", choices=("retry", "clear"), default="retry")
    parser.add_argument("--subtasks", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=1_000_000, help="plain runs of the group (clear)")
    parser.add_argument("--other-jobs", type=int, default=100)
    parser.add_argument("--quiet-s", type=float, default=10.0)
    parser.add_argument("--limit-s", type=float, default=900.0, help="the API call's timeout")
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    print(f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} cores, "
          f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, load {load}")
    asyncio.run(main(parser.parse_args()))
