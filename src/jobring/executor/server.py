"""The executor's HTTP endpoints as a small pure ASGI app, answering as XXL-JOB 2.x does.

Every answer is HTTP 200 with a JSON ReturnT body (null fields omitted). Checks run in
the reference's order: method, then access token, then path.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Protocol

from jobring.protocol.models import (
    MSG_METHOD_NOT_SUPPORTED,
    MSG_TOKEN_WRONG,
    IdleBeatParam,
    LogParam,
    LogResult,
    ProtocolError,
    ReturnT,
    TriggerParam,
    msg_uri_not_found,
)

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

MSG_JOB_BUSY = "job thread is running or has trigger queue."
MSG_NOT_STARTED = "executor is not started."
# glueSource travels in /run; anything larger than this is not a sane request.
MAX_BODY_BYTES = 8 * 1024 * 1024

_TOKEN_HEADER = b"xxl-job-access-token"
_HEADERS = [(b"content-type", b"application/json;charset=UTF-8")]
_BEAT_OK = ReturnT.success().encode()


class RunService(Protocol):
    """What the endpoints need from the execution engine (JobRunner satisfies it)."""

    async def run(self, param: TriggerParam) -> ReturnT: ...

    def is_idle(self, job_id: int) -> bool: ...

    async def kill(self, job_id: int) -> ReturnT: ...


LogReader = Callable[[int, int, int], LogResult]


class ExecutorEndpoints:
    """ASGI app serving /beat, /idleBeat, /run (and 3.x /trigger), /kill, /log."""

    def __init__(self, access_token: str | None) -> None:
        self._token = access_token.encode() if access_token else None
        self._service: RunService | None = None
        self._read_log: LogReader | None = None
        self._startup: Callable[[], Awaitable[None]] | None = None
        self._shutdown: Callable[[], Awaitable[None]] | None = None

    def bind(self, service: RunService, read_log: LogReader) -> None:
        """Attach the running engine; until then /run etc. answer 'executor is not started.'."""
        self._service = service
        self._read_log = read_log

    def unbind(self) -> None:
        self._service = None
        self._read_log = None

    def on_lifespan(
        self, startup: Callable[[], Awaitable[None]], shutdown: Callable[[], Awaitable[None]]
    ) -> None:
        """Hooks run when a server sends ASGI lifespan events to this app directly."""
        self._startup, self._shutdown = startup, shutdown

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            body = await self._answer(scope, receive)
            await send({"type": "http.response.start", "status": 200, "headers": _HEADERS})
            await send({"type": "http.response.body", "body": body})
        elif kind == "lifespan":
            await self._lifespan(receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    if self._startup is not None:
                        await self._startup()
                except Exception as exc:
                    log.exception("executor startup failed")
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self._shutdown is not None:
                    await self._shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return

    def _token_ok(self, scope: Scope) -> bool:
        if self._token is None:
            return True
        for name, value in scope["headers"]:
            if name == _TOKEN_HEADER:
                return hmac.compare_digest(value, self._token)
        return False

    async def _answer(self, scope: Scope, receive: Receive) -> bytes:
        try:
            body = await _read_body(receive)
        except ProtocolError as exc:
            return ReturnT.fail(f"request error:{exc}").encode()
        if scope["method"] != "POST":
            return ReturnT.fail(MSG_METHOD_NOT_SUPPORTED).encode()
        if not self._token_ok(scope):
            return ReturnT.fail(MSG_TOKEN_WRONG).encode()
        path: str = scope["path"]
        root: str = scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root):] or "/"
        if path == "/beat":
            return _BEAT_OK
        try:
            return (await self._dispatch(path, body)).encode()
        except ValueError as exc:  # undecodable body, ids out of range
            return ReturnT.fail(f"request error:{exc}").encode()
        except Exception as exc:
            # The reference answers any failure as "request error:"; keep the trace in our log.
            log.exception("executor endpoint %s failed", path)
            return ReturnT.fail(f"request error:{type(exc).__name__}: {exc}").encode()

    async def _dispatch(self, path: str, body: bytes) -> ReturnT:
        if path not in ("/run", "/trigger", "/idleBeat", "/kill", "/log"):
            return ReturnT.fail(msg_uri_not_found(path))
        service, read_log = self._service, self._read_log
        if service is None or read_log is None:
            return ReturnT.fail(MSG_NOT_STARTED)
        if path == "/run" or path == "/trigger":
            return await service.run(TriggerParam.decode(body))
        if path == "/idleBeat":
            job_id = IdleBeatParam.decode(body).job_id
            return ReturnT.success() if service.is_idle(job_id) else ReturnT.fail(MSG_JOB_BUSY)
        if path == "/kill":
            return await service.kill(IdleBeatParam.decode(body).job_id)
        param = LogParam.decode(body)
        # Log files can be large; keep the event loop free while reading.
        result = await asyncio.to_thread(read_log, param.log_date_tim, param.log_id, param.from_line_num)
        return ReturnT.success(result.to_dict())


async def _read_body(receive: Receive) -> bytes:
    message = await receive()
    body: bytes = message.get("body", b"")
    if not message.get("more_body", False) and len(body) <= MAX_BODY_BYTES:
        return body  # the usual case: one message
    chunks = [body]
    size = len(body)
    while message.get("more_body", False) and size <= MAX_BODY_BYTES:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        chunks.append(chunk)
    if size > MAX_BODY_BYTES:
        raise ProtocolError(f"request body larger than {MAX_BODY_BYTES} bytes")
    return b"".join(chunks)
