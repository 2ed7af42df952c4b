"""The admin's HTTP client for executors: /run, /beat, /idleBeat, /kill, /log.

Keep-alive connections are pooled per executor address. On the network plain http goes
through the lean HTTP/1.1 client of :mod:`jobring.admin.scheduler.http1` (aiohttp for https):
the per-call CPU bounds how fast a burst of fires due at one instant goes out, and aiohttp
(about 1 ms of CPU per call on loopback; httpx about 10 ms at 100 calls in flight) was half
of the admin's CPU at 1,000 fires/s. With an injected httpx transport (tests:
``httpx.MockTransport`` / ``httpx.ASGITransport``) calls go through ``httpx.AsyncClient``.

Answers are parsed as JSON whatever their content type (the Java executor says
``text/html``). Transport errors, timeouts and unreadable answers become a failed
``ReturnT`` with a readable message, never an exception, so a trigger can always record
what happened.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import Any, Protocol

import aiohttp
import httpx

from jobring.admin.scheduler.http1 import Http1Client, HttpError
from jobring.protocol.models import (
    ACCESS_TOKEN_HEADER,
    IdleBeatParam,
    KillParam,
    LogParam,
    ProtocolError,
    ReturnT,
    TriggerParam,
    dumps,
)

log = logging.getLogger(__name__)

_JSON_HEADERS = {"Content-Type": "application/json;charset=UTF-8"}
# Idle keep-alive connections are dropped before executors drop them (pyxxl: 75 s,
# the Java executor: 90 s), so a reused connection is rarely one the peer just closed.
_KEEPALIVE_S = 15.0


def executor_url(address: str, path: str) -> str:
    """``address`` as registered (usually with a trailing slash) joined with an endpoint name."""
    return address.rstrip("/") + "/" + path


class ExecutorCallError(HttpError):
    """A call that got no HTTP answer, whichever client made it; ``timeout`` tells a timeout
    from a failed connection."""


class _Http(Protocol):
    async def post(self, url: str, body: bytes) -> tuple[int, bytes]: ...

    def post_now(self, url: str, body: bytes) -> Awaitable[tuple[int, bytes]]: ...

    async def aclose(self) -> None: ...


class _HttpxHttp:
    def __init__(
        self, headers: dict[str, str], connect: float, read: float, limit: int,
        transport: httpx.AsyncBaseTransport | None,
    ) -> None:
        # Waiting for a free connection is bounded by the dispatch lanes, not by a timeout.
        timeout = httpx.Timeout(read, connect=connect, pool=None)
        limits = httpx.Limits(max_connections=limit, max_keepalive_connections=limit,
                              keepalive_expiry=_KEEPALIVE_S)
        self._client = httpx.AsyncClient(timeout=timeout, limits=limits, transport=transport, headers=headers)

    async def post(self, url: str, body: bytes) -> tuple[int, bytes]:
        try:
            response = await self._client.post(url, content=body)
        except httpx.TimeoutException as exc:
            raise ExecutorCallError(type(exc).__name__, str(exc), timeout=True) from exc
        except httpx.HTTPError as exc:
            raise ExecutorCallError(type(exc).__name__, str(exc), timeout=False) from exc
        return response.status_code, response.content

    def post_now(self, url: str, body: bytes) -> Awaitable[tuple[int, bytes]]:
        return self.post(url, body)  # httpx writes when the coroutine runs

    async def aclose(self) -> None:
        await self._client.aclose()


class _LeanHttp:
    """Plain http through :class:`Http1Client`; https (rare for executors) through aiohttp."""

    def __init__(self, headers: dict[str, str], connect: float, read: float, limit: int) -> None:
        self._plain = Http1Client(headers, connect_timeout=connect, read_timeout=read,
                                  keepalive_s=_KEEPALIVE_S)
        self._tls = _AiohttpHttp(headers, connect, read, limit)

    async def post(self, url: str, body: bytes) -> tuple[int, bytes]:
        if not self._plain.handles(url):
            return await self._tls.post(url, body)
        return await self._converted(self._plain.post(url, body))

    def post_now(self, url: str, body: bytes) -> Awaitable[tuple[int, bytes]]:
        if not self._plain.handles(url):
            return self._tls.post(url, body)
        return self._converted(self._plain.post_now(url, body))

    @staticmethod
    async def _converted(pending: Awaitable[tuple[int, bytes]]) -> tuple[int, bytes]:
        try:
            return await pending
        except HttpError as exc:
            raise ExecutorCallError(exc.kind, exc.detail, timeout=exc.timeout) from exc

    async def aclose(self) -> None:
        await self._plain.aclose()
        await self._tls.aclose()


class _AiohttpHttp:
    def __init__(self, headers: dict[str, str], connect: float, read: float, limit: int) -> None:
        self._headers = headers
        self._timeout = aiohttp.ClientTimeout(total=None, connect=None, sock_connect=connect, sock_read=read)
        self._limit = limit
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        # Created on first use, inside the running loop (aiohttp requires one).
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=self._limit, keepalive_timeout=_KEEPALIVE_S)
            self._session = aiohttp.ClientSession(
                connector=connector, timeout=self._timeout, headers=self._headers,
                skip_auto_headers=("User-Agent",),
            )
        return self._session

    async def post(self, url: str, body: bytes) -> tuple[int, bytes]:
        try:
            async with self._open().post(url, data=body) as response:
                return response.status, await response.read()
        except TimeoutError as exc:  # aiohttp's connect/read timeouts are TimeoutErrors too
            detail = str(exc) or "no answer in time"
            raise ExecutorCallError(type(exc).__name__, detail, timeout=True) from exc
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            raise ExecutorCallError(type(exc).__name__, str(exc), timeout=False) from exc

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


class ExecutorClient:
    """Calls executors on behalf of the admin."""

    def __init__(
        self,
        *,
        access_token: str | None,
        connect_timeout: float = 3.0,
        read_timeout: float = 3.0,
        max_connections: int = 400,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        headers = dict(_JSON_HEADERS)
        if access_token:
            headers[ACCESS_TOKEN_HEADER] = access_token
        self._http: _Http
        if transport is not None:
            self._http = _HttpxHttp(headers, connect_timeout, read_timeout, max_connections, transport)
        else:
            self._http = _LeanHttp(headers, connect_timeout, read_timeout, max_connections)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def call(self, address: str, path: str, body: dict[str, Any] | None) -> ReturnT:
        """POST ``body`` to ``address``/``path``; the executor's answer or a failed ReturnT."""
        url = executor_url(address, path)
        return await self._answer(url, self._http.post(url, dumps(body) if body is not None else b""))

    def run_now(self, address: str, param: TriggerParam) -> Awaitable[ReturnT]:
        """/run, written at once when a keep-alive connection to the executor is idle (see
        ``Http1Client.post_now``); the awaitable gives the answer, as :meth:`run` does."""
        url = executor_url(address, "run")
        return self._answer(url, self._http.post_now(url, dumps(param.to_dict())))

    @staticmethod
    async def _answer(url: str, pending: Awaitable[tuple[int, bytes]]) -> ReturnT:
        try:
            status, content = await pending
        except ExecutorCallError as exc:
            what = "timed out" if exc.timeout else "unreachable"
            return ReturnT.fail(f"executor {url} {what} ({exc.kind}): {exc.detail}")
        if status != 200:
            text = content[:500].decode("utf-8", errors="replace")
            return ReturnT.fail(f"executor {url} answered HTTP {status}: {text}")
        try:
            return ReturnT.decode(content)
        except ProtocolError as exc:
            return ReturnT.fail(f"executor {url} answered something that is not a ReturnT: {exc}")

    async def run(self, address: str, param: TriggerParam) -> ReturnT:
        return await self.call(address, "run", param.to_dict())

    async def beat(self, address: str) -> ReturnT:
        return await self.call(address, "beat", None)

    async def idle_beat(self, address: str, job_id: int) -> ReturnT:
        return await self.call(address, "idleBeat", IdleBeatParam(job_id).to_dict())

    async def kill(self, address: str, job_id: int) -> ReturnT:
        return await self.call(address, "kill", KillParam(job_id).to_dict())

    async def log(self, address: str, param: LogParam) -> ReturnT:
        """The run's log; ``content`` is the LogResult dict when the call succeeded."""
        return await self.call(address, "log", param.to_dict())

    # Probes for the routing strategies (same signature as core.routing.Probe).
    async def beat_probe(self, address: str, job_id: int) -> ReturnT:
        return await self.beat(address)

    async def idle_beat_probe(self, address: str, job_id: int) -> ReturnT:
        return await self.idle_beat(address, job_id)
