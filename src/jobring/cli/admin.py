"""`jobring admin` (one admin node) and `jobring run` (the local all-in-one start)."""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from jobring.cli.common import UsageError, add_log_options
from jobring.listen import PortInUse, listen_socket

if TYPE_CHECKING:  # pydantic is imported only by the commands that read settings
    from jobring.admin.services.settings import AdminSettings

# Not the executors' default 9999: one's own first executor must not collide with the demo.
DEMO_PORT = 9990
DEMO_PORT_ENV = "JOBRING_DEMO_PORT"


def register(sub: Any) -> None:
    """Add this module's commands to the top-level parser."""
    admin: argparse.ArgumentParser = sub.add_parser(
        "admin", help="run an admin node (scheduling center): HTTP API, scheduling loop, monitors",
        description="Run one admin node. Several nodes may share a PostgreSQL or MySQL/MariaDB database.",
    )
    _add_options(admin)
    admin.set_defaults(handler=_admin)
    run: argparse.ArgumentParser = sub.add_parser(
        "run", help="run jobring locally: an admin node on SQLite (./jobring.db by default)",
        description="Run jobring locally with zero set-up: an admin node on the SQLite default database.",
    )
    _add_options(run)
    run.add_argument("--no-demo", action="store_true",
                     help="do not seed the demo jobs nor start the demo executor")
    run.add_argument("--demo-port", type=int, default=None,
                     help=f"the demo executor's port on 127.0.0.1 (default: ${DEMO_PORT_ENV} or {DEMO_PORT})")
    run.set_defaults(handler=_run)


def _add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="TOML config file (default: JOBRING_CONFIG)")
    parser.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port to listen on (default 8080)")
    parser.add_argument("--database-url", help="database URL (default: ./jobring.db, SQLite)")
    parser.add_argument("--no-upgrade", action="store_true",
                        help="do not migrate the database schema at start")
    parser.add_argument("--insecure", action="store_true",
                        help="accept weak configured secrets (JOBRING_INSECURE); warns at every start")
    parser.add_argument("--takeover", action="store_true",
                        help="schedule even though XXL-JOB's admin seems alive on the database "
                             "(JOBRING_TAKEOVER; stop it first: both would fire every job)")
    add_log_options(parser)


