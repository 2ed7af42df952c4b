"""The scheduling loop with a liveness port (fakes, manual clock), and :class:`NodeLiveness`
over a fake lock session (driven round by round, with a fake monotonic clock)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import replace

import pytest

from jobring.admin.loop.liveness import LivenessConfig, LivenessLost, NodeLiveness
from jobring.admin.loop.loop import ScheduleLoop
from jobring.admin.store.node_locks import NodeRowLocked
from jobring.admin.store.records import JobInfo
from jobring.core.clock import ManualClock
from jobring.core.schedule import parse_schedule
from tests.admin.loop_fakes import T0, FakeJobTable, Harness, fix_rate_job


class FakeLiveness:
    """The loop's liveness port over the fake job table: tests decide who is alive or dead."""

    def __init__(self, table: FakeJobTable, node_id: str) -> None:
        self.table = table
        self.node_id = node_id
        self.alive = True
        self.dead: list[str] = []
        self.raised: list[int] = []
        self.claims: list[tuple[int, list[str]]] = []
        self.released = 0
        self._lost: Callable[[], None] = lambda: None
        self._wake: Callable[[], None] = lambda: None

    def attach(self, lost: Callable[[], None], wake: Callable[[], None]) -> None:
        self._lost = lost
        self._wake = wake

    def may_send(self) -> bool:
        return self.alive

    async def raise_fence(self, fence_ms: int) -> None:
        if not self.alive:
            raise LivenessLost("no lock")
        self.raised.append(fence_ms)
        self.table.fences[self.node_id] = max(fence_ms, self.table.fences.get(self.node_id, 0))

    async def claim_dead(
        self, now_ms: int, window_end_ms: int, lease_ms: int, limit: int
    ) -> Sequence[JobInfo]:
        if not self.dead:
            return []
        self.claims.append((now_ms, list(self.dead)))
        taken: list[JobInfo] = []
        for job in list(self.table.jobs.values()):
            if job.lease_owner in self.dead and job.trigger_status == 1:
                job = replace(job, lease_owner=self.node_id, lease_until=now_ms + lease_ms)
                self.table.jobs[job.id] = job
                taken.append(job)
        for node in self.dead:
            self.table.nodes[node] = 0
        self.dead = []
        return taken

    async def release_dead(self) -> None:
        self.released += 1

    def lose(self) -> None:
        self.alive = False
        self._lost()

    def regain(self) -> None:
        """The lock is held again on a new session (NodeLiveness then wakes a cycle)."""
        self.alive = True
        self._wake()

    def found_dead(self, node_id: str) -> None:
        self.dead.append(node_id)
        self._wake()


@pytest.fixture
async def h() -> AsyncIterator[Harness]:
    harness = Harness()
    yield harness
    for loop in harness.loops.values():
        await loop.stop()


async def test_fence_goes_through_the_liveness_port(h: Harness) -> None:
    h.table.put(fix_rate_job(1, T0 + 1_000))
    live = FakeLiveness(h.table, "n1")
    loop = h.loop(liveness=live)

    async def through_the_store(fence_ms: int) -> None:
        raise AssertionError("the fence goes through the liveness port")

    h.leases["n1"].raise_fence = through_the_store  # type: ignore[method-assign]
    await loop.start()
    await h.advance_to(T0 + 2_500)
    assert h.runlog.fired() == [(1, T0 + 1_000), (1, T0 + 2_000)]
    assert max(live.raised) >= T0 + 3_000
    assert h.table.fences["n1"] == max(live.raised)


async def test_no_fire_goes_out_while_liveness_is_not_proven(h: Harness) -> None:
    h.table.put(fix_rate_job(1, T0 + 1_000))
    live = FakeLiveness(h.table, "n1")
    await h.loop(liveness=live).start()
    await h.advance_to(T0 + 1_500)
    assert h.runlog.fired() == [(1, T0 + 1_000)]
    live.alive = False  # e.g. woken from a pause: the last ping is too old
    await h.advance_to(T0 + 3_500)
    assert h.runlog.fired() == [(1, T0 + 1_000)]
    live.alive = True  # a ping went through: the waiting fire goes out late (not skipped)
    await h.advance_to(T0 + 4_500)
    # The instant at T0+3 s, due meanwhile too, goes out late as well: none is passed over.
    assert h.runlog.fired() == [(1, T0 + 1_000), (1, T0 + 2_000), (1, T0 + 3_000), (1, T0 + 4_000)]
    assert 0 < h.runlog.records[1].at_ms - (T0 + 2_000) < h.config.misfire_threshold_ms


