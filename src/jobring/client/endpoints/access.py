"""Who may do what: login sessions (``/auth``), users, API tokens and the admin's settings."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from jobring.client.call import (
    ApiGroup,
    Call,
    Endpoint,
    JsonObject,
    M,
    SessionEffect,
    as_list,
    as_nothing,
    as_object,
    delete,
    get,
    patch,
    post,
)
from jobring.client.core import path_part
from jobring.client.page import Page, as_page


def login(username: str, password: str) -> Call[JsonObject]:
    """Open a session: ``{"user": {...}, "auth": "session", "csrf_token": ...}``.
    The client keeps the cookie and sends the CSRF token from then on."""
    return Call(
        "POST", "/auth/login", as_object, body={"username": username, "password": password},
        effect=SessionEffect.LOGIN,
    )


def logout() -> Call[None]:
    """End the session."""
    return Call("POST", "/auth/logout", as_nothing, effect=SessionEffect.LOGOUT)


def me() -> Call[JsonObject]:
    """The caller: ``{"user": {...}, "auth": "session"|"token", ...}``."""
    return get("/auth/me", as_object)


def change_password(current_password: str, new_password: str) -> Call[JsonObject]:
    """Change your own password: every session ends (this client gets a new one) and every
    API token is revoked; returns what :func:`me` returns plus ``revoked``."""
    return Call(
        "POST", "/users/me/password", as_object,
        body={"current_password": current_password, "new_password": new_password},
        effect=SessionEffect.LOGIN,
    )


class AuthApi(ApiGroup[M]):
    """Sessions: log in and out, who am I, change my password."""

    login = Endpoint(login)
    logout = Endpoint(logout)
    me = Endpoint(me)
    change_password = Endpoint(change_password)


def _user(user_id: int) -> str:
    return f"/users/{path_part(user_id)}"


def list_users(
    *, username: str | None = None, role: str | None = None, offset: int = 0, limit: int = 50
) -> Call[Page]:
    """Users (admin only); ``username`` matches a substring, ``role``: admin, operator, viewer."""
    return get("/users", as_page, username=username, role=role, offset=offset, limit=limit)


def get_user(user_id: int) -> Call[JsonObject]:
    """One user (admin only)."""
    return get(_user(user_id), as_object)


def create_user(
    username: str,
    password: str,
    *,
    role: str = "operator",
    group_ids: Sequence[int] = (),
    glue_permission: bool = False,
    must_change_password: bool = True,
) -> Call[JsonObject]:
    """A new user (admin only); ``group_ids`` are the executor groups they may use."""
    return post("/users", as_object, {
        "username": username, "password": password, "role": role, "group_ids": list(group_ids),
        "glue_permission": glue_permission, "must_change_password": must_change_password,
    })


def update_user(user_id: int, changes: Mapping[str, Any]) -> Call[JsonObject]:
    """Change some of ``username``, ``role``, ``group_ids``, ``glue_permission``,
    ``password`` (a reset: the user must change it) (admin only). A reset or a change of
    role, groups or GLUE permission ends the user's sessions and revokes their API tokens:
    the answer's ``revoked`` says how many (``{"sessions": n, "tokens": m}``)."""
    return patch(_user(user_id), as_object, dict(changes))


def delete_user(user_id: int) -> Call[None]:
    """Delete a user (admin only)."""
    return delete(_user(user_id), as_nothing)


class UsersApi(ApiGroup[M]):
    """Console and API users (admin only)."""

    list = Endpoint(list_users)
    get = Endpoint(get_user)
    create = Endpoint(create_user)
    update = Endpoint(update_user)
    delete = Endpoint(delete_user)


def list_tokens(user_id: int | None = None) -> Call[list[JsonObject]]:
    """Your API tokens, or (admin) another user's; the secrets are never listed."""
    return get("/tokens", as_list, user_id=user_id)


def create_token(
    name: str, expires_in_days: int | None = None, *, expires_at: datetime | str | None = None
) -> Call[JsonObject]:
    """A new API token for yourself; the secret is in ``token``, shown only this once.
    With ``expires_in_days`` it stops working after that many days, with ``expires_at`` (a
    datetime, naive means UTC, or ISO 8601 text) at that instant. A token created while
    authenticated with an API token cannot outlive that token (the admin refuses it)."""
    body: dict[str, Any] = {"name": name}
    if expires_in_days is not None:
        body["expires_in_days"] = expires_in_days
    if expires_at is not None:
        body["expires_at"] = expires_at.isoformat() if isinstance(expires_at, datetime) else expires_at
    return post("/tokens", as_object, body)


def revoke_token(token_id: int) -> Call[None]:
    """Revoke an API token (yours; admins: any)."""
    return delete(f"/tokens/{path_part(token_id)}", as_nothing)


class TokensApi(ApiGroup[M]):
    """Personal API tokens (``Authorization: Bearer <token>``)."""

    list = Endpoint(list_tokens)
    create = Endpoint(create_token)
    revoke = Endpoint(revoke_token)


def _global_token(body: Any) -> str | None:
    token = as_object(body).get("access_token")
    return None if token is None else str(token)


def access_token() -> Call[str | None]:
    """The global executor token, None when it is not enabled (admin only); each group's own
    token is ``groups.access_token(id)``."""
    return get("/settings/access-token", _global_token)


def settings() -> Call[JsonObject]:
    """Version, database backend, time zone, GLUE switch and executor-token mode (admin only)."""
    return get("/settings", as_object)


def console_settings() -> Call[JsonObject]:
    """What every signed-in user's console needs: the GLUE switch and the default zone."""
    return get("/settings/console", as_object)


class SettingsApi(ApiGroup[M]):
    """The admin's settings."""

    get = Endpoint(settings)
    access_token = Endpoint(access_token)
    console = Endpoint(console_settings)

