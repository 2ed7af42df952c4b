"""A lean HTTP/1.1 keep-alive client for the admin's calls to executors (plain http only).

The executor calls are small JSON POSTs on loopback or a LAN, up to thousands per second. A
general client (aiohttp, httpx) spends most of the admin's CPU per call on request objects, header
bookkeeping and timeouts; this one writes one pre-encoded request per call on a pooled
connection and parses the answer (see :mod:`jobring.http1.wire`: bounded by
``max_head`` and ``max_body``, strict). One pool per executor address, at most
``max_per_host`` connections in it (callers beyond wait for one, first come first served); a
connection is reused only once its answer is read, and idle ones are closed after
``keepalive_s``.

Connections are opened by ``connect`` (``loop.create_connection`` by default): tests pass
an in-memory one so the real client runs against an executor double.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from jobring.errors import JobringError
from jobring.http1.wire import HIGH_WATER, MAX_BODY, MAX_HEAD, Connection, Pool

log = logging.getLogger(__name__)

Connect = Callable[[Callable[[], asyncio.Protocol], str, int],
                   Awaitable[tuple[asyncio.BaseTransport, asyncio.Protocol]]]
"""Opens a connection as ``loop.create_connection(factory, host, port)`` does."""

class HttpError(JobringError):
    """A call that got no (readable) HTTP answer; ``timeout`` tells a timeout apart."""

    def __init__(self, kind: str, detail: str, *, timeout: bool) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail
        self.timeout = timeout


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
        self._factory = functools.partial(Connection, max_head, max_body, HIGH_WATER)
        self._connect = connect or _tcp_connect
        self._pools: dict[tuple[str, int], Pool] = {}
        self._busy: set[Connection] = set()

    @staticmethod
    def handles(url: str) -> bool:
        return url.startswith("http://")

    def _pool(self, host: str, port: int) -> Pool:
        pool = self._pools.get((host, port))
        if pool is None:
            pool = self._pools[(host, port)] = Pool()
        return pool

    async def _acquire(self, host: str, port: int) -> Connection:
        """An idle connection, a new one if the pool has room, else the first one freed."""
        pool = self._pool(host, port)
        conn = self._take_idle(pool)
        if conn is not None:
            return conn
        if pool.open < self._max_per_host:
            pool.open += 1
        else:
            waiter: asyncio.Future[Connection | None] = asyncio.get_running_loop().create_future()
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

    async def _open(self, host: str, port: int) -> Connection:
        try:
            async with asyncio.timeout(self._connect_timeout):
                _, protocol = await self._connect(self._factory, host, port)
        except TimeoutError as exc:
            raise HttpError("ConnectTimeout", f"no connection to {host}:{port} within "
                            f"{self._connect_timeout:g} s", timeout=True) from exc
        except OSError as exc:
            raise HttpError(type(exc).__name__, f"cannot connect to {host}:{port}: {exc}",
                            timeout=False) from exc
        assert isinstance(protocol, Connection)
        return protocol

    def _free_slot(self, pool: Pool) -> None:
        """A connection of ``pool`` is gone: its slot goes to the first waiter, if any."""
        while pool.waiters:
            waiter = pool.waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        pool.open -= 1

    def _release(self, conn: Connection) -> None:
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

    def _discard(self, conn: Connection) -> None:
        conn.close()
        pool, conn.pool = conn.pool, None
        if pool is not None:
            self._free_slot(pool)

    def _request(self, start: bytes, body: bytes, extra: bytes) -> bytes:
        return b"".join((start, self._headers, extra, b"Content-Length: ", str(len(body)).encode(),
                         b"\r\n\r\n", body))

    def _take_idle(self, pool: Pool) -> Connection | None:
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

    async def _answer(self, conn: Connection, host: str, port: int) -> tuple[int, bytes]:
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
