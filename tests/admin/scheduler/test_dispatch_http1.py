"""The lean HTTP/1.1 client against raw loopback servers: keep-alive reuse, chunked answers,
answers ended by close, connections the server dropped, timeouts."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest

from jobring.http1.client import Http1Client, HttpError

Answer = Callable[[bytes], bytes | None]  # request head -> raw answer (None: close)


@asynccontextmanager
async def raw_server(answer: Answer) -> AsyncIterator[tuple[str, list[int]]]:
    """Serve requests (head + Content-Length body) with ``answer``; yields (url, requests per
    connection)."""
    per_connection: list[int] = []
    writers: list[asyncio.StreamWriter] = []
    handlers: list[asyncio.Task[None]] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        index = len(per_connection)
        per_connection.append(0)
        writers.append(writer)
        task = asyncio.current_task()
        assert task is not None
        handlers.append(task)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                per_connection[index] += 1
                raw = answer(head)
                if raw is None:
                    break
                writer.write(raw)
                await writer.drain()
                if raw.startswith(b"HTTP/1.0"):
                    break  # an answer without a length ends with the connection
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/run", per_connection
    finally:
        server.close()
        for writer in writers:
            writer.close()
        await asyncio.gather(*handlers, return_exceptions=True)
        await server.wait_closed()


def _client(read_timeout: float = 3.0) -> Http1Client:
    return Http1Client({"Content-Type": "application/json", "XXL-JOB-ACCESS-TOKEN": "tok"},
                       connect_timeout=3.0, read_timeout=read_timeout, keepalive_s=15.0)


BODY = b'{"code":200,"msg":null}'
OK = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY)


async def test_keep_alive_connection_is_reused_and_headers_are_sent() -> None:
    heads: list[bytes] = []

    def answer(head: bytes) -> bytes:
        heads.append(head)
        return OK

    client = _client()
    try:
        async with raw_server(answer) as (url, per_connection):
            assert await client.post(url, b"{}") == (200, BODY)
            assert await client.post(url, b'{"a":1}') == (200, BODY)
            assert per_connection == [2]
    finally:
        await client.aclose()
    assert heads[0].startswith(b"POST /run HTTP/1.1\r\nHost: 127.0.0.1:")
    assert b"XXL-JOB-ACCESS-TOKEN: tok" in heads[0] and b"Content-Length: 7" in heads[1]


async def test_post_now_writes_at_once_on_an_idle_connection() -> None:
    second = asyncio.Event()
    heads: list[bytes] = []

    def answer(head: bytes) -> bytes:
        heads.append(head)
        if len(heads) == 2:
            second.set()
        return OK

    client = _client()
    try:
        async with raw_server(answer) as (url, per_connection):
            assert await client.post_now(url, b"{}") == (200, BODY)  # nothing idle: sent when awaited
            pending = client.post_now(url, b'{"a":1}')
            # Written before anything awaited it: the server has it while ``pending`` waits.
            await asyncio.wait_for(second.wait(), timeout=5)
            assert await pending == (200, BODY)
            assert per_connection == [2]
    finally:
        await client.aclose()


async def test_chunked_answer_and_answer_ended_by_close() -> None:
    chunked = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
               b'5\r\n{"cod\r\n10;x=y\r\ne":200,"msg":""}\r\n0\r\n\r\n')
    until_close = b"HTTP/1.0 500 Oops\r\nContent-Type: text/html\r\n\r\nbroken"
    answers = iter([chunked, until_close, OK])
    client = _client()
    try:
        async with raw_server(lambda head: next(answers)) as (url, per_connection):
            assert await client.post(url, b"{}") == (200, b'{"code":200,"msg":""}')
            status, body = await client.post(url, b"{}")
            assert (status, body) == (500, b"broken")
            assert await client.post(url, b"{}") == (200, BODY)
            assert per_connection == [2, 1]  # the answer ended by close was not reused
    finally:
        await client.aclose()


async def test_connection_close_header_and_dropped_idle_connection_open_new_ones() -> None:
    closing = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY)
    answers = iter([closing, OK, None, OK])
    client = _client()
    try:
        async with raw_server(lambda head: next(answers)) as (url, per_connection):
            assert await client.post(url, b"{}") == (200, BODY)
            assert await client.post(url, b"{}") == (200, BODY)
            # The server drops the kept connection without answering: a failed call, no retry.
            with pytest.raises(HttpError, match="closed"):
                await client.post(url, b"{}")
            assert await client.post(url, b"{}") == (200, BODY)
            assert per_connection == [1, 2, 1]
    finally:
        await client.aclose()


async def test_timeouts_and_refused_connections_are_http_errors() -> None:
    client = _client(read_timeout=0.2)
    try:
        async with raw_server(lambda head: b"") as (url, _):
            with pytest.raises(HttpError) as timed_out:
                await client.post(url, b"{}")
            assert timed_out.value.timeout
        with pytest.raises(HttpError) as refused:
            await client.post(url, b"{}")  # the server is gone
        assert not refused.value.timeout
        with pytest.raises(HttpError, match="not a plain http URL"):
            await client.post("https://127.0.0.1:1/run", b"{}")
    finally:
        await client.aclose()


async def test_no_content_answer_is_not_read_until_close() -> None:
    # Without a body to wait for, the answer ends with its head and the connection is kept.
    answers = iter([b"HTTP/1.1 204 No Content\r\n\r\n", b"HTTP/1.1 100 Continue\r\n\r\n" + OK])
    client = _client(read_timeout=5.0)
    try:
        async with raw_server(lambda head: next(answers)) as (url, per_connection):
            assert await client.post(url, b"{}") == (204, b"")
            assert await client.post(url, b"{}") == (200, BODY)
            assert per_connection == [2]
    finally:
        await client.aclose()
