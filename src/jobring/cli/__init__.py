"""The ``jobring`` command line. Each command group lives in its own module."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from jobring.cli import admin as admin_cmd
from jobring.cli import audit as audit_cmd
from jobring.cli import cron as cron_cmd
from jobring.cli import db as db_cmd
from jobring.cli import executor as executor_cmd
from jobring.cli import groups as groups_cmd
from jobring.cli import jobs as jobs_cmd
from jobring.cli import runs as runs_cmd
from jobring.cli import tokens as tokens_cmd
from jobring.cli.common import EXIT_USAGE, UsageError

_GROUPS = (admin_cmd, cron_cmd, db_cmd, executor_cmd, jobs_cmd, runs_cmd, groups_cmd, tokens_cmd, audit_cmd)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jobring",
        description="jobring: distributed job scheduling, XXL-JOB compatible.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for group in _GROUPS:
        group.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Callable[[argparse.Namespace], int] | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        return handler(args)
    except UsageError as exc:
        print(f"jobring: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
