"""`jobring db` commands: bring the database schema up to date, adopt XXL-JOB's, show the revision."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any

from jobring.cli.common import UsageError
from jobring.cli.remote import add_json_arg, group_parser, print_json

EXIT_DB_ERROR = 1


def add_database_args(command: argparse.ArgumentParser) -> None:
    """--database-url and --config, as every offline command takes them."""
    command.add_argument(
        "--database-url",
        help="database URL (default: JOBRING_DATABASE_URL, the config file, or ./jobring.db)",
    )
    command.add_argument("--config", help="TOML config file (default: JOBRING_CONFIG)")


def register(sub: Any) -> None:
    """Add this module's commands to the top-level parser."""
    _, commands = group_parser(sub, "db", "the database schema: upgrade (creates the database too), "
                               "current (its revision), adopt (an XXL-JOB database)")
    for name, handler, text in (
        ("upgrade", _upgrade, "create or upgrade the schema; a missing PostgreSQL or MySQL/MariaDB "
                              "database is created when the user may (for an XXL-JOB database prefer "
                              "`db adopt`)"),
        ("current", _current, "show the database's schema revision"),
    ):
        command = commands.add_parser(name, help=text, description=text)
        add_database_args(command)
        add_json_arg(command)
        command.set_defaults(handler=handler)
    text = ("adopt an XXL-JOB 2.1-2.5 database: report what it holds, record its time zone, "
            "upgrade the schema (additive; XXL-JOB keeps working on it). Safe to run again.")
    adopt = commands.add_parser("adopt", help=text, description=text)
    add_database_args(adopt)
    adopt.add_argument("--database-timezone", metavar="ZONE",
                       help="zone XXL-JOB wrote DATETIME columns in: its JDBC serverTimezone, e.g. "
                            "Asia/Shanghai (asked when not given and stdin is a terminal)")
    adopt.add_argument("--executor-token", metavar="TOKEN",
                       help="XXL-JOB's xxl.job.accessToken, to tell how executors keep working "
                            "(never stored)")
    adopt.add_argument("--dry-run", action="store_true", help="print the report; change nothing")
    adopt.set_defaults(handler=_adopt)


def _database_url(args: argparse.Namespace) -> str:
    from jobring.admin.services.settings import load_settings
    from jobring.admin.store import normalize_url  # SQLAlchemy is imported only when used
    from jobring.configbase import ConfigError

    try:
        settings = load_settings(args.config, database_url=args.database_url)
        normalize_url(settings.database_url)
    except (ConfigError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    return settings.database_url


def _source(args: argparse.Namespace) -> str:
    if args.database_url:
        return "--database-url"
    if os.environ.get("JOBRING_DATABASE_URL"):
        return "JOBRING_DATABASE_URL"
    if args.config or os.environ.get("JOBRING_CONFIG"):
        return "the config file"
    return "the default"


def _shown(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def database_url(args: argparse.Namespace) -> str:
    """The database URL from --database-url, --config or the environment; UsageError if bad."""
    return _database_url(args)


def shown_url(url: str) -> str:
    """``url`` with its password hidden."""
    return _shown(url)


def _upgrade(args: argparse.Namespace) -> int:
    from sqlalchemy.exc import SQLAlchemyError

    from jobring.admin.store import upgrade_database
    from jobring.admin.store.createdb import DatabaseMissing, create_missing_database
    from jobring.admin.store.xxl_schema import AdoptionRefused

    url = _database_url(args)
    try:
        created = asyncio.run(create_missing_database(url))
        if created and not args.json:
            print(f"{_shown(url)}: created the database")
        result = asyncio.run(upgrade_database(url))
    except (AdoptionRefused, DatabaseMissing) as exc:
        print(f"jobring: {exc}", file=sys.stderr)
        return EXIT_DB_ERROR
    except (SQLAlchemyError, OSError) as exc:
        print(f"jobring: database upgrade failed for {_shown(url)}: {exc}", file=sys.stderr)
        return EXIT_DB_ERROR
    if args.json:
        print_json({"database": _shown(url), "created": created, "before": result.before,
                    "after": result.after, "changed": result.changed})
    elif result.changed:
        print(f"{_shown(url)}: upgraded schema from {result.before or 'none'} to {result.after}")
    else:
        print(f"{_shown(url)}: schema already at {result.after} (nothing to do)")
    return 0


def _missing_sqlite_file(url: str) -> str | None:
    """The path of a SQLite database file that does not exist (reading it would create it)."""
    from jobring.admin.store import normalize_url

    parsed = normalize_url(url)
    path = parsed.database
    if not parsed.get_backend_name().startswith("sqlite") or not path or path == ":memory:":
        return None
    if path.startswith("file:") or os.path.exists(path):
        return None
    return path


def _current(args: argparse.Namespace) -> int:
    from sqlalchemy.exc import SQLAlchemyError

    from jobring.admin.store import current_revision, head_revision

    url = _database_url(args)
    missing = _missing_sqlite_file(url)
    if missing is not None:
        raise UsageError(f"no database at {missing} (SQLite, from {_source(args)}): give --database-url, "
                         "JOBRING_DATABASE_URL or --config; `jobring db upgrade` creates a new one")
    try:
        revision = asyncio.run(current_revision(url))
    except (SQLAlchemyError, OSError) as exc:
        print(f"jobring: cannot read the schema revision of {_shown(url)}: {exc}", file=sys.stderr)
        return EXIT_DB_ERROR
    head = head_revision()
    if args.json:
        print_json({"database": _shown(url), "revision": revision, "head": head,
                    "up_to_date": revision == head})
        return 0
    state = "up to date" if revision == head else f"behind head {head}; run `jobring db upgrade`"
    print(f"{_shown(url)}: revision {revision or 'none'} ({state})")
    return 0


def _adopt(args: argparse.Namespace) -> int:
    from sqlalchemy.exc import SQLAlchemyError

    from jobring.cli.adopt import run as adopt_run  # loads SQLAlchemy: only for this command

    url = _database_url(args)
    try:
        return adopt_run(url, args.database_timezone, args.executor_token, dry_run=args.dry_run)
    except (SQLAlchemyError, OSError) as exc:
        print(f"jobring: adoption of {_shown(url)} failed: {exc}", file=sys.stderr)
        return EXIT_DB_ERROR
