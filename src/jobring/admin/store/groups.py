"""Executor groups (``xxl_job_group``) and executor heartbeats (``xxl_job_registry``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from sqlalchemy import ColumnElement, delete, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from jobring.admin.store.base import Repository, fetch_page, like_pattern, new_id, to_record
from jobring.admin.store.engine import utc_naive
from jobring.admin.store.errors import NotFound, ReferencedError
from jobring.admin.store.records import JobGroup, Page, RegistryEntry, decode_handlers, encode_handlers
from jobring.admin.store.tables import job_group, job_info, job_registry, job_user
from jobring.core.addresses import address_key

EXECUTOR = "EXECUTOR"  # the registry_group of executors


def _join_addresses(addresses: Sequence[str]) -> str | None:
    unique = sorted({a.strip() for a in addresses if a.strip()})
    return ",".join(unique) if unique else None


async def _drop_from_permissions(conn: AsyncConnection, group_id: int) -> None:
    """Remove ``group_id`` from every user's permission list (same transaction as the delete),
    so a later group can never inherit the deleted one's permissions."""
    token = str(group_id)
    # A cheap pre-filter; the exact match is done on the parsed list below.
    candidates = (
        await conn.execute(
            select(job_user.c.id, job_user.c.permission).where(job_user.c.permission.like(f"%{token}%"))
        )
    ).all()
    for user_id, permission in candidates:
        ids = [p.strip() for p in (permission or "").split(",") if p.strip()]
        kept = [p for p in ids if p != token]
        if kept != ids:
            await conn.execute(
                update(job_user).where(job_user.c.id == user_id).values(permission=",".join(kept) or None)
            )
def _split(value: str | None) -> list[str]:
    return [a.strip() for a in (value or "").split(",") if a.strip()]


class GroupRepository(Repository):
    """Executor groups."""

    async def get(self, group_id: int) -> JobGroup | None:
        """The group, or ``None``."""
        async with self._db.read() as conn:
            row = (await conn.execute(select(job_group).where(job_group.c.id == group_id))).first()
        return None if row is None else to_record(JobGroup, row)

    async def by_app_name(self, app_name: str) -> JobGroup | None:
        """The first group (lowest id) with this appname, or ``None``."""
        stmt = select(job_group).where(job_group.c.app_name == app_name).order_by(job_group.c.id).limit(1)
        async with self._db.read() as conn:
            row = (await conn.execute(stmt)).first()
        return None if row is None else to_record(JobGroup, row)

    async def all(self) -> list[JobGroup]:
        """Every group, by app_name then id."""
        async with self._db.read() as conn:
            rows = (
                await conn.execute(select(job_group).order_by(job_group.c.app_name, job_group.c.id))
            ).all()
        return [to_record(JobGroup, r) for r in rows]

    async def list(
        self,
        *,
        app_name: str | None = None,
        title: str | None = None,
        group_ids: Sequence[int] | None = None,
        offset: int = 0,
        limit: int = 20,
    ) -> Page[JobGroup]:
        """A page of groups; ``app_name``/``title`` are substring filters."""
        where: list[ColumnElement[bool]] = []
        if app_name:
            where.append(job_group.c.app_name.like(like_pattern(app_name), escape="\\"))
        if title:
            where.append(job_group.c.title.like(like_pattern(title), escape="\\"))
        if group_ids is not None:
            where.append(job_group.c.id.in_(list(group_ids)))
        async with self._db.read() as conn:
            return await fetch_page(
                conn, job_group, JobGroup, where, (job_group.c.app_name, job_group.c.id), offset, limit
            )

    async def create(self, group: JobGroup, now: datetime) -> int:
        """Insert the group (``id`` ignored, ``update_time`` = now); returns the new id."""
        async with self._db.write() as conn:
            result = await conn.execute(
                insert(job_group).values(
                    app_name=group.app_name,
                    title=group.title,
                    address_type=group.address_type,
                    address_list=group.address_list,
                    update_time=utc_naive(now),
                    access_token=group.access_token,
                )
            )
            return new_id(result)

    async def update(self, group: JobGroup, now: datetime) -> None:
        """Overwrite the group's fields; NotFound when it does not exist."""
        async with self._db.write() as conn:
            result = await conn.execute(
                update(job_group)
                .where(job_group.c.id == group.id)
                .values(
                    app_name=group.app_name,
                    title=group.title,
                    address_type=group.address_type,
                    address_list=group.address_list,
                    update_time=utc_naive(now),
                )
            )
            if result.rowcount == 0:
                raise NotFound(f"executor group {group.id} does not exist")

    async def set_access_token(self, group_id: int, token: str | None) -> None:
        """Replace the group's executor token (``update`` leaves it alone); NotFound when absent."""
        async with self._db.write() as conn:
            result = await conn.execute(
                update(job_group).where(job_group.c.id == group_id).values(access_token=token)
            )
            if result.rowcount == 0:
                raise NotFound(f"executor group {group_id} does not exist")

    async def tokens(self) -> tuple[tuple[int, str, str | None], ...]:
        """(id, app_name, access_token) of every group: what the executor API checks against."""
        stmt = select(job_group.c.id, job_group.c.app_name, job_group.c.access_token)
        async with self._db.read() as conn:
            rows = (await conn.execute(stmt)).all()
        return tuple((int(r.id), str(r.app_name), r.access_token) for r in rows)

    async def delete(self, group_id: int) -> bool:
        """Delete the group and remove it from every user's permissions; ReferencedError while
        jobs use it; False when it did not exist."""
        async with self._db.write() as conn:
            used = (
                await conn.execute(
                    select(func.count()).select_from(job_info).where(job_info.c.job_group == group_id)
                )
            ).scalar_one()
            if used:
                raise ReferencedError(
                    f"executor group {group_id} still has {used} job(s); delete or move them first"
                )
            result = await conn.execute(delete(job_group).where(job_group.c.id == group_id))
            if result.rowcount == 0:
                return False
            await _drop_from_permissions(conn, group_id)
            return True

    async def set_address_disabled(self, group_id: int, address: str, disabled: bool, now: datetime) -> bool:
        """Take an address out of routing by hand (or put it back); True when it changed.
        An auto group's address list drops it at once (heartbeats do not bring it back)."""
        async with self._db.write() as conn:
            row = (await conn.execute(
                select(job_group.c.disabled_addresses, job_group.c.address_list, job_group.c.address_type)
                .where(job_group.c.id == group_id).with_for_update())).first()
            if row is None:
                raise NotFound(f"executor group {group_id} does not exist")
            # Compared by address_key: an address is one address in every spelling of it.
            key = address_key(address)
            off = _split(row.disabled_addresses)
            if any(address_key(a) == key for a in off) == disabled:
                return False
            off = [*off, address] if disabled else [a for a in off if address_key(a) != key]
            values: dict[str, object] = {"disabled_addresses": ",".join(sorted(off)) or None,
                                         "update_time": utc_naive(now)}
            if disabled and row.address_type == 0:
                kept = [a for a in _split(row.address_list) if address_key(a) != key]
                values["address_list"] = _join_addresses(kept)
            await conn.execute(update(job_group).where(job_group.c.id == group_id).values(**values))
            return True

    async def refresh_addresses(self, mapping: Mapping[str, Sequence[str]], now: datetime) -> int:
        """Set each auto-registered group's address_list from ``mapping`` (app_name ->
        addresses): sorted, comma-joined, NULL when none. Returns how many groups changed."""
        changed = 0
        async with self._db.write() as conn:
            rows = (
                await conn.execute(
                    select(job_group.c.id, job_group.c.app_name, job_group.c.address_list,
                           job_group.c.disabled_addresses).where(job_group.c.address_type == 0)
                )
            ).all()
            for row in rows:
                off = {address_key(a) for a in _split(row.disabled_addresses)}
                new = _join_addresses([a for a in mapping.get(row.app_name, ()) if address_key(a) not in off])
                if new != row.address_list:
                    await conn.execute(
                        update(job_group)
                        .where(job_group.c.id == row.id)
                        .values(address_list=new, update_time=utc_naive(now))
                    )
                    changed += 1
        return changed


