"""Flow control on two admin nodes: a group concurrency limit over many runs due together.

    .venv/bin/python bench/flow_limits.py --runs 1000 --limit 30 --work-ms 200 --backend postgresql

Issue 22's target: "A concurrency limit of 30 across 1,000 due runs is never exceeded (sampled
every 10 ms) on 2 admin nodes, and the 1,000 runs finish." Starts two real admin processes
(`jobring admin`) on a new database, a working executor double in this process (each run
works ``--work-ms``, then its result is called back to the admin nodes in turn; it counts the
runs it has at once, sampled every 10 ms and at every start), gives the group
``max_concurrent_runs = --limit``, creates ``--runs`` jobs that each fire once, all due within
``--spread-ms``, and waits for every run to finish. Prints the peaks, how long the runs took
against the ideal (runs / limit * work), the runs each node recorded and admitted, and the
admission's end-to-end rate.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests: throwaway databases, admin nodes, the executor double

from tests.dbs import acreate_test_database, adrop_test_database  # noqa: E402
from tests.e2e.admin_nodes import add_manual_group, start_admin, stop  # noqa: E402
from tests.e2e.flow_kit import WorkingExecutor, due_together, run_nodes, until  # noqa: E402

from jobring.admin.store import Store, create_engine, upgrade_database  # noqa: E402
from jobring.core.flow.settings import FlowSettings  # noqa: E402


async def bench(runs: int, limit: int, work_ms: int, backend: str, spread_ms: int,
                lead_ms: int) -> dict[str, object]:
    workdir = Path(tempfile.mkdtemp(prefix="jobring-flow-bench-"))
    url = await acreate_test_database(backend, workdir)
    await upgrade_database(url)
    store = Store(create_engine(url))
    nodes = []
    executor: WorkingExecutor | None = None
    try:
        nodes.append(await start_admin(url, "flow-a", workdir, "--log-level", "warning"))
        nodes.append(await start_admin(url, "flow-b", workdir, "--log-level", "warning"))
        executor = WorkingExecutor(admin_urls=[n.base_url for n in nodes], work_ms=work_ms)
        await executor.start()
        group = await add_manual_group(store, executor.address)
        await store.flow.set_group_flow(group, FlowSettings(max_concurrent_runs=limit).to_json())
        created = time.monotonic()
        spacing = max(0, spread_ms // max(1, runs))
        _, first = await due_together(store, group, runs, lead_ms, spacing_ms=spacing)
        print(f"{runs} jobs created in {time.monotonic() - created:.1f} s", flush=True)
        due_wait = (first - time.time() * 1000) / 1000
        await asyncio.sleep(max(0.0, due_wait))
        started = time.monotonic()
        await until(lambda: len(executor.finished) >= runs, 60 + runs * work_ms / limit / 1000 * 5,
                    f"{runs} runs to finish", step_s=0.02)
        took = time.monotonic() - started
        ideal = runs / limit * work_ms / 1000
        return {
            "runs": runs, "finished": len(executor.finished), "limit": limit, "work_ms": work_ms,
            "peak_sampled": executor.peak, "peak_exact": executor.exact_peak, "samples": executor.samples,
            "seconds": round(took, 2), "ideal_seconds": round(ideal, 2), "runs_per_s": round(runs / took, 1),
            "per_node": await run_nodes(store), "exceeded": executor.exact_peak > limit,
        }
    finally:
        if executor is not None:
            await executor.stop()
        for node in nodes:
            await stop(node)
        await store.close()
        await adrop_test_database(url)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--limit", type=int, default=30)
    parser.add_argument("--work-ms", type=int, default=200, help="how long each run works")
    parser.add_argument("--backend", default="postgresql", choices=("postgresql", "mariadb"))
    parser.add_argument("--spread-ms", type=int, default=1000, help="the runs come due within this")
    parser.add_argument("--lead-ms", type=int, default=8000, help="from the jobs' creation to the first due")
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()}", flush=True)
    result = asyncio.run(bench(args.runs, args.limit, args.work_ms, args.backend, args.spread_ms,
                               args.lead_ms))
    print(result)
    print(f"load average after: {os.getloadavg()}")
    if result["exceeded"] or result["finished"] != args.runs:
        sys.exit(1)


if __name__ == "__main__":
    main()
