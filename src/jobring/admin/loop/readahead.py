"""Recording fires ahead of their instants, so at the instant only the send is left.

Each cycle records the log rows of the held jobs' fires planned within
``LoopConfig.prepare_ahead_ms``; every such fire gets an :class:`Ahead` slot whose
:class:`Outcome` tells the sender what to do at the instant. Part of the sender stage:
fires that will not be sent go to the context's :class:`~.ahead.Withdrawals`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from jobring.admin.loop.ahead import Ahead, Outcome
from jobring.admin.loop.context import LoopContext
from jobring.admin.loop.held import Held, HeldSet
from jobring.admin.loop.ports import FireBatch, FirePreparer, PlannedFire
from jobring.admin.loop.timed import TimedSchedule
from jobring.core.enums import TriggerType
from jobring.core.timing import OverlapPolicy

log = logging.getLogger(__name__)


def _excluded(held: Held, instant: int) -> bool:
    """Never prepared: an instant a calendar excluded (recorded as skipped at its time), a fire
    of a job with an overlap policy (decided at its instant, see :mod:`.overlap`)."""
    schedule = held.schedule
    return type(schedule) is TimedSchedule and (
        schedule.skip_at(instant) is not None or schedule.rules.overlap is not OverlapPolicy.ALLOW_ALL)


class ReadAhead:
    """Records fires ahead with a preparing fire port (``LoopContext.preparer``) and sends them."""

    def __init__(self, ctx: LoopContext, held: HeldSet, fire_batch: FireBatch) -> None:
        self._preparer = ctx.preparer
        self._fire_batch = fire_batch
        self._held = held
        self._config = ctx.config
        self._withdrawals = ctx.withdrawals
        self.task: asyncio.Task[None] | None = None  # the current cycle's recording

    @property
    def enabled(self) -> bool:
        return self._preparer is not None

    def start(self, now: int) -> asyncio.Task[None]:
        """Record the fires planned in (now, now + prepare_ahead_ms]; a stop waits for it."""
        assert self._preparer is not None
        self.task = asyncio.get_running_loop().create_task(self._prepare(self._preparer, now))
        return self.task

    async def _prepare(self, preparer: FirePreparer[Any], now: int) -> None:
        limit = now + self._config.prepare_ahead_ms
        fires: list[PlannedFire] = []
        slots: list[Ahead] = []
        for held in self._held.values():
            if held.leaving:
                continue
            instant: int | None = held.planned_ms
            if held.prepared_to >= held.planned_ms:
                instant = held.schedule.next_fire_ms(held.prepared_to)
            while instant is not None and instant <= limit:
                held.prepared_to = instant
                if instant > now and instant not in held.prepared and not _excluded(held, instant):
                    fires.append(PlannedFire(held.job, TriggerType.CRON, instant))
                    held.prepared[instant] = slot = Ahead()
                    slots.append(slot)
                instant = held.schedule.next_fire_ms(instant)
        # In slices: building and binding a thousand rows at once would hold the event loop
        # (and the fires due meanwhile) for tens of milliseconds.
        step = self._config.prepare_slice
        for start in range(0, len(fires), step):
            part = fires[start:start + step]
            try:
                batches = await preparer.prepare(part)
            except Exception:
                log.exception("recording %d fires ahead failed; recording them at their instants", len(part))
                for slot in slots[start:start + step]:
                    self._settle(slot, Outcome.UNPREPARED, None)
                continue
            for slot, batch in zip(slots[start:start + step], batches, strict=True):
                if batch is None:
                    self._settle(slot, Outcome.NOTHING_TO_SEND, None)
                else:
                    self._settle(slot, Outcome.PREPARED, batch)

    def _settle(self, slot: Ahead, outcome: Outcome, batch: object) -> None:
        slot.resolve(outcome, batch)
        self._withdrawals.settled(slot)

    async def send(self, fires: Sequence[PlannedFire], slots: Sequence[Ahead | None]) -> None:
        """Send the fires: prepared ones by their batches, the others recorded now."""
        ready: list[object] = []
        unprepared: list[PlannedFire] = []
        for fire, slot in zip(fires, slots, strict=True):
            if slot is None:
                unprepared.append(fire)
                continue
            outcome = slot.outcome
            if outcome is Outcome.PENDING:
                outcome = await slot.settled()
            if outcome is Outcome.PREPARED:
                ready.append(slot.batch)
            elif outcome is Outcome.UNPREPARED:
                unprepared.append(fire)
            # NOTHING_TO_SEND: the instant was recorded by another node (or earlier).
        if ready:
            assert self._preparer is not None
            if unprepared:
                await asyncio.gather(self._preparer.dispatch(ready), self._fire_batch(unprepared))
                return
            await self._preparer.dispatch(ready)
        elif unprepared:
            await self._fire_batch(unprepared)
