"""What every command module shares."""

from __future__ import annotations

import argparse
import getpass
import os
import sys

from jobring.errors import JobringError

EXIT_USAGE = 2
# Libraries of `pip install 'jobring[admin]'`: a command that needs one says so when it is missing.
ADMIN_LIBRARIES = frozenset({
    "sqlalchemy", "alembic", "aiosqlite", "asyncpg", "aiomysql", "starlette", "fastapi", "uvicorn",
    "argon2", "prometheus_client", "icalendar", "dateutil",
})


class UsageError(JobringError):
    """Bad input on the command line: printed to stderr, exit code 2."""


def has_terminal() -> bool:
    """Whether a password prompt can be answered: getpass reads the controlling terminal
    (/dev/tty), else standard input."""
    try:
        with open("/dev/tty", "rb"):
            return True
    except OSError:
        return sys.stdin is not None and sys.stdin.isatty()


def ask_password(prompt: str, env_name: str) -> str:
    """$``env_name`` when set, else a prompt on the terminal; without one (a script, a
    container, CI) a UsageError naming the variable instead of a traceback."""
    from_env = os.environ.get(env_name)
    if from_env:
        return from_env
    missing = UsageError(f"no terminal to ask for the password ({prompt.rstrip(': ')}): set {env_name}")
    if not has_terminal():
        raise missing
    try:
        return getpass.getpass(prompt)
    except EOFError:  # the terminal closed (Ctrl-D)
        raise missing from None


LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


def log_level_arg(text: str) -> str:
    """argparse type of --log-level, as `jobring admin` and `jobring executor` take it: any
    case (info, INFO), given back upper case as logging names levels."""
    if text.strip().lower() not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(LOG_LEVELS)} (any case), got {text!r}")
    return text.strip().upper()


def add_log_options(parser: argparse.ArgumentParser) -> None:
    """--log-level and --log-format, the same for every command that serves."""
    parser.add_argument("--log-level", default=None, type=log_level_arg, metavar="LEVEL",
                        help=f"{', '.join(LOG_LEVELS)}, any case (default: JOBRING_LOG_LEVEL, else info)")
    parser.add_argument("--log-format", default=None, choices=("plain", "json"),
                        help="log lines as plain text or JSON (default: JOBRING_LOG_FORMAT, else plain)")
