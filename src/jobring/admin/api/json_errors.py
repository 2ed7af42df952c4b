"""Error answers of the admin outside the management API (unknown paths, wrong methods,
unexpected failures) in the same JSON body: ``{"error": "<message>", "field": null}``.

Starlette would answer these as text/plain; pass ``JSON_ERROR_HANDLERS`` as a Starlette
app's ``exception_handlers``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

log = logging.getLogger(__name__)


def json_error(status: int, error: str, headers: Mapping[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": error, "field": None}, status_code=status, headers=headers)


async def _on_http_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return json_error(exc.status_code, str(exc.detail), exc.headers)


async def _on_server_error(request: Request, exc: Exception) -> Response:
    # Starlette logs the exception after this answer (it re-raises to the server).
    log.error("unhandled error answering %s %s: %r", request.method, request.url.path, exc)
    return json_error(500, "internal server error")


async def not_found(request: Request) -> Response:
    """An endpoint answering 404 in the JSON error body (e.g. a path no route may own)."""
    return json_error(404, f"no such path: {request.url.path}")


JSON_ERROR_HANDLERS: Mapping[Any, Callable[[Request, Exception], Awaitable[Response]]] = {
    HTTPException: _on_http_error,
    Exception: _on_server_error,
}
