"""The contract of the scheduling loop's lease port, run against the in-memory fake the loop
suites use (``FakeLeases``) and against ``StoreLeases`` over the store on every backend, so
the fake cannot drift from the database's rules.

Besides the :class:`LeaseStore` methods it covers the run log's part the loop relies on: the
unique key on (job id, planned instant) and the withdrawal of fires recorded ahead (what the
trigger service's ``cancel_prepared`` does, through ``FireRepository.withdraw``).
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from datetime import datetime

import pytest
from sqlalchemy import select

from jobring.admin.loop.adapters import StoreLeases
from jobring.admin.loop.ports import LeaseStore
from jobring.admin.store import Store
from jobring.admin.store.records import JobGroup, JobInfo, NewLog, TriggerResult
from jobring.admin.store.tables import job_log
from tests.admin.loop_fakes import T0, FakeJobTable, FakeLeases, fix_rate_job

LEASE = 10_000
WEEK_MS = 7 * 86_400_000


class World(abc.ABC):
    """A job table with its run log and scheduler nodes, seen through one port per node."""

    @abc.abstractmethod
    async def add_job(self, next_ms: int, status: int = 1) -> int:
        """A FIX_RATE job (every second) due at ``next_ms``, running (status 1) or stopped."""

    @abc.abstractmethod
    async def job(self, job_id: int) -> JobInfo: ...

    @abc.abstractmethod
    def leases(self, node: str) -> LeaseStore:
        """The node's lease port (the same one on every call)."""

    @abc.abstractmethod
    async def set_status(self, job_id: int, status: int, next_ms: int) -> None:
        """A start/stop from outside the loop (the API)."""

    @abc.abstractmethod
    async def delete_job(self, job_id: int) -> None: ...

    @abc.abstractmethod
    async def record(self, node: str | None, job_id: int, planned_ms: int, *, confirmed: bool = False
                     ) -> int | None:
        """Record a scheduled fire's row (with its dispatch answer when ``confirmed``); its
        log id, or None when the (job, instant) is already recorded."""

    @abc.abstractmethod
    async def withdraw(self, log_ids: Sequence[int], holder: str) -> int:
        """Withdraw fires recorded ahead, as the trigger service's ``cancel_prepared`` does."""

    @abc.abstractmethod
    async def rows(self) -> list[tuple[int, int, str | None]]:
        """(job id, planned instant, node) of every scheduled fire recorded, in order."""


class FakeWorld(World):
    def __init__(self) -> None:
        self.table = FakeJobTable()
        self._leases: dict[str, FakeLeases] = {}

    async def add_job(self, next_ms: int, status: int = 1) -> int:
        job_id = max(self.table.jobs, default=0) + 1
        self.table.put(fix_rate_job(job_id, next_ms, trigger_status=status))
        return job_id

    async def job(self, job_id: int) -> JobInfo:
        return self.table.jobs[job_id]

    def leases(self, node: str) -> LeaseStore:
        return self._leases.setdefault(node, self.table.node(node))

    async def set_status(self, job_id: int, status: int, next_ms: int) -> None:
        job = self.table.jobs[job_id]
        self.table.jobs[job_id] = replace(job, trigger_status=status, trigger_next_time=next_ms)

    async def delete_job(self, job_id: int) -> None:
        del self.table.jobs[job_id]

    async def record(self, node: str | None, job_id: int, planned_ms: int, *, confirmed: bool = False
                     ) -> int | None:
        row = self.table.record(node, job_id, planned_ms, confirmed=confirmed)
        return None if row is None else row.log_id

    async def withdraw(self, log_ids: Sequence[int], holder: str) -> int:
        return self.table.withdraw(log_ids, holder)

    async def rows(self) -> list[tuple[int, int, str | None]]:
        return sorted((r.job_id, r.planned_ms, r.node) for r in self.table.rows.values())


