"""/groups: executor groups — CRUD, manual or automatic addresses, online addresses."""

from __future__ import annotations

from datetime import timedelta
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
from jobring.admin.api.management.models import MAX_INT32, GroupIn, GroupOut, PageOut, Text
from jobring.admin.api.management.services import ManagementServices
from jobring.admin.audit import AuditAction
from jobring.admin.store.records import JobGroup
from jobring.admin.validation import GroupFields, check_group

router = APIRouter(tags=["groups"], responses=ERROR_RESPONSES)

GroupId = Annotated[int, Path(ge=1, le=MAX_INT32)]
# An address is online while its last heartbeat is younger than this (the reference's 90 s).
DEAD_AFTER = timedelta(seconds=90)


async def _out(services: ManagementServices, group: JobGroup) -> GroupOut:
    cutoff = services.now_naive_utc() - DEAD_AFTER
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


async def _validated(services: ManagementServices, body: GroupIn, group_id: int) -> JobGroup:
    address_list = check_group(GroupFields(body.app_name, body.title, body.address_type, body.addresses))
    same_name = await services.store.groups.by_app_name(body.app_name)
    if same_name is not None and same_name.id != group_id:
        raise ApiError(409, f"app_name {body.app_name!r} is already used by group {same_name.id}", "app_name")
    return JobGroup(
        id=group_id,
        app_name=body.app_name,
        title=body.title,
        address_type=body.address_type,
        address_list=address_list,
    )


@router.get("/groups", response_model=PageOut[GroupOut], summary="List executor groups")
async def list_groups(
    services: Services,
    principal: Reader,
    app_name: Annotated[Text | None, Query(max_length=64, description="substring")] = None,
    title: Annotated[Text | None, Query(max_length=12, description="substring")] = None,
    offset: Annotated[int, Query(ge=0, le=MAX_INT32)] = 0,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> PageOut[GroupOut]:
    page = await services.store.groups.list(
        app_name=app_name, title=title, group_ids=principal.readable_group_ids(), offset=offset, limit=limit
    )
    items = [await _out(services, g) for g in page.items]
    return PageOut[GroupOut](items=items, total=page.total, offset=offset, limit=limit)


@router.post("/groups", response_model=GroupOut, status_code=201, summary="Create an executor group (admin)")
async def create_group(body: GroupIn, services: Services, principal: Admin) -> GroupOut:
    group = await _validated(services, body, 0)
    new_id = await services.store.groups.create(group, services.now_naive_utc())
    created = await _load(services, new_id)
    await services.audit.group_event(principal, AuditAction.GROUP_CREATE, created, snapshot=True)
    return await _out(services, created)


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
    group = await _validated(services, body, group_id)
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
    updated = await _load(services, group_id)
    await services.audit.group_event(principal, AuditAction.GROUP_UPDATE, updated, before=old)
    return await _out(services, updated)


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
    await services.audit.group_event(principal, AuditAction.GROUP_DELETE, old, snapshot=True)
    return Response(status_code=204)
