"""A lean HTTP/1.1 keep-alive client for the admin's calls to executors (plain http only).

The executor calls are small JSON POSTs on loopback or a LAN, up to thousands per second. A
general client (aiohttp) spends most of the admin's CPU per call on request objects, header
bookkeeping and timeouts; this one writes one pre-encoded request per call on a pooled
connection and parses the answer (Content-Length, chunked, or until close). One pool of idle
connections per executor address; idle connections are closed after ``keepalive_s``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable
from urllib.parse import urlsplit

log = logging.getLogger(__name__)


class HttpError(Exception):
    """A call that got no (readable) HTTP answer; ``timeout`` tells a timeout apart."""

    def __init__(self, kind: str, detail: str, *, timeout: bool) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail
        self.timeout = timeout


class _Connection(asyncio.Protocol):
    """One keep-alive connection: the bytes received and whether the peer has gone."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.closed = False
        self.idle_since = 0.0
        self._waiter: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        self.buffer += data
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

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    async def _more(self) -> None:
        """Wait for more bytes; ConnectionError when the peer has closed."""
        if self.closed:
            raise ConnectionError("the executor closed the connection before the answer was complete")
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    async def _read_until(self, marker: bytes) -> int:
        while (end := self.buffer.find(marker)) < 0:
            await self._more()
        return end

    async def _read_exactly(self, size: int) -> bytes:
        while len(self.buffer) < size:
            await self._more()
        data = bytes(self.buffer[:size])
        del self.buffer[:size]
        return data

    def send(self, request: bytes) -> None:
        assert self.transport is not None
        self.transport.write(request)

    async def answer(self) -> tuple[int, bytes, bool]:
        """Read the answer to the request sent; return (status, body, connection reusable)."""
        end = await self._read_until(b"\r\n\r\n")
        head = bytes(self.buffer[:end]).split(b"\r\n")
        del self.buffer[:end + 4]
        status_line = head[0].split(b" ", 2)
        if len(status_line) < 2 or not status_line[0].startswith(b"HTTP/"):
            raise ValueError(f"not an HTTP answer: {head[0][:80]!r}")
        status = int(status_line[1])
        length: int | None = None
        chunked = False
        reusable = status_line[0] == b"HTTP/1.1"
        for line in head[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif name == b"connection":
                token = value.strip().lower()
                reusable = token == b"keep-alive" or (reusable and b"close" not in token)
        if chunked:
            body = await self._read_chunked()
        elif length is not None:
            body = await self._read_exactly(length)
        else:
            while not self.closed:
                await self._more()
            body, reusable = bytes(self.buffer), False
            self.buffer.clear()
        return status, body, reusable and not self.closed and not self.buffer

    async def _read_chunked(self) -> bytes:
        parts: list[bytes] = []
        while True:
            end = await self._read_until(b"\r\n")
            size = int(bytes(self.buffer[:end]).split(b";", 1)[0].strip(), 16)
            del self.buffer[:end + 2]
            if size == 0:
                # Trailers (rare) end with an empty line.
                while not self.buffer.startswith(b"\r\n"):
                    end = await self._read_until(b"\r\n")
                    del self.buffer[:end + 2]
                del self.buffer[:2]
                return b"".join(parts)
            parts.append(await self._read_exactly(size))
            await self._read_exactly(2)


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


class Http1Client:
    """POSTs over pooled keep-alive connections, one pool per host and port."""

    def __init__(self, headers: dict[str, str], *, connect_timeout: float, read_timeout: float,
                 keepalive_s: float) -> None:
        self._headers = "".join(f"{k}: {v}\r\n" for k, v in headers.items()).encode("latin-1")
        self._connect_timeout = connect_timeout
        self._read_timeout = read_timeout
        self._keepalive_s = keepalive_s
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self._busy: set[_Connection] = set()

    @staticmethod
    def handles(url: str) -> bool:
        return url.startswith("http://")

    async def _connect(self, host: str, port: int) -> _Connection:
        conn = self._take_idle(host, port)
        if conn is not None:
            return conn
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self._connect_timeout):
                _, conn = await loop.create_connection(_Connection, host, port)
        except TimeoutError as exc:
            raise HttpError("ConnectTimeout", f"no connection to {host}:{port} within "
                            f"{self._connect_timeout:g} s", timeout=True) from exc
        except OSError as exc:
            raise HttpError(type(exc).__name__, f"cannot connect to {host}:{port}: {exc}",
                            timeout=False) from exc
        return conn

    def _request(self, start: bytes, body: bytes, extra: bytes) -> bytes:
        return b"".join((start, self._headers, extra, b"Content-Length: ", str(len(body)).encode(),
                         b"\r\n\r\n", body))

    def _take_idle(self, host: str, port: int) -> _Connection | None:
        idle = self._idle.get((host, port))
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if not conn.closed and now - conn.idle_since < self._keepalive_s:
                return conn
            conn.close()
        return None

    async def post(self, url: str, body: bytes, extra: bytes = b"") -> tuple[int, bytes]:
        """POST ``body``; ``extra`` is more header lines, each ending in CRLF."""
        try:
            host, port, start = _target(url)
        except ValueError as exc:
            raise HttpError("InvalidURL", str(exc), timeout=False) from exc
        conn = await self._connect(host, port)
        try:
            conn.send(self._request(start, body, extra))
        except Exception as exc:
            conn.close()
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
        conn = self._take_idle(host, port)
        if conn is None:
            return self.post(url, body, extra)
        try:
            conn.send(self._request(start, body, extra))
        except Exception:
            log.warning("writing to an idle connection to %s:%s failed; using a new one", host, port,
                        exc_info=True)
            conn.close()
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
                conn.idle_since = time.monotonic()
                self._idle.setdefault((host, port), []).append(conn)
            else:
                conn.close()
        return status, content

    async def aclose(self) -> None:
        for pool in self._idle.values():
            for conn in pool:
                conn.close()
        self._idle.clear()
        for conn in list(self._busy):
            conn.close()
