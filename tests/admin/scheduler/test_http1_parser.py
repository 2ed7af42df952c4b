"""The lean HTTP/1.1 client's answer parser, fed through a fake transport: valid answers in
every split (byte at a time, random splits), malformed and oversized answers, early closes,
and reading paused above the high-water mark."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobring.http1.wire import (
    HIGH_WATER,
    MAX_BODY,
    MAX_HEAD,
    AnswerTooLarge,
    BadAnswer,
    Connection,
)


class FakeTransport(asyncio.Transport):
    """Records what the protocol asks of the transport."""

    def __init__(self) -> None:
        super().__init__()
        self.paused = False
        self.pauses = 0
        self.closed = False

    def pause_reading(self) -> None:
        assert not self.paused, "paused twice"
        self.paused = True
        self.pauses += 1

    def resume_reading(self) -> None:
        assert self.paused, "resumed while not paused"
        self.paused = False

    def close(self) -> None:
        self.closed = True


def _connection(max_head: int = MAX_HEAD, max_body: int = MAX_BODY
                ) -> tuple[Connection, FakeTransport]:
    conn = Connection(max_head, max_body, HIGH_WATER)
    transport = FakeTransport()
    conn.connection_made(transport)
    return conn, transport


async def parse(chunks: Sequence[bytes], *, close: bool = False, max_head: int = MAX_HEAD,
                max_body: int = MAX_BODY) -> tuple[int, bytes, bool]:
    """The answer read from ``chunks`` arriving one by one (the reader waiting in between),
    then the peer closing if ``close``."""
    conn, _ = _connection(max_head, max_body)
    reading = asyncio.create_task(conn.answer())
    for chunk in chunks:
        await asyncio.sleep(0)
        if reading.done():
            break
        conn.data_received(chunk)
    await asyncio.sleep(0)
    if close and not reading.done():
        conn.eof_received()
        conn.connection_lost(None)
    return await asyncio.wait_for(reading, timeout=5)


BODY = b'{"code":200,"msg":null}'

# (name, raw answer, peer closes after it, (status, body, connection reusable))
VALID: list[tuple[str, bytes, bool, tuple[int, bytes, bool]]] = [
    ("content-length", b"HTTP/1.1 200 OK\r\nContent-Length: 23\r\n\r\n" + BODY, False,
     (200, BODY, True)),
    ("no reason phrase", b"HTTP/1.1 200\r\nContent-Length: 2\r\n\r\nok", False, (200, b"ok", True)),
    ("empty reason phrase", b"HTTP/1.1 500 \r\ncontent-length:  2 \r\n\r\nno", False, (500, b"no", True)),
    ("connection close", b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", False,
     (200, b"ok", False)),
    ("http/1.0", b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", False, (200, b"ok", False)),
    ("http/1.0 keep-alive", b"HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 2\r\n\r\nok",
     False, (200, b"ok", True)),
    ("equal lengths repeated", b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2, 2\r\n\r\nok",
     False, (200, b"ok", True)),
    ("empty body", b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", False, (200, b"", True)),
    ("chunked, extensions, trailers",
     b"HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\n"
     b"5;name=value\r\n{\"cod\r\nA ; x\r\ne\":200,\"ms\r\n5\r\ng\":1}\r\n"
     b"0;last\r\nX-Trailer: 1\r\nY: 2\r\n\r\n",
     False, (200, b'{"code":200,"msg":1}', True)),
    ("chunked, no trailers", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
     False, (200, b"ok", True)),
    ("204 without length", b"HTTP/1.1 204 No Content\r\n\r\n", False, (204, b"", True)),
    ("304 with the representation's length", b"HTTP/1.1 304 Not Modified\r\nContent-Length: 99\r\n\r\n",
     False, (304, b"", True)),
    ("100 continue first", b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
     False, (200, b"ok", True)),
    ("two interim answers", b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
     b"HTTP/1.1 404 Not Found\r\nContent-Length: 1\r\n\r\nx", False, (404, b"x", True)),
    ("until close", b"HTTP/1.1 500 Oops\r\nContent-Type: text/html\r\n\r\nbroken", True,
     (500, b"broken", False)),
]
VALID_IDS = [case[0] for case in VALID]


@pytest.mark.parametrize(("name", "raw", "close", "expected"), VALID, ids=VALID_IDS)
async def test_valid_answers_in_one_piece_and_byte_at_a_time(
        name: str, raw: bytes, close: bool, expected: tuple[int, bytes, bool]) -> None:
    assert await parse([raw], close=close) == expected
    assert await parse([raw[i:i + 1] for i in range(len(raw))], close=close) == expected


@settings(max_examples=150, deadline=None)
@given(case=st.sampled_from(VALID), cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=12))
def test_valid_answers_in_random_splits(case: tuple[str, bytes, bool, tuple[int, bytes, bool]],
                                        cuts: list[int]) -> None:
    _, raw, close, expected = case
    points = sorted({0, len(raw), *(c % (len(raw) + 1) for c in cuts)})
    chunks = [raw[a:b] for a, b in zip(points, points[1:], strict=False)]
    assert asyncio.run(parse(chunks, close=close)) == expected


@settings(max_examples=100, deadline=None)
@given(body=st.binary(max_size=3000), sizes=st.lists(st.integers(min_value=1, max_value=700), min_size=1),
       split=st.integers(min_value=1, max_value=64))
def test_any_body_survives_chunked_and_content_length(body: bytes, sizes: list[int], split: int) -> None:
    chunked = b""
    rest, i = body, 0
    while rest:
        size = sizes[i % len(sizes)]
        chunked += b"%x\r\n%s\r\n" % (len(rest[:size]), rest[:size])
        rest, i = rest[size:], i + 1
    raws = [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked + b"0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)]
    for raw in raws:
        chunks = [raw[j:j + split] for j in range(0, len(raw), split)]
        assert asyncio.run(parse(chunks)) == (200, body, True)


# (name, raw answer, error type, message fragment)
INVALID: list[tuple[str, bytes, type[Exception], str]] = [
    ("not http", b"SSH-2.0-OpenSSH\r\n\r\n", BadAnswer, "not an HTTP/1.x answer"),
    ("http/2", b"HTTP/2 200 OK\r\n\r\n", BadAnswer, "not an HTTP/1.x answer"),
    ("two-digit status", b"HTTP/1.1 20 OK\r\n\r\n", BadAnswer, "not an HTTP/1.x answer"),
    ("four-digit status", b"HTTP/1.1 2000 OK\r\n\r\n", BadAnswer, "not an HTTP/1.x answer"),
    ("letters in status", b"HTTP/1.1 2x0 OK\r\n\r\n", BadAnswer, "not an HTTP/1.x answer"),
    ("status 099", b"HTTP/1.1 099 Low\r\n\r\n", BadAnswer, "not an HTTP/1.x answer"),
    ("status 600", b"HTTP/1.1 600 High\r\n\r\n", BadAnswer, "not an HTTP/1.x answer"),
    ("no space after status", b"HTTP/1.1 200OK\r\n\r\n", BadAnswer, "not an HTTP/1.x answer"),
    ("empty head", b"\r\n\r\n", BadAnswer, "not an HTTP/1.x answer"),
    ("switching protocols", b"HTTP/1.1 101 Switching Protocols\r\n\r\n", BadAnswer, "101"),
    ("negative length", b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", BadAnswer, "bad Content-Length"),
    ("signed length", b"HTTP/1.1 200 OK\r\nContent-Length: +1\r\n\r\nx", BadAnswer, "bad Content-Length"),
    ("hex length", b"HTTP/1.1 200 OK\r\nContent-Length: 0x1\r\n\r\nx", BadAnswer, "bad Content-Length"),
    ("empty length", b"HTTP/1.1 200 OK\r\nContent-Length:\r\n\r\n", BadAnswer, "bad Content-Length"),
    ("conflicting lengths", b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxx",
     BadAnswer, "conflicting Content-Length"),
    ("conflicting length list", b"HTTP/1.1 200 OK\r\nContent-Length: 2, 3\r\n\r\nxx", BadAnswer,
     "conflicting Content-Length"),
    ("length and chunked", b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n"
     b"2\r\nok\r\n0\r\n\r\n", BadAnswer, "both Transfer-Encoding and Content-Length"),
    ("gzip coding", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", BadAnswer,
     "unsupported Transfer-Encoding"),
    ("chunked twice", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
     BadAnswer, "unsupported Transfer-Encoding"),
    ("header without colon", b"HTTP/1.1 200 OK\r\nContent-Length 2\r\n\r\nok", BadAnswer, "bad header line"),
    ("space before colon", b"HTTP/1.1 200 OK\r\nContent-Length : 2\r\n\r\nok", BadAnswer, "bad header line"),
    ("space before coding's colon", b"HTTP/1.1 200 OK\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n",
     BadAnswer, "bad header line"),
    ("empty field name", b"HTTP/1.1 200 OK\r\n: x\r\nContent-Length: 2\r\n\r\nok", BadAnswer,
     "bad header line"),
    ("folded header", b"HTTP/1.1 200 OK\r\nX-A: 1\r\n  more\r\nContent-Length: 2\r\n\r\nok", BadAnswer,
     "bad header line"),
    ("chunk size not hex", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nxyz\r\n", BadAnswer,
     "bad chunk size"),
    ("negative chunk size", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-5\r\nhello\r\n",
     BadAnswer, "bad chunk size"),
    ("chunk size with underscore", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1_0\r\n", BadAnswer,
     "bad chunk size"),
    ("chunk size 0x", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0x2\r\nok\r\n", BadAnswer,
     "bad chunk size"),
    ("empty chunk size", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n;ext\r\n", BadAnswer,
     "bad chunk size"),
    ("chunk longer than its size",
     b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nokay\r\n0\r\n\r\n",
     BadAnswer, "not followed by CRLF"),
]


@pytest.mark.parametrize(("name", "raw", "error", "message"), INVALID, ids=[c[0] for c in INVALID])
async def test_malformed_answers_are_refused(name: str, raw: bytes, error: type[Exception],
                                             message: str) -> None:
    with pytest.raises(error, match=message):
        await parse([raw])
    with pytest.raises(error, match=message):
        await parse([raw[i:i + 1] for i in range(len(raw))])


SMALL_HEAD, SMALL_BODY = 200, 1000
OVERSIZED: list[tuple[str, list[bytes], bool, str]] = [
    ("head", [b"HTTP/1.1 200 OK\r\n", b"X-Filler: " + b"a" * 300], False, "answer head larger than 200"),
    ("head, ended", [b"HTTP/1.1 200 OK\r\nX-Filler: " + b"a" * 300 + b"\r\n\r\n"], False,
     "answer head larger than 200"),
    ("declared length", [b"HTTP/1.1 200 OK\r\nContent-Length: 1001\r\n\r\n"], False,
     "body of 1001 bytes, more than 1000"),
    ("huge declared length", [b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n"], False,
     "20-digit Content-Length"),
    ("endless declared length", [b"HTTP/1.1 200 OK\r\nContent-Length: " + b"9" * 150 + b"\r\n\r\n"], False,
     "150-digit Content-Length"),
    ("chunks", [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", b"200\r\n" + b"a" * 512 + b"\r\n",
                b"200\r\n"], False, "body larger than 1000"),
    ("huge chunk size", [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffffff\r\n"],
     False, "body larger than 1000"),
    ("chunk size line", [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1;" + b"e" * 300], False,
     "chunk size line larger than 200"),
    ("trailers",
     [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n"] + [b"T: 1234567890\r\n"] * 20,
     False, "trailers larger than 200"),
    ("until close", [b"HTTP/1.1 200 OK\r\n\r\n"] + [b"b" * 300] * 4, False, "body larger than 1000"),
    ("until close, then closed", [b"HTTP/1.1 200 OK\r\n\r\n" + b"b" * 1001], True, "body larger than 1000"),
]


@pytest.mark.parametrize(("name", "chunks", "close", "message"), OVERSIZED, ids=[c[0] for c in OVERSIZED])
async def test_oversized_answers_are_refused(name: str, chunks: list[bytes], close: bool,
                                             message: str) -> None:
    with pytest.raises(AnswerTooLarge, match=message):
        await parse(chunks, close=close, max_head=SMALL_HEAD, max_body=SMALL_BODY)


async def test_bytes_after_the_answer_make_the_connection_unusable() -> None:
    # An answer to no request: whatever it is, the next answer on this connection is suspect.
    raw = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\n"
    assert await parse([raw]) == (200, b"ok", False)


def test_default_bounds() -> None:
    assert (MAX_HEAD, MAX_BODY) == (64 << 10, 1 << 20)


@pytest.mark.parametrize("raw", [
    b"",
    b"HTTP/1.1 200 OK\r\nContent-Le",
    b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n",
    b"HTTP/1.1 100 Continue\r\n\r\n",
], ids=["nothing", "mid-head", "mid-body", "mid-chunk", "before the last CRLF", "after 100 continue"])
async def test_early_close_is_a_connection_error(raw: bytes) -> None:
    with pytest.raises(ConnectionError, match="closed the connection before the answer was complete"):
        await parse([raw], close=True)


async def test_reading_pauses_above_the_high_water_mark_and_resumes_when_read() -> None:
    conn, transport = _connection()
    body = bytes(range(256)) * (3 * HIGH_WATER // 256)
    raw = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    piece = 8 << 10
    # The answer arrives before anyone reads it: reading stops past the high-water mark.
    fed = 0
    while not transport.paused:
        conn.data_received(raw[fed:fed + piece])
        fed += piece
    assert HIGH_WATER < fed <= HIGH_WATER + piece
    reading = asyncio.create_task(conn.answer())
    await asyncio.sleep(0)
    # The reader needs more than is buffered: reading resumed (else it would wait forever).
    assert not transport.paused and not reading.done()
    while fed < len(raw):
        conn.data_received(raw[fed:fed + piece])
        fed += piece
        await asyncio.sleep(0)
    assert await reading == (200, body, True)
    assert not transport.paused and transport.pauses >= 2 and not conn.buffer


async def test_reading_resumes_once_the_buffer_is_drained() -> None:
    conn, transport = _connection(max_head=4 * HIGH_WATER)
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    head_filler = b"HTTP/1.1 100 Continue\r\nX: " + b"f" * HIGH_WATER + b"\r\n\r\n"
    conn.data_received(head_filler)  # one interim answer larger than the mark, then the answer
    assert transport.paused
    conn.data_received(answer)
    assert await conn.answer() == (200, b"ok", True)
    assert not transport.paused and transport.pauses == 1


_PIECES = [b"HTTP/1.1 ", b"HTTP/1.0 ", b"200", b"204", b"100", b" OK", b"\r\n", b"\r\n\r\n", b":", b" ",
           b"Content-Length", b"Transfer-Encoding", b"chunked", b"Connection", b"close", b"0", b"5", b"ff",
           b";", b",", b"-", b"\t", b"x"]


@settings(max_examples=300, deadline=None)
@given(pieces=st.lists(st.one_of(st.sampled_from(_PIECES), st.binary(max_size=8)), max_size=40))
def test_any_bytes_give_an_answer_or_a_clear_error(pieces: list[bytes]) -> None:
    # Then the peer closes: every outcome is an answer or one of the client's errors.
    async def attempt() -> None:
        try:
            status, body, _ = await parse(pieces, close=True, max_head=SMALL_HEAD, max_body=SMALL_BODY)
        except (BadAnswer, AnswerTooLarge, ConnectionError):
            return
        assert 200 <= status <= 599 and len(body) <= SMALL_BODY

    asyncio.run(attempt())