async def test_losing_liveness_stops_sending_and_renewing_but_keeps_the_jobs(h: Harness) -> None:
    """A blip of the lock session (a database restart): the node sends nothing and renews
    nothing while its lock is gone, but keeps its jobs; once the lock is back, the first
    cycle confirms the leases and every instant due meanwhile is sent late, once. A job
    another node took over meanwhile is dropped, never sent by this node again."""
    for job_id in (1, 2):
        h.table.put(fix_rate_job(job_id, T0 + 1_000))
    live = FakeLiveness(h.table, "n1")
    loop = h.loop(liveness=live)
    await loop.start()
    await h.advance_to(T0 + 1_500)
    assert sorted(loop.held_job_ids) == [1, 2]
    fired = len(h.runlog.fired())
    lease_until = h.table.jobs[1].lease_until
    live.lose()
    await h.advance_to(T0 + 4_600)
    assert len(h.runlog.fired()) == fired
    assert h.table.jobs[1].lease_until == lease_until  # not renewed
    assert sorted(loop.held_job_ids) == [1, 2]  # kept
    # Meanwhile n2 took job 2 over (it held n1's lock, settled, and let it go).
    h.table.jobs[2] = replace(h.table.jobs[2], lease_owner="n2", lease_until=T0 + 20_000)
    live.alive = True
    await h.advance_to(T0 + 6_500)
    assert loop.held_job_ids == [1]
    assert h.runlog.fired(1) == [(1, T0 + s * 1_000) for s in range(1, 7)]
    assert h.runlog.fired(2) == [(2, T0 + 1_000)]
    late = [r.at_ms - r.planned_ms for r in h.runlog.records if r.job_id == 1 and r.planned_ms in
            (T0 + 2_000, T0 + 3_000, T0 + 4_000)]
    assert all(0 < ms <= h.config.misfire_threshold_ms for ms in late)


async def test_a_dead_nodes_jobs_are_claimed_at_once_not_when_its_leases_end(h: Harness) -> None:
    # n2 died holding job 1 with a lease running to T0+10 s.
    h.table.put(fix_rate_job(1, T0 + 1_600, lease_owner="n2", lease_until=T0 + 10_000))
    live = FakeLiveness(h.table, "n1")
    loop = h.loop(liveness=live)
    await loop.start()
    await h.advance_to(T0 + 1_100)
    assert loop.held_job_ids == []
    live.found_dead("n2")  # between two cycles (the next one is due at T0+2 s)
    await h.advance_to(T0 + 1_200, step_ms=10)
    assert live.claims == [(T0 + 1_100, ["n2"])]
    assert loop.held_job_ids == [1]
    assert h.leases["n1"].settled[-1] == [1]  # settled like any takeover
    await h.advance_to(T0 + 3_000, step_ms=10)
    assert h.runlog.fired() == [(1, T0 + 1_600), (1, T0 + 2_600)]
    assert h.runlog.records[0].at_ms == T0 + 1_600  # on time


# ------------------------------------------------------------------ NodeLiveness itself
class FakeSession:
    def __init__(self, world: FakeLockWorld, node_id: str) -> None:
        self.world = world
        self.node_id = node_id
        self.key = hash(node_id)
        self.closed = False
        self.fail = False
        self.rows_locked = False  # another transaction holds the node rows (a paused node's write)
        self.holding: set[int] = set()

    def _check(self) -> None:
        if self.fail or self.closed:
            raise ConnectionError("session gone")

    async def acquire_own(self, now_ms: int) -> bool:
        self._check()
        return await self.try_lock(self.key)

    async def others(self, now_ms: int) -> list[tuple[str, int]]:
        self._check()
        self.world.pings += 1
        return [(n, hash(n)) for n in self.world.announced if n != self.node_id]

    async def try_lock(self, key: int) -> bool:
        self._check()
        self.world.tries.append(key)
        owner = self.world.locks.get(key)
        if owner is not None and owner is not self:
            return False
        self.world.locks[key] = self
        self.holding.add(key)
        return True

    async def unlock(self, key: int) -> None:
        self._check()
        if self.world.locks.get(key) is self:
            del self.world.locks[key]

    async def raise_fence(self, fence_ms: int) -> None:
        self._check()
        self.world.fences[self.node_id] = fence_ms

    async def mark_gone(self, node_ids: Sequence[str]) -> None:
        self._check()
        if self.rows_locked:
            raise NodeRowLocked("locked")
        self.world.gone.extend(node_ids)

    async def close(self) -> None:
        self.closed = True
        for key in [k for k, s in self.world.locks.items() if s is self]:
            del self.world.locks[key]


