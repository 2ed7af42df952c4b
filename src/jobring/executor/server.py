"""The executor's HTTP endpoints as a small pure ASGI app, answering as XXL-JOB 2.x does.

Every answer is HTTP 200 with a JSON ReturnT body (null fields omitted). Checks run in
the reference's order: method, then access token, then path.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import socket
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Protocol, cast

import orjson

from jobring.executor.eager import first_step, resume
from jobring.executor.ops import OPS_PATHS, OpsAnswer
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
_METHOD_NOT_SUPPORTED = ReturnT.fail(MSG_METHOD_NOT_SUPPORTED).encode()
_TOKEN_WRONG = ReturnT.fail(MSG_TOKEN_WRONG).encode()


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
        # GET /health, /ready, /status, /metrics (see jobring.executor.ops); None: 404-like.
        self.ops: Callable[[str, bool, bytes | None], OpsAnswer] | None = None

    def ops_for(self, method: str, path: str, token: bytes | None, authorization: bytes | None
                ) -> OpsAnswer | None:
        """The answer to an operations request (GET of an ops path), None for anything else."""
        if method != "GET" or path not in OPS_PATHS or self.ops is None:
            return None
        return self.ops(path, self.token_ok(token), authorization)

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
        try:
            body = await _read_body(receive)
        except ProtocolError as exc:
            return ReturnT.fail(f"request error:{exc}").encode()
        path: str = scope["path"]
        root: str = scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root):] or "/"
        return await self.handle(scope["method"], path, self._token_ok(scope), body)

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
        except ValueError as exc:  # undecodable body, ids out of range
            return ReturnT.fail(f"request error:{exc}").encode()
        except Exception as exc:
            # The reference answers any failure as "request error:"; keep the trace in our log.
            log.exception("executor endpoint %s failed", path)
            return ReturnT.fail(f"request error:{type(exc).__name__}: {exc}").encode()
        if answer.code == SUCCESS_CODE and answer.msg is None and answer.content is None:
            return _BEAT_OK  # the common answer, encoded once
        return answer.encode()

    async def _dispatch(self, path: str, body: bytes) -> ReturnT:
        if path not in ("/run", "/trigger", "/idleBeat", "/kill", "/log"):
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
        param = LogParam.decode(body)
        # Log files can be large; keep the event loop free while reading.
        result = await asyncio.to_thread(read_log, param.log_date_tim, param.log_id, param.from_line_num)
        return ReturnT.success(result.to_dict())


def decode_trigger(body: bytes) -> TriggerParam:
    """TriggerParam.decode with a fast path for the complete, well-typed body admins send."""
    try:
        d = orjson.loads(body) if body.strip() else {}
    except orjson.JSONDecodeError as exc:
        raise ProtocolError(str(exc)) from exc
    if type(d) is not dict:
        return TriggerParam.decode(body)  # raises the usual message
    try:
        job_id, handler, params = d["jobId"], d["executorHandler"], d["executorParams"]
        block, timeout, log_id = d["executorBlockStrategy"], d["executorTimeout"], d["logId"]
        log_time, glue_type, glue_source = d["logDateTime"], d["glueType"], d["glueSource"]
        glue_time, index, total = d["glueUpdatetime"], d["broadcastIndex"], d["broadcastTotal"]
    except KeyError:
        return TriggerParam.decode(d)
    if (
        type(job_id) is int and type(timeout) is int and type(log_id) is int and type(log_time) is int
        and type(glue_time) is int and type(index) is int and type(total) is int
        and type(handler) is str and type(params) is str and type(block) is str
        and type(glue_type) is str and type(glue_source) is str
    ):
        return TriggerParam(job_id, handler, params, block, timeout, log_id, log_time, glue_type,
                            glue_source, glue_time, index, total)
    return TriggerParam.decode(d)  # nulls, numbers as strings, wrong types: the full checks


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


# --- standalone HTTP/1.1 server -----------------------------------------------------------
# The standalone executor serves its endpoints with this small httptools-based protocol
# instead of a generic ASGI server: a /run is one parse, one handle() call and one write,
# which is most of the executor's cost per run. Mounting (asgi_app) still goes through ASGI.

_STATUS_LINE = b"HTTP/1.1 200 OK\r\nContent-Type: application/json;charset=UTF-8\r\nContent-Length: "
_BAD_REQUEST = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
KEEP_ALIVE_TIMEOUT_S = 75.0


class _Request:
    __slots__ = ("url", "token", "authorization", "expect_continue", "chunks", "size")

    def __init__(self) -> None:
        self.url = b""
        self.token: bytes | None = None
        self.authorization: bytes | None = None
        self.expect_continue = False
        self.chunks: list[bytes] = []
        self.size = 0


class _HttpConnection(asyncio.Protocol):
    """One client connection: requests parsed by httptools, answered in order (keep-alive)."""

    def __init__(self, server: ExecutorHttpServer) -> None:
        import httptools

        self._server = server
        self._parser = httptools.HttpRequestParser(self)
        self._parse_error = httptools.HttpParserError
        self._transport: asyncio.Transport | None = None
        self._request = _Request()
        self._last: asyncio.Task[None] | None = None
        self._closing = False
        self._idle_timer: asyncio.TimerHandle | None = None
        self._loop = asyncio.get_running_loop()
        self._last_activity = self._loop.time()

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self._server.connections.add(self)
        self._arm_idle_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        self._server.connections.discard(self)
        if self._idle_timer is not None:
            self._idle_timer.cancel()

    def data_received(self, data: bytes) -> None:
        self._last_activity = self._loop.time()
        try:
            self._parser.feed_data(data)
        except self._parse_error as exc:
            log.debug("bad HTTP request: %s", exc)
            self._abort(_BAD_REQUEST)

    # httptools callbacks

    def on_message_begin(self) -> None:
        self._request = _Request()

    def on_url(self, url: bytes) -> None:
        self._request.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        lowered = name.lower()
        if lowered == _TOKEN_HEADER:
            self._request.token = value
        elif lowered == b"authorization":
            self._request.authorization = value
        elif lowered == b"expect" and value.lower() == b"100-continue":
            self._request.expect_continue = True

    def on_headers_complete(self) -> None:
        if self._request.expect_continue and self._transport is not None:
            self._transport.write(_CONTINUE)

    def on_body(self, body: bytes) -> None:
        request = self._request
        request.size += len(body)
        if request.size <= MAX_BODY_BYTES:
            request.chunks.append(body)

    def on_message_complete(self) -> None:
        request = self._request
        method = self._parser.get_method().decode("latin-1")
        keep_alive = self._parser.should_keep_alive()
        path = request.url.split(b"?", 1)[0].decode("utf-8", "replace")
        # Most answers need no waiting (a /run is accepted or refused at once): answer now,
        # and make a task only when the answer has to wait (a log read, an earlier answer).
        respond = self._respond(self._last, method, path, request, keep_alive)
        try:
            done, yielded = first_step(respond)
        except Exception:
            # Not the client's fault: say so in the log (the parser would report it as a bad request).
            log.exception("answering %s %s failed", method, path)
            self._abort(None)
            return
        if done:
            self._last = None
            return
        self._last = task = self._loop.create_task(resume(respond, yielded))
        self._server.in_flight.add(task)
        task.add_done_callback(self._server.in_flight.discard)

    # answering

    async def _respond(
        self, previous: asyncio.Task[None] | None, method: str, path: str, request: _Request, keep_alive: bool
    ) -> None:
        endpoints = self._server.endpoints
        ops = endpoints.ops_for(method, path, request.token, request.authorization)
        if ops is not None:
            if previous is not None and not previous.done():
                await previous
            self._write_ops(ops, keep_alive)
            return
        if request.size > MAX_BODY_BYTES:
            answer = ReturnT.fail(f"request error:request body larger than {MAX_BODY_BYTES} bytes").encode()
            keep_alive = False
        else:
            body = request.chunks[0] if len(request.chunks) == 1 else b"".join(request.chunks)
            answer = await endpoints.handle(method, path, endpoints.token_ok(request.token), body)
        if previous is not None and not previous.done():
            await previous  # answers leave in request order
        transport = self._transport
        if transport is None or self._closing:
            return
        head = _STATUS_LINE + str(len(answer)).encode()
        transport.write(head + (b"\r\n\r\n" if keep_alive else b"\r\nConnection: close\r\n\r\n") + answer)
        self._last_activity = self._loop.time()
        if not keep_alive:
            self._closing = True
            transport.close()

    def _write_ops(self, ops: OpsAnswer, keep_alive: bool) -> None:
        transport = self._transport
        if transport is None or self._closing:
            return
        reason = {200: b"OK", 401: b"Unauthorized", 503: b"Service Unavailable"}.get(ops.status, b"Error")
        head = (b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n"
                % (ops.status, reason, ops.content_type, len(ops.body)))
        transport.write(head + (b"\r\n" if keep_alive else b"Connection: close\r\n\r\n") + ops.body)
        self._last_activity = self._loop.time()
        if not keep_alive:
            self._closing = True
            transport.close()

    def _arm_idle_timer(self, delay_s: float | None = None) -> None:
        # One timer per idle period, not one per request: it re-arms itself while busy.
        timeout = self._server.keep_alive_timeout_s
        self._idle_timer = self._loop.call_later(timeout if delay_s is None else delay_s, self._check_idle)

    def _check_idle(self) -> None:
        if self._closing:
            return
        idle_for = self._loop.time() - self._last_activity
        busy = self._last is not None and not self._last.done()
        if busy or idle_for < self._server.keep_alive_timeout_s:
            self._arm_idle_timer(None if busy else self._server.keep_alive_timeout_s - idle_for)
        else:
            self._abort(None)

    def abort(self) -> None:
        self._abort(None)

    def _abort(self, final: bytes | None) -> None:
        self._closing = True
        if self._transport is not None:
            if final:
                self._transport.write(final)
            self._transport.close()


class ExecutorHttpServer:
    """Serves :class:`ExecutorEndpoints` over HTTP/1.1 on a bound socket."""

    def __init__(
        self, endpoints: ExecutorEndpoints, *, keep_alive_timeout_s: float = KEEP_ALIVE_TIMEOUT_S
    ) -> None:
        self.endpoints = endpoints
        self.keep_alive_timeout_s = keep_alive_timeout_s
        self.connections: set[_HttpConnection] = set()
        self.in_flight: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None

    async def start(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _HttpConnection(self), sock=sock, backlog=2048)

    async def stop(self, grace_s: float = 5.0) -> None:
        """Stop accepting, let answers in progress finish (up to grace_s), close connections."""
        if self._server is not None:
            self._server.close()
        if self.in_flight:
            await asyncio.wait(set(self.in_flight), timeout=grace_s)
        for connection in list(self.connections):
            connection.abort()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
