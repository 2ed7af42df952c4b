"""The executor groups as fires read them: the short cache of scheduled and workflow fires, a
read shared by the fires that may use it, a read ahead of workflow fires, and fresh reads for
manual fires and after a forget; a read failing transiently tried again."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from jobring.admin.store.records import JobGroup, JobInfo
from jobring.admin.trigger import groups
from jobring.admin.trigger.fires import FirePlan, FireRequest
from jobring.admin.trigger.groups import GroupViews
from jobring.core.addresses import AddressPolicy
from jobring.core.enums import TriggerType
from tests.admin.trigger_kit import HOSTS, Env, env_fixture

env = env_fixture(HOSTS[:1])


class GatedReads:
    """Counts the store's group reads; while ``gate`` is clear they wait for it."""

    def __init__(self, env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = Calls()
        self.gate = asyncio.Event()
        self.gate.set()
        real = env.store.groups.get

        async def get(group_id: int) -> JobGroup | None:
            self.calls.add()
            await self.gate.wait()
            return await real(group_id)

        monkeypatch.setattr(env.store.groups, "get", get)

    @property
    def count(self) -> int:
        return self.calls.count


@pytest.fixture
async def reads(env: Env, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[GatedReads]:
    yield GatedReads(env, monkeypatch)


class Calls:
    """Counts calls; ``reached(n)`` waits (5 s at most) until there were ``n``."""

    def __init__(self) -> None:
        self.count = 0
        self._changed = asyncio.Event()

    def add(self) -> None:
        self.count += 1
        self._changed.set()

    async def reached(self, n: int) -> None:
        async with asyncio.timeout(5):
            while self.count < n:
                self._changed.clear()
                await self._changed.wait()


def plan(job: JobInfo, trigger_type: TriggerType) -> FirePlan:
    return FirePlan(FireRequest(job, trigger_type), None, "", 0, 0)


def views_of(env: Env) -> GroupViews:
    return GroupViews(env.store, env.clock, AddressPolicy(), 1_000)


async def test_workflow_fires_share_one_read_and_the_cache_serves_them_for_a_second(
    env: Env, reads: GatedReads
) -> None:
    views, job = views_of(env), await env.job()
    reads.gate.clear()
    both = asyncio.gather(*(views.views([plan(job, TriggerType.WORKFLOW)]) for _ in range(2)))
    await reads.calls.reached(1)  # both views started: the second shares the read
    reads.gate.set()
    first, second = await asyncio.wait_for(both, 5)
    assert reads.count == 1
    assert first[env.group_id] is second[env.group_id] is not None
    env.clock.advance(999)
    await views.views([plan(job, TriggerType.WORKFLOW)])
    assert reads.count == 1
    env.clock.advance(1)
    await views.views([plan(job, TriggerType.WORKFLOW)])
    assert reads.count == 2


async def test_a_manual_fire_reads_its_group_itself(env: Env, reads: GatedReads) -> None:
    views, job = views_of(env), await env.job()
    reads.gate.clear()
    workflow = asyncio.ensure_future(views.views([plan(job, TriggerType.WORKFLOW)]))
    manual = asyncio.ensure_future(views.views([plan(job, TriggerType.MANUAL)]))
    await reads.calls.reached(2)
    reads.gate.set()
    await asyncio.wait_for(asyncio.gather(workflow, manual), 5)
    assert reads.count == 2
    await views.views([plan(job, TriggerType.MANUAL)])
    assert reads.count == 3  # never from the cache either


async def test_a_group_read_ahead_serves_the_fires_after_it(env: Env, reads: GatedReads) -> None:
    views, job = views_of(env), await env.job()
    await views.warm(env.group_id)
    assert reads.count == 1
    env.clock.advance(400)
    await views.warm(env.group_id)  # read 400 ms ago: fresh enough
    await views.views([plan(job, TriggerType.WORKFLOW)])
    assert reads.count == 1
    env.clock.advance(100)
    reads.gate.clear()
    warming = asyncio.ensure_future(views.warm(env.group_id))  # half its life gone: read again
    await reads.calls.reached(2)
    env.clock.advance(600)  # the cached copy is stale now: the fire waits for the read under way
    firing = asyncio.ensure_future(views.views([plan(job, TriggerType.WORKFLOW)]))
    await asyncio.sleep(0)  # one turn of the loop: the fire's first step joins the read
    reads.gate.set()
    await asyncio.wait_for(asyncio.gather(warming, firing), 5)
    assert reads.count == 2 and firing.result()[env.group_id] is not None


async def test_a_read_under_way_when_the_groups_are_forgotten_is_not_cached(
    env: Env, reads: GatedReads
) -> None:
    views, job = views_of(env), await env.job()
    reads.gate.clear()
    before = asyncio.ensure_future(views.warm(env.group_id))
    await reads.calls.reached(1)
    views.forget()  # e.g. the group was edited: what that read returns may predate the edit
    reads.gate.set()
    await asyncio.wait_for(before, 5)
    await views.views([plan(job, TriggerType.WORKFLOW)])
    assert reads.count == 2


class FirstReadFails:
    """The store's first group read waits for ``gate``, then raises ``error``; later ones read."""

    def __init__(self, env: Env, monkeypatch: pytest.MonkeyPatch, error: Exception) -> None:
        self.calls, self.gate = Calls(), asyncio.Event()
        real = env.store.groups.get

        async def get(group_id: int) -> JobGroup | None:
            self.calls.add()
            if self.calls.count == 1:
                await self.gate.wait()
                raise error
            return await real(group_id)

        monkeypatch.setattr(env.store.groups, "get", get)


async def test_a_failed_read_fails_every_fire_that_shared_it_and_a_stalled_one_is_not_shared(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    views, job = views_of(env), await env.job()
    reads = FirstReadFails(env, monkeypatch, ValueError("not a database error"))  # not retried
    fires = [asyncio.ensure_future(views.views([plan(job, TriggerType.WORKFLOW)])) for _ in range(2)]
    await reads.calls.reached(1)  # both fires started: the second shares the read
    env.clock.advance(1_000)  # the read under way began a cache's lifetime ago: not joined
    late = await asyncio.wait_for(views.views([plan(job, TriggerType.WORKFLOW)]), 5)
    assert late[env.group_id] is not None and reads.calls.count == 2
    reads.gate.set()
    for fire in fires:
        with pytest.raises(ValueError):
            await asyncio.wait_for(fire, 5)
    assert reads.calls.count == 2


async def test_a_shared_read_failing_transiently_is_read_again_once_for_the_fires_that_shared_it(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    views, job = views_of(env), await env.job()
    reads = FirstReadFails(env, monkeypatch, ConnectionError("connection reset"))  # a restart
    monkeypatch.setattr(groups, "_READ_PAUSES_S", (0, 0))
    fires = [asyncio.ensure_future(views.views([plan(job, TriggerType.WORKFLOW)])) for _ in range(3)]
    await reads.calls.reached(1)
    reads.gate.set()
    seen = await asyncio.wait_for(asyncio.gather(*fires), 5)
    assert all(s[env.group_id] is not None for s in seen)
    assert reads.calls.count == 2  # the fires tried again share one read too


async def test_a_read_failing_transiently_is_tried_twice_more_within_a_second(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    views, job = views_of(env), await env.job()
    calls = Calls()

    async def get(group_id: int) -> JobGroup | None:
        calls.add()
        raise ConnectionError("database gone")

    monkeypatch.setattr(env.store.groups, "get", get)
    monkeypatch.setattr(groups, "_READ_PAUSES_S", (0, 0))
    with pytest.raises(ConnectionError):
        await asyncio.wait_for(views.views([plan(job, TriggerType.MANUAL)]), 5)
    assert calls.count == 3
    monkeypatch.setattr(groups, "_READ_PAUSES_S", (0, 5))  # the second pause would end past the second
    with pytest.raises(ConnectionError):
        await asyncio.wait_for(views.views([plan(job, TriggerType.MANUAL)]), 5)
    assert calls.count == 5
