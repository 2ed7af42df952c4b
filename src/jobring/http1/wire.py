"""The wire side of :mod:`jobring.http1.client`: one connection's protocol and
its answer parser.

The parser reads one answer per request: a status line and fields bounded by ``max_head``,
then a body by Content-Length, chunked, or until close, bounded by ``max_body``. It refuses
what RFC 9112 says a client must not guess at (conflicting lengths, a length with a transfer
coding, codings other than chunked, malformed chunks and fields). 1xx interim answers are
skipped; 204 and 304 have no body. Reading pauses while more than ``high_water`` bytes wait
for nobody, and resumes when they are read or the reader needs more.
"""

from __future__ import annotations

import asyncio
import collections

from jobring.errors import JobringError

MAX_HEAD = 64 << 10
MAX_BODY = 1 << 20
# Reading pauses while this much is buffered and nobody is waiting for it.
HIGH_WATER = 64 << 10
_HEX_DIGITS = b"0123456789abcdefABCDEF"
_WS = b" \t"
_NO_BODY = (204, 304)


class BadAnswer(JobringError, ValueError):
    """An answer that is not well-formed HTTP/1.x."""


class AnswerTooLarge(JobringError, ValueError):
    """An answer head or body over the client's bound."""


def _content_length(value: bytes, previous: int | None) -> int:
    # "42, 42" and repeated equal fields are one length (RFC 9110 8.6); anything else is not.
    for item in value.split(b","):
        item = item.strip(_WS)
        if not item.isdigit():
            raise BadAnswer(f"bad Content-Length: {value[:40]!r}")
        if len(item) > 18:  # beyond any bound (and int() refuses over 4300 digits)
            raise AnswerTooLarge(f"answer body of a {len(item)}-digit Content-Length")
        length = int(item)
        if previous is not None and length != previous:
            raise BadAnswer(f"conflicting Content-Length values: {previous} and {length}")
        previous = length
    assert previous is not None
    return previous


def _framing(head: list[bytes]) -> tuple[int | None, bytes | None, bool]:
    """(Content-Length, Transfer-Encoding, keep-alive) of an answer's head lines."""
    length: int | None = None
    codings: bytes | None = None
    reusable = head[0].startswith(b"HTTP/1.1")
    for line in head[1:]:
        raw_name, colon, value = line.partition(b":")
        name = raw_name.strip().lower()
        if not colon or not name:
            raise BadAnswer(f"bad header line: {line[:80]!r}")
        if name == b"content-length":
            if len(name) != len(raw_name):
                raise BadAnswer(f"bad header line: {line[:80]!r}")
            digits = value.strip()
            if length is None and digits.isdigit() and len(digits) < 19:
                length = int(digits)
            else:
                length = _content_length(value, length)
        elif name == b"transfer-encoding":
            if len(name) != len(raw_name):
                raise BadAnswer(f"bad header line: {line[:80]!r}")
            value = value.strip(_WS).lower()
            codings = value if codings is None else codings + b"," + value
        elif name == b"connection":
            token = value.lower()
            if b"close" in token:
                reusable = False
            elif b"keep-alive" in token:
                reusable = True
    return length, codings, reusable


class Pool:
    """The connections to one host and port: idle ones, how many are open (or opening),
    and the callers waiting for one."""

    __slots__ = ("idle", "open", "waiters")

    def __init__(self) -> None:
        self.idle: list[Connection] = []
        self.open = 0
        self.waiters: collections.deque[asyncio.Future[Connection | None]] = collections.deque()


