"""`jobring executor module:attr`: serve an Executor defined in the user's code."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Any

from jobring.cli.common import UsageError, add_log_options


def register(sub: Any) -> None:
    """Add this module's commands to the top-level parser."""
    parser: argparse.ArgumentParser = sub.add_parser(
        "executor",
        help="serve an executor: jobring executor package.module:executor",
        description="Serve the jobring Executor named by MODULE:ATTR. Flags override the "
        "Executor's arguments and JOBRING_EXECUTOR_* environment variables.",
    )
    parser.add_argument("target", metavar="MODULE:ATTR", help="where the Executor object is")
    parser.add_argument("--app-name", dest="app_name")
    parser.add_argument("--admin", dest="admin_addresses", action="append", metavar="URL",
                        help="admin base URL, e.g. http://127.0.0.1:8080/xxl-job-admin/ (repeatable)")
    parser.add_argument("--token", dest="access_token",
                        help="the executor group's access token (admin: jobring groups token APPNAME); "
                        "prefer $JOBRING_EXECUTOR_ACCESS_TOKEN, which other users cannot see")
    parser.add_argument("--host", help="interface to listen on")
    parser.add_argument("--port", type=int, help="port to listen on (0: any free port)")
    parser.add_argument("--address", help="address to register, e.g. http://10.0.0.5:9999/")
    parser.add_argument("--ip", help="IP to register instead of the detected one")
    parser.add_argument("--log-path", dest="log_path", help="folder for run logs and the callback spool")
    parser.add_argument("--log-retention-days", dest="log_retention_days", type=int)
    parser.add_argument("--glue", dest="glue_enabled", action="store_const", const=True,
                        help="allow GLUE script jobs (off by default)")
    parser.add_argument("--allow-open", dest="allow_open", action="store_const", const=True,
                        help="allow running without a token (loopback only)")
    parser.add_argument("--beat-interval", dest="beat_interval_s", type=float, metavar="SECONDS")
    parser.add_argument("--dispatch", choices=("push", "pull", "broker"),
                        help="push (default): the admin calls this executor's port; pull: open no port, "
                             "long-poll the admin for runs; broker: take runs from RabbitMQ "
                             "(--dispatch-broker) and long-poll the admin for the rest (docs/dispatch.md)")
    parser.add_argument("--dispatch-broker", dest="dispatch_broker", metavar="AMQP_URL",
                        help="the broker of --dispatch broker (the admin's JOBRING_DISPATCH_BROKER)")
    add_log_options(parser)
    parser.set_defaults(handler=run_executor)


def load_target(target: str) -> Any:
    """Import ``module:attr`` and return the Executor it names (UsageError otherwise)."""
    from jobring.executor.executor import Executor

    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise UsageError(f"executor target must look like module:attr, got {target!r}")
    # Like `python -m` and uvicorn: modules in the working directory are importable.
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    from jobring.configbase import ConfigError

    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"cannot import {module_name!r}: {exc}") from exc
    except ConfigError as exc:  # an Executor(...) at module level read a bad setting
        raise UsageError(f"invalid settings: {exc}") from None
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as exc:
            raise UsageError(f"{module_name!r} has no attribute {attr!r}") from exc
    if not isinstance(obj, Executor):
        raise UsageError(f"{target} is a {type(obj).__name__}, not a jobring Executor")
    return obj


def run_executor(args: argparse.Namespace) -> int:
    from jobring.configbase import ConfigError  # with pydantic: only when an executor starts
    from jobring.logsetup import log_settings_from_env, setup_logging

    try:
        log_format, log_level = log_settings_from_env()
    except ConfigError as exc:
        raise UsageError(f"invalid settings: {exc}") from None
    # httpx's one line per heartbeat and callback batch is kept at WARNING by the setup.
    setup_logging(args.log_format or log_format, args.log_level or log_level)
    executor = load_target(args.target)
    overrides = {
        name: getattr(args, name)
        for name in ("app_name", "admin_addresses", "access_token", "host", "port", "address", "ip",
                     "log_path", "log_retention_days", "glue_enabled", "allow_open", "beat_interval_s",
                     "dispatch", "dispatch_broker")
    }
    try:
        executor.configure(**overrides)
    except (ConfigError, TypeError) as exc:
        raise UsageError(str(exc)) from exc

    def announce(address: str) -> None:
        # Registration is logged once the admin accepts it ("registered as ..."), not here.
        # On stdout: scripts read the bound port (--port 0) from this line.
        s = executor.settings
        if s.dispatch != "push":
            print(f"jobring executor {s.app_name} polling {', '.join(s.admin_urls())} "
                  f"({s.dispatch} dispatch, no listening port), registering as {address}", flush=True)
            return
        print(f"jobring executor {s.app_name} listening on {s.host}:{executor.bound_port}, "
              f"registering as {address}", flush=True)

    try:
        # The line above is the one "listening on" line: the executor does not log its own.
        executor.run(ready=announce, exit_on_error=False, announce=False)
    except ConfigError as exc:
        raise UsageError(str(exc)) from exc
    print("jobring executor stopped", file=sys.stderr, flush=True)
    return 0
