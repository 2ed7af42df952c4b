# PYTHON_ARGCOMPLETE_OK
"""The ``jobring`` command line. Each command group lives in its own module."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

import argcomplete

from jobring.cli import admin as admin_cmd
from jobring.cli import audit as audit_cmd
from jobring.cli import calendars as calendars_cmd
from jobring.cli import cron as cron_cmd
from jobring.cli import db as db_cmd
from jobring.cli import executor as executor_cmd
from jobring.cli import groups as groups_cmd
from jobring.cli import jobs as jobs_cmd
from jobring.cli import runs as runs_cmd
from jobring.cli import settings as settings_cmd
from jobring.cli import tokens as tokens_cmd
from jobring.cli import users as users_cmd
from jobring.cli import workflows as workflows_cmd
from jobring.cli.common import ADMIN_LIBRARIES, EXIT_USAGE, UsageError
from jobring.cli.examples import add_examples

_GROUPS = (admin_cmd, cron_cmd, db_cmd, executor_cmd, jobs_cmd, runs_cmd, groups_cmd, calendars_cmd,
           users_cmd, tokens_cmd, settings_cmd, audit_cmd, workflows_cmd)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jobring",
        description="jobring: distributed job scheduling, XXL-JOB compatible.",
    )
    # Also before the command (`jobring --url X runs list`): own dests, because a subcommand's
    # defaults (None) would overwrite a value parsed here under the same name.
    parser.add_argument("--url", dest="global_url", metavar="URL",
                        help="the admin's address, for commands that talk to one (also after the command)")
    parser.add_argument("--token", dest="global_token", metavar="TOKEN", help="API token (as --url)")
    parser.add_argument("--json", dest="global_json", action="store_true",
                        help="machine-readable output (as --url)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for group in _GROUPS:
        group.register(sub)
    add_examples(parser)
    return parser


_GLOBAL_OPTIONS = (("global_url", "url", "--url"), ("global_token", "token", "--token"),
                   ("global_json", "json", "--json"))


def apply_global_options(args: argparse.Namespace) -> None:
    """Hand the options given before the command to it; the ones after it win. UsageError
    when the command does not take such an option (`jobring --url X cron next ...`)."""
    for global_dest, dest, option in _GLOBAL_OPTIONS:
        value = getattr(args, global_dest, None)
        if not value:
            continue
        if not hasattr(args, dest):
            raise UsageError(f"{option} does not apply to this command (see its --help)")
        if not getattr(args, dest):
            setattr(args, dest, value)


def _stdout_closed() -> int:
    """The reader of our output went away (``jobring runs list | head -2``): as the Python
    docs advise, point stdout at devnull so the exit flush cannot fail again, and end quietly."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout without a file descriptor (captured in tests)
        pass
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argcomplete.autocomplete(parser)  # answers shell completion requests, else does nothing
    args = parser.parse_args(argv)
    handler: Callable[[argparse.Namespace], int] | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        apply_global_options(args)
        code = handler(args)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit flush
        return code
    except BrokenPipeError:
        return _stdout_closed()
    except UsageError as exc:
        print(f"jobring: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ModuleNotFoundError as exc:
        missing = (exc.name or "").split(".")[0]
        if missing not in ADMIN_LIBRARIES:
            raise
        print(f"jobring: error: this command needs the admin's libraries ({missing} is not installed): "
              "pip install 'jobring[admin]'", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
