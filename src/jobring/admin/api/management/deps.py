"""FastAPI dependencies: the services, and the authenticated caller with its checks.

Authentication is a Bearer API token (``Authorization: Bearer jr_...``, refused once revoked
or past its ``expires_at``) or the session cookie, checked against the session table on every
request (a revoked session ends at once, on every node). Cookie sessions must send the CSRF
token in ``X-CSRF-Token`` on unsafe methods.
A user flagged ``must_change_password`` may only use ``me``, change-password and logout.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated

from fastapi import Depends, Request

from jobring.admin.api.management.errors import ApiError, not_found
from jobring.admin.api.management.services import ManagementServices
from jobring.admin.security.principal import AuthMethod, Principal
from jobring.admin.security.sessions import (
    CSRF_HEADER,
    SESSION_COOKIE,
    SESSION_TOUCH_INTERVAL_MS,
    csrf_matches,
    csrf_token_for,
    hash_session_id,
    looks_like_session_id,
)
from jobring.admin.security.tokens import hash_api_token, looks_like_api_token
from jobring.admin.store.records import ApiToken
from jobring.errors import Forbidden

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
MAX_TOKEN_CHAIN = 16  # tokens created through tokens: at most this many ancestors
TOKEN_TOUCH_INTERVAL = timedelta(minutes=1)
MUST_CHANGE_MESSAGE = "you must change your password first (POST /api/v1/users/me/password)"


def get_services(request: Request) -> ManagementServices:
    services = request.app.state.services
    assert isinstance(services, ManagementServices)
    return services


Services = Annotated[ManagementServices, Depends(get_services)]


def _unauthenticated(message: str) -> ApiError:
    return ApiError(401, message, headers={"WWW-Authenticate": "Bearer"})


async def principal_from_api_token(services: ManagementServices, token: str) -> Principal:
    """The user of a personal API token (``jr_...``); ApiError 401 for anything else."""
    if not looks_like_api_token(token):
        raise _unauthenticated("invalid API token")
    record = await services.store.tokens.by_hash(hash_api_token(token))
    if record is None or record.revoked:
        raise _unauthenticated("invalid or revoked API token")
    now = services.now_naive_utc()
    if record.expires_at is not None and now >= record.expires_at:
        raise _unauthenticated("API token expired")
    if record.parent_token_id is not None and not await _ancestors_valid(services, record, now):
        raise _unauthenticated("the API token this token was created with is no longer valid")
    user = await services.store.users.get(record.user_id)
    if user is None:
        raise _unauthenticated("the token's user no longer exists")
    if record.last_used_time is None or now - record.last_used_time >= TOKEN_TOUCH_INTERVAL:
        await services.store.tokens.touch_last_used(record.id, now)
    return Principal(user=user, method=AuthMethod.TOKEN, token_id=record.id)


async def _ancestors_valid(services: ManagementServices, token: ApiToken, now: datetime) -> bool:
    """Every token up the chain ``token`` was created through is still valid. Revoking a token
    revokes its descendants, and a descendant never expires later; this check also holds when
    a token was created while its parent was being revoked."""
    parent_id = token.parent_token_id
    hops = 0
    while parent_id is not None:
        hops += 1
        if hops > MAX_TOKEN_CHAIN:
            return False  # deeper than tokens can be created
        parent = await services.store.tokens.get(parent_id)
        if parent is None or parent.revoked or (parent.expires_at is not None and now >= parent.expires_at):
            return False
        parent_id = parent.parent_token_id
    return True


async def _from_session(services: ManagementServices, request: Request, cookie: str) -> Principal:
    if not looks_like_session_id(cookie):
        raise _unauthenticated("session invalid; log in again")
    id_hash = hash_session_id(cookie)
    session = await services.store.sessions.get(id_hash)
    now = services.now_ms()
    if session is None or session.revoked or now >= session.expires:
        raise _unauthenticated("session ended or expired; log in again")
    user = await services.store.users.get(session.user_id)
    if user is None:
        raise _unauthenticated("session ended; log in again")
    csrf = csrf_token_for(services.secrets.session_secret, cookie)
    if request.method not in SAFE_METHODS and not csrf_matches(csrf, request.headers.get(CSRF_HEADER)):
        raise ApiError(403, f"missing or wrong {CSRF_HEADER} header")
    if now - session.last_seen >= SESSION_TOUCH_INTERVAL_MS:
        await services.store.sessions.touch(id_hash, now)
    return Principal(user=user, method=AuthMethod.SESSION, csrf_token=csrf, session_hash=id_hash)


async def authenticate(request: Request, services: ManagementServices) -> Principal:
    """The caller, or ApiError 401/403."""
    authorization = request.headers.get("Authorization")
    if authorization:
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise _unauthenticated("Authorization must be 'Bearer <API token>'")
        return await principal_from_api_token(services, token.strip())
    cookie = request.cookies.get(SESSION_COOKIE)
    if cookie:
        return await _from_session(services, request, cookie)
    raise _unauthenticated("authentication required: log in or send an API token")


async def any_principal(request: Request, services: Services) -> Principal:
    """The caller, even one that must still change their password."""
    return await authenticate(request, services)


async def current_principal(request: Request, services: Services) -> Principal:
    """The caller, refused while they must change their password."""
    principal = await authenticate(request, services)
    if principal.user.must_change_password:
        raise ApiError(403, MUST_CHANGE_MESSAGE)
    return principal


async def admin_principal(principal: Annotated[Principal, Depends(current_principal)]) -> Principal:
    if not principal.is_admin:
        raise ApiError(403, "this needs the admin role")
    return principal


async def writer_principal(principal: Annotated[Principal, Depends(current_principal)]) -> Principal:
    if not principal.can_write:
        raise ApiError(403, "the viewer role is read-only")
    return principal


AnyUser = Annotated[Principal, Depends(any_principal)]
Reader = Annotated[Principal, Depends(current_principal)]
Writer = Annotated[Principal, Depends(writer_principal)]
Admin = Annotated[Principal, Depends(admin_principal)]


def ensure_group_read(principal: Principal, group_id: int, hidden: Exception | None = None) -> None:
    """Pass when the caller may see the group; else raise ``hidden``, what the request answers
    when the thing it names does not exist (default: the group not found). A thing the caller
    may not see is never told apart from a missing one (no probing of ids or of their groups)."""
    if not principal.can_read_group(group_id):
        raise hidden if hidden is not None else not_found("executor group", group_id)


def ensure_group_write(principal: Principal, group_id: int, hidden: Exception | None = None) -> None:
    """:func:`ensure_group_read`, then Forbidden for the viewer role."""
    ensure_group_read(principal, group_id, hidden)
    if not principal.can_write:
        raise Forbidden("the viewer role is read-only")


def service_unavailable(what: str) -> ApiError:
    return ApiError(503, f"{what} is not available on this node")
