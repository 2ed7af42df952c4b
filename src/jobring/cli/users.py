"""`jobring users ...`: console and API users (admin only, through the API); `reset-password
--offline` works on the database itself when nobody can log in."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import TYPE_CHECKING, Any

from jobring.cli.common import UsageError, ask_password
from jobring.cli.db import EXIT_DB_ERROR, add_database_args, database_url, shown_url
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
    revoked_text,
    run_remote,
)
from jobring.client import AdminClient

if TYPE_CHECKING:
    from jobring.admin.store.records import RevokedAccess

ROLES = ("admin", "operator", "viewer")
USER_PASSWORD_ENV = "JOBRING_USER_PASSWORD"

_USER_COLUMNS = (
    ("ID", "id"), ("USERNAME", "username"), ("ROLE", "role"),
    ("GROUPS", lambda u: ",".join(str(g) for g in u.get("group_ids") or []) or None),
    ("GLUE", lambda u: "yes" if u.get("glue_permission") else "no"),
    ("MUST CHANGE PASSWORD", lambda u: "yes" if u.get("must_change_password") else "no"),
    ("CREATED (UTC)", lambda u: instant_text(u.get("add_time"))),
)


def _password_for(username: str) -> str:
    """The new user's (or reset) password: $JOBRING_USER_PASSWORD or a prompt, twice."""
    from_env = os.environ.get(USER_PASSWORD_ENV)
    if from_env:
        return from_env
    first = ask_password(f"password for {username}: ", USER_PASSWORD_ENV)
    if ask_password("again: ", USER_PASSWORD_ENV) != first:
        raise UsageError("the two passwords differ")
    return first


def _user_id(admin: AdminClient, ref: str) -> int:
    """A user named by id (digits) or username."""
    if ref.isdigit():
        return int(ref)
    for user in admin.users.list(username=ref, limit=500).items:
        if user.get("username") == ref:
            return int(user["id"])
    raise UsageError(f"no user is named {ref!r}")


def _group_ids(admin: AdminClient, refs: list[str] | None) -> list[int] | None:
    if refs is None:
        return None
    return [gid for ref in refs if (gid := resolve_group(admin, ref)) is not None]


