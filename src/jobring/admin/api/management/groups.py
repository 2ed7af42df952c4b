"""/groups: executor groups — CRUD, manual or automatic addresses, online addresses, and
each group's executor access token.

Creating groups, and changing a group's appname, address type or manual addresses, is an
admin action: those decide where the admin sends job parameters and executor tokens. An
operator of a group may change its title (and delete it when it has no jobs).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, timedelta
from typing import Annotated

from fastapi import APIRouter, Path, Query, Response

from jobring.admin.api.management.deps import (
    Admin,
    Reader,
    Services,
    Writer,
    ensure_group_read,
    ensure_group_write,
)
from jobring.admin.api.management.errors import ERROR_RESPONSES, ApiError, not_found
from jobring.admin.api.management.models import (
    MAX_INT32,
    AddressIn,
    GroupIn,
    GroupOut,
    GroupTokenOut,
    PageOut,
    Text,
)
from jobring.admin.api.management.services import ManagementServices
from jobring.admin.monitors.monitors import refresh_group_addresses
from jobring.admin.security.principal import Principal
from jobring.admin.services.audit import AuditAction
from jobring.admin.services.executor_tokens import new_group_token
from jobring.admin.services.validation import GroupFields, check_address, check_group
from jobring.admin.store.records import JobGroup

router = APIRouter(tags=["groups"], responses=ERROR_RESPONSES)

GroupId = Annotated[int, Path(ge=1, le=MAX_INT32)]
# An address is online while its last heartbeat is younger than this (the reference's 90 s).
DEAD_AFTER = timedelta(seconds=90)


async def _out(services: ManagementServices, group: JobGroup) -> GroupOut:
    cutoff = services.now_naive_utc() - timedelta(seconds=services.settings.executor_dead_after_s)
    entries = [
        e
        for e in await services.store.registry.entries(group.app_name)
        if e.update_time is not None and e.update_time > cutoff
    ]
    return GroupOut.of(group, entries)


async def _load(services: ManagementServices, group_id: int) -> JobGroup:
    group = await services.store.groups.get(group_id)
    if group is None:
        raise not_found("executor group", group_id)
    return group


async def _validated(
    services: ManagementServices, body: GroupIn, group_id: int, unchanged_routing_of: JobGroup | None = None
) -> JobGroup:
    """The group to store; with ``unchanged_routing_of`` (a non-admin's edit) 403 when the
    appname, address type or manual addresses differ from that group's."""
    fields = GroupFields(body.app_name, body.title, body.address_type, body.addresses)
    address_list = check_group(fields, services.address_policy)
    group = JobGroup(
        id=group_id,
        app_name=body.app_name,
        title=body.title,
        address_type=body.address_type,
        address_list=address_list,
    )
    if unchanged_routing_of is not None:
        _ensure_routing_unchanged(unchanged_routing_of, group)
    same_name = await services.store.groups.by_app_name(body.app_name)
    if same_name is not None and same_name.id != group_id:
        raise ApiError(409, f"app_name {body.app_name!r} is already used by group {same_name.id}", "app_name")
    return group


@router.get("/groups", response_model=PageOut[GroupOut], summary="List executor groups")
async def list_groups(
    services: Services,
    principal: Reader,
    app_name: Annotated[Text | None, Query(max_length=64, description="substring")] = None,
    title: Annotated[Text | None, Query(max_length=64, description="substring")] = None,
    offset: Annotated[int, Query(ge=0, le=MAX_INT32)] = 0,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> PageOut[GroupOut]:
    page = await services.store.groups.list(
        app_name=app_name, title=title, group_ids=principal.readable_group_ids(), offset=offset, limit=limit
    )
    items = [await _out(services, g) for g in page.items]
    return PageOut[GroupOut](items=items, total=page.total, offset=offset, limit=limit)


def _tokens_changed(services: ManagementServices) -> None:
    """Executor tokens are re-read on this node's next check: a group's executors start
    right after it is made, renamed or rotated, and a deleted group's token stops at once
    (other nodes re-read within the tokens' refresh)."""
    if services.executor_tokens is not None:
        services.executor_tokens.forget()


async def _take_registry(services: ManagementServices, group: JobGroup) -> None:
    """An automatic group gets the addresses already registered under its appname at once
    (not at the next registry round), and the trigger service re-reads groups."""
    if group.address_type == 0:
        await refresh_group_addresses(services.store, services.now_naive_utc().replace(tzinfo=UTC),
                                      services.settings.executor_dead_after_s)
    if services.trigger is not None:
        services.trigger.forget_groups()


@router.post("/groups", response_model=GroupOut, status_code=201, summary="Create an executor group (admin)")
async def create_group(body: GroupIn, services: Services, principal: Admin) -> GroupOut:
    group = await _validated(services, body, 0)
    if services.secrets.access_token is None:
        # With the global token opted in, a new group uses it until an admin gives the group
        # a token of its own (rotate): its executors hold the global one.
        group = replace(group, access_token=new_group_token())
    new_id = await services.store.groups.create(group, services.now_naive_utc())
    _tokens_changed(services)
    created = await _load(services, new_id)
    await services.audit.group_event(principal, AuditAction.GROUP_CREATE, created, snapshot=True)
    await _take_registry(services, created)
    return await _out(services, await _load(services, new_id))


@router.get(
    "/groups/{group_id}", response_model=GroupOut, summary="One executor group with its online addresses"
)
async def get_group(group_id: GroupId, services: Services, principal: Reader) -> GroupOut:
    ensure_group_read(principal, group_id)
    return await _out(services, await _load(services, group_id))


@router.put("/groups/{group_id}", response_model=GroupOut, summary="Replace an executor group's fields")
async def update_group(group_id: GroupId, body: GroupIn, services: Services, principal: Writer) -> GroupOut:
    ensure_group_write(principal, group_id)
    old = await _load(services, group_id)
    group = await _validated(services, body, group_id, None if principal.is_admin else old)
    if group.address_type == 0:
        # Automatic groups keep the registry's addresses until the next refresh.
        group = JobGroup(
            id=group.id,
            app_name=group.app_name,
            title=group.title,
            address_type=0,
            address_list=old.address_list if old.app_name == group.app_name else None,
        )
    await services.store.groups.update(group, services.now_naive_utc())
    _tokens_changed(services)
    updated = await _load(services, group_id)
    await services.audit.group_event(principal, AuditAction.GROUP_UPDATE, updated, before=old)
    await _take_registry(services, group)
    return await _out(services, await _load(services, group_id))


def _ensure_routing_unchanged(old: JobGroup, new: JobGroup) -> None:
    """403 when a non-admin changes where the group's jobs are sent."""
    if new.app_name != old.app_name:
        raise ApiError(403, "changing a group's app_name needs the admin role", "app_name")
    if new.address_type != old.address_type:
        raise ApiError(403, "changing a group's address_type needs the admin role", "address_type")
    if new.address_type == 1 and new.addresses != old.addresses:
        raise ApiError(403, "changing a group's executor addresses needs the admin role", "addresses")


@router.get(
    "/groups/{group_id}/access-token",
    response_model=GroupTokenOut,
    summary="The group's executor access token (admin)",
)
async def get_group_token(group_id: GroupId, services: Services, principal: Admin) -> GroupTokenOut:
    group = await _load(services, group_id)
    if not group.access_token:
        raise ApiError(404, f"executor group {group_id} has no token of its own; rotate to create one")
    await services.audit.record(principal, AuditAction.SECRET_READ, target_type="group",
                                target_id=group_id, group_id=group_id, details={"read": "access_token"})
    return GroupTokenOut(group_id=group.id, app_name=group.app_name, access_token=group.access_token)


@router.post(
    "/groups/{group_id}/access-token/rotate",
    response_model=GroupTokenOut,
    summary="Give the group a new executor access token; the old one stops working (admin)",
)
async def rotate_group_token(group_id: GroupId, services: Services, principal: Admin) -> GroupTokenOut:
    group = await _load(services, group_id)
    token = new_group_token()
    await services.store.groups.set_access_token(group_id, token)
    _tokens_changed(services)
    if services.trigger is not None:
        services.trigger.forget_groups()  # dispatch sends the new token from now on
    await services.audit.record(principal, AuditAction.GROUP_TOKEN_ROTATE, target_type="group",
                                target_id=group_id, group_id=group_id)
    return GroupTokenOut(group_id=group.id, app_name=group.app_name, access_token=token)


async def _set_disabled(
    services: ManagementServices, principal: Principal, group_id: int, body: AddressIn, disabled: bool
) -> GroupOut:
    group = await _load(services, group_id)
    address = check_address("address", body.address)
    # Both ways the same rule: an address of the group (fixed or registered); enabling also
    # takes one still on the disabled list (its executor may be gone since).
    known = address in group.addresses or (not disabled and address in group.disabled) or address in {
        e.registry_value for e in await services.store.registry.entries(group.app_name)}
    if not known:
        raise ApiError(422, f"address {address!r} is not an address of executor group {group_id}", "address")
    await services.store.groups.set_address_disabled(group_id, address, disabled, services.now_naive_utc())
    action = AuditAction.GROUP_ADDRESS_DISABLE if disabled else AuditAction.GROUP_ADDRESS_ENABLE
    await services.audit.record(principal, action, target_type="group", target_id=group_id,
                                group_id=group_id, details={"address": address})
    await _take_registry(services, await _load(services, group_id))
    return await _out(services, await _load(services, group_id))


@router.post("/groups/{group_id}/addresses/disable", response_model=GroupOut,
             summary="Take an address out of routing (admin); heartbeats do not bring it back")
async def disable_address(
    group_id: GroupId, body: AddressIn, services: Services, principal: Admin
) -> GroupOut:
    return await _set_disabled(services, principal, group_id, body, True)


@router.post("/groups/{group_id}/addresses/enable", response_model=GroupOut,
             summary="Put a disabled address back into routing (admin)")
async def enable_address(
    group_id: GroupId, body: AddressIn, services: Services, principal: Admin
) -> GroupOut:
    return await _set_disabled(services, principal, group_id, body, False)


@router.delete(
    "/groups/{group_id}",
    status_code=204,
    response_class=Response,
    summary="Delete an executor group (refused while jobs use it)",
)
async def delete_group(group_id: GroupId, services: Services, principal: Writer) -> Response:
    ensure_group_write(principal, group_id)
    old = await _load(services, group_id)
    await services.store.groups.delete(group_id)  # ReferencedError -> 409
    _tokens_changed(services)
    await services.audit.group_event(principal, AuditAction.GROUP_DELETE, old, snapshot=True)
    return Response(status_code=204)
