"""The contract of the fire port that records fires ahead (:class:`FirePreparer`), run
against the in-memory fake the loop suites use (``FakePreparer``) and against the trigger
service's port (``TriggerFirePort``) over the store on every backend."""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Sequence
from datetime import datetime

import pytest
from sqlalchemy import select

from jobring.admin.dispatch.client import ExecutorClient
from jobring.admin.loop.adapters import StoreLeases, TriggerFirePort
from jobring.admin.loop.ports import FirePreparer, LeaseStore, PlannedFire
from jobring.admin.store import Store
from jobring.admin.store.records import JobGroup, JobInfo
from jobring.admin.store.tables import job_log
from jobring.admin.trigger.trigger import PreparedBatch, TriggerService
from jobring.core.clock import ManualClock
from jobring.core.enums import TriggerType
from tests.admin.executor_double import ExecutorDouble
from tests.admin.loop_fakes import T0, FakeJobTable, FakeLeases, FakeRunLog, fix_rate_job

LEASE = 10_000


class World(abc.ABC):
    @abc.abstractmethod
    async def add_job(self, next_ms: int) -> JobInfo: ...

    @abc.abstractmethod
    def leases(self, node: str) -> LeaseStore: ...

    @abc.abstractmethod
    def port(self, node: str) -> FirePreparer:
        """The node's fire port (the same one on every call)."""

    @abc.abstractmethod
    async def rows(self) -> list[tuple[int, int, str | None]]:
        """(job id, planned instant, node) of every scheduled fire recorded, in order."""

    @abc.abstractmethod
    async def sent(self) -> list[tuple[int, int]]:
        """(job id, planned instant) of the fires sent to executors, in order."""

    @abc.abstractmethod
    def fail_next_withdrawal(self) -> None:
        """The next withdrawal of rows fails (the database is briefly unreachable)."""


class FakeWorld(World):
    def __init__(self) -> None:
        self.table = FakeJobTable()
        self.runlog = FakeRunLog(ManualClock(T0), self.table)
        self._leases: dict[str, FakeLeases] = {}
        self._ports: dict[str, FirePreparer] = {}

    async def add_job(self, next_ms: int) -> JobInfo:
        job = fix_rate_job(max(self.table.jobs, default=0) + 1, next_ms)
        self.table.put(job)
        return job

    def leases(self, node: str) -> LeaseStore:
        return self._leases.setdefault(node, self.table.node(node))

    def port(self, node: str) -> FirePreparer:
        return self._ports.setdefault(node, self.runlog.preparer(node))

    async def rows(self) -> list[tuple[int, int, str | None]]:
        return sorted((r.job_id, r.planned_ms, r.node) for r in self.table.rows.values())

    async def sent(self) -> list[tuple[int, int]]:
        return sorted(self.runlog.fired())

    def fail_next_withdrawal(self) -> None:
        self.runlog.fail_cancel = 1


class StoreWorld(World):
    def __init__(self, store: Store, group_id: int, monkeypatch: pytest.MonkeyPatch) -> None:
        self.store = store
        self.group_id = group_id
        self.double = ExecutorDouble(["exec-1:9999"])
        self.triggers: list[TriggerService] = []
        self.clients: list[ExecutorClient] = []
        self._leases: dict[str, StoreLeases] = {}
        self._ports: dict[str, FirePreparer] = {}
        self._fail = False
        withdraw = store.fires.withdraw

        async def failing_withdraw(log_ids: Sequence[int], holder: str) -> int:
            if self._fail:
                self._fail = False
                raise ConnectionError("database unreachable")
            return await withdraw(log_ids, holder)

        monkeypatch.setattr(store.fires, "withdraw", failing_withdraw)

    async def add_job(self, next_ms: int) -> JobInfo:
        job_id = await self.store.jobs.create(fix_rate_job(0, next_ms, job_group=self.group_id))
        job = await self.store.jobs.get(job_id)
        assert job is not None
        return job

    def leases(self, node: str) -> LeaseStore:
        return self._leases.setdefault(node, StoreLeases(self.store, node))

    def port(self, node: str) -> FirePreparer:
        if node not in self._ports:
            client = ExecutorClient(access_token="tok", connect=self.double.connect)
            trigger = TriggerService(self.store, client, node_id=node,
                                     clock=ManualClock(T0), admin_timezone="UTC")
            self.clients.append(client)
            self.triggers.append(trigger)
            self._ports[node] = TriggerFirePort(trigger)
        return self._ports[node]

    async def rows(self) -> list[tuple[int, int, str | None]]:
        stmt = select(job_log.c.job_id, job_log.c.planned_time, job_log.c.admin_node).where(
            job_log.c.planned_time.is_not(None))
        async with self.store.engine.connect() as conn:
            found = (await conn.execute(stmt)).all()
        return sorted((int(r[0]), int(r[1]), r[2]) for r in found)

    async def sent(self) -> list[tuple[int, int]]:
        log_ids = [int(c.body["logId"]) for c in self.double.runs()]
        stmt = select(job_log.c.job_id, job_log.c.planned_time).where(job_log.c.id.in_(log_ids))
        async with self.store.engine.connect() as conn:
            found = (await conn.execute(stmt)).all()
        assert len(found) == len(log_ids)  # (each row sent once)
        return sorted((int(r[0]), int(r[1])) for r in found)

    def fail_next_withdrawal(self) -> None:
        self._fail = True

    async def close(self) -> None:
        for trigger in self.triggers:
            await trigger.close()
        for client in self.clients:
            await client.aclose()


