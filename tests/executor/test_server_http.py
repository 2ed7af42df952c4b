"""The standalone HTTP/1.1 server: keep-alive, pipelining order, close, 100-continue, bad input."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest

from jobring.executor.http.app import ExecutorEndpoints
from jobring.executor.http.decode import MAX_BODY_BYTES
from jobring.executor.http.protocol import ExecutorHttpServer
from jobring.executor.runlog import RunLog
from jobring.protocol.models import ReturnT, TriggerParam

TOKEN = b"s3cret"


class SlowFirstService:
    """Answers /run for job 1 only after job 2's answer could have gone out."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.entered = asyncio.Event()
        self.order: list[int] = []

    async def run(self, param: TriggerParam) -> ReturnT:
        self.entered.set()
        if param.job_id == 1:
            await self.release.wait()
        else:
            self.release.set()
        self.order.append(param.job_id)
        return ReturnT(200, f"job {param.job_id}")

    def is_idle(self, job_id: int) -> bool:
        return True

    async def kill(self, job_id: int) -> ReturnT:
        return ReturnT.success()


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[int, SlowFirstService]]:
    service = SlowFirstService()
    endpoints = ExecutorEndpoints(TOKEN.decode())
    endpoints.bind(service, RunLog(tmp_path).read)
    server = ExecutorHttpServer(endpoints, keep_alive_timeout_s=5)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    sock.setblocking(False)
    await server.start(sock)
    try:
        yield sock.getsockname()[1], service
    finally:
        await server.stop(grace_s=1)
        sock.close()


def request(
    path: str, body: bytes, *, token: bytes = TOKEN, extra: bytes = b"", method: bytes = b"POST"
) -> bytes:
    return (b"%s %s HTTP/1.1\r\nHost: x\r\nXXL-JOB-ACCESS-TOKEN: %s\r\nContent-Length: %d\r\n%s\r\n%s"
            % (method, path.encode(), token, len(body), extra, body))


async def read_answer(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
    return head, await asyncio.wait_for(reader.readexactly(length), 5)


async def test_pipelined_requests_are_answered_in_order_on_one_connection(
    served: tuple[int, SlowFirstService],
) -> None:
    port, service = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request("/run", b'{"jobId":1}') + request("/run", b'{"jobId":2}')
                     + request("/beat", b""))
        answers = [orjson.loads((await read_answer(reader))[1]) for _ in range(3)]
    finally:
        writer.close()
    assert service.order == [2, 1]  # job 2 finished first ...
    assert answers == [{"code": 200, "msg": "job 1"}, {"code": 200, "msg": "job 2"}, {"code": 200}]


async def test_answers_are_http_200_json_with_length_and_keep_alive(
    served: tuple[int, SlowFirstService],
) -> None:
    port, _ = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request("/nope", b"{}"))
        head, body = await read_answer(reader)
        assert head.startswith(b"HTTP/1.1 200 OK\r\n")
        assert b"content-type: application/json" in head.lower()
        assert body == b'{"code":500,"msg":"invalid request, uri-mapping(/nope) not found."}'
        writer.write(request("/beat", b"", method=b"GET"))
        answer = orjson.loads((await read_answer(reader))[1])
        assert answer["msg"] == "invalid request, HttpMethod not support."
        writer.write(request("/beat?x=1", b"", extra=b"Connection: close\r\n"))
        head, body = await read_answer(reader)
        assert body == b'{"code":200}' and b"connection: close" in head.lower()
        assert await asyncio.wait_for(reader.read(), 5) == b""  # the server closed it
    finally:
        writer.close()


async def test_a_wrong_token_is_answered_from_the_head_and_the_connection_closed(
    served: tuple[int, SlowFirstService],
) -> None:
    port, service = served
    for token in (b"wrong", None):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            # The head announces a body that never comes: the answer does not wait for it.
            head = (b"POST /run HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n"
                    + (b"XXL-JOB-ACCESS-TOKEN: " + token + b"\r\n" if token else b"") + b"\r\n")
            writer.write(head + b'{"jobId":1')
            answer_head, body = await read_answer(reader)
            assert body == b'{"code":500,"msg":"The access token is wrong."}'
            assert b"connection: close" in answer_head.lower()
            writer.write(b"x" * 990)  # the rest of the body is dropped
            assert await asyncio.wait_for(reader.read(), 5) == b""
        finally:
            writer.close()
    assert service.order == []


async def test_expect_100_continue_and_chunked_bodies(served: tuple[int, SlowFirstService]) -> None:
    port, service = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"POST /run HTTP/1.1\r\nHost: x\r\nXXL-JOB-ACCESS-TOKEN: s3cret\r\n"
                     b"Expect: 100-continue\r\nTransfer-Encoding: chunked\r\n\r\n")
        assert await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5) == b"HTTP/1.1 100 Continue\r\n\r\n"
        writer.write(b"6\r\n{\"jobI\r\n5\r\nd\":2}\r\n0\r\n\r\n")
        assert orjson.loads((await read_answer(reader))[1]) == {"code": 200, "msg": "job 2"}
    finally:
        writer.close()


async def test_garbage_gets_400_and_oversized_body_a_clear_error(
    served: tuple[int, SlowFirstService],
) -> None:
    port, _ = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"\x00\x01 not http at all\r\n\r\n")
        head = await asyncio.wait_for(reader.read(), 5)
        assert head.startswith(b"HTTP/1.1 400 Bad Request")
    finally:
        writer.close()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        size = MAX_BODY_BYTES + 10
        writer.write(b"POST /run HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % size)
        chunk = b"x" * (1 << 20)
        for _ in range(size // len(chunk)):
            writer.write(chunk)
        writer.write(b"x" * (size % len(chunk)))
        await writer.drain()
        head, body = await read_answer(reader)
        assert orjson.loads(body)["msg"].startswith("request error:request body larger than")
        assert b"connection: close" in head.lower()
    finally:
        writer.close()


async def test_stop_waits_for_answers_in_progress(tmp_path: Path) -> None:
    service = SlowFirstService()
    endpoints = ExecutorEndpoints(None)
    endpoints.bind(service, RunLog(tmp_path).read)
    server = ExecutorHttpServer(endpoints)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    sock.setblocking(False)
    await server.start(sock)
    reader, writer = await asyncio.open_connection("127.0.0.1", sock.getsockname()[1])
    try:
        writer.write(request("/run", b'{"jobId":1}'))
        await asyncio.wait_for(service.entered.wait(), 5)  # the request is being answered
        stopping = asyncio.create_task(server.stop(grace_s=5))
        service.release.set()
        assert orjson.loads((await read_answer(reader))[1]) == {"code": 200, "msg": "job 1"}
        await asyncio.wait_for(stopping, 5)
    finally:
        writer.close()
        sock.close()


async def test_idle_keep_alive_connections_are_closed(tmp_path: Path) -> None:
    endpoints = ExecutorEndpoints(None)
    endpoints.bind(SlowFirstService(), RunLog(tmp_path).read)
    server = ExecutorHttpServer(endpoints, keep_alive_timeout_s=0.2)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    sock.setblocking(False)
    await server.start(sock)
    reader, writer = await asyncio.open_connection("127.0.0.1", sock.getsockname()[1])
    try:
        for _ in range(3):
            writer.write(request("/beat", b""))
            assert (await read_answer(reader))[1] == b'{"code":200}'
        assert await asyncio.wait_for(reader.read(), 5) == b""  # closed by the server once idle
    finally:
        writer.close()
        await server.stop(grace_s=1)
        sock.close()
