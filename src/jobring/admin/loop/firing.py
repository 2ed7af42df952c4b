"""Firing, the loop's last stage: the fires the timer finds due are sent in batches.

A fire goes out only under the committed send fence and while its lease lasts; its
advance is queued once it is recorded. The batches in flight are bounded
(``LoopConfig.max_inflight_batches``); fires coming due meanwhile go out together.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Sequence

from jobring.admin.loop.advance import AdvanceWriter
from jobring.admin.loop.ahead import Ahead
from jobring.admin.loop.catchup import catch_up_due
from jobring.admin.loop.context import LoopContext
from jobring.admin.loop.fence import SendFence
from jobring.admin.loop.held import Held, HeldSet
from jobring.admin.loop.ports import PlannedFire
from jobring.admin.loop.readahead import ReadAhead
from jobring.admin.loop.timed import TimedSchedule
from jobring.core.enums import TriggerType
from jobring.core.planning import FireDecision, decide_fire
from jobring.core.timefmt import iso_ms
from jobring.core.timing import SkippedFire

log = logging.getLogger(__name__)


class FireSender:
    """The fire batches: what the timer's :class:`~.timer.Sender` interface asks for."""

    def __init__(self, ctx: LoopContext, held: HeldSet, *, fence: SendFence, readahead: ReadAhead,
                 advance: AdvanceWriter) -> None:
        self._held = held
        self._timing = ctx.timing
        self._config = ctx.config
        self._stats = ctx.stats
        self._spawn = ctx.background.spawn
        self._withdraw = ctx.withdrawals.withdraw
        self._fence = fence
        self._readahead = readahead
        self._advance = advance
        self._batches_inflight = 0
        self._batch_slot: asyncio.Future[None] | None = None

    def blocked(self, due: int, now: int) -> Awaitable[None] | None:
        """A fire due beyond the committed fence (or without proven liveness) waits for the
        fence, a fire over the limit of batches in flight for a free slot."""
        if due > self._fence.committed_ms or not self._fence.may_send():
            return self._fence.wait(now, self._check_leases)
        if self._batches_inflight >= self._config.max_inflight_batches:
            self._batch_slot = asyncio.get_running_loop().create_future()
            return self._batch_slot
        return None

    def _check_leases(self, now: int) -> None:
        guard = self._config.lease_guard_ms
        for held in list(self._held.values()):
            self._held.lapsed(held, now, guard)

    def fire_due(self, now: int) -> None:
        """Send the fires due by ``now`` (and under the fence) in one batch."""
        fires: list[PlannedFire] = []
        prepared: list[Ahead | None] = []
        outcomes: list[tuple[Held, FireDecision]] = []
        config = self._config
        horizon = now + config.pre_read_ms
        until = min(now, self._fence.committed_ms)
        # A lease ending after this leaves the fire sendable (HeldSet.lapsed's rule).
        guard = config.lease_guard_ms
        lease_ok = now + guard
        threshold = config.misfire_threshold_ms
        stats = self._stats
        lateness_ms, lateness = stats.lateness_ms, stats.lateness
        pop_due = self._held.pop_due
        while (held := pop_due(until)) is not None:
            if (held.lease_until_ms <= lease_ok and self._held.lapsed(held, now, guard)) or (
                    now - held.planned_ms > threshold and self._catch_up(held, now, horizon, fires, prepared,
                                                                         outcomes)):
                continue
            decision = decide_fire(held.planned_ms, now, held.job.misfire_strategy,
                                   held.schedule.next_fire_ms, threshold)
            if decision.fires and type(held.schedule) is TimedSchedule:
                skip = held.schedule.skip_at(decision.planned_ms)
                if skip is not None:
                    self._skip(held, skip, decision, horizon)
                    continue
            if decision.trigger_type is TriggerType.CRON:
                late = now - decision.planned_ms
                lateness_ms.append(late)
                lateness.observe(late)
            elif decision.planned_ms > 0:
                if decision.fires:
                    stats.misfired += 1
                else:
                    stats.skipped += 1
                # The instants passed over with it are those beyond the threshold too.
                log.info("job %s missed its fire at %s by %d ms: %s; it resumes at %s", held.job.id,
                         iso_ms(decision.planned_ms), now - decision.planned_ms,
                         "fired once now" if decision.fires else "skipped",
                         "-" if decision.next_ms is None else iso_ms(decision.next_ms),
                         extra={"job_id": held.job.id})
            ready = held.prepared.pop(decision.planned_ms, None)
            if held.prepared:
                # Instants passed over by a misfire (beyond the threshold).
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
                self._advance.queue(held, decision)
        if fires:
            stats.fired += len(fires)
            stats.batches += 1
            self._batches_inflight += 1
            self._spawn(self._dispatch(fires, prepared, outcomes), "fire batch")

    def _catch_up(self, held: Held, now: int, horizon: int, fires: list[PlannedFire],
                  prepared: list[Ahead | None], outcomes: list[tuple[Held, FireDecision]]) -> bool:
        """A late fire of a job with a catch-up window: fire the missed instants it keeps, record
        the others as skipped (see :mod:`.catchup`). False: the job has no window."""
        schedule = held.schedule
        caught = catch_up_due(schedule, held.planned_ms, now) if type(schedule) is TimedSchedule else None
        if caught is None:
            return False
        for slot in held.prepared.values():
            self._withdraw(slot)
        held.prepared.clear()
        self._stats.skipped += len(caught.skipped)
        if caught.skipped and self._timing is not None:
            self._spawn(self._timing.record_skipped(held.job, caught.skipped), "record catch-up skips")
        log.info("job %s catches up %d missed instants (%d skipped); it resumes at %s", held.job.id,
                 len(caught.fires), len(caught.skipped),
                 "-" if caught.next_ms is None else iso_ms(caught.next_ms), extra={"job_id": held.job.id})
        last = FireDecision(held.planned_ms, None, caught.next_ms)
        self._continue(held, last, horizon)
        if not caught.fires:
            self._advance.queue(held, last)
        for instant in caught.fires:
            fires.append(PlannedFire(held.job, TriggerType.MISFIRE, instant))
            prepared.append(None)
            outcomes.append((held, FireDecision(instant, TriggerType.MISFIRE, caught.next_ms)))
        return True

    def _skip(self, held: Held, skip: SkippedFire, decision: FireDecision, horizon: int) -> None:
        """An instant a calendar excluded is due: record it as a ``skipped`` run, send nothing."""
        ready = held.prepared.pop(decision.planned_ms, None)
        if ready is not None:
            self._withdraw(ready)
        self._stats.calendar_skipped += 1
        if self._timing is not None:
            self._spawn(self._timing.record_skipped(held.job, [skip]), "record a calendar skip")
        self._continue(held, decision, horizon)
        self._advance.queue(held, FireDecision(decision.planned_ms, None, decision.next_ms))

    def _continue(self, held: Held, decision: FireDecision, horizon: int) -> None:
        nxt = decision.next_ms
        if nxt is not None and nxt <= horizon and not held.leaving:
            held.planned_ms = nxt
            self._held.push(held, nxt)
        else:
            held.leaving = True

    async def _dispatch(
        self, fires: Sequence[PlannedFire], prepared: Sequence[Ahead | None],
        outcomes: Sequence[tuple[Held, FireDecision]],
    ) -> None:
        try:
            await self._readahead.send(fires, prepared)
        except Exception:
            # Not recorded: the database still names these instants. Forget the in-memory
            # plan; the next cycle re-reads the jobs (still leased to us) and re-plans them.
            self._stats.batch_failures += 1
            log.exception("fire batch of %d failed; re-planning its jobs from the database", len(fires))
            for held, _ in outcomes:
                if self._held.holds(held):
                    self._held.drop(held.job.id)
            return
        finally:
            self._batches_inflight -= 1
            if self._batch_slot is not None and not self._batch_slot.done():
                self._batch_slot.set_result(None)
        for held, decision in outcomes:
            self._advance.queue(held, decision)
