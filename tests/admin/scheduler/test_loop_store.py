"""The scheduling loop over the real store (each backend) and the real trigger service.

Time is a manual clock; the database work is real, so the tests wait for its effects with
a timeout instead of draining a fake.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from datetime import datetime

import pytest
from sqlalchemy import select

from jobring.admin.dispatch.client import ExecutorClient
from jobring.admin.loop.adapters import StoreLeases, TriggerFirePort
from jobring.admin.loop.loop import LoopConfig, ScheduleLoop
from jobring.admin.loop.timers import ManualTimers
from jobring.admin.store import Store
from jobring.admin.store.records import JobGroup
from jobring.admin.store.tables import job_log
from jobring.admin.trigger.trigger import TriggerService
from jobring.core.clock import ManualClock
from jobring.core.schedule import parse_schedule
from tests.admin.executor_double import ExecutorDouble
from tests.admin.loop_fakes import T0, fix_rate_job

# The harness lets real time pass (20 ms) for a woken loop's database work: on a loaded
# machine that is too short, so these run in make test's quiet phase.
pytestmark = pytest.mark.timing


async def eventually(check: Callable[[], object], limit_s: float = 10.0) -> None:
    """Wait until ``check()`` is truthy (async or not), failing after ``limit_s`` seconds."""
    async with asyncio.timeout(limit_s):
        while True:
            result = check()
            if asyncio.iscoroutine(result):
                result = await result
            if result:
                return
            await asyncio.sleep(0.01)


@dataclass
class Node:
    loop: ScheduleLoop
    trigger: TriggerService
    client: ExecutorClient


class World:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.clock = ManualClock(T0)
        self.timers = ManualTimers(self.clock)
        self.double = ExecutorDouble(["exec-1:9999"])
        self.nodes: list[Node] = []
        self.group_id = 0

    def node(self, node_id: str, lease_ms: int = 5_000) -> ScheduleLoop:
        client = ExecutorClient(access_token="tok", connect=self.double.connect)
        trigger = TriggerService(self.store, client, node_id=node_id, clock=self.clock,
                                 admin_timezone="UTC")
        loop = ScheduleLoop(StoreLeases(self.store, node_id), TriggerFirePort(trigger), self.timers,
                            parse_schedule, config=LoopConfig(lease_ms=lease_ms))
        self.nodes.append(Node(loop, trigger, client))
        return loop

    async def cycles(self, loop: ScheduleLoop, count: int) -> None:
        """Wait until the loop has completed ``count`` claim cycles since it started."""
        await eventually(lambda: loop.stats.cycles >= count)

    async def fired_rows(
        self, dispatched: bool = True
    ) -> list[tuple[int, int | None, str | None, str | None]]:
        """Log rows of fires that were sent (``dispatched``), else of those recorded but not sent
        (prepared ahead). Trigger results are written in batches: flushed first."""
        for node in self.nodes:
            await node.trigger.flush_results()
        sent = job_log.c.dispatch_time.is_not(None)
        async with self.store.engine.connect() as conn:
            rows = (await conn.execute(
                select(job_log.c.job_id, job_log.c.planned_time, job_log.c.trigger_type, job_log.c.admin_node)
                .where(sent if dispatched else ~sent)
                .order_by(job_log.c.job_id, job_log.c.planned_time))).all()
        return [(r[0], r[1], r[2], r[3]) for r in rows]

    async def step_to(self, loop_list: list[ScheduleLoop], now_ms: int, step_ms: int = 250) -> None:
        """Move the clock in steps; at each whole cycle wait for every loop's claim to land."""
        while self.clock.now_ms() < now_ms:
            target = min(now_ms, self.clock.now_ms() + step_ms)
            before = [lp.stats.cycles for lp in loop_list]
            nxt = self.timers.next_deadline()
            while nxt is not None and nxt <= target:
                self.timers.advance_to(max(nxt, self.clock.now_ms()))
                await asyncio.sleep(0.02)
                nxt = self.timers.next_deadline()
            self.timers.advance_to(target)
            for lp, b in zip(loop_list, before, strict=True):
                if lp._tasks and (target - T0) % 1_000 == 0:
                    await eventually(lambda lp=lp, b=b: lp.stats.cycles > b)  # type: ignore[misc]
            await eventually(lambda: self._ring_due() and all(self._settled(lp) for lp in loop_list))

    def _ring_due(self) -> bool:
        """Run the timers due by the manual clock now: a timer set after the last advance at a
        deadline already passed (a fire planned late, say) would otherwise never ring, and its
        instant would stay due forever. (Real timers ring a past deadline at once.)"""
        self.timers.advance_to(self.clock.now_ms())
        return True

    def _settled(self, loop: ScheduleLoop) -> bool:
        """Nothing due by the manual clock is left to fire and no batch is in flight. (The
        timer task may still be raising the send fence, a database write, when a short sleep
        ends: under load that outlasts it, and an instant passed would look unsent.)"""
        if loop._ctx.background.tasks:
            return False
        if not loop._tasks:
            return True
        due = loop._held.next_due()
        return due is None or due > self.clock.now_ms()


