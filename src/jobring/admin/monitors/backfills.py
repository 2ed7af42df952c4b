"""The backfill runner: starts the runs of the running backfills, at most ``parallelism`` of
each in progress at once, in the order the backfill lists its instants.

Every admin node runs it. Each tick, for each running backfill, it counts the runs in progress
(the run log: ended ones have a handle code or a failed trigger) and the instants handed out but
not recorded yet, hands out as many of the next instants as the cap leaves room for by
compare-and-set on the backfill's cursor (so two nodes never hand out the same instant and the cap
holds across nodes), and fires them as ``BACKFILL`` runs carrying their logical time and data
interval. A node that died between the hand-out and the record leaves instants without a run:
after :data:`LOST_AFTER_MS` another node fires them; the run log's unique key (backfill, logical
time, attempt) keeps each one recorded once. A backfill whose instants all started and whose runs
all ended is done. Results wake the runner (:meth:`BackfillRunner.results`), so the next run starts
as soon as one ends, not at the next tick.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from sqlalchemy.exc import IntegrityError

from jobring.admin.monitors.base import Monitor
from jobring.admin.store.backfills import BackfillInstant, BackfillRow, BackfillStatus
from jobring.admin.store.records import JobInfo
from jobring.admin.trigger.trigger import FireRequest, TriggerRejected, TriggerService
from jobring.core.clock import Clock
from jobring.core.enums import TriggerType

if TYPE_CHECKING:
    from jobring.admin.store import Store

log = logging.getLogger(__name__)

LOST_AFTER_MS = 30_000  # handed out this long ago and still not recorded: the node died
PAGE = 500  # running backfills read at once (the runner pages through all of them)
_CACHED = 64  # backfills whose instants are kept in memory (they never change)


class BackfillRunner(Monitor):
    """Starts backfill runs within each backfill's parallelism cap (see the module docstring)."""

    name = "backfills"

    def __init__(self, store: Store, trigger: TriggerService, clock: Clock, *, interval_s: float = 1.0,
                 lost_after_ms: int = LOST_AFTER_MS, page: int = PAGE) -> None:
        super().__init__(interval_s)
        self._store = store
        self._trigger = trigger
        self._clock = clock
        self._lost_after_ms = lost_after_ms
        self._page = page
        self._instants: dict[int, list[BackfillInstant]] = {}
        self._active = True  # a running backfill was seen (results wake the runner only then)
        self.fired = 0

    def results(self, results: Sequence[tuple[int, int, str | None]]) -> None:
        """Runs ended (the callback service's results): a backfill may have room again."""
        if self._active and results:
            self.wake()

    async def tick(self) -> None:
        rows = await self._running()
        self._active = bool(rows)
        for row in _by_turns(rows):
            try:
                await self._advance(row)
            except Exception:
                log.exception("backfill %d: advancing failed; next try at the next tick", row.id)
        if len(self._instants) > _CACHED:
            running = {row.id for row in rows}
            self._instants = {k: v for k, v in self._instants.items() if k in running}

    async def _running(self) -> list[BackfillRow]:
        """Every running backfill (the creation caps bound them), page by page."""
        rows: list[BackfillRow] = []
        while True:
            page = await self._store.backfills.running(self._page, rows[-1].id if rows else 0)
            rows.extend(page)
            if len(page) < self._page:
                return rows

    async def _advance(self, row: BackfillRow) -> None:
        store, now = self._store, self._clock.now_ms()
        job = await store.jobs.get(row.job_id)
        if job is None:
            await store.backfills.end(row.id, BackfillStatus.CANCELLED, now)
            log.warning("backfill %d cancelled: job %d no longer exists", row.id, row.job_id)
            return
        progress = await store.backfills.progress(row.id)
        unrecorded = max(0, row.started - progress.recorded)
        if unrecorded and (row.claimed_at or 0) + self._lost_after_ms <= now:
            # Handed out long ago and never recorded (a node died between): fire them again.
            recorded = await store.backfills.recorded_instants(row.id)
            lost = [i for i in (await self._of(row.id))[: row.started] if i.logical_ms not in recorded]
            room = max(0, row.parallelism - progress.running)
            if lost and room:
                log.warning("backfill %d: %d instants handed out but not recorded; firing them",
                            row.id, len(lost))
                await self._fire(job, row.id, lost[:room])
            return
        if row.started >= row.total:
            ended = progress.running == 0 and unrecorded == 0
            if ended and await store.backfills.end(row.id, BackfillStatus.DONE, now):
                log.info("backfill %d of job %d done: %d succeeded, %d failed", row.id, row.job_id,
                         progress.succeeded, progress.failed)
            return
        room = row.parallelism - progress.running - unrecorded
        count = min(room, row.total - row.started)
        if count <= 0:
            return
        if not await store.backfills.hand_out(row.id, row.started, count, now):
            return  # another node handed them out, or the backfill was cancelled
        instants = (await self._of(row.id))[row.started : row.started + count]
        await self._fire(job, row.id, instants)

    async def _of(self, backfill_id: int) -> list[BackfillInstant]:
        instants = self._instants.get(backfill_id)
        if instants is None:
            instants = self._instants[backfill_id] = await self._store.backfills.instants(backfill_id)
        return instants

    async def _fire(self, job: JobInfo, backfill_id: int, instants: Sequence[BackfillInstant]) -> None:
        requests = [
            FireRequest(job, TriggerType.BACKFILL, logical_time=i.logical_ms,
                        data_interval_start=i.interval_start_ms, backfill_id=backfill_id)
            for i in instants
        ]
        # One after the other, in the backfill's order (an executor sees them in that order);
        # a duplicate (another node recorded that instant) fails only its own insert.
        for instant, request in zip(instants, requests, strict=True):
            try:
                await self._trigger.fire(request)
            except IntegrityError:
                log.info("backfill %d: instant %d was recorded by another node",
                         backfill_id, instant.logical_ms)
            except TriggerRejected as exc:
                log.warning("backfill %d: instant %d not run: %s", backfill_id, instant.logical_ms, exc)
            else:
                self.fired += 1


def _by_turns(rows: Sequence[BackfillRow]) -> list[BackfillRow]:
    """The backfills taking turns by group (one of each group, then the next of each), so a
    group with many backfills does not start its runs before every other group's."""
    groups: dict[int, list[BackfillRow]] = {}
    for row in rows:
        groups.setdefault(row.job_group, []).append(row)
    turns = list(groups.values())
    return [queue[n] for n in range(max(map(len, turns), default=0)) for queue in turns if n < len(queue)]
