"""Where a workflow node start spends its time, in process: each database transaction between a
parent's callback and its child's ``/run``, timed from the callback's arrival.

    .venv/bin/python bench/workflow_stages.py --backend sqlite --chain 60
    .venv/bin/python bench/workflow_stages.py --backend postgresql --chain 60

The admin's parts as the app wires them (the callback service, the workflow driver, the
trigger) over a real store, the executor double of the tests (in memory: no HTTP hop). A chain
of ``--chain`` nodes, ``--runs`` runs: ``--gap-ms`` after a node's ``/run`` its success
callback is handed to the callback service, as the executor API would, and every transaction
opened from then until the next callback is timed (its repository method, start and end in ms
after the callback). The table: per stage, the median start and end, and how many of the
samples had it; the stages after the child's ``/run`` are the ones a next callback may wait
behind. To measure another checkout, put its ``src`` first on ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from jobring.admin.alarms.service import AlarmService
from jobring.admin.alarms.setup import alarmer_from_settings
from jobring.admin.dispatch.client import ExecutorClient
from jobring.admin.distributed.service import DistributedService
from jobring.admin.services.callbacks import CallbackService
from jobring.admin.services.settings import AdminSettings
from jobring.admin.services.workflows import WorkflowDriver
from jobring.admin.store import Store
from jobring.core.workflow import parse_workflow
from jobring.protocol.models import HandleCallbackParam, ReturnT

sys.path.append(str(Path(__file__).resolve().parent.parent))  # tests: databases, the double
from tests.admin.trigger_kit import HOSTS, T0, make_env  # noqa: E402
from tests.dbs import acreate_test_database, adrop_test_database  # noqa: E402

_STORE_DIR = os.sep + os.path.join("admin", "store") + os.sep
_NOT_REPOSITORIES = ("engine.py", "write_gate.py", "base.py")


def _caller() -> str:
    """The repository method that opened the transaction (module.function)."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if _STORE_DIR in name and not name.endswith(_NOT_REPOSITORIES):
            return f"{Path(name).stem}.{frame.f_code.co_name}"
        frame = frame.f_back  # type: ignore[assignment]
    return "?"


