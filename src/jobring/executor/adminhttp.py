"""POSTs from the executor to its admin: a lean HTTP/1.1 path for plain-http admins.

Run results go to the admin as soon as a few have gathered (milliseconds), so at a steady
1,000 runs/s the executor posts hundreds of callbacks a second. A general client (httpx)
spends ~0.4 ms of CPU per request on request and response objects, pool bookkeeping and
timeouts; here a request is one pre-built write on a kept-alive connection and its answer is
parsed by httptools (content-length, chunked, or until close), ~40 µs. An https admin, or one
reached through a proxy named in the environment, goes through httpx, which handles TLS and
proxies.

A connection is used by one request at a time and kept for the next while the admin keeps it
alive (and for at most ``keepalive_s``). A request on a kept connection that the admin closed
meanwhile (before any byte of its answer) is sent once more on a new connection: callbacks and
registry beats are safe to repeat.
"""

from __future__ import annotations

import asyncio
import functools
import time
import urllib.request
from collections.abc import Mapping
from typing import cast
from urllib.parse import urlsplit

import httptools
import httpx

from jobring.errors import JobringError

__all__ = ["AdminHttp", "AdminHttpError"]

MAX_ANSWER_BYTES = 1 << 20
KEEPALIVE_S = 60.0
_NO_BODY = (204, 304)


class AdminHttpError(JobringError, OSError):
    """No (readable) HTTP answer came back."""


class _ClosedUnanswered(AdminHttpError):
    """The connection closed before any byte of the answer (a kept one the admin let go)."""


