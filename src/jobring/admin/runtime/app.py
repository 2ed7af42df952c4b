"""The admin's ASGI application: runtime wiring (store, secrets, trigger, loop, monitors) and routes.

    app = create_app(settings)          # lifespan opens the store, migrates, bootstraps,
                                        # starts the scheduling loop and the monitors
    uvicorn.run(app, host=..., port=...)

Routes: ``GET /health`` (alive), ``GET /ready`` (see :mod:`jobring.admin.runtime.health`), ``GET
/metrics`` (Prometheus, :mod:`jobring.admin.runtime.metrics`); the management API under ``/api/v1``;
the web console at ``/`` (``admin/console``: index.html for its own paths, hashed
``/assets``); at ``/`` and under ``settings.base_path`` (XXL-JOB executors are configured
with ``.../xxl-job-admin``) the executor-facing ``api/registry``, ``api/registryRemove``,
``api/callback`` and the XXL-JOB 3.x job-management aliases (``api/addJob`` ...).
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, TextIO

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from jobring.admin.alarms.service import AlarmService
from jobring.admin.alarms.setup import alarmer_from_settings
from jobring.admin.api.executor_api import executor_api_app
from jobring.admin.api.json_errors import JSON_ERROR_HANDLERS, InternalErrors, not_found
from jobring.admin.api.management import (
    API_PREFIX,
    XXL3_API_NAMES,
    ManagementServices,
    management_app,
    xxl3_api_app,
)
from jobring.admin.api.management.declared import DECLARE_PATH, declare_api_app
from jobring.admin.console import HtmlNotFound, console_routes
from jobring.admin.dispatch.broker import BrokerPublisher
from jobring.admin.dispatch.client import ExecutorClient
from jobring.admin.dispatch.pull import PullHub
from jobring.admin.distributed.service import DistributedService
from jobring.admin.loop.adapters import StoreLeases, TriggerFirePort
from jobring.admin.loop.delayed import DelayedFireRunner
from jobring.admin.loop.liveness import NodeLiveness
from jobring.admin.loop.loop import LoopConfig, ScheduleLoop
from jobring.admin.loop.overlap import OverlapGate, OverlapRunner
from jobring.admin.loop.timers import LoopTimers
from jobring.admin.loop.timing_book import StoreTiming
from jobring.admin.monitors.backfills import BackfillRunner
from jobring.admin.monitors.declared_retirement import RetiredDeclaredJobsMonitor
from jobring.admin.monitors.monitors import Monitors, RegistryService
from jobring.admin.monitors.workflow_schedules import WorkflowScheduler
from jobring.admin.runtime.admin_runtime import AdminRuntime
from jobring.admin.runtime.health import health, ready
from jobring.admin.runtime.metrics import AdminMetrics, metrics_response
from jobring.admin.services.adopt import resolve_database_state
from jobring.admin.services.audit import AuditLog
from jobring.admin.services.bootstrap import bootstrap
from jobring.admin.services.callbacks import CallbackService
from jobring.admin.services.claim_fault import claim_fault_from
from jobring.admin.services.coexist import refuse_if_java_admin_alive
from jobring.admin.services.executor_tokens import ExecutorTokens
from jobring.admin.services.settings import AdminSettings, address_policy
from jobring.admin.services.workflows import WorkflowDriver
from jobring.admin.store import Store
from jobring.admin.store.node_locks import BACKENDS as LOCK_BACKENDS
from jobring.admin.store.node_locks import NodeLockSession, claim_owned_by
from jobring.admin.store.records import JobInfo
from jobring.admin.trigger.trigger import TriggerService
from jobring.admin.trigger.unsure import UnsureFires
from jobring.core.clock import Clock, SystemClock
from jobring.core.schedule import parse_schedule
from jobring.protocol.edge import NoStore, SecurityHeaders

log = logging.getLogger(__name__)

def loop_config_of(settings: AdminSettings, backend: str) -> LoopConfig:
    """The loop's config: ``pre_read_ms`` and the ``[admin.loop]`` tunables set, by field
    name; the others keep LoopConfig's defaults."""
    # SQLite has one writer at a time: few concurrent batches (each a few transactions)
    # avoid busy-waiting writers; fires that come due meanwhile are batched together.
    values: dict[str, Any] = {
        "pre_read_ms": settings.pre_read_ms,
        "max_inflight_batches": 4 if backend == "sqlite" else 16,
    }
    values.update(settings.loop.given())
    return LoopConfig(**values)


def make_node_id(settings: AdminSettings) -> str:
    """The configured node id, else host-pid-random (unique per process start)."""
    if settings.node_id:
        return settings.node_id
    return f"{socket.gethostname()[:32]}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class _OffsetClock:
    """The system clock shifted by a fixed offset (test-only: chaos tests of clock skew)."""

    def __init__(self, offset_ms: int) -> None:
        self.offset_ms = offset_ms

    def now_ms(self) -> int:
        return SystemClock().now_ms() + self.offset_ms


