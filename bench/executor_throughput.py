"""Executor throughput: /run -> callback for trivial handlers, jobring vs pyxxl, side by side.

    .venv/bin/python bench/executor_throughput.py [--runs 10000] [--concurrency 64] [--only jobring]
    .venv/bin/python bench/executor_throughput.py --only jobring --servers own,uvicorn --client raw

``--servers own,uvicorn`` measures the same jobring executor (the same ASGI app) served by its
own HTTP/1.1 server and by uvicorn (httptools + uvloop), one after the other.

Three kinds of process on loopback: this one is the fake admin (counts callbacks, stamps
their arrival), one executor process (jobring, then pyxxl), and one load generator process
(httpx, keep-alive, bounded concurrency) that sends the /run requests and stamps each send.
Stamps are CLOCK_MONOTONIC, shared by all processes on Linux. A run counts once the admin
got its callback; latency is callback arrival minus /run send. Everything is stopped at the
end (SIGINT, then kill).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar, cast

TOKEN = "bench-token"
_ADMIN_OK = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 12\r\n\r\n{"code":200}'
LOG_DATE_TIME = 1795350973184
T = TypeVar("T")


# --- fake admin (this process) ---------------------------------------------------------


class AdminProtocol(asyncio.Protocol):
    """Minimal HTTP/1.1 keep-alive server: answers {"code":200}, records callback arrivals."""

    def __init__(self, admin: FakeAdmin) -> None:
        self.admin = admin
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buffer[:end].decode("latin-1")
            length = 0
            for line in head.split("\r\n")[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            if len(self.buffer) < end + 4 + length:
                return
            body = self.buffer[end + 4:end + 4 + length]
            self.buffer = self.buffer[end + 4 + length:]
            self.admin.record(head.split(" ", 2)[1], body)
            assert self.transport is not None
            self.transport.write(_ADMIN_OK)


class FakeAdmin:
    def __init__(self) -> None:
        self.arrivals: dict[int, float] = {}
        self.callback_requests = 0
        self.duplicates = 0
        self.failures = 0
        self.registered = asyncio.Event()
        self.changed = asyncio.Event()

    def record(self, path: str, body: bytes) -> None:
        now = time.monotonic()
        if path.endswith("api/registry"):
            self.registered.set()
        elif path.endswith("api/callback"):
            self.callback_requests += 1
            for item in json.loads(body):
                log_id = item["logId"]
                if log_id in self.arrivals:
                    self.duplicates += 1
                self.arrivals[log_id] = now
                if item["handleCode"] != 200:
                    self.failures += 1
            self.changed.set()

    async def wait_count(self, wanted: set[int], limit_s: float) -> None:
        async with asyncio.timeout(limit_s):
            while not wanted.issubset(self.arrivals):
                self.changed.clear()
                await self.changed.wait()


# --- executor processes ------------------------------------------------------------------


def serve_jobring(port: int, admin_url: str, log_path: str, server: str = "own") -> None:
    from jobring import Executor, JobContext

    ex = Executor(app_name="bench", admin_addresses=[admin_url], access_token=TOKEN, host="127.0.0.1",
                  port=port, address=f"http://127.0.0.1:{port}/", log_path=log_path, environ={})

    @ex.job("noop_async")
    async def noop_async(ctx: JobContext) -> None:
        return None

    @ex.job("noop_sync")
    def noop_sync(ctx: JobContext) -> None:
        return None

    if server == "own":
        ex.run()
        return
    import uvicorn

    # The same ASGI app; its lifespan starts the engine (registration, callbacks).
    uvicorn.run(ex.asgi_app(), host="127.0.0.1", port=port, loop="uvloop", http="httptools",
                lifespan="on", log_level="warning", access_log=False)


def serve_pyxxl(port: int, admin_url: str, log_path: str) -> None:
    import warnings

    from pyxxl import ExecutorConfig, PyxxlRunner

    os.chdir(log_path)  # pyxxl writes pyxxl.log and logs/ into the working directory
    config = ExecutorConfig(
        xxl_admin_baseurl=admin_url + "api/", executor_app_name="bench", access_token=TOKEN,
        executor_listen_host="127.0.0.1", executor_listen_port=port,
        executor_url=f"http://127.0.0.1:{port}", log_local_dir=os.path.join(log_path, "logs"),
    )
    runner = PyxxlRunner(config)

    @runner.register(name="noop_async")
    async def noop_async() -> None:
        return None

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")

        @runner.register(name="noop_sync")
        def noop_sync() -> None:
            return None

    runner.run_executor()


# --- load generator process ------------------------------------------------------------------


class RawConnection:
    """One keep-alive HTTP/1.1 connection, requests one at a time (a far cheaper client than httpx)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, body: bytes) -> bytes:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        self.writer.write(
            b"POST /run HTTP/1.1\r\nHost: %s:%d\r\nXXL-JOB-ACCESS-TOKEN: %s\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
            % (self.host.encode(), self.port, TOKEN.encode(), len(body), body)
        )
        head = (await self.reader.readuntil(b"\r\n\r\n")).lower()
        marker = head.find(b"content-length:")
        if marker < 0:
            raise RuntimeError(f"answer without content-length: {head[:200]!r}")
        length = int(head[marker + 15:head.index(b"\r\n", marker)])
        return await self.reader.readexactly(length)

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


