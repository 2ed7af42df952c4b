"""The lean HTTP/1.1 client's pool, against in-memory executors: at most ``max_per_host``
connections per host with callers waiting in turn, a connection reused only once its
answer is read, slots freed by failed connects, timeouts and dropped connections."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx
import pytest

from jobring.http1.client import Connect, Http1Client, HttpError
from jobring.http1.wire import Connection
from tests.admin.loopback import LoopbackServer

OK = b'{"code":200}'


class Gate:
    """A handler whose answers wait for :meth:`open`; records the bodies in arrival order."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.bodies: list[bytes] = []

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(request.content)
        await self.release.wait()
        return httpx.Response(200, content=OK)


def _client(connect: Connect, *, limit: int = 100, connect_timeout: float = 3.0,
            read_timeout: float = 3.0) -> Http1Client:
    return Http1Client({"Content-Type": "application/json"}, connect_timeout=connect_timeout,
                       read_timeout=read_timeout, keepalive_s=15.0, max_per_host=limit, connect=connect)


async def _settle() -> None:
    for _ in range(30):
        await asyncio.sleep(0)


async def test_a_busy_connection_is_not_reused_until_its_answer_is_read() -> None:
    gate = Gate()
    server = LoopbackServer(gate)
    client = _client(server.connect)
    try:
        first = asyncio.create_task(client.post("http://e1:1/run", b"1"))
        await _settle()
        second = client.post_now("http://e1:1/run", b"2")  # nothing idle: not written on the busy one
        pending = asyncio.ensure_future(second)
        await _settle()
        assert server.opened == 2 and [len(t.written) > 0 for t in server.transports] == [True, True]
        gate.release.set()
        assert await first == (200, OK) and await pending == (200, OK)
        assert await client.post("http://e1:1/run", b"3") == (200, OK)
        assert server.opened == 2
    finally:
        await client.aclose()


async def test_callers_over_the_limit_wait_in_turn_and_reuse_the_connections() -> None:
    gate = Gate()
    server = LoopbackServer(gate)
    client = _client(server.connect, limit=2)
    try:
        calls = [asyncio.create_task(client.post("http://e1:1/run", b"%d" % i)) for i in range(6)]
        other = asyncio.create_task(client.post("http://e2:1/run", b"other"))
        await _settle()
        assert gate.bodies == [b"0", b"1", b"other"] and server.opened == 3
        gate.release.set()
        assert await asyncio.gather(*calls, other) == [(200, OK)] * 7
        assert gate.bodies[3:] == [b"2", b"3", b"4", b"5"]  # first come, first served
        assert server.opened == 3
    finally:
        await client.aclose()


async def test_a_cancelled_waiter_does_not_hold_a_place() -> None:
    gate = Gate()
    server = LoopbackServer(gate)
    client = _client(server.connect, limit=1)
    try:
        first = asyncio.create_task(client.post("http://e1:1/run", b"a"))
        waiting = asyncio.create_task(client.post("http://e1:1/run", b"b"))
        await _settle()
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        gate.release.set()
        assert await first == (200, OK)
        assert await client.post("http://e1:1/run", b"c") == (200, OK)
        assert gate.bodies == [b"a", b"c"] and server.opened == 1
    finally:
        await client.aclose()


async def test_a_waiter_cancelled_after_it_was_handed_a_connection_gives_it_back() -> None:
    gate = Gate()
    server = LoopbackServer(gate)
    client = _client(server.connect, limit=1)
    try:
        first = asyncio.create_task(client.post("http://e1:1/run", b"a"))
        waiting = asyncio.create_task(client.post("http://e1:1/run", b"b"))
        await _settle()
        release = client._release

        def release_then_cancel(conn: Connection) -> None:
            release(conn)  # hands the connection to ``waiting``, which has not run yet
            waiting.cancel()

        client._release = release_then_cancel  # type: ignore[method-assign]
        gate.release.set()
        assert await first == (200, OK)
        with pytest.raises(asyncio.CancelledError):
            await waiting
        client._release = release  # type: ignore[method-assign]
        assert await client.post("http://e1:1/run", b"c") == (200, OK)
        assert gate.bodies == [b"a", b"c"] and server.opened == 1
    finally:
        await client.aclose()


