"""Workflow latency through a real admin process: how soon a node starts after its last
parent's callback, and how fast a 1,000-node run's page answers.

    .venv/bin/python bench/workflow_latency.py --backend sqlite
    .venv/bin/python bench/workflow_latency.py --backend postgresql

One ``jobring admin`` process on a fresh database; this script is the executor (it answers
``/run`` at once and records when each arrives) and posts each node's success callback itself,
as an executor would:

* node start: chains of ``--chain`` nodes, ``--runs`` runs after ``--warmup-runs`` (reported
  apart: the admin process is new, its first statements are compiled and prepared then). For
  each node the script waits ``--gap-ms`` after its ``/run`` arrived (a job runs for a while),
  posts its callback, and
  times until the next node's ``/run`` reaches the executor (callback arrival at the admin ->
  the child's ``/run`` at the executor, both on loopback). A callback arrives when its bytes
  are handed to the socket: they are written in one call on a kept-alive connection
  (``--callbacks socket``, the default). Through httpx (``--callbacks httpx``, what this bench
  did until 2026-11-30) the instant is taken before the call, and the client's own work
  before the bytes leave (1.2-1.4 ms on this machine, more in its tail) counted as the
  admin's. Also the same over one 1,000-node
  chain (the largest run state a chain has) and the sink of a wide run (the callback of the
  last of its 998 parents; `--wide-runs` of them, one sample each).
* run page: ``GET /api/v1/workflow-runs/{id}`` of the finished 1,000-node runs, wide (one
  root, 998 in parallel, a sink) and deep (a chain), timed through the Python client (its JSON
  decoding included), ``--gets`` times each.
* validate before save: ``POST /api/v1/workflows/validate`` of a 1,000-node graph, deep and
  wide (the save's checks: the body, the graph, every node's job read; nothing stored), timed
  the same way, ``--gets`` times each.

To measure another checkout, put its ``src`` first: ``PYTHONPATH=/path/to/checkout/src``.

This process's cyclic GC is off while it measures: one of its own full collections (~80 ms,
always in the first chain) landed between a callback's send and the next ``/run``'s arrival
and read as the admin's latency.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import orjson

from jobring.client import AsyncAdminClient

sys.path.append(str(Path(__file__).resolve().parent.parent))  # tests: databases, admin processes
from tests.dbs import acreate_test_database, adrop_test_database  # noqa: E402
from tests.e2e.admin_nodes import (  # noqa: E402
    ADMIN_PASSWORD,
    TOKEN,
    RecordingExecutor,
    kill,
    now_ms,
    start_admin,
)

CALLBACK = "/xxl-job-admin/api/callback"


class TimedExecutor(RecordingExecutor):
    """Records each ``/run``'s node key (its params), run id and arrival (perf_counter ns)."""

    def __init__(self) -> None:
        super().__init__()
        self.arrived: dict[str, tuple[int, int]] = {}
        self._waiters: dict[str, asyncio.Future[tuple[int, int]]] = {}

    def record(self, path: bytes, body: bytes) -> bytes:
        at = time.perf_counter_ns()
        answer = super().record(path, body)
        if path.rstrip(b"/").endswith(b"/run"):
            param = orjson.loads(body)
            key = str(param.get("executorParams") or "")
            self.arrived[key] = (int(param["logId"]), at)
            waiter = self._waiters.pop(key, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(self.arrived[key])
        return answer

    async def wait(self, key: str, limit_s: float = 60.0) -> tuple[int, int]:
        if key in self.arrived:
            return self.arrived[key]
        waiter = self._waiters.setdefault(key, asyncio.get_running_loop().create_future())
        return await asyncio.wait_for(waiter, limit_s)

    def reset(self) -> None:
        self.arrived.clear()


def results(log_ids: list[int]) -> bytes:
    return orjson.dumps([{"logId": i, "logDateTim": now_ms(), "handleCode": 200, "handleMsg": None}
                         for i in log_ids])


class HttpxCallbacks:
    """Posts callbacks through httpx (``--callbacks httpx``): the instant taken before the call,
    so the client's own work before its bytes leave counts as the admin's."""

    def __init__(self, http: httpx.AsyncClient) -> None:
        self._http = http

    async def post(self, log_ids: list[int]) -> int:
        sent = time.perf_counter_ns()
        r = await self._http.post(CALLBACK, headers={"XXL-JOB-ACCESS-TOKEN": TOKEN}, content=results(log_ids))
        assert r.status_code == 200 and r.json()["code"] == 200, r.text
        return sent

    async def close(self) -> None:
        pass


class SocketCallbacks:
    """Posts callbacks on one kept-alive HTTP/1.1 connection, each written in one call; the
    instant a callback reaches the admin is taken right after its bytes are handed to the
    socket (loopback: the admin can read them then)."""

    IDLE_S = 4.0  # a connection idle longer is replaced first (uvicorn drops it after 5 s)

    def __init__(self, base_url: str) -> None:
        url = httpx.URL(base_url)
        self._host, self._port = url.host, url.port or 80
        self._conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self._used = 0.0

    async def post(self, log_ids: list[int]) -> int:
        if (self._conn is None or self._conn[1].is_closing() or self._conn[0].at_eof()
                or time.monotonic() - self._used > self.IDLE_S):
            await self.close()
            self._conn = await asyncio.open_connection(self._host, self._port)
            await asyncio.sleep(0.01)  # the admin accepts it meanwhile, not in the measured time
        reader, writer = self._conn
        body = results(log_ids)
        head = (f"POST {CALLBACK} HTTP/1.1\r\nHost: {self._host}:{self._port}\r\n"
                f"XXL-JOB-ACCESS-TOKEN: {TOKEN}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()
        writer.write(head + body)
        sent = time.perf_counter_ns()
        status, headers, answer = await asyncio.wait_for(self._answer(reader), 60)
        assert status == 200 and orjson.loads(answer)["code"] == 200, (status, answer)
        if headers.get("connection", "").lower() == "close":
            await self.close()
        self._used = time.monotonic()
        return sent

    @staticmethod
    async def _answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
        lines = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        fields = (line.partition(":") for line in lines[1:] if line)
        headers = {name.strip().lower(): value.strip() for name, _, value in fields}
        if headers.get("transfer-encoding", "").lower() != "chunked":
            return status, headers, await reader.readexactly(int(headers["content-length"]))
        body = b""
        while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
            body += await reader.readexactly(size)
            await reader.readexactly(2)
        await reader.readuntil(b"\r\n")  # the last chunk's end (no trailers are sent)
        return status, headers, body

    async def close(self) -> None:
        if self._conn is not None:
            self._conn[1].close()
            self._conn = None


def chain(name: str, group: int, job_id: int, size: int) -> dict[str, Any]:
    keys = [f"{name}-{i}" for i in range(size)]
    return {"name": name, "job_group": group,
            "nodes": [{"key": k, "job_id": job_id, "params": k} for k in keys],
            "edges": [{"from": a, "to": b} for a, b in zip(keys, keys[1:], strict=False)]}


def wide(name: str, group: int, job_id: int, size: int) -> dict[str, Any]:
    keys = [f"{name}-{i}" for i in range(size)]
    middle = keys[1:-1]
    return {"name": name, "job_group": group,
            "nodes": [{"key": k, "job_id": job_id, "params": k} for k in keys],
            "edges": [{"from": keys[0], "to": k} for k in middle]
            + [{"from": k, "to": keys[-1]} for k in middle]}


class Bench:
    def __init__(self, admin: AsyncAdminClient, callbacks: HttpxCallbacks | SocketCallbacks,
                 executor: TimedExecutor, group: int, job_id: int, gap_ms: int) -> None:
        self.admin, self.callbacks, self.executor = admin, callbacks, executor
        self.group, self.job_id, self.gap_s = group, job_id, gap_ms / 1000

    async def ended(self, run_id: int) -> dict[str, Any]:
        for _ in range(600):
            run = await self.admin.workflows.run(run_id)
            if run["state"] != "running":
                return run
            await asyncio.sleep(0.1)
        raise AssertionError(f"run {run_id} did not end")

    async def run_chain(self, doc: dict[str, Any]) -> tuple[int, list[float]]:
        """Trigger a chain and walk it; (run id, ms from each callback to the next /run)."""
        keys = [n["key"] for n in doc["nodes"]]
        workflow = await self.admin.workflows.create(doc)
        run_id = int((await self.admin.workflows.trigger(workflow["id"]))["workflow_run_id"])
        samples = []
        log_id, _ = await self.executor.wait(keys[0])
        for key in keys[1:]:
            await asyncio.sleep(self.gap_s)
            sent = await self.callbacks.post([log_id])
            log_id, arrived = await self.executor.wait(key)
            samples.append((arrived - sent) / 1e6)
        await asyncio.sleep(self.gap_s)
        await self.callbacks.post([log_id])
        assert (await self.ended(run_id))["state"] == "success"
        return run_id, samples

    async def run_wide(self, doc: dict[str, Any]) -> tuple[int, float]:
        """Trigger a wide run, finish its middle in batches of 50; ms from the last parent's
        callback to the sink's /run."""
        keys = [n["key"] for n in doc["nodes"]]
        workflow = await self.admin.workflows.create(doc)
        run_id = int((await self.admin.workflows.trigger(workflow["id"]))["workflow_run_id"])
        root, _ = await self.executor.wait(keys[0])
        await self.callbacks.post([root])
        middle = [(await self.executor.wait(k))[0] for k in keys[1:-1]]
        await asyncio.sleep(0.5)  # let the admin link the fires before the results come
        for start in range(0, len(middle) - 1, 50):
            await self.callbacks.post(middle[start:min(start + 50, len(middle) - 1)])
        await asyncio.sleep(2.0)  # every earlier result applied: the next is the last parent's
        sent = await self.callbacks.post(middle[-1:])
        sink, arrived = await self.executor.wait(keys[-1])
        await self.callbacks.post([sink])
        assert (await self.ended(run_id))["state"] == "success"
        return run_id, (arrived - sent) / 1e6

    async def page(self, run_id: int, gets: int) -> tuple[list[float], int]:
        samples = []
        size = 0
        for _ in range(gets):
            start = time.perf_counter_ns()
            run = await self.admin.workflows.run(run_id)
            samples.append((time.perf_counter_ns() - start) / 1e6)
            size = len(run["nodes"])
        return samples, size

    async def validate(self, definition: dict[str, Any], times: int) -> list[float]:
        """``POST /workflows/validate`` of ``definition`` (stores nothing), timed as ``page``."""
        samples = []
        for _ in range(times):
            start = time.perf_counter_ns()
            answer = await self.admin.workflows.validate(definition)
            samples.append((time.perf_counter_ns() - start) / 1e6)
            assert answer["nodes"] == len(definition["nodes"]), answer
        return samples


def p99(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def row(name: str, samples: list[float]) -> str:
    return (f"| {name} | {len(samples)} | {statistics.median(samples):.1f} | {p99(samples):.1f} | "
            f"{max(samples):.1f} |")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="sqlite", choices=["sqlite", "postgresql", "mariadb"])
    parser.add_argument("--chain", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--warmup-runs", type=int, default=1,
                        help="chains run first and reported apart (the admin process is new)")
    parser.add_argument("--big", type=int, default=1_000, help="nodes of the wide and deep runs")
    parser.add_argument("--gap-ms", type=int, default=20)
    parser.add_argument("--wide-runs", type=int, default=1,
                        help="wide runs, one sink start sample each (their pages: the last one's)")
    parser.add_argument("--gets", type=int, default=30)
    parser.add_argument("--admin-log", type=Path, help="copy the admin's log here")
    parser.add_argument("--callbacks", default="socket", choices=["socket", "httpx"],
                        help="how callbacks are posted (see the docstring)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="jobring-wf-latency-") as tmp:
        workdir = Path(tmp)
        url = await acreate_test_database(args.backend, workdir)
        executor = TimedExecutor()
        await executor.start()
        node = await start_admin(url, "bench", workdir)
        try:
            lines = await measure(args, node.base_url, executor)
        finally:
            await kill(node)
            await executor.stop()
            if args.admin_log is not None:
                shutil.copy(node.log_file, args.admin_log)
            await adrop_test_database(url)
    load = os.getloadavg()
    print(f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {args.backend}, Python {platform.python_version()}, "
          f"{os.cpu_count()} cores, load {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}, "
          f"callbacks by {args.callbacks}")
    print("\n".join(lines))


async def measure(args: argparse.Namespace, base_url: str, executor: TimedExecutor) -> list[str]:
    gc.collect()
    gc.disable()  # the measuring process's pauses are not the admin's (see the docstring)
    try:
        return await _measure(args, base_url, executor)
    finally:
        gc.enable()


async def _measure(args: argparse.Namespace, base_url: str, executor: TimedExecutor) -> list[str]:
    async with AsyncAdminClient(base_url) as admin, httpx.AsyncClient(base_url=base_url, timeout=60) as http:
        await admin.login("admin", ADMIN_PASSWORD)
        group = int((await admin.groups.create("wf-latency", "bench", [executor.address]))["id"])
        job = await admin.jobs.create({"job_group": group, "job_desc": "node", "executor_handler": "node"})
        callbacks = SocketCallbacks(base_url) if args.callbacks == "socket" else HttpxCallbacks(http)
        bench = Bench(admin, callbacks, executor, group, int(job["id"]), args.gap_ms)
        try:
            warm: list[float] = []
            for i in range(args.warmup_runs):  # the admin's first statements, compiles and prepares
                warm += (await bench.run_chain(chain(f"w{i}", group, bench.job_id, args.chain)))[1]
            starts: list[float] = []
            for i in range(args.runs):
                starts += (await bench.run_chain(chain(f"c{i}", group, bench.job_id, args.chain)))[1]
            deep_id, deep_starts = await bench.run_chain(chain("deep", group, bench.job_id, args.big))
            sinks: list[float] = []
            for i in range(args.wide_runs):
                wide_id, sink_ms = await bench.run_wide(wide(f"wide{i}", group, bench.job_id, args.big))
                sinks.append(sink_ms)
            deep_page, deep_nodes = await bench.page(deep_id, args.gets)
            wide_page, wide_nodes = await bench.page(wide_id, args.gets)
            deep_check = await bench.validate(chain("check-deep", group, bench.job_id, args.big), args.gets)
            wide_check = await bench.validate(wide("check-wide", group, bench.job_id, args.big), args.gets)
        finally:
            await callbacks.close()
    return [
        "| what | samples | median ms | p99 ms | max ms |",
        "|---|---:|---:|---:|---:|",
        *([row(f"node start, warm-up ({args.warmup_runs} first chains, not in the row below)", warm)]
          if warm else []),
        row(f"node start after its parent's callback ({args.chain}-node chains)", starts),
        row(f"node start after its parent's callback ({args.big}-node chain)", deep_starts),
        row(f"sink start after its last parent's callback (wide, {args.big - 2} parents)", sinks),
        row(f"GET /workflow-runs/{{id}}, deep ({deep_nodes} nodes, finished)", deep_page),
        row(f"GET /workflow-runs/{{id}}, wide ({wide_nodes} nodes, finished)", wide_page),
        row(f"POST /workflows/validate, deep ({args.big} nodes)", deep_check),
        row(f"POST /workflows/validate, wide ({args.big} nodes, {2 * (args.big - 2)} edges)", wide_check),
    ]


if __name__ == "__main__":
    asyncio.run(main())
