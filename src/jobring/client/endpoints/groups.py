"""Executor groups (``/groups``) and the dashboard (``/dashboard``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jobring.client.call import (
    ApiGroup,
    Call,
    Endpoint,
    JsonObject,
    M,
    as_nothing,
    as_object,
    delete,
    get,
    post,
    put,
)
from jobring.client.core import path_part
from jobring.client.page import Page, as_page


def _group(group_id: int) -> str:
    return f"/groups/{path_part(group_id)}"


def _group_body(app_name: str, title: str, addresses: Sequence[str] | None) -> JsonObject:
    # Giving addresses makes the group manual (address_type 1); without, the registry fills it.
    return {
        "app_name": app_name,
        "title": title,
        "address_type": 0 if addresses is None else 1,
        "addresses": [] if addresses is None else list(addresses),
    }


def list_groups(
    *, app_name: str | None = None, title: str | None = None, offset: int = 0, limit: int = 50
) -> Call[Page]:
    """Executor groups the caller may see, each with its ``addresses`` and ``online`` list;
    ``app_name`` and ``title`` match substrings."""
    return get("/groups", as_page, app_name=app_name, title=title, offset=offset, limit=limit)


def get_group(group_id: int) -> Call[JsonObject]:
    """One executor group with its online addresses and their last heartbeats."""
    return get(_group(group_id), as_object)


def create_group(app_name: str, title: str, addresses: Sequence[str] | None = None) -> Call[JsonObject]:
    """A new executor group: automatic (registry) unless ``addresses`` are given."""
    return post("/groups", as_object, _group_body(app_name, title, addresses))


def update_group(
    group_id: int, app_name: str, title: str, addresses: Sequence[str] | None = None
) -> Call[JsonObject]:
    """Replace the group's fields: automatic unless ``addresses`` are given."""
    return put(_group(group_id), as_object, _group_body(app_name, title, addresses))


def delete_group(group_id: int) -> Call[None]:
    """Delete the group (refused with 409 while jobs use it)."""
    return delete(_group(group_id), as_nothing)


def _token(body: Any) -> str:
    return str(as_object(body)["access_token"])


def group_access_token(group_id: int) -> Call[str]:
    """The group's executor access token: what its executors send (admin only)."""
    return get(f"{_group(group_id)}/access-token", _token)


def rotate_group_access_token(group_id: int) -> Call[str]:
    """Give the group a new executor token and return it; the old one stops working (admin only)."""
    return post(f"{_group(group_id)}/access-token/rotate", _token)
def disable_address(group_id: int, address: str) -> Call[JsonObject]:
    """Take an address out of routing (admin); it stays out while it keeps beating."""
    return post(f"{_group(group_id)}/addresses/disable", as_object, {"address": address})


def enable_address(group_id: int, address: str) -> Call[JsonObject]:
    """Put a disabled address back into routing (admin)."""
    return post(f"{_group(group_id)}/addresses/enable", as_object, {"address": address})


def set_group_flow(group_id: int, flow: JsonObject | None) -> Call[JsonObject]:
    """Set the flow control of every job of the group (None or {}: none); the group."""
    return put(f"{_group(group_id)}/flow", as_object, flow or {})


class GroupsApi(ApiGroup[M]):
    """Executor groups (the reference's xxl_job_group)."""

    list = Endpoint(list_groups)
    get = Endpoint(get_group)
    create = Endpoint(create_group)
    update = Endpoint(update_group)
    delete = Endpoint(delete_group)
    access_token = Endpoint(group_access_token)
    rotate_access_token = Endpoint(rotate_group_access_token)
    disable_address = Endpoint(disable_address)
    enable_address = Endpoint(enable_address)
    set_flow = Endpoint(set_group_flow)


def dashboard(days: int = 7) -> Call[JsonObject]:
    """Counts of jobs, executors and today's runs, and runs per day for ``days`` days."""
    return get("/dashboard", as_object, days=days)


class DashboardApi(ApiGroup[M]):
    """The overview numbers the console's start page shows."""

    get = Endpoint(dashboard)
