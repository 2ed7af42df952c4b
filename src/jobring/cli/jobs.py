"""`jobring jobs ...`: list, add, edit, copy, delete, start, stop, trigger and inspect jobs."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from jobring.cli.backfills import register_backfill
from jobring.cli.common import UsageError
from jobring.cli.flowopts import merged_flow
from jobring.cli.jobfields import (
    add_job_options,
    job_fields,
    merged_timing,
    non_negative_int,
    schedule_fields,
)
from jobring.cli.jobglue import register_glue
from jobring.cli.remote import (
    EXIT_FAILURE,
    epoch_ms_text,
    group_parser,
    group_ref,
    instant_text,
    positive_int,
    print_json,
    print_page_json,
    print_result,
    print_table,
    remote_parser,
    resolve_group,
    run_remote,
)
from jobring.client import AdminApiError, AdminClient
from jobring.core.runstate import RunState, run_state

_STATUS_CODES = {"running": 1, "stopped": 0}


def _schedule(job: Mapping[str, Any]) -> str:
    kind = job.get("schedule_type") or "NONE"
    if kind == "FIX_RATE":
        return f"every {job.get('schedule_conf')}s"
    if kind == "CRON":
        zone = f" ({job['schedule_timezone']})" if job.get("schedule_timezone") else ""
        return f"cron {job.get('schedule_conf')}{zone}"
    return "none"


def _declared(job: Mapping[str, Any]) -> str | None:
    if job.get("declared_by_executor"):
        return "in code"
    if job.get("declared_retired_at"):
        return "retired"  # the code no longer declares it: deleted after the grace period
    return "handed over" if job.get("managed_by") == "code" else None  # to the code, not declared yet


def _status(job: Mapping[str, Any]) -> str:
    return "running" if job.get("trigger_status") == 1 else "stopped"


_JOB_COLUMNS = (
    ("ID", "id"),
    ("GROUP", lambda job: job.get("group_app_name") or job.get("job_group")),
    ("DESCRIPTION", "job_desc"),
    ("HANDLER", lambda job: job.get("executor_handler") or job.get("glue_type")),
    ("SCHEDULE", _schedule),
    ("STATUS", _status),
    ("DECLARED", lambda job: _declared(job)),
    ("NEXT FIRE (UTC)", lambda job: epoch_ms_text(job.get("trigger_next_time")) if _status(job) == "running"
     else None),
)


def _list(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        page = admin.jobs.list(
            group=resolve_group(admin, args.group), trigger_status=_STATUS_CODES.get(args.status or ""),
            desc=args.search, handler=args.executor_handler, offset=args.offset, limit=args.limit,
        )
        if args.json:
            print_page_json(page)
            return 0
        names = _app_names(admin) if page.items else {}
        print_table([{**job, "group_app_name": names.get(job.get("job_group"))} for job in page.items],
                    _JOB_COLUMNS)
        shown = len(page.items)
        if page.total > page.offset + shown:
            print(f"({shown} of {page.total} jobs shown; use --offset/--limit for more)")
        return 0

    return run_remote(args, action)


def _app_names(admin: AdminClient) -> dict[Any, str]:
    """Group id -> appname, for the table (ids shown when the groups cannot be listed)."""
    try:
        groups = admin.groups.list(limit=500).items
    except AdminApiError:
        return {}
    return {group["id"]: str(group["app_name"]) for group in groups}


def _never_fires(admin: AdminClient, fields: dict[str, Any]) -> bool:
    """Whether the schedule has no fire time left (asked before anything is written)."""
    preview = admin.jobs.preview(fields["schedule_type"], fields.get("schedule_conf"),
                                 timezone=fields.get("schedule_timezone"), count=1)
    return not preview.get("times")


def _add(args: argparse.Namespace) -> int:
    if args.start and args.none:
        raise UsageError("--start needs a schedule (--cron or --fix-rate); --none jobs run only by trigger")
    schedule_fields(args)  # refuses --fix-rate with --timezone before any request

    def action(admin: AdminClient) -> int:
        fields = job_fields(args, resolve_group(admin, args.group))
        if args.start and _never_fires(admin, fields):
            # Refused before creating: a refused command changes nothing.
            raise UsageError(f"--start: the schedule {fields.get('schedule_conf')!r} never fires; "
                             "the job was not created")
        job = admin.jobs.create(fields)
        if args.start:
            try:
                job = admin.jobs.start(job["id"])
            except AdminApiError:
                admin.jobs.delete(job["id"])  # undo the create: all or nothing
                raise
        print_result(args, job, f"created job {job['id']} ({_describe_state(job)})")
        return 0

    return run_remote(args, action)


def _edit(args: argparse.Namespace) -> int:
    schedule_fields(args)

    def action(admin: AdminClient) -> int:
        changes = job_fields(args, resolve_group(admin, args.group))
        if not changes:
            raise UsageError("nothing to change: give at least one option (see jobring jobs edit --help)")
        if "timing" in changes:
            current = admin.jobs.get(args.job_id).get("timing")
            changes["timing"] = merged_timing(current, changes["timing"])
        if "flow" in changes:
            changes["flow"] = merged_flow(admin.jobs.get(args.job_id).get("flow"), changes["flow"])
        job = admin.jobs.update(args.job_id, changes)
        print_result(args, job, f"job {job['id']} updated ({_describe_state(job)})")
        return 0

    return run_remote(args, action)


def _copy(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        job = admin.jobs.copy(args.job_id)
        print_result(args, job, f"copied job {args.job_id} to job {job['id']} (stopped)")
        return 0

    return run_remote(args, action)


def _delete(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        admin.jobs.delete(args.job_id)
        print_result(args, {"deleted": args.job_id}, f"job {args.job_id} deleted, with its runs")
        return 0

    return run_remote(args, action)


def _describe_state(job: Mapping[str, Any]) -> str:
    if _status(job) == "stopped":
        return "stopped"
    next_fire = epoch_ms_text(job.get("trigger_next_time"))
    return f"running, next fire {next_fire} UTC" if next_fire else "running"


_DURATION = re.compile(r"(\d+)(ms|s|m|h|d)")  # fullmatch
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def _duration(text: str) -> timedelta:
    match = _DURATION.fullmatch(text.strip())
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


def _trigger_state(result: Mapping[str, Any]) -> RunState:
    """RUNNING (the executor took the run), SKIPPED (refused under DISCARD_LATER) or FAILED."""
    code = result.get("trigger_code")
    state = run_state(trigger_code=code if isinstance(code, int) else 500, handle_code=0, now_ms=0,
                      trigger_msg=str(result.get("trigger_msg") or ""))
    return state if state in (RunState.RUNNING, RunState.SKIPPED) else RunState.FAILED


def _trigger(args: argparse.Namespace) -> int:
    if args.at is not None or args.delay is not None:
        return _trigger_later(args)

    def action(admin: AdminClient) -> int:
        result = admin.jobs.trigger(args.job_id, executor_param=args.param, addresses=args.address or None)
        state = _trigger_state(result)
        if args.json:
            print_json(result)
        else:
            runs = ", ".join(str(run_id) for run_id in result.get("run_ids", [])) or "-"
            outcome = {RunState.RUNNING: "triggered",
                       RunState.SKIPPED: "skipped (DISCARD_LATER: its previous run is still going)"}
            print(f"job {args.job_id} {outcome.get(state, 'trigger FAILED')}: run {runs}")
            message = str(result.get("trigger_msg") or "").strip()
            if message and state is RunState.FAILED:
                print(message)
        # A skip is the job's block strategy at work, not a failure of the trigger.
        return 0 if state is not RunState.FAILED else EXIT_FAILURE

    return run_remote(args, action)


def _start(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        job = admin.jobs.start(args.job_id)
        print_result(args, job, f"job {job['id']} {_describe_state(job)}")
        return 0

    return run_remote(args, action)


def _stop(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        job = admin.jobs.stop(args.job_id, reason=args.reason)
        print_result(args, job, f"job {job['id']} stopped" + (f": {args.reason}" if args.reason else ""))
        return 0

    return run_remote(args, action)


def _show(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        job = admin.jobs.get(args.job_id)
        if args.json:
            print_json(job)
            return 0
        rows = [{"field": key, "value": _field_text(key, value)} for key, value in job.items()
                if key != "glue_source"]
        print_table(rows, (("FIELD", "field"), ("VALUE", "value")))
        return 0

    return run_remote(args, action)


def _next(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        job = admin.jobs.get(args.job_id)
        if job.get("schedule_type") == "NONE":
            print(f"jobring: job {args.job_id} has no schedule: it runs only when triggered", file=sys.stderr)
            return EXIT_FAILURE
        preview = admin.jobs.preview(job["schedule_type"], job.get("schedule_conf"),
                                     timezone=job.get("schedule_timezone"), count=args.count,
                                     job_id=job["id"])
        if args.json:
            print_json(preview)
        else:
            _print_fires(preview)
        if not preview.get("times"):
            print(f"jobring: job {args.job_id} never fires again ({_schedule(job)})", file=sys.stderr)
            return EXIT_FAILURE
        return 0

    return run_remote(args, action)


def _print_fires(preview: Mapping[str, Any]) -> None:
    """The fires in time order with the excluded instants among them (marked, not fired)."""
    lines: list[tuple[int, str]] = []
    for fire in preview.get("fires") or []:
        text = f"{epoch_ms_text(fire['fire_at'])} UTC"
        if fire["fire_at"] != fire["logical"]:
            text += f"  (for {epoch_ms_text(fire['logical'])} UTC"
            text += f", moved by {fire['moved_by']})" if fire.get("moved_by") else ", jitter)"
        lines.append((fire["fire_at"], text))
    for excluded in preview.get("excluded") or []:
        when = epoch_ms_text(excluded["instant"])
        lines.append((excluded["instant"], f"{when} UTC  excluded: {excluded['reason']}"))
    for _, text in sorted(lines, key=lambda line: line[0]):
        print(text)
    if preview.get("more_excluded"):
        print("... more excluded instants")


def _field_text(key: str, value: Any) -> Any:
    if key == "trigger_status":
        return "running" if value == 1 else "stopped"
    if key in ("add_time", "update_time", "glue_updatetime"):
        when = instant_text(value)
        return f"{when} UTC" if when else None
    if key in ("trigger_next_time", "trigger_last_time"):
        when = epoch_ms_text(value)
        return f"{value} ({when} UTC)" if when else value
    if isinstance(value, list):
        return ",".join(str(item) for item in value) or None
    return value


def _job_command(sub: Any, name: str, help_text: str, handler: Any) -> argparse.ArgumentParser:
    command = remote_parser(sub, name, help_text)
    command.add_argument("job_id", type=positive_int, metavar="ID")
    command.set_defaults(handler=handler)
    return command


def register(sub: Any) -> None:
    """Add this module's commands to the top-level parser."""
    _, commands = group_parser(sub, "jobs", "manage jobs on a running admin")

    listing = remote_parser(commands, "list", "list jobs")
    listing.add_argument("--group", type=group_ref, metavar="GROUP",
                         help="only this executor group (appname or id)")
    listing.add_argument("--status", choices=sorted(_STATUS_CODES), help="only running or stopped jobs")
    listing.add_argument("--search", metavar="TEXT", help="description contains TEXT")
    listing.add_argument("--handler", dest="executor_handler", metavar="TEXT",
                         help="handler name contains TEXT")
    listing.add_argument("--offset", type=non_negative_int, default=0, help="skip the first N jobs")
    listing.add_argument("--limit", type=positive_int, default=50, help="at most N jobs (default 50)")
    listing.set_defaults(handler=_list)

    add = remote_parser(commands, "add", "create a job (stopped unless --start)")
    add_job_options(add, creating=True)
    add.add_argument("--start", action="store_true", help="start scheduling it at once")
    add.set_defaults(handler=_add)

    edit = _job_command(commands, "edit", "change some fields of a job (only the options given)", _edit)
    add_job_options(edit, creating=False)

    _job_command(commands, "show", "show one job", _show)
    _job_command(commands, "copy", "copy a job (the copy is stopped)", _copy)
    _job_command(commands, "delete", "delete a job and its runs", _delete)
    _job_command(commands, "start", "start scheduling a job", _start)
    stop = _job_command(commands, "stop", "stop (pause) scheduling a job; --reason is kept with who and "
                        "when", _stop)
    stop.add_argument("--reason", metavar="TEXT", help="why it is paused (one line, at most 500 characters)")

    trigger = _job_command(commands, "trigger", "run a job once now, or later with --at / --in", _trigger)
    later = trigger.add_mutually_exclusive_group()
    later.add_argument("--at", type=_instant, metavar="ISO",
                       help="run at this instant (ISO 8601; without an offset: UTC)")
    later.add_argument("--in", dest="delay", type=_duration, metavar="DURATION",
                       help="run after this long: 90s, 10m, 2h, 1d")
    trigger.add_argument("--param", help="use this parameter instead of the job's")
    trigger.add_argument("--address", action="append", metavar="URL",
                         help="run on this executor address (repeatable); default: the job's routing")

    delayed = _job_command(commands, "delayed", "the job's pending delayed runs (trigger --at/--in)",
                           _delayed)
    delayed.add_argument("--cancel", type=positive_int, metavar="DELAYED_ID", help="cancel this delayed run")

    register_glue(commands)
    register_backfill(commands)

    upcoming = _job_command(commands, "next", "the job's next fire times (exit 1 when it never fires)", _next)
    upcoming.add_argument("--count", type=positive_int, default=5, metavar="N", help="how many (default 5)")
