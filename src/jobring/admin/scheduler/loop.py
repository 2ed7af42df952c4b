"""The admin's scheduling loop: claim due jobs ahead, fire each at its planned instant.

How it works (and the rules it keeps):

* **Claim ahead.** Every cycle (1 s) the loop claims, with a lease, the running jobs whose
  ``trigger_next_time`` falls within the pre-read window (5 s). Several admin nodes claim
  at once (``SKIP LOCKED`` on PostgreSQL/MariaDB); a job is held by one node at a time.
* **Fire on time.** Each held job's next planned instant sits in a timer heap keyed in
  epoch milliseconds, with one sleeper on the earliest deadline. With a preparing fire port
  (:class:`FirePreparer`, the trigger service's) every cycle records the log rows of all
  fires planned in the next ``prepare_ahead_ms`` (2.5 s) in a few inserts, so at the
  instant only the /run calls are left; their trigger results are written in batches
  afterwards (every 100 ms). A fire that could not be prepared is recorded at its instant.
* **Nothing runs ahead of what was sent.** The database's ``trigger_next_time`` is advanced
  only after the fire was sent (guarded by the lease owner), so it always names the
  earliest instant not yet dispatched. A node that dies leaves an expired lease; the next
  claimant finds that instant in the past and applies the misfire rule (see
  :mod:`jobring.core.planning`). The run log's unique key on (job id, planned instant)
  drops a fire that is already recorded, so no instant is sent twice.
* **Send fence.** A node sends no fire planned beyond its committed send fence, which it
  keeps ``fence_ahead_ms`` (1 s) ahead of now in its node row (raised every 250 ms; never
  beyond what its leases allow; a fire due beyond it waits). A clean stop, a shed job or a
  stopped/edited job withdraws its rows recorded ahead first; a node that lost a job's
  lease leaves them to the job's new holder.
* **Takeover.** Before adopting a job it did not hold, a node settles the fires other nodes
  recorded for it from its stored next time on (``LeaseStore.settle_takeover``): those not
  confirmed and planned beyond their node's fence were never sent and are withdrawn, so
  the misfire rule applies to them; the others were sent (their advance was not written
  yet) or may have been sent just before the node died (results are written up to 100 ms
  after the /run call). Those are not sent again: the job resumes after the latest of them
  (stored at once), and an unconfirmed one waits for its callback or the lost-run monitor.
* **Dead nodes at once.** With a liveness port (:mod:`jobring.admin.scheduler.liveness`,
  database session locks on PostgreSQL/MariaDB) a node sends, renews and claims only while
  its liveness is proven, drops every held job when it is lost, raises its fence through it,
  and on news of a dead node runs a claim cycle at once that takes that node's jobs whatever
  their leases' end; the takeover is then settled as above.
* **Clock skew.** A node sends only while ``now < lease_until - lease_guard_ms`` (1 s) by its
  own clock, and another node claims only after ``lease_until`` by its own clock: no
  instant is sent by two nodes as long as the nodes' clocks differ by less than 1 s.
* **Leases.** Every cycle renews all of this node's leases in one statement and reads back
  a few narrow columns of each held job: only jobs whose row changed (or that the loop does
  not know) are read in full (``JobRepository.renew_held``). Then, below its fair share,
  the node claims due jobs whose leases are free or expired. A fire is only sent while its
  lease is valid; a job whose lease is no longer this node's is dropped from memory. Jobs
  whose next instant leaves the window are released.
* **Sharing.** Every node announces itself each cycle; a node holding more than its
  fair share (jobs due in the window / live nodes, plus 10 %) hands the excess over: each
  such job fires its planned instant, and once that fire is recorded and advanced it is
  released, so the other nodes have a whole period to claim it before its next instant.
  (A late fire plans from now and does not catch up: a job picked up more than a period
  late would lose an instant; such skips are logged as warnings.)
* **Edits and stops.** Held jobs' rows are checked every cycle. A stopped job (trigger_status
  0), or one whose schedule fields, update time or ``trigger_next_time`` changed behind
  the loop's back, is dropped and, if still running, re-planned from the database. So a
  stop or an edit takes effect within one cycle (1 s); fires already due in that second
  may still go out.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
from collections import deque
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from jobring.admin.scheduler.ports import (
    FireBatch,
    FirePreparer,
    LeaseStore,
    Liveness,
    PlannedFire,
    Schedule,
    ScheduleFactory,
)
from jobring.admin.scheduler.timers import TimerHandle, Timers
from jobring.admin.scheduler.trigger import PreparedBatch
from jobring.admin.store.records import JobInfo
from jobring.core.buckets import Buckets
from jobring.core.enums import ScheduleType, TriggerType
from jobring.core.planning import MISFIRE_THRESHOLD_MS, FireDecision, decide_fire
from jobring.core.timefmt import iso_ms

log = logging.getLogger(__name__)


class _Unprepared:
    """The preparation of a fire failed: it is recorded and sent at its instant instead."""


_UNPREPARED = _Unprepared()


@dataclass(frozen=True, slots=True)
class LoopConfig:
    pre_read_ms: int = 5_000
    cycle_ms: int = 1_000
    # A dead node's jobs are claimable this long after its last renewal; renewals come every
    # cycle, so an overloaded node (slow cycles) keeps its jobs for a while before losing them.
    lease_ms: int = 10_000
    # A fire is not sent when the lease ends within this margin (clock skew between nodes).
    lease_guard_ms: int = 1_000
    # With a preparing fire port: fires planned up to this far ahead are recorded each cycle
    # (more than one cycle, so every instant is prepared by the cycle before it).
    prepare_ahead_ms: int = 2_500
    prepare_slice: int = 100  # fires recorded per insert
    # trigger_next_time updates of fires sent are written at most this often.
    advance_flush_ms: int = 200
    claim_limit: int = 20_000
    # Fire batches in flight at once. When the limit is reached, fires coming due wait and
    # go out together in the next batch: fewer, larger transactions under load.
    max_inflight_batches: int = 64
    # Under load, fires within a few ms of each other go out in one batch (one log insert
    # for all): the wait grows with the fire rate, 1 ms per 100 fires/s, up to this cap.
    max_coalesce_ms: int = 2
    misfire_threshold_ms: int = MISFIRE_THRESHOLD_MS
    stop_timeout_s: float = 10.0
    # The send fence (the latest planned instant this node may send) is kept this far ahead
    # of now, raised this often. A fire beyond the committed fence waits for it.
    fence_ahead_ms: int = 1_000
    fence_every_ms: int = 250


@dataclass(slots=True)
class LoopStats:
    fired: int = 0
    misfired: int = 0
    skipped: int = 0
    batches: int = 0
    batch_failures: int = 0
    cycles: int = 0
    held: int = 0
    # Lateness of the fire_batch call against the planned instant, ms (on-time fires only;
    # the most recent ones).
    lateness_ms: deque[int] = field(default_factory=lambda: deque(maxlen=10_000))
    # The same lateness as histogram buckets since start (exported as a metric).
    lateness: Buckets = field(default_factory=Buckets)


_SCHEDULE_FIELDS = ("schedule_type", "schedule_conf", "schedule_timezone", "misfire_strategy", "update_time")


@dataclass(slots=True, eq=False)
class _Held:
    """A job this node holds: its planned instant and what the database says."""

    job: JobInfo
    schedule: Schedule
    planned_ms: int
    db_next_ms: int
    lease_until_ms: int
    generation: int
    leaving: bool = False  # next instant is past the window: release after the advance
    # Instants whose log rows are (being) recorded ahead, and the last instant looked at.
    prepared: dict[int, asyncio.Future[PreparedBatch | None | _Unprepared]] = field(default_factory=dict)
    prepared_to: int = 0


_HeapEntry = tuple[int, int, _Held, int]  # (fire at ms, seq, held, generation)


class ScheduleLoop:
    """Claims due jobs and fires them on time; see the module docstring for the rules."""

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
    ) -> None:
        self._store = store
        # Session-lock liveness (PostgreSQL/MariaDB): fast takeover of dead nodes' jobs.
        self._liveness = liveness
        self._cycle_wake: asyncio.Future[None] | None = None
        self._cycle_wanted = False
        self._fire_batch = fire_batch
        self._preparer = fire_batch if isinstance(fire_batch, FirePreparer) else None
        self._to_cancel: list[PreparedBatch] = []
        self._preparing: asyncio.Task[None] | None = None
        self._timers = timers
        self._clock = timers.clock
        self._schedule_factory = schedule_factory
        self._admin_tz = admin_timezone
        self.config = config or LoopConfig()
        self.stats = LoopStats()
        self._held: dict[int, _Held] = {}
        self._releasing: set[int] = set()
        self._fence_ms = 0  # committed send fence
        self._renewed_at: int | None = None  # when the held leases were last renewed
        self._fence_raised: asyncio.Future[None] | None = None
        self._heap: list[_HeapEntry] = []
        self._seq = itertools.count()
        self._generation = itertools.count(1)
        self._pending_advance: dict[int, tuple[int, int, _Held]] = {}
        self._pending_end: list[int] = []
        self._db_lock = asyncio.Lock()
        self._advance_wanted = asyncio.Event()
        self._inflight: set[asyncio.Task[None]] = set()
        self._batches_inflight = 0
        self._batch_slot: asyncio.Future[None] | None = None
        self._coalesce_ms = 0
        self._rate_mark: tuple[int, int] | None = None  # (ms, fired) at the previous cycle
        self._tasks: list[asyncio.Task[None]] = []
        self._wake: asyncio.Future[None] | None = None
        self._wake_deadline: int | None = None
        self._stopping = False
        self.cycle_done = asyncio.Condition()

    # ----------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        """Start claiming and firing (tasks: claim cycle, timer, advance writer, send fence)."""
        if self._liveness is not None:
            self._liveness.attach(self._liveness_lost, self._wake_cycle)
        self._tasks = [
            asyncio.create_task(self._run_cycles(), name="jobring-schedule-cycle"),
            asyncio.create_task(self._run_timer(), name="jobring-schedule-timer"),
            asyncio.create_task(self._run_writer(), name="jobring-schedule-writer"),
            asyncio.create_task(self._run_fence(), name="jobring-schedule-fence"),
        ]

    async def stop(self) -> None:
        """Stop claiming and firing, let in-flight fires finish, record them, release leases."""
        self._stopping = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        if self._preparing is not None:
            await asyncio.gather(self._preparing, return_exceptions=True)
        if self._inflight:
            _, late = await asyncio.wait(set(self._inflight), timeout=self.config.stop_timeout_s)
            for task in late:
                log.warning("fire batch still running at stop; cancelling it")
                task.cancel()
        async with self._db_lock:
            await self._flush_locked()
            held = list(self._held)
            for job_id in held:
                self._drop(job_id)
            await self._cancel_prepared()
            if held:
                await self._store.release(held)
            now = self._clock.now_ms()
            await self._store.heartbeat(now, 0, now)
        self._held.clear()
        self._heap.clear()
        self.stats.held = 0

    @property
    def held_job_ids(self) -> list[int]:
        return list(self._held)

    @property
    def running(self) -> bool:
        """True while the loop's tasks (claim cycle, timer, writer, fence) all run."""
        return bool(self._tasks) and not any(t.done() for t in self._tasks)

    @property
    def renewed_at_ms(self) -> int | None:
        """When this node last renewed its leases (epoch ms), None before the first cycle."""
        return self._renewed_at

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
        """This node lost its liveness lock: whoever takes its jobs settles their fires, so
        it stops sending at once and forgets them (it claims again once it holds its lock)."""
        if self._held:
            log.warning("liveness lost: dropping the %d held jobs", len(self._held))
        for job_id in list(self._held):
            self._drop(job_id)
        self.stats.held = 0

    def _may_send(self) -> bool:
        return self._liveness is None or self._liveness.may_send()

    async def run_cycle(self) -> None:
        """One claim cycle: write pending advances, claim/renew/re-read, plan."""
        now = self._clock.now_ms()
        window_end = now + self.config.pre_read_ms
        lease_ms = self.config.lease_ms
        if not self._may_send():
            return  # no liveness lock: neither renew nor claim (see _liveness_lost)
        async with self._db_lock:
            await self._flush_locked()
            # Renewal first: whatever else fails this cycle, the held leases stay valid.
            held = await self._store.renew(now, lease_ms, {i: h.job for i, h in self._held.items()})
            self._renewed_at = now
            rows = list(held.changed)
            ids = set(held.ids)
            if self._liveness is not None:
                # Jobs of nodes found dead, whatever their leases' end (before the heartbeat,
                # which no longer counts those nodes).
                taken = await self._liveness.claim_dead(now, window_end, lease_ms, self.config.claim_limit)
                rows += taken
                ids.update(j.id for j in taken)
            nodes, due = await self._store.heartbeat(now, now + lease_ms, window_end)
            allowed = self._fair_share(nodes, due)
            room = min(self.config.claim_limit, allowed - len(ids))
            if room > 0:
                # Over the fair share a node only keeps what it holds; the rest is the others'.
                claimed = await self._store.claim(now, window_end, lease_ms, room)
                if len(claimed) == self.config.claim_limit:
                    log.warning("claim returned the limit (%d rows); raise claim_limit", len(claimed))
                rows += claimed
                ids.update(j.id for j in claimed)
            # Every job about to be adopted is settled first: jobs claimed now, and jobs this
            # node holds but does not know (e.g. claimed by a cycle that failed after its
            # claim committed). Settling again is harmless.
            arriving = [r for r in rows if r.id not in self._held and r.id not in self._releasing]
            maybe_sent = await self._store.settle_takeover(arriving) if arriving else {}
        if not self._may_send():
            return  # liveness lost meanwhile: adopt nothing
        self._apply_claim(rows, ids, now, window_end, maybe_sent)
        self._shed_excess(allowed)
        if self._preparer is not None:
            async with self._db_lock:
                await self._cancel_prepared()
            self._preparing = asyncio.get_running_loop().create_task(self._prepare_ahead(self._preparer, now))
            # Shielded: a stop waits for it, so no recorded row is left without its owner.
            await asyncio.shield(self._preparing)
        self.stats.cycles += 1
        self._adapt_coalescing(now)
        log.debug("cycle at %s: %d rows claimed in %d ms, %d held", iso_ms(now), len(rows),
                  self._clock.now_ms() - now, len(self._held))
        async with self.cycle_done:
            self.cycle_done.notify_all()

    def _apply_claim(
        self, rows: Sequence[JobInfo], held_ids: set[int], now: int, window_end: int,
        maybe_sent: Mapping[int, int],
    ) -> None:
        """Apply a claim: ``rows`` are the new or changed rows among ``held_ids``, every job
        whose lease this node now holds; ``maybe_sent`` the instants a previous holder may
        have sent last (per job taken over)."""
        lease_until = now + self.config.lease_ms
        to_release: list[int] = []
        for row in rows:
            if row.id in self._releasing:
                continue  # dropped by this node; its release is on the way
            held = self._held.get(row.id)
            if row.trigger_status != 1:
                self._drop(row.id)
                to_release.append(row.id)
            elif held is not None and (held.leaving or not self._changed(held, row)):
                if not held.leaving:
                    held.job = row
            else:
                if held is not None:
                    log.info("job %s changed while held; re-planning from the database", row.id)
                    self._drop(row.id)
                if row.trigger_next_time > window_end:
                    to_release.append(row.id)  # (edited to be) due later: for a later claim
                else:
                    self._adopt(row, now, lease_until, maybe_sent.get(row.id))
        gone, far = self._renew_in_memory(held_ids, lease_until, window_end)
        if gone:
            # The lease is no longer ours (the job was deleted, or taken over after this
            # node failed to renew in time).
            log.info("%d held jobs are no longer leased to this node; dropping them: %s",
                     len(gone), gone[:20])
        for job_id in gone + far:
            self._drop(job_id)
        to_release += far
        if to_release:
            self._schedule_release(to_release)
        self.stats.held = len(self._held)

    def _renew_in_memory(
        self, held_ids: set[int], lease_until: int, window_end: int
    ) -> tuple[list[int], list[int]]:
        """Extend the held jobs' leases in memory; return the jobs no longer leased to this
        node, and those whose next instant is beyond the window with the database naming it
        (e.g. resumed far ahead after a takeover): those are for a later claim."""
        gone: list[int] = []
        far: list[int] = []
        for job_id, held in self._held.items():
            if job_id not in held_ids:
                gone.append(job_id)
                continue
            held.lease_until_ms = lease_until
            if held.planned_ms > window_end and held.db_next_ms == held.planned_ms and not held.leaving:
                far.append(job_id)
        return gone, far

    def _adapt_coalescing(self, now: int) -> None:
        if self._rate_mark is not None and now > self._rate_mark[0]:
            rate = (self.stats.fired - self._rate_mark[1]) * 1000 // (now - self._rate_mark[0])
            self._coalesce_ms = min(self.config.max_coalesce_ms, rate // 100)
        self._rate_mark = (now, self.stats.fired)

    @staticmethod
    def _fair_share(nodes: int, due: int) -> int:
        """How many jobs one node may hold: all of them alone, else its share plus 10 %."""
        if nodes <= 1:
            return 1 << 62
        share = -(-due // nodes)
        return share + max(1, share // 10)

    def _shed_excess(self, allowed: int) -> None:
        staying = [h for h in self._held.values() if not h.leaving]
        excess = len(staying) - allowed
        if excess <= 0:
            return
        # Give away the jobs whose next fire is furthest off. Each fires its planned instant
        # here first and is released once that fire is recorded and trigger_next_time names
        # the instant after it: the next holder then has a whole period to claim it. Released
        # before its fire (or while an earlier fire is still being recorded), a job picked up
        # more than a period late would be planned from now, skipping an instant.
        candidates = sorted(staying, key=lambda h: h.planned_ms, reverse=True)[:excess]
        for held in candidates:
            held.leaving = True
        log.info("holding more than a fair share (%d); handing over %d jobs after their next fire",
                 allowed, len(candidates))

    @staticmethod
    def _changed(held: _Held, row: JobInfo) -> bool:
        if row.trigger_next_time != held.db_next_ms:
            return True
        return any(getattr(row, name) != getattr(held.job, name) for name in _SCHEDULE_FIELDS)

    def _adopt(self, row: JobInfo, now: int, lease_until: int, resume_after: int | None = None) -> None:
        tz = row.schedule_timezone or self._admin_tz
        try:
            if row.schedule_type == ScheduleType.NONE:
                raise ValueError("schedule type NONE never fires by itself")
            schedule = self._schedule_factory(row.schedule_type, row.schedule_conf, tz)
        except ValueError as exc:
            log.error("job %s cannot be scheduled (%s); stopping it", row.id, exc)
            self._pending_end.append(row.id)
            self._advance_wanted.set()
            return
        planned = row.trigger_next_time
        if resume_after is not None and resume_after >= planned:
            # The previous holder may have sent up to that instant: carry on after it.
            following = schedule.next_fire_ms(resume_after)
            log.info("job %s resumes after %s (perhaps sent by the node that held it)", row.id,
                     iso_ms(resume_after), extra={"job_id": row.id})
            if following is None:
                self._pending_end.append(row.id)
                self._advance_wanted.set()
                return
            planned = following
        held = _Held(row, schedule, planned, row.trigger_next_time, lease_until, next(self._generation))
        self._held[row.id] = held
        if planned != row.trigger_next_time:
            # Store where the job resumes (nothing fires at the instants passed over).
            assert resume_after is not None
            self._pending_advance[row.id] = (resume_after, planned, held)
            self._advance_wanted.set()
        self._push(held, max(planned, now))

    def _drop(self, job_id: int) -> None:
        held = self._held.pop(job_id, None)
        if held is not None:
            held.generation = 0  # invalidates its heap entries
            self._pending_advance.pop(job_id, None)
            for fut in held.prepared.values():
                self._withdraw(fut)
            held.prepared.clear()

    def _withdraw(self, fut: asyncio.Future[PreparedBatch | None | _Unprepared]) -> None:
        """The prepared fire will not be sent: cancel it (once its preparation is done)."""
        if fut.done():
            self._cancel_later(fut)
        else:
            fut.add_done_callback(self._cancel_later)

    def _cancel_later(self, fut: asyncio.Future[PreparedBatch | None | _Unprepared]) -> None:
        outcome = None if fut.cancelled() else fut.result()
        if isinstance(outcome, PreparedBatch):
            self._to_cancel.append(outcome)

    async def _cancel_prepared(self) -> None:
        """Withdraw the prepared fires of dropped jobs (before their leases are released, so
        the next holder can record those instants itself)."""
        if not self._to_cancel or self._preparer is None:
            return
        batches, self._to_cancel = self._to_cancel, []
        try:
            await self._preparer.cancel(batches)
        except BaseException:
            self._to_cancel.extend(batches)
            raise

    def _schedule_release(self, job_ids: list[int]) -> None:
        # Marked at once: until the release commits, a renewal may still report these jobs
        # as held, and they must not be adopted again from it.
        self._releasing.update(job_ids)
        self._spawn(self._release(job_ids), "release")

    async def _release(self, job_ids: list[int]) -> None:
        try:
            # Under the lock: a release never lands between a renewal and its application.
            async with self._db_lock:
                await self._cancel_prepared()
                await self._store.release(job_ids)
        finally:
            self._releasing.difference_update(job_ids)

    # ----------------------------------------------------------------- preparing ahead
    async def _prepare_ahead(self, preparer: FirePreparer, now: int) -> None:
        """Record the log rows of every held job's fires planned in (now, now + prepare_ahead]
        in one go, so at the instant only the /run call is left."""
        limit = now + self.config.prepare_ahead_ms
        fires: list[PlannedFire] = []
        futures: list[asyncio.Future[PreparedBatch | None | _Unprepared]] = []
        loop = asyncio.get_running_loop()
        for held in self._held.values():
            if held.leaving:
                continue
            instant: int | None = held.planned_ms
            if held.prepared_to >= held.planned_ms:
                instant = held.schedule.next_fire_ms(held.prepared_to)
            while instant is not None and instant <= limit:
                held.prepared_to = instant
                if instant > now and instant not in held.prepared:
                    fires.append(PlannedFire(held.job, TriggerType.CRON, instant))
                    held.prepared[instant] = fut = loop.create_future()
                    futures.append(fut)
                instant = held.schedule.next_fire_ms(instant)
        # In slices: building and binding a thousand rows at once would hold the event loop
        # (and the fires due meanwhile) for tens of milliseconds.
        step = self.config.prepare_slice
        for start in range(0, len(fires), step):
            part = fires[start:start + step]
            outcomes: Sequence[PreparedBatch | None | _Unprepared]
            try:
                outcomes = await preparer.prepare(part)
            except Exception:
                log.exception("recording %d fires ahead failed; recording them at their instants", len(part))
                outcomes = [_UNPREPARED] * len(part)
            for fut, outcome in zip(futures[start:start + step], outcomes, strict=True):
                fut.set_result(outcome)

    # ----------------------------------------------------------------- timer heap
    def _push(self, held: _Held, fire_at_ms: int) -> None:
        heapq.heappush(self._heap, (fire_at_ms, next(self._seq), held, held.generation))
        if self._wake is not None and (self._wake_deadline is None or fire_at_ms < self._wake_deadline):
            self._wake_now()

    def _wake_now(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    async def _sleep_until(self, deadline_ms: int | None) -> None:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()

        def _ring() -> None:
            if not fut.done():
                fut.set_result(None)

        handle: TimerHandle | None = None
        if deadline_ms is not None:
            handle = self._timers.call_at_ms(deadline_ms, _ring)
        try:
            await fut
        finally:
            if handle is not None:
                handle.cancel()
        return None

    async def _run_timer(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            heap = self._heap
            while heap and heap[0][2].generation != heap[0][3]:
                heapq.heappop(heap)
            now = self._clock.now_ms()
            if heap and heap[0][0] + self._coalesce_ms <= now:
                if heap[0][0] > self._fence_ms or not self._may_send():
                    await self._wait_for_fence(now)
                    continue
                if self._batches_inflight >= self.config.max_inflight_batches:
                    self._batch_slot = loop.create_future()
                    await self._batch_slot
                    continue
                self._fire_due(now)
                continue
            self._wake = loop.create_future()
            self._wake_deadline = heap[0][0] + self._coalesce_ms if heap else None
            handle = (
                self._timers.call_at_ms(self._wake_deadline, self._wake_now)
                if self._wake_deadline is not None else None
            )
            try:
                await self._wake
            finally:
                self._wake = None
                if handle is not None:
                    handle.cancel()

    async def _wait_for_fence(self, now: int) -> None:
        """A fire is due beyond the committed send fence: wait until the fence is raised
        (checking meanwhile for leases that ran out, as a fire would)."""
        if not self._may_send():
            log.warning("liveness not proven recently; fires wait for it")
        elif self._fence_ms:  # (not the first fence, at start)
            log.warning("send fence %s not raised in time; fires wait for it", iso_ms(self._fence_ms))
        for held in list(self._held.values()):
            self._drop_if_lease_ran_out(held, now)
        fut = self._fence_raised = asyncio.get_running_loop().create_future()
        handle = self._timers.call_at_ms(now + self.config.fence_every_ms,
                                         lambda: None if fut.done() else fut.set_result(None))
        try:
            await fut
        finally:
            handle.cancel()

    def _drop_if_lease_ran_out(self, held: _Held, now: int) -> bool:
        """A fire goes out only while the lease lasts, minus the clock-skew guard."""
        if now < held.lease_until_ms - self.config.lease_guard_ms:
            return False
        log.warning("lease on job %s ran out before its fire; dropping it", held.job.id)
        self._drop(held.job.id)
        return True

    def _fire_due(self, now: int) -> None:
        heap = self._heap
        fires: list[PlannedFire] = []
        prepared: list[asyncio.Future[PreparedBatch | None | _Unprepared] | None] = []
        outcomes: list[tuple[_Held, FireDecision]] = []
        horizon = now + self.config.pre_read_ms
        while heap and heap[0][0] <= min(now, self._fence_ms):
            _, _, held, generation = heapq.heappop(heap)
            if held.generation != generation:
                continue
            if self._drop_if_lease_ran_out(held, now):
                continue
            decision = decide_fire(held.planned_ms, now, held.job.misfire_strategy,
                                   held.schedule.next_fire_ms, self.config.misfire_threshold_ms)
            if decision.trigger_type is TriggerType.CRON:
                self.stats.lateness_ms.append(now - decision.planned_ms)
                self.stats.lateness.observe(now - decision.planned_ms)
                if now - decision.planned_ms >= 1_000:
                    self._log_passed_over(held, decision, now)
            elif decision.planned_ms > 0:
                if decision.fires:
                    self.stats.misfired += 1
                else:
                    self.stats.skipped += 1
                log.info("job %s missed its fire at %s by %d ms: %s", held.job.id,
                         iso_ms(decision.planned_ms), now - decision.planned_ms,
                         "fired once now" if decision.fires else "skipped", extra={"job_id": held.job.id})
            ready = held.prepared.pop(decision.planned_ms, None)
            if held.prepared:
                # Instants skipped by a late fire (stepping to the first one after now).
                for instant in [t for t in held.prepared if decision.next_ms is None or t < decision.next_ms]:
                    self._withdraw(held.prepared.pop(instant))
            self._continue(held, decision, horizon)
            if decision.fires:
                assert decision.trigger_type is not None
                fires.append(PlannedFire(held.job, decision.trigger_type, decision.planned_ms))
                prepared.append(ready)
                outcomes.append((held, decision))
            else:
                if ready is not None:
                    self._withdraw(ready)
                self._queue_advance(held, decision)
        if fires:
            self.stats.fired += len(fires)
            self.stats.batches += 1
            self._batches_inflight += 1
            self._spawn(self._dispatch(fires, prepared, outcomes), "fire batch")

    @staticmethod
    def _log_passed_over(held: _Held, decision: FireDecision, now: int) -> None:
        # A late fire plans from now and does not catch up, so instants between are lost. Only
        # a fire a second or more late can pass one over (schedules have 1 s resolution).
        following = held.schedule.next_fire_ms(decision.planned_ms)
        if following is not None and decision.next_ms is not None and following < decision.next_ms:
            log.warning("job %s fired %d ms late (instant %s); its instants from %s until %s are "
                        "skipped", held.job.id, now - decision.planned_ms, iso_ms(decision.planned_ms),
                        iso_ms(following), iso_ms(decision.next_ms), extra={"job_id": held.job.id})

    def _continue(self, held: _Held, decision: FireDecision, horizon: int) -> None:
        nxt = decision.next_ms
        if nxt is not None and nxt <= horizon and not held.leaving:
            held.planned_ms = nxt
            self._push(held, nxt)
        else:
            held.leaving = True

    async def _dispatch(
        self,
        fires: Sequence[PlannedFire],
        prepared: Sequence[asyncio.Future[PreparedBatch | None | _Unprepared] | None],
        outcomes: Sequence[tuple[_Held, FireDecision]],
    ) -> None:
        try:
            await self._send(fires, prepared)
        except Exception:
            # Not recorded: the database still names these instants. Forget the in-memory
            # plan; the next cycle re-reads the jobs (still leased to us) and re-plans them.
            self.stats.batch_failures += 1
            log.exception("fire batch of %d failed; re-planning its jobs from the database", len(fires))
            for held, _ in outcomes:
                if self._held.get(held.job.id) is held:
                    self._drop(held.job.id)
            return
        finally:
            self._batches_inflight -= 1
            if self._batch_slot is not None and not self._batch_slot.done():
                self._batch_slot.set_result(None)
        for held, decision in outcomes:
            self._queue_advance(held, decision)

    async def _send(
        self,
        fires: Sequence[PlannedFire],
        prepared: Sequence[asyncio.Future[PreparedBatch | None | _Unprepared] | None],
    ) -> None:
        ready: list[PreparedBatch] = []
        unprepared: list[PlannedFire] = []
        for fire, fut in zip(fires, prepared, strict=True):
            outcome = _UNPREPARED if fut is None else (fut.result() if fut.done() else await fut)
            if isinstance(outcome, PreparedBatch):
                ready.append(outcome)
            elif outcome is _UNPREPARED:
                unprepared.append(fire)
            # None: the instant was recorded by another node (or earlier); not sent again.
        if ready:
            assert self._preparer is not None
            if unprepared:
                await asyncio.gather(self._preparer.dispatch(ready), self._fire_batch(unprepared))
                return
            await self._preparer.dispatch(ready)
        elif unprepared:
            await self._fire_batch(unprepared)

    # ----------------------------------------------------------------- send fence
    async def _run_fence(self) -> None:
        """Keep the committed send fence ``fence_ahead_ms`` ahead of now. A node that takes
        over this node's jobs knows that fires planned after the fence were never sent."""
        while True:
            fence = self._clock.now_ms() + self.config.fence_ahead_ms
            if self._renewed_at is not None:
                # Never beyond what the leases allow: a fire under the fence must be sendable.
                fence = min(fence, self._renewed_at + self.config.lease_ms - self.config.lease_guard_ms)
            try:
                if self._liveness is None:
                    await self._store.raise_fence(fence)
                elif self._may_send():
                    await self._liveness.raise_fence(fence)
                else:
                    fence = self._fence_ms  # no liveness lock: the fence cannot rise
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("raising the send fence failed; retrying")
            else:
                self._fence_ms = max(self._fence_ms, fence)
                if self._fence_raised is not None and not self._fence_raised.done():
                    self._fence_raised.set_result(None)
            await self._sleep_until(self._clock.now_ms() + self.config.fence_every_ms)

    # ----------------------------------------------------------------- advancing
    def _queue_advance(self, held: _Held, decision: FireDecision) -> None:
        if self._held.get(held.job.id) is not held:
            return
        if decision.next_ms is None:
            self._drop(held.job.id)
            self._pending_end.append(held.job.id)
        else:
            last = decision.planned_ms if decision.fires else held.job.trigger_last_time
            previous = self._pending_advance.get(held.job.id)
            if previous is None or previous[1] < decision.next_ms:
                self._pending_advance[held.job.id] = (last, decision.next_ms, held)
        self._advance_wanted.set()

    async def _run_writer(self) -> None:
        while True:
            await self._advance_wanted.wait()
            # Gather a flush interval's worth of advances into one update (the claim cycle
            # also flushes first): the stored next time only lags, never runs ahead.
            await self._sleep_until(self._clock.now_ms() + self.config.advance_flush_ms)
            try:
                async with self._db_lock:
                    await self._flush_locked()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("writing trigger_next_time failed; retrying")
                await self._sleep_until(self._clock.now_ms() + 200)

    async def _flush_locked(self) -> None:
        self._advance_wanted.clear()
        pending, self._pending_advance = self._pending_advance, {}
        ended, self._pending_end = self._pending_end, []
        try:
            if pending:
                updates = [(job_id, last, nxt) for job_id, (last, nxt, _) in pending.items()]
                applied = await self._store.advance(updates)
                if applied < len(updates):
                    # Some leases moved to another node; the next claim no longer returns
                    # those jobs, which drops them from memory.
                    log.warning("%d of %d next-time updates found their lease gone",
                                len(updates) - applied, len(updates))
                self._after_advance(pending)
            if ended:
                await self._store.end_schedule(ended)
        except BaseException:
            # Put back what was not written (newer entries win) so nothing is forgotten.
            for job_id, entry in pending.items():
                current = self._pending_advance.get(job_id)
                if current is None or current[1] < entry[1]:
                    self._pending_advance[job_id] = entry
            self._pending_end.extend(ended)
            raise

    def _after_advance(self, pending: dict[int, tuple[int, int, _Held]]) -> None:
        leaving: list[int] = []
        for job_id, (last, nxt, held) in pending.items():
            if self._held.get(job_id) is not held:
                continue
            held.db_next_ms = nxt
            # The row as the database now has it: the next renewal then sees it unchanged.
            held.job = replace(held.job, trigger_last_time=last, trigger_next_time=nxt)
            # (An advance of an earlier fire still names the planned instant: not yet.)
            if held.leaving and nxt > held.planned_ms:
                leaving.append(job_id)
        for job_id in leaving:
            self._drop(job_id)
        if leaving:
            self._schedule_release(leaving)
        self.stats.held = len(self._held)

    # ----------------------------------------------------------------- helpers
    def _spawn(self, work: Awaitable[None], what: str) -> None:
        async def runner() -> None:
            try:
                await work
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s failed", what)

        task = asyncio.get_running_loop().create_task(runner())
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)
