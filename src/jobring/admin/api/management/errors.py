"""The management API's one error shape: ``{"error": "<message>", "field": "<name>"|null}``.

Every 4xx/5xx answer of ``/api/v1`` has this body, including FastAPI's request validation
errors (the first problem is reported, with the field's dotted location; ``errors`` lists
every problem of the request, so a form can mark all its fields at once). Errors a client
may want to say in its own words carry a ``code`` and its ``params`` (validation problems:
``invalid.<pydantic type>`` with the rule's limits; a refused login: ``auth.wrong_login``);
``error`` stays the English text (what the CLI prints). A 500 says only
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
from jobring.admin.store.errors import StoreError
from jobring.errors import (
    BadRequest,
    Conflict,
    Forbidden,
    Invalid,
    JobringError,
    NotFound,
    Refused,
    Unavailable,
)


class FieldProblem(BaseModel):
    field: str | None
    error: str
    code: str
    params: dict[str, str | int | float | bool] = Field(default_factory=dict)


class ErrorBody(BaseModel):
    error: str
    field: str | None = None
    error_id: str | None = Field(None, description="500 only: finds the details in the admin's log")
    code: str | None = Field(None, description="a stable name of the error, for clients that translate it")
    params: dict[str, str | int | float | bool] | None = Field(
        None, description="the values `code` refers to"
    )
    errors: list[FieldProblem] | None = Field(None, description="422 of a request body: every problem in it")


class ApiError(JobringError):
    """An answer other than success, with the status and the uniform body (the API's own
    answers: authentication, limits; services raise the :class:`~jobring.errors.Refused`
    kinds, answered by :func:`status_of`)."""

    def __init__(
        self, status: int, error: str, field: str | None = None, headers: dict[str, str] | None = None,
        *, code: str | None = None,
    ) -> None:
        super().__init__(error)
        self.status = status
        self.error = error
        self.field = field
        self.headers = headers
        self.code = code


# The answer to each kind of refusal; the first kind the error is wins (a MissingReference
# is a FieldError and a NotFound: 404).
_STATUS: tuple[tuple[type[Refused], int, str], ...] = (
    (NotFound, 404, "not found"),
    (Conflict, 409, "conflict"),
    (Forbidden, 403, "forbidden"),
    (Unavailable, 503, "unavailable"),
    (BadRequest, 400, "bad request"),
    (Invalid, 422, "invalid value"),
)


def status_of(exc: Refused) -> int:
    """The HTTP status that answers ``exc``."""
    return next((status for kind, status, _ in _STATUS if isinstance(exc, kind)), 400)


def _message(exc: Refused) -> str:
    return str(exc) or next((text for kind, _, text in _STATUS if isinstance(exc, kind)), "refused")


def bad_request(error: str, field: str | None = None) -> BadRequest:
    return BadRequest(error, field)


def forbidden(error: str) -> Forbidden:
    return Forbidden(error)


def not_found(what: str, ident: object) -> NotFound:
    return NotFound(f"{what} {ident} not found")


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
    status: int, error: str, field: str | None = None, headers: dict[str, str] | None = None,
    **more: Any,
) -> JSONResponse:
    """The error body; ``more`` (code, params, errors) only when given."""
    body: dict[str, Any] = {"error": error, "field": field}
    body.update({k: v for k, v in more.items() if v is not None})
    return JSONResponse(body, status_code=status, headers=headers)


def _location(loc: tuple[Any, ...] | list[Any]) -> str | None:
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header", "cookie")]
    return ".".join(parts) or (str(loc[0]) if loc else None)


async def _on_api_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return error_response(exc.status, exc.error, exc.field, exc.headers, code=exc.code)


# Checks shared with the XXL-JOB-compatible paths name a few fields by their column; this API's
# bodies name them differently, and an error must name the field the caller sent.
API_FIELD_NAMES = {"child_jobid": "child_job_ids"}


def api_field(field: str) -> str:
    """``field`` (dotted) as this API's bodies name it."""
    head, dot, rest = field.partition(".")
    return API_FIELD_NAMES.get(head, head) + dot + rest


async def _on_refused(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, Refused)
    message, sent = _message(exc), exc.field
    field = None if sent is None else api_field(sent)
    if sent is not None and field != sent and message.startswith(sent):
        message = f"{field}{message[len(sent):]}"
    return error_response(status_of(exc), message, field)


MAX_PROBLEMS = 50


def _params(ctx: object) -> dict[str, str | int | float | bool]:
    """A validation rule's limits (min_length, ge, pattern ...) as plain JSON values."""
    if not isinstance(ctx, dict):
        return {}
    return {str(k): v if isinstance(v, str | int | float | bool) else str(v) for k, v in ctx.items()}


def _problem(raw: Any) -> dict[str, Any]:
    field = _location(raw.get("loc", ()))
    field = api_field(field) if field else None
    message = str(raw.get("msg", "invalid value"))
    return {"field": field, "error": f"{field}: {message}" if field else message,
            "code": f"invalid.{raw.get('type', 'value')}", "params": _params(raw.get("ctx"))}


async def _on_validation(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    problems = list(exc.errors())
    if not problems:
        return error_response(422, "invalid request")
    first = problems[0]
    if first.get("type") == "json_invalid":
        return error_response(400, f"request body is not valid JSON: {first.get('msg', '')}", None)
    listed = [_problem(p) for p in problems[:MAX_PROBLEMS]]
    head = listed[0]
    return error_response(422, head["error"], head["field"], code=head["code"], params=head["params"],
                          errors=listed)


async def _on_http(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    return error_response(exc.status_code, str(exc.detail), None, dict(exc.headers or {}) or None)


async def _on_store(request: Request, exc: Exception) -> JSONResponse:
    if isinstance(exc, Refused):  # NotFound, Conflict, ReferencedError
        return await _on_refused(request, exc)
    return internal_error_response(exc, "store error not mapped to an answer")


async def _on_unexpected(request: Request, exc: Exception) -> JSONResponse:
    return internal_error_response(exc, f"answering {request.method} {request.url.path}")


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ApiError, _on_api_error)
    app.add_exception_handler(Refused, _on_refused)
    app.add_exception_handler(RequestValidationError, _on_validation)
    app.add_exception_handler(StarletteHTTPException, _on_http)
    app.add_exception_handler(StoreError, _on_store)
    app.add_exception_handler(Exception, _on_unexpected)