class FakeLockWorld:
    def __init__(self) -> None:
        self.locks: dict[int, FakeSession] = {}
        self.announced: list[str] = []
        self.tries: list[int] = []
        self.pings = 0
        self.fences: dict[str, int] = {}
        self.gone: list[str] = []
        self.claimed: list[list[str]] = []
        self.now = 0.0
        self.lost = 0
        self.woken = 0

    def liveness(self, node_id: str) -> tuple[NodeLiveness, list[FakeSession]]:
        sessions: list[FakeSession] = []

        async def open_session() -> FakeSession:
            session = FakeSession(self, node_id)
            sessions.append(session)
            return session

        async def claim_owned(owners: Sequence[str], now: int, end: int, lease: int,
                              limit: int) -> list[JobInfo]:
            self.claimed.append(list(owners))
            return [fix_rate_job(7, now, lease_owner=node_id)]

        live = NodeLiveness(open_session, claim_owned, ManualClock(T0), config=LivenessConfig(),
                            monotonic=lambda: self.now)
        live.attach(self._lost, self._woken)
        return live, sessions

    def _lost(self) -> None:
        self.lost += 1

    def _woken(self) -> None:
        self.woken += 1


async def test_liveness_holds_its_lock_and_sends_only_after_a_recent_ping() -> None:
    world = FakeLockWorld()
    live, sessions = world.liveness("a")
    assert not live.may_send()
    await live.tick()  # takes the lock
    assert live.may_send() and world.locks[hash("a")] is sessions[0]
    world.now = 0.9
    assert live.may_send()
    world.now = 1.0  # no round trip for the whole max ping age: paused, or the session hangs
    assert not live.may_send()
    await live.tick()
    assert live.may_send()
    await live.raise_fence(T0)
    assert world.fences == {"a": T0}
    assert world.lost == 0


async def test_a_failed_session_stops_sending_and_is_reopened() -> None:
    world = FakeLockWorld()
    live, sessions = world.liveness("a")
    await live.tick()
    sessions[0].fail = True
    await live.tick()
    assert world.lost == 1 and not live.may_send() and not live.holds
    with pytest.raises(LivenessLost):
        await live.raise_fence(T0)
    await live.stop()  # closes the failed session
    assert sessions[0].closed and hash("a") not in world.locks
    await live.tick()  # a new session takes the lock again
    assert live.may_send() and world.locks[hash("a")] is sessions[1]
    await live.stop()


async def test_a_failed_fence_raise_counts_as_losing_the_lock() -> None:
    world = FakeLockWorld()
    live, sessions = world.liveness("a")
    await live.tick()
    sessions[0].fail = True
    with pytest.raises(ConnectionError):
        await live.raise_fence(T0)
    assert world.lost == 1 and not live.may_send()
    await live.stop()


async def test_own_lock_held_elsewhere_means_not_scheduling() -> None:
    world = FakeLockWorld()
    taker, _ = world.liveness("b")
    await taker.tick()
    assert await world.locks[hash("b")].try_lock(hash("a"))  # "b" holds a's lock (a takeover)
    live, sessions = world.liveness("a")
    await live.tick()
    await live.stop()  # (waits for the refused session's close)
    assert not live.may_send() and sessions[0].closed
    await world.locks[hash("b")].unlock(hash("a"))
    await live.tick()
    assert live.may_send() and world.locks[hash("a")] is sessions[1]
    await live.stop()
    await taker.stop()


