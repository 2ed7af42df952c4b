"""The standalone executor's process-level helpers: event loop, listening socket, default
logging, stop signals (used by :class:`jobring.executor.executor.Executor`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator

from jobring.configbase import ConfigError
from jobring.executor.config import ExecutorSettings
from jobring.listen import PortInUse, listen_socket


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop when it is installed, else None (asyncio's default)."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


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