class StoreWorld(World):
    def __init__(self, store: Store, group_id: int) -> None:
        self.store = store
        self.group_id = group_id
        self._leases: dict[str, StoreLeases] = {}

    async def add_job(self, next_ms: int, status: int = 1) -> int:
        job = fix_rate_job(0, next_ms, job_group=self.group_id, trigger_status=status)
        return await self.store.jobs.create(job)

    async def job(self, job_id: int) -> JobInfo:
        job = await self.store.jobs.get(job_id)
        assert job is not None, job_id
        return job

    def leases(self, node: str) -> LeaseStore:
        return self._leases.setdefault(node, StoreLeases(self.store, node))

    async def set_status(self, job_id: int, status: int, next_ms: int) -> None:
        await self.store.jobs.set_status(job_id, status, next_ms)

    async def delete_job(self, job_id: int) -> None:
        assert await self.store.jobs.delete(job_id)

    async def record(self, node: str | None, job_id: int, planned_ms: int, *, confirmed: bool = False
                     ) -> int | None:
        row = NewLog(job_group=self.group_id, job_id=job_id, trigger_time=datetime(2023, 11, 14),
                     trigger_type="CRON", planned_time=planned_ms, admin_node=node)
        [log_id] = await self.store.logs.insert_fires([row])
        if log_id is not None and confirmed:
            result = TriggerResult(log_id, "http://exec-1:9999/", 200, "ok", dispatch_time=planned_ms)
            assert await self.store.logs.update_trigger_results([result]) == 1
        return log_id

    async def withdraw(self, log_ids: Sequence[int], holder: str) -> int:
        return await self.store.fires.withdraw(log_ids, holder=holder)

    async def rows(self) -> list[tuple[int, int, str | None]]:
        stmt = select(job_log.c.job_id, job_log.c.planned_time, job_log.c.admin_node).where(
            job_log.c.planned_time.is_not(None))
        async with self.store.engine.connect() as conn:
            found = (await conn.execute(stmt)).all()
        return sorted((int(r[0]), int(r[1]), r[2]) for r in found)


async def _ids(jobs: Sequence[JobInfo]) -> list[int]:
    return [j.id for j in jobs]


