"""/auth: log in (session cookie + CSRF token), log out, who am I; own password change."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from jobring.admin.api.management.deps import AnyUser, Services
from jobring.admin.api.management.errors import ERROR_RESPONSES, ApiError
from jobring.admin.api.management.models import LoginIn, MeOut, PasswordChange, UserOut
from jobring.admin.api.management.services import ManagementServices
from jobring.admin.audit import Actor, AuditAction, Outcome
from jobring.admin.security.passwords import hash_password, needs_rehash, password_problem, verify_password
from jobring.admin.security.principal import AuthMethod
from jobring.admin.security.sessions import (
    CSRF_COOKIE,
    SESSION_COOKIE,
    SessionData,
    new_csrf_token,
    password_fingerprint,
)
from jobring.admin.store.records import User

router = APIRouter(tags=["auth"], responses=ERROR_RESPONSES)

# Verified against when the user does not exist, so both failures cost the same time.
_DUMMY_HASH = hash_password("jobring-no-such-user")
WRONG_LOGIN = "wrong username or password"


def _limit_keys(request: Request, username: str) -> list[str]:
    client = request.client.host if request.client else "unknown"
    return [f"user:{username.lower()}", f"ip:{client}"]


def _set_session(services: ManagementServices, response: Response, user: User) -> str:
    csrf = new_csrf_token()
    cookie = services.signer.encode(SessionData(user.id, csrf, password_fingerprint(user.password_hash)))
    # The CSRF cookie is readable by the page's scripts (they echo it in a header); the session is not.
    for name, value, httponly in ((SESSION_COOKIE, cookie, True), (CSRF_COOKIE, csrf, False)):
        response.set_cookie(
            name,
            value,
            max_age=services.session_max_age_s,
            path="/",
            httponly=httponly,
            samesite="lax",
            secure=services.settings.secure_cookies,
        )
    return csrf


def _too_many(retry_after: int) -> ApiError:
    return ApiError(
        429,
        f"too many failed attempts; try again in {retry_after} s",
        headers={"Retry-After": str(retry_after)},
    )


@router.post(
    "/auth/login", response_model=MeOut, summary="Log in: sets the session cookie, returns the CSRF token"
)
async def login(body: LoginIn, request: Request, response: Response, services: Services) -> MeOut:
    keys = _limit_keys(request, body.username)
    retry_after = services.limiter.retry_after_s(keys)
    if retry_after > 0:
        raise _too_many(retry_after)
    user = await services.store.users.by_username(body.username)
    ok = verify_password(user.password_hash if user else _DUMMY_HASH, body.password)
    if user is None or not ok:
        services.limiter.record_failure(keys)
        await services.audit.login_failed(body.username, user)
        raise ApiError(401, WRONG_LOGIN)
    services.limiter.record_success(keys[:1])
    if user.password_hash and needs_rehash(user.password_hash):
        await services.store.users.set_password_hash(
            user.id, hash_password(body.password), must_change=user.must_change_password
        )
        user = await services.store.users.get(user.id) or user
    csrf = _set_session(services, response, user)
    await services.audit.record(Actor.user(user), AuditAction.LOGIN)
    return MeOut(user=UserOut.of(user), auth=AuthMethod.SESSION.value, csrf_token=csrf)


@router.post("/auth/logout", status_code=204, response_class=Response, summary="Log out (clears the cookies)")
async def logout(principal: AnyUser, services: Services) -> Response:
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
    response_model=MeOut,
    summary="Change your own password (needs the current one); ends other sessions",
)
async def change_password(
    body: PasswordChange, request: Request, response: Response, services: Services, principal: AnyUser
) -> MeOut:
    user = principal.user
    keys = [f"user:{user.username.lower()}"]
    retry_after = services.limiter.retry_after_s(keys)
    if retry_after > 0:
        raise _too_many(retry_after)
    if not verify_password(user.password_hash, body.current_password):
        services.limiter.record_failure(keys)
        await services.audit.record(
            principal, AuditAction.PASSWORD_CHANGE, target_type="user", target_id=user.id,
            outcome=Outcome.FAILURE,
        )
        raise ApiError(403, "current_password is wrong", "current_password")
    problem = password_problem(body.new_password)
    if problem:
        raise ApiError(422, f"new_password: {problem}", "new_password")
    if body.new_password == body.current_password:
        raise ApiError(422, "new_password: must differ from the current password", "new_password")
    await services.store.users.set_password_hash(user.id, hash_password(body.new_password), must_change=False)
    updated = await services.store.users.get(user.id)
    if updated is None:
        raise ApiError(404, f"user {user.id} no longer exists")
    await services.audit.record(principal, AuditAction.PASSWORD_CHANGE, target_type="user", target_id=user.id)
    csrf = None
    if principal.method is AuthMethod.SESSION:
        csrf = _set_session(services, response, updated)
    return MeOut(user=UserOut.of(updated), auth=principal.method.value, csrf_token=csrf)
