"""/users (admin only) and /tokens (each user's own API tokens; admins may see and revoke all)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Response

from jobring.admin.api.management.auth import hash_new_password
from jobring.admin.api.management.deps import MAX_TOKEN_CHAIN, Admin, Reader, Services
from jobring.admin.api.management.errors import ERROR_RESPONSES, ApiError, not_found
from jobring.admin.api.management.models import (
    MAX_INT32,
    PageOut,
    RevokedOut,
    RoleName,
    Text,
    TokenCreate,
    TokenCreated,
    TokenOut,
    UserChangeOut,
    UserCreate,
    UserOut,
    UserUpdate,
)
from jobring.admin.api.management.services import ManagementServices
from jobring.admin.security.passwords import password_problem
from jobring.admin.security.roles import Role
from jobring.admin.security.tokens import generate_api_token, hash_api_token
from jobring.admin.services.audit import AuditAction
from jobring.admin.services.validation import (
    ConflictingValue,
    FieldError,
    MissingReference,
    check_permission_groups,
    check_username,
)
from jobring.admin.store.records import ApiToken, User

router = APIRouter(tags=["users"], responses=ERROR_RESPONSES)

UserId = Annotated[int, Path(ge=1, le=MAX_INT32)]
TokenId = Annotated[int, Path(ge=1, le=MAX_INT32)]
MAX_TOKENS_PER_USER = 50


async def _load(services: ManagementServices, user_id: int) -> User:
    user = await services.store.users.get(user_id)
    if user is None:
        raise not_found("user", user_id)
    return user


async def _permission(services: ManagementServices, group_ids: list[int]) -> str | None:
    text = check_permission_groups("group_ids", group_ids)
    known = {g.id for g in await services.store.groups.all()}
    for i, gid in enumerate(group_ids):
        if gid not in known:
            raise MissingReference(f"group_ids.{i}", f"executor group {gid} does not exist")
    return text


def _check_password(password: str) -> None:
    problem = password_problem(password)
    if problem:
        raise FieldError("password", problem)


@router.get("/users", response_model=PageOut[UserOut], summary="List users (admin)")
async def list_users(
    services: Services,
    principal: Admin,
    username: Annotated[Text | None, Query(max_length=50, description="substring")] = None,
    role: RoleName | None = None,
    offset: Annotated[int, Query(ge=0, le=MAX_INT32)] = 0,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> PageOut[UserOut]:
    role_code = int(Role.from_label(role)) if role else None
    page = await services.store.users.list(username=username, role=role_code, offset=offset, limit=limit)
    return PageOut[UserOut](
        items=[UserOut.of(u) for u in page.items], total=page.total, offset=offset, limit=limit
    )


@router.post("/users", response_model=UserOut, status_code=201, summary="Create a user (admin)")
async def create_user(body: UserCreate, services: Services, principal: Admin) -> UserOut:
    check_username(body.username)
    _check_password(body.password)
    permission = await _permission(services, body.group_ids)
    password_hash = await hash_new_password(services, body.password)
    new_id = await services.store.users.create(  # Conflict -> 409
        username=body.username,
        role=int(Role.from_label(body.role)),
        password_hash=password_hash,
        permission=permission,
        must_change_password=body.must_change_password,
        glue_permission=body.glue_permission,
        now=services.now_naive_utc(),
    )
    created = await _load(services, new_id)
    await services.audit.user_event(principal, AuditAction.USER_CREATE, created, snapshot=True)
    return UserOut.of(created)


@router.get("/users/{user_id}", response_model=UserOut, summary="One user (admin)")
async def get_user(user_id: UserId, services: Services, principal: Admin) -> UserOut:
    return UserOut.of(await _load(services, user_id))


def _access_change_reasons(before: User, after: User, password_reset: bool) -> list[str]:
    """Why a user update must end the user's sessions and tokens: what they may do changed."""
    reasons = ["password_reset"] if password_reset else []
    if after.role != before.role:
        reasons.append("role_change")
    if after.permitted_group_ids != before.permitted_group_ids:
        reasons.append("group_permission_change")
    if after.glue_permission != before.glue_permission:
        reasons.append("glue_permission_change")
    return reasons


