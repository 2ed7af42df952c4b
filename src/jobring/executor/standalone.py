"""The standalone executor: its ways to serve (own HTTP server, pull, a background thread)
and their process-level helpers: event loop, listening socket, default logging, stop signals,
GC tuning (:class:`StandaloneServing` is a base of :class:`jobring.executor.executor.Executor`)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from jobring.configbase import ConfigError
from jobring.errors import JobringError
from jobring.executor.config import ExecutorSettings, check_security
from jobring.executor.http.limits import ServerLimits
from jobring.executor.http.protocol import ExecutorHttpServer
from jobring.listen import PortInUse, listen_socket
from jobring.protocol.edge import HeadLimits

if TYPE_CHECKING:
    from jobring.executor.http.app import ExecutorEndpoints

log = logging.getLogger("jobring.executor")
_THREAD_START_TIMEOUT_S = 30.0


class ExecutorError(JobringError, RuntimeError):
    """The executor cannot do what was asked in its current state."""


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop when it is installed, else None (asyncio's default)."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def tune_gc() -> None:
    """Once a standalone executor serves (it owns its process): what was built so far
    (modules, handlers, settings) is frozen out of the cyclic GC's walks, and the young
    generation is larger, so that a run's short-lived objects (a context, a writer, futures)
    die by reference counting before a collection walks them. With the defaults, collections
    took 3-15 µs per run under load (bench/RESULTS.md, issue 27); the admin does the same
    (admin/runtime/node.py). Not done for an executor embedded in another process."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 50, 100)


def with_port(s: ExecutorSettings, detected_ip: str, port: int) -> str:
    """The address to register for the port actually bound (``port=0`` picks one)."""
    return s.model_copy(update={"port": port}).base_address(detected_ip)


def port_hint(port: int, in_code: bool) -> str:
    if in_code:  # the environment cannot help: an argument wins over it
        return (f"port={port} is given to Executor(...) in the code, which wins over "
                "JOBRING_EXECUTOR_PORT: change or remove it there (or pass --port to `jobring executor`)")
    return "set JOBRING_EXECUTOR_PORT, pass --port to `jobring executor`, or port=... to Executor"


def bind_socket(host: str, port: int, *, in_code: bool = False) -> socket.socket:
    try:
        sock = listen_socket(host, port, hint=port_hint(port, in_code))
    except PortInUse:
        raise
    except OSError as exc:
        raise ConfigError(f"executor cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    sock.setblocking(False)
    return sock


@contextlib.contextmanager
def default_logging() -> Iterator[None]:
    """INFO lines of jobring to stderr for a script that configured no logging (else
    ``python jobs.py`` would print nothing, not even where it listens)."""
    jobring_log = logging.getLogger("jobring")
    if logging.getLogger().handlers or jobring_log.handlers:
        yield
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    level = jobring_log.level
    jobring_log.addHandler(handler)
    if level == logging.NOTSET:
        jobring_log.setLevel(logging.INFO)
    try:
        yield
    finally:
        jobring_log.removeHandler(handler)
        jobring_log.setLevel(level)


def install_signal_handlers(stop: Callable[[], None]) -> list[signal.Signals]:
    if threading.current_thread() is not threading.main_thread():
        return []
    loop = asyncio.get_running_loop()
    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop)
            installed.append(sig)
    return installed


class StandaloneServing:
    """How an :class:`~jobring.executor.executor.Executor` serves on its own: :meth:`serve`
    (in a running loop), :meth:`run` (blocking, the process's), :meth:`start_in_thread` and
    :meth:`stop` (beside a WSGI app)."""

    settings: ExecutorSettings
    address: str | None
    bound_port: int | None
    _in_code: set[str]
    _stop_serving: Callable[[], None] | None
    _server_loop: asyncio.AbstractEventLoop | None
    _thread: threading.Thread | None

    if TYPE_CHECKING:  # the Executor's own
        def asgi_app(self) -> ExecutorEndpoints: ...

        async def startup(self, *, binds: bool = True, port: int | None = None) -> None: ...

        async def shutdown(self) -> None: ...

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
        Uses uvloop when it is installed; tunes the cyclic GC once serving (see
        :func:`~jobring.executor.standalone.tune_gc`). ``announce=False``: no "listening on" log line
        (``ready`` prints its own, as ``jobring executor`` does).
        """
        def serving(address: str) -> None:
            tune_gc()  # this process is the executor's: see tune_gc
            if ready is not None:
                ready(address)

        with default_logging():
            try:
                self._run(serving, announce)
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
