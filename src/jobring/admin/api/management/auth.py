"""/auth: log in (session cookie + CSRF token), log out, who am I; own password change."""

from __future__ import annotations

import hashlib
import hmac

from fastapi import APIRouter, Request, Response

from jobring.admin.api.management.deps import AnyUser, Services
from jobring.admin.api.management.errors import ERROR_RESPONSES, ApiError
from jobring.admin.api.management.models import (
    LoginIn,
    MeOut,
    PasswordChange,
    PasswordChangedOut,
    RevokedOut,
    UserOut,
)
from jobring.admin.api.management.services import ManagementServices
from jobring.admin.security.passwords import HashingBusy, needs_rehash, password_problem
from jobring.admin.security.principal import AuthMethod
from jobring.admin.security.sessions import (
    CSRF_COOKIE,
    SESSION_COOKIE,
    csrf_token_for,
    hash_session_id,
    new_session_id,
)
from jobring.admin.services.audit import Actor, AuditAction, Outcome
from jobring.admin.store.records import User

router = APIRouter(tags=["auth"], responses=ERROR_RESPONSES)

WRONG_LOGIN = "wrong username or password"


def client_address(request: Request) -> str:
    """The TCP peer, or the address a trusted proxy forwarded (uvicorn applies
    JOBRING_TRUSTED_PROXIES; forwarded headers from anyone else never get here)."""
    return request.client.host if request.client else "unknown"


async def start_session(services: ManagementServices, response: Response, user: User) -> tuple[str, str]:
    """Store a new session for ``user`` and set its cookies; returns (id hash, CSRF token)."""
    session_id = new_session_id()
    id_hash = hash_session_id(session_id)
    now = services.now_ms()
    await services.store.sessions.create(id_hash, user.id, now, now + services.session_max_age_s * 1000)
    csrf = csrf_token_for(services.secrets.session_secret, session_id)
    # The CSRF cookie is readable by the page's scripts (they echo it in a header); the session is not.
    for name, value, httponly in ((SESSION_COOKIE, session_id, True), (CSRF_COOKIE, csrf, False)):
        response.set_cookie(
            name,
            value,
            max_age=services.session_max_age_s,
            path="/",
            httponly=httponly,
            samesite="lax",
            secure=services.settings.secure_cookies,
        )
    return id_hash, csrf


def _too_many(retry_after: int, why: str = "too many failed attempts") -> ApiError:
    return ApiError(
        429,
        f"{why}; try again in {retry_after} s",
        headers={"Retry-After": str(retry_after)},
    )


async def _check_password(services: ManagementServices, password_hash: str | None, password: str) -> bool:
    try:
        if not password_hash:  # nothing to check against: costs a hash all the same
            await services.passwords.hash(password)
            return False
        return await services.passwords.verify(password_hash, password)
    except HashingBusy:
        # Refused before any hashing: a flood of logins must not queue up behind the pool.
        raise _too_many(1, "too many logins in progress") from None


async def _rehash_if_needed(services: ManagementServices, user: User, password: str) -> User:
    if not (user.password_hash and needs_rehash(user.password_hash)):
        return user
    try:
        new_hash = await services.passwords.hash(password)
    except HashingBusy:
        return user  # next login will do it
    await services.store.users.set_password_hash(user.id, new_hash, must_change=user.must_change_password)
    return await services.store.users.get(user.id) or user


async def _adopt_md5_login(
    services: ManagementServices, user: User, legacy_md5: str, password: str
) -> tuple[bool, User]:
    """An adopted XXL-JOB user's first login: its unsalted MD5 is accepted this once; the
    password is then kept as an argon2 hash and must be changed before anything else."""
    try:
        new_hash = await services.passwords.hash(password)  # costs what a verify costs
    except HashingBusy:
        raise _too_many(1, "too many logins in progress") from None
    given = hashlib.md5(password.encode("utf-8"), usedforsecurity=False).hexdigest()
    if not hmac.compare_digest(given, legacy_md5.strip().lower()):
        return False, user
    await services.store.users.set_password_hash(user.id, new_hash, must_change=True)
    await services.audit.record(
        Actor.user(user), AuditAction.PASSWORD_CHANGE, target_type="user", target_id=user.id,
        details={"reason": "XXL-JOB password accepted once; argon2 hash stored, change forced"},
    )
    return True, await services.store.users.get(user.id) or user


