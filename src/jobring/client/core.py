"""What both clients share: building requests from calls, reading answers, auth state."""

from __future__ import annotations

import json
from typing import Any, TypeVar
from urllib.parse import quote

import httpx

from jobring.client.call import Call, SessionEffect
from jobring.client.errors import AdminApiError, AdminConnectionError

T = TypeVar("T")

DEFAULT_URL = "http://127.0.0.1:8080"
DEFAULT_API_PREFIX = "/api/v1"
CSRF_HEADER = "X-CSRF-Token"
CSRF_COOKIE = "jobring_csrf"
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def path_part(value: str | int) -> str:
    """``value`` quoted for use as one segment of a URL path."""
    return quote(str(value), safe="")


def _query_value(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return [_query_value(item) for item in value]
    return value


def _error_from_body(status: int, body: Any, text: str) -> AdminApiError:
    """The server's own message. The management API always answers errors with
    ``{"error": message, "field": name|null}``; anything else (a proxy's page, say) is
    reported by its text."""
    if isinstance(body, dict):
        message = body.get("error")
        if message is None and isinstance(body.get("detail"), str):
            message = body["detail"]  # a bare Starlette/FastAPI answer
        if message is not None:
            field = body.get("field")
            return AdminApiError(status, str(message), str(field) if field is not None else None)
    reason = text.strip() or httpx.codes.get_reason_phrase(status) or "error"
    return AdminApiError(status, reason[:500])


class ClientCore:
    """Request building and answer reading, free of I/O; both clients delegate to it."""

    def __init__(self, url: str, token: str | None, api_prefix: str = DEFAULT_API_PREFIX) -> None:
        self.url = url.rstrip("/")
        prefix = api_prefix.strip("/")
        self.api_root = f"{self.url}/{prefix}" if prefix else self.url
        self.token = token
        self.csrf_token: str | None = None

    def request_args(self, call: Call[Any], cookies: httpx.Cookies) -> dict[str, Any]:
        """Keyword arguments for ``httpx.Client.build_request`` / ``AsyncClient.build_request``."""
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        elif call.method not in _SAFE_METHODS:
            csrf = self.csrf_token or cookies.get(CSRF_COOKIE)
            if csrf:
                headers[CSRF_HEADER] = csrf
        args: dict[str, Any] = {"method": call.method, "url": self.api_root + call.path, "headers": headers}
        if call.params:
            params = {k: _query_value(v) for k, v in call.params.items() if v is not None}
            if params:
                args["params"] = params
        if call.body is not None:
            args["json"] = call.body
        return args

    def connection_error(self, exc: httpx.TransportError) -> AdminConnectionError:
        reason = str(exc) or type(exc).__name__
        return AdminConnectionError(self.url, reason)

    def read(self, call: Call[T], response: httpx.Response) -> T:
        """The call's result from ``response``; raises :class:`AdminApiError` for errors."""
        body = self._json(response)
        if response.status_code >= 400:
            raise _error_from_body(response.status_code, body, response.text)
        if call.effect is SessionEffect.LOGIN:
            self.csrf_token = self._csrf_from(body, response)
        elif call.effect is SessionEffect.LOGOUT:
            self.csrf_token = None
        try:
            return call.decode(body)
        except (TypeError, KeyError, ValueError) as exc:
            raise AdminApiError(
                response.status_code, f"unexpected answer to {call.method} {call.path}: {exc}"
            ) from exc

    @staticmethod
    def _json(response: httpx.Response) -> Any:
        if not response.content:
            return None
        if "json" not in response.headers.get("content-type", ""):
            if response.status_code >= 400:
                return None
            kind = response.headers.get("content-type", "no content type")
            raise AdminApiError(response.status_code, f"expected JSON from the admin, got {kind}")
        try:
            return response.json()
        except json.JSONDecodeError as exc:
            raise AdminApiError(response.status_code, f"malformed JSON from the admin: {exc}") from exc

    @staticmethod
    def _csrf_from(body: Any, response: httpx.Response) -> str | None:
        if isinstance(body, dict):
            for key in ("csrf_token", "csrfToken", "csrf"):
                if isinstance(body.get(key), str):
                    return str(body[key])
        header: str | None = response.headers.get(CSRF_HEADER)
        if header:
            return header
        cookie: str | None = response.cookies.get(CSRF_COOKIE)
        return cookie
