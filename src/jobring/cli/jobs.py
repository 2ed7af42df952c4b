"""`jobring jobs ...`: list, add, trigger, start and stop jobs on a running admin."""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from jobring.cli.common import UsageError
from jobring.cli.remote import (
    EXIT_FAILURE,
    add_connection_args,
    add_json_arg,
    epoch_ms_text,
    group_parser,
    positive_int,
    print_json,
    print_page_json,
    print_table,
    run_remote,
)
from jobring.client import AdminClient
from jobring.core.enums import RouteStrategy

_STATUS_CODES = {"running": 1, "stopped": 0}


def _schedule(job: Mapping[str, Any]) -> str:
    kind = job.get("schedule_type") or "NONE"
    if kind == "FIX_RATE":
        return f"every {job.get('schedule_conf')}s"
    if kind == "CRON":
        zone = f" ({job['schedule_timezone']})" if job.get("schedule_timezone") else ""
        return f"cron {job.get('schedule_conf')}{zone}"
    return "none"


def _status(job: Mapping[str, Any]) -> str:
    return "running" if job.get("trigger_status") == 1 else "stopped"


_JOB_COLUMNS = (
    ("ID", "id"),
    ("GROUP", "job_group"),
    ("DESCRIPTION", "job_desc"),
    ("HANDLER", lambda job: job.get("executor_handler") or job.get("glue_type")),
    ("SCHEDULE", _schedule),
    ("STATUS", _status),
    ("DECLARED", lambda job: "in code" if job.get("declared_by_executor") else None),
    ("NEXT FIRE (UTC)", lambda job: epoch_ms_text(job.get("trigger_next_time")) if _status(job) == "running"
     else None),
)