def _process_clock() -> Clock:
    # Test-only hook, deliberately not an AdminSettings field: JOBRING_CLOCK_OFFSET_MS shifts this
    # node's clock so tests can run nodes whose clocks disagree (tests/chaos). Unset in production.
    offset = int(os.environ.get("JOBRING_CLOCK_OFFSET_MS", "0") or "0")
    return _OffsetClock(offset) if offset else SystemClock()


async def start_runtime(
    settings: AdminSettings,
    *,
    clock: Clock | None = None,
    out: TextIO | None = None,
    loop_config: LoopConfig | None = None,
) -> AdminRuntime:
    """Open the store (migrating unless ``auto_upgrade`` is off), bootstrap, start the loop."""
    clock = clock or _process_clock()
    node_id = make_node_id(settings)
    store = await Store.open(settings.database_url, upgrade=settings.auto_upgrade,
                             pool_size=settings.database_pool_size)
    try:
        state = await resolve_database_state(store, settings.database_timezone, settings.timezone)
        settings = settings.model_copy(
            update={"timezone": state.default_timezone, "database_timezone": state.database_timezone}
        )
        if state.adopted_from is not None:
            log.info("database adopted from XXL-JOB %s: DATETIME columns in %s, crons default to %s",
                     state.adopted_from, state.database_timezone, state.default_timezone)
        await refuse_if_java_admin_alive(store, clock.now_ms(), state.legacy_log_id_max,
                                         takeover=settings.takeover)
        secrets = await bootstrap(store, settings, out)
    except BaseException:
        await store.close()
        raise
    executors = ExecutorClient(
        access_token=secrets.access_token,
        connect_timeout=settings.executor_connect_timeout,
        read_timeout=settings.executor_read_timeout,
        pull=PullHub(clock.now_ms),
        broker=BrokerPublisher(settings.dispatch_broker) if settings.dispatch_broker else None,
    )
    if executors.broker is not None:
        executors.broker.start()
    trigger = TriggerService(
        store, executors, node_id=node_id, clock=clock,
        admin_timezone=state.default_timezone, fast_pool=settings.fast_pool_size,
        slow_pool=settings.slow_pool_size, address_policy=address_policy(settings),
    )
    config = loop_config or loop_config_of(settings, store.backend)
    leases = StoreLeases(store, node_id, UnsureFires(store, trigger, executors))
    liveness = node_liveness(store, node_id, clock) if settings.node_locks else None
    overlap = OverlapGate(store, clock, executors, node_id)
    loop = ScheduleLoop(
        leases, TriggerFirePort(trigger, overlap), LoopTimers(clock), parse_schedule,
        admin_timezone=state.default_timezone, config=config, liveness=liveness,
        timing=StoreTiming(store, clock, node_id),
    )
    alarmer = alarmer_from_settings(settings)
    alarms = AlarmService(store, alarmer)
    registry = RegistryService(store, clock, trigger, dead_after_s=settings.executor_dead_after_s)
    monitors = Monitors.create(store, trigger, alarms, clock, settings, registry,
                               legacy_log_id_max=state.legacy_log_id_max,
                               hold_retention=state.adopted_from is not None)
    monitors.add(RetiredDeclaredJobsMonitor(store, AuditLog(store, clock), clock,
                                            settings.declared_jobs_retired_grace_days))
    callbacks = CallbackService(store, trigger, clock, alarms=alarms,
                                fail_monitor=monitors.find("fail-monitor"),
                                child_fire_budget=settings.child_fire_budget)
    workflows = WorkflowDriver(store, trigger, executors, clock, node_id=node_id, unsure=leases.unsure,
                               stale_ms=settings.workflow_stale_claim_ms)
    workflows.claim_fault = claim_fault_from(os.environ)  # test-only, None in production
    monitors.add(workflows)
    monitors.add(WorkflowScheduler(store, workflows, clock, default_zone=state.default_timezone))
    backfills = BackfillRunner(store, trigger, clock)
    monitors.add(backfills)
    overlap_waits = OverlapRunner(store, trigger)
    monitors.add(overlap_waits)

    def results_recorded(results: Sequence[tuple[int, int, str | None]], contexts: Mapping[int, str]) -> None:
        workflows.notify(results, contexts)
        backfills.results(results)
        trigger.flow.poke()  # a run ended: queued runs may start
        overlap_waits.results(results)

    callbacks.results_listener = results_recorded
    distributed = DistributedService(store, executors, clock, node_id=node_id)
    distributed.record = callbacks.handle
    callbacks.distributed = distributed
    trigger.dispatcher.sharding = distributed
    monitors.add(distributed)
    runtime = AdminRuntime(settings, node_id, clock, store, secrets, executors, trigger,
                           registry, callbacks, monitors, loop,
                           ExecutorTokens(store, secrets.access_token, clock), leases, alarmer,
                           DelayedFireRunner(store, trigger, clock))
    # Before the loop starts: the metrics time every SQL statement and count monitor rounds.
    runtime.workflows = workflows
    runtime.backfills = backfills
    runtime.distributed = distributed
    runtime.metrics = AdminMetrics(runtime)
    runtime.metrics.instrument(alarmer)
    runtime.liveness = liveness
    if liveness is not None:
        await liveness.start()
    await loop.start()
    trigger.flow.start()
    monitors.start()
    runtime.delayed.start()
    log.info("admin node %s scheduling on %s", node_id, store.backend)
    return runtime


