"""The management API's one error shape: ``{"error": "<message>", "field": "<name>"|null}``.

Every 4xx/5xx answer of ``/api/v1`` has this body, including FastAPI's request validation
errors (the first problem is reported, with the field's dotted location). A 500 says only
``"internal error"`` and an ``error_id`` that finds the traceback in the admin's log: the
text of an unexpected error (a database error's SQL and parameters) never leaves the admin.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from jobring.admin.api.json_errors import internal_error_response
from jobring.admin.store.errors import Conflict, NotFound, ReferencedError, StoreError
from jobring.admin.validation import FieldError


class ErrorBody(BaseModel):
    error: str
    field: str | None = None
    error_id: str | None = Field(None, description="500 only: finds the details in the admin's log")


class ApiError(Exception):
    """An answer other than success, with the status and the uniform body."""

    def __init__(
        self, status: int, error: str, field: str | None = None, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(error)
        self.status = status
        self.error = error
        self.field = field
        self.headers = headers


def bad_request(error: str, field: str | None = None) -> ApiError:
    return ApiError(400, error, field)


def forbidden(error: str) -> ApiError:
    return ApiError(403, error)


def not_found(what: str, ident: object) -> ApiError:
    return ApiError(404, f"{what} {ident} not found")


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody, "description": text}
    for code, text in (
        (400, "Bad request"),
        (401, "Not authenticated"),
        (403, "Not permitted"),
        (404, "Not found"),
        (409, "Conflict"),
        (413, "Request body too large"),
        (422, "Invalid field"),
        (429, "Too many attempts"),
        (500, "Internal error (the error_id finds it in the admin's log)"),
    )
}


def error_response(
    status: int, error: str, field: str | None = None, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse({"error": error, "field": field}, status_code=status, headers=headers)


def _location(loc: tuple[Any, ...] | list[Any]) -> str | None:
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header", "cookie")]
    return ".".join(parts) or (str(loc[0]) if loc else None)


async def _on_api_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return error_response(exc.status, exc.error, exc.field, exc.headers)


# Checks shared with the XXL-JOB-compatible paths name a few fields by their column; this API's
# bodies name them differently, and an error must name the field the caller sent.
API_FIELD_NAMES = {"child_jobid": "child_job_ids"}


def api_field(field: str) -> str:
    """``field`` (dotted) as this API's bodies name it."""
    head, dot, rest = field.partition(".")
    return API_FIELD_NAMES.get(head, head) + dot + rest


async def _on_field_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, FieldError)
    field = api_field(exc.field)
    message = str(exc)
    if field != exc.field and message.startswith(exc.field):
        message = field + message[len(exc.field):]
    return error_response(exc.status, message, field)


async def _on_validation(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    problems = list(exc.errors())
    if not problems:
        return error_response(422, "invalid request")
    first = problems[0]
    field = _location(first.get("loc", ()))
    message = str(first.get("msg", "invalid value"))
    if first.get("type") == "json_invalid":
        return error_response(400, f"request body is not valid JSON: {message}", None)
    text = f"{field}: {message}" if field else message
    return error_response(422, text, field)


async def _on_http(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    return error_response(exc.status_code, str(exc.detail), None, dict(exc.headers or {}) or None)


async def _on_store(_request: Request, exc: Exception) -> JSONResponse:
    if isinstance(exc, NotFound):
        return error_response(404, str(exc) or "not found")
    if isinstance(exc, Conflict | ReferencedError):
        return error_response(409, str(exc) or "conflict")
    return internal_error_response(exc, "store error not mapped to an answer")


async def _on_unexpected(request: Request, exc: Exception) -> JSONResponse:
    return internal_error_response(exc, f"answering {request.method} {request.url.path}")


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ApiError, _on_api_error)
    app.add_exception_handler(FieldError, _on_field_error)
    app.add_exception_handler(RequestValidationError, _on_validation)
    app.add_exception_handler(StarletteHTTPException, _on_http)
    app.add_exception_handler(StoreError, _on_store)
    app.add_exception_handler(Exception, _on_unexpected)