class Timeline:
    """Spans (label, start, end) in ns after ``origin``."""

    def __init__(self) -> None:
        self.origin = 0
        self.spans: list[tuple[str, int, int]] = []

    def restart(self) -> None:
        self.origin = time.perf_counter_ns()
        self.spans = []

    def add(self, label: str, start: int, end: int) -> None:
        self.spans.append((label, start - self.origin, end - self.origin))

    def timed(self, kind: str, real: Callable[..., Any]) -> Callable[..., Any]:
        @asynccontextmanager
        async def opened(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            label = f"{_caller()} ({kind})"
            start = time.perf_counter_ns()
            try:
                async with real(*args, **kwargs) as conn:
                    yield conn
            finally:
                self.add(label, start, time.perf_counter_ns())
        return opened


async def measure(store: Store, chain: int, runs: int, gap_s: float) -> tuple[list[float], list[list[Any]]]:
    env = await make_env(store, HOSTS[:1])
    driver = WorkflowDriver(store, env.trigger, None, env.clock, node_id="node-a")
    # As the app wires them: recovery alarms and distributed parents look at every result.
    alarms = AlarmService(store, alarmer_from_settings(AdminSettings()))
    callbacks = CallbackService(store, env.trigger, env.clock, alarms=alarms)
    callbacks.results_listener = driver.notify
    distributed = DistributedService(store, ExecutorClient(access_token="tok", connect=env.double.connect),
                                     env.clock, node_id="node-a")
    distributed.record = callbacks.handle
    callbacks.distributed = distributed
    timeline = Timeline()
    arrived: dict[str, tuple[int, int]] = {}
    waiting: dict[str, asyncio.Future[tuple[int, int]]] = {}

    async def run(body: dict[str, Any]) -> ReturnT:
        at = time.perf_counter_ns()
        key = str(body["executorParams"])
        arrived[key] = (int(body["logId"]), at)
        if key in waiting and not waiting[key].done():
            waiting[key].set_result(arrived[key])
        return ReturnT.success()

    async def wait(key: str) -> tuple[int, int]:
        if key not in arrived:
            waiting[key] = asyncio.get_running_loop().create_future()
            await asyncio.wait_for(waiting[key], 30)
        return arrived[key]

    env.double.answer(env.double.addresses[0], "run", run)
    job = await env.job()
    db = store.db
    db.read = timeline.timed("read", db.read)  # type: ignore[method-assign]
    db.write = timeline.timed("write", db.write)  # type: ignore[method-assign]
    starts: list[float] = []
    cycles: list[list[Any]] = []
    try:
        for r in range(runs):
            keys = [f"r{r}-{i}" for i in range(chain)]
            doc = {"nodes": [{"key": k, "job_id": job.id, "params": k} for k in keys],
                   "edges": [{"from": a, "to": b} for a, b in zip(keys, keys[1:], strict=False)]}
            graph = parse_workflow(doc)
            wf = await store.workflows.create(f"w{r}", env.group_id, "", graph.to_json(), None, T0)
            record = await store.workflows.get(wf)
            assert record is not None
            await driver.start_run(record, {}, None)
            log_id, _ = await wait(keys[0])
            for key in keys[1:]:
                await asyncio.sleep(gap_s)
                timeline.restart()
                await callbacks.handle([HandleCallbackParam(log_id, T0, 200, "ok")])
                timeline.add("callback answered", timeline.origin, time.perf_counter_ns())
                log_id, at = await wait(key)
                timeline.add("child's /run", at, at)
                starts.append((at - timeline.origin) / 1e6)
                # The spans of this cycle end at the next callback (after the gap).
                cycles.append(timeline.spans)
            await asyncio.sleep(gap_s)
            await callbacks.handle([HandleCallbackParam(log_id, T0, 200, "ok")])
            await driver.wait_idle()
    finally:
        await driver.wait_idle()
        await callbacks.close()
        await env.trigger.close()
    return starts, cycles


def table(starts: list[float], cycles: list[list[Any]]) -> list[str]:
    by_stage: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for spans in cycles:
        seen: dict[str, int] = {}
        for label, start, end in sorted(spans, key=lambda s: s[1]):
            n = seen[label] = seen.get(label, 0) + 1  # the 2nd read of one method is its own stage
            by_stage.setdefault((label, n), []).append((start / 1e6, end / 1e6))
    rows = []
    for (label, n), samples in by_stage.items():
        begin = statistics.median(s for s, _ in samples)
        end = statistics.median(e for _, e in samples)
        name = label if n == 1 else f"{label} #{n}"
        rows.append((begin, f"| {name} | {len(samples)} | {begin:.1f} | {end:.1f} | {end - begin:.1f} |"))
    ordered = sorted(starts)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return [f"node start (callback -> child's /run), {len(starts)} samples: median "
            f"{statistics.median(starts):.1f} ms, p99 {p99:.1f} ms, max {max(starts):.1f} ms", "",
            "| stage | samples | median start ms | median end ms | median length ms |",
            "|---|---:|---:|---:|---:|"] + [line for _, line in sorted(rows)]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="sqlite", choices=["sqlite", "postgresql", "mariadb"])
    parser.add_argument("--chain", type=int, default=60)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--gap-ms", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="jobring-wf-stages-") as tmp:
        url = await acreate_test_database(args.backend, Path(tmp))
        store = await Store.open(url)
        try:
            starts, cycles = await measure(store, args.chain, args.runs, args.gap_ms / 1000)
        finally:
            await store.close()
            await adrop_test_database(url)
    load = os.getloadavg()
    print(f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {args.backend}, Python {platform.python_version()}, "
          f"{os.cpu_count()} cores, load {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    print("\n".join(table(starts, cycles)))


if __name__ == "__main__":
    asyncio.run(main())