def node_liveness(store: Store, node_id: str, clock: Clock) -> NodeLiveness | None:
    """Session-lock liveness for the loop on PostgreSQL/MariaDB/MySQL (None on SQLite)."""
    if store.backend not in LOCK_BACKENDS:
        return None

    async def open_session() -> NodeLockSession:
        config = liveness.config
        # A row lock waited for fails on the server before the node gives up on the statement.
        return await NodeLockSession.open(store.engine, node_id, idle_timeout_ms=config.idle_timeout_ms,
                                          lock_wait_ms=config.op_timeout_ms // 2)

    async def claim_owned(owners: Sequence[str], now_ms: int, window_end_ms: int, lease_ms: int,
                          limit: int) -> Sequence[JobInfo]:
        return await claim_owned_by(store.db, node_id, owners, now_ms, window_end_ms, lease_ms, limit)

    liveness = NodeLiveness(open_session, claim_owned, clock)
    return liveness


class _LateApp:
    """An ASGI app that exists once the lifespan has built it; 503 before that."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.app: ASGIApp | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.app is None:
            if scope["type"] == "http":
                response = JSONResponse({"error": f"{self.what} is starting"}, status_code=503)
                await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


class _ApiDispatch:
    """``api/<name>``: the XXL-JOB 3.x job-management aliases, else the executor API (which
    ``declare_api`` serves ``api/jobring/declareJobs`` in front of, when given)."""

    def __init__(self, xxl3: ASGIApp, executor_api: ASGIApp, declare_api: ASGIApp | None = None) -> None:
        self._xxl3 = xxl3
        self._executor_api = executor_api
        self._declare_api = declare_api
        self._xxl3_paths = {f"/api/{name}" for name in XXL3_API_NAMES}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope["path"]
        root: str = scope.get("root_path", "")
        if root and path.startswith(root):  # under a Mount: the path relative to it
            path = path[len(root):]
        if scope["type"] == "http" and path.rstrip("/") in self._xxl3_paths:
            await self._xxl3(scope, receive, send)
        elif self._declare_api is not None and scope["type"] == "http" and path.rstrip("/") == DECLARE_PATH:
            await self._declare_api(scope, receive, send)
        else:
            await self._executor_api(scope, receive, send)


class AdminApp(Starlette):
    """Starlette with the security headers outside everything, server errors included, and
    ``Cache-Control: no-store`` on every answer of the management API."""

    def build_middleware_stack(self) -> ASGIApp:
        return SecurityHeaders(NoStore(super().build_middleware_stack(), API_PREFIX))


def create_app(
    settings: AdminSettings,
    *,
    clock: Clock | None = None,
    out: TextIO | None = None,
    loop_config: LoopConfig | None = None,
) -> Starlette:
    """The admin app; its lifespan starts and stops one :class:`AdminRuntime`."""
    executor_api = _LateApp("the executor API")
    management_api = _LateApp("the management API")

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        runtime = await start_runtime(settings, clock=clock, out=out, loop_config=loop_config)
        try:
            services = ManagementServices(
                store=runtime.store, settings=runtime.settings, secrets=runtime.secrets,
                trigger=runtime.trigger,
                executors=runtime.executors, clock=runtime.clock, executor_tokens=runtime.executor_tokens,
                delayed=runtime.delayed, workflows=runtime.workflows, backfills=runtime.backfills,
                distributed=runtime.distributed,
            )
            management_api.app = management_app(services)
            executor_api.app = _ApiDispatch(
                xxl3_api_app(services),
                executor_api_app(runtime.registry, runtime.callbacks, runtime.executor_tokens,
                                 address_policy(settings), pull=runtime.executors.pull,
                                 distributed=runtime.distributed),
                declare_api_app(services),
            )
            app.state.runtime = runtime
            yield
        finally:
            app.state.runtime = None
            await runtime.stop()

    base = "/" + settings.base_path.strip("/")
    async def metrics(request: Request) -> Response:
        runtime: AdminRuntime | None = getattr(request.app.state, "runtime", None)
        if runtime is None or runtime.metrics is None:
            return JSONResponse({"error": "the admin is starting", "field": None}, status_code=503)
        return metrics_response(runtime.metrics.registry, request, settings.metrics_token)

    routes: list[BaseRoute] = [
        Route("/health", health, methods=["GET"]),
        Route("/ready", ready, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
    ]
    # "/api/v1" itself would otherwise reach the executor API's "api/<uri>" below.
    routes.append(Route(API_PREFIX, not_found, methods=["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"]))
    routes.append(Mount(API_PREFIX, app=management_api))
    routes += console_routes()
    if base != "/":
        routes.append(Mount(base, app=HtmlNotFound(executor_api)))
    routes.append(Mount("", app=HtmlNotFound(executor_api)))
    return AdminApp(routes=routes, lifespan=lifespan, exception_handlers=dict(JSON_ERROR_HANDLERS),
                    middleware=[Middleware(InternalErrors)])
