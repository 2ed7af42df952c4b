"""An in-memory connection for the admin's HTTP/1.1 client (``Http1Client``'s ``connect``):
requests written on it are parsed and handed to an httpx-style handler, whose answers are
written back as raw HTTP/1.1 bytes. The production client and parser run; no sockets."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable

import httpx

Handler = Callable[[httpx.Request], Awaitable[httpx.Response] | httpx.Response]
Refuse = Callable[[str, int], bool]


class MemoryTransport(asyncio.Transport):
    """The client's end of one in-memory connection; records reading pauses."""

    def __init__(self, protocol: asyncio.Protocol, server: LoopbackServer, host: str, port: int) -> None:
        super().__init__()
        self.protocol = protocol
        self.written = bytearray()
        self.paused = False
        self._server = server
        self._host = host
        self._port = port
        self._closing = False
        self._pending = bytearray()
        self._queue: asyncio.Queue[tuple[bytes, bytes]] = asyncio.Queue()
        self._task = asyncio.get_running_loop().create_task(self._serve())
        server.tasks.add(self._task)
        self._task.add_done_callback(server.tasks.discard)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing:
            raise ConnectionResetError("write on a closed in-memory connection")
        self.written += data
        self._pending += data
        while (end := self._pending.find(b"\r\n\r\n")) >= 0:
            head = bytes(self._pending[:end])
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if len(self._pending) < end + 4 + length:
                return
            body = bytes(self._pending[end + 4:end + 4 + length])
            del self._pending[:end + 4 + length]
            self._queue.put_nowait((head, body))

    async def _serve(self) -> None:
        while True:
            head, body = await self._queue.get()
            lines = head.decode("latin-1").split("\r\n")
            method, target, _ = lines[0].split(" ", 2)
            headers = [tuple(line.split(":", 1)) for line in lines[1:]]
            pairs = [(k.strip(), v.strip()) for k, v in headers]
            host = next((v for k, v in pairs if k.lower() == "host"), f"{self._host}:{self._port}")
            request = httpx.Request(method, f"http://{host}{target}", headers=pairs, content=body)
            try:
                answer = self._server.handler(request)
                response = await answer if inspect.isawaitable(answer) else answer
            except httpx.TransportError:
                self.close()  # the executor went away mid-call
                return
            content = await response.aread()
            out = [f"HTTP/1.1 {response.status_code} {response.reason_phrase}\r\n".encode()]
            for name, value in response.headers.raw:
                if name.lower() not in (b"content-length", b"transfer-encoding"):
                    out.append(name + b": " + value + b"\r\n")
            out.append(b"Content-Length: %d\r\n\r\n" % len(content))
            out.append(content)
            if self._closing:
                return
            self.protocol.data_received(b"".join(out))

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        self._server.closed += 1
        if asyncio.current_task() is not self._task:
            self._task.cancel()
        asyncio.get_running_loop().call_soon(self.protocol.connection_lost, None)

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def is_reading(self) -> bool:
        return not self.paused


class LoopbackServer:
    """Answers every in-memory connection with ``handler``; ``refuse(host, port)`` refuses
    a connection as a stopped executor would. Counts connections opened and closed."""

    def __init__(self, handler: Handler, refuse: Refuse | None = None) -> None:
        self.handler = handler
        self.refuse = refuse
        self.opened = 0
        self.closed = 0
        self.tasks: set[asyncio.Task[None]] = set()
        self.transports: list[MemoryTransport] = []

    async def connect(self, factory: Callable[[], asyncio.Protocol], host: str, port: int
                      ) -> tuple[asyncio.BaseTransport, asyncio.Protocol]:
        if self.refuse is not None and self.refuse(host, port):
            raise ConnectionRefusedError(f"connection to {host}:{port} refused")
        protocol = factory()
        transport = MemoryTransport(protocol, self, host, port)
        self.opened += 1
        self.transports.append(transport)
        protocol.connection_made(transport)
        return transport, protocol
