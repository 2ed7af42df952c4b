"""`jobring groups ...`: list, show and add executor groups on a running admin."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import Any

from jobring.cli.common import EXIT_USAGE
from jobring.cli.remote import (
    add_connection_args,
    add_json_arg,
    group_parser,
    instant_text,
    positive_int,
    print_json,
    print_page_json,
    print_table,
    run_remote,
)
from jobring.client import AdminClient


def _kind(group: Mapping[str, Any]) -> str:
    return "manual" if group.get("address_type") == 1 else "auto"


_GROUP_COLUMNS = (
    ("ID", "id"),
    ("APPNAME", "app_name"),
    ("TITLE", "title"),
    ("ADDRESSES", _kind),
    ("ONLINE", lambda group: len(group.get("online") or [])),
    ("ADDRESS LIST", lambda group: ",".join(group.get("addresses") or []) or None),
)


def _list(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        page = admin.groups.list(app_name=args.search, limit=args.limit)
        if args.json:
            print_page_json(page)
        else:
            print_table(page.items, _GROUP_COLUMNS)
        return 0

    return run_remote(args, action)


def _show(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        group = admin.groups.get(args.group_id)
        if args.json:
            print_json(group)
            return 0
        print(f"group {group['id']}: {group['app_name']} ({group['title']}), {_kind(group)} addresses")
        for address in group.get("addresses") or []:
            print(f"  address {address}")
        for address in group.get("disabled_addresses") or []:
            print(f"  disabled {address}")
        online = group.get("online") or []
        print(f"online executors: {len(online)}")
        if online:
            print_table(online, (("ADDRESS", "address"),
                                 ("LAST HEARTBEAT (UTC)", lambda e: instant_text(e.get("last_heartbeat")))))
        return 0

    return run_remote(args, action)


def _add(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        group = admin.groups.create(args.app_name, args.title, addresses=args.address)
        if args.json:
            print_json(group)
        else:
            print(f"created group {group['id']} ({group['app_name']}, {_kind(group)} addresses)")
        return 0

    return run_remote(args, action)


def _group_id(admin: AdminClient, ref: str) -> int | None:
    """A group id as given, or the id of the group with exactly this appname (None: none)."""
    if ref.isdigit():
        return int(ref)
    page = admin.groups.list(app_name=ref, limit=500)
    ids = [int(g["id"]) for g in page.items if g.get("app_name") == ref]
    return min(ids) if ids else None  # the group an executor registering as this appname joins


def _token(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        group_id = _group_id(admin, args.group)
        if group_id is None:
            print(f"jobring: error: no executor group with appname {args.group!r}", file=sys.stderr)
            return EXIT_USAGE
        if args.rotate:
            token = admin.groups.rotate_access_token(group_id)
        else:
            token = admin.groups.access_token(group_id)
        print(token)  # only the token: `export T=$(jobring groups token my-app)`
        return 0

    return run_remote(args, action)


def _switch(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        call = admin.groups.disable_address if args.disable else admin.groups.enable_address
        group = call(args.group_id, args.address)
        if args.json:
            print_json(group)
        else:
            state = "disabled" if args.disable else "enabled"
            off = set(group.get("disabled_addresses") or [])
            routable = ", ".join(a for a in group["addresses"] if a not in off) or "-"
            print(f"{args.address} {state} in group {group['id']}; routable: {routable}")
        return 0

    return run_remote(args, action)


def register(sub: Any) -> None:
    """Add this module's commands to the top-level parser."""
    _, commands = group_parser(sub, "groups", "executor groups on a running admin")

    listing: argparse.ArgumentParser = commands.add_parser("list", help="list executor groups")
    listing.add_argument("--search", metavar="TEXT", help="appname contains TEXT")
    listing.add_argument("--limit", type=positive_int, default=50, metavar="N", help="at most N groups")
    listing.set_defaults(handler=_list)

    show: argparse.ArgumentParser = commands.add_parser("show", help="one group with its online executors")
    show.add_argument("group_id", type=positive_int, metavar="ID")
    show.set_defaults(handler=_show)

    add: argparse.ArgumentParser = commands.add_parser("add", help="create an executor group")
    add.add_argument("app_name", metavar="APPNAME", help="the executors' appname")
    add.add_argument("title", metavar="TITLE", help="display name (at most 12 characters)")
    add.add_argument("--address", action="append", metavar="URL",
                     help="a fixed executor address (repeatable); without it executors register themselves")
    add.set_defaults(handler=_add)

    token: argparse.ArgumentParser = commands.add_parser(
        "token", help="print the group's executor access token (admin); --rotate makes a new one")
    token.add_argument("group", metavar="ID_OR_APPNAME", help="the group's id or appname")
    token.add_argument("--rotate", action="store_true",
                       help="replace the token first (executors with the old one are refused)")
    token.set_defaults(handler=_token)
    add_connection_args(token)

    switches = []
    for name, disable in (("disable", True), ("enable", False)):
        switch: argparse.ArgumentParser = commands.add_parser(
            name, help=f"{name} an executor address for routing (admin)")
        switch.add_argument("group_id", type=positive_int, metavar="ID")
        switch.add_argument("address", metavar="URL")
        switch.set_defaults(handler=_switch, disable=disable)
        switches.append(switch)

    for parser in (listing, show, add, *switches):
        add_connection_args(parser)
        add_json_arg(parser)
