"""An in-test admin on loopback that records what executors send it (HTTP/1.1, keep-alive)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: bytes
    accepted: bool = True

    def json(self) -> Any:
        return orjson.loads(self.body)


@dataclass
class FakeAdmin:
    """Answers every POST with ``answer`` (default ``{"code":200}``) and records it."""

    answer: bytes = b'{"code":200}'
    http_status: int = 200
    # Bodies this admin refuses as malformed (HTTP 400), as a real admin refuses a bad item.
    refuses: Callable[[bytes], bool] | None = None
    # Answers in place of the above: (path, lower-cased headers, body) -> (status, body).
    responder: Callable[[str, dict[str, str], bytes], tuple[int, bytes]] | None = None
    requests: list[Recorded] = field(default_factory=list)
    port: int = 0
    _server: asyncio.Server | None = None
    _changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    _writers: set[asyncio.StreamWriter] = field(default_factory=set)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/xxl-job-admin/"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Close the listener and every open connection (the admin is down)."""
        if self._server is not None:
            self._server.close()
            for writer in list(self._writers):
                writer.close()
            await self._server.wait_closed()
            self._server = None

    def paths(self) -> list[str]:
        return [r.path for r in self.requests]

    def callbacks(self) -> list[dict[str, Any]]:
        """Callback items this admin accepted (answered with code 200)."""
        items: list[dict[str, Any]] = []
        for r in self.requests:
            if r.path.endswith("api/callback") and r.accepted:
                data = r.json()
                items.extend(data["callbackList"] if isinstance(data, dict) else data)
        return items

    async def wait_for(self, predicate: Callable[[FakeAdmin], bool], within_s: float = 10.0) -> None:
        async with asyncio.timeout(within_s), self._changed:
            await self._changed.wait_for(lambda: predicate(self))

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                _method, path, _version = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        name, value = line.split(":", 1)
                        headers[name.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                status, answer = self.http_status, self.answer
                if self.refuses is not None and self.refuses(body):
                    status, answer = 400, b'{"code":500,"msg":"request error: bad item"}'
                if self.responder is not None:
                    status, answer = self.responder(path, headers, body)
                accepted = status == 200 and answer.startswith(b'{"code":200')
                recorded = Recorded(path, headers, body, accepted)
                writer.write(
                    b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                    % (status, len(answer), answer)
                )
                await writer.drain()
                async with self._changed:
                    self.requests.append(recorded)
                    self._changed.notify_all()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            self._writers.discard(writer)
            with contextlib.suppress(ConnectionError):
                writer.close()
