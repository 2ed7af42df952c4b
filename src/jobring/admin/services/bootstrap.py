"""First-start set-up of the admin: the first user and the secrets kept in the database.

Nothing here has a fixed default: the admin password and the session-signing secret are
either configured or generated once and stored. The global executor access token exists only
when configured (``JOBRING_ACCESS_TOKEN``); otherwise executors use their group's own token.
"""

from __future__ import annotations

import logging
import secrets
import sys
from dataclasses import dataclass
from typing import TextIO

from jobring.admin.security.passwords import generate_password, hash_password
from jobring.admin.security.roles import Role
from jobring.admin.security.secrets_policy import enforce_secret_policy
from jobring.admin.services.settings import AdminSettings
from jobring.admin.store import Store
from jobring.admin.store.errors import Conflict

log = logging.getLogger(__name__)

ADMIN_USERNAME = "admin"
ACCESS_TOKEN_SETTING = "executor_access_token"
SESSION_SECRET_SETTING = "session_secret"


@dataclass(frozen=True, slots=True)
class Secrets:
    """What the admin needs at run time. ``access_token`` is the global executor token, None
    unless configured (opt-in). ``admin_password_generated`` is set only on the start that
    created the first user with a generated password (it was printed once)."""

    access_token: str | None
    session_secret: str
    admin_password_generated: str | None = None


async def ensure_first_user(store: Store, settings: AdminSettings, out: TextIO | None = None) -> str | None:
    """Create user ``admin`` when no user exists; return the password if it was generated.
    On a database with users (an adopted XXL-JOB one), see ``apply_configured_admin_password``."""
    if await store.users.count() > 0:
        await apply_configured_admin_password(store, settings)
        return None
    generated = settings.admin_password is None
    password = generate_password() if generated else settings.admin_password
    assert password is not None
    try:
        await store.users.create(
            username=ADMIN_USERNAME,
            role=int(Role.ADMIN),
            password_hash=hash_password(password),
            must_change_password=generated,
            glue_permission=True,
        )
    except Conflict:
        # Another node starting at the same moment created it first; its password stands.
        log.info("first user %r was created by another node", ADMIN_USERNAME)
        return None
    if generated:
        stream = out if out is not None else sys.stderr
        print(
            f"jobring: created user '{ADMIN_USERNAME}' with the generated password: {password}\n"
            "jobring: this password is shown only once; you must change it at first login.",
            file=stream,
            flush=True,
        )
        return password
    log.info("created user %r with the configured password", ADMIN_USERNAME)
    return None


async def apply_configured_admin_password(store: Store, settings: AdminSettings) -> bool:
    """JOBRING_ADMIN_PASSWORD on a database that has users: set for user ``admin`` while it has
    no jobring password yet (adopted from XXL-JOB, or never logged in); otherwise say why not.
    Returns whether it was applied."""
    if settings.admin_password is None:
        return False
    user = await store.users.by_username(ADMIN_USERNAME)
    if user is None:
        log.warning("JOBRING_ADMIN_PASSWORD ignored: the database has users but none named %r; "
                    "use `jobring users reset-password NAME` to let someone in", ADMIN_USERNAME)
        return False
    if user.password_hash is not None:
        log.warning("JOBRING_ADMIN_PASSWORD ignored: user %r already has a jobring password (it is "
                    "applied only once); use `jobring users reset-password %s` to replace it",
                    ADMIN_USERNAME, ADMIN_USERNAME)
        return False
    await store.users.set_password_hash(
        user.id, hash_password(settings.admin_password), must_change=False,
        clear_legacy=not settings.keep_xxl_job_passwords,
    )
    log.warning("JOBRING_ADMIN_PASSWORD applied to the existing user %r (it had no jobring password)",
                ADMIN_USERNAME)
    return True


async def _configured_or_stored(store: Store, name: str, configured: str | None) -> str:
    if configured:
        return configured
    # get_or_create is atomic across nodes: whoever inserts first wins, the rest read it.
    return await store.settings.get_or_create(name, lambda: secrets.token_urlsafe(32))


async def bootstrap(store: Store, settings: AdminSettings, out: TextIO | None = None) -> Secrets:
    """Run at every start: idempotent, safe when several admin nodes start at once.
    Weak configured secrets raise ConfigError unless ``settings.insecure``."""
    enforce_secret_policy(settings)
    password = await ensure_first_user(store, settings, out)
    # The token an older version generated and kept under ACCESS_TOKEN_SETTING is no longer
    # used: a token valid for every group is only had by asking for it.
    access_token = settings.access_token or None
    session_secret = await _configured_or_stored(store, SESSION_SECRET_SETTING, None)
    return Secrets(
        access_token=access_token, session_secret=session_secret, admin_password_generated=password
    )
