"""Broker (RabbitMQ) vs push dispatch from one admin-side sender to 4 executor processes.

    .venv/bin/python bench/broker_dispatch.py [--duration-s 8] [--concurrency 1000] [--executors 4]

This process plays the admin: the admin's own ExecutorClient sends the runs (push: its HTTP/1.1
client to each executor's port, round robin; broker: its BrokerPublisher, persistent messages
with publisher confirms, to the group's queue), a minimal ``api/registry`` / ``api/callback``
counts results, and ``api/pull`` (the admin's PullApi) serves the broker executors' polls.
Four jobring executor processes (a no-op async handler) run first in push mode, then in
broker mode (``--modes``). ``--concurrency`` runs are in flight for ``--duration-s``; runs/s
counts results (callbacks) received, so it is end to end: sent, taken, run, reported.
The broker is ``JOBRING_TEST_AMQP_URL`` (default guest on 127.0.0.1:5672); the bench's queue
is deleted at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import aio_pika
from dispatch_kit import BenchAdmin, free_port, serving

from jobring.admin.dispatch.broker import BrokerPublisher
from jobring.admin.dispatch.client import ExecutorClient
from jobring.protocol.broker import executor_queue, group_queue

TOKEN = "bench-broker-token-0123456789"
AMQP_URL = os.environ.get("JOBRING_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")


EXECUTOR = """
from jobring.executor.executor import Executor
ex = Executor(app_name=%(app)r, admin_addresses=[%(admin)r], access_token=%(token)r, host="127.0.0.1",
              port=%(port)d, log_path=%(logs)r, dispatch=%(mode)r, callback_batch_size=1000,
              dispatch_broker=%(broker)r, broker_slots=%(slots)d)

@ex.job("noop")
async def noop(ctx):
    return None

ex.run(ready=lambda a: print("ready", a, flush=True))
"""


async def start_executors(admin: BenchAdmin, admin_url: str, app: str, mode: str, args: argparse.Namespace,
                          work: str) -> list[asyncio.subprocess.Process]:
    procs = []
    for i in range(args.executors):
        code = EXECUTOR % {"app": app, "admin": admin_url, "token": TOKEN, "port": free_port(),
                           "logs": f"{work}/{mode}{i}", "mode": mode,
                           "broker": AMQP_URL if mode == "broker" else None, "slots": args.slots}
        procs.append(await asyncio.create_subprocess_exec(
            sys.executable, "-c", code, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env={**os.environ, "JOBRING_EXECUTOR_IP": "127.0.0.1"}))
    deadline = time.monotonic() + 60
    prefix = "broker" if mode == "broker" else "http"
    while len([a for a in admin.addresses if a.startswith(prefix)]) < args.executors:
        assert time.monotonic() < deadline, "the executors did not all register"
        admin.changed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(admin.changed.wait(), 1)
    return procs


async def one_mode(admin: BenchAdmin, admin_url: str, mode: str, args: argparse.Namespace, work: str
                   ) -> dict[str, Any]:
    app = f"bench-broker-{secrets.token_hex(3)}"
    admin.addresses.clear()
    procs = await start_executors(admin, admin_url, app, mode, args, work)
    publisher = BrokerPublisher(AMQP_URL) if mode == "broker" else None
    if publisher is not None:
        publisher.start()
    client = ExecutorClient(access_token=TOKEN, read_timeout=10.0, pull=admin.hub, broker=publisher)
    addresses = sorted(a for a in admin.addresses if a.startswith("broker" if mode == "broker" else "http"))
    try:
        body = admin.trigger_body()
        turn = [0]

        latencies: list[float] = []
        failures = 0

        async def send() -> int | None:
            """The run's id once sent, None when the send failed (no result will come)."""
            nonlocal failures
            log_id, payload = body()
            turn[0] += 1
            start = time.perf_counter()
            answer = await client.run_body_now(addresses[turn[0] % len(addresses)], payload, TOKEN, app)
            latencies.append((time.perf_counter() - start) * 1000)
            if not answer.ok:
                failures += 1
                if failures <= 3:
                    print(f"{mode}: a send failed: {answer.msg}", file=sys.stderr)
                return None
            return log_id

        await asyncio.gather(*(send() for _ in range(500)))  # warm-up (connections, queues)
        latencies.clear()
        sent: list[int] = []
        stop_at = time.perf_counter() + args.duration_s

        async def worker() -> None:
            while time.perf_counter() < stop_at:
                log_id = await send()
                if log_id is not None:
                    sent.append(log_id)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(args.concurrency)))
        sent_in = time.perf_counter() - started
        wanted = set(sent)
        give_up = time.monotonic() + 60
        while not wanted <= admin.done and time.monotonic() < give_up:
            admin.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(admin.changed.wait(), 1)
        missing = len(wanted - admin.done)
        elapsed = time.perf_counter() - started
        loaded = sorted(latencies)
        return {"mode": mode, "runs": len(sent), "runs_per_s": len(sent) / elapsed,
                "sent_per_s": len(sent) / sent_in, "failures": failures, "missing": missing,
                "p50_ms": statistics.median(loaded), "p99_ms": loaded[int(len(loaded) * 0.99)]}
    finally:
        await client.aclose()
        await stop_executors(procs)
        if mode == "broker":
            await delete_queues(app, addresses)


async def stop_executors(procs: list[asyncio.subprocess.Process]) -> None:
    for proc in procs:
        proc.send_signal(signal.SIGINT)
    for proc in procs:
        try:
            await asyncio.wait_for(proc.wait(), 15)
        except TimeoutError:
            proc.kill()
            await proc.wait()


async def delete_queues(app: str, addresses: list[str]) -> None:
    connection = await aio_pika.connect(AMQP_URL)
    async with connection:
        channel = await connection.channel()
        for name in [group_queue(app), *(executor_queue(app, a[9:].rstrip("/")) for a in addresses)]:
            await channel.queue_delete(name)


async def orchestrate(args: argparse.Namespace) -> None:
    admin = BenchAdmin(TOKEN)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as work:
        async with serving(admin) as port:
            for mode in args.modes.split(","):  # one after the other, never together
                rows.append(await one_mode(admin, f"http://127.0.0.1:{port}/", mode, args, work))  # noqa: PERF401
    print(f"machine: {platform.machine()}, {os.cpu_count()} cpus, python {platform.python_version()}; "
          f"{args.executors} executors, concurrency {args.concurrency}, {args.duration_s:g} s, "
          f"broker slots {args.slots}")
    print("| mode | runs | runs/s end to end | sent/s | failed sends | results missing | dispatch p50 ms "
          "| dispatch p99 ms |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['mode']} | {r['runs']} | {r['runs_per_s']:.0f} | {r['sent_per_s']:.0f} | "
              f"{r['failures']} | {r['missing']} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration-s", type=float, default=8.0)
    parser.add_argument("--concurrency", type=int, default=1000)
    parser.add_argument("--executors", type=int, default=4)
    parser.add_argument("--slots", type=int, default=500, help="each broker executor's slots (prefetch)")
    parser.add_argument("--modes", default="push,broker")
    args = parser.parse_args()
    try:
        import uvloop
        uvloop.run(orchestrate(args))
    except ImportError:
        asyncio.run(orchestrate(args))


if __name__ == "__main__":
    main()
