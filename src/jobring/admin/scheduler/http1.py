"""A lean HTTP/1.1 keep-alive client for the admin's calls to executors (plain http only).

The executor calls are small JSON POSTs on loopback or a LAN, up to thousands per second. A
general client (aiohttp) spends most of the admin's CPU per call on request objects, header
bookkeeping and timeouts; this one writes one pre-encoded request per call on a pooled
connection and parses the answer (Content-Length, chunked, or until close). One pool per
executor address, at most ``max_per_host`` connections in it (callers beyond wait for one);
idle connections are closed after ``keepalive_s``. Answers are bounded (``max_head``,
``max_body``) and the parser refuses what RFC 9112 says a client must not guess at
(conflicting lengths, unknown transfer codings, malformed chunks).

Connections are opened by ``connect`` (``loop.create_connection`` by default): tests pass
an in-memory one so the real client runs against an executor double.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

log = logging.getLogger(__name__)

Connect = Callable[[Callable[[], asyncio.Protocol], str, int],
                   Awaitable[tuple[asyncio.BaseTransport, asyncio.Protocol]]]
"""Opens a connection as ``loop.create_connection(factory, host, port)`` does."""

MAX_HEAD = 64 << 10
MAX_BODY = 1 << 20
# Reading pauses while this much is buffered and nobody is waiting for it.
HIGH_WATER = 64 << 10
_HEX_DIGITS = b"0123456789abcdefABCDEF"
_WS = b" \t"
_NO_BODY = (204, 304)


class HttpError(Exception):
    """A call that got no (readable) HTTP answer; ``timeout`` tells a timeout apart."""

    def __init__(self, kind: str, detail: str, *, timeout: bool) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail
        self.timeout = timeout


class BadAnswer(ValueError):
    """An answer that is not well-formed HTTP/1.x."""


class AnswerTooLarge(ValueError):
    """An answer head or body over the client's bound."""


def _content_length(value: bytes, previous: int | None) -> int:
    # "42, 42" and repeated equal fields are one length (RFC 9110 8.6); anything else is not.
    for item in value.split(b","):
        item = item.strip(_WS)
        if not item.isdigit():
            raise BadAnswer(f"bad Content-Length: {value[:40]!r}")
        length = int(item)
        if previous is not None and length != previous:
            raise BadAnswer(f"conflicting Content-Length values: {previous} and {length}")
        previous = length
    assert previous is not None
    return previous


class _Pool:
    """The connections to one host and port: idle ones, how many are open (or opening),
    and the callers waiting for one."""

    __slots__ = ("idle", "open", "waiters")

    def __init__(self) -> None:
        self.idle: list[_Connection] = []
        self.open = 0
        self.waiters: collections.deque[asyncio.Future[_Connection | None]] = collections.deque()


class _Connection(asyncio.Protocol):
    """One keep-alive connection: the bytes received and whether the peer has gone."""

    def __init__(self, max_head: int, max_body: int, high_water: int) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.closed = False
        self.idle_since = 0.0
        self.pool: _Pool | None = None  # set while the connection counts in a pool
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

    def _consumed(self, size: int) -> None:
        del self.buffer[:size]
        if self.paused and len(self.buffer) <= self._high_water // 4:
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
        self._consumed(size)
        return data

    def send(self, request: bytes) -> None:
        assert self.transport is not None
        self.transport.write(request)

    async def answer(self) -> tuple[int, bytes, bool]:
        """Read the answer to the request sent; return (status, body, connection reusable).

        1xx interim answers (100 Continue, 103 Early Hints) are skipped."""
        while True:
            end = await self._read_until(b"\r\n\r\n", self._max_head, "answer head")
            head = bytes(self.buffer[:end]).split(b"\r\n")
            self._consumed(end + 4)
            status_line = head[0]
            version = status_line[:9]
            code = status_line[9:12]
            if (version not in (b"HTTP/1.1 ", b"HTTP/1.0 ") or not code.isdigit()
                    or status_line[12:13] not in (b"", b" ") or not 100 <= int(code) <= 599):
                raise BadAnswer(f"not an HTTP/1.x answer: {status_line[:80]!r}")
            status = int(code)
            if status >= 200:
                break
            if status == 101:
                raise BadAnswer("unexpected 101 Switching Protocols")
        length: int | None = None
        codings: bytes | None = None
        reusable = version == b"HTTP/1.1 "
        for line in head[1:]:
            name, colon, value = line.partition(b":")
            if not colon or not name or name[0] in _WS or name[-1] in _WS:
                raise BadAnswer(f"bad header line: {line[:80]!r}")
            name = name.lower()
            if name == b"content-length":
                length = _content_length(value, length)
            elif name == b"transfer-encoding":
                value = value.strip(_WS).lower()
                codings = value if codings is None else codings + b"," + value
            elif name == b"connection":
                token = value.lower()
                if b"close" in token:
                    reusable = False
                elif b"keep-alive" in token:
                    reusable = True
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
            while not self.closed:
                if len(self.buffer) > self._max_body:
                    raise AnswerTooLarge(f"answer body larger than {self._max_body} bytes")
                await self._more()
            if len(self.buffer) > self._max_body:
                raise AnswerTooLarge(f"answer body larger than {self._max_body} bytes")
            body, reusable = bytes(self.buffer), False
            self.buffer.clear()
        return status, body, reusable and not self.closed and not self.buffer

    async def _read_chunked(self) -> bytes:
        parts: list[bytes] = []
        total = 0
        while True:
            end = await self._read_until(b"\r\n", self._max_head, "chunk size line")
            size_text = bytes(self.buffer[:end]).split(b";", 1)[0].rstrip(_WS)
            self._consumed(end + 2)
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
                    self._consumed(end + 2)
                    budget -= end + 2
                self._consumed(2)
                return b"".join(parts)
            parts.append(await self._read_exactly(size))
            if await self._read_exactly(2) != b"\r\n":
                raise BadAnswer("chunk data not followed by CRLF")


