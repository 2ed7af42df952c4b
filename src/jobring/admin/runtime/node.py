"""Run one admin node as a process: uvicorn serving the admin app, graceful on SIGINT/SIGTERM.

On a signal uvicorn stops accepting connections and finishes open requests; the app's
lifespan then stops the scheduling loop (no new claims, in-flight fires finished and
recorded, leases released), stops the monitors and closes the database. The process then
exits 0. A second Ctrl-C forces the exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import socket
import sys
import threading
import time
from collections.abc import Generator
from typing import TextIO

import uvicorn
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from jobring.admin.runtime.app import create_app
from jobring.admin.runtime.http_server import guarded_protocol
from jobring.admin.security.secrets_policy import trusted_proxy_networks
from jobring.admin.services.adopt import resolve_database_state
from jobring.admin.services.coexist import JavaAdminAlive, refuse_if_java_admin_alive
from jobring.admin.services.settings import AdminSettings
from jobring.admin.store import Store, current_revision, head_revision
from jobring.configbase import ConfigError
from jobring.protocol.edge import HeadLimits

log = logging.getLogger(__name__)

_HANDLED = (signal.SIGINT, signal.SIGTERM)


class _Server(uvicorn.Server):
    """uvicorn's server without re-raising the stop signal after a graceful shutdown
    (which would turn a clean SIGTERM stop into a non-zero exit)."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        # Everything built so far (modules, the app, caches) lives as long as the process.
        # Frozen, the cyclic GC no longer walks it: a full collection would otherwise hold
        # the event loop for 100+ ms every few seconds under load and delay due fires.
        gc.collect()
        gc.freeze()
        # Fires recorded ahead live ~2.5 s: with the default thresholds they reach the oldest
        # generation and full collections (25-60 ms) come every few seconds. Larger young
        # generations let them die young; measured pauses stay under ~15 ms.
        gc.set_threshold(20_000, 50, 100)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        # Long polls of pull executors return now: the graceful stop waits for open requests.
        runtime = getattr(getattr(self.config.app, "state", None), "runtime", None)
        hub = getattr(getattr(runtime, "executors", None), "pull", None)
        if hub is not None:
            hub.release()
        await super().shutdown(sockets)

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        original = {sig: signal.signal(sig, self.handle_exit) for sig in _HANDLED}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)


async def preflight(settings: AdminSettings) -> str | None:
    """Why the node cannot start (database unreachable, schema missing or behind while
    upgrades are off), as one line; None when it can."""
    shown = make_url(settings.database_url).render_as_string(hide_password=True)
    try:
        revision = await current_revision(settings.database_url)
    except (SQLAlchemyError, OSError) as exc:
        return f"cannot reach the database {shown}: {exc}"
    head = head_revision()
    if not settings.auto_upgrade and revision != head:
        return (f"the database {shown} has schema revision {revision or 'none'}, this version needs "
                f"{head}; run `jobring db upgrade` or start without --no-upgrade")
    if revision == head:  # else the lifespan checks once it has upgraded
        return await _coexistence_problem(settings)
    return None


async def _coexistence_problem(settings: AdminSettings) -> str | None:
    # Said in one line before serving; the lifespan checks again (another admin may start meanwhile).
    store = await Store.open(settings.database_url, upgrade=False)
    try:
        state = await resolve_database_state(store, settings.database_timezone, settings.timezone)
        await refuse_if_java_admin_alive(store, int(time.time() * 1000), state.legacy_log_id_max,
                                         takeover=settings.takeover)
    except (JavaAdminAlive, ConfigError) as exc:
        return str(exc)
    except (SQLAlchemyError, OSError) as exc:
        return f"cannot read the database: {exc}"
    finally:
        await store.close()
    return None


def serve(
    settings: AdminSettings, *, out: TextIO | None = None, log_level: str = "info",
    sock: socket.socket | None = None,
) -> int:
    """Serve until stopped (on ``sock`` when given, already bound); returns the process exit
    code (0 after a clean stop, 1 when the node could not start, e.g. database unreachable
    or schema behind with upgrades off)."""
    problem = asyncio.run(preflight(settings))
    if problem is not None:
        print(f"jobring: error: {problem}", file=sys.stderr, flush=True)
        return 1
    app = create_app(settings, out=out)
    # uvicorn believes X-Forwarded-For from 127.0.0.1 by default, which let any local process
    # (or a proxy that passes the header through) pick its address for the login limiter.
    proxies = [str(network) for network in trusted_proxy_networks(settings)]
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        lifespan="on",
        log_level=log_level,
        access_log=False,
        # uvicorn's lines go through the process's logging setup (plain or JSON) too.
        log_config=None,
        timeout_graceful_shutdown=10,
        loop="auto",
        http=guarded_protocol(HeadLimits(
            max_request_line=settings.max_request_line_bytes,
            max_header_bytes=settings.max_header_bytes,
            head_timeout_s=settings.header_timeout,
        )),
        proxy_headers=bool(proxies),
        forwarded_allow_ips=proxies or None,
    )
    server = _Server(config)
    server.run(sockets=[sock] if sock is not None else None)
    if not server.started:
        log.error("the admin node did not start (see the errors above)")
        return 1
    return 0
