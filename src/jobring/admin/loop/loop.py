"""The admin's scheduling loop: claim due jobs ahead, fire each at its planned instant.

:class:`ScheduleLoop` composes a one-way pipeline of stages over one :class:`LoopContext`,
each stage keeping some of the loop's invariants (docs/design/scheduling-loop.md):

    leases (:mod:`.leases`: renew, claim, take over, release)
      -> held (:mod:`.held`, :mod:`.adoption`: held jobs and their timer heap)
      -> timer (:mod:`.timer`: one sleeper on the earliest instant)
      -> sender (:mod:`.firing`, :mod:`.fence`, :mod:`.readahead`, :mod:`.advance`)

A stage imports and calls only the stages before it (``tests/admin/scheduler/
test_loop_pipeline.py``); what a stage's outcome means for a later one flows forward
through this module (a claim's :class:`~.leases.Claim` to the held stage, its
:class:`~.adoption.Adopted` to the advance writer) or a hook the earlier stage owns.

Its four tasks share one database lock, so that a release never lands between a renewal
and its application and the advances are written before each renewal.
"""

from __future__ import annotations

import asyncio
import logging
from enum import Enum

from jobring.admin.loop.adoption import Adopter
from jobring.admin.loop.advance import AdvanceWriter
from jobring.admin.loop.ahead import Withdrawals
from jobring.admin.loop.config import LoopConfig, LoopStats
from jobring.admin.loop.context import LoopContext
from jobring.admin.loop.fence import SendFence
from jobring.admin.loop.firing import FireSender
from jobring.admin.loop.held import HeldSet
from jobring.admin.loop.leases import LeaseKeeper
from jobring.admin.loop.ports import (
    FireBatch,
    FirePreparer,
    LeaseStore,
    Liveness,
    ScheduleFactory,
    TimingPort,
)
from jobring.admin.loop.readahead import ReadAhead
from jobring.admin.loop.timer import FireTimer
from jobring.admin.loop.timers import Timers
from jobring.background import Background
from jobring.core.bounded import within
from jobring.core.timefmt import iso_ms

__all__ = ["LoopConfig", "LoopState", "LoopStats", "ScheduleLoop"]

log = logging.getLogger(__name__)

_STOP_STEP_S = 2.0  # each step of a stop that waits on the database (real seconds)


class LoopState(Enum):
    """Where the loop is in its life."""

    NEW = "new"
    RUNNING = "running"
    STOPPING = "stopping"  # tasks cancelled; in-flight fires finish, leases are given back
    STOPPED = "stopped"