@functools.lru_cache(maxsize=64)
def _plain_target(url: str) -> tuple[str, int, bytes] | None:
    """(host, port, request line + Host header) when ``url`` may take the lean path."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname or parts.username or parts.password:
        return None
    proxies = urllib.request.getproxies()
    if proxies.get("http") and not urllib.request.proxy_bypass(parts.hostname):
        return None  # httpx honours the environment's proxy; so must we
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    start = f"POST {path} HTTP/1.1\r\nHost: {parts.netloc}\r\n".encode("latin-1")
    return parts.hostname, parts.port or 80, start


Answer = tuple[int, bytes, bool]  # status, body, whether the connection may be reused


class _Connection(asyncio.Protocol):
    """One connection to an admin; one request at a time."""

    def __init__(self, max_answer_bytes: int) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self._max = max_answer_bytes
        self._parser = httptools.HttpResponseParser(self)
        self._waiter: asyncio.Future[Answer] | None = None
        self._body: list[bytes] = []
        self._size = 0
        self._got_bytes = False
        self._framed = False  # the answer has a Content-Length or a Transfer-Encoding
        self._until_close = False  # an answer without either: its body ends with the connection

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self._got_bytes = True
        if self._waiter is None or self._waiter.done():
            self.close()  # bytes that answer no request: the connection is out of step
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            # httptools wraps what a callback raised: say that, not "callback error".
            cause = exc.__context__ if isinstance(exc.__context__, AdminHttpError) else exc
            self._fail(AdminHttpError(f"bad answer from the admin: {cause}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        if self._until_close:
            waiter.set_result((self._parser.get_status_code(), b"".join(self._body), False))
        elif not self._got_bytes:
            waiter.set_exception(_ClosedUnanswered(f"connection closed before the answer: {exc or 'EOF'}"))
        else:
            waiter.set_exception(AdminHttpError(f"connection closed within the answer: {exc or 'EOF'}"))

    # httptools callbacks

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() in (b"content-length", b"transfer-encoding"):
            self._framed = True

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        self._until_close = not self._framed and status >= 200 and status not in _NO_BODY

    def on_body(self, body: bytes) -> None:
        self._size += len(body)
        if self._size > self._max:
            raise AdminHttpError(f"answer body over {self._max} bytes")
        self._body.append(body)

    def on_message_complete(self) -> None:
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        status = self._parser.get_status_code()
        if status < 200:  # an interim answer (100 Continue): the real one follows
            self._body, self._size, self._framed = [], 0, False
            return
        waiter.set_result((status, b"".join(self._body), self._parser.should_keep_alive()))

    # use

    def send(self, data: bytes) -> asyncio.Future[Answer]:
        assert self.transport is not None
        self._waiter = waiter = asyncio.get_running_loop().create_future()
        self._body, self._size = [], 0
        self._got_bytes = self._framed = self._until_close = False
        self.transport.write(data)
        return waiter

    def _fail(self, exc: Exception) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(exc)
        self.close()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class AdminHttp:
    """POST to admin URLs: the lean path for plain http, ``client`` (httpx) for the rest."""

    def __init__(self, client: httpx.AsyncClient, timeout_s: float, *, keepalive_s: float = KEEPALIVE_S,
                 max_answer_bytes: int = MAX_ANSWER_BYTES) -> None:
        self.client = client
        self._timeout_s = timeout_s
        self._keepalive_s = keepalive_s
        self._max_answer_bytes = max_answer_bytes
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self._busy: set[_Connection] = set()
        self._header_cache: dict[int, tuple[Mapping[str, str], bytes]] = {}

    async def post(self, url: str, body: bytes, headers: Mapping[str, str]) -> tuple[int, bytes]:
        """(HTTP status, body) of the answer; AdminHttpError or httpx.HTTPError when none came."""
        target = _plain_target(url)
        if target is None:
            response = await self.client.post(url, content=body, headers=dict(headers))
            return response.status_code, response.content
        host, port, start = target
        request = b"".join((start, self._header_lines(headers), b"Content-Length: ",
                            str(len(body)).encode(), b"\r\n\r\n", body))
        conn = self._take_idle(host, port)
        if conn is not None:
            try:
                return await self._exchange(conn, host, port, request)
            except _ClosedUnanswered:
                pass  # the admin closed the kept connection as we wrote: once more on a new one
        return await self._exchange(await self._open(host, port), host, port, request)

    def _header_lines(self, headers: Mapping[str, str]) -> bytes:
        cached = self._header_cache.get(id(headers))
        if cached is not None and cached[0] is headers:
            return cached[1]
        lines = "".join(f"{name}: {value}\r\n" for name, value in headers.items()).encode("latin-1")
        if len(self._header_cache) > 16:
            self._header_cache.clear()
        self._header_cache[id(headers)] = (headers, lines)
        return lines

    def _take_idle(self, host: str, port: int) -> _Connection | None:
        idle = self._idle.get((host, port))
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            transport = conn.transport
            if (not conn.closed and transport is not None and not transport.is_closing()
                    and now - conn.idle_since < self._keepalive_s):
                return conn
            conn.close()
        return None

    async def _open(self, host: str, port: int) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self._timeout_s):
                _, protocol = await loop.create_connection(
                    lambda: _Connection(self._max_answer_bytes), host, port)
        except TimeoutError as exc:
            raise AdminHttpError(f"no connection to {host}:{port} within {self._timeout_s:g} s") from exc
        except OSError as exc:
            raise AdminHttpError(f"cannot connect to {host}:{port}: {exc}") from exc
        return protocol

    async def _exchange(self, conn: _Connection, host: str, port: int, request: bytes) -> tuple[int, bytes]:
        loop = asyncio.get_running_loop()
        reusable = False
        self._busy.add(conn)
        try:
            waiter = conn.send(request)
            # One timer handle per request (asyncio.timeout would cost a task-bound context).
            timer = loop.call_later(self._timeout_s, _time_out, waiter, host, port, self._timeout_s)
            try:
                status, content, reusable = await waiter
            finally:
                timer.cancel()
        finally:
            self._busy.discard(conn)
            if reusable and not conn.closed:
                conn.idle_since = time.monotonic()
                self._idle.setdefault((host, port), []).append(conn)
            else:
                conn.close()
        return status, content

    async def aclose(self) -> None:
        """Close the lean connections (the httpx client is its owner's to close)."""
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()
        for conn in list(self._busy):
            conn.close()


def _time_out(waiter: asyncio.Future[Answer], host: str, port: int, timeout_s: float) -> None:
    if not waiter.done():
        waiter.set_exception(AdminHttpError(f"no answer from {host}:{port} within {timeout_s:g} s"))
