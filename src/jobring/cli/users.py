"""`jobring users reset-password NAME`: offline, against the database (no admin needed)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from jobring.cli.common import UsageError
from jobring.cli.db import EXIT_DB_ERROR, add_database_args, database_url, shown_url


async def reset_password(url: str, username: str, *, keep_legacy: bool) -> str:
    """Give ``username`` a generated one-time password (change forced at next login), end
    its sessions, audit it; returns the password. LookupError when there is no such user."""
    from jobring.admin.audit import Actor, ActorKind, AuditAction, AuditLog
    from jobring.admin.security.passwords import generate_password, hash_password
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
        await store.sessions.revoke_user(user.id)
        await AuditLog(store, SystemClock()).record(
            Actor("cli (offline)", ActorKind.SYSTEM),
            AuditAction.USER_PASSWORD_RESET,
            target_type="user",
            target_id=user.id,
            details={"username": username, "offline": True},
        )
        return password
    finally:
        await store.close()


def _reset(args: argparse.Namespace) -> int:
    from sqlalchemy.exc import SQLAlchemyError

    from jobring.config import ConfigError, load_settings

    url = database_url(args)
    try:
        keep = load_settings(args.config).keep_xxl_job_passwords
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    try:
        password = asyncio.run(reset_password(url, args.username, keep_legacy=keep))
    except LookupError as exc:
        raise UsageError(str(exc)) from None
    except (SQLAlchemyError, OSError) as exc:
        print(f"jobring: cannot reset the password in {shown_url(url)}: {exc}", file=sys.stderr)
        return EXIT_DB_ERROR
    print(password)
    print(
        f"jobring: one-time password of {args.username!r} printed above (shown only once); "
        "it must be changed at the next login; the user's sessions were ended",
        file=sys.stderr,
    )
    return 0


def register(sub: Any) -> None:
    """Add this module's commands to the top-level parser."""
    parser: argparse.ArgumentParser = sub.add_parser("users", help="console users, offline (the database)")
    parser.set_defaults(handler=None)
    commands = parser.add_subparsers(dest="users_command", metavar="COMMAND")
    text = (
        "set a generated one-time password for USERNAME directly in the database (works "
        "without a running admin, e.g. when nobody can log in); the user must change it at login"
    )
    reset = commands.add_parser("reset-password", help=text, description=text)
    reset.add_argument("username", metavar="USERNAME")
    add_database_args(reset)
    reset.set_defaults(handler=_reset)