class ScheduleLoop:
    """Claims due jobs and fires them on time (docs/design/scheduling-loop.md)."""

    def __init__(
        self,
        store: LeaseStore,
        fire_batch: FireBatch,
        timers: Timers,
        schedule_factory: ScheduleFactory,
        *,
        admin_timezone: str = "UTC",
        config: LoopConfig | None = None,
        liveness: Liveness | None = None,
        timing: TimingPort | None = None,
    ) -> None:
        self.config = config or LoopConfig()
        # Session-lock liveness (PostgreSQL/MariaDB): fast takeover of dead nodes' jobs.
        self._liveness = liveness
        self._cycle_wake: asyncio.Future[None] | None = None
        self._cycle_wanted = False
        self._losses = 0  # times liveness was lost
        self.stats = LoopStats()
        self.cycle_done = asyncio.Condition()
        self.state = LoopState.NEW
        self._store = store
        self._timers = timers
        self._clock = timers.clock
        self._tasks: list[asyncio.Task[None]] = []
        preparer = fire_batch if isinstance(fire_batch, FirePreparer) else None
        ctx = self._ctx = LoopContext(
            store=store, timers=timers, config=self.config, stats=self.stats,
            schedule_factory=schedule_factory, admin_timezone=admin_timezone, db_lock=asyncio.Lock(),
            preparer=preparer, withdrawals=Withdrawals(preparer), background=Background(log),
            liveness=liveness, timing=timing,
        )
        # The stages, in pipeline order: each is given only the stages before it.
        self._leases = LeaseKeeper(ctx)
        self._held = HeldSet(ctx.withdrawals)
        self._adopter = Adopter(ctx, self._held, self._leases.releases)
        self._readahead = ReadAhead(ctx, self._held, fire_batch)
        self._fence = SendFence(ctx)
        self._advance = AdvanceWriter(ctx, self._held, self._leases.releases)
        self._sender = FireSender(ctx, self._held, fence=self._fence, readahead=self._readahead,
                                  advance=self._advance)
        self._timer = FireTimer(ctx, self._held, self._sender)

    # ----------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        """Start claiming and firing (tasks: claim cycle, timer, advance writer, send fence)."""
        self.state = LoopState.RUNNING
        if self._liveness is not None:
            self._liveness.attach(self._liveness_lost, self._wake_cycle)
        self._tasks = [
            asyncio.create_task(self._run_cycles(), name="jobring-schedule-cycle"),
            asyncio.create_task(self._timer.run(), name="jobring-schedule-timer"),
            asyncio.create_task(self._advance.run(), name="jobring-schedule-writer"),
            asyncio.create_task(self._fence.run(), name="jobring-schedule-fence"),
        ]

    async def stop(self) -> None:
        """Stop claiming and firing, let in-flight fires finish, record them, release leases."""
        self.state = LoopState.STOPPING
        for task in self._tasks:
            task.cancel()
        # Bounded: a cancelled statement's cleanup blocks while the database does not answer.
        if self._tasks:
            done, _ = await asyncio.wait(self._tasks, timeout=_STOP_STEP_S)
            for task in done:
                if not task.cancelled() and task.exception() is not None:
                    log.error("scheduling task %s had failed: %r", task.get_name(), task.exception())
        self._tasks = []
        if self._readahead.task is not None:
            await asyncio.wait({self._readahead.task}, timeout=_STOP_STEP_S)
        await self._ctx.background.stop(self.config.stop_timeout_s, "fire batches")
        try:
            await within(self._give_back(), _STOP_STEP_S, "releasing the held leases")
        finally:
            self._held.clear()
            self.stats.held = 0
            self.state = LoopState.STOPPED

    async def _give_back(self) -> None:
        async with self._ctx.db_lock:
            await self._advance.flush_locked()
            held = list(self._held)
            for job_id in held:
                self._held.drop(job_id)
            await self._ctx.withdrawals.cancel()
            if held:
                await self._store.release(held)
            now = self._clock.now_ms()
            await self._store.heartbeat(now, 0, now)

    @property
    def held_job_ids(self) -> list[int]:
        return list(self._held)

    @property
    def running(self) -> bool:
        """True while the loop's tasks (claim cycle, timer, writer, fence) all run."""
        return (self.state is LoopState.RUNNING and bool(self._tasks)
                and not any(t.done() for t in self._tasks))

    @property
    def renewed_at_ms(self) -> int | None:
        """When this node last renewed its leases (epoch ms), None before the first cycle."""
        return self._leases.renewed_at

    # ----------------------------------------------------------------- claim cycle
    async def _run_cycles(self) -> None:
        while True:
            started = self._clock.now_ms()
            try:
                await self.run_cycle()
            except asyncio.CancelledError:
                raise
            except Exception:
                # The database may be briefly unreachable; held fires keep going until
                # their leases run out, and the next cycle tries again.
                log.exception("schedule cycle failed; retrying next cycle")
            await self._sleep_until_cycle(started + self.config.cycle_ms)

    async def _sleep_until_cycle(self, deadline_ms: int) -> None:
        """Sleep until the next cycle is due, or until a dead node is found (liveness)."""
        if self._cycle_wanted:
            self._cycle_wanted = False
            return
        fut = self._cycle_wake = asyncio.get_running_loop().create_future()
        handle = self._timers.call_at_ms(deadline_ms, lambda: None if fut.done() else fut.set_result(None))
        try:
            await fut
        finally:
            handle.cancel()
            self._cycle_wake = None
            self._cycle_wanted = False

    def _wake_cycle(self) -> None:
        """Run a claim cycle now (or right after the running one)."""
        self._cycle_wanted = True
        if self._cycle_wake is not None and not self._cycle_wake.done():
            self._cycle_wake.set_result(None)

    def _liveness_lost(self) -> None:
        """This node lost its liveness lock: it stops sending at once, but keeps its jobs in
        memory (their instants, their fires recorded ahead, their queued advances). Once it
        holds its lock again, its first claim cycle renews the leases: the jobs still leased
        to it carry on, their instants due meanwhile sent late (a database restart or a blip
        of the lock session loses nothing: nobody could take them while the lock was not
        theirs to take); the others were taken over (and settled) by another node meanwhile
        and are dropped. The lease guard still drops jobs whose leases run out meanwhile."""
        if len(self._held):
            log.warning("liveness lost: sending nothing for the %d held jobs until the lock is back "
                        "and their leases are confirmed", len(self._held))
        self._fence.suspended = True
        self._losses += 1

    async def run_cycle(self) -> None:
        """One claim cycle: write pending advances, claim/renew/re-read, plan."""
        now = self._clock.now_ms()
        if self._liveness is not None and not self._liveness.may_send():
            return  # no liveness lock: neither renew nor claim (see _liveness_lost)
        resuming, losses = self._fence.suspended, self._losses
        rows = await self._claim_cycle(now, resuming=resuming)
        # Lost again during the cycle (even if back already): its renewal proves nothing.
        if resuming and losses == self._losses and (self._liveness is None or self._liveness.may_send()):
            self._fence.suspended = False
            log.info("liveness back and leases confirmed: %d held jobs carry on", len(self._held))
        if self._readahead.enabled:
            async with self._ctx.db_lock:
                await self._ctx.withdrawals.cancel()
            # Shielded: a stop waits for it, so no recorded row is left without its owner.
            await asyncio.shield(self._readahead.start(now))
        self.stats.cycles += 1
        self._timer.adapt_coalescing(now)
        log.debug("cycle at %s: %d rows claimed in %d ms, %d held", iso_ms(now), rows,
                  self._clock.now_ms() - now, len(self._held))
        async with self.cycle_done:
            self.cycle_done.notify_all()

    async def _claim_cycle(self, now: int, *, resuming: bool) -> int:
        """Write pending advances, renew, claim, settle (the lease keeper), then adopt and shed
        the excess (the held stage). Returns the number of rows new or changed. ``resuming``:
        the first cycle after this node's liveness came back; the held jobs whose leases are
        no longer its own (taken over meanwhile) are dropped before anything is claimed."""
        async with self._ctx.db_lock:
            await self._advance.flush_locked()
            # Rows of fires this node will not send go before anything is (re)adopted: a job
            # dropped and adopted again (its lock session lost and regained) must find its
            # unsent instants free, not recorded (a fire at them would be a duplicate, unsent).
            try:
                await self._ctx.withdrawals.cancel()
            except Exception:
                # Kept for the next try; renewal must not wait for it. A row left over only
                # counts as perhaps sent when its job is settled (an instant lost, none doubled).
                log.exception("withdrawing fires recorded ahead failed; renewing anyway")
            renewed = await self._leases.renew_locked(now, self._held.rows())
            self._fence.renewed(now)
            if resuming:
                self._adopter.drop_taken_over(set(renewed.ids))
            claim = await self._leases.claim_locked(now, renewed, self._held)
        if self._liveness is not None and not self._liveness.may_send():
            return len(claim.rows)  # liveness lost meanwhile: adopt nothing
        if self._ctx.timing is not None and claim.rows:
            await self._ctx.timing.prepare(claim.rows)
        self._advance.take(self._adopter.apply(claim, now))
        return len(claim.rows)
