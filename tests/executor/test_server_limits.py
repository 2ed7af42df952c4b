"""The standalone server's limits over real sockets: slow clients get 408, early closes are
dropped, and connections past the limit get 503."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import orjson
import pytest

from jobring.executor.http.limits import ServerLimits
from jobring.executor.http.protocol import ExecutorHttpServer
from jobring.protocol.edge import HeadLimits
from tests.executor.server_kit import Service, listening, started_servers

Serve = Callable[..., Awaitable[tuple[int, ExecutorHttpServer]]]


@pytest.fixture
async def serve(service: Service) -> AsyncIterator[Serve]:
    async with started_servers() as started:

        async def start(*, limits: ServerLimits | None = None, head_timeout_s: float = 10.0
                        ) -> tuple[int, ExecutorHttpServer]:
            head_limits = HeadLimits(head_timeout_s=head_timeout_s)
            server, sock = await listening(service, limits=limits, head_limits=head_limits)
            started.append((server, sock))
            return sock.getsockname()[1], server

        yield start


@pytest.fixture
def service() -> Service:
    return Service()


async def read_all(reader: asyncio.StreamReader) -> bytes:
    return await asyncio.wait_for(reader.read(), 5)


async def trickle(writer: asyncio.StreamWriter, data: bytes) -> None:
    """Sends ``data`` a byte at a time, slower than the server's read deadline allows."""
    with contextlib.suppress(ConnectionError):
        for i in range(len(data)):
            writer.write(data[i:i + 1])
            await writer.drain()
            await asyncio.sleep(0.05)


async def wait_until(check: Callable[[], bool]) -> None:
    async with asyncio.timeout(5):
        while not check():  # noqa: ASYNC110 - the server's connection set has no event
            await asyncio.sleep(0.01)


@pytest.mark.parametrize(("at_once", "trickled", "phase"), [
    pytest.param(b"", b"POST /run HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 200, "head", id="slow-head"),
    pytest.param(b"POST /run HTTP/1.1\r\nHost: x\r\nContent-Length: 200\r\n\r\n", b"a" * 200, "body",
                 id="slow-body"),
])
async def test_a_slowloris_trickle_gets_408(
    serve: Serve, service: Service, at_once: bytes, trickled: bytes, phase: str
) -> None:
    port, _ = await serve(limits=ServerLimits(body_timeout_s=0.3), head_timeout_s=0.3)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(at_once)
    sender = asyncio.create_task(trickle(writer, trickled))
    try:
        answer = await read_all(reader)
    finally:
        sender.cancel()
        writer.close()
    assert answer.startswith(b"HTTP/1.1 408 Request Timeout\r\n")
    assert orjson.loads(answer.split(b"\r\n\r\n", 1)[1]) == {
        "code": 500, "msg": f"request {phase} not received in time"}
    assert service.ran == []


async def test_a_connection_that_never_asks_is_closed_without_an_answer(serve: Serve) -> None:
    port, _ = await serve(head_timeout_s=0.2)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        assert await read_all(reader) == b""
    finally:
        writer.close()


async def test_an_early_close_mid_body_is_dropped_unanswered(serve: Serve, service: Service) -> None:
    port, server = await serve()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST /run HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"jobId\":1")
    await writer.drain()
    await wait_until(lambda: len(server.connections) == 1)
    writer.close()
    await wait_until(lambda: not server.connections)
    # The server is still fine and the half request ran nothing.
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        body = b'{"jobId":2}'
        writer.write(b"POST /run HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert head.startswith(b"HTTP/1.1 200 OK")
    finally:
        writer.close()
    assert service.ran == [2]


async def test_connections_past_the_limit_get_503(serve: Serve) -> None:
    port, server = await serve(limits=ServerLimits(max_connections=2))
    beat = b"POST /beat HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
    kept = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
    try:
        for reader, writer in kept:
            writer.write(beat)
            assert (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)).startswith(b"HTTP/1.1 200")
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(beat)
            answer = await read_all(reader)
        finally:
            writer.close()
        assert answer.startswith(b"HTTP/1.1 503 Service Unavailable\r\n")
        assert orjson.loads(answer.split(b"\r\n\r\n", 1)[1]) == {"code": 500, "msg": "too many connections"}
    finally:
        for _, writer in kept[1:]:
            writer.close()
    await wait_until(lambda: len(server.connections) <= 1)  # the refused one lingers up to 2 s
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(beat)
        assert (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)).startswith(b"HTTP/1.1 200")
    finally:
        writer.close()
        kept[0][1].close()
