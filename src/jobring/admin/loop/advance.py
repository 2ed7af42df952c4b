"""Writing ``trigger_next_time`` after the fires were sent, in batches.

The stored next time only lags behind what was sent, never runs ahead of it: an advance is
queued once its fire is recorded, and written at most every ``LoopConfig.advance_flush_ms``
(the claim cycle also writes first). Part of the sender stage: it learns of dropped jobs
through the held set's ``dropped`` hook and hands the jobs leaving after their advance to
the lease keeper's releases.
"""

from __future__ import annotations

import asyncio
import logging
import operator
from dataclasses import fields
from typing import Any

from jobring.admin.loop.adoption import Adopted
from jobring.admin.loop.context import LoopContext
from jobring.admin.loop.held import Held, HeldSet
from jobring.admin.loop.leases import Releases
from jobring.admin.loop.timers import sleep_until
from jobring.admin.store.records import JobInfo
from jobring.core.planning import FireDecision

log = logging.getLogger(__name__)

_Pending = dict[int, tuple[int, int, Held]]  # job id -> (trigger_last_time, trigger_next_time, held)

_ROW_FIELDS = tuple(f.name for f in fields(JobInfo))
assert all(f.init for f in fields(JobInfo))
_row_values = operator.attrgetter(*_ROW_FIELDS)
_LAST, _NEXT = _ROW_FIELDS.index("trigger_last_time"), _ROW_FIELDS.index("trigger_next_time")


def advanced_row(job: JobInfo, last_ms: int, next_ms: int) -> JobInfo:
    """``replace(job, trigger_last_time=last_ms, trigger_next_time=next_ms)`` at half the cost
    (one per fire sent)."""
    values: list[Any] = list(_row_values(job))
    values[_LAST] = last_ms
    values[_NEXT] = next_ms
    return JobInfo(*values)


class AdvanceWriter:
    """Queues next-time updates and schedule ends; writes them under the database lock."""

    def __init__(self, ctx: LoopContext, held: HeldSet, releases: Releases) -> None:
        self._ctx = ctx
        self._store = ctx.store
        self._held = held
        self._releases = releases
        self._pending: _Pending = {}
        self._ended: list[int] = []
        self._wanted = asyncio.Event()
        held.dropped = self.forget

    def queue(self, held: Held, decision: FireDecision) -> None:
        """The fire of ``decision`` is recorded (or was not to be sent): move the job on."""
        if self._held.get(held.job.id) is not held:
            return
        if decision.next_ms is None:
            self._held.drop(held.job.id)
            self._ended.append(held.job.id)
        else:
            last = decision.planned_ms if decision.fires else held.job.trigger_last_time
            previous = self._pending.get(held.job.id)
            if previous is None or previous[1] < decision.next_ms:
                self._pending[held.job.id] = (last, decision.next_ms, held)
        self._wanted.set()

    def take(self, adopted: Adopted) -> None:
        """Store what a claim cycle left: where jobs taken over resume (nothing fires at the
        instants passed over), and the jobs whose schedule has no further instant (stopped)."""
        for held, last_ms, next_ms in adopted.resumed:
            self._pending[held.job.id] = (last_ms, next_ms, held)
            self._wanted.set()
        if adopted.ended:
            self._ended += adopted.ended
            self._wanted.set()

    def forget(self, job_id: int) -> None:
        self._pending.pop(job_id, None)

    async def run(self) -> None:
        """The writer task."""
        lock, timers, config = self._ctx.db_lock, self._ctx.timers, self._ctx.config
        while True:
            await self._wanted.wait()
            # Gather a flush interval's worth of advances into one update.
            await sleep_until(timers, timers.clock.now_ms() + config.advance_flush_ms)
            try:
                async with lock:
                    await self.flush_locked()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("writing trigger_next_time failed; retrying")
                await sleep_until(timers, timers.clock.now_ms() + 200)

    async def flush_locked(self) -> None:
        """Write what is queued (the caller holds the database lock)."""
        self._wanted.clear()
        pending, self._pending = self._pending, {}
        ended, self._ended = self._ended, []
        try:
            if pending:
                updates = [(job_id, last, nxt) for job_id, (last, nxt, _) in pending.items()]
                applied = await self._store.advance(updates)
                if applied < len(updates):
                    # Some leases moved to another node; the next claim no longer returns
                    # those jobs, which drops them from memory.
                    log.warning("%d of %d next-time updates found their lease gone",
                                len(updates) - applied, len(updates))
                self._written(pending)
            if ended:
                await self._store.end_schedule(ended)
        except BaseException:
            # Put back what was not written (newer entries win) so nothing is forgotten.
            for job_id, entry in pending.items():
                current = self._pending.get(job_id)
                if current is None or current[1] < entry[1]:
                    self._pending[job_id] = entry
            self._ended.extend(ended)
            raise

    def _written(self, pending: _Pending) -> None:
        leaving: list[int] = []
        for job_id, (last, nxt, held) in pending.items():
            if self._held.get(job_id) is not held:
                continue
            held.db_next_ms = nxt
            # The row as the database now has it: the next renewal then sees it unchanged.
            held.job = advanced_row(held.job, last, nxt)
            # (An advance of an earlier fire still names the planned instant: not yet.)
            if held.leaving and nxt > held.planned_ms:
                leaving.append(job_id)
        for job_id in leaving:
            self._held.drop(job_id)
        if leaving:
            self._releases.release(leaving)
        self._ctx.stats.held = len(self._held)
