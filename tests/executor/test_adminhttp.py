"""The executor's lean POST to a plain-http admin: framing, keep-alive, a kept connection the
admin closed, timeouts, bounds; https and proxied admins through httpx."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import httpx
import pytest

from jobring.executor.adminhttp import AdminHttp, AdminHttpError, _plain_target

HEADERS = {"Content-Type": "application/json", "XXL-JOB-ACCESS-TOKEN": "tok"}
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n" + b'{"code":200}'

Script = Callable[[int, bytes], bytes | None]  # (request number, request) -> what to write, None: nothing


class ScriptedAdmin:
    """Answers each request as ``script`` says; counts connections and requests."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.connections = 0
        self.requests: list[bytes] = []
        self.writers: list[asyncio.StreamWriter] = []
        self.tasks: set[asyncio.Task[None]] = set()
        self.server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/xxl-job-admin/api/callback"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.append(writer)
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                request = head + await reader.readexactly(length)
                self.requests.append(request)
                answer = self.script(len(self.requests), request)
                if answer is None:
                    continue
                writer.write(answer)
                await writer.drain()
                if b"connection: close" in answer.lower() or b"content-length" not in answer.lower() and (
                        b"chunked" not in answer.lower()):
                    writer.close()
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    def drop_connections(self) -> None:
        for writer in self.writers:
            writer.close()

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        self.drop_connections()
        await self.server.wait_closed()
        if self.tasks:  # each sees its connection end; none is left to be cancelled
            await asyncio.wait(self.tasks, timeout=2.0)


@pytest.fixture
async def http() -> AsyncIterator[AdminHttp]:
    async with httpx.AsyncClient(timeout=2.0) as client:
        lean = AdminHttp(client, 0.5)
        yield lean
        await lean.aclose()


async def scripted(script: Script) -> ScriptedAdmin:
    admin = ScriptedAdmin(script)
    await admin.start()
    return admin


async def test_posts_reuse_one_kept_connection(http: AdminHttp) -> None:
    admin = await scripted(lambda n, request: OK)
    try:
        for n in range(3):
            assert await http.post(admin.url, b"[%d]" % n, HEADERS) == (200, b'{"code":200}')
    finally:
        await admin.stop()
    assert admin.connections == 1
    first = admin.requests[0]
    assert first.startswith(b"POST /xxl-job-admin/api/callback HTTP/1.1\r\nHost: 127.0.0.1:")
    assert b"XXL-JOB-ACCESS-TOKEN: tok\r\n" in first and first.endswith(b"\r\n\r\n[0]")


async def test_chunked_and_close_delimited_answers(http: AdminHttp) -> None:
    answers = {
        1: b"HTTP/1.1 200 \r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"cod\r\n7\r\ne\":200}\r\n0\r\n\r\n",
        2: b"HTTP/1.0 500 Oops\r\nContent-Type: text/plain\r\n\r\nfailed",
    }
    admin = await scripted(lambda n, request: answers[n])
    try:
        assert await http.post(admin.url, b"[]", HEADERS) == (200, b'{"code":200}')
        # No length: the body ends with the connection.
        assert await http.post(admin.url, b"[]", HEADERS) == (500, b"failed")
    finally:
        await admin.stop()


async def test_interim_answer_is_skipped(http: AdminHttp) -> None:
    admin = await scripted(lambda n, request: b"HTTP/1.1 100 Continue\r\n\r\n" + OK)
    try:
        assert await http.post(admin.url, b"[]", HEADERS) == (200, b'{"code":200}')
    finally:
        await admin.stop()


async def test_a_kept_connection_the_admin_closed_is_replaced(http: AdminHttp) -> None:
    admin = await scripted(lambda n, request: OK)
    try:
        assert (await http.post(admin.url, b"[1]", HEADERS))[0] == 200
        admin.drop_connections()  # the admin's keep-alive timeout
        await asyncio.sleep(0.05)
        assert (await http.post(admin.url, b"[2]", HEADERS))[0] == 200
    finally:
        await admin.stop()
    assert admin.connections == 2
    assert [r.endswith(b"[1]") or r.endswith(b"[2]") for r in admin.requests] == [True, True]


async def test_a_silent_admin_times_out_and_its_connection_is_not_reused(http: AdminHttp) -> None:
    admin = await scripted(lambda n, request: None if n == 1 else OK)
    try:
        with pytest.raises(AdminHttpError, match="no answer"):
            await http.post(admin.url, b"[1]", HEADERS)
        assert (await http.post(admin.url, b"[2]", HEADERS))[0] == 200
    finally:
        await admin.stop()
    assert admin.connections == 2


async def test_an_answer_over_the_bound_is_an_error() -> None:
    big = b"x" * 200
    admin = await scripted(lambda n, request: b"HTTP/1.1 200 OK\r\nContent-Length: 200\r\n\r\n" + big)
    async with httpx.AsyncClient() as client:
        lean = AdminHttp(client, 0.5, max_answer_bytes=100)
        try:
            with pytest.raises(AdminHttpError, match="over 100 bytes"):
                await lean.post(admin.url, b"[]", HEADERS)
        finally:
            await lean.aclose()
            await admin.stop()


async def test_garbage_and_refused_connections_are_errors(http: AdminHttp) -> None:
    admin = await scripted(lambda n, request: b"NOT HTTP AT ALL\r\n\r\n")
    try:
        with pytest.raises(AdminHttpError, match="bad answer"):
            await http.post(admin.url, b"[]", HEADERS)
    finally:
        await admin.stop()
    with pytest.raises(AdminHttpError, match="cannot connect"):
        await http.post(admin.url, b"[]", HEADERS)  # nobody listens there anymore


async def test_https_and_proxied_admins_go_through_httpx(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(200, content=b'{"code":200}')

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        lean = AdminHttp(client, 0.5)
        assert await lean.post("https://admin.example/api/callback", b"[]", HEADERS) == (200, b'{"code":200}')
        monkeypatch.setenv("http_proxy", "http://proxy.example:3128")
        _plain_target.cache_clear()
        try:
            assert (await lean.post("http://admin.example/api/callback", b"[]", HEADERS))[0] == 200
        finally:
            _plain_target.cache_clear()
    assert seen == ["https://admin.example/api/callback", "http://admin.example/api/callback"]
