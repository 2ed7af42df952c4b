"""Cost of the admin's dispatch path on loopback: executor client and instant-to-/run time.

    .venv/bin/python bench/dispatch_path.py [--jobs 1 100] [--rounds 20]

1. ExecutorClient per call: the lean HTTP/1.1 client (network default for http) against httpx
   (https, and injected transports), one call at a time and 100 at once, against a raw
   asyncio executor stub.
2. TriggerService on SQLite: time from the call at the instant to the stub receiving /run,
   for ``fire_batch`` (log insert at the instant) and ``prepare_batch`` + ``dispatch_prepared``
   (log insert ahead, only /run at the instant).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from datetime import UTC, datetime

import httpx

from jobring.admin.dispatch.client import ExecutorClient
from jobring.admin.store import Store
from jobring.admin.store.records import JobGroup, JobInfo
from jobring.admin.trigger.trigger import FireRequest, TriggerService
from jobring.core.clock import SystemClock
from jobring.core.enums import TriggerType
from jobring.protocol.models import TriggerParam

_ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 12\r\n\r\n{\"code\":200}"


async def _stub(received: list[float]) -> tuple[asyncio.Server, str]:
    """A keep-alive executor stub that answers every POST (Content-Length bodies) at once."""

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                await reader.readexactly(length)
                received.append(time.perf_counter())
                writer.write(_ANSWER)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(connection, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/"


async def bench_clients(rounds: int) -> None:
    runner, address = await _stub([])
    param = TriggerParam(job_id=1, executor_handler="demo", log_id=1)
    clients = {
        "lean": ExecutorClient(access_token="t"),
        "httpx": ExecutorClient(access_token="t", transport=httpx.AsyncHTTPTransport()),
    }
    try:
        for name, client in clients.items():
            await client.run(address, param)  # warm the pool
            single = []
            for _ in range(rounds * 5):
                t0 = time.perf_counter()
                await client.run(address, param)
                single.append((time.perf_counter() - t0) * 1000)
            burst = []
            for _ in range(rounds):
                t0 = time.perf_counter()
                await asyncio.gather(*(client.run(address, param) for _ in range(100)))
                burst.append((time.perf_counter() - t0) * 1000)
            print(f"client {name:8s}: one call median {statistics.median(single):.2f} ms; "
                  f"100 concurrent calls median {statistics.median(burst):.1f} ms")
    finally:
        for client in clients.values():
            await client.aclose()
        runner.close()


async def bench_trigger(n_jobs: int, rounds: int) -> None:
    received: list[float] = []
    runner, address = await _stub(received)
    directory = tempfile.mkdtemp()
    store = await Store.open(f"sqlite+aiosqlite:///{directory}/bench.db")
    client = ExecutorClient(access_token="t")
    trigger = TriggerService(store, client, node_id="bench", clock=SystemClock(),
                             admin_timezone="UTC")
    try:
        group = await store.groups.create(JobGroup(app_name="bench", title="bench", address_type=1,
                                                   address_list=address), datetime.now(UTC))
        ids = [await store.jobs.create(JobInfo(job_group=group, job_desc="bench", executor_handler="h",
                                               executor_route_strategy="FIRST", glue_type="BEAN"))
               for _ in range(n_jobs)]
        jobs = list((await store.jobs.get_many(ids)).values())
        base = int(time.time() * 1000)
        for k, mode in enumerate(("fire_batch", "prepared")):
            first, last = [], []
            for r in range(rounds):
                received.clear()
                planned = base + (k * rounds + r) * 1000
                reqs = [FireRequest(j, TriggerType.CRON, planned_time=planned) for j in jobs]
                if mode == "prepared":
                    batch = await trigger.prepare_batch(reqs)
                    t0 = time.perf_counter()
                    await trigger.dispatch_prepared(batch)
                else:
                    t0 = time.perf_counter()
                    await trigger.fire_batch(reqs)
                first.append((min(received) - t0) * 1000)
                last.append((max(received) - t0) * 1000)
            print(f"trigger {n_jobs:4d} job(s) {mode:10s}: instant -> first /run received median "
                  f"{statistics.median(first):.2f} ms, last {statistics.median(last):.2f} ms")
    finally:
        await trigger.close()
        await client.aclose()
        await store.close()
        runner.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 100])
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    asyncio.run(bench_clients(args.rounds))
    for n in args.jobs:
        asyncio.run(bench_trigger(n, args.rounds))


if __name__ == "__main__":
    main()
