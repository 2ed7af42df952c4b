"""The store side of a map run, without executors or HTTP: where the database time of
sub-tasks goes (issue 23). One run maps N sub-tasks in calls of 1,000 (``add_map_call``),
then rounds like the admin's pump (``pending_runs``, ``load``, ``claim`` for 4 executors
with a window of 2,000 and batches of 500) alternate with result batches of 1,000
(``apply``) until every sub-task succeeded. Prints the time per store call and the SQL
statements that took the most time in total (first 90 characters). Serial: the real admin
overlaps the map calls with the dispatch.

    flock /tmp/jobring-heavy.lock timeout 900 python bench/subtask_store.py --subtasks 20000
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import sys
import time
from collections import defaultdict
from collections.abc import Awaitable
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import event

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests.dbs: throwaway databases

from tests.dbs import acreate_test_database, adrop_test_database  # noqa: E402

from jobring.admin.store import JobInfo, NewLog, Store  # noqa: E402
from jobring.admin.store.subtasks import ClaimedTask, NewSubTask, TaskUpdate  # noqa: E402
from jobring.core.distributed import Finished  # noqa: E402

T = TypeVar("T")
EXECUTORS = [f"http://e{i}/" for i in range(4)]


class Timings:
    def __init__(self) -> None:
        self.calls: dict[str, list[float]] = defaultdict(list)
        self.statements: dict[str, float] = defaultdict(float)
        self.counts: dict[str, int] = defaultdict(int)

    async def time(self, name: str, work: Awaitable[T]) -> T:
        started = time.perf_counter()
        try:
            return await work
        finally:
            self.calls[name].append(time.perf_counter() - started)

    def listen(self, store: Store) -> None:
        def before(conn: Any, *_: Any) -> None:
            conn.info["bench_t"] = time.perf_counter()

        def after(conn: Any, _cursor: Any, statement: str, _params: Any, _context: Any, many: bool) -> None:
            key = ("MANY " if many else "") + " ".join(statement.split())[:90]
            self.statements[key] += time.perf_counter() - conn.info["bench_t"]
            self.counts[key] += 1

        event.listen(store.engine.sync_engine, "before_cursor_execute", before)
        event.listen(store.engine.sync_engine, "after_cursor_execute", after)


async def main(args: argparse.Namespace) -> None:
    url = await acreate_test_database(args.backend, Path("/tmp"))
    store = await Store.open(url)
    timings = Timings()
    timings.listen(store)
    try:
        job = await store.jobs.create(JobInfo(job_group=1, job_desc="m", executor_handler="root"))
        run = await store.logs.insert(NewLog(job_group=1, job_id=job, trigger_time=datetime(2026, 1, 1),
                                             trigger_code=200))
        started = time.perf_counter()
        for call in range(args.subtasks // 1000):
            tasks = [NewSubTask(f"r/{call}.{i}", "leaf", "map", str(i)) for i in range(1000)]
            await timings.time("add_map_call", store.distributed.add_map_call(run, "r", tasks, None, 1))
        await store.distributed.root_finished([(run, True, None)], 1)
        done, running = 0, list[ClaimedTask]()
        # The claiming node's name where the store takes one (not before issue 23's fixes).
        named = {"node": "bench"} if "node" in inspect.signature(store.distributed.claim).parameters else {}
        while done < args.subtasks:
            await timings.time("pending_runs", store.distributed.pending_runs())
            load = await timings.time("load", store.distributed.load(1))
            slots = [(a, min(500, 2000 - load.get(a, 0))) for a in EXECUTORS]
            running += await timings.time(
                "claim", store.distributed.claim(run, [s for s in slots if s[1] > 0], 1, **named))
            batch, running = running[:1000], running[1000:]
            updates = [TaskUpdate(t.id, Finished(t.attempt, True), "1") for t in batch]
            await timings.time("apply", store.distributed.apply(updates, 2))
            done += len(batch)
        elapsed = time.perf_counter() - started
    finally:
        await store.close()
        await adrop_test_database(url)
    print(f"backend={args.backend} subtasks={args.subtasks}: {elapsed:.1f} s")
    for name, spent in timings.calls.items():
        each = 1000 * sum(spent) / len(spent)
        print(f"  {name:13s} {len(spent):5d} calls, {sum(spent):6.2f} s, {each:7.1f} ms each")
    print("  statements by total time:")
    for key, spent in sorted(timings.statements.items(), key=lambda kv: -kv[1])[:10]:
        print(f"  {spent:6.2f} s {timings.counts[key]:6d}x  {key}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--subtasks", type=int, default=20_000)
    parser.add_argument("--backend", choices=("sqlite", "postgresql", "mariadb"), default="postgresql")
    asyncio.run(main(parser.parse_args()))
