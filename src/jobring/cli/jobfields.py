"""The job fields as command-line options, shared by `jobs add` (create) and `jobs edit`
(a partial update: only the options given change). Every writable field of the API's job
is an option here (tests/test_cli_job_fields.py holds the two lists side by side); the GLUE
source of an existing job has its own command, `jobs glue`."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from jobring.cli.common import UsageError
from jobring.cli.flowopts import add_flow_options, flow_changes, merged_flow
from jobring.cli.remote import group_ref, positive_int
from jobring.core.enums import BlockStrategy, GlueType, MisfireStrategy, RouteStrategy

ROUTES = [r.value for r in RouteStrategy]
BLOCKS = [b.value for b in BlockStrategy]
MISFIRES = [m.value for m in MisfireStrategy]
GLUE_TYPES = [g.value for g in GlueType]
ALARM_ON = ("failure_final", "every_failure")
BACKOFFS = ("fixed", "exponential")


def non_negative_int(text: str) -> int:
    """argparse type: a whole number >= 0."""
    return positive_int(text) if text.strip() != "0" else 0


def _child_ids(text: str) -> list[int]:
    return [positive_int(part.strip()) for part in text.split(",") if part.strip()]


def alarm_target(text: str) -> dict[str, Any] | None:
    """argparse type of --alarm-target: ``email:a@x.org,b@x.org``, ``KIND:URL`` (webhook,
    slack, wecom, dingtalk, feishu, ...), or the target as a JSON object (for a signing
    secret: ``{"kind": "dingtalk", "url": ..., "secret": ...}``); '' is None (clears)."""
    value = text.strip()
    if not value:
        return None
    if value.startswith("{"):
        try:
            target = json.loads(value)
        except json.JSONDecodeError as exc:
            raise argparse.ArgumentTypeError(f"not a JSON object: {exc}") from None
        if not isinstance(target, dict) or not isinstance(target.get("kind"), str):
            raise argparse.ArgumentTypeError('a JSON target is an object with a "kind"')
        return target
    kind, sep, rest = value.partition(":")
    if not sep or not kind or not rest.strip():
        raise argparse.ArgumentTypeError(
            f"expected email:ADDRESS[,ADDRESS...], KIND:URL or a JSON object, got {text!r}")
    if kind == "email":
        return {"kind": "email", "to": [a.strip() for a in rest.split(",") if a.strip()]}
    return {"kind": kind, "url": rest.strip()}


def add_job_options(parser: argparse.ArgumentParser, *, creating: bool) -> None:
    """Every writable job field as an option; on create the group, description, handler
    and schedule are required."""
    parser.add_argument("--group", type=group_ref, required=creating, metavar="GROUP",
                        help="executor group: its appname or id")
    parser.add_argument("--desc", required=creating, help="what the job does")
    parser.add_argument("--handler", dest="executor_handler", metavar="NAME",
                        help="the executor's handler name (@executor.job(NAME)); required for BEAN jobs")
    schedule = parser.add_mutually_exclusive_group(required=creating)
    schedule.add_argument("--cron", metavar="EXPR",
                          help='cron expression: Quartz, seconds first ("0 */5 * * * ?"), or Unix 5 fields '
                               '("*/5 * * * *", stored as Quartz)')
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
    parser.add_argument("--retry-interval", type=non_negative_int, metavar="SECONDS",
                        help="wait before a retry (default 0: at once)")
    parser.add_argument("--retry-backoff", choices=BACKOFFS,
                        help="fixed: every retry waits --retry-interval; exponential: doubling each time")
    parser.add_argument("--retry-backoff-max", type=non_negative_int, metavar="SECONDS",
                        help="longest wait of an exponential back-off (default 3600)")
    parser.add_argument("--alarm-email", metavar="ADDRESSES",
                        help="comma-separated e-mails alarmed on failure (XXL-JOB's field)")
    parser.add_argument("--alarm-target", type=alarm_target, action="append", metavar="TARGET",
                        help="where failures are alarmed (repeatable): email:ADDRESS[,ADDRESS], KIND:URL "
                             "(webhook, slack, wecom, dingtalk, feishu) or a JSON object (with a secret); "
                             "edit: replaces the list, '' clears it")
    parser.add_argument("--alarm-on", choices=ALARM_ON,
                        help="failure_final: only when no retry follows (default); every_failure")
    parser.add_argument("--alarm-recovery", action=argparse.BooleanOptionalAction, default=None,
                        help="also alarm when the job succeeds again after a failure alarm")
    parser.add_argument("--deadline", type=non_negative_int, metavar="MINUTES",
                        help="alarm when a run is not finished MINUTES after its planned time "
                             "(edit: 0 removes the deadline)")
    parser.add_argument("--child", type=_child_ids, action="append", metavar="JOB_IDS",
                        help="job(s) to trigger after a success: comma list, repeatable (edit: '' clears)")
    parser.add_argument("--author", help="who owns the job")
    parser.add_argument("--shard-count", type=non_negative_int, metavar="N",
                        help="run as N shards over the group's jobring executors (edit: 0 stops sharding)")
    parser.add_argument("--failure-tolerance", metavar="COUNT|PERCENT",
                        help="sub-tasks or shards that may fail with the run a success: 3, 1%%, or 3,1%% "
                             "(edit: '' allows none)")
    parser.add_argument("--broadcast-pre", metavar="HANDLER",
                        help="route SHARDING_BROADCAST: a handler run once before every executor runs "
                             "the job (edit: '' removes it)")
    parser.add_argument("--broadcast-post", metavar="HANDLER",
                        help="route SHARDING_BROADCAST: a handler run once after every executor ran, "
                             "with their results (edit: '' removes it)")
    parser.add_argument("--glue-type", choices=GLUE_TYPES, metavar="TYPE",
                        help=f"{', '.join(GLUE_TYPES)} (default BEAN: a handler in the executor's code)")
    parser.add_argument("--glue-remark", metavar="TEXT", help="note on the GLUE source's version")
    _timing_options(parser, creating=creating)
    add_flow_options(parser, editing=not creating)
    if creating:
        parser.add_argument("--glue-source", metavar="FILE",
                            help="the GLUE script, read from FILE ('-': standard input); "
                                 "later versions: jobring jobs glue ID --set FILE")
    else:
        parser.add_argument("--managed-by", dest="managed_by", choices=("code", "console"),
                            help="admin only: code lets the executor's declared jobs manage this job; "
                                 "console takes it back")


_OVERLAP = ("skip", "buffer_one", "buffer_all", "cancel_other", "terminate_other", "allow_all")


def _timing_options(parser: argparse.ArgumentParser, *, creating: bool) -> None:
    clears = "" if creating else " ('' clears it)"
    parser.add_argument("--calendar", action="append", metavar="NAME",
                        help="a calendar whose excluded times the job does not fire at (repeatable"
                             + ("; edit: replaces the list, '' clears it)" if not creating else ")"))
    parser.add_argument("--calendar-action", choices=("skip", "move"),
                        help="an excluded instant is skipped (recorded as a skipped run; default) or "
                             "moved to the next allowed time")
    parser.add_argument("--start-at", metavar="WHEN",
                        help="fire only from this instant on: ISO 8601 with an offset" + clears)
    parser.add_argument("--end-at", metavar="WHEN",
                        help="fire only up to this instant (included): ISO 8601 with an offset" + clears)
    parser.add_argument("--max-runs", type=non_negative_int, metavar="N",
                        help="stop after N scheduled runs" + ("" if creating else " (0 removes the limit)"))
    parser.add_argument("--jitter", type=non_negative_int, metavar="SECONDS",
                        help="start each fire up to SECONDS later (the same delay on every admin node; "
                             "never past the next instant)")
    parser.add_argument("--overlap", choices=_OVERLAP,
                        help="what a fire does while runs of the job are in progress on any executor "
                             "(default allow_all; docs/time.md)")
    parser.add_argument("--catch-up", type=non_negative_int, metavar="SECONDS",
                        help="catch-up window: after downtime or a pause, missed instants this recent "
                             "fire" + ("" if creating else " (0 removes it)"))
    parser.add_argument("--catch-up-mode", choices=("each", "once"),
                        help="missed instants in the window fire once each (default) or only the latest")
    parser.add_argument("--catch-up-limit", type=non_negative_int, metavar="N",
                        help="at most N catch-up fires at once (default 100)")
    parser.add_argument("--dst-gap", choices=("skip", "next_valid"),
                        help="a wall time in a spring-forward gap: not fired (default) or fired at the "
                             "first valid time after it")
    parser.add_argument("--dst-repeat", choices=("first", "second", "both"),
                        help="a wall time shown twice at fall-back fires at its first, second (default) "
                             "or both showings")
    if not creating:
        parser.add_argument("--no-timing", action="store_true",
                            help="remove every timing rule (calendars, window, limit, jitter, overlap, "
                                 "catch-up, daylight saving)")


def timing_changes(args: argparse.Namespace) -> dict[str, Any] | None:
    """The timing rules the options set (a value None removes that rule); None: no option
    given. ``--no-timing`` gives ``{}`` (remove them all)."""
    if getattr(args, "no_timing", False):
        return {}
    changes: dict[str, Any] = {}
    if args.calendar is not None:
        changes["calendars"] = [name for name in args.calendar if name.strip()] or None
    if args.calendar_action is not None:
        changes["calendar_action"] = args.calendar_action
    for key in ("start_at", "end_at"):
        value = getattr(args, key)
        if value is not None:
            changes[key] = value.strip() or None
    if args.max_runs is not None:
        changes["max_runs"] = args.max_runs or None
    if args.jitter is not None:
        changes["jitter_seconds"] = args.jitter or None
    if args.overlap is not None:
        changes["overlap"] = None if args.overlap == "allow_all" else args.overlap
    catch_up = {key: value for key, value in (("window_seconds", args.catch_up), ("mode", args.catch_up_mode),
                                               ("limit", args.catch_up_limit)) if value is not None}
    if catch_up:
        changes["catch_up"] = None if args.catch_up == 0 else catch_up
    dst = {key: value for key, value in (("gap", args.dst_gap), ("repeat", args.dst_repeat))
           if value is not None}
    if dst:
        changes["dst"] = dst
    return changes or None


def merged_timing(current: dict[str, Any] | None, changes: dict[str, Any]) -> dict[str, Any] | None:
    """A job's timing rules with the changes applied (None: no rules left)."""
    if not changes:
        return None
    merged = {key: value for key, value in (current or {}).items() if value not in (None, [])}
    for key, value in changes.items():
        # A partial catch-up or DST change keeps the parts not named.
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    kept = {key: value for key, value in merged.items() if value is not None}
    if not kept.get("calendars"):
        kept.pop("calendar_action", None)
    return kept or None


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


