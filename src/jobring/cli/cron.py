"""`jobring cron` commands: preview the fire times of a Quartz cron expression."""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime, tzinfo
from typing import Any

from jobring.cli.common import UsageError
from jobring.cli.remote import add_json_arg, group_parser, print_json
from jobring.core.cron import CronExpression, CronParseError, resolve_zone, to_quartz

DEFAULT_COUNT = 5
MAX_COUNT = 1000


def register(sub: Any) -> None:
    """Add this module's commands to the top-level parser."""
    _, commands = group_parser(sub, "cron", "inspect Quartz cron expressions")
    next_parser = commands.add_parser(
        "next",
        help="print the next fire times of a cron expression",
        description="Print the next fire times of a Quartz cron expression, one ISO-8601 time per line.",
    )
    next_parser.add_argument(
        "expression", help='Quartz cron expression ("0 15 10 ? * MON-FRI") or Unix 5 fields ("15 10 * * 1-5")'
    )
    next_parser.add_argument("--tz", default="UTC", help="IANA time zone to evaluate in (default UTC)")
    next_parser.add_argument(
        "--after",
        help="start instant: ISO-8601 (a time without offset is read in --tz) or epoch milliseconds; "
        "default now",
    )
    next_parser.add_argument(
        "--count", default=str(DEFAULT_COUNT), help=f"how many fire times (1-{MAX_COUNT}, default 5)"
    )
    add_json_arg(next_parser)
    next_parser.set_defaults(handler=_next)


def _count(text: str) -> int:
    try:
        count = int(text)
    except ValueError:
        raise UsageError(f"--count must be a whole number, got {text!r}") from None
    if not 1 <= count <= MAX_COUNT:
        raise UsageError(f"--count must be 1-{MAX_COUNT}, got {count}")
    return count


def _after(text: str | None, zone: tzinfo) -> datetime:
    if text is None:
        return datetime.fromtimestamp(time.time(), zone)
    stripped = text.strip()
    try:
        if stripped.lstrip("-").isdigit():
            return datetime.fromtimestamp(int(stripped) // 1000, zone)
        parsed = datetime.fromisoformat(stripped)
    except (ValueError, OverflowError, OSError):
        raise UsageError(f"--after must be ISO-8601 or epoch milliseconds, got {text!r}") from None
    return parsed.replace(tzinfo=zone) if parsed.tzinfo is None else parsed


def _next(args: argparse.Namespace) -> int:
    try:
        zone = resolve_zone(args.tz)
    except ValueError as exc:
        raise UsageError(f"--tz: {exc}") from None
    count = _count(args.count)
    after = _after(args.after, zone)
    try:
        quartz = to_quartz(args.expression)  # a Unix 5-field expression gets its seconds field
        expression = CronExpression(quartz, zone)
    except CronParseError as exc:
        raise UsageError(f"invalid cron expression {args.expression!r}: {exc}") from None
    if quartz != args.expression.strip() and not args.json:
        print(f"as Quartz (stored so): {quartz}", file=sys.stderr)
    current = after
    times: list[str] = []
    for _ in range(count):
        fire = expression.next_after(current)
        if fire is None:
            print(f"jobring: no further fire time after {current.isoformat()}", file=sys.stderr)
            break
        if args.json:
            times.append(fire.isoformat())
        else:
            print(fire.isoformat())
        current = fire
    if args.json:
        print_json({"expression": args.expression, "quartz": quartz, "timezone": args.tz, "times": times})
    return 0