@pytest.fixture
async def world(store: Store) -> AsyncIterator[World]:
    w = World(store)
    w.group_id = await store.groups.create(JobGroup(app_name="demo", title="demo", address_type=1,
                                                    address_list="http://exec-1:9999/"),
                                        datetime(2023, 11, 14))
    try:
        yield w
    finally:
        for node in w.nodes:
            await node.loop.stop()
            await node.trigger.close()
            await node.client.aclose()


async def _job(world: World, next_ms: int, **changes: object) -> int:
    return await world.store.jobs.create(fix_rate_job(0, next_ms, job_group=world.group_id, **changes))


async def test_fires_each_instant_once_records_it_and_advances(world: World) -> None:
    job_id = await _job(world, T0 + 1_000)
    loop = world.node("a")
    await loop.start()
    await world.cycles(loop, 1)
    await world.step_to([loop], T0 + 3_000)
    rows = await world.fired_rows()  # a fixed-rate job: its runs say FIX_RATE
    assert [(r[0], r[1], r[2]) for r in rows] == [
        (job_id, T0 + 1_000, "FIX_RATE"), (job_id, T0 + 2_000, "FIX_RATE"), (job_id, T0 + 3_000, "FIX_RATE")]
    assert len(world.double.runs()) == 3
    # The next instants are recorded ahead (not sent); a stop withdraws them.
    assert [r[1] for r in await world.fired_rows(dispatched=False)] == [T0 + 4_000, T0 + 5_000]
    await loop.stop()
    assert await world.fired_rows(dispatched=False) == []
    job = await world.store.jobs.get(job_id)
    assert job is not None
    assert (job.trigger_last_time, job.trigger_next_time) == (T0 + 3_000, T0 + 4_000)
    assert job.lease_owner is None


async def test_two_nodes_on_one_database_never_fire_an_instant_twice(world: World) -> None:
    ids = [await _job(world, T0 + 1_000 + i * 10) for i in range(8)]
    a, b = world.node("a"), world.node("b")
    await a.start()
    await b.start()
    await world.cycles(a, 1)
    await world.cycles(b, 1)
    await world.step_to([a, b], T0 + 4_000)
    rows = await world.fired_rows()
    keys = [(r[0], r[1]) for r in rows]
    assert len(keys) == len(set(keys))
    for i, job_id in enumerate(ids):
        planned = [p for j, p in keys if j == job_id]
        assert planned == list(range(T0 + 1_000 + i * 10, T0 + 4_001, 1_000)), job_id
    run_logs = [c.body["logId"] for c in world.double.runs()]
    assert len(run_logs) == len(set(run_logs)) == len(keys)
    assert {r[3] for r in rows if r[1] is not None and r[1] >= T0 + 3_000} == {"a", "b"}