async def generate_load(url: str, handler: str, first_log_id: int, runs: int, concurrency: int,
                        jobs: int, duration_s: float, client_kind: str) -> dict[str, Any]:
    import httpx
    import orjson

    sent = [0.0] * runs
    refused: list[str] = []
    next_index = 0
    posts: list[Callable[[bytes], Awaitable[bytes]]] = []
    closers: list[Callable[[], Awaitable[None]]] = []
    if client_kind == "httpx":
        # httpx's pool costs O(connections) per request: many small clients (one shared TLS
        # context) keep the generator's own cost flat as concurrency grows.
        tls = httpx.create_ssl_context()
        per_client = 4
        limits = httpx.Limits(max_connections=per_client, max_keepalive_connections=per_client)
        clients = [
            httpx.AsyncClient(base_url=url, verify=tls, timeout=30, limits=limits,
                              headers={"XXL-JOB-ACCESS-TOKEN": TOKEN, "Content-Type": "application/json"})
            for _ in range(max(1, concurrency // per_client))
        ]
        closers = [c.aclose for c in clients]

        def httpx_post(client: httpx.AsyncClient) -> Callable[[bytes], Awaitable[bytes]]:
            async def post(body: bytes) -> bytes:
                return (await client.post("/run", content=body)).content
            return post

        posts = [httpx_post(clients[n % len(clients)]) for n in range(concurrency)]
    else:
        host, _, port = url.removeprefix("http://").partition(":")
        connections = [RawConnection(host, int(port)) for _ in range(concurrency)]
        closers = [c.close for c in connections]
        posts = [c.post for c in connections]
    start = time.monotonic()
    stop_at = start + duration_s

    async def worker(post: Callable[[bytes], Awaitable[bytes]]) -> None:
        nonlocal next_index
        while next_index < runs and time.monotonic() < stop_at:
            i = next_index
            next_index += 1
            body = orjson.dumps({
                "jobId": 1 + i % jobs, "executorHandler": handler, "executorParams": "",
                "executorBlockStrategy": "SERIAL_EXECUTION", "executorTimeout": 0,
                "logId": first_log_id + i, "logDateTime": LOG_DATE_TIME, "glueType": "BEAN",
                "glueSource": "", "glueUpdatetime": LOG_DATE_TIME, "broadcastIndex": 0,
                "broadcastTotal": 1,
            })
            sent[i] = time.monotonic()
            answer = await post(body)
            if orjson.loads(answer).get("code") != 200:
                refused.append(answer.decode())

    try:
        await asyncio.gather(*(worker(post) for post in posts))
    finally:
        for close in closers:
            await close()
    end = time.monotonic()
    return {"sent": sent[:next_index], "refused": refused[:5], "refused_count": len(refused),
            "start": start, "end": end}


# --- orchestration -----------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _read_json(path: str) -> dict[str, Any]:
    with open(path, "rb") as f:
        return cast(dict[str, Any], json.load(f))


async def one_mode(admin: FakeAdmin, port: int, handler: str, first_log_id: int, args: argparse.Namespace,
                   executor_pid: int) -> dict[str, Any]:
    import psutil

    executor = psutil.Process(executor_pid)
    cpu_before = sum(executor.cpu_times()[:2])
    # The result goes through a file: a large one read from the child's stdout pipe came
    # back cut short now and then (under uvloop).
    fd, result_path = tempfile.mkstemp(prefix="bench-loadgen-", suffix=".json")
    os.close(fd)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--role", "loadgen", "--url", f"http://127.0.0.1:{port}",
        "--handler", handler, "--first-log-id", str(first_log_id), "--runs", str(args.runs),
        "--concurrency", str(args.concurrency), "--jobs", str(args.jobs),
        "--duration-s", str(args.duration_s), "--client", args.client, "--result-path", result_path,
    )
    try:
        await asyncio.wait_for(proc.wait(), args.limit_s)
        load = _read_json(result_path)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        os.unlink(result_path)
    sent_count = len(load["sent"])
    wanted = set(range(first_log_id, first_log_id + sent_count))
    with contextlib.suppress(TimeoutError):  # what is missing then shows as reported < runs
        await admin.wait_count(wanted, args.limit_s)
    got = [log_id for log_id in wanted if log_id in admin.arrivals]
    # CPU the executor process spent (all threads): independent of what else runs on the machine.
    cpu_per_run_us = (sum(executor.cpu_times()[:2]) - cpu_before) / max(1, len(got)) * 1e6
    latencies = sorted(
        (admin.arrivals[log_id] - load["sent"][log_id - first_log_id]) * 1000 for log_id in got
    )
    last = max(admin.arrivals[log_id] for log_id in got) if got else load["end"]
    q = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else [0.0] * 99
    return {
        "handler": handler,
        "runs": sent_count,
        "refused": load["refused_count"],
        "refused_sample": load["refused"],
        "reported": len(got),
        "accepted_per_s": sent_count / (load["end"] - load["start"]),
        "reported_per_s": len(got) / (last - load["start"]),
        "p50_ms": q[49],
        "p99_ms": q[98],
        "cpu_us": cpu_per_run_us,
    }


async def bench_executor(kind: str, admin: FakeAdmin, admin_url: str, args: argparse.Namespace,
                         base_log_id: int, server: str = "own") -> list[dict[str, Any]]:
    port = free_port()
    log_dir = tempfile.mkdtemp(prefix=f"bench-{kind}-")
    admin.registered.clear()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--role", kind, "--port", str(port), "--admin-url", admin_url,
        "--log-path", log_dir, "--server", server,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )
    results = []
    try:
        await asyncio.wait_for(admin.registered.wait(), 30)
        await asyncio.sleep(0.5)  # let the server finish binding after its first beat (pyxxl beats first)
        # Warm-up (imports, first worker creation), not measured.
        warm = argparse.Namespace(**{**vars(args), "runs": min(1000, args.runs), "duration_s": 3.0})
        await one_mode(admin, port, "noop_async", base_log_id, warm, proc.pid)
        for offset, handler in enumerate(("noop_async", "noop_sync"), start=1):
            result = await one_mode(admin, port, handler, base_log_id + offset * 1_000_000, args, proc.pid)
            result["executor"] = kind if kind != "jobring" or server == "own" else f"jobring ({server})"
            results.append(result)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            await asyncio.wait_for(proc.wait(), 15)
        except TimeoutError:
            proc.kill()
            await proc.wait()
        shutil.rmtree(log_dir, ignore_errors=True)  # one run log file per run: tens of thousands
    return results