@router.patch("/users/{user_id}", response_model=UserChangeOut, summary="Update a user (admin)")
async def update_user(
    user_id: UserId, body: UserUpdate, services: Services, principal: Admin
) -> UserChangeOut:
    user = await _load(services, user_id)
    changes = body.model_dump(exclude_unset=True)
    for name in ("username", "role", "group_ids", "glue_permission"):
        if name in changes and changes[name] is None:
            raise FieldError(name, "must not be null")
    updated = user
    if body.username is not None:
        check_username(body.username)
        updated = replace(updated, username=body.username)
    if body.role is not None:
        role = Role.from_label(body.role)
        if user.id == principal.user.id and role is not Role.ADMIN:
            raise FieldError("role", "you cannot take the admin role from yourself")
        updated = replace(updated, role=int(role))
    if body.group_ids is not None:
        updated = replace(updated, permission=await _permission(services, body.group_ids))
    if body.glue_permission is not None:
        updated = replace(updated, glue_permission=body.glue_permission)
    if body.password is not None:
        if user.id == principal.user.id:
            raise ConflictingValue("password", "change your own password with POST /users/me/password")
        _check_password(body.password)
    new_hash = None if body.password is None else await hash_new_password(services, body.password)
    await services.store.users.update(updated)  # Conflict -> 409
    if new_hash is not None:
        # An admin's reset: the user must pick their own password at next login.
        await services.store.users.set_password_hash(
            user.id, new_hash, must_change=True, clear_legacy=not services.settings.keep_xxl_job_passwords
        )
        await services.audit.record(
            principal, AuditAction.USER_PASSWORD_RESET, target_type="user", target_id=user.id
        )
    revoked = None
    reasons = _access_change_reasons(user, updated, new_hash is not None)
    if reasons:
        # What the user may do (or who may act as them) changed: every session ends and every
        # API token is revoked, on every node at its next request. An admin changing their
        # own groups ends their own session too.
        access = await services.store.users.revoke_access(user.id, services.now_ms())
        await services.audit.access_revoked(principal, user.id, access, ",".join(reasons))
        revoked = RevokedOut.of(access)
    after = await _load(services, user_id)
    if changes.keys() - {"password"}:
        await services.audit.user_event(principal, AuditAction.USER_UPDATE, after, before=user)
    return UserChangeOut(**UserOut.of(after).model_dump(), revoked=revoked)


@router.delete("/users/{user_id}", status_code=204, response_class=Response, summary="Delete a user (admin)")
async def delete_user(user_id: UserId, services: Services, principal: Admin) -> Response:
    if user_id == principal.user.id:
        raise ApiError(409, "you cannot delete yourself")
    user = await _load(services, user_id)
    # Revoked first (and audited with the counts), so nothing of the user works even while
    # the delete below is under way; the delete then removes the rows.
    access = await services.store.users.revoke_access(user_id, services.now_ms())
    await services.audit.access_revoked(principal, user_id, access, "user_delete")
    if not await services.store.users.delete(user_id):
        raise not_found("user", user_id)
    await services.audit.user_event(principal, AuditAction.USER_DELETE, user, snapshot=True)
    return Response(status_code=204)


@router.get(
    "/tokens",
    response_model=list[TokenOut],
    tags=["tokens"],
    summary="API tokens: yours, or another user's (admin)",
)
async def list_tokens(
    services: Services, principal: Reader, user_id: Annotated[int | None, Query(ge=1, le=MAX_INT32)] = None
) -> list[TokenOut]:
    owner = principal.user.id if user_id is None else user_id
    if owner != principal.user.id and not principal.is_admin:
        raise ApiError(403, "only admins may list other users' tokens")
    return [TokenOut.of(t) for t in await services.store.tokens.list_for_user(owner)]