async def _victim_and_survivor(world: FakeLockWorld) -> tuple[NodeLiveness, NodeLiveness, list[FakeSession]]:
    """Nodes "a" and "b" holding their locks and announced; b's sessions."""
    victim, _ = world.liveness("a")
    await victim.tick()
    live, sessions = world.liveness("b")
    await live.tick()
    world.announced = ["a", "b"]
    return victim, live, sessions


async def test_dead_node_found_wakes_the_loop_and_is_taken_over_once() -> None:
    world = FakeLockWorld()
    victim, live, _ = await _victim_and_survivor(world)
    await live.tick()
    assert world.woken == 0  # a holds its lock
    await victim.stop()  # a's session ends
    await live.tick()
    assert world.woken == 1
    tries = len(world.tries)
    await live.tick()  # a lock it holds is not tried again (PostgreSQL would re-take it)
    assert len(world.tries) == tries and world.woken == 1
    jobs = await live.claim_dead(T0, T0 + 5_000, 10_000, 100)
    assert [j.id for j in jobs] == [7]
    assert world.claimed == [["a"]] and world.gone == ["a"]
    assert hash("a") in world.locks  # held until the taker has settled
    await live.release_dead()
    assert hash("a") not in world.locks
    assert await live.claim_dead(T0, T0 + 5_000, 10_000, 100) == []
    assert live.takeovers == 1
    await live.stop()


async def test_a_dead_nodes_row_locked_elsewhere_is_taken_over_later_without_losing_the_lock() -> None:
    world = FakeLockWorld()
    victim, live, sessions = await _victim_and_survivor(world)
    await victim.stop()
    await live.tick()
    sessions[0].rows_locked = True  # "a" was paused inside a write of its own row
    world.now = 0.5
    assert await live.claim_dead(T0, T0 + 5_000, 10_000, 100) == []
    assert world.lost == 0 and live.may_send() and world.claimed == [] and world.gone == []
    sessions[0].rows_locked = False  # "a" resumed and committed (its lock stays with "b")
    jobs = await live.claim_dead(T0 + 1_000, T0 + 6_000, 10_000, 100)
    assert [j.id for j in jobs] == [7] and world.gone == ["a"] and world.claimed == [["a"]]
    await live.release_dead()
    assert live.takeovers == 1 and world.lost == 0
    await live.stop()


@pytest.mark.parametrize("rule, late_fire", [("FIRE_ONCE_NOW", "MISFIRE"), ("DO_NOTHING", None)])
async def test_after_an_outage_of_the_whole_database_the_misfire_rule_applies(
    rule: str, late_fire: str | None
) -> None:
    # Every session lost at once (the database restarted or was unreachable, 6.5 s): the node
    # keeps its jobs and sends nothing; once its lock is back, the instants that came due
    # meanwhile go out late, except those more than the misfire threshold late, which
    # follow the misfire rule. Its rows recorded ahead are neither skipped as perhaps sent
    # nor taken for duplicates.
    h = Harness(prepare=True)
    h.table.put(fix_rate_job(1, T0 + 1_000, misfire_strategy=rule))
    live = FakeLiveness(h.table, "n1")
    loop = h.loop(liveness=live)
    await loop.start()
    try:
        # Just after the fire at T0+2 s (its advance queued, not written yet); the instants
        # to T0+4.5 s are recorded ahead.
        await h.advance_to(T0 + 2_050)
        assert h.runlog.fired() == [(1, T0 + 1_000), (1, T0 + 2_000)]
        assert h.runlog.pending(1) == [(1, T0 + 3_000), (1, T0 + 4_000)]
        h.cut_off("n1")
        live.lose()
        await h.advance_to(T0 + 8_500)
        h.cut_off("n1", False)
        live.alive = True
        await h.advance_to(T0 + 12_500)
    finally:
        await loop.stop()
    sent = [(r.planned_ms, r.trigger_type) for r in h.runlog.records if not r.duplicate]
    back = min(r.at_ms for r in h.runlog.records if r.planned_ms > T0 + 2_000)
    assert T0 + 8_500 <= back < T0 + 9_500
    expected = [(T0 + 1_000, "CRON"), (T0 + 2_000, "CRON")]
    if late_fire is not None:
        # The first instant missed, once (recorded ahead as CRON before the outage: its row
        # keeps that type; its trigger message says how late it went out).
        expected.append((T0 + 3_000, "CRON"))
    # Over the threshold when the node is back: T0+3 s and T0+4 s (the misfire rule);
    # T0+5 s to T0+9 s within it: sent late, each once.
    expected += [(T0 + s, "CRON") for s in range(5_000, 12_001, 1_000)]
    assert sent == expected
    late = [r.at_ms - r.planned_ms for r in h.runlog.records if T0 + 5_000 <= r.planned_ms <= T0 + 8_000]
    assert all(0 < ms <= h.config.misfire_threshold_ms for ms in late)
    assert h.stray_rows() == []


