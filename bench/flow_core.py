"""Cost of the pure flow-control and distributed-job decisions (CPU time, best of R runs).

Run: .venv/bin/python bench/flow_core.py [--repeats R]

- one admission pass (``jobring.core.flow.admit``) over Q queued runs in 50 keys, 30 active
  runs, a group limit of 30, per-job and per-key limits and five rate-limited keys: the work
  the admin does under its admission lock per pass;
- shard assignment of 10,000 shards over 5 executors, and the reassignment after one dies;
- the map path for 100,000 sub-tasks: 100 ``plan_map`` calls of 1,000 items, then one
  ``apply_event`` + ``progress_after`` + ``join`` per dispatch and per result.
"""

from __future__ import annotations

import argparse
import platform
import time
from collections.abc import Callable
from functools import partial

from jobring.core.distributed import (
    ROOT_KEY,
    Dispatched,
    FailureTolerance,
    Finished,
    Progress,
    Spread,
    Task,
    TaskPolicy,
    apply_event,
    assign_shards,
    join,
    plan_map,
    progress_after,
    reassign_shards,
)
from jobring.core.flow import (
    ConcurrencyLimit,
    FlowSnapshot,
    QueuedRun,
    RateLimit,
    RunningRun,
    admit,
    group_scope,
    job_scope,
    key_scope,
    run_scopes,
)

T0 = 1_700_000_000_000
EXECUTORS = [f"http://10.0.0.{i}:9999/" for i in range(1, 6)]


def best_cpu_ms(work: Callable[[], object], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        work()
        best = min(best, time.process_time() - start)
    return best * 1000


def admission_snapshot(queued: int) -> FlowSnapshot:
    runs = [QueuedRun(i, run_scopes(i % 40, 1, group_key=f"tenant-{i % 50}"), T0 + i, 1 + i % 3)
            for i in range(queued)]
    running = [RunningRun(10**7 + i, run_scopes(i % 40, 1, group_key=f"tenant-{i % 50}"), T0 - 1000)
               for i in range(30)]
    limits = {group_scope(1): ConcurrencyLimit(60)}
    limits.update({job_scope(j): ConcurrencyLimit(3) for j in range(40)})
    limits.update({key_scope(group_scope(1), f"tenant-{k}"): ConcurrencyLimit(2) for k in range(50)})
    rates = {key_scope(group_scope(1), f"tenant-{k}"): RateLimit(5, 1000) for k in range(5)}
    return FlowSnapshot(runs, running, limits, rates)


def first_executor_dies(shards: tuple[str, ...], spread: Spread) -> dict[int, str]:
    return reassign_shards(shards, EXECUTORS[1:], range(0, len(shards), 2), spread, job_key="7")


def map_path() -> None:
    policy, tolerance = TaskPolicy(max_retries=1), FailureTolerance.parse("1%")
    keys: list[str] = []
    for call in range(100):
        keys.extend(s.key for s in plan_map(ROOT_KEY, call, "work", [{"n": i} for i in range(1000)],
                                            subtasks_so_far=len(keys)))
    progress = Progress(len(keys))
    for _ in keys:
        task = Task()
        for event in (Dispatched(1, EXECUTORS[0]), Finished(1, ok=True)):
            new = apply_event(task, event, policy)
            assert new is not None
            progress = progress_after(progress, task.state, new.state)
            join(progress, tolerance)
            task = new
    assert join(progress, tolerance).finished


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"Python {platform.python_version()} {platform.machine()}, best of {args.repeats}, CPU ms\n")
    print("| work | CPU ms |")
    print("|---|---|")
    for queued in (100, 1_000, 10_000):
        snapshot = admission_snapshot(queued)
        cost = best_cpu_ms(partial(admit, snapshot, T0 + 60_000), args.repeats)
        print(f"| admit(): {queued:,} queued, 30 active | {cost:.1f} |")
    for spread in Spread:
        cost = best_cpu_ms(partial(assign_shards, 10_000, EXECUTORS, spread, job_key="7"), args.repeats)
        print(f"| assign_shards 10,000 over 5, {spread.value} | {cost:.1f} |")
    for spread in Spread:
        shards = assign_shards(10_000, EXECUTORS, spread, job_key="7")
        cost = best_cpu_ms(partial(first_executor_dies, shards, spread), args.repeats)
        print(f"| reassign_shards 10,000 (half done), one of 5 dead, {spread.value} | {cost:.1f} |")
    cost = best_cpu_ms(map_path, max(1, args.repeats // 2))
    print(f"| map path, 100,000 sub-tasks (plan_map + 2 events and a join each) | {cost:.1f} |")


if __name__ == "__main__":
    main()
