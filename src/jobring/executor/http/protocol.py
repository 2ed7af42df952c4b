"""The standalone executor's HTTP/1.1 server: asyncio protocol + httptools parser.

The standalone executor serves its endpoints with this small protocol instead of a generic
ASGI server: a /run is one parse, one handle() call and one write, which is most of the
executor's cost per run. Mounting (``Executor.asgi_app``) still goes through ASGI.

Limits (see :class:`ServerLimits` and :class:`~jobring.protocol.edge.HeadLimits`): a head
past its limits is answered 414/431, a body past ``max_body_bytes`` 413 (declared or counted
while a chunked body arrives), a head or body not complete in time 408, unparsable input 400;
each of these closes the connection. Reading stops while the client leaves too many answers
untaken (the transport's write buffer above the high-water mark) or owes too many pipelined
answers, and resumes once they drain.

With an access token configured, a request head without the right token is answered as soon
as the head is complete (the answer does not depend on the body), its body is never read, and
the connection is closed. Connections that have not presented the token are budgeted per
client address and in total and closed after a short idle time (:mod:`.admission`); only when
``max_connections`` connections have all presented it does a newcomer get 503.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import cast

from jobring.errors import JobringError
from jobring.executor.eager import first_step, resume
from jobring.executor.http.admission import Admission
from jobring.executor.http.app import OK_ANSWER, ExecutorEndpoints
from jobring.executor.http.limits import BAD_REQUEST, ServerLimits, error_answer, refusal_reason
from jobring.executor.ops import OpsAnswer
from jobring.protocol.edge import LINGER_S, SECURITY_HEADER_LINES, HeadLimits, HeadMeter, feed_head

log = logging.getLogger(__name__)

_TOKEN_HEADER = b"xxl-job-access-token"
_STATUS_LINE = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json;charset=UTF-8\r\n"
                + SECURITY_HEADER_LINES + b"Content-Length: ")
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_OK_BODY = OK_ANSWER
_OK_ANSWER = _STATUS_LINE + b"%d\r\n\r\n" % len(_OK_BODY) + _OK_BODY
KEEP_ALIVE_TIMEOUT_S = 75.0
# Closing unauthenticated connections for newcomers is logged at most this often.
EVICTION_LOG_INTERVAL_S = 60.0
# How long after a connection arrives the unauthenticated budgets are enforced: connections
# accepted together get their first read (where the admin's presents its token) first.
TRIM_DELAY_S = 0.1


class _Request:
    __slots__ = ("url", "token", "token_ok", "authorization", "expect_continue", "chunks", "size",
                 "declared_size")

    def __init__(self) -> None:
        self.url = b""
        self.declared_size = 0
        self.token: bytes | None = None
        self.token_ok = False  # judged once the head is complete
        self.authorization: bytes | None = None
        self.expect_continue = False
        self.chunks: list[bytes] = []
        self.size = 0


class _Refused(JobringError):
    """Raised from a parser callback to stop parsing a refused request."""


class HttpConnection(asyncio.Protocol):
    """One client connection: requests parsed by httptools, answered in order (keep-alive)."""

    def __init__(self, server: ExecutorHttpServer) -> None:
        import httptools

        self._server = server
        self._limits = server.limits
        self._parser = httptools.HttpRequestParser(self)
        self._parse_error = httptools.HttpParserError
        self._transport: asyncio.Transport | None = None
        self._request = _Request()
        self._last: asyncio.Task[None] | None = None
        self._closing = False
        self._idle_timer: asyncio.TimerHandle | None = None
        self._loop = asyncio.get_running_loop()
        self._last_activity = self._loop.time()
        self._meter = HeadMeter(server.head_limits)
        # One timer per connection checks the read deadlines; a request costs a clock read,
        # not a timer (the /run path is the executor's hot path).
        self._read_timer: asyncio.TimerHandle | None = None
        self._head_started: float | None = self._last_activity  # the first head starts now
        self._body_started: float | None = None
        self._refused = False
        self._owed = 0  # requests parsed whose answer is not written yet
        self._write_paused = False
        self._read_paused = False
        self._authenticated = False  # a request head of this connection carried the token

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        limits = self._limits
        self._server.connections.add(self)  # until closed (a refused one lingers, holding a socket)
        if not self._server.admit(self, _peer_host(self._transport)):
            self._refuse(503)
            return
        self._transport.set_write_buffer_limits(limits.write_high_water, limits.write_low_water)
        # The first check comes at the shorter of the two idle timeouts: the connection may
        # present the token before then.
        self._arm_idle_timer(min(self._server.keep_alive_timeout_s, limits.unauthenticated_idle_timeout_s))
        self._arm_read_timer(self._server.head_limits.head_timeout_s)

    def connection_lost(self, exc: Exception | None) -> None:
        # A request still being received (an early close mid-body) is dropped unanswered.
        self._closing = True
        self._server.connections.discard(self)
        self._server.admission.forget(self)
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        self._cancel_read_timer()

    def data_received(self, data: bytes) -> None:
        if self._refused or self._closing:
            return  # lingering after a refusal, or closed for room: drop what the client still sends
        self._last_activity = self._loop.time()
        if self._meter.in_head and self._head_started is None:
            self._head_started = self._last_activity
            if self._read_timer is None:
                self._arm_read_timer(self._server.head_limits.head_timeout_s)
        try:
            verdict = feed_head(self._meter, data, self._parser.feed_data)
        except self._parse_error as exc:
            if self._refused:
                return  # a callback refused the request and stopped the parser
            log.debug("bad HTTP request: %s", exc)
            self._abort(BAD_REQUEST)
            return
        if verdict is not None:
            self._refuse(verdict)

    def pause_writing(self) -> None:
        # The client is not taking its answers: read no more requests until it does.
        self._write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._last_activity = self._loop.time()
        self._update_reading()

    # httptools callbacks

    def on_message_begin(self) -> None:
        self._request = _Request()

    def on_url(self, url: bytes) -> None:
        self._meter.url(url)
        self._request.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._meter.header(name, value)
        lowered = name.lower()
        if lowered == _TOKEN_HEADER:
            self._request.token = value
        elif lowered == b"authorization":
            self._request.authorization = value
        elif lowered == b"expect" and value.lower() == b"100-continue":
            self._request.expect_continue = True
        elif lowered == b"content-length" and value.strip().isdigit():
            self._request.declared_size = int(value)

    def on_headers_complete(self) -> None:
        verdict = self._meter.headers_done()
        self._head_started = None
        if verdict is not None:
            self._refuse(verdict)
            raise _Refused  # stops the parser: nothing of this request is answered
        if self._request.declared_size > self._limits.max_body_bytes:
            self._refuse(413)
            raise _Refused
        self._request.token_ok = self._server.endpoints.token_ok(self._request.token)
        if not self._request.token_ok:
            self._answer_at_head()
            raise _Refused  # the body (and anything after it) is read and dropped, never kept
        if not self._authenticated:
            self._authenticated = True
            self._server.admission.authenticated(self)
        self._body_started = self._last_activity
        if self._read_timer is None:
            self._arm_read_timer(self._limits.body_timeout_s)
        if self._request.expect_continue and self._transport is not None:
            self._transport.write(_CONTINUE)

    def on_body(self, body: bytes) -> None:
        request = self._request
        request.size += len(body)
        if request.size > self._limits.max_body_bytes:  # a chunked body past the cap
            self._refuse(413)
            raise _Refused
        request.chunks.append(body)

    def on_message_complete(self) -> None:
        self._meter.message_done()
        self._body_started = None
        method = self._parser.get_method().decode("latin-1")
        self._start_answer(method, self._request, self._parser.should_keep_alive())

    def _answer_at_head(self) -> None:
        """Answer a request without the right token from its head alone, then close."""
        self._cancel_read_timer()
        self._refused = True  # what the client still sends is dropped
        self._start_answer(self._parser.get_method().decode("latin-1"), self._request, False)

    def _start_answer(self, method: str, request: _Request, keep_alive: bool) -> None:
        path = request.url.split(b"?", 1)[0].decode("utf-8", "replace")
        last = self._last
        if method == "POST" and (last is None or last.done()):
            # A /run accepted or refused at once (the hot path): answered without a coroutine.
            answer = self._server.endpoints.answer_now(path, request.token_ok, _body(request))
            if answer is not None:
                self._last = None
                self._write_answer(answer, keep_alive)
                return
        self._owed += 1
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
        if self._owed >= self._limits.max_pipelined:
            self._update_reading()

    # answering

    async def _respond(
        self, previous: asyncio.Task[None] | None, method: str, path: str, request: _Request, keep_alive: bool
    ) -> None:
        try:
            endpoints = self._server.endpoints
            ops = endpoints.ops_for(method, path, request.token, request.authorization)
            if ops is not None:
                if previous is not None and not previous.done():
                    await previous
                self._write_ops(ops, keep_alive)
                return
            answer = await endpoints.handle(method, path, request.token_ok, _body(request))
            if previous is not None and not previous.done():
                await previous  # answers leave in request order
            self._write_answer(answer, keep_alive)
        finally:
            self._owed -= 1
            if self._read_paused:
                self._update_reading()

    def _write_answer(self, answer: bytes, keep_alive: bool) -> None:
        transport = self._transport
        if transport is None or self._closing:
            return
        if answer is _OK_BODY and keep_alive:
            transport.write(_OK_ANSWER)  # the common answer, built once
        else:
            head = _STATUS_LINE + str(len(answer)).encode()
            transport.write(head + (b"\r\n\r\n" if keep_alive else b"\r\nConnection: close\r\n\r\n") + answer)
        self._last_activity = self._loop.time()
        if not keep_alive:
            self._end(transport)

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
            self._end(transport)

    def _end(self, transport: asyncio.Transport) -> None:
        """Close after the last answer; with a request left unread, linger first."""
        self._closing = True
        if not self._refused:
            transport.close()
            return
        self._linger(transport)

    def _linger(self, transport: asyncio.Transport) -> None:
        """Close shortly after a refusal's answer: meanwhile what the client still sends is read
        and dropped (so that it reads the answer, not a reset) and the connection is out of the
        admission budgets (closing it early would lose the answer)."""
        self._server.admission.linger(self)
        if self._read_paused:
            transport.resume_reading()
        if transport.can_write_eof():
            transport.write_eof()
        self._loop.call_later(LINGER_S, transport.close)

    # flow control and timers

    def _update_reading(self) -> None:
        transport = self._transport
        if transport is None or self._closing or transport.is_closing():
            return
        want_paused = self._write_paused or self._owed >= self._limits.max_pipelined
        if want_paused == self._read_paused:
            return
        self._read_paused = want_paused
        if want_paused:
            transport.pause_reading()
            return
        transport.resume_reading()
        # The time spent paused was ours, not the client's: its read deadline starts again.
        now = self._loop.time()
        if self._head_started is not None:
            self._head_started = now
        if self._body_started is not None:
            self._body_started = now

    def _idle_timeout_s(self) -> float:
        if self._authenticated:
            return self._server.keep_alive_timeout_s
        return self._limits.unauthenticated_idle_timeout_s

    def _arm_idle_timer(self, delay_s: float | None = None) -> None:
        # One timer per idle period, not one per request: it re-arms itself while busy.
        timeout = self._idle_timeout_s()
        self._idle_timer = self._loop.call_later(timeout if delay_s is None else delay_s, self._check_idle)

    def _check_idle(self) -> None:
        if self._closing:
            return
        idle_for = self._loop.time() - self._last_activity
        busy = self._last is not None and not self._last.done()
        timeout = self._idle_timeout_s()
        if busy or idle_for < timeout:
            self._arm_idle_timer(None if busy else timeout - idle_for)
        else:
            self._abort(None)  # idle, or not taking its answers for that long

    def abort(self) -> None:
        self._abort(None)

    def _refuse(self, status: int) -> None:
        self._cancel_read_timer()
        transport = self._transport
        if self._refused or self._closing or transport is None:
            return
        self._refused = self._closing = True
        why = refusal_reason(status, self._limits, in_body=self._body_started is not None)
        log.warning("refused a request: %s", why)
        transport.write(error_answer(status, why))
        self._linger(transport)

    def _arm_read_timer(self, delay_s: float) -> None:
        self._read_timer = self._loop.call_later(delay_s, self._read_timed_out)

    def _cancel_read_timer(self) -> None:
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None

    def _read_deadline(self) -> float | None:
        if self._head_started is not None:
            return self._head_started + self._server.head_limits.head_timeout_s
        if self._body_started is not None:
            return self._body_started + self._limits.body_timeout_s
        return None  # between requests: the timer is armed again when the next one starts

    def _read_timed_out(self) -> None:
        self._read_timer = None
        deadline = self._read_deadline()
        if self._closing or deadline is None:
            return
        left = deadline - self._loop.time()
        if left > 0 or self._read_paused:
            # A later request than the one this timer was set for, or paused by us.
            self._arm_read_timer(left if left > 0 else self._limits.body_timeout_s)
            return
        if self._head_started is not None and self._meter.head_bytes == 0:
            self._abort(None)  # connected and never asked anything: nothing to answer
            return
        self._refuse(408)

    def _abort(self, final: bytes | None) -> None:
        self._closing = True
        if self._transport is not None:
            if final:
                self._transport.write(final)
            self._transport.close()


class ExecutorHttpServer:
    """Serves :class:`ExecutorEndpoints` over HTTP/1.1 on a bound socket."""

    def __init__(
        self,
        endpoints: ExecutorEndpoints,
        *,
        keep_alive_timeout_s: float = KEEP_ALIVE_TIMEOUT_S,
        head_limits: HeadLimits | None = None,
        limits: ServerLimits | None = None,
    ) -> None:
        self.endpoints = endpoints
        self.keep_alive_timeout_s = keep_alive_timeout_s
        self.head_limits = head_limits or HeadLimits()
        self.limits = limits or ServerLimits()
        self.connections: set[HttpConnection] = set()
        self.admission: Admission[HttpConnection] = Admission(
            self.limits.max_connections, self.limits.max_unauthenticated,
            self.limits.max_unauthenticated_per_address)
        self.in_flight: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None
        self._trim_timer: asyncio.TimerHandle | None = None
        self._evicted = 0  # since the last log line about it
        self._eviction_logged_at: float | None = None

    def admit(self, connection: HttpConnection, address: str) -> bool:
        """Whether a new connection is served; closes the ones that make room for it."""
        admitted, evicted = self.admission.admit(connection, address)
        if evicted is not None:
            self._close_for_room([evicted])
        if self.admission.needs_trim and self._trim_timer is None:
            self._trim_timer = asyncio.get_running_loop().call_later(TRIM_DELAY_S, self._trim)
        return admitted

    def _trim(self) -> None:
        self._trim_timer = None
        self._close_for_room(self.admission.trim())

    def _close_for_room(self, evicted: list[HttpConnection]) -> None:
        for old in evicted:
            old.abort()
        if not evicted:
            return
        self._evicted += len(evicted)
        now = asyncio.get_running_loop().time()
        if self._eviction_logged_at is None or now - self._eviction_logged_at >= EVICTION_LOG_INTERVAL_S:
            log.warning("closed %d connection(s) that had not presented the access token, to make "
                        "room for new ones (too many from one address or in total)", self._evicted)
            self._evicted, self._eviction_logged_at = 0, now

    async def start(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: HttpConnection(self), sock=sock, backlog=2048)

    async def stop(self, grace_s: float = 5.0) -> None:
        """Stop accepting, let answers in progress finish (up to grace_s), close connections."""
        if self._server is not None:
            self._server.close()
        if self._trim_timer is not None:
            self._trim_timer.cancel()
            self._trim_timer = None
        if self.in_flight:
            await asyncio.wait(set(self.in_flight), timeout=grace_s)
        for connection in list(self.connections):
            connection.abort()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None


def _body(request: _Request) -> bytes:
    chunks = request.chunks
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _peer_host(transport: asyncio.BaseTransport) -> str:
    peer = transport.get_extra_info("peername")
    return str(peer[0]) if isinstance(peer, tuple) and peer else ""