@functools.lru_cache(maxsize=1024)
def _target(url: str) -> tuple[str, int, bytes]:
    """(host, port, request line + Host header) of an http URL."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"not a plain http URL: {url}")
    port = parts.port or 80
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    netloc = parts.netloc.rpartition("@")[2]
    return parts.hostname, port, f"POST {path} HTTP/1.1\r\nHost: {netloc}\r\n".encode("latin-1")


async def _tcp_connect(factory: Callable[[], asyncio.Protocol], host: str, port: int
                       ) -> tuple[asyncio.BaseTransport, asyncio.Protocol]:
    return await asyncio.get_running_loop().create_connection(factory, host, port)


class Http1Client:
    """POSTs over pooled keep-alive connections, one pool per host and port of at most
    ``max_per_host`` connections; a connection is reused only once its answer is read."""

    def __init__(self, headers: dict[str, str], *, connect_timeout: float, read_timeout: float,
                 keepalive_s: float, max_per_host: int = 100, max_head: int = MAX_HEAD,
                 max_body: int = MAX_BODY, connect: Connect | None = None) -> None:
        if max_per_host < 1:
            raise ValueError("max_per_host must be at least 1")
        self._headers = "".join(f"{k}: {v}\r\n" for k, v in headers.items()).encode("latin-1")
        self._connect_timeout = connect_timeout
        self._read_timeout = read_timeout
        self._keepalive_s = keepalive_s
        self._max_per_host = max_per_host
        self._factory = functools.partial(_Connection, max_head, max_body, HIGH_WATER)
        self._connect = connect or _tcp_connect
        self._pools: dict[tuple[str, int], _Pool] = {}
        self._busy: set[_Connection] = set()

    @staticmethod
    def handles(url: str) -> bool:
        return url.startswith("http://")

    def _pool(self, host: str, port: int) -> _Pool:
        pool = self._pools.get((host, port))
        if pool is None:
            pool = self._pools[(host, port)] = _Pool()
        return pool

    async def _acquire(self, host: str, port: int) -> _Connection:
        """An idle connection, a new one if the pool has room, else the first one freed."""
        pool = self._pool(host, port)
        conn = self._take_idle(pool)
        if conn is not None:
            return conn
        if pool.open < self._max_per_host:
            pool.open += 1
        else:
            waiter: asyncio.Future[_Connection | None] = asyncio.get_running_loop().create_future()
            pool.waiters.append(waiter)
            try:
                handed = await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():  # handed over, then cancelled
                    handed = waiter.result()
                    if handed is None:
                        self._free_slot(pool)
                    else:
                        self._release(handed)
                raise
            if handed is not None:
                return handed
            # else a freed slot was handed over (still counted in pool.open)
        try:
            conn = await self._open(host, port)
        except BaseException:
            self._free_slot(pool)
            raise
        conn.pool = pool
        return conn

    async def _open(self, host: str, port: int) -> _Connection:
        try:
            async with asyncio.timeout(self._connect_timeout):
                _, protocol = await self._connect(self._factory, host, port)
        except TimeoutError as exc:
            raise HttpError("ConnectTimeout", f"no connection to {host}:{port} within "
                            f"{self._connect_timeout:g} s", timeout=True) from exc
        except OSError as exc:
            raise HttpError(type(exc).__name__, f"cannot connect to {host}:{port}: {exc}",
                            timeout=False) from exc
        assert isinstance(protocol, _Connection)
        return protocol

    def _free_slot(self, pool: _Pool) -> None:
        """A connection of ``pool`` is gone: its slot goes to the first waiter, if any."""
        while pool.waiters:
            waiter = pool.waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        pool.open -= 1

    def _release(self, conn: _Connection) -> None:
        """``conn``'s answer is read and it may be reused: to the first waiter, else idle."""
        pool = conn.pool
        assert pool is not None
        while pool.waiters:
            waiter = pool.waiters.popleft()
            if not waiter.done():
                waiter.set_result(conn)
                return
        conn.idle_since = time.monotonic()
        pool.idle.append(conn)

    def _discard(self, conn: _Connection) -> None:
        conn.close()
        pool, conn.pool = conn.pool, None
        if pool is not None:
            self._free_slot(pool)

    def _request(self, start: bytes, body: bytes, extra: bytes) -> bytes:
        return b"".join((start, self._headers, extra, b"Content-Length: ", str(len(body)).encode(),
                         b"\r\n\r\n", body))

    def _take_idle(self, pool: _Pool) -> _Connection | None:
        idle = pool.idle
        if not idle:
            return None
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            # Bytes that came while idle answer no request: such a connection is not reused.
            if not conn.closed and not conn.buffer and now - conn.idle_since < self._keepalive_s:
                return conn
            self._discard(conn)
        return None

    async def post(self, url: str, body: bytes, extra: bytes = b"") -> tuple[int, bytes]:
        """POST ``body``; ``extra`` is more header lines, each ending in CRLF."""
        try:
            host, port, start = _target(url)
        except ValueError as exc:
            raise HttpError("InvalidURL", str(exc), timeout=False) from exc
        conn = await self._acquire(host, port)
        try:
            conn.send(self._request(start, body, extra))
        except Exception as exc:
            self._discard(conn)
            raise HttpError(type(exc).__name__, str(exc) or "send failed", timeout=False) from exc
        return await self._answer(conn, host, port)

    def post_now(self, url: str, body: bytes, extra: bytes = b"") -> Awaitable[tuple[int, bytes]]:
        """Like :meth:`post`, but the request is written at once when an idle keep-alive
        connection to the host is at hand (so it leaves at the call, not when a task runs);
        the awaitable gives the answer. Otherwise it connects and sends when awaited."""
        try:
            host, port, start = _target(url)
        except ValueError:
            return self.post(url, body, extra)  # raises the InvalidURL error when awaited
        pool = self._pools.get((host, port))
        conn = self._take_idle(pool) if pool is not None else None
        if conn is None:
            return self.post(url, body, extra)
        try:
            conn.send(self._request(start, body, extra))
        except Exception:
            log.warning("writing to an idle connection to %s:%s failed; using a new one", host, port,
                        exc_info=True)
            self._discard(conn)
            return self.post(url, body, extra)
        return self._answer(conn, host, port)

    async def _answer(self, conn: _Connection, host: str, port: int) -> tuple[int, bytes]:
        self._busy.add(conn)
        reusable = False
        try:
            async with asyncio.timeout(self._read_timeout):
                status, content, reusable = await conn.answer()
        except TimeoutError as exc:
            raise HttpError("ReadTimeout", f"no answer from {host}:{port} within {self._read_timeout:g} s",
                            timeout=True) from exc
        except (ConnectionError, OSError, ValueError) as exc:
            raise HttpError(type(exc).__name__, str(exc) or "connection failed", timeout=False) from exc
        finally:
            self._busy.discard(conn)
            if reusable:
                self._release(conn)
            else:
                self._discard(conn)
        return status, content

    async def aclose(self) -> None:
        for pool in self._pools.values():
            for conn in pool.idle:
                conn.close()
            for waiter in pool.waiters:
                if not waiter.done():
                    waiter.set_exception(HttpError("ClientClosed", "the client was closed", timeout=False))
        self._pools.clear()
        for conn in list(self._busy):
            conn.close()