@router.post(
    "/tokens",
    response_model=TokenCreated,
    status_code=201,
    tags=["tokens"],
    summary="Create an API token for yourself (shown only once); one created with an API token "
            "cannot outlive that token and is revoked with it",
)
async def create_token(body: TokenCreate, services: Services, principal: Reader) -> TokenCreated:
    existing = await services.store.tokens.list_for_user(principal.user.id)
    if sum(not t.revoked for t in existing) >= MAX_TOKENS_PER_USER:
        raise ApiError(409, f"you already have {MAX_TOKENS_PER_USER} active tokens; revoke some first")
    now = services.now_naive_utc()
    expires_at = body.expiry(now)
    if expires_at is not None:
        expires_at = expires_at.replace(microsecond=0)  # as the database keeps it: never later
    if principal.token_id is not None:
        parent = next((t for t in existing if t.id == principal.token_id), None)
        _check_within_parent(body, expires_at, parent)
        if await _chain_length(services, principal.token_id) >= MAX_TOKEN_CHAIN:
            raise ApiError(409, f"this token ends a chain of {MAX_TOKEN_CHAIN} tokens created through "
                                "tokens; create new tokens from a session")
    token = generate_api_token()
    token_id = await services.store.tokens.create(
        principal.user.id, body.name, hash_api_token(token), now, expires_at,
        parent_token_id=principal.token_id,
    )
    details: dict[str, Any] = {"name": body.name}
    if expires_at is not None:
        details["expires_at"] = expires_at.isoformat()
    if principal.token_id is not None:
        details["parent_token_id"] = principal.token_id
    await services.audit.record(
        principal, AuditAction.TOKEN_CREATE, target_type="token", target_id=token_id, details=details
    )
    created = next(
        t for t in await services.store.tokens.list_for_user(principal.user.id) if t.id == token_id
    )
    return TokenCreated(**TokenOut.of(created).model_dump(), token=token)


async def _chain_length(services: ManagementServices, token_id: int) -> int:
    """How many tokens the token ``token_id`` was created through (0: made from a session)."""
    length = 0
    token = await services.store.tokens.get(token_id)
    while token is not None and token.parent_token_id is not None and length < MAX_TOKEN_CHAIN:
        length += 1
        token = await services.store.tokens.get(token.parent_token_id)
    return length


def _check_within_parent(body: TokenCreate, expires_at: datetime | None, parent: ApiToken | None) -> None:
    """A token made with a token may not outlive it (nor be made with one that is gone)."""
    if parent is None or parent.revoked:
        raise ApiError(401, "the API token used for this call is no longer valid")
    if parent.expires_at is None:
        return
    field = "expires_in_days" if body.expires_in_days is not None else "expires_at"
    limit = parent.expires_at.replace(tzinfo=UTC).isoformat().replace("+00:00", "Z")
    if expires_at is None:
        raise FieldError(field, f"a token created with an API token cannot outlive it: give expires_at "
                                f"at or before {limit} (when the token used for this call expires)")
    if expires_at > parent.expires_at:
        raise FieldError(field, f"must be at or before {limit}: a token created with an API token "
                                "cannot outlive it")


@router.delete(
    "/tokens/{token_id}",
    status_code=204,
    response_class=Response,
    tags=["tokens"],
    summary="Revoke an API token (yours; admins: any) and the tokens created with it",
)
async def revoke_token(token_id: TokenId, services: Services, principal: Reader) -> Response:
    owner = None if principal.is_admin else principal.user.id
    descendants = await services.store.tokens.revoke(token_id, user_id=owner)
    if descendants is None:
        raise not_found("active token", token_id)
    await services.audit.record(
        principal, AuditAction.TOKEN_REVOKE, target_type="token", target_id=token_id,
        details={"also_revoked": descendants} if descendants else None,
    )
    return Response(status_code=204)
