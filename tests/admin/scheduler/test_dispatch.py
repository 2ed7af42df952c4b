from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable

import httpx
import orjson
import pytest

from jobring.admin.dispatch.client import ExecutorClient, executor_url
from jobring.http1.client import Connect
from jobring.protocol.models import LogParam, ReturnT, TriggerParam
from tests.admin.executor_double import ExecutorDouble
from tests.admin.loopback import Handler, LoopbackServer


def test_executor_url_joins_with_or_without_trailing_slash() -> None:
    assert executor_url("http://h:9999/", "run") == "http://h:9999/run"
    assert executor_url("http://h:9999", "beat") == "http://h:9999/beat"


async def test_run_posts_trigger_param_with_token_and_parses_text_html_json() -> None:
    double = ExecutorDouble(["e1:9999"])
    client = ExecutorClient(access_token="s3cret", connect=double.connect)
    try:
        param = TriggerParam(job_id=7, executor_handler="demo", log_id=3)
        answer = await client.run(double.address(0), param)
    finally:
        await client.aclose()
    assert answer == ReturnT.success()
    (call,) = double.calls
    assert call.path == "run"
    assert call.headers["XXL-JOB-ACCESS-TOKEN"] == "s3cret"
    assert call.headers["Content-Type"] == "application/json;charset=UTF-8"
    assert call.body["jobId"] == 7 and call.body["executorHandler"] == "demo" and call.body["logId"] == 3


async def test_no_token_header_without_token() -> None:
    double = ExecutorDouble(["e1:9999"])
    client = ExecutorClient(access_token=None, connect=double.connect)
    try:
        await client.beat(double.address(0))
    finally:
        await client.aclose()
    assert "XXL-JOB-ACCESS-TOKEN" not in double.calls[0].headers


async def test_idle_beat_kill_and_log_bodies() -> None:
    double = ExecutorDouble(["e1:9999"])

    async def log_answer(body: dict[str, object]) -> ReturnT:
        return ReturnT.success({"fromLineNum": 1, "toLineNum": 2, "logContent": "a\nb", "isEnd": False})

    double.answer(double.address(0), "log", log_answer)
    client = ExecutorClient(access_token=None, connect=double.connect)
    try:
        assert (await client.idle_beat(double.address(0), 5)).ok
        assert (await client.kill(double.address(0), 5)).ok
        got = await client.log(double.address(0), LogParam(1700000000000, 9, 1))
    finally:
        await client.aclose()
    expected = [("idleBeat", {"jobId": 5}), ("kill", {"jobId": 5})]
    assert [(c.path, c.body) for c in double.calls[:2]] == expected
    assert double.calls[2].body == {"logDateTim": 1700000000000, "logId": 9, "fromLineNum": 1}
    assert got.content["logContent"] == "a\nb"


def _client(handler: Handler, *, read_timeout: float = 3.0, connect: Connect | None = None) -> ExecutorClient:
    """The production client, connected in memory to ``handler``."""
    return ExecutorClient(access_token=None, read_timeout=read_timeout,
                          connect=connect or LoopbackServer(handler).connect)


async def _never(request: httpx.Request) -> httpx.Response:
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


async def _refuse(factory: Callable[[], asyncio.Protocol], host: str, port: int
                  ) -> tuple[asyncio.BaseTransport, asyncio.Protocol]:
    raise ConnectionRefusedError(f"connection to {host}:{port} refused")


async def _connect_times_out(factory: Callable[[], asyncio.Protocol], host: str, port: int
                             ) -> tuple[asyncio.BaseTransport, asyncio.Protocol]:
    raise TimeoutError("connect timed out")  # as the OS says it (an OSError)


@pytest.mark.parametrize(
    ("connect", "read_timeout", "expected"),
    [
        (_refuse, 3.0, "unreachable (ConnectionRefusedError)"),
        (_connect_times_out, 3.0, "timed out (ConnectTimeout)"),
        (None, 0.05, "timed out (ReadTimeout)"),
    ],
)
async def test_transport_errors_become_failed_returnt(connect: Connect | None, read_timeout: float,
                                                      expected: str) -> None:
    client = _client(_never, read_timeout=read_timeout, connect=connect)
    try:
        answer = await client.run("http://e1:9999/", TriggerParam(job_id=1))
    finally:
        await client.aclose()
    assert answer.code == 500
    assert answer.msg is not None and expected in answer.msg and "http://e1:9999/run" in answer.msg


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (404, b"not here", "answered HTTP 404"),
        (200, b"<html>oops</html>", "not a ReturnT"),
        (200, b"[1,2]", "not a ReturnT"),
    ],
)
async def test_bad_answers_become_failed_returnt(status: int, body: bytes, expected: str) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, content=body)

    client = _client(handler)
    try:
        answer = await client.beat("http://e1:9999/")
    finally:
        await client.aclose()
    assert answer.code == 500 and answer.msg is not None and expected in answer.msg


async def test_unparsable_and_oversized_answers_become_failed_returnt() -> None:
    answers = iter([b"HTTP/1.1 2xx OK\r\n\r\n",
                    b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (17 << 20)])

    async def raw(factory: Callable[[], asyncio.Protocol], host: str, port: int
                  ) -> tuple[asyncio.BaseTransport, asyncio.Protocol]:
        transport, protocol = await LoopbackServer(_never).connect(factory, host, port)
        protocol.data_received(next(answers))  # the answer is there before the request
        return transport, protocol

    client = _client(_never, connect=raw)
    try:
        bad = await client.beat("http://e1:9999/")
        huge = await client.beat("http://e1:9999/")
    finally:
        await client.aclose()
    assert bad.msg is not None and "unreachable (BadAnswer): not an HTTP/1.x answer" in bad.msg
    assert huge.msg is not None and "(AnswerTooLarge)" in huge.msg and str(16 << 20) in huge.msg


