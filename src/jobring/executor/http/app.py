"""The executor's HTTP endpoints as a small pure ASGI app, answering as XXL-JOB 2.x does.

Every answer is HTTP 200 with a JSON ReturnT body (null fields omitted). Checks run in
the reference's order: method, then access token, then path.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from jobring.executor.http.decode import decode_received, decode_trigger, read_body
from jobring.executor.ops import OPS_PATHS, OpsAnswer
from jobring.protocol.edge import SECURITY_HEADERS, Receive, Scope, Send
from jobring.protocol.models import (
    MSG_METHOD_NOT_SUPPORTED,
    MSG_TOKEN_WRONG,
    SUCCESS_CODE,
    IdleBeatParam,
    LogParam,
    LogResult,
    ProtocolError,
    ReturnT,
    TriggerParam,
    msg_uri_not_found,
)

log = logging.getLogger(__name__)

MSG_JOB_BUSY = "job thread is running or has trigger queue."
MSG_NOT_STARTED = "executor is not started."

_TOKEN_HEADER = b"xxl-job-access-token"
_RUN_PATHS = frozenset({"/run", "/trigger"})
_HEADERS = [(b"content-type", b"application/json;charset=UTF-8"), *SECURITY_HEADERS]
_BEAT_OK = ReturnT.success().encode()
OK_ANSWER = _BEAT_OK  # the body of every plain success (the same object each time)
_METHOD_NOT_SUPPORTED = ReturnT.fail(MSG_METHOD_NOT_SUPPORTED).encode()
_TOKEN_WRONG = ReturnT.fail(MSG_TOKEN_WRONG).encode()


class RunService(Protocol):
    """What the endpoints need from the execution engine (JobRunner satisfies it)."""

    async def run(self, param: TriggerParam) -> ReturnT: ...

    def is_idle(self, job_id: int) -> bool: ...

    async def kill(self, job_id: int) -> ReturnT: ...

    def received_of(self, runs: list[tuple[int, int]]) -> list[int]: ...


RunNow = Callable[[TriggerParam], "ReturnT | None"]
LogReader = Callable[[int, int, int], LogResult]


class ExecutorEndpoints:
    """ASGI app serving /beat, /idleBeat, /run (and 3.x /trigger), /kill, /log, and the
    jobring extension /received (which of these runs were accepted: see received.py)."""

    def __init__(self, access_token: str | None) -> None:
        self._token = access_token.encode() if access_token else None
        self._service: RunService | None = None
        # The service's ``run_now`` (JobRunner has one): a /run answered without a coroutine.
        self._run_now: RunNow | None = None
        self._read_log: LogReader | None = None
        self._startup: Callable[[], Awaitable[None]] | None = None
        self._shutdown: Callable[[], Awaitable[None]] | None = None
        # GET /health, /ready, /status, /metrics (see jobring.executor.ops); None: 404-like.
        self.ops: Callable[[str, bool, bytes | None], OpsAnswer] | None = None
        # jobring extensions by path (/jobring/subtasks: executor.distributed), token checked.
        self.extra_routes: dict[str, Callable[[bytes], Awaitable[ReturnT]]] = {}

    def ops_for(self, method: str, path: str, token: bytes | None, authorization: bytes | None
                ) -> OpsAnswer | None:
        """The answer to an operations request (GET of an ops path), None for anything else."""
        if method != "GET" or path not in OPS_PATHS or self.ops is None:
            return None
        return self.ops(path, self.token_ok(token), authorization)

    def bind(self, service: RunService, read_log: LogReader) -> None:
        """Attach the running engine; until then /run etc. answer 'executor is not started.'."""
        self._service = service
        self._run_now = getattr(service, "run_now", None)
        self._read_log = read_log

    def unbind(self) -> None:
        self._service = None
        self._run_now = None
        self._read_log = None

    def on_lifespan(
        self, startup: Callable[[], Awaitable[None]], shutdown: Callable[[], Awaitable[None]]
    ) -> None:
        """Hooks run when a server sends ASGI lifespan events to this app directly."""
        self._startup, self._shutdown = startup, shutdown

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            ops = self._ops_of_scope(scope)
            if ops is not None:
                size = str(len(ops.body)).encode()
                headers = [(b"content-type", ops.content_type), (b"content-length", size)]
                await send({"type": "http.response.start", "status": ops.status, "headers": headers})
                await send({"type": "http.response.body", "body": ops.body})
                return
            body = await self._answer(scope, receive)
            headers = [*_HEADERS, (b"content-length", str(len(body)).encode())]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
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

    def _ops_of_scope(self, scope: Scope) -> OpsAnswer | None:
        if scope["method"] != "GET":
            return None
        path: str = scope["path"]
        root: str = scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root):] or "/"
        headers = dict(scope["headers"])
        return self.ops_for("GET", path, headers.get(_TOKEN_HEADER), headers.get(b"authorization"))

    def _token_ok(self, scope: Scope) -> bool:
        if self._token is None:
            return True
        for name, value in scope["headers"]:
            if name == _TOKEN_HEADER:
                return hmac.compare_digest(value, self._token)
        return False

    async def _answer(self, scope: Scope, receive: Receive) -> bytes:
        path: str = scope["path"]
        root: str = scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root):] or "/"
        method: str = scope["method"]
        token_ok = self._token_ok(scope)
        if method != "POST" or not token_ok:
            # The answer does not depend on the body: never read (and buffer) it.
            return await self.handle(method, path, token_ok, b"")
        try:
            body = await read_body(receive)
        except ProtocolError as exc:
            return ReturnT.fail(f"request error:{exc}").encode()
        return await self.handle(method, path, token_ok, body)

    def token_ok(self, token: bytes | None) -> bool:
        """Whether a request carrying this access token header value may pass."""
        if self._token is None:
            return True
        return token is not None and hmac.compare_digest(token, self._token)

    async def handle(self, method: str, path: str, token_ok: bool, body: bytes) -> bytes:
        """Answer one request (any transport): the JSON body of the HTTP 200 response."""
        if method != "POST":
            return _METHOD_NOT_SUPPORTED
        if not token_ok:
            return _TOKEN_WRONG
        if path == "/beat":
            return _BEAT_OK
        try:
            answer = await self._dispatch(path, body)
        except Exception as exc:
            return _failed(path, exc)
        return _encoded(path, answer)

    def answer_now(self, path: str, token_ok: bool, body: bytes) -> bytes | None:
        """What :meth:`handle` answers to a POST of ``path``, when that needs no waiting: a
        ``/run`` accepted or refused at once (the executor's hot path: no coroutine); None
        for any other request, and for a ``/run`` that must wait (handle it then)."""
        run_now = self._run_now
        if run_now is None or not token_ok or path not in _RUN_PATHS or path in self.extra_routes:
            return None
        try:
            answer = run_now(decode_trigger(body))
        except Exception as exc:
            return _failed(path, exc)
        return None if answer is None else _encoded(path, answer)

    async def _dispatch(self, path: str, body: bytes) -> ReturnT:
        extra = self.extra_routes.get(path)
        if extra is not None:
            return await extra(body)
        if path not in ("/run", "/trigger", "/idleBeat", "/kill", "/log", "/received"):
            return ReturnT.fail(msg_uri_not_found(path))
        service, read_log = self._service, self._read_log
        if service is None or read_log is None:
            return ReturnT.fail(MSG_NOT_STARTED)
        if path == "/run" or path == "/trigger":
            return await service.run(decode_trigger(body))
        if path == "/idleBeat":
            job_id = IdleBeatParam.decode(body).job_id
            return ReturnT.success() if service.is_idle(job_id) else ReturnT.fail(MSG_JOB_BUSY)
        if path == "/kill":
            return await service.kill(IdleBeatParam.decode(body).job_id)
        if path == "/received":
            return ReturnT.success({"received": service.received_of(decode_received(body))})
        param = LogParam.decode(body)
        # Log files can be large; keep the event loop free while reading.
        result = await asyncio.to_thread(read_log, param.log_date_tim, param.log_id, param.from_line_num)
        return ReturnT.success(result.to_dict())


def _failed(path: str, exc: Exception) -> bytes:
    if isinstance(exc, ValueError):  # undecodable body, ids out of range
        return ReturnT.fail(f"request error:{exc}").encode()
    # The reference answers any failure as "request error:"; keep the trace in our log.
    log.error("executor endpoint %s failed", path, exc_info=exc)
    return ReturnT.fail(f"request error:{type(exc).__name__}: {exc}").encode()


def _encoded(path: str, answer: ReturnT) -> bytes:
    if answer.code == SUCCESS_CODE and answer.msg is None and answer.content is None:
        return _BEAT_OK  # the common answer, encoded once
    try:
        return answer.encode()
    except TypeError as exc:  # a value JSON cannot carry (e.g. an integer past 64 bits)
        log.error("executor endpoint %s: answer cannot be encoded: %s", path, exc)
        return ReturnT.fail(f"request error:answer cannot be encoded: {exc}").encode()
