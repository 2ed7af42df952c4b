"""XXL-JOB 3.x style programmatic job management: ``POST api/addJob|updateJob|removeJob|
startJob|stopJob|triggerJob``, authorised by a user's personal API token.

Thin aliases over the same job operations as the REST API: same validation and the same
role, group, GLUE and child-job checks, for the token's user. The token (``jr_...``) goes
in ``XXL-JOB-ACCESS-TOKEN`` (where XXL-JOB clients put it) or as ``Authorization: Bearer``.
An executor token is not accepted: it only speaks the executor protocol. Bodies use
XXL-JOB's camelCase JobInfo fields; answers are ``{"code", "msg", "content"}`` (``data``
carries the same value for 3.x clients), HTTP 200, or 401/403 with the same code when the
caller is not authenticated or not permitted. Put ``xxl3_api_routes(...)`` *before* the
executor API's catch-all ``/api/{uri}`` routes, at ``/`` and under the base path.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from jobring.admin.api.json_errors import internal_failure_message
from jobring.admin.api.management import jobservice
from jobring.admin.api.management.deps import MUST_CHANGE_MESSAGE, principal_from_api_token
from jobring.admin.api.management.errors import ApiError, status_of
from jobring.admin.api.management.limits import RequestGuard
from jobring.admin.api.management.services import ManagementServices
from jobring.admin.security.principal import Principal
from jobring.admin.services.audit import AuditAction, client_address, request_source
from jobring.admin.services.validation import FieldError, text_problem
from jobring.admin.store.errors import StoreError
from jobring.admin.store.records import JobInfo
from jobring.core.enums import TriggerType
from jobring.errors import Refused
from jobring.protocol.models import ACCESS_TOKEN_HEADER, MSG_METHOD_NOT_SUPPORTED

log = logging.getLogger(__name__)

XXL3_API_NAMES = ("addJob", "updateJob", "removeJob", "startJob", "stopJob", "triggerJob")
_ALL_METHODS = ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]

# camelCase wire name -> JobInfo field, with the expected JSON type.
_JOB_FIELDS: dict[str, tuple[str, type]] = {
    "jobGroup": ("job_group", int),
    "jobDesc": ("job_desc", str),
    "author": ("author", str),
    "alarmEmail": ("alarm_email", str),
    "scheduleType": ("schedule_type", str),
    "scheduleConf": ("schedule_conf", str),
    "scheduleTimezone": ("schedule_timezone", str),
    "misfireStrategy": ("misfire_strategy", str),
    "executorRouteStrategy": ("executor_route_strategy", str),
    "executorHandler": ("executor_handler", str),
    "executorParam": ("executor_param", str),
    "executorBlockStrategy": ("executor_block_strategy", str),
    "executorTimeout": ("executor_timeout", int),
    "executorFailRetryCount": ("executor_fail_retry_count", int),
    "glueType": ("glue_type", str),
    "glueSource": ("glue_source", str),
    "glueRemark": ("glue_remark", str),
    "childJobId": ("child_jobid", str),
}


MSG_USER_TOKEN_NEEDED = (
    "a user API token (jr_...) is required in XXL-JOB-ACCESS-TOKEN or Authorization: Bearer; "
    "executor access tokens do not authorise job management"
)
_Handler = Callable[[Principal, dict[str, Any]], Awaitable[Any]]


def _answer(code: int, msg: str | None = None, content: Any = None) -> Response:
    body = {"code": code, "msg": msg, "content": content, "data": content}
    status = code if code in (401, 403) else 200
    return Response(orjson.dumps(body), status_code=status, media_type="application/json")


def _presented_token(request: Request) -> str | None:
    authorization = request.headers.get("Authorization")
    if authorization:
        scheme, _, token = authorization.partition(" ")
        return token.strip() if scheme.lower() == "bearer" and token.strip() else None
    return (request.headers.get(ACCESS_TOKEN_HEADER) or "").strip() or None


def _fields(data: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for wire, (name, kind) in _JOB_FIELDS.items():
        if wire not in data or data[wire] is None:
            continue
        value = data[wire]
        if kind is int and (not isinstance(value, int) or isinstance(value, bool)):
            raise FieldError(wire, "must be an integer")
        if kind is str and not isinstance(value, str):
            if name == "child_jobid" and isinstance(value, list):
                value = ",".join(str(v) for v in value)
            else:
                raise FieldError(wire, "must be a string")
        if kind is int and not -(2**31) <= value < 2**31:
            raise FieldError(wire, "is out of range")
        out[name] = value
    return out


def _job_id(data: dict[str, Any]) -> int:
    value = data.get("id", data.get("jobId"))
    if not isinstance(value, int) or isinstance(value, bool) or not 0 < value < 2**31:
        raise FieldError("id", "a positive job id is required")
    return value


class Xxl3Api:
    """The handlers behind the routes."""

    def __init__(self, services: ManagementServices) -> None:
        self._services = services
        self._handlers: dict[str, _Handler] = {
            "addJob": self._add,
            "updateJob": self._update,
            "removeJob": self._remove,
            "startJob": self._start,
            "stopJob": self._stop,
            "triggerJob": self._trigger,
        }

    async def endpoint(self, request: Request) -> Response:
        name = request.url.path.rstrip("/").rsplit("/", 1)[-1]
        try:
            return await self._answer_call(request, name)
        except Exception as exc:
            # Never the error's text (a database error's SQL and parameters): its kind and an id.
            return _answer(500, internal_failure_message(exc, f"api/{name[:32]}"))

    async def _answer_call(self, request: Request, name: str) -> Response:
        if request.method != "POST":
            return _answer(500, MSG_METHOD_NOT_SUPPORTED)
        given = _presented_token(request)
        if given is None:
            return _answer(401, MSG_USER_TOKEN_NEEDED)
        try:
            principal = await principal_from_api_token(self._services, given)
        except ApiError:
            return _answer(401, MSG_USER_TOKEN_NEEDED)
        if principal.user.must_change_password:
            return _answer(403, MUST_CHANGE_MESSAGE)
        if not principal.can_write:
            return _answer(403, "the viewer role is read-only")
        try:
            data = orjson.loads(await request.body())
        except orjson.JSONDecodeError as exc:
            return _answer(500, f"invalid request body: {exc}")
        if not isinstance(data, dict):
            return _answer(500, "invalid request body: expected a JSON object")
        try:
            with request_source(client_address(request.scope)):
                content = await self._handlers[name](principal, data)
        except FieldError as exc:
            return _answer(500, str(exc))
        except ApiError as exc:
            return _answer(exc.status if exc.status in (401, 403) else 500, exc.error)
        except Refused as exc:  # a service's refusal; XXL-JOB 3.x tells apart only 403
            return _answer(403 if status_of(exc) == 403 else 500, str(exc))
        except StoreError as exc:
            return _answer(500, str(exc))
        return _answer(200, None, content)

    async def _load(self, principal: Principal, data: dict[str, Any]) -> JobInfo:
        return await jobservice.load_job_for_write(self._services, principal, _job_id(data))

    async def _add(self, principal: Principal, data: dict[str, Any]) -> str:
        fields = _fields(data)
        for required in ("job_group", "job_desc"):
            if required not in fields:
                raise FieldError(required, "is required")
        job = await jobservice.create_job(self._services, JobInfo(**fields), principal)
        await self._services.audit.job_event(principal, AuditAction.JOB_CREATE, job, snapshot=True)
        return str(job.id)

    async def _update(self, principal: Principal, data: dict[str, Any]) -> None:
        old = await self._load(principal, data)
        new = replace(old, **_fields(data))
        # Stored legacy values the request leaves as they are are kept, as XXL-JOB did.
        updated = await jobservice.update_job(self._services, old, new, principal, [])
        await self._services.audit.job_event(principal, AuditAction.JOB_UPDATE, updated, before=old)

    async def _remove(self, principal: Principal, data: dict[str, Any]) -> None:
        job = await self._load(principal, data)
        await jobservice.delete_job(self._services, job)
        await self._services.audit.job_event(principal, AuditAction.JOB_DELETE, job, snapshot=True)

    async def _start(self, principal: Principal, data: dict[str, Any]) -> None:
        job = await jobservice.start_job(self._services, await self._load(principal, data))
        await self._services.audit.job_event(principal, AuditAction.JOB_START, job)

    async def _stop(self, principal: Principal, data: dict[str, Any]) -> None:
        job = await jobservice.stop_job(self._services, await self._load(principal, data))
        await self._services.audit.job_event(principal, AuditAction.JOB_STOP, job)

    async def _trigger(self, principal: Principal, data: dict[str, Any]) -> dict[str, Any]:
        job = await self._load(principal, data)
        param = data.get("executorParam")
        if param is not None and (not isinstance(param, str) or len(param) > 512 or text_problem(param)):
            raise FieldError("executorParam", "must be a plain string of at most 512 characters")
        raw = data.get("addressList")
        addresses: list[str] | None = None
        if isinstance(raw, str):
            addresses = [a for a in raw.split(",") if a.strip()]
        elif isinstance(raw, list) and all(isinstance(a, str) for a in raw):
            addresses = list(raw)
        elif raw is not None:
            raise FieldError("addressList", "must be a comma list or an array of addresses")
        result = await jobservice.trigger_job(self._services, job, param, addresses, TriggerType.API)
        await self._services.audit.trigger_event(principal, job, result, param, addresses)
        if result.trigger_code != 200:
            raise ApiError(500, result.trigger_msg)
        return {"logIds": result.log_ids, "triggerMsg": result.trigger_msg}


def xxl3_api_routes(services: ManagementServices) -> list[BaseRoute]:
    """``/api/addJob`` ... ``/api/triggerJob``; list them before any ``/api/{uri}`` catch-all."""
    api = Xxl3Api(services)
    return [Route(f"/api/{name}", api.endpoint, methods=_ALL_METHODS) for name in XXL3_API_NAMES]


def xxl3_api_app(services: ManagementServices) -> Any:
    """A standalone ASGI app serving only the six aliases (body size limited like /api/v1)."""
    return RequestGuard(Starlette(routes=xxl3_api_routes(services)), services.max_body_bytes)
