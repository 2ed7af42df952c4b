"""`jobring runs ...`: list runs and read (or follow) a run's log on a running admin."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping
from typing import Any

from jobring.cli.common import UsageError
from jobring.cli.remote import (
    EXIT_FAILURE,
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
from jobring.cli.runs_distributed import add_commands as add_distributed_commands
from jobring.client import AdminClient
from jobring.core.runstate import RunState
from jobring.core.runtext import log_text, message_lines, message_summary
from jobring.core.timefmt import iso_ms

STATUSES = ("all", "success", "fail", "running")
CLEAR_RULES = ("older_than_1_day", "older_than_1_week", "older_than_1_month", "older_than_3_months",
               "older_than_6_months", "older_than_1_year", "keep_last_1k", "keep_last_10k", "keep_last_30k",
               "keep_last_100k", "all")
DEFAULT_FOLLOW_INTERVAL_S = 1.0


def run_outcome(run: Mapping[str, Any]) -> str:
    """A run's state in words, as the admin derived it (``state``: see jobring.core.runstate)."""
    state = run.get("state")
    if isinstance(state, str) and state:
        return state.replace("_", " ")
    # An admin without run states: from the trigger code first, then the handle code.
    if run.get("trigger_code") != 200:
        return "trigger failed"
    handle = run.get("handle_code")
    names = {0: "running", 200: "success", 502: "timed out"}
    return names.get(handle, "failed") if isinstance(handle, int) else "failed"


