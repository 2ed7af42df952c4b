"""`jobring tokens ...`: personal API tokens, the CLI's (and scripts') way to authenticate."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from jobring.cli.common import UsageError, ask_password
from jobring.cli.remote import (
    add_connection_args,
    add_json_arg,
    group_parser,
    instant_text,
    positive_int,
    print_json,
    print_result,
    print_table,
    revoked_text,
    run_remote,
)
from jobring.client import AdminClient

PASSWORD_ENV = "JOBRING_PASSWORD"
NEW_PASSWORD_ENV = "JOBRING_NEW_PASSWORD"


def _password(username: str) -> str:
    return ask_password(f"password of {username}: ", PASSWORD_ENV)


def _create(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        if args.user:
            admin.login(args.user, _password(args.user))
        created = admin.tokens.create(args.name, expires_in_days=args.expires_in, expires_at=args.expires_at)
        if args.json:
            print_json(created)
        else:
            # The secret alone on stdout, so that `export JOBRING_TOKEN=$(jobring tokens create ...)` works.
            print(created["token"])
            print(f"jobring: token {created['id']} ({created['name']}) created; it is shown only this once",
                  file=sys.stderr)
        return 0

    return run_remote(args, action)


def _list(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        tokens = admin.tokens.list(user_id=args.user_id)
        if args.json:
            print_json(tokens)
            return 0
        print_table(tokens, (
            ("ID", "id"), ("NAME", "name"), ("CREATED (UTC)", lambda t: instant_text(t.get("add_time"))),
            ("LAST USED (UTC)", lambda t: instant_text(t.get("last_used_time"))),
            ("EXPIRES (UTC)", lambda t: instant_text(t.get("expires_at")) or "never"),
            ("STATE", lambda t: "revoked" if t.get("revoked") else "active"),
        ))
        return 0

    return run_remote(args, action)


def _new_password() -> str:
    from_env = os.environ.get(NEW_PASSWORD_ENV)
    if from_env:
        return from_env
    first = ask_password("new password: ", NEW_PASSWORD_ENV)
    if ask_password("new password again: ", NEW_PASSWORD_ENV) != first:
        raise UsageError("the two new passwords differ")
    return first


def _change_password(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        current = _password(args.user)
        new = _new_password()
        admin.login(args.user, current)
        changed = admin.auth.change_password(current, new)
        revoked = changed.get("revoked") or {"sessions": 0, "tokens": 0}
        print(f"password of {args.user} changed; {revoked_text(revoked['sessions'], revoked['tokens'])}",
              file=sys.stderr)
        return 0

    return run_remote(args, action)


def _revoke(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        admin.tokens.revoke(args.token_id)
        print_result(args, {"revoked": args.token_id}, f"token {args.token_id} revoked")
        return 0

    return run_remote(args, action)


def register(sub: Any) -> None:
    """Add this module's commands to the top-level parser."""
    _, commands = group_parser(sub, "tokens", "personal API tokens")

    create: argparse.ArgumentParser = commands.add_parser(
        "create", help="create an API token and print it (only this once)")
    create.add_argument("name", metavar="NAME", help="what the token is for, e.g. the machine's name")
    create.add_argument("--user", metavar="USERNAME",
                        help=f"log in as USERNAME (password from ${PASSWORD_ENV} or a prompt) instead of "
                             "using --token")
    expiry = create.add_mutually_exclusive_group()
    expiry.add_argument("--expires-in", type=positive_int, metavar="DAYS",
                        help="the token stops working after DAYS days (default: never)")
    expiry.add_argument("--expires-at", metavar="INSTANT",
                        help="the token stops working at INSTANT (ISO 8601, UTC without an offset); "
                             "a token created with a token that expires must expire no later")
    create.set_defaults(handler=_create)

    listing: argparse.ArgumentParser = commands.add_parser("list", help="list your API tokens")
    listing.add_argument("--user-id", type=positive_int, metavar="ID", help="another user's tokens (admin)")
    listing.set_defaults(handler=_list)

    revoke: argparse.ArgumentParser = commands.add_parser("revoke", help="revoke an API token")
    revoke.add_argument("token_id", type=positive_int, metavar="ID")
    revoke.set_defaults(handler=_revoke)

    for parser in (create, listing, revoke):
        add_connection_args(parser)
        add_json_arg(parser)

    password: argparse.ArgumentParser = sub.add_parser(
        "password", help="change your password (also the first-login change of a generated one)",
        description=f"Log in as --user and change its password. The current password comes from "
                    f"${PASSWORD_ENV} or a prompt, the new one from ${NEW_PASSWORD_ENV} or a prompt.")
    password.add_argument("--user", metavar="USERNAME", default="admin",
                          help="whose password (default admin)")
    add_connection_args(password)
    password.set_defaults(handler=_change_password)