def _fires(job: JobInfo, *planned: int) -> list[PlannedFire]:
    return [PlannedFire(job, TriggerType.CRON, p) for p in planned]


def _ready(outcomes: Sequence[PreparedBatch | None]) -> list[PreparedBatch]:
    ready = [b for b in outcomes if b is not None]
    assert len(ready) == len(outcomes)
    return ready


class FirePortContract:
    """The tests; a subclass provides the ``world`` fixture."""

    async def test_prepare_records_each_instant_once(self, world: World) -> None:
        job = await world.add_job(T0 + 1_000)
        a, b = world.port("a"), world.port("b")
        first = await a.prepare(_fires(job, T0 + 1_000, T0 + 2_000, T0 + 1_000))
        assert [o is None for o in first] == [False, False, True]
        assert [o is None for o in await b.prepare(_fires(job, T0 + 2_000, T0 + 3_000))] == [True, False]
        assert await world.rows() == [(job.id, T0 + 1_000, "a"), (job.id, T0 + 2_000, "a"),
                                      (job.id, T0 + 3_000, "b")]
        assert await world.sent() == []

    async def test_dispatch_sends_prepared_fires_once(self, world: World) -> None:
        job = await world.add_job(T0 + 1_000)
        a = world.port("a")
        one, two = _ready(await a.prepare(_fires(job, T0 + 1_000, T0 + 2_000)))
        await a.dispatch([one])
        assert await world.sent() == [(job.id, T0 + 1_000)]
        with pytest.raises(RuntimeError):
            await a.dispatch([one])
        await a.dispatch([two])
        assert await world.sent() == [(job.id, T0 + 1_000), (job.id, T0 + 2_000)]

    async def test_cancel_withdraws_fires_not_sent_of_jobs_the_node_holds(self, world: World) -> None:
        job = await world.add_job(T0 + 1_000)
        await world.leases("a").claim(T0, T0 + 5_000, LEASE, 10)
        theirs = await world.add_job(T0 + 1_000)
        await world.leases("b").claim(T0, T0 + 5_000, LEASE, 10)
        a = world.port("a")
        sent, ahead, later = _ready(await a.prepare(_fires(job, T0 + 1_000, T0 + 2_000, T0 + 3_000)))
        [handed_over] = _ready(await a.prepare(_fires(theirs, T0 + 2_000)))
        await a.dispatch([sent])
        # The fire sent stays; a job now held by another node keeps its row (that node settles it).
        await a.cancel([sent, ahead, handed_over])
        assert await world.rows() == [(job.id, T0 + 1_000, "a"), (job.id, T0 + 3_000, "a"),
                                      (theirs.id, T0 + 2_000, "a")]
        with pytest.raises(RuntimeError):
            await a.dispatch([ahead])
        await a.cancel([ahead])  # (once is enough)
        # The instant withdrawn can be recorded again.
        assert [o is None for o in await world.port("c").prepare(_fires(job, T0 + 2_000))] == [False]
        await a.dispatch([later])
        assert await world.sent() == [(job.id, T0 + 1_000), (job.id, T0 + 3_000)]

    async def test_a_cancel_that_failed_can_be_retried(self, world: World) -> None:
        """The loop keeps the batches of a failed cancel and cancels them again; they must
        still be withdrawable (else the rows stay, and the job's next holder can never
        record, so never send, those instants)."""
        job = await world.add_job(T0 + 1_000)
        await world.leases("a").claim(T0, T0 + 5_000, LEASE, 10)
        a = world.port("a")
        ahead = _ready(await a.prepare(_fires(job, T0 + 2_000, T0 + 3_000)))
        world.fail_next_withdrawal()
        with pytest.raises(ConnectionError):
            await a.cancel(ahead)
        assert len(await world.rows()) == 2
        await a.cancel(ahead)
        assert await world.rows() == []


class TestFakePreparer(FirePortContract):
    @pytest.fixture
    def world(self) -> World:
        return FakeWorld()


class TestTriggerFirePort(FirePortContract):
    @pytest.fixture
    async def world(self, store: Store, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[World]:
        group = JobGroup(app_name="demo", title="demo", address_type=1, address_list="http://exec-1:9999/")
        world = StoreWorld(store, await store.groups.create(group, datetime(2023, 11, 14)), monkeypatch)
        try:
            yield world
        finally:
            await world.close()
