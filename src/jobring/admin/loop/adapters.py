"""The scheduling loop's ports over the admin store and the trigger service."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from jobring.admin.loop.ports import PlannedFire
from jobring.admin.store import NotFound, Store
from jobring.admin.store.records import HeldJobs, JobInfo
from jobring.admin.trigger.trigger import FireRequest, PreparedBatch, TriggerService
from jobring.admin.trigger.unsure import UnsureFires
from jobring.core.enums import ScheduleType, TriggerType

if TYPE_CHECKING:
    from jobring.admin.loop.overlap import OverlapGate

log = logging.getLogger(__name__)

# A node's row (and its send fence) is kept this long after it was last alive.
_FORGET_NODE_AFTER_MS = 7 * 86_400_000


class StoreLeases:
    """:class:`LeaseStore` over the admin store, for one node (its job leases, its row in the
    scheduler node table)."""

    def __init__(self, store: Store, node_id: str, unsure: UnsureFires | None = None) -> None:
        self._store = store
        self.node_id = node_id
        # Asks the executors about the fires settled as perhaps sent (none: left as they are).
        self.unsure = unsure
        self._forgot_at = 0
        # Jobs taken over with fires recorded by another node (metrics, read at scrape time).
        self.takeovers = 0

    async def claim(self, now_ms: int, window_end_ms: int, lease_ms: int, limit: int) -> Sequence[JobInfo]:
        return await self._store.jobs.claim_due(self.node_id, now_ms, window_end_ms, lease_ms, limit,
                                                new_only=True)

    async def renew(self, now_ms: int, lease_ms: int, known: Mapping[int, JobInfo]) -> HeldJobs:
        return await self._store.jobs.renew_held(self.node_id, now_ms + lease_ms, known)

    async def advance(self, updates: Sequence[tuple[int, int, int]]) -> int:
        return await self._store.jobs.advance(self.node_id, updates)

    async def settle_takeover(self, jobs: Sequence[JobInfo]) -> Mapping[int, int]:
        # Only instants from the stored next time on: it is advanced after a fire was sent,
        # so everything before it went out.
        starts = {j.id: j.trigger_next_time for j in jobs}
        # This node's own fires too: a job it dropped (its lock session lost, its lease
        # lapsed) and adopts again may have fires of its own in flight at the drop, whose
        # advances were never queued. (Its withdrawn ones are cancelled before the claim.)
        recorded = await self._store.fires.recorded_since(starts, "")
        if not recorded:
            return {}
        unsure = {f.admin_node for f in recorded if not f.confirmed and f.admin_node}
        fences = await self._store.nodes.send_fences(unsure) if unsure else {}
        never_sent: list[int] = []
        maybe_sent: list[int] = []
        sent_up_to: dict[int, int] = {}
        for fire in recorded:
            fence = fences.get(fire.admin_node or "")
            if not fire.confirmed and fence is not None and fire.planned_time > fence:
                never_sent.append(fire.log_id)
            else:
                if not fire.confirmed:
                    maybe_sent.append(fire.log_id)
                # Sent, or perhaps sent just before that node died (then it stays unconfirmed
                # for its callback or the lost-run monitor): not sent again.
                sent_up_to[fire.job_id] = max(sent_up_to.get(fire.job_id, 0), fire.planned_time)
        withdrawn = await self._store.fires.withdraw(never_sent, holder=self.node_id) if never_sent else 0
        if self.unsure is not None:
            # The job resumes after them at once; whether they arrived is found out meanwhile.
            self.unsure.submit(maybe_sent)
        self.takeovers += len({f.job_id for f in recorded if f.admin_node != self.node_id})
        log.warning("adopting %d jobs with %d fires recorded past their stored next time: %d never "
                    "sent (withdrawn; the misfire rule applies to them), %d perhaps sent (%s), %d jobs "
                    "resume after a fire that was or may have been sent", len(jobs), len(recorded), withdrawn,
                    len(maybe_sent), "asking their executors" if self.unsure else "not sent again",
                    len(sent_up_to))
        return sent_up_to

    async def raise_fence(self, fence_ms: int) -> None:
        await self._store.nodes.raise_fence(self.node_id, fence_ms)

    async def end_schedule(self, job_ids: Sequence[int]) -> None:
        for job_id in job_ids:
            try:
                await self._store.jobs.set_status(job_id, 0, 0)
            except NotFound:
                log.info("job %s was deleted before its schedule could be ended", job_id,
                         extra={"job_id": job_id, "node": self.node_id})

    async def release(self, job_ids: Sequence[int]) -> None:
        await self._store.jobs.release(self.node_id, job_ids)

    async def heartbeat(self, now_ms: int, until_ms: int, window_end_ms: int) -> tuple[int, int]:
        await self._store.nodes.announce(self.node_id, until_ms)
        live = await self._store.nodes.live_count(now_ms)
        if now_ms - self._forgot_at >= 3_600_000:
            # Nodes stopped long ago (every process start has a new id).
            self._forgot_at = now_ms
            await self._store.nodes.forget(now_ms - _FORGET_NODE_AFTER_MS)
        due = await self._store.jobs.count_due(window_end_ms)
        return max(1, live), due


class TriggerFirePort:
    """The loop's fire port over the trigger service: fires recorded at the instant
    (``__call__``) or ahead of it (:class:`FirePreparer`). Scheduled fires carry their instant.
    Fires of jobs with an overlap policy (never recorded ahead) pass through ``overlap``."""

    def __init__(self, trigger: TriggerService, overlap: OverlapGate | None = None) -> None:
        self._trigger = trigger
        self._overlap = overlap

    async def __call__(self, fires: Sequence[PlannedFire]) -> None:
        requests = _requests(fires)
        if self._overlap is not None:
            requests = await self._overlap.admit(requests)
        if requests:
            await self._trigger.fire_batch(requests)

    async def prepare(self, fires: Sequence[PlannedFire]) -> list[PreparedBatch | None]:
        batch = await self._trigger.prepare_batch(_requests(fires))
        return [None if dup else one for dup, one in zip(batch.duplicates, batch.split(), strict=True)]

    async def dispatch(self, batches: Sequence[PreparedBatch]) -> None:
        await self._trigger.dispatch_prepared(PreparedBatch.merge(batches), record_later=True)

    async def cancel(self, batches: Sequence[PreparedBatch]) -> None:
        live = [b for b in batches if b.state == "prepared"]
        if live:
            try:
                removed = await self._trigger.cancel_prepared(PreparedBatch.merge(live))
            except BaseException:
                # Nothing was withdrawn (one transaction): the loop cancels these again later,
                # so they must not stay used up by the merge.
                for batch in live:
                    batch.state = "prepared"
                raise
            log.info("withdrew %d fires recorded ahead (jobs stopped, edited or handed over)", removed)


def _requests(fires: Sequence[PlannedFire]) -> list[FireRequest]:
    return [FireRequest(f.job, _recorded_type(f), planned_time=f.planned_ms) for f in fires]


def _recorded_type(fire: PlannedFire) -> TriggerType:
    """What the run records: a schedule's on-time fire says which schedule (cron or fixed rate)."""
    if fire.trigger_type is TriggerType.CRON and fire.job.schedule_type == ScheduleType.FIX_RATE:
        return TriggerType.FIX_RATE
    return fire.trigger_type

