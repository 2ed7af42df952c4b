"""`jobring jobs backfill ID ...`: fill in a job's past instants (the API's /jobs/{id}/backfill),
list a job's backfills with their progress, show or cancel one."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from jobring.cli.common import UsageError
from jobring.cli.remote import epoch_ms_text, positive_int, print_json, print_table, remote_parser, run_remote
from jobring.client import AdminClient


def _progress(b: Mapping[str, Any]) -> str:
    return (f"{b.get('succeeded', 0)} succeeded, {b.get('failed', 0)} failed, {b.get('running', 0)} running, "
            f"{b.get('started', 0)}/{b.get('total', 0)} started")


def _backfill(args: argparse.Namespace) -> int:
    ranged = args.start is not None or args.end is not None
    if ranged == bool(args.date):
        raise UsageError("give --start and --end, or --date (repeatable)")
    if ranged and (args.start is None or args.end is None):
        raise UsageError("--start and --end go together")
    dates = [d.strip() for text in args.date or [] for d in text.split(",") if d.strip()]

    def action(admin: AdminClient) -> int:
        result = admin.jobs.backfill(
            args.job_id, start=args.start, end=args.end, dates=dates or None,
            order="newest_first" if args.newest_first else "oldest_first", parallelism=args.parallelism,
            honour_calendars=args.honour_calendars, dry_run=args.dry_run)
        if args.json:
            print_json(result)
            return 0
        for skipped in result.get("skipped") or []:
            print(f"{epoch_ms_text(skipped['instant'])} UTC  skipped: {skipped['reason']}")
        if args.dry_run:
            for instant in result.get("instants") or []:
                start = instant.get("interval_start")
                since = "" if start is None else f"  (data since {epoch_ms_text(start)} UTC)"
                print(f"{epoch_ms_text(instant['logical'])} UTC{since}")
            print(f"dry run: {result['total']} runs, at most {result['parallelism']} at once, "
                  f"{result['order'].replace('_', ' ')}")
        else:
            print(f"backfill {result['id']} of job {args.job_id} started: {result['total']} runs, at most "
                  f"{result['parallelism']} at once ('jobring jobs backfills {args.job_id}' shows progress)")
        return 0

    return run_remote(args, action)


def _backfills(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        if args.cancel is not None:
            cancelled = admin.jobs.cancel_backfill(args.cancel)
            print(f"backfill {args.cancel} cancelled: {_progress(cancelled)}")
            return 0
        if args.show is not None:
            found = [admin.jobs.get_backfill(args.show)]
        else:
            found = admin.jobs.backfills(args.job_id)
        if args.json:
            print_json(found)
            return 0
        print_table(found, (("ID", "id"), ("STATUS", "status"), ("PROGRESS", _progress),
                            ("ORDER", "order"), ("CAP", "parallelism"), ("BY", "created_by"),
                            ("CREATED (UTC)", lambda b: epoch_ms_text(b.get("created_at")))))
        return 0

    return run_remote(args, action)


def register_backfill(commands: Any) -> None:
    """``jobs backfill`` and ``jobs backfills`` under the ``jobs`` command group."""
    fill = remote_parser(commands, "backfill", "run a job for past instants: a range or dates "
                         "(--dry-run lists them)")
    fill.add_argument("job_id", type=positive_int, metavar="ID")
    fill.add_argument("--start", metavar="ISO", help="first instant (ISO 8601 with an offset, or epoch ms)")
    fill.add_argument("--end", metavar="ISO", help="last instant, included")
    fill.add_argument("--date", action="append", metavar="YYYY-MM-DD",
                      help="every instant of this local day (repeatable, or comma-separated)")
    fill.add_argument("--newest-first", action="store_true", help="start the newest instant first")
    fill.add_argument("--parallelism", type=positive_int, default=1, metavar="N",
                      help="runs of the backfill in progress at once (1-64, default 1)")
    fill.add_argument("--honour-calendars", action="store_true",
                      help="skip the instants the job's calendars exclude")
    fill.add_argument("--dry-run", action="store_true", help="list the instants, start nothing")
    fill.set_defaults(handler=_backfill)

    listing = remote_parser(commands, "backfills", "a job's backfills and their progress; show or cancel one")
    listing.add_argument("job_id", type=positive_int, metavar="ID")
    choice = listing.add_mutually_exclusive_group()
    choice.add_argument("--show", type=positive_int, metavar="BACKFILL_ID", help="only this backfill")
    choice.add_argument("--cancel", type=positive_int, metavar="BACKFILL_ID",
                        help="cancel it: no further instant starts (runs in progress finish)")
    listing.set_defaults(handler=_backfills)
