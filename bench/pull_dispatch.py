"""Pull vs push dispatch through one jobring executor, side by side in one run.

    .venv/bin/python bench/pull_dispatch.py [--duration-s 8] [--concurrency 64] [--paced-rate 100]

This process plays the admin: the admin's own ExecutorClient sends /run calls (push: its
HTTP/1.1 client to the executor's port; pull: the PullHub mailbox, taken by the executor's
long poll on ``api/pull`` served by uvicorn with the admin's PullApi), and a minimal
``api/registry`` / ``api/callback`` counts results. One executor process (a no-op handler)
runs first in push mode, then in pull mode (admin CPU and executor CPU: each process's busy
share of one core during the throughput step). Two steps per mode:

* throughput: ``--concurrency`` /run calls in flight for ``--duration-s``; runs/s counts
  results (callbacks) received;
* latency: ``--paced-rate`` runs/s, one at a time; dispatch latency is /run sent -> /run
  answered, as the trigger records it (p50/p99).

``--idle-pollers N`` adds a last step: N more pull executors (simulated by one process that
keeps N long polls open, each its own pull:// address) connect first; this process's RSS
growth with them connected is reported, and the pull steps run again beside them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import psutil
from dispatch_kit import BenchAdmin, free_port, serving

from jobring.admin.dispatch.client import ExecutorClient

TOKEN = "bench-pull-token-0123456789"
APP = "bench-pull"


POLLERS = """
import asyncio, httpx, orjson
async def poll(client, i):
    body = orjson.dumps({"address": f"pull://idle-{i}/", "appname": %(app)r, "wait_ms": 20000})
    while True:
        try:
            await client.post(%(url)r, content=body, headers={"XXL-JOB-ACCESS-TOKEN": %(token)r})
        except httpx.HTTPError:
            await asyncio.sleep(1)
async def main():
    limits = httpx.Limits(max_connections=%(n)d + 10, max_keepalive_connections=%(n)d + 10)
    async with httpx.AsyncClient(limits=limits, timeout=60) as client:
        await asyncio.gather(*(poll(client, i) for i in range(%(n)d)))
asyncio.run(main())
"""

EXECUTOR = """
import sys
from jobring.executor.executor import Executor
ex = Executor(app_name=%(app)r, admin_addresses=[%(admin)r], access_token=%(token)r, host="127.0.0.1",
              port=%(port)d, log_path=%(logs)r, dispatch=%(mode)r, callback_batch_size=1000)

@ex.job("noop")
async def noop(ctx):
    return None

