"""GroupViews: the executor groups as fires see them (addresses the policy allows, declared
handlers), read from the store.

Scheduled fires and workflow node fires read them through a short-lived cache (one read per
group per ``cache_ms`` instead of one per batch: an edit on another node reaches them within
that time); manual and API fires, and every address override check, read the group fresh.
Fires that may use the cache share a read already under way for their group, and a workflow
step about to start nodes reads its group ahead (:meth:`GroupViews.warm`), so that the read is
not on the nodes' way to their executors. A read that fails with a transient database error
(a connection a database restart dropped) is tried again, twice, within a second.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from jobring.admin.store.errors import is_transient
from jobring.admin.store.records import JobGroup
from jobring.admin.trigger.fires import FirePlan, GroupView
from jobring.core.addresses import AddressPolicy, address_key, refused_addresses
from jobring.core.clock import Clock
from jobring.core.enums import TriggerType

if TYPE_CHECKING:
    from jobring.admin.store import Store

__all__ = ["GroupViews"]

log = logging.getLogger("jobring.admin.trigger.trigger")  # the trigger's lines keep their logger

_READ_PAUSES_S = (0.05, 0.1)  # a group read that failed transiently is tried again after these
_READ_BUDGET_MS = 1_000  # ... but not past this since the first try (a pool timeout takes 30 s)


class GroupViews:
    """Reads executor groups for fires, through the cache described in the module docstring."""

    def __init__(self, store: Store, clock: Clock, policy: AddressPolicy, cache_ms: int) -> None:
        self._store = store
        self._clock = clock
        self._policy = policy
        self._cache_ms = cache_ms
        self._cache: dict[int, tuple[int, GroupView | None]] = {}  # group -> (read at, view)
        # Reads under way: when each began (the ``now`` it caches), and its outcome.
        self._reads: dict[int, tuple[int, asyncio.Future[GroupView | None]]] = {}
        # Counts the forgets: a read begun before one is not cached (it may predate an edit).
        self._generation = 0

    def forget(self) -> None:
        """Drop the cached groups and those being read: a fire from now on reads them again
        (an address was disabled or unregistered, a group edited)."""
        self._cache.clear()
        self._reads.clear()
        self._generation += 1

    async def views(self, plans: Sequence[FirePlan]) -> dict[int, GroupView | None]:
        """The view of each plan's group (None: the group does not exist)."""
        ids = {p.req.job.job_group for p in plans}
        cacheable = self._cache_ms > 0 and all(
            (p.req.planned_time is not None or p.req.trigger_type is TriggerType.WORKFLOW)
            and not p.req.address_override for p in plans)
        return {group_id: await self._view_of(group_id, cacheable) for group_id in ids}

    async def _view_of(self, group_id: int, cacheable: bool) -> GroupView | None:
        """The group's view from the cache (``cacheable``) or read; a read that fails with a
        transient database error is tried again after each of ``_READ_PAUSES_S`` while within
        ``_READ_BUDGET_MS`` of the first (a fire whose log row was written on a fresh
        connection right after a database restart, its group read on one the restart dropped,
        would fail otherwise; or it shared a read begun before the database came back)."""
        first, tried = self._clock.now_ms(), 0
        while True:
            now = self._clock.now_ms()
            cached = self._cache.get(group_id) if cacheable else None
            if cached is not None and now - cached[0] < self._cache_ms:
                return cached[1]
            try:
                return await self._read(group_id, now, join=cacheable)
            except Exception as exc:
                pause_s = _READ_PAUSES_S[tried] if tried < len(_READ_PAUSES_S) else None
                if pause_s is None or not is_transient(exc) or (
                        self._clock.now_ms() + pause_s * 1000 - first > _READ_BUDGET_MS):
                    raise
                log.warning("executor group %s: reading it failed (%s: %s); trying again in %.2f s",
                            group_id, type(exc).__name__, exc, pause_s)
                tried += 1
                await asyncio.sleep(pause_s)

    async def warm(self, group_id: int) -> None:
        """Read the group into the cache now, unless it was read within the last half of
        ``cache_ms``: for fires about to come (a workflow step being stored)."""
        now = self._clock.now_ms()
        cached = self._cache.get(group_id)
        if self._cache_ms > 0 and (cached is None or now - cached[0] >= self._cache_ms // 2):
            await self._read(group_id, now, join=True)

    async def _read(self, group_id: int, now: int, *, join: bool) -> GroupView | None:
        """Read the group and cache it as read at ``now``; ``join``: a read of it already
        under way serves this one too, unless it began ``cache_ms`` ago or more (a fire that
        may use the cache: a cached copy that old would not serve it either). Fires that read
        fresh start their own."""
        if not join:
            return await self._fetch(group_id, now, self._generation)
        under_way = self._reads.get(group_id)
        if under_way is not None and now - under_way[0] < self._cache_ms:
            reading = under_way[1]
        else:
            reading = asyncio.ensure_future(self._fetch(group_id, now, self._generation))
            self._reads[group_id] = (now, reading)
            reading.add_done_callback(functools.partial(self._read_done, group_id))
        return await asyncio.shield(reading)

    def _read_done(self, group_id: int, reading: asyncio.Future[GroupView | None]) -> None:
        under_way = self._reads.get(group_id)
        if under_way is not None and under_way[1] is reading:
            del self._reads[group_id]
        if not reading.cancelled():
            reading.exception()  # raised to those awaiting it; retrieved here should none be left

    async def _fetch(self, group_id: int, now: int, generation: int) -> GroupView | None:
        group = await self._store.groups.get(group_id)
        declared = await self._store.registry.declared(group.app_name) if group is not None else {}
        view = self._view(group, declared)
        cached = self._cache.get(group_id)
        if generation == self._generation and (cached is None or cached[0] <= now):
            self._cache[group_id] = (now, view)  # (a read begun later, done first, is kept)
        return view

    def _view(self, group: JobGroup | None, declared: dict[str, frozenset[str]]) -> GroupView | None:
        """``declared``: the handlers declared per registered address of the group's appname."""
        if group is None:
            return None
        addresses = group.routable_addresses
        refused = refused_addresses(addresses, self._policy) if addresses else []
        if refused:
            log.warning("executor group %s: not calling refused addresses %s", group.id, refused)
            addresses = [a for a in addresses if a not in refused]
        mine: dict[str, frozenset[str]] = {}
        if declared:
            # A hand-typed address may be spelled otherwise than the registered one.
            by_key = {address_key(a): names for a, names in declared.items()}
            mine = {a: by_key[k] for a in addresses if (k := address_key(a)) in by_key}
        return GroupView(group, addresses, refused, group.access_token or None, mine)
