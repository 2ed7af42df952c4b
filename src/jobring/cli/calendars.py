"""`jobring calendars ...`: list, show, add, edit, import and delete named calendars (the
times jobs must not fire; see docs/time.md). A calendar is named by its name or its id."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from typing import Any

from jobring.cli.common import UsageError
from jobring.cli.remote import (
    group_parser,
    group_ref,
    instant_text,
    print_json,
    print_result,
    print_table,
    remote_parser,
    resolve_group,
    run_remote,
)
from jobring.client import AdminClient

_PARTS = ("dates", "date_ranges", "workdays", "day_windows", "cron", "periods")


def _summary(calendar: Mapping[str, Any]) -> str:
    spec = calendar.get("spec") or {}
    bits = []
    for part in _PARTS:
        value = spec.get(part)
        if value:
            bits.append(f"{part}: {value}" if part == "cron" else f"{part}: {len(value)}")
    text = ", ".join(bits) or "nothing"
    return ("only " if spec.get("invert") else "excludes ") + text


def _users(calendar: Mapping[str, Any], sep: str) -> str:
    """The job ids the caller may read, and how many others use it (no ids: other groups')."""
    text = sep.join(str(j) for j in calendar.get("used_by") or [])
    hidden = calendar.get("used_by_hidden") or 0
    if hidden:
        text += f"{sep if text else ''}+{hidden} in other groups"
    return text


_COLUMNS = (
    ("ID", "id"),
    ("NAME", "name"),
    ("GROUP", lambda c: c.get("job_group") or "global"),
    ("ZONE", lambda c: (c.get("spec") or {}).get("zone")),
    ("PARTS", _summary),
    ("JOBS", lambda c: _users(c, ",") or None),
)


def _find(admin: AdminClient, ref: str) -> Mapping[str, Any]:
    """A calendar by name, or by id when ``ref`` is a number that names none."""
    calendars = admin.calendars.list()
    for calendar in calendars:
        if calendar["name"] == ref:
            return calendar
    if ref.isdigit():
        for calendar in calendars:
            if calendar["id"] == int(ref):
                return calendar
    raise UsageError(f"no calendar named {ref!r} (see jobring calendars list)")


def _range(text: str) -> dict[str, str]:
    start, sep, end = text.partition("..")
    if not sep or not start.strip() or not end.strip():
        raise argparse.ArgumentTypeError(f"expected START..END (YYYY-MM-DD..YYYY-MM-DD), got {text!r}")
    return {"start": start.strip(), "end": end.strip()}


def _window(text: str) -> dict[str, str]:
    start, sep, end = text.partition("-")
    if not sep or not start.strip() or not end.strip():
        raise argparse.ArgumentTypeError(f"expected START-END (HH:MM-HH:MM), got {text!r}")
    return {"start": start.strip(), "end": end.strip()}


def _period(text: str) -> dict[str, str]:
    start, sep, end = text.partition("..")
    if not sep or not start.strip() or not end.strip():
        raise argparse.ArgumentTypeError(f"expected START..END (ISO 8601 date-times), got {text!r}")
    return {"start": start.strip(), "end": end.strip()}


def _days(text: str) -> list[str]:
    return [d.strip().upper() for d in text.split(",") if d.strip()]


def _parts(args: argparse.Namespace) -> dict[str, Any]:
    """The calendar parts the options give (an edit replaces them all)."""
    parts: dict[str, Any] = {"zone": args.zone or "UTC", "invert": args.invert}
    given = {"dates": args.date, "date_ranges": args.range, "workdays": args.workdays,
             "day_windows": args.window, "cron": args.cron, "periods": args.period}
    parts.update({key: value for key, value in given.items() if value is not None})
    return parts


def _print(calendar: Mapping[str, Any], args: argparse.Namespace, verb: str) -> None:
    print_result(args, calendar,
                 f"calendar {calendar['name']} (id {calendar['id']}) {verb}: {_summary(calendar)}")


def _list(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        calendars = admin.calendars.list(group=resolve_group(admin, args.group))
        if args.json:
            print_json(calendars)
        else:
            print_table(calendars, _COLUMNS)
        return 0

    return run_remote(args, action)


def _show(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        calendar = _find(admin, args.calendar)
        if args.json:
            print_json(calendar)
            return 0
        owner = f"group {calendar['job_group']}" if calendar.get("job_group") else "global"
        print(f"calendar {calendar['name']} (id {calendar['id']}, {owner}), "
              f"edited {instant_text(calendar.get('update_time'))} by {calendar.get('updated_by') or '-'}")
        print(json.dumps(calendar.get("spec"), indent=2, ensure_ascii=False))
        print(f"used by jobs: {_users(calendar, ', ') or '-'}")
        return 0

    return run_remote(args, action)


def _add(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        fields = {"name": args.name, "job_group": resolve_group(admin, args.group), **_parts(args)}
        _print(admin.calendars.create(fields), args, "created")
        return 0

    return run_remote(args, action)


def _edit(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        calendar = _find(admin, args.calendar)
        _print(admin.calendars.update(calendar["id"], _parts(args)), args, "replaced")
        return 0

    return run_remote(args, action)


def _read(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    try:
        with open(path, encoding="utf-8") as source:
            return source.read()
    except OSError as exc:
        raise UsageError(f"cannot read {path!r}: {exc.strerror or exc}") from None


def _import(args: argparse.Namespace) -> int:
    if (args.ics is None) == (args.dates is None):
        raise UsageError("give either --ics FILE or --dates FILE")

    def action(admin: AdminClient) -> int:
        dates = None
        if args.dates is not None:
            text = _read(args.dates).replace(",", "\n")
            dates = [line.strip() for line in text.splitlines() if line.strip()]
        calendar = admin.calendars.import_(
            args.name, group=resolve_group(admin, args.group), zone=args.zone,
            ics=None if args.ics is None else _read(args.ics), dates=dates, until=args.until,
            invert=args.invert, replace=args.replace)
        _print(calendar, args, "imported")
        if not args.json:
            for note in calendar.get("notes") or []:
                print(f"note: {note}", file=sys.stderr)
        return 0

    return run_remote(args, action)


def _delete(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        calendar = _find(admin, args.calendar)
        admin.calendars.delete(calendar["id"])
        print_result(args, {"deleted": calendar["id"]}, f"calendar {calendar['name']} deleted")
        return 0

    return run_remote(args, action)


def _part_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--zone", metavar="ZONE", help="IANA time zone the parts are read in (default UTC)")
    parser.add_argument("--date", action="append", metavar="YYYY-MM-DD", help="a whole day (repeatable)")
    parser.add_argument("--range", type=_range, action="append", metavar="START..END",
                        help="whole days, both ends included (repeatable)")
    parser.add_argument("--workdays", type=_days, metavar="DAYS",
                        help="the workdays, e.g. MON,TUE,WED,THU,FRI: every other day is excluded")
    parser.add_argument("--window", type=_window, action="append", metavar="HH:MM-HH:MM",
                        help="a time of day, every day (repeatable; 22:00-06:00 wraps past midnight)")
    parser.add_argument("--cron", metavar="EXPR", help="the seconds a cron expression selects")
    parser.add_argument("--period", type=_period, action="append", metavar="START..END",
                        help="an absolute range of ISO 8601 date-times (repeatable)")
    parser.add_argument("--invert", action="store_true", help="only the named times are allowed")


def register(sub: Any) -> None:
    """Add this module's commands to the top-level parser."""
    _, commands = group_parser(sub, "calendars", "named calendars: the times jobs must not fire")

    listing = remote_parser(commands, "list", "list calendars (global and your groups')")
    listing.add_argument("--group", type=group_ref, metavar="GROUP", help="the global ones and this group's")
    listing.set_defaults(handler=_list)

    show = remote_parser(commands, "show", "one calendar: its parts and the jobs using it")
    show.add_argument("calendar", metavar="CALENDAR", help="name or id")
    show.set_defaults(handler=_show)

    add = remote_parser(commands, "add", "create a calendar")
    add.add_argument("name", metavar="NAME")
    add.add_argument("--group", type=group_ref, metavar="GROUP",
                     help="the group it belongs to (without: global, admins only)")
    _part_options(add)
    add.set_defaults(handler=_add)

    edit = remote_parser(commands, "edit", "replace a calendar's parts (its jobs are planned again)")
    edit.add_argument("calendar", metavar="CALENDAR", help="name or id")
    _part_options(edit)
    edit.set_defaults(handler=_edit)

    imp = remote_parser(commands, "import", "create (or --replace) a calendar from an .ics file or dates")
    imp.add_argument("name", metavar="NAME")
    imp.add_argument("--group", type=group_ref, metavar="GROUP", help="its group (without: global)")
    imp.add_argument("--zone", metavar="ZONE", help="its zone (floating .ics times are read there)")
    imp.add_argument("--ics", metavar="FILE", help="an iCalendar file ('-': standard input)")
    imp.add_argument("--dates", metavar="FILE", help="dates, one a line or comma separated ('-': stdin)")
    imp.add_argument("--until", metavar="YYYY-MM-DD", help="expand recurring events up to this date")
    imp.add_argument("--invert", action="store_true", help="only the imported times are allowed")
    imp.add_argument("--replace", action="store_true", help="replace the parts of the calendar of that name")
    imp.set_defaults(handler=_import)

    delete = remote_parser(commands, "delete", "delete a calendar (refused while jobs use it)")
    delete.add_argument("calendar", metavar="CALENDAR", help="name or id")
    delete.set_defaults(handler=_delete)