def _list(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        page = admin.users.list(username=args.search, role=args.role, limit=args.limit)
        if args.json:
            print_page_json(page)
        else:
            print_table(page.items, _USER_COLUMNS)
        return 0

    return run_remote(args, action)


def _add(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        groups = _group_ids(admin, args.group) or []
        user = admin.users.create(args.username, _password_for(args.username), role=args.role,
                                  group_ids=groups, glue_permission=args.glue)
        if args.json:
            print_json(user)
        else:
            print(f"created user {user['id']} ({user['username']}, {user['role']}); "
                  "they must change the password at first login")
        return 0

    return run_remote(args, action)


def _edit(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        user_id = _user_id(admin, args.target)
        changes: dict[str, Any] = {}
        if args.username:
            changes["username"] = args.username
        if args.role:
            changes["role"] = args.role
        groups = _group_ids(admin, args.group)
        if groups is not None:
            changes["group_ids"] = groups
        if args.glue is not None:
            changes["glue_permission"] = args.glue
        if not changes:
            raise UsageError("nothing to change: give --username, --role, --group or --glue/--no-glue")
        user = admin.users.update(user_id, changes)
        print_result(args, user,
                     f"user {user['id']} updated ({user['username']}, {user['role']}){_revoked_note(user)}")
        return 0

    return run_remote(args, action)


async def reset_password(url: str, username: str, *, keep_legacy: bool) -> tuple[str, RevokedAccess]:
    """Give ``username`` a generated one-time password (change forced at next login), end
    its sessions and revoke its API tokens, audit it; returns the password and what was
    revoked. LookupError when there is no such user."""
    from jobring.admin.security.passwords import generate_password, hash_password
    from jobring.admin.services.audit import Actor, ActorKind, AuditAction, AuditLog
    from jobring.admin.store import Store, current_revision
    from jobring.core.clock import SystemClock

    if await current_revision(url) is None:
        raise LookupError("the database has no jobring schema yet; run `jobring db adopt` first")
    store = await Store.open(url, upgrade=False)
    try:
        user = await store.users.by_username(username)
        if user is None:
            raise LookupError(f"no user named {username!r}")
        password = generate_password()
        await store.users.set_password_hash(
            user.id, hash_password(password), must_change=True, clear_legacy=not keep_legacy
        )
        revoked = await store.users.revoke_access(user.id, SystemClock().now_ms())
        audit = AuditLog(store, SystemClock())
        actor = Actor("cli (offline)", ActorKind.SYSTEM)
        await audit.record(
            actor,
            AuditAction.USER_PASSWORD_RESET,
            target_type="user",
            target_id=user.id,
            details={"username": username, "offline": True},
        )
        await audit.access_revoked(actor, user.id, revoked, "password_reset")
        return password, revoked
    finally:
        await store.close()


def _reset_offline(args: argparse.Namespace) -> int:
    from sqlalchemy.exc import SQLAlchemyError

    from jobring.admin.services.settings import load_settings
    from jobring.configbase import ConfigError

    url = database_url(args)
    try:
        keep = load_settings(args.config).keep_xxl_job_passwords
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    try:
        password, revoked = asyncio.run(reset_password(url, args.target, keep_legacy=keep))
    except LookupError as exc:
        raise UsageError(str(exc)) from None
    except (SQLAlchemyError, OSError) as exc:
        print(f"jobring: cannot reset the password in {shown_url(url)}: {exc}", file=sys.stderr)
        return EXIT_DB_ERROR
    print(password)
    print(f"jobring: one-time password of {args.target!r} printed above (shown only once); "
          f"it must be changed at the next login; {revoked_text(revoked.sessions, revoked.tokens)}",
          file=sys.stderr)
    return 0


def _revoked_note(user: dict[str, Any]) -> str:
    revoked = user.get("revoked")
    if not revoked:
        return ""
    return f"; {revoked_text(int(revoked['sessions']), int(revoked['tokens']))}"


def _reset_password(args: argparse.Namespace) -> int:
    if args.offline:
        return _reset_offline(args)

    def action(admin: AdminClient) -> int:
        user_id = _user_id(admin, args.target)
        user = admin.users.update(user_id, {"password": _password_for(args.target)})
        if args.json:
            print_json(user)
        else:
            print(f"password of {user['username']} reset; they must change it at next login"
                  f"{_revoked_note(user)}")
        return 0

    return run_remote(args, action)


def _delete(args: argparse.Namespace) -> int:
    def action(admin: AdminClient) -> int:
        user_id = _user_id(admin, args.target)
        admin.users.delete(user_id)
        print_result(args, {"deleted": user_id}, f"user {user_id} deleted")
        return 0

    return run_remote(args, action)


def register(sub: Any) -> None:
    """Add this module's commands to the top-level parser."""
    _, commands = group_parser(sub, "users", "console and API users (admin only)")

    listing = remote_parser(commands, "list", "list users")
    listing.add_argument("--search", metavar="TEXT", help="username contains TEXT")
    listing.add_argument("--role", choices=ROLES)
    listing.add_argument("--limit", type=positive_int, default=50, metavar="N", help="at most N users")
    listing.set_defaults(handler=_list)

    add = remote_parser(commands, "add", f"create a user (password from ${USER_PASSWORD_ENV} or a prompt)")
    add.add_argument("username", metavar="USERNAME")
    add.add_argument("--role", choices=ROLES, default="operator", help="default operator")
    add.add_argument("--group", type=group_ref, action="append", metavar="GROUP",
                     help="an executor group they may use (appname or id; repeatable)")
    add.add_argument("--glue", action="store_true", help="may edit GLUE sources")
    add.set_defaults(handler=_add)

    edit = remote_parser(commands, "edit", "change a user's name, role, groups or GLUE permission")
    edit.add_argument("target", metavar="USER", help="username or id")
    edit.add_argument("--username", metavar="NEW_NAME", help="rename")
    edit.add_argument("--role", choices=ROLES)
    edit.add_argument("--group", type=group_ref, action="append", metavar="GROUP",
                      help="the groups they may use, replacing the old list (repeatable)")
    edit.add_argument("--glue", action=argparse.BooleanOptionalAction, default=None,
                      help="may (or may not) edit GLUE sources")
    edit.set_defaults(handler=_edit)

    reset = remote_parser(commands, "reset-password",
                          f"set a new password the user must change (from ${USER_PASSWORD_ENV} or a prompt) "
                          "and revoke the user's sessions and API tokens; --offline: a generated one-time "
                          "password, set in the database directly")
    reset.add_argument("target", metavar="USER", help="username or id (--offline: username)")
    reset.add_argument("--offline", action="store_true",
                       help="no admin needed (e.g. nobody can log in): write to the database named by "
                            "--database-url, JOBRING_DATABASE_URL or --config, print the password")
    add_database_args(reset)
    reset.set_defaults(handler=_reset_password)

    delete = remote_parser(commands, "delete", "delete a user")
    delete.add_argument("target", metavar="USER", help="username or id")
    delete.set_defaults(handler=_delete)
