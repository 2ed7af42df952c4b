"""Jobs declared in an executor's code: ``POST <base>/api/jobring/declareJobs``.

A jobring executor sends, after it registered, the jobs its handlers declare
(``@executor.job("nightly", cron=...)``) with its access token::

    {"appname": "billing", "declaration_hash": "...",
     "declarations": [{"handler": "nightly", "start": true,
                       "fields": {"schedule_type": "CRON", "schedule_conf": "0 0 2 * * ?", ...}}]}

Ownership: a declaration manages only jobs *managed by code* (``managed_by = "code"``): the
jobs declarations created, and jobs an admin handed to the code (``PATCH /jobs/{id}``
``{"managed_by": "code"}``). A job made in the console is never adopted: a declaration
whose handler only has such jobs is skipped and reported (``skipped``).

Per (executor group, handler) the admin creates the job when it is missing, else applies
only the fields whose *declared* value changed since the previous declaration (kept in
``declared_spec``): a field edited in the console keeps its value until the code changes
that field. A job whose handler is no longer declared is *retired*: stopped at once and
deleted with its runs ``JOBRING_DECLARED_JOBS_RETIRED_GRACE_DAYS`` later (by
:mod:`jobring.admin.monitors.declared_retirement`) unless declared again. A group holds at most
``JOBRING_DECLARED_JOBS_MAX_PER_GROUP`` jobs managed by code, retired ones included, and a
request may declare no more handlers than that. Fields are checked with the management
API's rules (the ``JobUpdate`` model, the alarm target rules, then the job validation); one
bad declaration refuses the whole request, naming the handler and field, and changes
nothing. Answers are XXL-JOB ReturnT JSON with HTTP 200 (``code`` 500 and ``content:
{"handler", "field"}`` for a refused declaration); an unexpected failure is HTTP 500 with
only its kind and an error id (never the error's text).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from dataclasses import dataclass, replace
from typing import Any

import orjson
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from jobring.admin.api.json_errors import internal_failure_message
from jobring.admin.api.management import jobservice
from jobring.admin.api.management.errors import ApiError
from jobring.admin.api.management.limits import RequestGuard
from jobring.admin.api.management.models import JobUpdate
from jobring.admin.api.management.services import ManagementServices
from jobring.admin.security.principal import AuthMethod, Principal
from jobring.admin.security.roles import Role
from jobring.admin.services.audit import Actor, ActorKind, AuditAction, client_address, request_source
from jobring.admin.services.declared_workflows import (
    DeclaredWorkflows,
    WorkflowDeclaration,
    WorkflowDeclarationError,
    parse_workflow_declarations,
)
from jobring.admin.services.validation import FieldError, text_problem
from jobring.admin.services.workflow_access import store_graphs
from jobring.admin.store.errors import StoreError
from jobring.admin.store.records import JobInfo, User
from jobring.core.enums import GlueType, ManagedBy, ScheduleType, TriggerStatus
from jobring.core.text import one_line_problem
from jobring.core.workflow import WorkflowGraph
from jobring.errors import JobringError, Refused
from jobring.protocol.models import ACCESS_TOKEN_HEADER, MSG_TOKEN_WRONG

log = logging.getLogger(__name__)

DECLARE_PATH = "/api/jobring/declareJobs"
MAX_DECLARATIONS = 1_000
_ALL_METHODS = ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]
# Fields a declaration may not set: the group and handler are its key, GLUE is not code.
_NOT_DECLARABLE = frozenset({"job_group", "executor_handler", "glue_type", "glue_remark", "glue_source",
                             "managed_by"})
_CODE = ManagedBy.CODE.value
_SCHEDULE = ("schedule_type", "schedule_conf")  # applied together: a conf means nothing alone
START = "start"


@dataclass(frozen=True)
class Declaration:
    handler: str
    spec: dict[str, Any]  # normalized field values (JSON types), plus "start"


class DeclarationError(JobringError):
    def __init__(self, handler: str | None, field: str | None, message: str) -> None:
        where = f"declaration of handler {handler!r}" if handler else "declarations"
        super().__init__(f"{where}: {message}")
        self.handler, self.field = handler, field


def _answer(code: int, msg: str | None = None, content: Any = None) -> Response:
    body = {"code": code, "msg": msg, "content": content}
    return Response(orjson.dumps(body), status_code=200, media_type="application/json")


def parse_declarations(data: Any, max_count: int = MAX_DECLARATIONS) -> tuple[str, list[Declaration]]:
    """The appname and the normalized declarations of a request body (DeclarationError);
    at most ``max_count`` (and never more than MAX_DECLARATIONS) per request."""
    if not isinstance(data, dict):
        raise DeclarationError(None, None, "expected a JSON object")
    appname = data.get("appname")
    if not isinstance(appname, str) or not appname.strip() or len(appname) > 64:
        raise DeclarationError(None, "appname", "appname: a non-empty string is required")
    raw = data.get("declarations")
    limit = min(max_count, MAX_DECLARATIONS)
    if not isinstance(raw, list):
        raise DeclarationError(None, "declarations", "declarations: a list is required")
    if len(raw) > limit:
        raise DeclarationError(None, "declarations", f"declarations: {len(raw)} handlers declared, at most "
                               f"{limit} per executor group (JOBRING_DECLARED_JOBS_MAX_PER_GROUP)")
    found: dict[str, Declaration] = {}
    for item in raw:
        if not isinstance(item, dict) or not isinstance(item.get("handler"), str):
            raise DeclarationError(None, "handler", "each declaration needs a handler name")
        handler = item["handler"]
        if not handler.strip() or len(handler) > 255 or text_problem(handler) or one_line_problem(handler):
            raise DeclarationError(handler, "handler", "handler: not a valid handler name")
        if handler in found:
            raise DeclarationError(handler, "handler", "handler: declared twice")
        fields = item.get("fields", {})
        if not isinstance(fields, dict):
            raise DeclarationError(handler, "fields", "fields: expected an object")
        refused = _NOT_DECLARABLE.intersection(fields)
        if refused:
            name = sorted(refused)[0]
            raise DeclarationError(handler, name, f"{name}: cannot be declared")
        try:
            model = JobUpdate.model_validate(fields)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ())) or None
            raise DeclarationError(handler, where, f"{where}: {first.get('msg', 'invalid value')}") from None
        spec: dict[str, Any] = model.model_dump(exclude_unset=True, mode="json")
        start = item.get(START, True)
        if not isinstance(start, bool):
            raise DeclarationError(handler, START, "start: must be true or false")
        spec[START] = start
        found[handler] = Declaration(handler, spec)
    return appname.strip(), list(found.values())


def _fields_of(spec: dict[str, Any], names: set[str], old: JobInfo | None = None) -> dict[str, Any]:
    """JobInfo values for the given spec names (FieldError for bad alarm targets)."""
    out: dict[str, Any] = {}
    for name in names:
        if name == START:
            continue
        if name == "child_job_ids":
            out["child_jobid"] = ",".join(str(i) for i in dict.fromkeys(spec[name] or [])) or None
        elif name == "alarm_targets":
            # The management API's own target rules (and the address policy they apply).
            out[name] = jobservice.alarm_targets_text(spec[name], old)
        else:
            out[name] = spec[name]
    return out


def _changed(previous: dict[str, Any], spec: dict[str, Any]) -> set[str]:
    missing = object()
    names = {k for k, v in spec.items() if previous.get(k, missing) != v}
    if names.intersection(_SCHEDULE):
        names.update(n for n in _SCHEDULE if n in spec)
    return names


def _spec_of(job: JobInfo) -> dict[str, Any]:
    if not job.declared_spec:
        return {}
    try:
        value = orjson.loads(job.declared_spec)
    except orjson.JSONDecodeError:
        log.warning("job %d has an unreadable declared_spec; treating it as undeclared", job.id)
        return {}
    return value if isinstance(value, dict) else {}


def _encode(spec: dict[str, Any]) -> str:
    return orjson.dumps(spec, option=orjson.OPT_SORT_KEYS).decode()


@dataclass
class _Plan:
    create: list[tuple[Declaration, JobInfo]]
    update: list[tuple[Declaration, JobInfo, JobInfo, set[str]]]  # (decl, old, new, changed)
    retire: list[JobInfo]
    skipped: list[dict[str, Any]]  # handlers whose only jobs are the console's


def executor_principal(group_id: int, appname: str) -> Principal:
    """What an executor's declarations may do: operate its own group's jobs (children only
    there too), no GLUE."""
    user = User(id=0, username=f"executor:{appname}"[:64], role=int(Role.OPERATOR), permission=str(group_id))
    return Principal(user, AuthMethod.TOKEN)


class DeclarationService:
    """Applies one executor group's declarations (see the module docstring)."""

    def __init__(self, services: ManagementServices) -> None:
        self._services = services
        self._lock = asyncio.Lock()  # one declaration at a time per admin node

    @property
    def _cap(self) -> int:
        return self._services.settings.declared_jobs_max_per_group

    async def apply(self, appname: str, declarations: list[Declaration]) -> dict[str, Any]:
        group = await self._services.store.groups.by_app_name(appname)
        # The exact name: a database whose collation ignores case would find "my-app" for "MY-APP".
        if group is None or group.app_name != appname:
            raise DeclarationError(None, "appname", f"no executor group with appname {appname!r}")
        actor = Actor(f"executor:{appname}"[:64], ActorKind.EXECUTOR)
        principal = executor_principal(group.id, appname)
        async with self._lock:
            jobs = await self._services.store.jobs.in_group(group.id)
            plan = await self._plan(group.id, jobs, declarations, principal)
            return await self._write(plan, actor, principal, group.id)

    async def _plan(
        self, group_id: int, jobs: list[JobInfo], declarations: list[Declaration], principal: Principal
    ) -> _Plan:
        managed, console = _jobs_by_handler(jobs)
        plan = _Plan([], [], [], [])
        declared = {d.handler for d in declarations}
        for decl in declarations:
            old = managed.get(decl.handler)
            try:
                if old is None and decl.handler in console:
                    plan.skipped.append(_skipped(decl.handler, console[decl.handler]))
                elif old is None:
                    plan.create.append((decl, await self._new_job(group_id, decl, principal)))
                else:
                    # A retired job declared again is revived with every declared field.
                    changed = _changed(_spec_of(old), decl.spec)
                    new = replace(old, declared_spec=_encode(decl.spec), declared_by_executor=1,
                                  declared_retired_at=None, **_fields_of(decl.spec, changed, old))
                    if new != old:
                        await jobservice.validate_job(self._services, new, principal, old)
                        plan.update.append((decl, old, new, changed))
            except FieldError as exc:
                field = "child_job_ids" if exc.field == "child_jobid" else exc.field
                raise DeclarationError(decl.handler, field, str(exc)) from None
            except (ApiError, Refused) as exc:
                raise DeclarationError(decl.handler, exc.field, str(exc)) from None
        plan.retire = [j for j in jobs if j.managed_by == _CODE and j.declared_by_executor
                       and j.executor_handler not in declared]
        existing = sum(j.managed_by == _CODE for j in jobs)
        if existing + len(plan.create) > self._cap:
            raise DeclarationError(None, "declarations", self._cap_message(existing, len(plan.create)))
        return plan

    def _cap_message(self, existing: int, new: int) -> str:
        grace = self._services.settings.declared_jobs_retired_grace_days
        return (f"declarations: {new} new job(s) would make {existing + new} jobs managed by code in this "
                f"executor group, at most {self._cap} (JOBRING_DECLARED_JOBS_MAX_PER_GROUP); jobs no longer "
                f"declared count until they are deleted {grace} days after (or by an admin)")

    async def _new_job(self, group_id: int, decl: Declaration, principal: Principal) -> JobInfo:
        values: dict[str, Any] = {"job_desc": decl.handler[:255], "author": "executor"}
        values.update(_fields_of(decl.spec, set(decl.spec)))
        new = JobInfo(job_group=group_id, executor_handler=decl.handler, declared_spec=_encode(decl.spec),
                      declared_by_executor=1, managed_by=_CODE, **values)
        await jobservice.validate_job(self._services, new, principal)
        return new

    async def _write(self, plan: _Plan, actor: Actor, principal: Principal, group_id: int) -> dict[str, Any]:
        services = self._services
        audit = services.audit
        # Checked again in each write: an admin may take a job back (or move it) meanwhile.
        ours = {"managed_by": _CODE, "job_group": group_id}
        created, updated, stopped = [], [], []
        for decl, job in plan.create:
            kept = await self._keep_oldest(await jobservice.create_job(services, job, principal))
            if kept is None:
                continue
            made = kept
            await audit.job_event(actor, AuditAction.JOB_CREATE, made, snapshot=True)
            if decl.spec[START] and made.schedule_type != ScheduleType.NONE:
                made = await jobservice.start_job(services, made)
                await audit.job_event(actor, AuditAction.JOB_START, made)
            created.append(made.id)
        await self._keep_within_cap(group_id, created)
        for decl, old, new, changed in plan.update:
            job = await jobservice.update_job(services, old, new, principal, expect=ours)
            if _fields_of(decl.spec, changed, old):
                await audit.job_event(actor, AuditAction.JOB_UPDATE, job, before=old, declared=True)
            if START in changed:
                job = await self._start_or_stop(job, decl.spec[START], actor)
            updated.append(job.id)
        for job in plan.retire:
            current = replace(job, declared_by_executor=0, declared_spec=None,
                              declared_retired_at=services.now_ms(), update_time=services.now_naive_utc())
            await services.store.jobs.update(current, expect=ours)
            if job.trigger_status == TriggerStatus.RUNNING:
                current = await jobservice.stop_job(services, current)
            await audit.job_event(actor, AuditAction.JOB_DECLARED_STOP, current)
            stopped.append(job.id)
        return {"created": created, "updated": updated, "stopped": stopped, "skipped": plan.skipped}

    async def _start_or_stop(self, job: JobInfo, start: bool, actor: Actor) -> JobInfo:
        running = job.trigger_status == TriggerStatus.RUNNING
        if start and not running and job.schedule_type != ScheduleType.NONE:
            job = await jobservice.start_job(self._services, job)
            await self._services.audit.job_event(actor, AuditAction.JOB_START, job)
        elif not start and running:
            job = await jobservice.stop_job(self._services, job)
            await self._services.audit.job_event(actor, AuditAction.JOB_STOP, job)
        return job

    async def _keep_oldest(self, made: JobInfo) -> JobInfo | None:
        """Two admin nodes declaring for the same group at once may both create a handler's
        job: the one with the higher id deletes its own (None)."""
        same = [j for j in await self._services.store.jobs.in_group(made.job_group)
                if j.executor_handler == made.executor_handler and j.managed_by == _CODE
                and j.glue_type == GlueType.BEAN]
        if any(j.id < made.id for j in same):
            log.info("job for handler %s was declared concurrently; dropping duplicate %d",
                     made.executor_handler, made.id)
            await self._services.store.jobs.delete(made.id)
            return None
        return made

    async def _keep_within_cap(self, group_id: int, created: list[int]) -> None:
        """Declarations applied at once on two admin nodes may pass the cap together: the
        jobs just created beyond it are deleted again and the declaration is refused."""
        count = await self._services.store.jobs.count_managed_by_code(group_id)
        over = count - self._cap
        if over <= 0:
            return
        for job_id in sorted(created, reverse=True)[:over]:
            await self._services.store.jobs.delete(job_id)
        raise DeclarationError(None, "declarations", self._cap_message(count - len(created), len(created)))