async def orchestrate(args: argparse.Namespace) -> None:
    admin = FakeAdmin()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: AdminProtocol(admin), "127.0.0.1", 0)
    admin_url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/xxl-job-admin/"
    results: list[dict[str, Any]] = []
    try:
        kinds = [args.only] if args.only else ["jobring", "pyxxl"]
        steps = [(kind, http) for kind in kinds
                 for http in (args.servers.split(",") if kind == "jobring" else ["own"])]
        for n, (kind, http) in enumerate(steps):
            results += await bench_executor(kind, admin, admin_url, args, (n + 1) * 10_000_000, http)
    finally:
        server.close()
    print(f"# {time.strftime('%Y-%m-%d %H:%M')} {platform.python_version()} {os.cpu_count()} cores, "
          f"client={args.client} runs<={args.runs} in <={args.duration_s:.0f} s, "
          f"concurrency={args.concurrency} jobs={args.jobs}")
    print("| executor | handler | runs | refused | reported | accepted/s | reported/s | p50 ms | p99 ms "
          "| executor CPU µs/run | runs/s per core |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['executor']} | {r['handler']} | {r['runs']} | {r['refused']} | {r['reported']} | "
              f"{r['accepted_per_s']:.0f} | {r['reported_per_s']:.0f} | "
              f"{r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {r['cpu_us']:.0f} | {1e6 / r['cpu_us']:.0f} |")
    by = {(r["executor"], r["handler"]): r for r in results}
    for handler in ("noop_async", "noop_sync"):
        ours, theirs = by.get(("jobring", handler)), by.get(("pyxxl", handler))
        uvicorn = by.get(("jobring (uvicorn)", handler))
        if ours and uvicorn:
            print(f"ratio own server/uvicorn {handler}: "
                  f"{ours['reported_per_s'] / uvicorn['reported_per_s']:.2f}x throughput, "
                  f"{uvicorn['cpu_us'] / ours['cpu_us']:.2f}x less executor CPU per run")
        if ours and theirs:
            print(f"ratio jobring/pyxxl {handler}: {ours['reported_per_s'] / theirs['reported_per_s']:.2f}x "
                  f"throughput, {theirs['cpu_us'] / ours['cpu_us']:.2f}x less executor CPU per run")
    print(f"duplicate callbacks: {admin.duplicates}, failed results: {admin.failures}, "
          f"callback requests: {admin.callback_requests}")
    for r in results:
        if r["refused_sample"]:
            print(f"refused by {r['executor']} ({r['handler']}): {r['refused_sample'][0][:200]}")