@router.post(
    "/auth/login", response_model=MeOut, summary="Log in: sets the session cookie, returns the CSRF token"
)
async def login(body: LoginIn, request: Request, response: Response, services: Services) -> MeOut:
    address = client_address(request)
    # The limiter is asked before any hashing, so throttled attempts cost no CPU.
    retry_after = services.limiter.retry_after_s(body.username, address)
    if retry_after > 0:
        raise _too_many(retry_after)
    user = await services.store.users.by_username(body.username)
    stored = user.password_hash if user is not None else None
    legacy = await services.store.users.legacy_md5(user.id) if user is not None and stored is None else None
    if user is not None and legacy is not None:
        ok, user = await _adopt_md5_login(services, user, legacy, body.password)
    else:
        # Unknown users cost a hash too (hashing costs what a verify costs), so timing tells
        # nothing; only a real stored hash can make the login succeed.
        ok = await _check_password(services, stored, body.password)
    if user is None or not ok:
        services.limiter.record_failure(body.username, address)
        await services.audit.login_failed(body.username, user)
        raise ApiError(401, WRONG_LOGIN, code="auth.wrong_login")
    services.limiter.record_success(body.username, address)
    user = await _rehash_if_needed(services, user, body.password)
    _, csrf = await start_session(services, response, user)
    await services.audit.record(Actor.user(user), AuditAction.LOGIN)
    return MeOut(user=UserOut.of(user), auth=AuthMethod.SESSION.value, csrf_token=csrf)


@router.post(
    "/auth/logout",
    status_code=204,
    response_class=Response,
    summary="Log out: ends the session on the server",
)
async def logout(principal: AnyUser, services: Services) -> Response:
    if principal.session_hash is not None:
        await services.store.sessions.revoke(principal.session_hash)
    await services.audit.record(principal, AuditAction.LOGOUT)
    response = Response(status_code=204)
    response.delete_cookie(SESSION_COOKIE, path="/")
    response.delete_cookie(CSRF_COOKIE, path="/")
    return response


@router.get("/auth/me", response_model=MeOut, summary="The logged-in user")
async def me(principal: AnyUser) -> MeOut:
    return MeOut(
        user=UserOut.of(principal.user), auth=principal.method.value, csrf_token=principal.csrf_token
    )


@router.post(
    "/users/me/password",
    response_model=PasswordChangedOut,
    summary="Change your own password (needs the current one); ends every session and revokes every "
            "API token, then starts a new session for a session caller",
)
async def change_password(
    body: PasswordChange, request: Request, response: Response, services: Services, principal: AnyUser
) -> PasswordChangedOut:
    user = principal.user
    address = client_address(request)
    retry_after = services.limiter.retry_after_s(user.username, address)
    if retry_after > 0:
        raise _too_many(retry_after)
    problem = password_problem(body.new_password)
    if problem:
        raise ApiError(422, f"new_password: {problem}", "new_password")
    if body.new_password == body.current_password:
        raise ApiError(422, "new_password: must differ from the current password", "new_password")
    if not await _check_password(services, user.password_hash, body.current_password):
        services.limiter.record_failure(user.username, address)
        await services.audit.record(
            principal, AuditAction.PASSWORD_CHANGE, target_type="user", target_id=user.id,
            outcome=Outcome.FAILURE,
        )
        raise ApiError(403, "current_password is wrong", "current_password")
    new_hash = await hash_new_password(services, body.new_password)
    await services.store.users.set_password_hash(
        user.id, new_hash, must_change=False, clear_legacy=not services.settings.keep_xxl_job_passwords
    )
    # Every session ends, this one too (a new one is issued below), and every API token is
    # revoked, the one of this call too: a stolen cookie or token dies here.
    revoked = await services.store.users.revoke_access(user.id, services.now_ms())
    updated = await services.store.users.get(user.id)
    if updated is None:
        raise ApiError(404, f"user {user.id} no longer exists")
    await services.audit.record(principal, AuditAction.PASSWORD_CHANGE, target_type="user", target_id=user.id)
    await services.audit.access_revoked(principal, user.id, revoked, "password_change")
    csrf = None
    if principal.method is AuthMethod.SESSION:
        _, csrf = await start_session(services, response, updated)
    return PasswordChangedOut(user=UserOut.of(updated), auth=principal.method.value, csrf_token=csrf,
                              revoked=RevokedOut.of(revoked))


async def hash_new_password(services: ManagementServices, password: str) -> str:
    """The argon2 hash of a new password, computed in the pool; 503 while it is saturated."""
    try:
        return await services.passwords.hash(password)
    except HashingBusy:
        raise ApiError(
            503, "the admin is busy checking passwords; try again", headers={"Retry-After": "1"}
        ) from None

