"""The admin endpoints executors call: ``api/registry``, ``api/registryRemove``, ``api/callback``
(and ``api/pull``, the poll of jobring pull executors: :mod:`jobring.admin.api.pull_api`).

Byte-compatible with XXL-JOB 2.x (JobApiController): any path ``api/<uri>``, POST only,
the access token checked in ``XXL-JOB-ACCESS-TOKEN``, answers as ReturnT JSON with HTTP
200. XXL-JOB 3.x executors are served too: 3.5 callbacks (``{"callbackList": [...]}``,
``logDateTime``) and the ``XXL-JOB-APPNAME`` header (checked against the token's groups;
a registration carrying it marks the address as a 3.5 executor).
Mount ``executor_api_routes(...)`` (or the app from ``executor_api_app(...)``) at
``/`` and at the configured base path (e.g. ``/xxl-job-admin``).

The token is an executor group's own token or the global one (opt-in, see
:mod:`jobring.admin.services.executor_tokens`): a group token registers only under its group's
appname and reports only results of its group's runs (the token's groups are a condition
of the result's write itself; a result for an unknown run is refused, never kept). What a
beat teaches the admin (an address left, the executor speaks 3.5, it restarted) is kept
per (appname, address). Registered addresses must pass the same address policy as manual
ones (:mod:`jobring.core.addresses`) and are stored in its canonical form. A callback
request carries at most ``MAX_CALLBACK_ITEMS`` results.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
import logging
import time
import unicodedata
from typing import TYPE_CHECKING, Protocol

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from jobring.admin.api.distributed_api import DistributedApi
from jobring.admin.api.json_errors import JSON_ERROR_HANDLERS, internal_failure_message
from jobring.admin.api.pull_api import PullApi
from jobring.admin.api.refusals import RefusalBudget
from jobring.admin.services.executor_tokens import TokenScope
from jobring.admin.store.groups import EXECUTOR
from jobring.admin.store.records import ResultOutcome
from jobring.core.addresses import AddressPolicy, AddressRefused, check_executor_address
from jobring.protocol.models import (
    ACCESS_TOKEN_HEADER,
    APPNAME_HEADER,
    MSG_METHOD_NOT_SUPPORTED,
    MSG_TOKEN_WRONG,
    STARTED_AT_HEADER,
    HandleCallbackParam,
    ProtocolError,
    RegistryParam,
    ReturnT,
    TooManyItems,
    msg_uri_not_found,
)

if TYPE_CHECKING:
    from jobring.admin.dispatch.pull import PullHub
    from jobring.admin.distributed.service import DistributedService
    from jobring.admin.monitors.monitors import RegistryService
    from jobring.admin.services.callbacks import CallbackService

log = logging.getLogger(__name__)

MSG_ILLEGAL_ARGUMENT = "Illegal Argument."
MSG_APP_TOKEN_INVALID = "invalid request, accessToken or appname invalid."
# A callback batch of thousands of results is a few MB; anything far larger is refused.
MAX_BODY_BYTES = 16 * 1024 * 1024
# Items per callback request: XXL-JOB executors (and jobring's) send at most 1,000.
MAX_CALLBACK_ITEMS = 1_000
CALLBACK_REQUESTS_AT_ONCE = 2  # per admin node; more wait (their bodies are already read)
DECODE_STEP = 200  # callback items decoded per event-loop step
# Column sizes of xxl_job_registry (registry_group, registry_key, registry_value).
_REGISTRY_LIMITS = (50, 255, 255)
_ALL_METHODS = ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]


def _answer(result: ReturnT, status: int = 200) -> Response:
    return Response(result.encode(), status_code=status, media_type="application/json")


class TokenChecker(Protocol):
    """Resolves a presented token (``ExecutorTokens`` in the admin)."""

    async def scope(self, given: str | None) -> TokenScope | None: ...


class GlobalToken:
    """A checker that knows only one token, valid for every group (tests, small set-ups)."""

    def __init__(self, token: str) -> None:
        self._token = token

    async def scope(self, given: str | None) -> TokenScope | None:
        if given and hmac.compare_digest(self._token.encode(), given.encode()):
            return TokenScope(True, frozenset(), frozenset())
        return None


class ExecutorApi:
    """The handler behind the routes; holds the services and the token checker."""

    def __init__(
        self, registry: RegistryService, callbacks: CallbackService, tokens: TokenChecker | str,
        policy: AddressPolicy | None = None, refusals: RefusalBudget | None = None,
        pull: PullHub | None = None, distributed: DistributedApi | None = None,
    ) -> None:
        self._pull = PullApi(pull) if pull is not None else None
        self._distributed = distributed
        self._registry = registry
        self._callbacks = callbacks
        self._tokens: TokenChecker = GlobalToken(tokens) if isinstance(tokens, str) else tokens
        self._policy = policy or AddressPolicy()
        self._callback_gate = asyncio.Semaphore(CALLBACK_REQUESTS_AT_ONCE)
        self._refusals = refusals or RefusalBudget(lambda: time.monotonic_ns() // 1_000_000)

    async def endpoint(self, request: Request) -> Response:
        uri: str = request.path_params.get("uri", "")
        try:
            return await self._answer_call(request, uri)
        except Exception as exc:  # the executor keeps what it sent and retries later
            # Never the error's text (a database error's SQL and parameters): its kind and an id.
            message = internal_failure_message(exc, f"executor api {uri[:64]}")
            return _answer(ReturnT.fail(message), status=500)

    async def _answer_call(self, request: Request, uri: str) -> Response:
        if request.method != "POST":
            return _answer(ReturnT.fail(MSG_METHOD_NOT_SUPPORTED))
        if not uri.strip():
            return _answer(ReturnT.fail("invalid request, uri-mapping empty."))
        scope = await self._tokens.scope(request.headers.get(ACCESS_TOKEN_HEADER))
        if scope is None:
            return _answer(ReturnT.fail(MSG_TOKEN_WRONG))
        # XXL-JOB 3.5 executors name their app next to the token: the token must be one that
        # app's group may use (as 3.5 checks the group's own token with the app name).
        app_header = request.headers.get(APPNAME_HEADER)
        if app_header is not None and not scope.allows_app(app_header):
            log.warning("executor api refused: the token is not valid for appname %r", app_header[:64])
            return _answer(ReturnT.fail(MSG_APP_TOKEN_INVALID))
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
            return _answer(ReturnT.fail(f"request body larger than {MAX_BODY_BYTES} bytes"), status=413)
        if uri == "callback" and (wait_s := self._refusals.retry_after_s(scope)):
            # Answered before the body is read: a flood of batches for unknown runs costs
            # the admin almost nothing once its token is in debt (see admin/api/refusals.py).
            response = _answer(ReturnT.fail(f"too many results for unknown runs from this access token; "
                                            f"send again in {wait_s} s"), status=429)
            response.headers["Retry-After"] = str(wait_s)
            return response
        body = await request.body()
        if len(body) > MAX_BODY_BYTES:
            return _answer(ReturnT.fail(f"request body larger than {MAX_BODY_BYTES} bytes"), status=413)
        try:
            if uri == "callback":
                return await self._callback(body, scope)
            if uri == "registry":
                started = request.headers.get(STARTED_AT_HEADER, "")
                started_at = int(started) if started.isdigit() and len(started) <= 15 else None
                return _answer(await self._registry_call(body, scope, remove=False, started_at_ms=started_at,
                                                         app_header=app_header))
            if uri == "registryRemove":
                return _answer(await self._registry_call(body, scope, remove=True))
            if uri == "pull" and self._pull is not None:
                return _answer(*await self._pull.poll(body, scope, app_header, request.receive))
        except ProtocolError as exc:
            return _answer(ReturnT.fail(f"request error: {exc}"), status=400)
        return await self._jobring_call(uri, body, scope)

    async def _jobring_call(self, uri: str, body: bytes, scope: TokenScope) -> Response:
        """``api/jobring/...`` (distributed runs), or the reference's "uri not found"."""
        if uri.startswith("jobring/") and self._distributed is not None:
            return _answer(await self._distributed.call(uri, body, scope))
        return _answer(ReturnT.fail(msg_uri_not_found(uri)))

    async def _callback(self, body: bytes, scope: TokenScope) -> Response:
        # At most CALLBACK_REQUESTS_AT_ONCE batches are worked on at a time, each decoded a
        # part per event-loop step: however many arrive, a fire due now waits for a few short
        # steps only.
        async with self._callback_gate:
            try:
                objects = HandleCallbackParam.batch_objects(body, MAX_CALLBACK_ITEMS)
            except TooManyItems as exc:
                log.warning("callback refused: %d items in one request (at most %d)", exc.count, exc.limit)
                return _answer(ReturnT.fail(str(exc)), status=413)
            items: list[HandleCallbackParam] = []
            for start in range(0, len(objects), DECODE_STEP):
                if start:
                    await asyncio.sleep(0)
                items += [HandleCallbackParam.decode(o) for o in objects[start:start + DECODE_STEP]]
            # The token's groups are a condition of the write itself (a run inserted while
            # the batch is handled cannot be written by another group's token).
            outcomes = await self._callbacks.handle(items, scope.guard())
        refused = sorted({i.log_id for i, o in zip(items, outcomes, strict=True)
                          if o is ResultOutcome.NOT_FOUND})
        self._refusals.charge(scope, len(refused))
        if refused:
            # Not kept for later either: a run that does not exist now is never reported by
            # this batch. HTTP 400: sending the same items again cannot succeed (an executor
            # re-sends the others alone and drops these).
            log.warning("callback: runs %s refused: unknown, or not runs the token may report", refused[:10])
            shown = ", ".join(str(i) for i in refused[:20]) + (", ..." if len(refused) > 20 else "")
            return _answer(ReturnT.fail(f"results refused for runs [{shown}]: no such runs of the access "
                                        "token's executor groups (unknown run ids are not kept for later)"),
                           status=400)
        return _answer(ReturnT.success())

    async def _registry_call(
        self, body: bytes, scope: TokenScope, *, remove: bool, started_at_ms: int | None = None,
        app_header: str | None = None,
    ) -> ReturnT:
        try:
            param = RegistryParam.decode(body)
        except ProtocolError as exc:
            if str(exc) == MSG_ILLEGAL_ARGUMENT:
                return ReturnT.fail(MSG_ILLEGAL_ARGUMENT)
            raise
        if not _registry_ok(param):
            return ReturnT.fail(MSG_ILLEGAL_ARGUMENT)
        if (param.registry_group != EXECUTOR and not scope.is_global) or (
                param.registry_group == EXECUTOR and not scope.allows_app(param.registry_key)):
            log.warning("registry refused: a group token used for %s/%s",
                        param.registry_group, param.registry_key[:64])
            return ReturnT.fail(f"access token not valid for appname {param.registry_key!r}")
        if param.registry_group == EXECUTOR:
            try:
                # Stored in canonical form: one executor is one address whatever the spelling
                # (disabling http://127.0.0.1:9999 also disables http://0x7f.0.0.1:9999).
                canonical = check_executor_address(param.registry_value, self._policy)
            except AddressRefused as exc:
                log.warning("registry of %s refused: %s", param.registry_key[:64], exc)
                return ReturnT.fail(f"executor address refused: {exc}")
            param = dataclasses.replace(param, registry_value=canonical)
        if app_header is not None and app_header != param.registry_key:
            return ReturnT.fail(f"{APPNAME_HEADER} header does not match registryKey")
        if remove:
            await self._registry.remove(param)
        else:
            # An executor that names its app in the header speaks 3.5: it is triggered at
            # /trigger with that header (re-learned on every heartbeat). Learned for this
            # appname only, from a beat with a token of this appname (checked above): a beat
            # under another appname never changes how this appname's executors are called.
            await self._registry.register(param, started_at_ms=started_at_ms,
                                          v35_app=app_header if param.registry_group == EXECUTOR else None)
        return ReturnT.success()