def _run_fast(main: Coroutine[Any, Any, T]) -> T:
    """asyncio.run on uvloop when installed: the generator and the fake admin share the machine
    with the executor under test, so the less CPU they take, the less they disturb it."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--role", default="bench", choices=["bench", "jobring", "pyxxl", "loadgen"])
    parser.add_argument("--runs", type=int, default=20000, help="at most this many runs per step")
    parser.add_argument("--duration-s", type=float, default=10.0, help="stop sending after this long")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--jobs", type=int, default=1000, help="distinct job ids the runs rotate over")
    parser.add_argument("--limit-s", type=float, default=120.0, help="time limit per measured step")
    parser.add_argument("--only", choices=["jobring", "pyxxl"])
    parser.add_argument("--client", default="httpx", choices=["httpx", "raw"],
                        help="load generator HTTP client: httpx, or raw asyncio streams (much cheaper)")
    parser.add_argument("--servers", default="own",
                        help="HTTP servers for the jobring executor, comma separated: own, uvicorn")
    parser.add_argument("--server", default="own", choices=["own", "uvicorn"], help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int)
    parser.add_argument("--admin-url")
    parser.add_argument("--log-path")
    parser.add_argument("--url")
    parser.add_argument("--handler")
    parser.add_argument("--first-log-id", type=int)
    parser.add_argument("--result-path")
    args = parser.parse_args()
    if args.role == "jobring":
        serve_jobring(args.port, args.admin_url, args.log_path, args.server)
    elif args.role == "pyxxl":
        serve_pyxxl(args.port, args.admin_url, args.log_path)
    elif args.role == "loadgen":
        result = _run_fast(generate_load(args.url, args.handler, args.first_log_id, args.runs,
                                           args.concurrency, args.jobs, args.duration_s, args.client))
        with open(args.result_path, "w") as f:
            json.dump(result, f)
    else:
        _run_fast(orchestrate(args))


if __name__ == "__main__":
    main()