def validate_settings(settings: AdminSettings) -> None:
    """Check what the settings fields do not (port, database URL, zones, base path, secrets,
    trusted proxies); raises ConfigError. Types and ranges are checked by :func:`load_settings`."""
    from jobring.configbase import ConfigError

    if not 1 <= settings.port <= 65535:
        raise ConfigError(f"port: must be 1-65535, got {settings.port}")
    from jobring.admin.store import normalize_url  # SQLAlchemy: only when a node starts

    try:
        normalize_url(settings.database_url)
    except ValueError as exc:
        raise ConfigError(f"database_url: {exc}") from None
    for name in ("timezone", "database_timezone"):
        zone = getattr(settings, name)
        if zone is None or zone.upper() == "UTC":
            continue
        try:
            ZoneInfo(zone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ConfigError(f"{name}: unknown time zone {zone!r}") from None
    if not settings.base_path.startswith("/"):
        raise ConfigError(f"base_path: must start with '/', got {settings.base_path!r}")
    # Not a field constraint: code and tests build settings below it (retention applies 7).
    if settings.audit_retention_days < 7:
        raise ConfigError(f"audit_retention_days: must be at least 7, got {settings.audit_retention_days}")
    from jobring.admin.security.secrets_policy import check_secret_policy, trusted_proxy_networks

    trusted_proxy_networks(settings)
    check_secret_policy(settings)


def settings_from_args(args: argparse.Namespace) -> AdminSettings:
    """Settings from defaults, the config file, JOBRING_* and the options; UsageError if invalid."""
    from jobring.admin.services.settings import load_settings
    from jobring.configbase import ConfigError

    try:
        settings = load_settings(
            args.config,
            host=args.host,
            port=args.port,
            database_url=args.database_url,
            auto_upgrade=False if args.no_upgrade else None,
            insecure=True if args.insecure else None,
            takeover=True if args.takeover else None,
            log_level=args.log_level,
            log_format=args.log_format,
        )
        validate_settings(settings)
    except ConfigError as exc:
        raise UsageError(f"invalid settings: {exc}") from None
    return settings


def _bind(settings: AdminSettings) -> socket.socket:
    """The admin's socket, taken before anything else starts (a taken port fails at once,
    before a password is printed)."""
    try:
        return listen_socket(settings.host, settings.port)
    except PortInUse:
        raise UsageError(f"port {settings.port} is in use: pass --port or set JOBRING_PORT") from None
    except OSError as exc:
        raise UsageError(f"cannot listen on {settings.host}:{settings.port}: {exc.strerror or exc}") from None


def _serve(settings: AdminSettings, sock: socket.socket, *, log_address: bool = False) -> int:
    # Imported here so `jobring --help` and the other commands stay light.
    import logging

    from jobring.admin.runtime.app import make_node_id
    from jobring.admin.runtime.node import serve
    from jobring.logsetup import set_log_node, setup_logging

    if settings.node_id is None:
        # One id for the whole process, so the log lines and the leases name the same node.
        settings = settings.model_copy(update={"node_id": make_node_id(settings)})
    setup_logging(settings.log_format, settings.log_level)
    set_log_node(settings.node_id)
    if log_address:
        # Uvicorn says nothing of a socket it is handed: the node's one line about where it is.
        logging.getLogger("jobring.admin").info("%s", _where(settings))
    return serve(settings, log_level=settings.log_level.lower(), sock=sock)


def _admin(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    return _serve(settings, _bind(settings), log_address=True)


def _where(settings: AdminSettings) -> str:
    from sqlalchemy.engine import make_url

    host = f"[{settings.host}]" if ":" in settings.host else settings.host
    return (f"admin at http://{host}:{settings.port}/ "
            "(health: /health, /ready, metrics: /metrics, API docs: /api/v1/docs), database "
            f"{make_url(settings.database_url).render_as_string(hide_password=True)}")


def _banner(settings: AdminSettings) -> None:
    print(f"jobring: {_where(settings)}; Ctrl-C to stop", file=sys.stderr, flush=True)


def demo_port(given: int | None) -> int:
    """The demo executor's port: --demo-port, else $JOBRING_DEMO_PORT, else 9990."""
    source, text = ("--demo-port", str(given)) if given is not None else (
        DEMO_PORT_ENV, os.environ.get(DEMO_PORT_ENV, "").strip())
    if not text:
        return DEMO_PORT
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise UsageError(f"{source}: must be a port 1-65535, got {text!r}")
    return int(text)


def _run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    args.demo_port = demo_port(args.demo_port)
    # Both ports first: a taken one stops the start before any password is printed.
    sock = _bind(settings)
    try:
        if args.no_demo:
            _banner(settings)
            return _serve(settings, sock)
        return _run_with_demo(args, settings, sock)
    finally:
        sock.close()


def _run_with_demo(args: argparse.Namespace, settings: AdminSettings, sock: socket.socket) -> int:
    from jobring.cli.local import DemoFailed, demo_port_free, prepare_local, start_demo_executor, stop_process

    if not demo_port_free(args.demo_port):
        raise UsageError(f"port {args.demo_port} (the demo executor's) is in use: pass --demo-port "
                         f"(or set {DEMO_PORT_ENV}), or --no-demo to start without the demo")
    try:
        # Bootstrap here (idempotent; the node repeats it) so the demo executor gets the token.
        token = asyncio.run(prepare_local(settings, args.demo_port))
    except Exception as exc:  # noqa: BLE001 - reported as one line, the node would fail the same way
        print(f"jobring: error: cannot prepare the database: {exc}", file=sys.stderr)
        return 1
    try:
        demo = start_demo_executor(settings, token, args.demo_port)
    except DemoFailed as exc:
        print(f"jobring: error: {exc}", file=sys.stderr)
        return 1
    _banner(settings)
    try:
        return _serve(settings, sock)
    finally:
        stop_process(demo)
