"""Error answers of the admin outside the management API (unknown paths, wrong methods,
unexpected failures) in the same JSON body: ``{"error": "<message>", "field": null}``.

Starlette would answer these as text/plain; pass ``JSON_ERROR_HANDLERS`` as a Starlette
app's ``exception_handlers``. An unexpected failure is answered ``{"error": "internal
error", "field": null, "error_id": "<id>"}`` and never with its own text (a database error
carries the SQL statement and its parameters): the id finds the traceback in the admin's log.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from jobring.admin.store.errors import public_reason

log = logging.getLogger(__name__)


INTERNAL_ERROR = "internal error"


def json_error(status: int, error: str, headers: Mapping[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": error, "field": None}, status_code=status, headers=headers)


def report_internal_error(exc: BaseException, what: str) -> str:
    """Log ``exc`` with its traceback under a new error id (``what``: where it happened);
    returns the id, the only thing an answer says about the error."""
    error_id = secrets.token_hex(6)
    log.error("internal error %s %s: %r", error_id, what, exc, exc_info=exc)
    return error_id


def internal_failure_message(exc: BaseException, what: str) -> str:
    """The ``msg`` of an XXL-JOB style answer (``{"code": 500, "msg": ...}``) to an unexpected
    failure: its kind and an error id, never its text; ``exc`` is logged under the id."""
    error_id = report_internal_error(exc, what)
    return f"admin error: {public_reason(exc)} (error id {error_id} in the admin's log)"


class InternalErrors:
    """ASGI middleware: an unexpected failure is answered here with the generic 500 (and
    logged under its error id) instead of being raised on to the server, which would close
    the client's keep-alive connection after the answer (its next request then fails). Put it
    inside Starlette's ServerErrorMiddleware, i.e. as the outermost ``Middleware``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except Exception as exc:
            if started:
                raise  # part of an answer went out: nothing better than closing the connection
            what = f"answering {scope.get('method')} {scope.get('path')}"
            await internal_error_response(exc, what)(scope, receive, send)


def internal_error_response(exc: BaseException, what: str) -> JSONResponse:
    """500 ``{"error": "internal error", "field": null, "error_id": ...}``; ``exc`` is logged."""
    error_id = report_internal_error(exc, what)
    return JSONResponse({"error": INTERNAL_ERROR, "field": None, "error_id": error_id}, status_code=500)


async def _on_http_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return json_error(exc.status_code, str(exc.detail), exc.headers)


async def _on_server_error(request: Request, exc: Exception) -> Response:
    return internal_error_response(exc, f"answering {request.method} {request.url.path}")


async def not_found(request: Request) -> Response:
    """An endpoint answering 404 in the JSON error body (e.g. a path no route may own)."""
    return json_error(404, f"no such path: {request.url.path}")


JSON_ERROR_HANDLERS: Mapping[Any, Callable[[Request, Exception], Awaitable[Response]]] = {
    HTTPException: _on_http_error,
    Exception: _on_server_error,
}
