"""What every HTTP answer of the admin and the executor shares at the edge, before routing:
security headers on every answer (``no-store`` on the admin's API answers), and limits on the
request head (line and headers).

``SecurityHeaders`` is a pure ASGI middleware. ``HeadMeter`` and ``feed_head`` are used by the
two HTTP servers (uvicorn's httptools protocol for the admin, the executor's own protocol):
bytes are handed to the parser in slices, so a request line over ``max_request_line`` is
answered 414 and a header section over ``max_header_bytes`` 431 after at most that many bytes
were buffered (the parser callbacks report a complete head through ``HeadMeter.headers_done``,
which gives the same verdict); a head not complete within ``head_timeout_s`` is answered 408.
Both servers refuse such a request with :func:`closing_answer` and read what the client still
sends for ``LINGER_S`` before closing. The ASGI type aliases are defined here once for both.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# The web console (served at /) and the API docs load scripts and styles from the admin only.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; "
    "frame-ancestors 'none'; form-action 'self'"
)
SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-opener-policy", b"same-origin"),
)
# The same headers as raw HTTP/1.1 lines, for servers that write their answers themselves.
SECURITY_HEADER_LINES = b"".join(name + b": " + value + b"\r\n" for name, value in SECURITY_HEADERS)

# After refusing a request, what the client still sends is read and dropped this long, so
# that it reads the answer rather than a connection reset (both servers).
LINGER_S = 2.0
REASONS = {400: b"Bad Request", 408: b"Request Timeout", 413: b"Content Too Large", 414: b"URI Too Long",
           431: b"Request Header Fields Too Large", 503: b"Service Unavailable"}


def closing_answer(status: int, content_type: bytes, body: bytes) -> bytes:
    """A complete HTTP/1.1 answer with the security headers that closes the connection: how
    both servers refuse a request before it reaches the application."""
    return b"".join((
        b"HTTP/1.1 %d %s\r\n" % (status, REASONS.get(status, b"Error")),
        b"Content-Type: %s\r\n" % content_type,
        SECURITY_HEADER_LINES,
        b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body),
        body,
    ))


class SecurityHeaders:
    """Adds :data:`SECURITY_HEADERS` to every HTTP answer; a header the app set itself is kept."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ()))
                present = {bytes(name).lower() for name, _ in headers}
                headers.extend((name, value) for name, value in SECURITY_HEADERS if name not in present)
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, send_with_headers)


class NoStore:
    """Adds ``Cache-Control: no-store`` to every HTTP answer under ``prefix`` (all with ""):
    answers that may carry secrets or session data are kept by no cache, errors included."""

    def __init__(self, app: ASGIApp, prefix: str = "") -> None:
        self.app = app
        self.prefix = prefix.rstrip("/")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope.get("path", "")
        if scope["type"] != "http" or (self.prefix and path != self.prefix
                                       and not path.startswith(self.prefix + "/")):
            await self.app(scope, receive, send)
            return

        async def send_with_header(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [(name, value) for name, value in message.get("headers", ())
                           if bytes(name).lower() != b"cache-control"]
                headers.append((b"cache-control", b"no-store"))
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, send_with_header)


@dataclass(frozen=True, slots=True)
class HeadLimits:
    """Limits on a request head; the defaults suit both servers."""

    max_request_line: int = 8 * 1024
    max_header_bytes: int = 64 * 1024
    head_timeout_s: float = 10.0


HEAD_REFUSALS = {
    408: "request head not received in time",
    414: "request line too long",
    431: "request header fields too large",
}


class HeadMeter:
    """Counts the bytes of the request head being received (one per connection).

    The parser's callbacks tell it where a head starts and ends (``url``, ``headers_done``,
    ``message_done``); ``feed_head`` counts the bytes given to the parser meanwhile.
    """

    __slots__ = ("limits", "in_head", "head_bytes", "url_bytes", "header_bytes")

    def __init__(self, limits: HeadLimits) -> None:
        self.limits = limits
        self.in_head = True
        self.head_bytes = 0
        self.url_bytes = 0
        self.header_bytes = 0

    def url(self, part: bytes) -> None:
        self.url_bytes += len(part)

    def header(self, name: bytes, value: bytes) -> None:
        self.header_bytes += len(name) + len(value) + 4  # ": " and CRLF

    def headers_done(self) -> int | None:
        """The head is complete: 414 or 431 when it is past a limit, else None."""
        self.in_head = False
        if self.url_bytes > self.limits.max_request_line:
            return 414
        if self.header_bytes > self.limits.max_header_bytes:
            return 431
        return None

    def message_done(self) -> None:
        # What follows on the connection is the next request's head.
        self.in_head = True
        self.head_bytes = 0
        self.url_bytes = 0
        self.header_bytes = 0

    def room(self) -> int:
        """How many more bytes the parser may get before the verdict is certain."""
        return self.limits.max_request_line + self.limits.max_header_bytes + 1 - self.head_bytes

    def verdict(self) -> int | None:
        """414 or 431 when the head still being received is past a limit, else None."""
        if not self.in_head:
            return None
        if self.url_bytes > self.limits.max_request_line:
            return 414
        if self.head_bytes - self.url_bytes > self.limits.max_header_bytes:
            return 431
        return None


def feed_head(meter: HeadMeter, data: bytes, feed: Callable[[bytes], None]) -> int | None:
    """Give ``data`` to the parser (``feed``) without letting a head grow past the limits.

    Returns 414/431 as soon as a limit is passed (the rest of ``data`` is not parsed), else None.
    Bytes of a pipelined request that starts inside one slice are not counted: at most one
    network read (tens of KiB) past the limit, never an unbounded amount.
    """
    while data:
        if not meter.in_head:
            feed(data)
            return meter.verdict()
        room = max(meter.room(), 1)
        part, data = (data, b"") if len(data) <= room else (data[:room], data[room:])
        meter.head_bytes += len(part)
        feed(part)
        verdict = meter.verdict()
        if verdict is not None:
            return verdict
    return None