def _jobs_by_handler(jobs: list[JobInfo]) -> tuple[dict[str, JobInfo], dict[str, JobInfo]]:
    """(the job each handler's declaration manages, the console's BEAN job per handler).
    Of several jobs managed by code for one handler: the declared one, else the oldest."""
    managed: dict[str, JobInfo] = {}
    console: dict[str, JobInfo] = {}
    for job in sorted(jobs, key=lambda j: (not j.declared_by_executor, j.id)):
        handler = job.executor_handler
        if job.glue_type != GlueType.BEAN or not handler:
            continue
        owner = managed if job.managed_by == _CODE else console
        owner.setdefault(handler, job)
    return managed, console


def _skipped(handler: str, job: JobInfo) -> dict[str, Any]:
    log.warning("declaration of handler %s skipped: job %d has that handler and is managed in the console",
                handler, job.id)
    return {"handler": handler, "job_id": job.id,
            "reason": f"job {job.id} with this handler is managed in the console; an admin can hand it to "
                      f"the code (PATCH /api/v1/jobs/{job.id} {{\"managed_by\": \"code\"}})"}


class DeclareApi:
    """The route's handler: token check, parse, apply."""

    def __init__(self, services: ManagementServices) -> None:
        self._services = services
        self._declarations = DeclarationService(services)
        self._workflows = DeclaredWorkflows(services.store, services.audit, services.clock, self._graph,
                                            default_zone=services.settings.timezone or "UTC")

    async def _graph(self, workflow_id: int, version: int) -> WorkflowGraph:
        # The driver's cache when this node runs workflows (it may be set after this is built).
        driver = self._services.workflows
        source = driver.graph if driver is not None else store_graphs(self._services.store)
        return await source(workflow_id, version)

    async def _token_ok(self, given: str, appname: str) -> bool:
        """The executor access token, as ``api/registry`` checks it for ``appname``: the
        group's own token, or the global one for a group without (when opted in)."""
        tokens = self._services.executor_tokens
        if tokens is None:
            expected = self._services.secrets.access_token
            return expected is not None and hmac.compare_digest(expected.encode(), given.encode())
        scope = await tokens.scope(given)
        return scope is not None and scope.allows_app(appname)

    async def _apply_workflows(self, appname: str, workflows: list[WorkflowDeclaration]) -> dict[str, Any]:
        group = await self._services.store.groups.by_app_name(appname)
        assert group is not None  # the jobs were just applied to it
        managed, console = _jobs_by_handler(await self._services.store.jobs.in_group(group.id))
        jobs = {handler: job.id for handler, job in {**console, **managed}.items()}
        actor = Actor(f"executor:{appname}"[:64], ActorKind.EXECUTOR)
        return await self._workflows.apply(group.id, actor, workflows, jobs)

    async def endpoint(self, request: Request) -> Response:
        if request.method != "POST":
            return _answer(500, "HttpMethod not support.")
        given = request.headers.get(ACCESS_TOKEN_HEADER)
        if not given:
            return _answer(500, MSG_TOKEN_WRONG)
        try:
            data = orjson.loads(await request.body())
        except orjson.JSONDecodeError as exc:
            return _answer(500, f"invalid request body: {exc}")
        try:
            cap = self._services.settings.declared_jobs_max_per_group
            appname, declarations = parse_declarations(data, cap)
            workflows = parse_workflow_declarations(data.get("workflows"))
            if not await self._token_ok(given, appname):
                return _answer(500, MSG_TOKEN_WRONG)
            with request_source(client_address(request.scope)):
                result = await self._declarations.apply(appname, declarations)
                if workflows is not None:
                    result["workflows"] = await self._apply_workflows(appname, workflows)
        except DeclarationError as exc:
            log.warning("declarations refused: %s", exc)
            return _answer(500, str(exc), {"handler": exc.handler, "field": exc.field})
        except WorkflowDeclarationError as exc:  # the jobs are applied: a workflow is refused alone
            log.warning("declared workflows refused: %s", exc)
            return _answer(500, str(exc), {"workflow": exc.workflow, "field": exc.field})
        except StoreError as exc:  # our own messages (e.g. a job changed meanwhile)
            return _answer(500, str(exc))
        except Exception as exc:  # the executor tries again later
            # Never the error's text (a database error's SQL and parameters): its kind and an id.
            body = orjson.dumps({"code": 500, "msg": internal_failure_message(exc, "declaring jobs")})
            return Response(body, status_code=500, media_type="application/json")
        log.info("declarations of %s applied: %s", appname, result)
        return _answer(200, None, result)


def declare_api_routes(services: ManagementServices) -> list[BaseRoute]:
    """``/api/jobring/declareJobs``; list it before any ``/api/{uri}`` catch-all."""
    return [Route(DECLARE_PATH, DeclareApi(services).endpoint, methods=_ALL_METHODS)]


def declare_api_app(services: ManagementServices) -> Any:
    """A standalone ASGI app serving only the declarations (body size limited like /api/v1)."""
    return RequestGuard(Starlette(routes=declare_api_routes(services)), services.max_body_bytes)
