"""The job fields as command-line options, shared by `jobs add` (create) and `jobs edit`
(a partial update: only the options given change)."""

from __future__ import annotations

import argparse
from typing import Any

from jobring.cli.common import UsageError
from jobring.cli.remote import group_ref, positive_int
from jobring.core.enums import BlockStrategy, MisfireStrategy, RouteStrategy

ROUTES = [r.value for r in RouteStrategy]
BLOCKS = [b.value for b in BlockStrategy]
MISFIRES = [m.value for m in MisfireStrategy]


def non_negative_int(text: str) -> int:
    """argparse type: a whole number >= 0."""
    return positive_int(text) if text.strip() != "0" else 0


def _child_ids(text: str) -> list[int]:
    return [positive_int(part.strip()) for part in text.split(",") if part.strip()]


def add_job_options(parser: argparse.ArgumentParser, *, creating: bool) -> None:
    """Every writable job field as an option; on create the group, description, handler
    and schedule are required."""
    parser.add_argument("--group", type=group_ref, required=creating, metavar="GROUP",
                        help="executor group: its appname or id")
    parser.add_argument("--desc", required=creating, help="what the job does")
    parser.add_argument("--handler", dest="executor_handler", required=creating, metavar="NAME",
                        help="the executor's handler name (@executor.job(NAME))")
    schedule = parser.add_mutually_exclusive_group(required=creating)
    schedule.add_argument("--cron", metavar="EXPR",
                          help='Quartz cron expression, seconds first: "0 */5 * * * ?"')
    schedule.add_argument("--fix-rate", type=positive_int, metavar="SECONDS", help="fire every SECONDS")
    schedule.add_argument("--none", action="store_true", help="no schedule: runs only when triggered")
    parser.add_argument("--timezone", metavar="ZONE", help="IANA time zone of --cron (default: the admin's)")
    parser.add_argument("--param", help="the handler's parameter (ctx.params)")
    parser.add_argument("--route", choices=ROUTES, metavar="STRATEGY",
                        help=f"routing strategy: {', '.join(ROUTES)} (default FIRST)")
    parser.add_argument("--block", choices=BLOCKS, metavar="STRATEGY",
                        help=f"when the previous run still runs: {', '.join(BLOCKS)} "
                             "(default SERIAL_EXECUTION)")
    parser.add_argument("--misfire", choices=MISFIRES, metavar="STRATEGY",
                        help=f"a fire missed while the admin was down: {', '.join(MISFIRES)} "
                             "(default DO_NOTHING)")
    parser.add_argument("--timeout", type=non_negative_int, metavar="SECONDS",
                        help="stop a run after SECONDS (0: no timeout)")
    parser.add_argument("--retries", type=non_negative_int, metavar="N", help="retry a failed run N times")
    parser.add_argument("--alarm-email", metavar="ADDRESSES",
                        help="comma-separated e-mails alarmed on failure")
    parser.add_argument("--child", type=_child_ids, action="append", metavar="JOB_IDS",
                        help="job(s) to trigger after a success: comma list, repeatable (edit: '' clears)")
    parser.add_argument("--author", help="who owns the job")
    if not creating:
        parser.add_argument("--managed-by", dest="managed_by", choices=("code", "console"),
                            help="admin only: code lets the executor's declared jobs manage this job; "
                                 "console takes it back")


def schedule_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The schedule the options give (empty when none is given, for an edit)."""
    if args.fix_rate is not None and args.timezone is not None:
        raise UsageError("--timezone applies to --cron only: a fixed rate runs every N seconds in any zone")
    if args.cron is not None:
        return {"schedule_type": "CRON", "schedule_conf": args.cron}
    if args.fix_rate is not None:
        return {"schedule_type": "FIX_RATE", "schedule_conf": str(args.fix_rate)}
    if args.none:
        return {"schedule_type": "NONE", "schedule_conf": None}
    return {}


def job_fields(args: argparse.Namespace, group_id: int | None) -> dict[str, Any]:
    """The API job fields the options set (group already resolved to its id)."""
    for option, value in (("--desc", args.desc), ("--handler", args.executor_handler)):
        if value is not None and not value.strip():
            raise UsageError(f"{option} must not be empty")
    fields: dict[str, Any] = schedule_fields(args)
    optional = {
        "job_group": group_id, "job_desc": args.desc, "executor_handler": args.executor_handler,
        "schedule_timezone": args.timezone, "executor_param": args.param,
        "executor_route_strategy": args.route, "executor_block_strategy": args.block,
        "misfire_strategy": args.misfire, "executor_timeout": args.timeout,
        "executor_fail_retry_count": args.retries, "alarm_email": args.alarm_email, "author": args.author,
        "managed_by": getattr(args, "managed_by", None),
    }
    fields.update({key: value for key, value in optional.items() if value is not None})
    if args.child is not None:
        fields["child_job_ids"] = [job_id for ids in args.child for job_id in ids]
    return fields