async def test_a_failed_connect_hands_its_place_to_a_waiter() -> None:
    server = LoopbackServer(lambda request: httpx.Response(200, content=OK))
    proceed = asyncio.Event()
    attempts = 0

    async def connect(factory: Callable[[], asyncio.Protocol], host: str, port: int
                      ) -> tuple[asyncio.BaseTransport, asyncio.Protocol]:
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            await proceed.wait()
            raise ConnectionRefusedError("refused")
        return await server.connect(factory, host, port)

    client = _client(connect, limit=1)
    try:
        refused = asyncio.create_task(client.post("http://e1:1/run", b"a"))
        waiting = asyncio.create_task(client.post("http://e1:1/run", b"b"))
        await _settle()
        assert attempts == 1  # the second caller waits for the only place
        proceed.set()
        with pytest.raises(HttpError, match="ConnectionRefusedError") as failed:
            await refused
        assert not failed.value.timeout
        assert await waiting == (200, OK)
    finally:
        await client.aclose()


async def test_connect_timeout_frees_the_place() -> None:
    server = LoopbackServer(lambda request: httpx.Response(200, content=OK))
    hang = True

    async def connect(factory: Callable[[], asyncio.Protocol], host: str, port: int
                      ) -> tuple[asyncio.BaseTransport, asyncio.Protocol]:
        if hang:
            await asyncio.Event().wait()
        return await server.connect(factory, host, port)

    client = _client(connect, limit=1, connect_timeout=0.05)
    try:
        with pytest.raises(HttpError, match="ConnectTimeout") as timed_out:
            await client.post("http://e1:1/run", b"a")
        assert timed_out.value.timeout
        hang = False
        assert await client.post("http://e1:1/run", b"b") == (200, OK)
    finally:
        await client.aclose()


async def test_read_timeout_closes_the_connection_and_frees_the_place() -> None:
    gate = Gate()
    server = LoopbackServer(gate)
    client = _client(server.connect, limit=1, read_timeout=0.05)
    try:
        with pytest.raises(HttpError, match="ReadTimeout") as timed_out:
            await client.post("http://e1:1/run", b"a")
        assert timed_out.value.timeout and server.closed == 1
        gate.release.set()
        assert await client.post("http://e1:1/run", b"b") == (200, OK)
        assert server.opened == 2
    finally:
        await client.aclose()


async def test_idle_connections_dropped_or_sent_stray_bytes_are_not_reused() -> None:
    server = LoopbackServer(lambda request: httpx.Response(200, content=OK))
    client = _client(server.connect, limit=1)
    try:
        assert await client.post("http://e1:1/run", b"a") == (200, OK)
        server.transports[0].close()  # the executor drops the idle connection
        await _settle()
        assert await client.post_now("http://e1:1/run", b"b") == (200, OK)
        server.transports[1].protocol.data_received(b"HTTP/1.1 200 OK\r\n")  # an answer to nothing
        assert await client.post_now("http://e1:1/run", b"c") == (200, OK)
        assert server.opened == 3 and server.closed == 2
    finally:
        await client.aclose()


async def test_closing_the_client_fails_the_waiting_callers() -> None:
    gate = Gate()
    server = LoopbackServer(gate)
    client = _client(server.connect, limit=1)
    first = asyncio.create_task(client.post("http://e1:1/run", b"a"))
    waiting = asyncio.create_task(client.post("http://e1:1/run", b"b"))
    await _settle()
    await client.aclose()
    with pytest.raises(HttpError, match="ClientClosed"):
        await waiting
    with pytest.raises(HttpError, match="closed the connection"):
        await first


def test_max_per_host_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_per_host"):
        _client(LoopbackServer(lambda request: httpx.Response(200)).connect, limit=0)