class Connection(asyncio.Protocol):
    """One keep-alive connection: the bytes received and whether the peer has gone."""

    def __init__(self, max_head: int, max_body: int, high_water: int) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.closed = False
        self.idle_since = 0.0
        self.pool: Pool | None = None  # set while the connection counts in a pool
        self._waiter: asyncio.Future[None] | None = None
        self._max_head = max_head
        self._max_body = max_body
        self._high_water = high_water
        self.paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if len(self.buffer) > self._high_water and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self.closed = True
        self._wake()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _resume(self) -> None:
        self.paused = False
        if self.transport is not None and not self.closed:
            self.transport.resume_reading()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    async def _more(self) -> None:
        """Wait for more bytes; ConnectionError when the peer has closed."""
        if self.closed:
            raise ConnectionError("the executor closed the connection before the answer was complete")
        if self.paused:  # the reader needs more than is buffered
            self._resume()
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def _drained(self) -> None:
        # Called after bytes were taken from the buffer while reading was paused.
        if len(self.buffer) <= self._high_water // 4:
            self._resume()

    async def _read_until(self, marker: bytes, limit: int, what: str, bound: int | None = None) -> int:
        """The offset of ``marker``, at most ``limit`` bytes in (else AnswerTooLarge naming
        ``what`` and ``bound``, by default ``limit``)."""
        searched = 0
        while (end := self.buffer.find(marker, searched)) < 0:
            if len(self.buffer) > limit:
                raise AnswerTooLarge(f"{what} larger than {bound or limit} bytes")
            searched = max(0, len(self.buffer) - len(marker) + 1)
            await self._more()
        if end > limit:
            raise AnswerTooLarge(f"{what} larger than {bound or limit} bytes")
        return end

    async def _read_exactly(self, size: int) -> bytes:
        while len(self.buffer) < size:
            await self._more()
        data = bytes(self.buffer[:size])
        del self.buffer[:size]
        if self.paused:
            self._drained()
        return data

    def send(self, request: bytes) -> None:
        assert self.transport is not None
        self.transport.write(request)

    async def answer(self) -> tuple[int, bytes, bool]:
        """Read the answer to the request sent; return (status, body, connection reusable)."""
        status, head = self._head(await self._read_until(b"\r\n\r\n", self._max_head, "answer head"))
        while status < 200:  # 1xx interim answers (100 Continue, 103 Early Hints) are skipped
            if status == 101:
                raise BadAnswer("unexpected 101 Switching Protocols")
            status, head = self._head(await self._read_until(b"\r\n\r\n", self._max_head, "answer head"))
        length, codings, reusable = _framing(head)
        if status in _NO_BODY:
            body = b""
        elif codings is not None:
            if length is not None:
                raise BadAnswer("both Transfer-Encoding and Content-Length")
            if codings != b"chunked":
                raise BadAnswer(f"unsupported Transfer-Encoding: {codings[:40]!r}")
            body = await self._read_chunked()
        elif length is not None:
            if length > self._max_body:
                raise AnswerTooLarge(f"answer body of {length} bytes, more than {self._max_body}")
            body = await self._read_exactly(length)
        else:
            body, reusable = await self._read_to_close(), False
        return status, body, reusable and not self.closed and not self.buffer

    def _head(self, end: int) -> tuple[int, list[bytes]]:
        """Take the head ending at ``end`` from the buffer: its status and lines."""
        head = bytes(self.buffer[:end]).split(b"\r\n")
        del self.buffer[:end + 4]
        if self.paused:
            self._drained()
        status_line = head[0]
        code = status_line[9:12]
        if (status_line[:9] not in (b"HTTP/1.1 ", b"HTTP/1.0 ") or not code.isdigit()
                or status_line[12:13] not in (b"", b" ") or not 100 <= (status := int(code)) <= 599):
            raise BadAnswer(f"not an HTTP/1.x answer: {status_line[:80]!r}")
        return status, head

    async def _read_to_close(self) -> bytes:
        while not self.closed and len(self.buffer) <= self._max_body:
            await self._more()
        if len(self.buffer) > self._max_body:
            raise AnswerTooLarge(f"answer body larger than {self._max_body} bytes")
        body = bytes(self.buffer)
        self.buffer.clear()
        return body

    async def _read_chunked(self) -> bytes:
        parts: list[bytes] = []
        total = 0
        while True:
            end = await self._read_until(b"\r\n", self._max_head, "chunk size line")
            size_text = bytes(self.buffer[:end]).split(b";", 1)[0].rstrip(_WS)
            del self.buffer[:end + 2]
            if self.paused:
                self._drained()
            if not size_text or size_text.translate(None, _HEX_DIGITS):
                raise BadAnswer(f"bad chunk size: {size_text[:40]!r}")
            size = int(size_text, 16)
            total += size
            if total > self._max_body:
                raise AnswerTooLarge(f"answer body larger than {self._max_body} bytes")
            if size == 0:
                # Trailers (rare, ignored) end with an empty line.
                budget = self._max_head
                while end := await self._read_until(b"\r\n", budget, "answer trailers", self._max_head):
                    del self.buffer[:end + 2]
                    if self.paused:
                        self._drained()
                    budget -= end + 2
                del self.buffer[:2]
                if self.paused:
                    self._drained()
                return b"".join(parts)
            parts.append(await self._read_exactly(size))
            if await self._read_exactly(2) != b"\r\n":
                raise BadAnswer("chunk data not followed by CRLF")