class LeaseContract:
    """The tests; a subclass provides the ``world`` fixture."""

    # -- claim -----------------------------------------------------------------------------

    async def test_claim_leases_running_jobs_due_in_the_window(self, world: World) -> None:
        due = await world.add_job(T0 + 1_000)
        at_the_end = await world.add_job(T0 + 5_000)
        await world.add_job(T0 + 5_001)  # beyond the window
        await world.add_job(T0 + 1_000, status=0)  # stopped
        a = world.leases("a")
        claimed = await a.claim(T0, T0 + 5_000, LEASE, 10)
        assert [(j.id, j.lease_owner, j.lease_until) for j in claimed] == [
            (due, "a", T0 + LEASE), (at_the_end, "a", T0 + LEASE)]
        job = await world.job(due)
        assert (job.lease_owner, job.lease_until) == ("a", T0 + LEASE)

    async def test_claim_takes_only_free_or_expired_leases(self, world: World) -> None:
        job_id = await world.add_job(T0 + 1_000)
        a, b = world.leases("a"), world.leases("b")
        assert await _ids(await a.claim(T0, T0 + 5_000, LEASE, 10)) == [job_id]
        # Held: not by another node, nor again by its holder (it renews instead).
        assert await b.claim(T0 + 1, T0 + 5_001, LEASE, 10) == []
        assert await a.claim(T0 + 1, T0 + 5_001, LEASE, 10) == []
        # The lease lasts up to and including its end.
        assert await b.claim(T0 + LEASE, T0 + LEASE + 5_000, LEASE, 10) == []
        assert await _ids(await b.claim(T0 + LEASE + 1, T0 + LEASE + 5_001, LEASE, 10)) == [job_id]
        assert (await world.job(job_id)).lease_owner == "b"

    async def test_claim_takes_the_earliest_due_first_up_to_the_limit(self, world: World) -> None:
        third = await world.add_job(T0 + 3_000)
        first = await world.add_job(T0 + 1_000)
        second = await world.add_job(T0 + 2_000)
        a = world.leases("a")
        assert await a.claim(T0, T0 + 5_000, LEASE, 0) == []
        assert await _ids(await a.claim(T0, T0 + 5_000, LEASE, 2)) == [first, second]
        assert await _ids(await world.leases("b").claim(T0, T0 + 5_000, LEASE, 2)) == [third]

    # -- renew -----------------------------------------------------------------------------

    async def test_renew_extends_every_held_lease_and_reports_rows_new_or_changed(self, world: World) -> None:
        one, two = await world.add_job(T0 + 1_000), await world.add_job(T0 + 1_000)
        a, b = world.leases("a"), world.leases("b")
        await a.claim(T0, T0 + 5_000, LEASE, 10)
        other = await world.add_job(T0 + 1_000)
        await b.claim(T0, T0 + 5_000, LEASE, 10)
        held = await a.renew(T0 + 1_000, LEASE, {})
        assert held.ids == {one, two}
        assert sorted((j.id, j.lease_owner, j.lease_until) for j in held.changed) == [
            (one, "a", T0 + 1_000 + LEASE), (two, "a", T0 + 1_000 + LEASE)]
        known = {j.id: j for j in held.changed}
        again = await a.renew(T0 + 2_000, LEASE, known)
        assert again.ids == {one, two}
        assert again.changed == []
        assert (await world.job(one)).lease_until == T0 + 2_000 + LEASE
        # A stop from outside, and the loop's own advance: both change the row.
        await world.set_status(one, 0, 0)
        assert await a.advance([(two, T0 + 1_000, T0 + 2_000)]) == 1
        changed = await a.renew(T0 + 3_000, LEASE, known)
        assert sorted((j.id, j.trigger_status, j.trigger_next_time) for j in changed.changed) == [
            (one, 0, 0), (two, 1, T0 + 2_000)]
        # A lease that ran out is still its holder's until another node claims the job.
        assert (await a.renew(T0 + 3_000 + LEASE + 1, LEASE, known)).ids == {one, two}
        # The renewed leases keep other nodes out (b's own lease ran out: it may claim it again).
        assert await _ids(await b.claim(T0 + LEASE + 1, T0 + LEASE + 5_001, LEASE, 10)) == [other]
        assert (await b.renew(T0 + LEASE + 2, LEASE, {})).ids == {other}

    # -- advance, release, end_schedule ------------------------------------------------------

    async def test_advance_writes_only_where_the_node_holds_the_lease(self, world: World) -> None:
        mine = await world.add_job(T0 + 1_000)
        a, b = world.leases("a"), world.leases("b")
        await a.claim(T0, T0 + 5_000, LEASE, 10)
        theirs = await world.add_job(T0 + 1_000)
        free = await world.add_job(T0 + 60_000)
        await b.claim(T0, T0 + 5_000, LEASE, 10)
        assert await a.advance([]) == 0
        applied = await a.advance([(mine, T0 + 1_000, T0 + 2_000), (theirs, T0 + 1_000, T0 + 2_000),
                                   (free, T0 + 1_000, T0 + 2_000)])
        assert applied == 1
        assert [(j.trigger_last_time, j.trigger_next_time) for j in
                [await world.job(mine), await world.job(theirs), await world.job(free)]] == [
            (T0 + 1_000, T0 + 2_000), (0, T0 + 1_000), (0, T0 + 60_000)]

    async def test_release_gives_up_only_the_nodes_own_leases(self, world: World) -> None:
        mine = await world.add_job(T0 + 1_000)
        a, b = world.leases("a"), world.leases("b")
        await a.claim(T0, T0 + 5_000, LEASE, 10)
        theirs = await world.add_job(T0 + 1_000)
        await b.claim(T0, T0 + 5_000, LEASE, 10)
        await a.release([mine, theirs])
        released, kept = await world.job(mine), await world.job(theirs)
        assert (released.lease_owner, released.lease_until) == (None, 0)
        assert (kept.lease_owner, kept.lease_until) == ("b", T0 + LEASE)
        # Free at once for any node.
        assert await _ids(await b.claim(T0 + 1, T0 + 5_001, LEASE, 10)) == [mine]

    async def test_end_schedule_stops_jobs_and_skips_deleted_ones(self, world: World) -> None:
        ended, gone = await world.add_job(T0 + 1_000), await world.add_job(T0 + 1_000)
        await world.delete_job(gone)
        await world.leases("a").end_schedule([ended, gone])
        job = await world.job(ended)
        assert (job.trigger_status, job.trigger_next_time) == (0, 0)
        assert await world.leases("b").claim(T0, T0 + 5_000, LEASE, 10) == []

    # -- heartbeat -------------------------------------------------------------------------

    async def test_heartbeat_counts_live_nodes_and_running_jobs_due(self, world: World) -> None:
        await world.add_job(T0 + 1_000)
        await world.add_job(T0 + 5_000)
        await world.add_job(T0 + 5_001)
        await world.add_job(T0 + 1_000, status=0)
        a, b, c = world.leases("a"), world.leases("b"), world.leases("c")
        assert await a.heartbeat(T0, T0 + LEASE, T0 + 5_000) == (1, 2)
        await a.claim(T0, T0 + 5_000, LEASE, 1)  # leased jobs count as well
        assert await b.heartbeat(T0, T0 + 2_000, T0 + 5_001) == (2, 3)
        assert await c.heartbeat(T0 + 1_000, T0 + LEASE, T0 + 1_000) == (3, 1)
        # b's announcement ran out (at its end it still counts); c left.
        await c.heartbeat(T0 + 1_000, 0, T0 + 1_000)
        assert await a.heartbeat(T0 + 2_000, T0 + LEASE, T0 + 5_000) == (2, 2)
        assert await a.heartbeat(T0 + 2_001, T0 + LEASE, T0 + 5_000) == (1, 2)
        # A node leaving counts itself no more, but a count is never below one.
        assert await a.heartbeat(T0 + 3_000, 0, T0 + 5_000) == (1, 2)

    # -- the run log's key and withdrawals -----------------------------------------------------

    async def test_a_fire_is_recorded_once(self, world: World) -> None:
        job_id = await world.add_job(T0 + 1_000)
        assert await world.record("a", job_id, T0 + 1_000) is not None
        assert await world.record("b", job_id, T0 + 1_000) is None
        assert await world.record("b", job_id, T0 + 2_000) is not None
        assert await world.rows() == [(job_id, T0 + 1_000, "a"), (job_id, T0 + 2_000, "b")]

    async def test_withdraw_removes_unconfirmed_rows_of_jobs_the_node_holds(self, world: World) -> None:
        mine = await world.add_job(T0 + 1_000)
        a, b = world.leases("a"), world.leases("b")
        await a.claim(T0, T0 + 5_000, LEASE, 10)
        theirs = await world.add_job(T0 + 1_000)
        await b.claim(T0, T0 + 5_000, LEASE, 10)
        ahead = await world.record("a", mine, T0 + 2_000)
        sent = await world.record("a", mine, T0 + 1_000, confirmed=True)
        handed_over = await world.record("a", theirs, T0 + 2_000)
        ids = [i for i in (ahead, sent, handed_over) if i is not None]
        assert len(ids) == 3
        # A fire sent is never removed; a job now held by b keeps a's row (b settles it).
        assert await world.withdraw(ids, holder="a") == 1
        assert await world.rows() == [(mine, T0 + 1_000, "a"), (theirs, T0 + 2_000, "a")]
        assert await world.withdraw(ids, holder="a") == 0
        # The instant withdrawn is free again.
        assert await world.record("a", mine, T0 + 2_000) is not None

    # -- send fences and takeovers ---------------------------------------------------------------

    async def _left_by_dead_node(self, world: World, nexts: Sequence[int]) -> list[int]:
        """Jobs leased to node "dead" (expired by T0) with these next instants."""
        ids = [await world.add_job(n) for n in nexts]
        claimed = await world.leases("dead").claim(T0 - 2 * LEASE, T0 + 5_000, LEASE, 1_000)
        assert sorted(await _ids(claimed)) == ids
        return ids

    async def test_settle_takeover_withdraws_fires_never_sent_and_resumes_after_the_others(
        self, world: World
    ) -> None:
        jobs = await self._left_by_dead_node(world, [T0 + 1_000] * 7)
        mixed, all_ahead, own, unknown, quiet, old, unnamed = jobs
        dead, b = world.leases("dead"), world.leases("b")
        await dead.raise_fence(T0 + 2_000)
        await world.leases("quiet").heartbeat(T0 - 1_000, T0, T0)  # announced, never fenced
        for node, job_id, planned, confirmed in [
            ("dead", mixed, T0 + 1_000, True),  # sent
            ("dead", mixed, T0 + 2_000, False),  # within the fence: perhaps sent
            ("dead", mixed, T0 + 3_000, False),  # beyond it: never sent
            ("dead", all_ahead, T0 + 2_500, False),
            ("dead", all_ahead, T0 + 3_500, False),
            # The new holder's own rows too (its fires in flight when it dropped the job).
            ("b", own, T0 + 3_000, False),
            ("ghost", unknown, T0 + 3_000, False),  # a node without a row: perhaps sent
            ("quiet", quiet, T0 + 1_000, False),  # fence 0: never sent
            ("dead", old, T0 + 500, False),  # before the stored next instant: it went out
            (None, unnamed, T0 + 4_000, False),  # no node named: perhaps sent
        ]:
            assert await world.record(node, job_id, planned, confirmed=confirmed) is not None
        claimed = await b.claim(T0, T0 + 5_000, LEASE, 100)
        assert sorted(await _ids(claimed)) == jobs
        assert await b.settle_takeover([]) == {}
        resume = {mixed: T0 + 2_000, own: T0 + 3_000, unknown: T0 + 3_000, unnamed: T0 + 4_000}
        assert dict(await b.settle_takeover(claimed)) == resume
        assert await world.rows() == [
            (mixed, T0 + 1_000, "dead"), (mixed, T0 + 2_000, "dead"), (own, T0 + 3_000, "b"),
            (unknown, T0 + 3_000, "ghost"), (old, T0 + 500, "dead"), (unnamed, T0 + 4_000, None)]
        # Settling again finds the same (harmless).
        assert dict(await b.settle_takeover(claimed)) == resume

    async def test_settle_takeover_of_many_jobs_at_once(self, world: World) -> None:
        jobs = await self._left_by_dead_node(world, [T0 + 1_000] * 150)
        await world.leases("dead").raise_fence(T0 + 1_000)
        for job_id in jobs:
            assert await world.record("dead", job_id, T0 + 1_000, confirmed=job_id % 2 == 0) is not None
            assert await world.record("dead", job_id, T0 + 2_000) is not None
        b = world.leases("b")
        claimed = await b.claim(T0, T0 + 5_000, LEASE, 1_000)
        assert dict(await b.settle_takeover(claimed)) == dict.fromkeys(jobs, T0 + 1_000)
        assert await world.rows() == [(job_id, T0 + 1_000, "dead") for job_id in jobs]

    async def test_a_fire_confirmed_beyond_the_fence_was_sent(self, world: World) -> None:
        [job_id] = await self._left_by_dead_node(world, [T0 + 1_000])
        await world.leases("dead").raise_fence(T0 + 1_000)
        assert await world.record("dead", job_id, T0 + 3_000, confirmed=True) is not None
        b = world.leases("b")
        assert dict(await b.settle_takeover(await b.claim(T0, T0 + 5_000, LEASE, 10))) == {job_id: T0 + 3_000}

    async def test_a_send_fence_never_moves_back(self, world: World) -> None:
        [job_id] = await self._left_by_dead_node(world, [T0 + 1_000])
        dead = world.leases("dead")
        await dead.raise_fence(T0 + 3_000)
        await dead.raise_fence(T0 + 1_000)
        await dead.heartbeat(T0 - LEASE, T0, T0)
        assert await world.record("dead", job_id, T0 + 2_500) is not None
        assert await world.record("dead", job_id, T0 + 3_500) is not None
        b = world.leases("b")
        assert dict(await b.settle_takeover(await b.claim(T0, T0 + 5_000, LEASE, 10))) == {job_id: T0 + 2_500}
        assert await world.rows() == [(job_id, T0 + 2_500, "dead")]

    async def test_settling_withdraws_only_for_the_leaseholder(self, world: World) -> None:
        [job_id] = await self._left_by_dead_node(world, [T0 + 1_000])
        await world.leases("dead").raise_fence(T0)
        assert await world.record("dead", job_id, T0 + 2_000) is not None
        # Node c settles a job it does not hold (its claim failed): nothing is withdrawn.
        job = await world.job(job_id)
        assert await world.leases("c").settle_takeover([job]) == {}
        assert await world.rows() == [(job_id, T0 + 2_000, "dead")]

    async def test_a_node_gone_for_a_week_is_forgotten_with_its_fence(self, world: World) -> None:
        early, late = await self._left_by_dead_node(world, [T0 + 1_000, T0 + 1_000])
        gone = world.leases("gone")
        await gone.heartbeat(T0 - WEEK_MS - 2_000, T0 - WEEK_MS - 1_000, T0)
        await gone.raise_fence(T0 - WEEK_MS - 1_000)
        for job_id in (early, late):
            assert await world.record("gone", job_id, T0 + 2_000) is not None
        b = world.leases("b")
        claimed = {j.id: j for j in await b.claim(T0, T0 + 5_000, LEASE, 10)}
        # Its fence known: the fire beyond it was never sent.
        assert await b.settle_takeover([claimed[early]]) == {}
        # The first heartbeat of a node forgets the nodes gone for a week: a fence unknown
        # proves nothing, so the fire counts as perhaps sent.
        await b.heartbeat(T0, T0 + LEASE, T0 + 5_000)
        assert dict(await b.settle_takeover([claimed[late]])) == {late: T0 + 2_000}


class TestFakeLeases(LeaseContract):
    @pytest.fixture
    def world(self) -> World:
        return FakeWorld()


class TestStoreLeases(LeaseContract):
    @pytest.fixture
    async def world(self, store: Store) -> AsyncIterator[World]:
        group = JobGroup(app_name="demo", title="demo", address_type=1, address_list="http://exec-1:9999/")
        yield StoreWorld(store, await store.groups.create(group, datetime(2023, 11, 14)))