ex.run(ready=lambda a: print("ready", a, flush=True))
"""


async def one_mode(admin: BenchAdmin, admin_url: str, mode: str, args: argparse.Namespace, work: str
                   ) -> dict[str, Any]:
    port = free_port()
    code = EXECUTOR % {"app": APP, "admin": admin_url, "token": TOKEN, "port": port, "logs": f"{work}/{mode}",
                       "mode": mode}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "JOBRING_EXECUTOR_IP": "127.0.0.1"})
    admin.registered.clear()
    client = ExecutorClient(access_token=TOKEN, read_timeout=10.0, pull=admin.hub)
    try:
        await asyncio.wait_for(admin.registered.wait(), 30)
        address = admin.address or ""
        assert address.startswith("pull://" if mode == "pull" else "http://"), address
        if mode == "pull":
            while not admin.hub.alive(address.rstrip("/"), APP):  # noqa: ASYNC110 (no event for a first poll)
                await asyncio.sleep(0.05)
        body = admin.trigger_body()  # run ids never repeat across steps (results are counted by id)

        latencies: list[float] = []
        failures = 0

        async def send() -> int:
            nonlocal failures
            log_id, payload = body()
            start = time.perf_counter()
            answer = await client.run_body_now(address, payload, TOKEN, APP)
            latencies.append((time.perf_counter() - start) * 1000)
            if not answer.ok:
                failures += 1
            return log_id

        # warm-up
        await asyncio.gather(*(send() for _ in range(200)))
        latencies.clear()
        # throughput
        sent: list[int] = []
        stop_at = time.perf_counter() + args.duration_s

        async def worker() -> None:
            while time.perf_counter() < stop_at:
                sent.append(await send())

        me, executor_proc = psutil.Process(), psutil.Process(proc.pid)
        cpu0 = (me.cpu_times(), executor_proc.cpu_times())
        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(args.concurrency)))
        wanted = set(sent)
        while not wanted <= admin.done:
            admin.changed.clear()
            await asyncio.wait_for(admin.changed.wait(), 60)
        elapsed = time.perf_counter() - started
        cpu1 = (me.cpu_times(), executor_proc.cpu_times())
        # Busy share of one core, per process, over the throughput step.
        admin_cpu, executor_cpu = (
            (b.user + b.system - a.user - a.system) / elapsed * 100 for a, b in zip(cpu0, cpu1, strict=True))
        loaded = sorted(latencies)
        # paced latency
        latencies.clear()
        gap = 1 / args.paced_rate
        for _ in range(int(args.paced_rate * args.paced_s)):
            t0 = time.perf_counter()
            await send()
            await asyncio.sleep(max(0.0, gap - (time.perf_counter() - t0)))
        paced = sorted(latencies)
        return {
            "mode": mode, "runs": len(sent), "runs_per_s": len(sent) / elapsed, "failures": failures,
            "loaded_p50_ms": statistics.median(loaded), "loaded_p99_ms": loaded[int(len(loaded) * 0.99)],
            "paced_p50_ms": statistics.median(paced), "paced_p99_ms": paced[int(len(paced) * 0.99)],
            "admin_cpu": admin_cpu, "executor_cpu": executor_cpu,
        }
    finally:
        await client.aclose()
        proc.send_signal(signal.SIGINT)
        try:
            await asyncio.wait_for(proc.wait(), 15)
        except TimeoutError:
            proc.kill()
            await proc.wait()


async def orchestrate(args: argparse.Namespace) -> None:
    # One token's polls share a quota (1,000 by default): the idle executors and the measured
    # one together need more.
    admin = BenchAdmin(TOKEN, max_boxes=5_000, max_polls=5_000)
    rows: list[dict[str, Any]] = []
    pollers: asyncio.subprocess.Process | None = None
    rss_note = ""
    with tempfile.TemporaryDirectory() as work:
        async with serving(admin) as port:
            try:
                for mode in args.modes.split(","):  # one after the other, never together
                    rows.append(await one_mode(admin, f"http://127.0.0.1:{port}/", mode, args, work))  # noqa: PERF401
                if args.idle_pollers:
                    me = psutil.Process()
                    before = me.memory_info().rss
                    code = POLLERS % {"app": APP, "url": f"http://127.0.0.1:{port}/api/pull", "token": TOKEN,
                                      "n": args.idle_pollers}
                    pollers = await asyncio.create_subprocess_exec(sys.executable, "-c", code)
                    deadline = time.monotonic() + 120
                    while sum(e.alive for e in admin.hub.executors()) < args.idle_pollers:  # noqa: ASYNC110
                        assert time.monotonic() < deadline, "the idle pollers did not all connect"
                        await asyncio.sleep(0.2)
                    await asyncio.sleep(2)
                    grown = (me.memory_info().rss - before) / 2**20
                    rss_note = (f"; {args.idle_pollers} idle pull executors connected: "
                                f"admin RSS +{grown:.1f} MB")
                    row = await one_mode(admin, f"http://127.0.0.1:{port}/", "pull", args, work)
                    rows.append({**row, "mode": f"pull + {args.idle_pollers} idle"})
            finally:
                if pollers is not None:
                    pollers.kill()
                    await pollers.wait()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cpus, python {platform.python_version()}; "
          f"concurrency {args.concurrency}, {args.duration_s:g} s; paced {args.paced_rate:g} runs/s"
          f"{rss_note}")
    print("| mode | runs | runs/s | failures | loaded p50 ms | loaded p99 ms | paced p50 ms | paced p99 ms "
          "| admin CPU | executor CPU |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['mode']} | {r['runs']} | {r['runs_per_s']:.0f} | {r['failures']} | "
              f"{r['loaded_p50_ms']:.2f} | {r['loaded_p99_ms']:.2f} | {r['paced_p50_ms']:.2f} | "
              f"{r['paced_p99_ms']:.2f} | {r['admin_cpu']:.0f} % | {r['executor_cpu']:.0f} % |")
    by = {r["mode"]: r for r in rows}
    if "push" in by and "pull" in by:
        ratio = by["pull"]["runs_per_s"] / by["push"]["runs_per_s"]
        print(f"pull/push throughput: {ratio:.0%} (target >= 80%); paced p99 pull - push: "
              f"{by['pull']['paced_p99_ms'] - by['push']['paced_p99_ms']:+.2f} ms, loaded p99: "
              f"{by['pull']['loaded_p99_ms'] - by['push']['loaded_p99_ms']:+.2f} ms (target <= +10 ms)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration-s", type=float, default=8.0)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--paced-rate", type=float, default=100.0)
    parser.add_argument("--paced-s", type=float, default=5.0)
    parser.add_argument("--modes", default="push,pull")
    parser.add_argument("--idle-pollers", type=int, default=0, metavar="N")
    args = parser.parse_args()
    try:
        import uvloop
        uvloop.run(orchestrate(args))
    except ImportError:
        asyncio.run(orchestrate(args))


if __name__ == "__main__":
    main()
