"""`jobring audit list`: the admin's audit log of security-relevant actions (admin only)."""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from jobring.cli.remote import (
    add_connection_args,
    add_json_arg,
    group_parser,
    instant_text,
    positive_int,
    print_page_json,
    print_table,
    run_remote,
)
from jobring.client import AdminClient

_RELATIVE = re.compile(r"(\d{1,6})([smhdw])")  # fullmatch
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_when(text: str, now: datetime | None = None) -> str:
    """``7d``, ``12h``, ``30m`` ago, or an ISO 8601 date/instant (UTC when no offset), as the
    ISO 8601 UTC instant the API takes; argparse error otherwise."""
    relative = _RELATIVE.fullmatch(text.strip())
    if relative:
        amount, unit = int(relative.group(1)), relative.group(2)
        instant = (now or datetime.now(UTC)) - timedelta(**{_UNITS[unit]: amount})
    else:
        try:
            instant = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected an ISO 8601 date or time (2026-11-20, 2026-11-20T10:00Z) or an age "
                f"such as 30m, 12h, 7d; got {text!r}"
            ) from None
        if instant.tzinfo is None:
            instant = instant.replace(tzinfo=UTC)
    return instant.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _target(text: str) -> tuple[str, str | None]:
    kind, _, ident = text.partition(":")
    if not kind or (not ident and ":" in text):
        raise argparse.ArgumentTypeError(f"expected TYPE or TYPE:ID (e.g. job:12), got {text!r}")
    return kind, ident or None


def _value(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else value


def details_text(record: Mapping[str, Any]) -> str | None:
    """The record's details in one line: ``field: before -> after`` for edits."""
    details = record.get("details")
    if not isinstance(details, Mapping) or not details:
        return None
    parts: list[str] = []
    for key, value in details.items():
        if key == "changes" and isinstance(value, Mapping):
            parts.extend(
                f"{name}: {_value(change.get('before'))} -> {_value(change.get('after'))}"
                for name, change in value.items()
                if isinstance(change, Mapping)
            )
        elif key not in ("before", "after"):
            parts.append(f"{key}={_value(value)}")
    return "; ".join(parts) or None


_COLUMNS = (
    ("ID", "id"),
    ("AT (UTC)", lambda r: instant_text(r.get("at"))),
    ("ACTOR", "actor"),
    ("VIA", "actor_kind"),
    ("SOURCE", "source"),
    ("ACTION", "action"),
    ("TARGET", lambda r: f"{r['target_type']}:{r['target_id']}" if r.get("target_type") else None),
    ("OUTCOME", "outcome"),
    ("DETAILS", details_text),
)


def _list(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        target_type, target_id = args.target if args.target else (None, None)
        page = admin.audit.list(
            action=args.action, actor=args.actor, target_type=target_type, target_id=target_id,
            group=args.group, outcome=args.outcome, since=args.since, until=args.until, limit=args.limit,
        )
        if args.json:
            print_page_json(page)
            return 0
        print_table(page.items, _COLUMNS)
        if page.total > len(page.items):
            print(f"({len(page.items)} of {page.total} records shown; use --limit or --since for more)")
        return 0

    return run_remote(args, action)


def register(sub: Any) -> None:
    """Add this module's commands to the top-level parser."""
    _, commands = group_parser(sub, "audit", "the audit log of security-relevant actions (admin)")
    listing: argparse.ArgumentParser = commands.add_parser(
        "list", help="list audit records, newest first",
        description="Audit records, newest first. WHEN is an ISO 8601 date or instant (UTC unless it "
                    "has an offset) or an age such as 30m, 12h, 7d.")
    add_connection_args(listing)
    add_json_arg(listing)
    listing.add_argument("--action", metavar="A", help="an action (job.update) or a prefix (job, auth)")
    # dest "actor": the connection code reads args.user as "log in as this user".
    listing.add_argument("--user", dest="actor", metavar="U",
                         help="records of this username (also failed logins as U)")
    listing.add_argument("--since", type=parse_when, metavar="WHEN", help="from this instant on")
    listing.add_argument("--until", type=parse_when, metavar="WHEN", help="before this instant")
    listing.add_argument("--target", type=_target, metavar="TYPE[:ID]", help="e.g. job:12, user, group:3")
    listing.add_argument("--group", type=positive_int, metavar="ID", help="records about this executor group")
    listing.add_argument("--outcome", choices=("success", "failure"), help="only this outcome")
    listing.add_argument("--limit", type=positive_int, default=50, metavar="N",
                         help="at most N records (default 50, at most 500)")
    listing.set_defaults(handler=_list)