class RegistryRepository(Repository):
    """Heartbeats: one row per (registry_group, registry_key, registry_value)."""

    async def beat(self, group: str, key: str, value: str, now: datetime,
                   handlers: Sequence[str] | None = None) -> None:
        """Record a heartbeat: refresh the row's update_time and declared ``handlers`` (None:
        the beat declared none), insert the row when absent."""
        stamp = utc_naive(now)
        declared = encode_handlers(handlers)
        match = (
            job_registry.c.registry_group == group,
            job_registry.c.registry_key == key,
            job_registry.c.registry_value == value,
        )
        async with self._db.write() as conn:
            result = await conn.execute(
                update(job_registry).where(*match).values(update_time=stamp, handlers=declared))
            if result.rowcount == 0:
                await conn.execute(
                    insert(job_registry).values(
                        registry_group=group, registry_key=key, registry_value=value, update_time=stamp,
                        handlers=declared,
                    )
                )

    async def remove(self, group: str, key: str, value: str) -> int:
        """Delete the heartbeat rows of one address; returns how many were deleted."""
        async with self._db.write() as conn:
            result = await conn.execute(
                delete(job_registry).where(
                    job_registry.c.registry_group == group,
                    job_registry.c.registry_key == key,
                    job_registry.c.registry_value == value,
                )
            )
            return result.rowcount

    async def delete_dead(self, before: datetime) -> int:
        """Delete heartbeats last seen before ``before``; returns how many."""
        async with self._db.write() as conn:
            result = await conn.execute(
                delete(job_registry).where(job_registry.c.update_time < utc_naive(before))
            )
            return result.rowcount

    async def live(self, after: datetime) -> dict[str, list[str]]:
        """Executor appname -> sorted addresses with a heartbeat later than ``after``."""
        stmt = select(job_registry.c.registry_key, job_registry.c.registry_value).where(
            job_registry.c.registry_group == EXECUTOR, job_registry.c.update_time > utc_naive(after)
        )
        found: dict[str, set[str]] = {}
        async with self._db.read() as conn:
            for key, value in (await conn.execute(stmt)).all():
                found.setdefault(key, set()).add(value)
        return {k: sorted(v) for k, v in sorted(found.items())}

    async def declared(self, app_name: str) -> dict[str, frozenset[str]]:
        """Executor address -> the handlers it declared, for the addresses of ``app_name`` that
        declared (an address missing here declared nothing)."""
        stmt = select(job_registry.c.registry_value, job_registry.c.handlers).where(
            job_registry.c.registry_group == EXECUTOR, job_registry.c.registry_key == app_name,
            job_registry.c.handlers.is_not(None))
        found: dict[str, frozenset[str]] = {}
        async with self._db.read() as conn:
            for address, text in (await conn.execute(stmt)).all():
                names = decode_handlers(text)
                if names is not None:
                    found[address] = frozenset(names)
        return found

    async def entries(self, app_name: str) -> list[RegistryEntry]:
        """Every executor heartbeat row of one appname, by address."""
        stmt = (
            select(job_registry)
            .where(job_registry.c.registry_group == EXECUTOR, job_registry.c.registry_key == app_name)
            .order_by(job_registry.c.registry_value)
        )
        async with self._db.read() as conn:
            return [to_record(RegistryEntry, r) for r in (await conn.execute(stmt)).all()]