async def test_executor_failure_answer_is_passed_through() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=b'{"code":500,"msg":"job handler [x] not found."}')

    client = _client(handler)
    try:
        answer = await client.run("http://e1:9999/", TriggerParam(job_id=1, executor_handler="x"))
    finally:
        await client.aclose()
    assert answer == ReturnT(500, "job handler [x] not found.", None)


async def test_calls_to_one_executor_wait_for_one_of_max_connections() -> None:
    release = asyncio.Event()
    started: list[str] = []
    server = LoopbackServer(lambda request: httpx.Response(500))

    async def handler(request: httpx.Request) -> httpx.Response:
        started.append(request.url.host)
        await release.wait()
        return httpx.Response(200, content=ReturnT.success().encode())

    server.handler = handler
    client = ExecutorClient(access_token=None, max_connections=2, connect=server.connect)
    try:
        calls = [asyncio.create_task(client.beat(a)) for a in ["http://e1:1/"] * 5 + ["http://e2:1/"]]
        for _ in range(20):
            await asyncio.sleep(0)
        # Two calls to e1 are in flight, three wait; e2 has its own limit.
        assert sorted(started) == ["e1", "e1", "e2"] and server.opened == 3
        release.set()
        assert all(answer.ok for answer in await asyncio.gather(*calls))
    finally:
        await client.aclose()
    assert server.opened == 3 and started.count("e1") == 5  # the waiting calls reused the two


async def test_real_timeout_against_a_silent_server() -> None:
    done = asyncio.Event()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(100)
        await done.wait()  # never answers
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = ExecutorClient(access_token=None, read_timeout=0.2)
    try:
        answer = await client.run(f"http://127.0.0.1:{port}/", TriggerParam(job_id=1))
    finally:
        await client.aclose()
        done.set()
        server.close()
        await server.wait_closed()
    assert answer.code == 500 and answer.msg is not None and "timed out" in answer.msg


# -- the network client (no injected transport) against real loopback servers -------------

# (path, JSON body, headers) -> (status, content type, body)
StubHandler = Callable[[str, dict[str, object], dict[str, str]], tuple[int, str, bytes]]


class _Stub:
    """A keep-alive HTTP/1.1 executor stub on a loopback port (POST with Content-Length only)."""

    def __init__(self, handler: StubHandler) -> None:
        self._handler = handler
        self._writers: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._connection, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}/"

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                lines = head.decode("latin-1").split("\r\n")
                fields = (line.partition(":") for line in lines[1:] if line)
                headers = {name.strip().lower(): value.strip() for name, _, value in fields}
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                status, kind, answer = self._handler(lines[0].split(" ")[1].lstrip("/"),
                                                     orjson.loads(body) if body else {}, headers)
                writer.write(f"HTTP/1.1 {status} X\r\nContent-Type: {kind}\r\n"
                             f"Content-Length: {len(answer)}\r\n\r\n".encode() + answer)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            writer.close()
        await self._server.wait_closed()


async def test_network_client_posts_json_with_token_and_reads_text_html() -> None:
    seen: list[tuple[str, dict[str, object], str | None, str | None]] = []

    def handler(path: str, body: dict[str, object], headers: dict[str, str]) -> tuple[int, str, bytes]:
        seen.append((path, body, headers.get("xxl-job-access-token"), headers.get("content-type")))
        return 200, "text/html;charset=UTF-8", b'{"code":200,"msg":null}'

    server = _Stub(handler)
    address = await server.start()
    client = ExecutorClient(access_token="tok")
    try:
        answers = [await client.run(address, TriggerParam(job_id=3, log_id=8)) for _ in range(3)]
        assert (await client.idle_beat(address, 3)).ok
    finally:
        await client.aclose()
        await server.stop()
    assert answers == [ReturnT.success()] * 3
    assert [s[0] for s in seen] == ["run", "run", "run", "idleBeat"]
    assert seen[0][1]["jobId"] == 3 and seen[0][1]["logId"] == 8
    assert seen[0][2] == "tok" and seen[0][3] == "application/json;charset=UTF-8"


async def test_network_client_maps_refused_and_http_errors() -> None:
    server = _Stub(lambda path, body, headers: (503, "text/plain", b"overloaded"))
    address = await server.start()
    client = ExecutorClient(access_token=None)
    try:
        busy = await client.beat(address)
        await server.stop()
        refused = await client.beat(address)
    finally:
        await client.aclose()
    assert busy.code == 500 and busy.msg is not None and "answered HTTP 503: overloaded" in busy.msg
    assert refused.code == 500 and refused.msg is not None and "unreachable" in refused.msg


async def test_https_goes_through_httpx_and_a_failure_is_an_answer() -> None:
    with socket.socket() as probe:  # a loopback port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = ExecutorClient(access_token="tok", connect_timeout=1.0)
    try:
        answer = await client.beat(f"https://127.0.0.1:{port}/")
    finally:
        await client.aclose()
    assert answer.code == 500 and answer.msg is not None and "unreachable" in answer.msg
