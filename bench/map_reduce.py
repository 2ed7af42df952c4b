"""Map-reduce throughput: one run maps N no-op sub-tasks over E jobring executors (processes);
how long until the run ends (its reduce included), and how much the admin's RSS grew.

Target (issue 23): 100,000 sub-tasks over 4 executors in under 60 s with SQLite and
PostgreSQL, admin RSS growth under 200 MB, and no fire of other jobs later than p99 50 ms
meanwhile: ``--other-jobs N`` (default 100) FIX_RATE 1 s jobs on a recording executor fire
during the run; their lateness (``dispatch_time - planned_time`` of the runs planned between
the trigger and the end) is reported as p50 / p99 / max, with the instants that have no run.
Run it under the heavy-work lock:

    flock /tmp/jobring-heavy.lock python bench/map_reduce.py --subtasks 100000 --backend sqlite
    flock /tmp/jobring-heavy.lock python bench/map_reduce.py --subtasks 100000 --backend postgresql
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

from tests.dbs import acreate_test_database, adrop_test_database
from tests.e2e.admin_nodes import (
    ADMIN_PASSWORD,
    TOKEN,
    RecordingExecutor,
    add_manual_group,
    fired,
    free_port,
    kill,
    start_admin,
    start_jobs_together,
)

from jobring.admin.store import Store
from jobring.client import AsyncAdminClient

APP = "mapred-bench"
CODE = '''
from jobring import Executor, JobContext

executor = Executor(app_name="{app}")


@executor.job("fan_out", reduce="total")
def fan_out(ctx: JobContext) -> None:
    ctx.map(list(range(int(ctx.params))), "noop")


@executor.job("noop")
def noop(ctx: JobContext) -> int:
    return 1


@executor.job("total")
def total(ctx: JobContext) -> int:
    return sum(ctx.results())
'''


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def _online(admin: AsyncAdminClient, group: int, count: int) -> None:
    deadline = time.monotonic() + 60
    while len((await admin.groups.get(group)).get("addresses") or []) < count:  # noqa: ASYNC110
        if time.monotonic() > deadline:
            raise SystemExit("the executors did not come online")
        await asyncio.sleep(0.2)


def _percentile(values: list[int], share: float) -> int:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else -1


async def _lateness(store: Store, jobs: set[int], start_ms: int, end_ms: int) -> str:
    """The other jobs' fires planned in [start, end): lateness and instants with no run."""
    rows = [r for r in await fired(store) if r.job_id in jobs and r.planned_time is not None
            and start_ms <= r.planned_time < end_ms]
    late = [int(r.dispatch_time) - int(r.planned_time) for r in rows if r.dispatch_time is not None]
    expected = len(jobs) * ((end_ms - start_ms) // 1000)
    return (f"other jobs: {len(jobs)} FIX_RATE 1 s, {len(rows)} fires planned during the run "
            f"(~{expected} instants), lateness p50 {_percentile(late, 0.5)} ms, "
            f"p99 {_percentile(late, 0.99)} ms, max {max(late, default=-1)} ms, "
            f"undispatched {len(rows) - len(late)}")


async def main(args: argparse.Namespace) -> None:
    work = Path(tempfile.mkdtemp(prefix="jobring-mapred-"))
    url = await acreate_test_database(args.backend, work)
    node = await start_admin(url, "bench", work)
    executors: list[asyncio.subprocess.Process] = []
    recorder = RecordingExecutor()
    store: Store | None = None
    try:
        async with AsyncAdminClient(node.base_url) as admin:
            await admin.login("admin", ADMIN_PASSWORD)
            group = (await admin.groups.create(APP, "bench"))["id"]
            env = {k: v for k, v in os.environ.items() if not k.startswith("JOBRING_")}
            for i in range(args.executors):
                home = work / f"ex{i}"
                home.mkdir()
                (home / "bench_jobs.py").write_text(CODE.format(app=APP))
                port = free_port()
                with (home / "executor.log").open("wb") as out:
                    executors.append(await asyncio.create_subprocess_exec(
                        sys.executable, "-m", "jobring.cli", "executor", "bench_jobs:executor",
                        "--admin", node.base_url + "/xxl-job-admin/", "--token", TOKEN, "--host", "127.0.0.1",
                        "--port", str(port), "--address", f"http://127.0.0.1:{port}/",
                        "--log-path", str(home / "logs"), cwd=home, env=env, stdout=out, stderr=out))
            await _online(admin, group, args.executors)
            others: set[int] = set()
            if args.other_jobs:
                await recorder.start()
                store = await Store.open(url, upgrade=False)
                manual = await add_manual_group(store, recorder.address)
                spacing = 1000 // args.other_jobs
                ids, _ = await start_jobs_together(store, manual, args.other_jobs, spacing, 2_000)
                others = set(ids)
                await asyncio.sleep(4)  # their first fires are due and the admin holds them
            job = await admin.jobs.create(
                {"job_group": group, "job_desc": "bench", "executor_handler": "fan_out"})
            before = rss_mb(node.proc.pid)
            peak = before
            started = time.monotonic()
            started_ms = time.time_ns() // 1_000_000
            run_id = (await admin.jobs.trigger(job["id"], executor_param=str(args.subtasks)))["run_ids"][0]
            progress_at: list[tuple[float, int]] = []
            while True:
                await asyncio.sleep(1.0)
                peak = max(peak, rss_mb(node.proc.pid))
                run = await admin.runs.get(run_id)
                page = await admin.runs.subtasks(run_id, limit=1)
                done = page["progress"]["succeeded"] + page["progress"]["failed"]
                progress_at.append((time.monotonic() - started, done))
                if run["state"] not in ("dispatching", "running"):
                    break
                if time.monotonic() - started > args.limit_s:
                    print(f"gave up after {args.limit_s} s: {done} of {args.subtasks} done")
                    break
            elapsed = time.monotonic() - started
            ended_ms = time.time_ns() // 1_000_000
            print(f"backend={args.backend} subtasks={args.subtasks} executors={args.executors}")
            print(f"state={run['state']} elapsed={elapsed:.1f}s rate={args.subtasks / elapsed:,.0f}/s")
            print(f"admin RSS before={before:.0f} MB peak={peak:.0f} MB growth={peak - before:.0f} MB")
            print("handle_msg:", (run.get("handle_msg") or "")[:200])
            step = max(1, len(progress_at) // 10)
            print("progress (s, done):", [(round(t, 1), d) for t, d in progress_at[::step]])
            if store is not None:
                await asyncio.sleep(2)  # the last instants' runs are written
                print(await _lateness(store, others, started_ms, ended_ms - 1_000))
    finally:
        if store is not None:
            await store.close()
        await recorder.stop()
        for process in executors:
            if process.returncode is None:
                process.kill()
                await process.wait()
        await kill(node)
        await adrop_test_database(url)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--subtasks", type=int, default=100_000)
    parser.add_argument("--executors", type=int, default=4)
    parser.add_argument("--backend", choices=("sqlite", "postgresql", "mariadb"), default="sqlite")
    parser.add_argument("--limit-s", type=float, default=600.0)
    parser.add_argument("--other-jobs", type=int, default=100,
                        help="FIX_RATE 1 s jobs firing meanwhile, their lateness measured (0: none)")
    asyncio.run(main(parser.parse_args()))
