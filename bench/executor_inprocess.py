"""The executor's own work per run, in one process: no sockets, no load generator.

    .venv/bin/python bench/executor_inprocess.py [--handler ok_async] [--runs 50000] [--rounds 3] > /dev/null

Drives the standalone server's protocol (``HttpConnection``) on in-memory transports, the
engine (``JobRunner``) and the run log (``RunLog``, writing to a temporary folder): 32
connections, each with one ``/run`` in flight at a time (as the admin's client sends them),
100 job ids, SERIAL_EXECUTION; a result counts once the engine reported it. What it leaves
out of ``bench/executor_throughput.py``'s executor: the kernel's socket reads and writes, the
callback sender's posts (results go to a list). Prints
the process's CPU per run (all threads) of each round to stderr; stdout gets the handlers'
``print`` lines (send it to /dev/null, as the throughput bench does).

Quicker and steadier than the throughput bench for changes to the executor's Python work; the
throughput bench stays the measure of record.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from typing import Any, cast

import orjson

from jobring.executor.context import JobContext, JobHandler
from jobring.executor.distributed import AdminLink, SubTaskRunner
from jobring.executor.http.app import ExecutorEndpoints
from jobring.executor.http.protocol import ExecutorHttpServer, HttpConnection
from jobring.executor.runlog import RunLog
from jobring.executor.worker import JobRunner
from jobring.protocol.models import HandleCallbackParam

TOKEN = "bench-token"
LOG_DATE_TIME = 1_764_000_000_000


async def ok_async(ctx: JobContext) -> None:
    ctx.log("ok")
    print("ok")


def ok_sync(ctx: JobContext) -> None:
    ctx.log("ok")
    print("ok")


class _Transport:
    """What HttpConnection uses of a transport; counts answers."""

    def __init__(self) -> None:
        self.answers = 0

    def write(self, data: bytes) -> None:
        self.answers += 1

    def close(self) -> None: ...

    def is_closing(self) -> bool:
        return False

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None: ...

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...

    def set_write_buffer_limits(self, high: int, low: int) -> None: ...

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1) if name == "peername" else default


def _request(handler: str, log_id: int, job_id: int) -> bytes:
    body = orjson.dumps({
        "jobId": job_id, "executorHandler": handler, "executorParams": "",
        "executorBlockStrategy": "SERIAL_EXECUTION", "executorTimeout": 0,
        "logId": log_id, "logDateTime": LOG_DATE_TIME, "glueType": "BEAN",
        "glueSource": "", "glueUpdatetime": LOG_DATE_TIME, "broadcastIndex": 0, "broadcastTotal": 1,
    })
    return (b"POST /run HTTP/1.1\r\nHost: 127.0.0.1:9999\r\nXXL-JOB-ACCESS-TOKEN: %s\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
            % (TOKEN.encode(), len(body), body))


async def one_round(handler: str, runs: int, first_log_id: int, folder: str, concurrency: int,
                    jobs: int) -> float:
    reported: list[HandleCallbackParam] = []
    runlog = RunLog(folder)
    handlers = {"ok_async": JobHandler("ok_async", ok_async), "ok_sync": JobHandler("ok_sync", ok_sync)}
    runner = JobRunner(handlers, runlog, reported.append, received=None)
    # As the executor does (each run's handler may map); the link is never called here.
    runner.distributed = SubTaskRunner(handlers, AdminLink(cast(Any, None), [], TOKEN, "bench"))
    endpoints = ExecutorEndpoints(TOKEN)
    endpoints.bind(runner, runlog.read)
    server = ExecutorHttpServer(endpoints)
    connections = []
    for _ in range(concurrency):
        transport = _Transport()
        connection = HttpConnection(server)
        connection.connection_made(transport)  # type: ignore[arg-type]  # duck-typed transport
        connections.append((connection, transport))
    requests = [_request(handler, first_log_id + n, n % jobs + 1) for n in range(runs)]
    sent = [0] * concurrency  # requests sent on each connection
    next_request = 0
    started = time.process_time()
    while len(reported) < runs:
        for i, (connection, transport) in enumerate(connections):
            # One request in flight per connection, and its run reported before the next (as
            # an admin whose client waits for the answer; the callback is what counts here).
            ready = transport.answers == sent[i] and len(reported) >= next_request - 4 * concurrency
            if next_request < runs and ready:
                connection.data_received(requests[next_request])
                next_request += 1
                sent[i] += 1
        await asyncio.sleep(0)
    used = time.process_time() - started
    await runner.close()
    for connection, _ in connections:
        connection.connection_lost(None)
    return used / runs * 1e6


async def main_async(args: argparse.Namespace) -> None:
    for n in range(args.rounds + 1):  # the first is a warm-up
        with tempfile.TemporaryDirectory(prefix="bench-inprocess-") as folder:
            runs = args.runs if n else min(5000, args.runs)
            us = await one_round(args.handler, runs, 10_000_000 * (n + 1), folder, args.concurrency,
                                 args.jobs)
        if n:
            print(f"{args.handler}: {us:.1f} µs CPU per run ({runs} runs)", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--handler", choices=["ok_async", "ok_sync"], default="ok_async")
    parser.add_argument("--runs", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--jobs", type=int, default=100)
    args = parser.parse_args()
    try:
        import uvloop
        runner: Any = uvloop.run
    except ImportError:
        runner = asyncio.run
    runner(main_async(args))


if __name__ == "__main__":
    main()
