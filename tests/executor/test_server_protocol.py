"""The standalone server's protocol against an in-memory transport: how bytes are split does
not change the answers, malformed input is refused, and reading pauses under backpressure."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobring.executor.http.app import ExecutorEndpoints
from jobring.executor.http.limits import ServerLimits
from jobring.executor.http.protocol import ExecutorHttpServer, HttpConnection
from jobring.protocol.edge import HeadLimits
from jobring.protocol.models import LogResult, ReturnT, TriggerParam


class FakeTransport:
    """What the protocol uses of an asyncio transport, recording writes and flow control."""

    def __init__(self) -> None:
        self.written = bytearray()
        self.closed = False
        self.eof = False
        self.reading = True
        self.pauses = 0
        self.limits: tuple[int, int] | None = None

    def write(self, data: bytes) -> None:
        assert not self.closed
        self.written += data

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.eof = True

    def pause_reading(self) -> None:
        assert self.reading
        self.reading = False
        self.pauses += 1

    def resume_reading(self) -> None:
        assert not self.reading
        self.reading = True

    def set_write_buffer_limits(self, high: int, low: int) -> None:
        self.limits = (high, low)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


class Service:
    """Answers at once, or (with ``gate``) only once the gate opens."""

    def __init__(self) -> None:
        self.gate: asyncio.Event | None = None
        self.ran: list[int] = []

    async def run(self, param: TriggerParam) -> ReturnT:
        if self.gate is not None:
            await self.gate.wait()
        self.ran.append(param.job_id)
        return ReturnT(200, f"job {param.job_id}")

    def is_idle(self, job_id: int) -> bool:
        return job_id % 2 == 0

    async def kill(self, job_id: int) -> ReturnT:
        return ReturnT(200, f"killed {job_id}")


def read_log(log_date_time: int, log_id: int, from_line: int) -> LogResult:
    raise AssertionError("no log reads in these tests")


def connect(
    service: Service, limits: ServerLimits | None = None, *, head_limits: HeadLimits | None = None,
    keep_alive_timeout_s: float = 75.0,
) -> tuple[HttpConnection, FakeTransport]:
    endpoints = ExecutorEndpoints(None)
    endpoints.bind(service, read_log)
    server = ExecutorHttpServer(endpoints, limits=limits, head_limits=head_limits,
                                keep_alive_timeout_s=keep_alive_timeout_s)
    connection = HttpConnection(server)
    transport = FakeTransport()
    connection.connection_made(transport)  # type: ignore[arg-type]
    return connection, transport


def post(path: str, body: bytes, extra: bytes = b"") -> bytes:
    head = b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n" % (path.encode(), len(body))
    return head + extra + b"\r\n" + body


def post_chunked(path: str, parts: list[bytes]) -> bytes:
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts if p)
    head = b"POST %s HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" % path.encode()
    return head + chunks + b"0\r\n\r\n"


def answers(written: bytes) -> list[tuple[bytes, Any]]:
    """Status lines and JSON bodies of the answers in ``written`` (100 Continue skipped)."""
    out = []
    rest = bytes(written)
    while rest:
        head, _, rest = rest.partition(b"\r\n\r\n")
        status = head.split(b"\r\n", 1)[0]
        if status == b"HTTP/1.1 100 Continue":
            continue
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        out.append((status, orjson.loads(rest[:length])))
        rest = rest[length:]
    return out


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def split_at(body: bytes, cut: int) -> list[bytes]:
    return [body[:cut], body[cut:]]


request_strategy = st.one_of(
    st.builds(lambda: post("/beat", b"")),
    st.builds(lambda n: post("/run", b'{"jobId":%d}' % n), st.integers(1, 10**6)),
    st.builds(lambda n: post("/idleBeat", b'{"jobId":%d}' % n), st.integers(1, 99)),
    st.builds(lambda n: post("/kill", b'{"jobId":%d}' % n, b"Expect: 100-continue\r\n"), st.integers(1, 99)),
    st.builds(lambda n, cut: post_chunked("/run", split_at(b'{"jobId":%d}' % n, cut)),
              st.integers(1, 99), st.integers(0, 8)),
    st.builds(lambda: post("/nope?x=1", b"{}")),
)


async def feed(pieces: list[bytes]) -> bytes:
    connection, transport = connect(Service())
    for piece in pieces:
        connection.data_received(piece)
    await settle()
    assert not transport.closed
    connection.connection_lost(None)
    return bytes(transport.written)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests=st.lists(request_strategy, min_size=1, max_size=5), data=st.data())
def test_any_split_of_valid_pipelined_requests_gets_the_same_answers_in_order(
    requests: list[bytes], data: st.DataObject
) -> None:
    stream = b"".join(requests)
    whole = asyncio.run(feed([stream]))
    byte_at_a_time = asyncio.run(feed([stream[i:i + 1] for i in range(len(stream))]))
    cuts = sorted(data.draw(st.sets(st.integers(1, len(stream) - 1), max_size=8)))
    bounds = [0, *cuts, len(stream)]
    split = asyncio.run(feed([stream[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]))
    got = answers(whole)
    assert len(got) == len(requests)
    assert all(status == b"HTTP/1.1 200 OK" for status, _ in got)
    assert answers(byte_at_a_time) == got and answers(split) == got
    assert whole == byte_at_a_time == split


async def test_answers_follow_the_requests() -> None:
    written = await feed([post("/run", b'{"jobId":7}') + post("/idleBeat", b'{"jobId":3}')
                          + post_chunked("/kill", [b'{"jo', b'bId":4}']) + post("/beat", b"")])
    assert [body for _, body in answers(written)] == [
        {"code": 200, "msg": "job 7"},
        {"code": 500, "msg": "job thread is running or has trigger queue."},
        {"code": 200, "msg": "killed 4"},
        {"code": 200},
    ]


MALFORMED = [
    pytest.param(b"\x00\x01 not http\r\n\r\n", id="binary-garbage"),
    pytest.param(b"POST /run HTTP/1.1 extra\r\n\r\n", id="bad-request-line"),
    pytest.param(b"POST /r un HTTP/1.1\r\n\r\n", id="space-in-target"),
    pytest.param(b"POST /run HTTP/1.1\r\nNo colon here\r\n\r\n", id="header-without-colon"),
    pytest.param(b"POST /run HTTP/1.1\r\nBad Name: x\r\n\r\n", id="space-in-header-name"),
    pytest.param(b"POST /run HTTP/1.1\r\nContent-Length: abc\r\n\r\n", id="content-length-not-a-number"),
    pytest.param(b"POST /run HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxx",
                 id="two-content-lengths"),
    pytest.param(b"POST /run HTTP/1.1\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
                 id="content-length-and-chunked"),
    pytest.param(b"POST /run HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", id="bad-chunk-size"),
    pytest.param(b"POST /run HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n",
                 id="chunk-too-long"),
]


@pytest.mark.parametrize("raw", MALFORMED)
async def test_malformed_requests_get_400_and_the_connection_closes(raw: bytes) -> None:
    service = Service()
    connection, transport = connect(service)
    connection.data_received(raw)
    await settle()
    assert transport.written.startswith(b"HTTP/1.1 400 Bad Request\r\n")
    assert b"Connection: close\r\n" in transport.written and transport.closed
    assert answers(bytes(transport.written))[0][1] == {"code": 500, "msg": "invalid HTTP request"}
    assert service.ran == []


@pytest.mark.parametrize(("raw", "answered"), [
    pytest.param(post("/run", b'{"jobId":1}' + b" " * 100), False, id="declared-length"),
    pytest.param(post("/run", b'{"jobId":1}' + b" " * 100, b"Expect: 100-continue\r\n"), False,
                 id="declared-length-expecting-100-continue"),
    pytest.param(post_chunked("/run", [b'{"jobId":1}', b" " * 100]), False, id="chunked"),
    pytest.param(post("/run", b'{"jobId":1}' + b" " * 53), True, id="at-the-limit"),
])
async def test_body_past_the_limit_gets_413(raw: bytes, answered: bool) -> None:
    service = Service()
    connection, transport = connect(service, ServerLimits(max_body_bytes=64))
    connection.data_received(raw)
    await settle()
    if answered:
        assert answers(bytes(transport.written)) == [(b"HTTP/1.1 200 OK", {"code": 200, "msg": "job 1"})]
        return
    assert transport.written.startswith(b"HTTP/1.1 413 Content Too Large\r\n")  # no 100 Continue
    status, body = answers(bytes(transport.written))[0]
    assert transport.eof
    assert body == {"code": 500, "msg": "request error:request body larger than 64 bytes"}
    assert service.ran == []


async def test_reading_pauses_while_the_client_does_not_take_its_answers() -> None:
    service = Service()
    connection, transport = connect(service, ServerLimits(write_high_water=1000, write_low_water=10))
    assert transport.limits == (1000, 10)
    connection.pause_writing()  # the transport's buffer went past the high-water mark
    assert not transport.reading
    connection.data_received(post("/run", b'{"jobId":1}'))  # already read: still answered
    await settle()
    assert service.ran == [1] and not transport.reading
    connection.resume_writing()
    assert transport.reading and transport.pauses == 1


async def test_reading_pauses_while_too_many_pipelined_answers_are_owed() -> None:
    service = Service()
    service.gate = asyncio.Event()
    connection, transport = connect(service, ServerLimits(max_pipelined=3))
    connection.data_received(post("/run", b'{"jobId":1}') + post("/run", b'{"jobId":2}'))
    await settle()
    assert transport.reading
    connection.data_received(post("/run", b'{"jobId":3}'))
    await settle()
    assert not transport.reading and transport.written == b""
    service.gate.set()
    await settle()
    assert transport.reading
    assert [body["msg"] for _, body in answers(bytes(transport.written))] == ["job 1", "job 2", "job 3"]


async def test_a_refusal_while_paused_reads_again_to_linger() -> None:
    service = Service()
    connection, transport = connect(service, ServerLimits(max_body_bytes=8))
    connection.pause_writing()
    connection.data_received(post("/run", b'{"jobId":1}'))
    assert transport.reading and transport.eof  # refused with 413, lingering reads and drops
    connection.data_received(b"more")
    assert answers(bytes(transport.written))[0][0] == b"HTTP/1.1 413 Content Too Large"


def test_limits_are_checked() -> None:
    with pytest.raises(ValueError):
        ServerLimits(max_connections=0)
    with pytest.raises(ValueError):
        ServerLimits(write_high_water=10, write_low_water=20)
    with pytest.raises(ValueError):
        ServerLimits(max_pipelined=0)


@pytest.mark.parametrize(("raw", "status"), [
    pytest.param(post("/run", b'{"jobId":1}', b"X-A: " + b"a" * 100 + b"\r\n"), b"HTTP/1.1 200 OK",
                 id="within"),
    pytest.param(post("/run?" + "q" * 64, b'{"jobId":1}'), b"HTTP/1.1 414 URI Too Long", id="long-target"),
    pytest.param(post("/run", b'{"jobId":1}', b"X-A: " + b"a" * 200 + b"\r\n"),
                 b"HTTP/1.1 431 Request Header Fields Too Large", id="one-big-header"),
    pytest.param(post("/run", b'{"jobId":1}', b"X-A: aaaaaaaaaa\r\n" * 12),
                 b"HTTP/1.1 431 Request Header Fields Too Large", id="many-small-headers"),
])
@pytest.mark.parametrize("byte_at_a_time", [False, True])
async def test_head_limits(raw: bytes, status: bytes, byte_at_a_time: bool) -> None:
    service = Service()
    head_limits = HeadLimits(max_request_line=64, max_header_bytes=160)
    connection, transport = connect(service, head_limits=head_limits)
    for piece in ([raw[i:i + 1] for i in range(len(raw))] if byte_at_a_time else [raw]):
        connection.data_received(piece)
    await settle()
    assert answers(bytes(transport.written))[0][0] == status
    assert service.ran == ([1] if status == b"HTTP/1.1 200 OK" else [])


async def test_a_client_that_does_not_take_its_answers_is_closed_after_the_keep_alive_timeout() -> None:
    connection, transport = connect(Service(), keep_alive_timeout_s=0.05)
    connection.data_received(post("/beat", b""))
    connection.pause_writing()
    async with asyncio.timeout(5):
        while not transport.closed:  # noqa: ASYNC110 - the fake transport has no event
            await asyncio.sleep(0.01)
    connection.connection_lost(None)