def duration_text(run: Mapping[str, Any]) -> str | None:
    """``duration_ms`` as ``850ms`` / ``12.3s`` / ``4m05s``; None when not finished."""
    value = run.get("duration_ms")
    if not isinstance(value, int):
        return None
    if value < 1_000:
        return f"{value}ms"
    if value < 60_000:
        return f"{value / 1000:.1f}s"
    minutes, seconds = divmod(value // 1000, 60)
    return f"{minutes}m{seconds:02d}s"


def run_summary(run: Mapping[str, Any]) -> str | None:
    """One line about the run: the result message, or for a failed trigger the last line of
    the trigger report (which says what the executor answered)."""
    if run.get("state") in ("scheduled", "dispatching") and run.get("planned_time"):
        return f"planned for {iso_ms(int(run['planned_time']))}"
    if run.get("trigger_code") == 200 or run.get("handle_code"):
        return message_summary(run.get("handle_msg"), last=False)
    return message_summary(run.get("trigger_msg"), last=True)


_RUN_COLUMNS = (
    ("ID", "id"),
    ("JOB", "job_id"),
    ("TRIGGERED (UTC)", lambda run: instant_text(run.get("trigger_time"))),
    ("TYPE", "trigger_type"),
    ("TRY", lambda run: run.get("attempt", 1)),
    ("RETRY OF", lambda run: run.get("retry_of") or ""),
    ("ADDRESS", "executor_address"),
    ("STATE", run_outcome),
    ("DURATION", duration_text),
    ("MESSAGE", lambda run: run_summary(run)),
)


def _list(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        page = admin.runs.list(group=resolve_group(admin, args.group), job=args.job, status=args.status,
                               state=args.state,
                               limit=args.limit)
        if args.job is not None and page.total == 0:
            admin.jobs.get(args.job)  # a job that does not exist is an error (404: exit 2), not "no runs"
        if args.json:
            print_page_json(page)
            return 0
        print_table(page.items, _RUN_COLUMNS)
        if page.total > len(page.items):
            print(f"({len(page.items)} of {page.total} runs shown; use --limit for more)")
        return 0

    return run_remote(args, action)


def _log(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        line = args.from_line
        announced = False
        while True:
            chunk = admin.runs.log(args.run_id, from_line=line)
            if not chunk.get("is_end") and _waiting_for_dispatch(chunk, line):
                if not args.follow:
                    print(str(chunk.get("log_content") or "").strip())
                    return 0
                if not announced:
                    print(str(chunk.get("log_content") or "").strip(), file=sys.stderr)
                    announced = True
                time.sleep(args.interval)
                continue
            content = log_text(str(chunk.get("log_content") or ""))
            if args.json:
                # One JSON object per chunk (JSON lines when following).
                print(json.dumps(chunk, ensure_ascii=False), flush=True)  # as the admin gave it
            elif content:
                sys.stdout.write(content if content.endswith("\n") else content + "\n")
                sys.stdout.flush()
            to_line = int(chunk.get("to_line_num", line - 1))
            got_lines = to_line >= line
            line = max(line, to_line + 1)
            if chunk.get("is_end") or not args.follow:
                return 0
            if not got_lines:
                # The run is still going and has written nothing new: poll again shortly.
                time.sleep(args.interval)

    return run_remote(args, action)


def _waiting_for_dispatch(chunk: Mapping[str, Any], line: int) -> bool:
    """The admin's answer for a run not dispatched yet: no lines, not the end (the text says
    when it is planned). A run that is gone meanwhile (withdrawn) answers 404 instead."""
    return int(chunk.get("to_line_num", line - 1)) < line and str(chunk.get("log_content") or "").startswith(
        "(this run is ")


def _show(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        run = admin.runs.get(args.run_id)
        if args.json:
            print_json(run)
            return 0
        print(f"run {run['id']} of job {run['job_id']}: {run_outcome(run)}")
        if run.get("state") == "scheduled" and run.get("planned_time"):
            print(f"scheduled for {iso_ms(int(run['planned_time']))}")
        if duration_text(run):
            print(f"duration: {duration_text(run)}")
        _print_attempts(admin, run)
        for label, key in (("triggered", "trigger_time"), ("finished", "handle_time")):
            when = instant_text(run.get(key))
            if when:
                print(f"{label}: {when} UTC")
        for label, key in (("address", "executor_address"), ("param", "executor_param"),
                           ("shard", "executor_sharding_param")):
            if run.get(key):
                print(f"{label}: {run[key]}")
        for label, key in (("trigger message", "trigger_msg"), ("result message", "handle_msg")):
            lines = message_lines(str(run.get(key) or "").strip())
            if lines:
                print(f"{label}:\n  " + "\n  ".join(lines))
        return 0

    return run_remote(args, action)


def _print_attempts(admin: AdminClient, run: Mapping[str, Any]) -> None:
    """The attempts of a run that was retried or is a retry: one line each."""
    if run.get("retry_of") is None and run.get("state") not in _RETRYABLE:
        return
    chain = admin.runs.attempts(run["id"])
    if len(chain) < 2:
        return
    print("attempts:")
    for one in chain:
        mark = "  <- this run" if one.get("id") == run.get("id") else ""
        print(f"  {one.get('attempt', 1)}. run {one.get('id')}: {run_outcome(one)}{mark}")


_RETRYABLE = ("failed", "lost", "timed_out", "killed")


def _kill(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        result = admin.runs.kill(args.run_id)
        if args.json:
            print_json(result)
        else:
            verdict = "killed" if result.get("killed") else "not killed"
            print(f"run {args.run_id} {verdict}: {result.get('msg') or '-'}")
        return 0 if result.get("killed") else EXIT_FAILURE

    return run_remote(args, action)


def _cancel(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        run = admin.runs.cancel(args.run_id)
        print_result(args, run, f"run {args.run_id} cancelled: {run.get('handle_msg') or '-'}")
        return 0

    return run_remote(args, action)


def _state_list(text: str) -> str:
    parts = [p.strip() for p in text.split(",") if p.strip()]
    known = {s.value for s in RunState}
    bad = [p for p in parts if p not in known]
    if bad or not parts:
        wrong = (bad or [text])[0]
        raise argparse.ArgumentTypeError(f"unknown run state {wrong!r} (one of {', '.join(sorted(known))})")
    return ",".join(parts)


def _clear(args: argparse.Namespace) -> int:
    if args.rule == "all" and args.job is None and args.group is None and not args.yes:
        raise UsageError("--rule all without --job or --group deletes every run: add --yes to confirm")

    def action(admin: AdminClient) -> int:
        result = admin.runs.clear(args.rule, group=resolve_group(admin, args.group), job=args.job)
        print_result(args, result, f"{result.get('deleted', 0)} runs deleted")
        return 0

    return run_remote(args, action)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not 0 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"expected 0 to 3600 seconds, got {text}")
    return value


def register(sub: Any) -> None:
    """Add this module's commands to the top-level parser."""
    _, commands = group_parser(sub, "runs", "inspect runs of jobs on a running admin")

    listing = remote_parser(commands, "list", "list runs, newest first")
    listing.add_argument("--job", type=positive_int, metavar="ID", help="only runs of this job")
    listing.add_argument("--group", type=group_ref, metavar="GROUP",
                         help="only runs in this executor group (appname or id)")
    listing.add_argument("--status", choices=STATUSES, default=None,
                         help="coarse outcome filter (older form of --state)")
    listing.add_argument("--state", type=_state_list, default=None, metavar="STATE[,STATE...]",
                         help="only runs in these states: " + ", ".join(s.value for s in RunState)
                         + " (default: all but scheduled)")
    listing.add_argument("--limit", type=positive_int, default=20, metavar="N",
                         help="at most N runs (default 20)")
    listing.set_defaults(handler=_list)

    log = remote_parser(commands, "log", "print a run's log from its executor")
    log.add_argument("run_id", type=positive_int, metavar="RUN_ID")
    log.add_argument("--from-line", type=positive_int, default=1, metavar="N",
                     help="start at line N (default 1)")
    log.add_argument("--follow", "-f", action="store_true", help="keep printing new lines until the run ends")
    log.add_argument("--interval", type=_seconds, default=DEFAULT_FOLLOW_INTERVAL_S, metavar="SECONDS",
                     help=f"how often --follow polls (default {DEFAULT_FOLLOW_INTERVAL_S:g} s)")
    log.set_defaults(handler=_log)

    show = remote_parser(commands, "show", "one run with its messages")
    show.add_argument("run_id", type=positive_int, metavar="RUN_ID")
    show.set_defaults(handler=_show)

    kill = remote_parser(commands, "kill", "ask the run's executor to kill it")
    kill.add_argument("run_id", type=positive_int, metavar="RUN_ID")
    kill.set_defaults(handler=_kill)

    cancel = remote_parser(commands, "cancel", "cancel a queued run (flow control); it never starts")
    cancel.add_argument("run_id", type=positive_int, metavar="RUN_ID")
    cancel.set_defaults(handler=_cancel)

    clear = remote_parser(commands, "clear", "delete old runs by a rule")
    clear.add_argument("--rule", choices=CLEAR_RULES, required=True, metavar="RULE",
                       help=f"which runs: {', '.join(CLEAR_RULES)}")
    clear.add_argument("--job", type=positive_int, metavar="ID", help="only runs of this job")
    clear.add_argument("--group", type=group_ref, metavar="GROUP",
                       help="only runs in this group (appname or id)")
    clear.add_argument("--yes", action="store_true", help="confirm --rule all over every job")
    clear.set_defaults(handler=_clear)
    add_distributed_commands(commands)