async def test_survivor_takes_over_a_dead_nodes_jobs_without_double_fires(world: World) -> None:
    job_id = await _job(world, T0 + 1_000, misfire_strategy="FIRE_ONCE_NOW")
    a = world.node("a", lease_ms=3_000)
    await a.start()
    await world.cycles(a, 1)
    await world.step_to([a], T0 + 2_000)
    # a dies: no release, its lease on the job simply runs out.
    for task in a._tasks:
        task.cancel()
    await asyncio.gather(*a._tasks, return_exceptions=True)
    a._tasks = []
    fence = (await world.store.nodes.send_fences(["a"]))["a"]
    left = [f for f in await world.store.fires.recorded_since({job_id: 0}, "b") if not f.confirmed]
    never_sent = {f.planned_time for f in left if f.planned_time > fence}
    assert never_sent, (fence, left)  # a recorded fires further ahead than its fence
    b = world.node("b", lease_ms=3_000)
    await b.start()
    await world.step_to([b], T0 + 9_000)
    rows = await world.fired_rows()
    keys = [(r[1]) for r in rows]
    assert len(keys) == len(set(keys))
    assert {r[3] for r in rows} == {"a", "b"}
    assert keys[-1] == T0 + 9_000
    run_logs = [c.body["logId"] for c in world.double.runs()]
    assert len(run_logs) == len(set(run_logs)) == len(keys)
    # What a recorded beyond its send fence was never sent: b resumes at the first of those
    # instants and sends it. (b picks the job up under 5 s late with this short lease, so
    # that fire plans from now: later instants it passes over are logged, not caught up.)
    assert min(never_sent) in {r[1] for r in rows if r[3] == "b"}
    # What a recorded up to its fence and did not confirm may have been sent just before it
    # died: b does not send it again; it stays for its callback (or the lost-run monitor).
    orphans = [r for r in await world.fired_rows(dispatched=False) if r[3] == "a"]
    assert all(r[1] is not None and r[1] <= fence for r in orphans)
    assert not {r[1] for r in orphans} & set(keys)
    # Every instant up to the takeover is sent or left visibly unconfirmed.
    accounted = {*keys, *(r[1] for r in orphans)}
    assert set(range(T0 + 1_000, min(never_sent) + 1, 1_000)) <= accounted
    assert set(range(T0 + 7_000, T0 + 9_001, 1_000)) <= accounted
    job = await world.store.jobs.get(job_id)
    assert job is not None and job.lease_owner == "b"


async def test_heartbeat_counts_live_nodes_and_due_jobs_and_forgets_old_nodes(world: World) -> None:
    await _job(world, T0 + 1_000)
    await _job(world, T0 + 60_000)
    a, b = StoreLeases(world.store, "a"), StoreLeases(world.store, "b")
    await world.store.nodes.announce("long-gone", T0 - 8 * 86_400_000)
    assert await world.store.nodes.send_fences(["long-gone"]) == {"long-gone": 0}
    assert await a.heartbeat(T0, T0 + 10_000, T0 + 5_000) == (1, 1)
    assert await b.heartbeat(T0, T0 + 10_000, T0 + 5_000) == (2, 1)
    assert await world.store.nodes.send_fences(["long-gone"]) == {}
    await b.heartbeat(T0, 0, T0)  # b stops
    assert await a.heartbeat(T0 + 1_000, T0 + 11_000, T0 + 61_000) == (1, 2)


async def test_stopped_or_edited_job_withdraws_its_fires_recorded_ahead(world: World) -> None:
    stopped = await _job(world, T0 + 1_000)
    edited = await _job(world, T0 + 1_000)
    loop = world.node("a")
    await loop.start()
    await world.cycles(loop, 1)
    await world.step_to([loop], T0 + 1_000)
    ahead = await world.fired_rows(dispatched=False)
    assert {(r[0], r[1]) for r in ahead} == {(j, T0 + t) for j in (stopped, edited) for t in (2_000, 3_000)}
    await world.store.jobs.set_status(stopped, 0, 0)
    job = await world.store.jobs.get(edited)
    assert job is not None
    await world.store.jobs.update(replace(job, schedule_conf="2", update_time=datetime(2023, 11, 15)))
    await world.step_to([loop], T0 + 4_000)
    rows = await world.fired_rows()
    # Within a cycle: the stopped job sends nothing more; the edited one keeps its grid from
    # the stored next instant, now every 2 s, and nothing of the old plan stays recorded.
    assert [r[1] for r in rows if r[0] == stopped] == [T0 + 1_000, T0 + 2_000]
    sent = [r[1] for r in rows if r[0] == edited]
    assert sent[:2] == [T0 + 1_000, T0 + 2_000] and sent[-1] in (T0 + 3_000, T0 + 4_000)
    later = [(r[0], r[1]) for r in await world.fired_rows(dispatched=False)]
    assert later and all(j == edited and p > T0 + 4_000 and (p - sent[-1]) % 2_000 == 0 for j, p in later)
