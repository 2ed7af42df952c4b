"""The two sides of bench/executor_throughput.py around the executor under test: the fake admin
(records callback arrivals) and the load generator (sends /run requests, stamps each send).

Stamps are CLOCK_MONOTONIC, shared by all processes on Linux.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any, cast

TOKEN = "bench-token"
LOG_DATE_TIME = 1795350973184
_ADMIN_OK = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 12\r\n\r\n{"code":200}'


# --- fake admin (the bench process) --------------------------------------------------------


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


# --- load generator (its own process) ------------------------------------------------------


def run_body(handler: str, log_id: int, job_id: int) -> bytes:
    import orjson

    return orjson.dumps({
        "jobId": job_id, "executorHandler": handler, "executorParams": "",
        "executorBlockStrategy": "SERIAL_EXECUTION", "executorTimeout": 0,
        "logId": log_id, "logDateTime": LOG_DATE_TIME, "glueType": "BEAN",
        "glueSource": "", "glueUpdatetime": LOG_DATE_TIME, "broadcastIndex": 0,
        "broadcastTotal": 1,
    })


def _request(host: str, port: int, body: bytes) -> bytes:
    return (b"POST /run HTTP/1.1\r\nHost: %s:%d\r\nXXL-JOB-ACCESS-TOKEN: %s\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
            % (host.encode(), port, TOKEN.encode(), len(body), body))


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
        self.writer.write(_request(self.host, self.port, body))
        head = (await self.reader.readuntil(b"\r\n\r\n")).lower()
        marker = head.find(b"content-length:")
        if marker < 0:
            raise RuntimeError(f"answer without content-length: {head[:200]!r}")
        length = int(head[marker + 15:head.index(b"\r\n", marker)])
        return await self.reader.readexactly(length)

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


class _Plan:
    """Which run goes next and when (``rate`` runs/s from ``start``, or as fast as answered)."""

    def __init__(self, handler: str, first_log_id: int, runs: int, jobs: int, duration_s: float,
                 rate: float | None) -> None:
        self.handler, self.first_log_id, self.runs, self.jobs = handler, first_log_id, runs, jobs
        self.rate = rate
        self.sent = [0.0] * runs
        self.refused: list[str] = []
        self.next_index = 0
        self.start = time.monotonic()
        self.stop_at = self.start + duration_s

    def take(self) -> int | None:
        if self.next_index >= self.runs or time.monotonic() >= self.stop_at:
            return None
        i = self.next_index
        self.next_index += 1
        return i

    def due(self, i: int) -> float:
        return self.start if self.rate is None else self.start + i / self.rate

    def body(self, i: int) -> bytes:
        return run_body(self.handler, self.first_log_id + i, 1 + i % self.jobs)

    def check(self, answer: bytes) -> None:
        import orjson

        if answer != b'{"code":200}' and orjson.loads(answer).get("code") != 200:
            self.refused.append(answer.decode())


class ProtoConnection(asyncio.Protocol):
    """A connection driven by protocol callbacks (no StreamReader, no task per request): the
    next /run leaves when the previous answer is complete, or at its due time at a set rate."""

    def __init__(self, plan: _Plan, host: str, port: int, done: asyncio.Future[None], live: list[int]
                 ) -> None:
        self.plan, self.host, self.port, self.done, self.live = plan, host, port, done, live
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.index = -1
        self.loop = asyncio.get_running_loop()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.next()

    def next(self) -> None:
        i = self.plan.take()
        if i is None:
            self.live[0] -= 1
            if self.live[0] == 0 and not self.done.done():
                self.done.set_result(None)
            assert self.transport is not None
            self.transport.close()
            return
        self.index = i
        wait = self.plan.due(i) - time.monotonic()
        if wait > 0:
            self.loop.call_later(wait, self.send)
        else:
            self.send()

    def send(self) -> None:
        assert self.transport is not None
        body = self.plan.body(self.index)
        self.plan.sent[self.index] = time.monotonic()
        self.transport.write(_request(self.host, self.port, body))

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            return
        head = self.buffer[:end].lower()
        marker = head.find(b"content-length:")
        line_end = head.find(b"\r\n", marker)
        length = int(head[marker + 15:line_end if line_end > 0 else len(head)])
        if len(self.buffer) < end + 4 + length:
            return
        answer = self.buffer[end + 4:end + 4 + length]
        self.buffer = self.buffer[end + 4 + length:]
        self.plan.check(answer)
        self.next()

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None and not self.done.done():
            self.done.set_exception(exc)


async def generate_load(url: str, handler: str, first_log_id: int, runs: int, concurrency: int,
                        jobs: int, duration_s: float, client_kind: str, rate: float | None = None
                        ) -> dict[str, Any]:
    host, _, port_text = url.removeprefix("http://").partition(":")
    port = int(port_text)
    plan = _Plan(handler, first_log_id, runs, jobs, duration_s, rate)
    if client_kind == "proto":
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        live = [concurrency]
        for _ in range(concurrency):
            await loop.create_connection(lambda: ProtoConnection(plan, host, port, done, live), host, port)
        await done
    else:
        posts, closers = _stream_clients(url, host, port, concurrency, client_kind)

        async def worker(post: Callable[[bytes], Awaitable[bytes]]) -> None:
            while (i := plan.take()) is not None:
                wait = plan.due(i) - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                body = plan.body(i)
                plan.sent[i] = time.monotonic()
                plan.check(await post(body))

        try:
            await asyncio.gather(*(worker(post) for post in posts))
        finally:
            for close in closers:
                await close()
    end = time.monotonic()
    return {"sent": plan.sent[:plan.next_index], "refused": plan.refused[:5],
            "refused_count": len(plan.refused), "start": plan.start, "end": end}


Post = Callable[[bytes], Awaitable[bytes]]
Close = Callable[[], Awaitable[None]]


def _stream_clients(url: str, host: str, port: int, concurrency: int, client_kind: str
                    ) -> tuple[list[Post], list[Close]]:
    if client_kind != "httpx":
        connections = [RawConnection(host, port) for _ in range(concurrency)]
        return [c.post for c in connections], [c.close for c in connections]
    import httpx

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

    def httpx_post(client: httpx.AsyncClient) -> Callable[[bytes], Awaitable[bytes]]:
        async def post(body: bytes) -> bytes:
            return (await client.post("/run", content=body)).content
        return post

    return [httpx_post(clients[n % len(clients)]) for n in range(concurrency)], [c.aclose for c in clients]