def _clean_token(value: str) -> bool:
    """Non-empty, and no whitespace or control/format character anywhere (an appname and an
    address are single tokens; a space or a newline in one is an attack or a mistake)."""
    return bool(value) and not any(c.isspace() or unicodedata.category(c)[0] == "C" for c in value)


def _registry_ok(param: RegistryParam) -> bool:
    values = (param.registry_group, param.registry_key, param.registry_value)
    if not all(_clean_token(v) for v in values):
        return False
    return not any(len(v) > limit for v, limit in zip(values, _REGISTRY_LIMITS, strict=True))


def executor_api_routes(
    registry: RegistryService, callbacks: CallbackService, tokens: TokenChecker | str,
    policy: AddressPolicy | None = None, refusals: RefusalBudget | None = None,
    pull: PullHub | None = None, distributed: DistributedService | None = None,
) -> list[BaseRoute]:
    """Routes serving ``/api/<uri>``; include them at ``/`` and under the base path.
    ``tokens``: the checker, or one token valid for every group; ``pull``: this node's
    mailboxes of pull executors (``api/pull``; None: no pull executors); ``distributed``:
    ``api/jobring/...`` of map / map-reduce runs."""
    api = ExecutorApi(registry, callbacks, tokens, policy, refusals, pull,
                      DistributedApi(distributed) if distributed is not None else None)
    return [
        Route("/api/{uri:path}", api.endpoint, methods=_ALL_METHODS),
        Route("/api", api.endpoint, methods=_ALL_METHODS),
    ]


def executor_api_app(
    registry: RegistryService, callbacks: CallbackService, tokens: TokenChecker | str,
    policy: AddressPolicy | None = None, pull: PullHub | None = None,
    distributed: DistributedService | None = None,
) -> Starlette:
    """A standalone ASGI app with the executor-facing routes (tests, small deployments)."""
    return Starlette(
        routes=executor_api_routes(registry, callbacks, tokens, policy, pull=pull, distributed=distributed),
        exception_handlers=dict(JSON_ERROR_HANDLERS),
    )
