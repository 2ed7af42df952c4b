"""The admin endpoints executors call: ``api/registry``, ``api/registryRemove``, ``api/callback``.

Byte-compatible with XXL-JOB 2.x (JobApiController): any path ``api/<uri>``, POST only,
the access token checked in ``XXL-JOB-ACCESS-TOKEN``, answers as ReturnT JSON with HTTP
200. Mount ``executor_api_routes(...)`` (or the app from ``executor_api_app(...)``) at
``/`` and at the configured base path (e.g. ``/xxl-job-admin``).
"""

from __future__ import annotations

import hmac
import logging
import unicodedata
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from jobring.admin.api.json_errors import JSON_ERROR_HANDLERS
from jobring.admin.store.groups import EXECUTOR
from jobring.protocol.models import (
    ACCESS_TOKEN_HEADER,
    MSG_METHOD_NOT_SUPPORTED,
    MSG_TOKEN_WRONG,
    HandleCallbackParam,
    ProtocolError,
    RegistryParam,
    ReturnT,
    msg_uri_not_found,
)

if TYPE_CHECKING:
    from jobring.admin.scheduler.callbacks import CallbackService
    from jobring.admin.scheduler.monitors import RegistryService

log = logging.getLogger(__name__)

MSG_ILLEGAL_ARGUMENT = "Illegal Argument."
# A callback batch of thousands of results is a few MB; anything far larger is refused.
MAX_BODY_BYTES = 16 * 1024 * 1024
# Column sizes of xxl_job_registry (registry_group, registry_key, registry_value).
_REGISTRY_LIMITS = (50, 255, 255)
_ALL_METHODS = ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]


def _answer(result: ReturnT, status: int = 200) -> Response:
    return Response(result.encode(), status_code=status, media_type="application/json")


def _token_ok(expected: str | None, given: str | None) -> bool:
    if not expected:
        return True
    return given is not None and hmac.compare_digest(expected.encode(), given.encode())


class ExecutorApi:
    """The handler behind the routes; holds the services and the token."""

    def __init__(
        self, registry: RegistryService, callbacks: CallbackService, access_token: str | None
    ) -> None:
        self._registry = registry
        self._callbacks = callbacks
        self._token = access_token

    async def endpoint(self, request: Request) -> Response:
        uri: str = request.path_params.get("uri", "")
        if request.method != "POST":
            return _answer(ReturnT.fail(MSG_METHOD_NOT_SUPPORTED))
        if not uri.strip():
            return _answer(ReturnT.fail("invalid request, uri-mapping empty."))
        if not _token_ok(self._token, request.headers.get(ACCESS_TOKEN_HEADER)):
            return _answer(ReturnT.fail(MSG_TOKEN_WRONG))
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
            return _answer(ReturnT.fail(f"request body larger than {MAX_BODY_BYTES} bytes"), status=413)
        body = await request.body()
        if len(body) > MAX_BODY_BYTES:
            return _answer(ReturnT.fail(f"request body larger than {MAX_BODY_BYTES} bytes"), status=413)
        try:
            if uri == "callback":
                return _answer(await self._callback(body))
            if uri == "registry":
                return _answer(await self._registry_call(body, remove=False))
            if uri == "registryRemove":
                return _answer(await self._registry_call(body, remove=True))
        except ProtocolError as exc:
            return _answer(ReturnT.fail(f"request error: {exc}"), status=400)
        except Exception as exc:  # the executor keeps what it sent and retries later
            log.exception("executor api %s failed", uri)
            return _answer(ReturnT.fail(f"admin error: {type(exc).__name__}: {exc}"), status=500)
        return _answer(ReturnT.fail(msg_uri_not_found(uri)))

    async def _callback(self, body: bytes) -> ReturnT:
        items = HandleCallbackParam.decode_batch(body)
        await self._callbacks.handle(items)
        return ReturnT.success()

    async def _registry_call(self, body: bytes, *, remove: bool) -> ReturnT:
        try:
            param = RegistryParam.decode(body)
        except ProtocolError as exc:
            if str(exc) == MSG_ILLEGAL_ARGUMENT:
                return ReturnT.fail(MSG_ILLEGAL_ARGUMENT)
            raise
        if not _registry_ok(param):
            return ReturnT.fail(MSG_ILLEGAL_ARGUMENT)
        if remove:
            await self._registry.remove(param)
        else:
            await self._registry.register(param)
        return ReturnT.success()


def _clean_token(value: str) -> bool:
    """Non-empty, and no whitespace or control/format character anywhere (an appname and an
    address are single tokens; a space or a newline in one is an attack or a mistake)."""
    return bool(value) and not any(c.isspace() or unicodedata.category(c)[0] == "C" for c in value)


def _registry_ok(param: RegistryParam) -> bool:
    values = (param.registry_group, param.registry_key, param.registry_value)
    if not all(_clean_token(v) for v in values):
        return False
    if any(len(v) > limit for v, limit in zip(values, _REGISTRY_LIMITS, strict=True)):
        return False
    if param.registry_group == EXECUTOR:
        # The admin will POST to this address: it must be an http(s) URL with a host.
        try:
            url = urlsplit(param.registry_value)
            host = url.hostname
        except ValueError:
            return False
        return url.scheme in ("http", "https") and bool(host)
    return True


def executor_api_routes(
    registry: RegistryService, callbacks: CallbackService, access_token: str | None
) -> list[BaseRoute]:
    """Routes serving ``/api/<uri>``; include them at ``/`` and under the base path."""
    api = ExecutorApi(registry, callbacks, access_token)
    return [
        Route("/api/{uri:path}", api.endpoint, methods=_ALL_METHODS),
        Route("/api", api.endpoint, methods=_ALL_METHODS),
    ]


def executor_api_app(
    registry: RegistryService, callbacks: CallbackService, access_token: str | None
) -> Starlette:
    """A standalone ASGI app with the executor-facing routes (tests, small deployments)."""
    return Starlette(
        routes=executor_api_routes(registry, callbacks, access_token),
        exception_handlers=dict(JSON_ERROR_HANDLERS),
    )
