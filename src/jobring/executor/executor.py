"""The embeddable executor: handler registry, lifecycle and the ways to run it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import httpx

from jobring.configbase import ConfigError
from jobring.errors import JobringError
from jobring.executor.callback import CallbackSender
from jobring.executor.config import (
    ExecutorSettings,
    check_security,
    is_loopback_host,
    load_executor_settings,
)
from jobring.executor.context import JobHandler
from jobring.executor.declare import (
    Declarer,
    declaration,
    declaration_body,
    workflow_declaration,
    workflow_handlers,
    workflow_schedule_declaration,
)
from jobring.executor.distributed import AdminLink, SubTaskRunner
from jobring.executor.http.app import ExecutorEndpoints
from jobring.executor.http.limits import ServerLimits
from jobring.executor.http.protocol import ExecutorHttpServer
from jobring.executor.ops import ExecutorMetrics, ExecutorParts, ExecutorStatus, OpsAnswer, ops_answer
from jobring.executor.pull import POLL_WAIT_MS, PollTransport, PullChannel, pull_address
from jobring.executor.registry import Registrar, detect_ipv4
from jobring.executor.standalone import (
    bind_socket,
    default_logging,
    install_signal_handlers,
    loop_factory,
    with_port,
)
from jobring.protocol.edge import HeadLimits

if TYPE_CHECKING:
    from jobring.executor.broker import BrokerConsumer
    from jobring.executor.runlog import RunLog
    from jobring.executor.worker import JobRunner

log = logging.getLogger("jobring.executor")

F = TypeVar("F", bound=Callable[..., Any])
_CLEANUP_EVERY_S = 24 * 3600.0
_THREAD_START_TIMEOUT_S = 30.0


class ExecutorError(JobringError, RuntimeError):
    """The executor cannot do what was asked in its current state."""


class Executor:
    """An XXL-JOB compatible executor that runs the handlers registered with :meth:`job`.

    Every argument may also come from a ``JOBRING_EXECUTOR_<NAME>`` environment
    variable (``admin_addresses`` comma separated). An argument given here wins over the
    environment, one left out (None) does not: leave out what each deployment sets
    (``admin_addresses``, ``port``, ``access_token``) so that the environment can. Without
    an ``access_token`` the executor refuses to start unless ``allow_open=True`` and
    it binds to loopback only.

    Run it standalone with :meth:`run` / :meth:`serve`, inside an ASGI app with
    :meth:`asgi_app` plus :meth:`lifespan`, or beside a WSGI app with
    :meth:`start_in_thread` / :meth:`stop`.
    """

    def __init__(
        self,
        app_name: str | None = None,
        admin_addresses: list[str] | tuple[str, ...] | str | None = None,
        access_token: str | None = None,
        address: str | None = None,
        host: str | None = None,
        port: int | None = None,
        log_path: str | None = None,
        log_retention_days: int | None = None,
        glue_enabled: bool | None = None,
        allow_open: bool | None = None,
        *,
        ip: str | None = None,
        environ: Mapping[str, str] | None = None,
        **more: Any,
    ) -> None:
        self._explicit: dict[str, Any] = {
            "app_name": app_name,
            "admin_addresses": admin_addresses,
            "access_token": access_token,
            "address": address,
            "ip": ip,
            "host": host,
            "port": port,
            "log_path": log_path,
            "log_retention_days": log_retention_days,
            "glue_enabled": glue_enabled,
            "allow_open": allow_open,
            **more,
        }
        self._environ = environ
        self.settings: ExecutorSettings = load_executor_settings(environ, **self._explicit)
        # The settings the code itself gives (they win over JOBRING_EXECUTOR_*), for messages.
        self._in_code = {name for name, value in self._explicit.items() if value is not None}
        self._handlers: dict[str, JobHandler] = {}
        self._reducers: dict[str, str] = {}  # handler -> the reduce handler of its map
        self._subtasks: SubTaskRunner | None = None
        self._declarations: dict[str, dict[str, Any]] = {}
        self._workflows: dict[str, dict[str, Any]] = {}
        self._declarer: Declarer | None = None
        self._declare_task: asyncio.Task[None] | None = None
        self._endpoints: ExecutorEndpoints | None = None
        self._runner: JobRunner | None = None
        self._runlog: RunLog | None = None
        self._client: httpx.AsyncClient | None = None
        self._callback: CallbackSender | None = None
        self._registrar: Registrar | None = None
        self._pull: PullChannel | None = None
        self._broker: BrokerConsumer | None = None
        self._cleanup_task: asyncio.Task[None] | None = None
        self._stop_serving: Callable[[], None] | None = None
        self._server_loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._metrics: ExecutorMetrics | None = None
        self.address: str | None = None
        # The port the standalone server listens on (known once it serves; port 0 picks one).
        self.bound_port: int | None = None

    # --- configuration -------------------------------------------------------------------

    def configure(self, **overrides: Any) -> None:
        """Override settings (e.g. from CLI flags) before the executor starts."""
        if self._runner is not None:
            raise ExecutorError("cannot configure a running executor")
        explicit = {**self._explicit, **{k: v for k, v in overrides.items() if v is not None}}
        self.settings = load_executor_settings(self._environ, **explicit)  # raises before any change
        self._explicit = explicit
        self._in_code -= {name for name, value in overrides.items() if value is not None}
        self._endpoints = None

    def job(
        self,
        name: str,
        *,
        init: Callable[[], Any] | None = None,
        destroy: Callable[[], Any] | None = None,
        isolation: Literal["thread", "process"] = "thread",
        cron: str | None = None,
        fix_rate: int | None = None,
        timezone: str | None = None,
        desc: str | None = None,
        params: str | None = None,
        route: str | None = None,
        timeout: int | None = None,
        retries: int | None = None,
        block: str | None = None,
        misfire: str | None = None,
        alarm_email: str | Sequence[str] | None = None,
        child_jobs: Sequence[int] | None = None,
        author: str | None = None,
        start: bool = True,
        fields: Mapping[str, Any] | None = None,
        reduce: str | None = None,
    ) -> Callable[[F], F]:
        """Register the decorated function as the handler ``name``; it is returned unchanged.

        The other keywords declare the handler's job in code: under a jobring admin the
        job of this executor group with this handler is created or updated when the
        executor starts (``cron`` Quartz expression or ``fix_rate`` seconds, ``timezone``,
        ``desc``, ``params``, ``route``, ``timeout`` s, ``retries``, ``block``, ``misfire``,
        ``alarm_email``, ``child_jobs`` ids, ``author``; ``fields``: any other job field
        by its API name). Only what is given is declared; a field edited in the console
        keeps its value until the code changes it. ``start=False`` keeps the job stopped.
        ``reduce`` names the handler that runs once after the sub-tasks this handler maps
        (``ctx.map``) have all ended (docs/distributed-jobs.md).
        """
        declared = declaration(
            name, cron=cron, fix_rate=fix_rate, start=start, more=fields or {},
            options={"timezone": timezone, "desc": desc, "params": params, "route": route,
                     "timeout": timeout, "retries": retries, "block": block, "misfire": misfire,
                     "alarm_email": alarm_email, "child_jobs": child_jobs, "author": author},
        )

        def register(func: F) -> F:
            self.add_handler(JobHandler(name, func, init=init, destroy=destroy, isolation=isolation))
            if reduce is not None:
                self._reducers[name] = reduce
            if declared is not None:
                self._declarations[name] = declared
            return func

        return register

    def workflow(
        self,
        name: str,
        *,
        nodes: Sequence[Mapping[str, Any]],
        edges: Sequence[Mapping[str, Any]] = (),
        description: str = "",
        cron: str | None = None,
        fix_rate: int | None = None,
        once: str | None = None,
        timezone: str | None = None,
        misfire: str | None = None,
        overlap: str | None = None,
        params: Mapping[str, Any] | None = None,
        start: bool = True,
    ) -> None:
        """Declare the workflow ``name`` of this executor group in code, next to its jobs.

        A node names its job by this executor's handler (``{"key": "a", "job": "extract"}``),
        a sub-workflow node a workflow of the group by name (``{"kind": "subworkflow",
        "workflow": "part"}``, declared first); other node fields are the API's
        (docs/workflows.md). Under a jobring admin the workflow is created, or saved as a new
        version when the declaration changed, when the executor starts; it is read-only in the
        console. A handler a workflow runs gets a job even without job keywords.

        A schedule may be declared with it: ``cron`` (Quartz), ``fix_rate`` (seconds) or
        ``once`` (a date and time), with ``timezone``, ``misfire`` (DO_NOTHING, FIRE_ONCE_NOW),
        ``overlap`` (skip, queue_one, allow) and ``params`` (the scheduled runs' starting
        context); ``start=False`` keeps it stopped. It follows the code: changed when the code
        changes it, removed when the code drops it (docs/workflows.md#declared-in-code)."""
        schedule = workflow_schedule_declaration(name, cron=cron, fix_rate=fix_rate, once=once,
                                                 timezone=timezone, misfire=misfire, overlap=overlap,
                                                 params=params, start=start)
        self._workflows[name] = workflow_declaration(name, nodes, edges, description, schedule)

    @property
    def declarer(self) -> Declarer | None:
        """What became of the declarations sent at this start (None: nothing to send)."""
        return self._declarer

    @property
    def declarations(self) -> list[dict[str, Any]]:
        """The jobs declared in code, as sent to the admin (with a plain job for each handler a
        declared workflow runs that declares none)."""
        implicit = {h: {"handler": h, "fields": {}, "start": True}
                    for h in workflow_handlers(list(self._workflows.values())) if h not in self._declarations}
        found = {**implicit, **self._declarations}
        return [found[n] for n in sorted(found)]

    def add_handler(self, handler: JobHandler) -> None:
        """Register a handler built by hand (what :meth:`job` does)."""
        if handler.name in self._handlers:
            raise ValueError(f"job handler [{handler.name}] is already registered")
        self._handlers[handler.name] = handler

    @property
    def handlers(self) -> Mapping[str, JobHandler]:
        return self._handlers

    @property
    def running(self) -> bool:
        return self._runner is not None

    # --- lifecycle -----------------------------------------------------------------------

    def asgi_app(self) -> ExecutorEndpoints:
        """The executor's endpoints as an ASGI app (mount it, or serve it; it handles lifespan)."""
        if self._endpoints is None:
            self._endpoints = ExecutorEndpoints(self.settings.access_token)
            self._endpoints.on_lifespan(lambda: self.startup(binds=False), self.shutdown)
            self._endpoints.ops = self._ops
        return self._endpoints

    # --- operations ----------------------------------------------------------------------

    def parts(self) -> ExecutorParts:
        """The running engine's parts (all None before start), for metrics and status."""
        return ExecutorParts(self._runner, self._callback, self._registrar)

    def status(self) -> ExecutorStatus:
        """Registered or not, the admin reachable, the last error, runs in flight, results
        waiting for delivery (in memory and in the spool file)."""
        runner, callback, registrar = self._runner, self._callback, self._registrar
        errors = [p.last_error for p in (registrar, callback) if p is not None and p.last_ok is False]
        outcomes = [p.last_ok for p in (registrar, callback) if p is not None and p.last_ok is not None]
        return ExecutorStatus(
            started=runner is not None,
            address=self.address,
            registered=registrar is not None and registrar.registered.is_set(),
            admin_reachable=None if not outcomes else all(outcomes),
            last_error=errors[0] if errors else (registrar.last_error if registrar else None),
            last_registered_at=registrar.last_registered_at if registrar else None,
            runs_in_flight=runner.running_count() if runner else 0,
            callback_backlog=callback.pending_count if callback else 0,
            spool_size=callback.spooled_count if callback else 0,
        )

    @property
    def metrics(self) -> ExecutorMetrics:
        """This executor's Prometheus metrics (its own registry)."""
        if self._metrics is None:
            self._metrics = ExecutorMetrics(self)
        return self._metrics

    def _ops(self, path: str, token_ok: bool, authorization: bytes | None) -> OpsAnswer:
        started = self._runner is not None
        return ops_answer(path, token_ok=token_ok, authorization=authorization,
                          status=self.status if started else None, metrics=self.metrics if started else None,
                          metrics_token=self.settings.metrics_token)

    @contextlib.asynccontextmanager
    async def lifespan(self, app: object = None) -> AsyncIterator[None]:
        """Start the executor for the life of a host ASGI app (``FastAPI(lifespan=ex.lifespan)``)."""
        await self.startup(binds=False)
        try:
            yield
        finally:
            await self.shutdown()

    async def startup(self, *, binds: bool = True, port: int | None = None) -> None:
        """Start the engine, callback sender and registry heartbeat (not the HTTP server)."""
        from jobring.executor.broker import RunSlots, start_consumer
        from jobring.executor.runlog import RunLog
        from jobring.executor.worker import JobRunner

        if self._runner is not None:
            raise ExecutorError("executor already started")
        s = self.settings
        check_security(s, binds=binds and s.dispatch == "push")
        if s.dispatch != "push" and not s.admin_addresses:
            raise ConfigError(f"a {s.dispatch} executor (dispatch={s.dispatch}) needs admin_addresses: "
                              "it connects out")
        self._runlog = RunLog(s.log_path)
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(s.admin_timeout_s),
            limits=httpx.Limits(max_keepalive_connections=4, keepalive_expiry=60.0),
        )
        self._callback = CallbackSender(
            self._client,
            s.admin_urls(),
            s.access_token,
            s.log_path,
            batch_size=s.callback_batch_size,
            max_backoff_s=s.callback_max_backoff_s,
            app_name=s.app_name,
            protocol=s.protocol,
        )
        # A broker executor's results also free its slots (executor/broker.py).
        slots = RunSlots(s.broker_slots, self._callback.report) if s.dispatch == "broker" else None
        try:
            await self._callback.start()
            self._runner = JobRunner(
                self._handlers,
                self._runlog,
                self._callback.report if slots is None else slots.report,
                glue_enabled=s.glue_enabled,
                idle_timeout_s=s.idle_timeout_s,
                max_handle_msg=s.max_handle_msg,
            )
        except BaseException:
            # Half started (e.g. an unreadable spool folder): release what exists, then fail.
            await self._callback.close(flush_timeout_s=1.0)
            await self._client.aclose()
            self._callback = self._client = None
            raise
        self._subtasks = SubTaskRunner(self._handlers, AdminLink(self._client, s.admin_urls(), s.access_token,
                                                                 s.app_name), reducers=self._reducers)
        self._runner.distributed = self._subtasks
        self.asgi_app().extra_routes["/jobring/subtasks"] = self._subtasks.accept
        self.asgi_app().bind(self._runner, self._runlog.read)
        if s.dispatch != "push":
            self.address = pull_address(s.address, s.dispatch)
            transport = PollTransport(self._client, s.access_token, wait_ms=POLL_WAIT_MS,
                                      connect_timeout_s=s.admin_timeout_s)
            self._pull = PullChannel(transport, s.admin_urls(), s.app_name, self.address, self._answer_pulled)
            self._pull.start()
            if slots is not None:
                self._broker = start_consumer(s, self.address, self._runner, slots)
        else:
            # An open executor is loopback only, and one bound to loopback is reachable there
            # only: both advertise a loopback address, never another interface's.
            loopback = "::1" if ":" in s.host else "127.0.0.1"
            detected = loopback if not s.access_token or is_loopback_host(s.host) else detect_ipv4()
            self.address = s.base_address(detected) if port is None else with_port(s, detected, port)
        self._registrar = Registrar(
            self._client, s.admin_urls(), s.access_token, s.app_name, self.address,
            interval_s=s.beat_interval_s, started_at_ms=time.time_ns() // 1_000_000,
            # A copy taken at once: a handler may be added from another thread meanwhile.
            handlers=lambda: list(self._handlers),
            alive=self._pull.polling if self._pull is not None else None,
        )
        self._registrar.start()
        self._start_declaring(self._registrar)
        self._cleanup_task = asyncio.create_task(self._cleanup_loop(), name="jobring-runlog-cleanup")
        log.info("executor %s started with handlers %s; registering as %s", s.app_name,
                 ", ".join(sorted(self._handlers)) or "(none)", self.address)

    async def _answer_pulled(self, path: str, body: bytes) -> bytes:
        """A call that came over the poll, answered as the HTTP endpoint answers it (the
        poll is authenticated by the admin: no token check here)."""
        return await self.asgi_app().handle("POST", path, True, body)

    def _start_declaring(self, registrar: Registrar) -> None:
        s = self.settings
        nothing = not self._declarations and not self._workflows
        if s.declare_jobs == "never" or (s.declare_jobs == "auto" and nothing):
            return
        if not s.admin_urls():
            return
        assert self._client is not None
        body = declaration_body(s.app_name, self.declarations, list(self._workflows.values()))
        self._declarer = Declarer(self._client, s.admin_urls(), s.access_token, body)
        self._declare_task = asyncio.create_task(
            self._declarer.run(registrar.registered), name="jobring-declare-jobs")

    async def shutdown(self) -> None:
        """Leave the admin (registryRemove), stop runs, deliver or spool their results."""
        if self._runner is None:
            return
        runner, self._runner = self._runner, None
        if self._declare_task is not None:
            self._declare_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._declare_task
            self._declare_task = None
        if self._cleanup_task is not None:
            self._cleanup_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._cleanup_task
        try:
            if self._broker is not None:
                broker, self._broker = self._broker, None
                await broker.stop()
            if self._pull is not None:
                pull, self._pull = self._pull, None
                await pull.stop()
            if self._registrar is not None:
                await self._registrar.stop()
            if self._endpoints is not None:
                self._endpoints.unbind()
            await runner.close()
            if self._subtasks is not None:
                await self._subtasks.close()
                self._subtasks = None
            if self._callback is not None:
                await self._callback.close()
        finally:
            if self._client is not None:
                await self._client.aclose()
            self._client = self._callback = self._registrar = None
        log.info("executor %s stopped", self.settings.app_name)

    async def _cleanup_loop(self) -> None:
        while True:
            runlog = self._runlog
            if runlog is not None:
                try:
                    removed = await asyncio.to_thread(
                        runlog.cleanup, self.settings.log_retention_days, datetime.now(UTC)
                    )
                    if removed:
                        log.info("run log cleanup removed %d day folder(s)", removed)
                except OSError as exc:
                    log.warning("run log cleanup failed: %s", exc)
            await asyncio.sleep(_CLEANUP_EVERY_S)

    # --- standalone server -------------------------------------------------------------

    async def serve(self, *, ready: Callable[[str], None] | None = None, announce: bool = True) -> None:
        """Serve the endpoints over HTTP until stopped (SIGINT/SIGTERM or :meth:`stop`);
        ``announce=False`` leaves the "listening on" line to the caller (``ready``)."""
        s = self.settings
        if s.dispatch != "push":
            await self._serve_pulled(ready)
            return
        check_security(s, binds=True)
        sock = bind_socket(s.host, s.port, in_code="port" in self._in_code)
        self.bound_port = sock.getsockname()[1]
        stop_requested = asyncio.Event()
        loop = asyncio.get_running_loop()
        self._stop_serving, self._server_loop = stop_requested.set, loop
        stop_signals = install_signal_handlers(stop_requested.set)
        server = ExecutorHttpServer(self.asgi_app(), head_limits=HeadLimits(
            max_request_line=s.max_request_line_bytes, max_header_bytes=s.max_header_bytes,
            head_timeout_s=s.header_timeout_s,
        ), limits=ServerLimits(
            max_connections=s.max_connections, max_unauthenticated=s.max_unauthenticated_connections,
            max_unauthenticated_per_address=s.max_unauthenticated_per_address,
            unauthenticated_idle_timeout_s=s.unauthenticated_idle_timeout_s,
        ))
        try:
            await self.startup(port=self.bound_port)
            await server.start(sock)
            if announce:
                log.info("executor %s listening on %s:%s", s.app_name, s.host, self.bound_port)
            if ready is not None:
                ready(self.address or "")
            await stop_requested.wait()
        finally:
            try:
                await server.stop()
                await self.shutdown()
            finally:
                for sig in stop_signals:
                    loop.remove_signal_handler(sig)
                sock.close()
                self._stop_serving = self._server_loop = None

    async def _serve_pulled(self, ready: Callable[[str], None] | None) -> None:
        """:meth:`serve` for a pull executor: no socket is opened; the poll brings the calls."""
        stop_requested = asyncio.Event()
        loop = asyncio.get_running_loop()
        self._stop_serving, self._server_loop = stop_requested.set, loop
        stop_signals = install_signal_handlers(stop_requested.set)
        try:
            await self.startup(binds=False)
            log.info("executor %s polls %s as %s (%s dispatch: no listening port)", self.settings.app_name,
                     ", ".join(self.settings.admin_urls()), self.address, self.settings.dispatch)
            if ready is not None:
                ready(self.address or "")
            await stop_requested.wait()
        finally:
            try:
                await self.shutdown()
            finally:
                for sig in stop_signals:
                    loop.remove_signal_handler(sig)
                self._stop_serving = self._server_loop = None

    def run(
        self, *, ready: Callable[[str], None] | None = None, exit_on_error: bool = True, announce: bool = True
    ) -> None:
        """Serve standalone, blocking until Ctrl-C / SIGTERM; leaves the admin cleanly.

        A port in use or a bad setting is printed as one line and exits with code 2
        (``exit_on_error=False``: raises :class:`~jobring.configbase.ConfigError` instead).
        Logs startup and registration at INFO to stderr unless logging is configured.
        Uses uvloop when it is installed. ``announce=False``: no "listening on" log line
        (``ready`` prints its own, as ``jobring executor`` does).
        """
        with default_logging():
            try:
                self._run(ready, announce)
            except ConfigError as exc:
                if not exit_on_error:
                    raise
                print(f"jobring executor: error: {exc}", file=sys.stderr, flush=True)
                raise SystemExit(2) from None

    def _run(self, ready: Callable[[str], None] | None, announce: bool = True) -> None:
        with asyncio.Runner(loop_factory=loop_factory()) as runner:
            runner.run(self.serve(ready=ready, announce=announce))

    def start_in_thread(self) -> None:
        """Serve from a background thread (for Flask, Django, scripts); returns once serving."""
        if self._thread is not None:
            raise ExecutorError("executor thread already started")
        ready = threading.Event()
        failure: list[BaseException] = []

        def target() -> None:
            try:
                self._run(lambda _address: ready.set())
            except ConfigError as exc:  # e.g. the port in use: raised to the caller below
                failure.append(exc)
            except BaseException as exc:
                failure.append(exc)
                log.exception("executor thread stopped with an error")
            finally:
                ready.set()

        self._thread = threading.Thread(target=target, name="jobring-executor", daemon=True)
        self._thread.start()
        if not ready.wait(_THREAD_START_TIMEOUT_S):
            raise ExecutorError("executor thread did not start in time")
        if failure:
            self._thread.join()
            self._thread = None
            raise ExecutorError(f"executor failed to start: {failure[0]}") from failure[0]

    def stop(self, timeout: float = 30.0) -> None:
        """Stop a server started by :meth:`start_in_thread` or :meth:`serve` (thread-safe)."""
        stop_serving, loop = self._stop_serving, self._server_loop
        if stop_serving is not None and loop is not None:
            loop.call_soon_threadsafe(stop_serving)
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
            if thread.is_alive():
                raise ExecutorError("executor thread did not stop in time")
            self._thread = None
