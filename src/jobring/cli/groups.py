"""`jobring groups ...`: list, show, add, edit and delete executor groups on a running admin.
A group is named by its appname or its id wherever one is taken."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from jobring.cli.common import UsageError
from jobring.cli.flowopts import add_flow_options, flow_changes, merged_flow
from jobring.cli.remote import (
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
from jobring.client import AdminClient


def _declared(entry: Mapping[str, Any]) -> str:
    """What an online executor declared: only those handlers' jobs are routed to it."""
    handlers = entry.get("handlers")
    if handlers is None:
        return "(not declared: any)"
    return ", ".join(handlers) or "(none)"


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
        group = admin.groups.get(_group_id(admin, args.group))
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
                                 ("DISPATCH", lambda e: e.get("dispatch") or "push"),
                                 ("LAST HEARTBEAT (UTC)", lambda e: instant_text(e.get("last_heartbeat"))),
                                 ("HANDLERS", _declared)))
        return 0

    return run_remote(args, action)


def _add(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        group = admin.groups.create(args.app_name, args.title, addresses=args.address)
        print_result(args, group,
                     f"created group {group['id']} ({group['app_name']}, {_kind(group)} addresses)")
        return 0

    return run_remote(args, action)


def _group_id(admin: AdminClient, ref: str) -> int:
    group_id = resolve_group(admin, ref)
    assert group_id is not None
    return group_id


def _token(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        group_id = _group_id(admin, args.group)
        if args.rotate:
            token = admin.groups.rotate_access_token(group_id)
        else:
            token = admin.groups.access_token(group_id)
        if args.json:
            print_json({"group": group_id, "access_token": token})
        else:
            print(token)  # only the token: `export T=$(jobring groups token my-app)`
        return 0

    return run_remote(args, action)


def _switch(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        call = admin.groups.disable_address if args.disable else admin.groups.enable_address
        group = call(_group_id(admin, args.group), args.address)
        if args.json:
            print_json(group)
        else:
            state = "disabled" if args.disable else "enabled"
            off = set(group.get("disabled_addresses") or [])
            routable = ", ".join(a for a in group["addresses"] if a not in off) or "-"
            print(f"{args.address} {state} in group {group['id']}; routable: {routable}")
        return 0

    return run_remote(args, action)


def _edit(args: argparse.Namespace) -> int:
    if args.address and args.auto:
        raise UsageError("--address and --auto exclude each other")

    def action(admin: AdminClient) -> int:
        group_id = _group_id(admin, args.group)
        old = admin.groups.get(group_id)
        addresses: list[str] | None = old.get("addresses") if old.get("address_type") == 1 else None
        if args.address:
            addresses = args.address
        elif args.auto:
            addresses = None
        group = admin.groups.update(group_id, args.app_name or old["app_name"], args.title or old["title"],
                                    addresses=addresses)
        print_result(args, group,
                     f"group {group['id']} updated ({group['app_name']}, {_kind(group)} addresses)")
        return 0

    return run_remote(args, action)


def _delete(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        group_id = _group_id(admin, args.group)
        admin.groups.delete(group_id)
        print_result(args, {"deleted": group_id}, f"group {group_id} deleted")
        return 0

    return run_remote(args, action)


def _describe_flow(flow: dict[str, Any] | None) -> str:
    if not flow:
        return "none"
    shown = {k: v for k, v in flow.items() if v is not None and k != "rate_period"}
    if "rate_limit" in shown:
        shown["rate_limit"] = f"{shown['rate_limit']}/{flow.get('rate_period') or 'second'}"
    return ", ".join(f"{k}={v}" for k, v in shown.items())


def _flow(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        group_id = _group_id(admin, args.group)
        changes = flow_changes(args)
        if changes is None:
            group = admin.groups.get(group_id)
        else:
            current = admin.groups.get(group_id).get("flow")
            group = admin.groups.set_flow(group_id, merged_flow(current, changes))
        print_result(args, group.get("flow"),
                     f"group {group['id']} flow control: {_describe_flow(group.get('flow'))}")
        return 0

    return run_remote(args, action)


def register(sub: Any) -> None:
    """Add this module's commands to the top-level parser."""
    _, commands = group_parser(sub, "groups", "executor groups on a running admin")

    listing = remote_parser(commands, "list", "list executor groups")
    listing.add_argument("--search", metavar="TEXT", help="appname contains TEXT")
    listing.add_argument("--limit", type=positive_int, default=50, metavar="N", help="at most N groups")
    listing.set_defaults(handler=_list)

    show = remote_parser(commands, "show", "one group with its online executors")
    show.add_argument("group", type=group_ref, metavar="GROUP", help="appname or id")
    show.set_defaults(handler=_show)

    add = remote_parser(commands, "add", "create an executor group (admin)")
    add.add_argument("app_name", metavar="APPNAME", help="the executors' appname (Executor(app_name=...))")
    add.add_argument("title", metavar="TITLE", help="display name (at most 64 characters)")
    add.add_argument("--address", action="append", metavar="URL",
                     help="a fixed executor address (repeatable); without it executors register themselves")
    add.set_defaults(handler=_add)

    edit = remote_parser(commands, "edit", "change a group's appname, title or addresses")
    edit.add_argument("group", type=group_ref, metavar="GROUP", help="appname or id")
    edit.add_argument("--app-name", metavar="APPNAME", help="new appname")
    edit.add_argument("--title", help="new title")
    edit.add_argument("--address", action="append", metavar="URL",
                      help="make the addresses fixed: these (repeatable)")
    edit.add_argument("--auto", action="store_true", help="let executors register themselves again")
    edit.set_defaults(handler=_edit)

    flow = remote_parser(commands, "flow", "show or change the flow control of every job of a group "
                         "(limits, concurrency key, rate, priority)")
    flow.add_argument("group", type=group_ref, metavar="GROUP", help="appname or id")
    add_flow_options(flow, editing=True, what="the group's jobs")
    flow.set_defaults(handler=_flow)

    delete = remote_parser(commands, "delete", "delete a group (refused while jobs use it)")
    delete.add_argument("group", type=group_ref, metavar="GROUP", help="appname or id")
    delete.set_defaults(handler=_delete)

    token = remote_parser(commands, "token", "print the group's executor access token (admin); --rotate "
                          "makes a new one")
    token.add_argument("group", type=group_ref, metavar="GROUP", help="appname or id")
    token.add_argument("--rotate", action="store_true",
                       help="replace the token first (executors with the old one are refused)")
    token.set_defaults(handler=_token)

    for name, disable in (("disable", True), ("enable", False)):
        switch = remote_parser(commands, name, f"{name} an executor address for routing (admin)")
        switch.add_argument("group", type=group_ref, metavar="GROUP", help="appname or id")
        switch.add_argument("address", metavar="URL")
        switch.set_defaults(handler=_switch, disable=disable)