def read_source(path: str) -> str:
    """A GLUE script from a file, or standard input for '-'."""
    if path == "-":
        return sys.stdin.read()
    try:
        with open(path, encoding="utf-8") as source:
            return source.read()
    except OSError as exc:
        raise UsageError(f"cannot read the GLUE source {path!r}: {exc.strerror or exc}") from None


def _hook_fields(args: argparse.Namespace) -> dict[str, str | None]:
    """The broadcast hooks given ('' removes one)."""
    given = {hook: getattr(args, hook, None) for hook in ("broadcast_pre", "broadcast_post")}
    return {hook: value.strip() or None for hook, value in given.items() if value is not None}


def job_fields(args: argparse.Namespace, group_id: int | None) -> dict[str, Any]:
    """The API job fields the options set (group already resolved to its id)."""
    for option, value in (("--desc", args.desc), ("--handler", args.executor_handler)):
        if value is not None and not value.strip():
            raise UsageError(f"{option} must not be empty")
    creating = hasattr(args, "glue_source")
    if creating and args.executor_handler is None and args.glue_type in (None, GlueType.BEAN.value):
        raise UsageError("--handler is required for a BEAN job (or give --glue-type for a GLUE script job)")
    fields: dict[str, Any] = schedule_fields(args)
    optional = {
        "job_group": group_id, "job_desc": args.desc, "executor_handler": args.executor_handler,
        "schedule_timezone": args.timezone, "executor_param": args.param,
        "executor_route_strategy": args.route, "executor_block_strategy": args.block,
        "misfire_strategy": args.misfire, "executor_timeout": args.timeout,
        "executor_fail_retry_count": args.retries, "executor_fail_retry_interval_s": args.retry_interval,
        "retry_backoff": args.retry_backoff, "retry_backoff_max_s": args.retry_backoff_max,
        "alarm_email": args.alarm_email, "alarm_on": args.alarm_on, "alarm_recovery": args.alarm_recovery,
        "author": args.author, "glue_type": args.glue_type, "glue_remark": args.glue_remark,
        "managed_by": getattr(args, "managed_by", None), "shard_count": args.shard_count,
    }
    fields.update({key: value for key, value in optional.items() if value is not None})
    if args.deadline is not None:
        if args.deadline == 0 and creating:
            raise UsageError("--deadline: give the minutes (at least 1); without it the job has none")
        fields["deadline_minutes"] = args.deadline or None  # 0 on edit: remove it
    if args.failure_tolerance is not None:
        fields["failure_tolerance"] = args.failure_tolerance.strip() or None
    fields.update(_hook_fields(args))
    if args.child is not None:
        fields["child_job_ids"] = [job_id for ids in args.child for job_id in ids]
    if args.alarm_target is not None:
        fields["alarm_targets"] = [target for target in args.alarm_target if target is not None]
    if creating and args.glue_source is not None:
        fields["glue_source"] = read_source(args.glue_source)
    timing = timing_changes(args)
    if timing is not None:
        # On edit the caller merges these with the job's current rules (the API replaces them).
        fields["timing"] = merged_timing(None, timing) if creating else timing
    flow = flow_changes(args)
    if flow is not None:
        # On edit the caller merges these with the job's current settings (the API replaces them).
        fields["flow"] = merged_flow(None, flow) if creating else flow
    return fields