async def test_after_losing_its_session_a_node_leaves_the_others_locks_alone_for_a_while() -> None:
    # The whole database restarted: every node lost its session and they reconnect one after
    # the other. The first back must not take the others (alive, reconnecting) for dead.
    world = FakeLockWorld()
    world.announced = ["a", "b"]
    a, a_sessions = world.liveness("a")
    b, b_sessions = world.liveness("b")
    await a.tick()
    await b.tick()
    for session in a_sessions + b_sessions:
        await session.close()  # the server ended every session
        session.fail = True
    await a.tick()
    await b.tick()
    assert world.lost == 2
    world.now = 1.0
    await a.tick()  # a is back first
    assert a.holds
    assert world.woken == 1  # its loop runs a cycle at once: it confirms a's leases
    for _ in range(5):
        world.now += 0.3
        await a.tick()  # b's lock is free, but a has just come back: not tried
    assert hash("b") not in world.locks and world.woken == 1
    await b.tick()  # b is back within the grace
    assert b.holds and b.may_send() and world.woken == 2
    world.now = 1.0 + a.config.rejoin_grace_ms / 1000
    await a.tick()
    assert world.woken == 2 and world.locks[hash("b")] is b_sessions[-1]
    # Once the grace is over, a node whose lock is free is dead again.
    await b.stop()
    await a.tick()
    assert world.woken == 3
    await a.stop()


async def test_a_fire_in_flight_when_the_session_is_lost_is_not_sent_again_nor_skips_the_next() -> None:
    # The session fails while a fire is being sent: the node keeps the job, its advance is
    # queued once the fire is recorded, and it carries on after the fire once its lock is
    # back, neither sending it again (nor, taking it for a duplicate, stepping past the
    # instants after it).
    h = Harness()
    h.table.put(fix_rate_job(1, T0 + 1_000))
    live = FakeLiveness(h.table, "n1")

    lost: list[int] = []

    async def lose_during_the_send() -> None:
        if h.clock.now_ms() == T0 + 2_000 and not lost:
            lost.append(h.clock.now_ms())
            live.lose()

    leases = h.table.node("n1")
    loop = ScheduleLoop(leases, h.port("n1", lose_during_the_send), h.loop_timers, parse_schedule,
                        config=h.config, liveness=live)
    h.leases["n1"] = leases
    await loop.start()
    try:
        await h.advance_to(T0 + 2_500)
        assert loop.held_job_ids == [1] and h.table.jobs[1].trigger_next_time == T0 + 3_000
        live.regain()
        await h.advance_to(T0 + 5_500)
    finally:
        await loop.stop()
    sent = [(r.planned_ms, r.at_ms) for r in h.runlog.records if not r.duplicate]
    assert sent == [(T0 + 1_000, T0 + 1_000), (T0 + 2_000, T0 + 2_000), (T0 + 3_000, T0 + 3_000),
                    (T0 + 4_000, T0 + 4_000), (T0 + 5_000, T0 + 5_000)]
    assert [r.planned_ms for r in h.runlog.records if r.duplicate] == []


async def test_a_dead_nodes_job_due_after_the_window_is_not_left_to_its_lease(h: Harness) -> None:
    # (review) n2 died right after advancing job 1 (every 7 s) to T0+6.5 s; its lease runs to
    # T0+9.5 s. n1 finds n2 dead at T0+1.1 s: claim_dead takes only jobs due within the
    # window (T0+6.1 s), then marks n2 gone, so nobody tries n2 again, and the ordinary
    # claim waits for the lease to run out. The instant at T0+6.5 s goes out ~3.5 s late
    # (skipped under DO_NOTHING with a shorter misfire threshold) although n2 was known dead
    # 5 s before it: the design says the dead node's jobs are taken "whatever their lease_until".
    h.table.put(fix_rate_job(1, T0 + 6_500, seconds=7, lease_owner="n2", lease_until=T0 + 9_500))
    live = FakeLiveness(h.table, "n1")
    loop = h.loop(liveness=live)
    await loop.start()
    await h.advance_to(T0 + 1_100)
    live.found_dead("n2")
    await h.advance_to(T0 + 11_000, step_ms=50)
    assert h.runlog.fired(1)[:1] == [(1, T0 + 6_500)]
    assert h.runlog.records[0].at_ms - (T0 + 6_500) < 500, "fired late: left to the dead node's lease"


