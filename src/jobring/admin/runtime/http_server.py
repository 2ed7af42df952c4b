"""uvicorn's httptools protocol with limits on the request head, for the admin node.

uvicorn buffers a request line and headers of any size (httptools keeps a header value in
memory until it ends). This protocol feeds the parser through :func:`feed_head`: a request
line over the limit is answered 414, headers over the limit 431, a head that does not
arrive within the deadline (a client trickling bytes) 408. After such an answer the rest of
what the client sends is read and dropped for a moment (a lingering close), so that the
client reads the answer instead of a connection reset.
uvicorn's own early answers (400 for an unparsable request) carry the JSON error body and the
security headers as well.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from jobring.errors import JobringError
from jobring.protocol.edge import (
    HEAD_REFUSALS,
    LINGER_S,
    HeadLimits,
    HeadMeter,
    closing_answer,
    feed_head,
)


def error_answer(status: int, error: str) -> bytes:
    """A complete HTTP/1.1 answer with the API's JSON error body, closing the connection."""
    return closing_answer(status, b"application/json", orjson.dumps({"error": error, "field": None}))


class _HeadRefused(JobringError):
    """Raised from a parser callback to stop parsing a refused request."""


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """HttpToolsProtocol refusing oversized or slow request heads (see the module doc)."""

    limits = HeadLimits()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._meter = HeadMeter(self.limits)
        self._head_timer: asyncio.TimerHandle | None = None
        self._refused = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        # Also bounds a connection that never sends a byte (uvicorn arms no timer before
        # the first request).
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return  # lingering after a refusal: drop what the client still sends
        if self._meter.in_head and self._head_timer is None:
            self._arm_head_timer()
        verdict = feed_head(self._meter, data, self._feed)
        if verdict is not None:
            self._refuse(verdict)

    def _feed(self, data: bytes) -> None:
        if self.parser is None or self.transport.is_closing() or self._refused:
            return
        super().data_received(data)

    def on_url(self, url: bytes) -> None:
        self._meter.url(url)
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._meter.header(name, value)
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        verdict = self._meter.headers_done()
        self._cancel_head_timer()
        if verdict is not None:
            self._refuse(verdict)
            raise _HeadRefused  # the parser stops; uvicorn's 400 answer is skipped (refused)
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._meter.message_done()

    def send_400_response(self, msg: str) -> None:
        # Also called (after uvicorn logged "Invalid HTTP request") when a callback refused the head.
        self._cancel_head_timer()
        if self._refused or self.transport.is_closing():
            return
        self.transport.write(error_answer(400, msg))
        self.transport.close()

    def _refuse(self, status: int) -> None:
        self._cancel_head_timer()
        if self._refused or self.transport.is_closing():
            return
        self._refused = True
        self._unset_keepalive_if_required()
        self.logger.warning("refused a request head from %s: %s", self.client, HEAD_REFUSALS[status])
        self.transport.write(error_answer(status, HEAD_REFUSALS[status]))
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER_S, self.transport.close)

    def _arm_head_timer(self) -> None:
        self._head_timer = self.loop.call_later(self.limits.head_timeout_s, self._head_timed_out)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing() or not self._meter.in_head:
            return
        if self._meter.head_bytes == 0:
            self.transport.close()  # nothing was asked: nothing to answer
            return
        self._refuse(408)


def guarded_protocol(limits: HeadLimits) -> type[GuardedHttpToolsProtocol]:
    """The protocol class to give ``uvicorn.Config(http=...)`` for these limits."""
    return type("AdminHttpProtocol", (GuardedHttpToolsProtocol,), {"limits": limits})