def _list(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        page = admin.jobs.list(
            group=args.group, trigger_status=_STATUS_CODES.get(args.status or ""), desc=args.search,
            handler=args.executor_handler, offset=args.offset, limit=args.limit,
        )
        if args.json:
            print_page_json(page)
            return 0
        print_table(page.items, _JOB_COLUMNS)
        shown = len(page.items)
        if page.total > page.offset + shown:
            print(f"({shown} of {page.total} jobs shown; use --offset/--limit for more)")
        return 0

    return run_remote(args, action)


def _schedule_fields(args: argparse.Namespace) -> dict[str, Any]:
    if args.cron is not None:
        return {"schedule_type": "CRON", "schedule_conf": args.cron}
    if args.fix_rate is not None:
        return {"schedule_type": "FIX_RATE", "schedule_conf": str(args.fix_rate)}
    return {"schedule_type": "NONE", "schedule_conf": None}


def _add(args: argparse.Namespace) -> int:
    if not args.desc.strip():
        raise UsageError("--desc must not be empty")
    if not args.executor_handler.strip():
        raise UsageError("--handler must not be empty")
    if args.start and args.none:
        raise UsageError("--start needs a schedule (--cron or --fix-rate); --none jobs run only by trigger")
    fields: dict[str, Any] = {
        "job_group": args.group, "job_desc": args.desc, "executor_handler": args.executor_handler,
        **_schedule_fields(args),
    }
    optional = {"executor_param": args.param, "executor_route_strategy": args.route,
                "schedule_timezone": args.timezone, "author": args.author}
    fields.update({key: value for key, value in optional.items() if value is not None})

    def action(admin: AdminClient) -> int:
        job = admin.jobs.create(fields)
        if args.start:
            job = admin.jobs.start(job["id"])
        if args.json:
            print_json(job)
        else:
            print(f"created job {job['id']} ({_describe_state(job)})")
        return 0

    return run_remote(args, action)


def _describe_state(job: Mapping[str, Any]) -> str:
    if _status(job) == "stopped":
        return "stopped"
    next_fire = epoch_ms_text(job.get("trigger_next_time"))
    return f"running, next fire {next_fire} UTC" if next_fire else "running"


_DURATION = re.compile(r"^(\d+)(ms|s|m|h|d)$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def _duration(text: str) -> timedelta:
    match = _DURATION.match(text.strip())
    if not match or int(match.group(1)) == 0:
        raise argparse.ArgumentTypeError(f"expected a duration such as 90s, 10m, 2h or 1d, got {text!r}")
    return timedelta(milliseconds=int(match.group(1)) * _UNIT_MS[match.group(2)])


def _instant(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an ISO 8601 date-time, got {text!r}") from None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _trigger_later(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        pending = admin.jobs.trigger_at(args.job_id, at=args.at, delay=args.delay, params=args.param,
                                        addresses=args.address or None)
        if args.json:
            print_json(pending)
        else:
            print(f"job {args.job_id} scheduled to run at {epoch_ms_text(pending.get('fire_at'))} UTC "
                  f"(delayed run {pending['id']})")
        return 0

    return run_remote(args, action)


def _delayed(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        if args.cancel is not None:
            admin.jobs.cancel_delayed(args.job_id, args.cancel)
            print(f"delayed run {args.cancel} of job {args.job_id} cancelled")
            return 0
        pending = admin.jobs.delayed(args.job_id)
        if args.json:
            print_json(pending)
            return 0
        print_table(pending, (("ID", "id"), ("AT (UTC)", lambda d: epoch_ms_text(d.get("fire_at"))),
                              ("STATE", "state"), ("PARAM", "executor_param"), ("BY", "created_by")))
        return 0

    return run_remote(args, action)


def _trigger(args: argparse.Namespace) -> int:
    if args.at is not None or args.delay is not None:
        return _trigger_later(args)

    def action(admin: AdminClient) -> int:
        result = admin.jobs.trigger(args.job_id, executor_param=args.param, addresses=args.address or None)
        if args.json:
            print_json(result)
        else:
            runs = ", ".join(str(log_id) for log_id in result.get("log_ids", [])) or "-"
            outcome = "triggered" if result.get("trigger_code") == 200 else "trigger FAILED"
            print(f"job {args.job_id} {outcome}: run {runs}")
            message = str(result.get("trigger_msg") or "").strip()
            if message and result.get("trigger_code") != 200:
                print(message)
        return 0 if result.get("trigger_code") == 200 else EXIT_FAILURE

    return run_remote(args, action)


def _start(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        job = admin.jobs.start(args.job_id)
        if args.json:
            print_json(job)
        else:
            print(f"job {job['id']} {_describe_state(job)}")
        return 0

    return run_remote(args, action)


def _stop(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        job = admin.jobs.stop(args.job_id)
        if args.json:
            print_json(job)
        else:
            print(f"job {job['id']} stopped")
        return 0

    return run_remote(args, action)


def _show(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        job = admin.jobs.get(args.job_id)
        if args.json:
            print_json(job)
            return 0
        rows = [{"field": key, "value": _field_text(key, value)} for key, value in job.items()]
        print_table(rows, (("FIELD", "field"), ("VALUE", "value")))
        return 0

    return run_remote(args, action)


def _non_negative_int(text: str) -> int:
    return positive_int(text) if text.strip() != "0" else 0


def _next(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        job = admin.jobs.get(args.job_id)
        if job.get("schedule_type") == "NONE":
            print(f"job {args.job_id} has no schedule: it runs only when triggered")
            return 0
        preview = admin.jobs.preview(job["schedule_type"], job.get("schedule_conf"),
                                     timezone=job.get("schedule_timezone"), count=args.count)
        if args.json:
            print_json(preview)
            return 0
        for instant in preview.get("times", []):
            print(f"{epoch_ms_text(instant)} UTC")
        return 0

    return run_remote(args, action)


def _field_text(key: str, value: Any) -> Any:
    if key in ("trigger_next_time", "trigger_last_time"):
        when = epoch_ms_text(value)
        return f"{value} ({when} UTC)" if when else value
    if isinstance(value, list):
        return ",".join(str(item) for item in value) or None
    return value


def _remote_parser(sub: Any, name: str, help_text: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(name, help=help_text, description=help_text)
    add_connection_args(parser)
    add_json_arg(parser)
    return parser


def _register_add(sub: Any) -> None:
    add = _remote_parser(sub, "add", "create a job (stopped unless --start)")
    add.add_argument("--group", type=positive_int, required=True, help="executor group id")
    add.add_argument("--desc", required=True, help="what the job does")
    add.add_argument("--handler", dest="executor_handler", required=True, metavar="NAME",
                     help="the executor's handler name")
    schedule = add.add_mutually_exclusive_group(required=True)
    schedule.add_argument("--cron", metavar="EXPR", help="Quartz cron expression (seconds first)")
    schedule.add_argument("--fix-rate", type=positive_int, metavar="SECONDS", help="fire every SECONDS")
    schedule.add_argument("--none", action="store_true", help="no schedule: runs only when triggered")
    add.add_argument("--param", help="the handler's parameter")
    routes = [r.value for r in RouteStrategy]
    add.add_argument("--route", choices=routes, metavar="STRATEGY",
                     help=f"routing strategy: {', '.join(routes)} (default FIRST)")
    add.add_argument("--timezone", help="IANA time zone for --cron (default: the admin's)")
    add.add_argument("--author", help="who owns the job")
    add.add_argument("--start", action="store_true", help="start scheduling it at once")
    add.set_defaults(handler=_add)


def register(sub: Any) -> None:
    """Add this module's commands to the top-level parser."""
    _, commands = group_parser(sub, "jobs", "manage jobs on a running admin")

    listing = _remote_parser(commands, "list", "list jobs")
    listing.add_argument("--group", type=positive_int, help="only this executor group")
    listing.add_argument("--status", choices=sorted(_STATUS_CODES), help="only running or stopped jobs")
    listing.add_argument("--search", metavar="TEXT", help="description contains TEXT")
    listing.add_argument("--handler", dest="executor_handler", metavar="TEXT",
                         help="handler name contains TEXT")
    listing.add_argument("--offset", type=_non_negative_int, default=0, help="skip the first N jobs")
    listing.add_argument("--limit", type=positive_int, default=50, help="at most N jobs (default 50)")
    listing.set_defaults(handler=_list)

    _register_add(commands)

    show = _remote_parser(commands, "show", "show one job")
    show.add_argument("job_id", type=positive_int, metavar="ID")
    show.set_defaults(handler=_show)

    trigger = _remote_parser(commands, "trigger", "run a job once now, or later with --at / --in")
    trigger.add_argument("job_id", type=positive_int, metavar="ID")
    later = trigger.add_mutually_exclusive_group()
    later.add_argument("--at", type=_instant, metavar="ISO",
                       help="run at this instant (ISO 8601; without an offset: UTC)")
    later.add_argument("--in", dest="delay", type=_duration, metavar="DURATION",
                       help="run after this long: 90s, 10m, 2h, 1d")
    trigger.add_argument("--param", help="use this parameter instead of the job's")
    trigger.add_argument("--address", action="append", metavar="URL",
                         help="run on this executor address (repeatable); default: the job's routing")
    trigger.set_defaults(handler=_trigger)

    delayed = _remote_parser(commands, "delayed", "the job's pending delayed runs (trigger --at/--in)")
    delayed.add_argument("job_id", type=positive_int, metavar="ID")
    delayed.add_argument("--cancel", type=positive_int, metavar="DELAYED_ID", help="cancel this delayed run")
    delayed.set_defaults(handler=_delayed)

    upcoming = _remote_parser(commands, "next", "the job's next fire times")
    upcoming.add_argument("job_id", type=positive_int, metavar="ID")
    upcoming.add_argument("--count", type=positive_int, default=5, metavar="N", help="how many (default 5)")
    upcoming.set_defaults(handler=_next)

    for name, handler, text in (("start", _start, "start scheduling a job"),
                                ("stop", _stop, "stop scheduling a job")):
        command = _remote_parser(commands, name, text)
        command.add_argument("job_id", type=positive_int, metavar="ID")
        command.set_defaults(handler=handler)