async def test_liveness_regained_refires_instants_whose_rows_it_recorded_ahead() -> None:
    # (review) n1 loses its lock at T0+1.5 s and drops job 1: its rows recorded ahead
    # (T0+2 s, T0+3 s) wait in the withdrawn list. It gets its lock back before anyone takes
    # the job over; the next cycle re-adopts job 1 at its stored next time T0+2 s, already due,
    # and only then withdraws the old rows. The timer fires T0+2 s in between: its insert
    # finds the old row (duplicate: not sent), then the withdrawal deletes that row. T0+2 s
    # is never sent and leaves no row (no lost-run monitor will see it).
    h = Harness(prepare=True)
    try:
        h.table.put(fix_rate_job(1, T0 + 1_000))
        live = FakeLiveness(h.table, "n1")
        loop = h.loop(liveness=live)
        preparer = loop._readahead._preparer  # noqa: SLF001 (the fake port)
        assert preparer is not None
        real_cancel = preparer.cancel

        async def slow_cancel(batches: Sequence[object]) -> None:
            for _ in range(5):  # a DELETE round trip slower than the INSERT of the fire
                await asyncio.sleep(0)
            await real_cancel(batches)

        preparer.cancel = slow_cancel  # type: ignore[method-assign]
        await loop.start()
        await h.advance_to(T0 + 1_500, step_ms=10)
        assert h.runlog.fired(1) == [(1, T0 + 1_000)]
        live.lose()
        await h.advance_to(T0 + 2_600, step_ms=10)
        live.alive = True
        await h.advance_to(T0 + 4_500, step_ms=10)
        fired = h.runlog.fired(1)
        assert (1, T0 + 2_000) in fired or (1, T0 + 2_000) in h.table.rows, (
            f"instant T0+2 s silently lost: fired {fired}, rows {sorted(h.table.rows)}")
    finally:
        for lp in h.loops.values():
            await lp.stop()


async def test_a_paused_node_cannot_raise_its_fence_before_its_taker_has_settled() -> None:
    # (review) settle_takeover reads the dead node's fence in LeaseKeeper.claim_locked AFTER
    # claim_dead returned, and claim_dead releases the dead node's lock before returning. A
    # node that was only paused (its session idled out) retakes its lock in that gap (it
    # retries every 300 ms) and raises its fence (renewed_at + lease - guard still allows
    # ~8 s): the taker then reads the raised fence, takes the fires the node recorded ahead
    # beyond its old fence (never sent: it dropped its jobs when it lost the lock) for
    # "maybe sent", and neither withdraws nor sends them.
    world = FakeLockWorld()
    victim, victim_sessions = world.liveness("a")
    await victim.tick()
    await victim.raise_fence(T0 + 1_000)  # the fence when it froze
    taker, _ = world.liveness("b")
    await taker.tick()
    world.announced = ["a", "b"]
    victim_sessions[0].fail = True  # its session idled out while paused
    await victim.tick()  # resumed: its round trip fails, it drops its jobs
    assert world.lost == 1
    await victim.stop()
    victim2, _ = world.liveness("a")  # (the same node reconnecting)
    await taker.tick()  # the lock of "a" is free: taken over
    assert world.woken == 1
    await taker.claim_dead(T0, T0 + 5_000, 10_000, 100)
    # Between claim_dead and the taker's settle_takeover (heartbeat, claim: a few round trips):
    await victim2.tick()
    if victim2.may_send():
        await victim2.raise_fence(T0 + 4_500)
    assert world.fences["a"] == T0 + 1_000, "the fence the taker settles with moved after the takeover"
    await victim2.stop()
    await taker.stop()
