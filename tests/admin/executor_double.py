"""An in-process executor double for admin tests: executors at several addresses that answer
like XXL-JOB executors and record every call. ``connect`` plugs it under the admin's own
HTTP/1.1 client (in memory, see :mod:`tests.admin.loopback`)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from jobring.http1.client import Connect
from jobring.protocol.models import ReturnT
from tests.admin.loopback import LoopbackServer

Answer = Callable[[dict[str, Any]], Awaitable[ReturnT]]


@dataclass
class Call:
    address: str
    path: str
    body: dict[str, Any]
    headers: httpx.Headers


@dataclass
class ExecutorDouble:
    """Executors at ``http://<host>/``; unknown or ``down`` hosts refuse connections."""

    hosts: list[str]
    calls: list[Call] = field(default_factory=list)
    down: set[str] = field(default_factory=set)
    answers: dict[tuple[str, str], Answer] = field(default_factory=dict)
    content_type: str = "text/html;charset=UTF-8"  # as the Java executor says
    _server: LoopbackServer | None = field(default=None, init=False, repr=False)

    @property
    def addresses(self) -> list[str]:
        return [f"http://{h}/" for h in self.hosts]

    def address(self, i: int) -> str:
        return self.addresses[i]

    def answer(self, address: str, path: str, fn: Answer) -> None:
        self.answers[(address, path)] = fn

    def runs(self, address: str | None = None) -> list[Call]:
        return [c for c in self.calls if c.path == "run" and (address is None or c.address == address)]

    async def handle(self, request: httpx.Request) -> httpx.Response:
        host = request.url.netloc.decode()
        address = f"http://{host}/"
        if host not in self.hosts or host in self.down:
            raise httpx.ConnectError("connection refused", request=request)
        path = request.url.path.strip("/")
        body = orjson.loads(request.content) if request.content.strip() else {}
        self.calls.append(Call(address, path, body, request.headers))
        fn = self.answers.get((address, path))
        result = await fn(body) if fn else ReturnT.success()
        return httpx.Response(200, content=result.encode(), headers={"Content-Type": self.content_type})

    def transport(self) -> httpx.MockTransport:
        """The httpx path (``ExecutorClient(transport=...)``), which production does not
        use: prefer :attr:`connect`."""
        return httpx.MockTransport(self.handle)

    def refuses(self, host: str, port: int) -> bool:
        netloc = f"{host}:{port}"
        return netloc not in self.hosts or netloc in self.down

    @property
    def server(self) -> LoopbackServer:
        """The in-memory server (one per double) that ``connect`` opens connections to."""
        if self._server is None:
            self._server = LoopbackServer(self.handle, self.refuses)
        return self._server

    @property
    def connect(self) -> Connect:
        """``ExecutorClient(connect=...)``: the real client, connected to this double."""
        return self.server.connect


def blocking_answer(release: asyncio.Event, started: asyncio.Event | None = None) -> Answer:
    """An answer that waits for ``release`` (a slow executor)."""

    async def answer(body: dict[str, Any]) -> ReturnT:
        if started is not None:
            started.set()
        await release.wait()
        return ReturnT.success()

    return answer
