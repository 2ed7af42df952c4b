"""Delayed one-shot fires: runs asked for a later instant (``POST /jobs/{id}/trigger-at``).

Each pending fire is a row of ``jobring_delayed_fire``, so it survives restarts. Every admin
node polls the rows due within ``ahead_ms`` once per ``poll_ms`` (1 s) and sleeps until the
earliest of them, so a fire goes out within milliseconds of its instant. Several nodes may
try the same fire: its run-log row carries ``planned_time = -id``, and the run log's unique
key on (job id, planned time) lets exactly one of them record (and send) it; the others see
a duplicate. The row is deleted once the fire is recorded, so a node that dies after
recording leaves the row to another node, which finds the duplicate and deletes it. A fire
recorded but never sent (the node died between) is failed by the lost-run monitor, as a
scheduled fire would be. The main scheduling loop is not involved.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from jobring.admin.store.delayed import DelayedFire
from jobring.admin.trigger.trigger import FireRequest, TriggerRejected, TriggerService
from jobring.core.clock import Clock
from jobring.core.enums import TriggerType

if TYPE_CHECKING:
    from jobring.admin.store import Store

log = logging.getLogger(__name__)


class DelayedFireRunner:
    """Fires the delayed runs that come due (see the module docstring)."""

    def __init__(
        self, store: Store, trigger: TriggerService, clock: Clock, *, poll_ms: int = 1_000,
        ahead_ms: int = 2_000,
    ) -> None:
        self._store = store
        self._trigger = trigger
        self._clock = clock
        self.poll_ms = poll_ms
        self.ahead_ms = ahead_ms
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.fired = 0

    def wake(self) -> None:
        """Look again now (a fire was added on this node and may be due before the next poll)."""
        self._wake.set()

    async def tick(self) -> int | None:
        """Fire every pending fire due by now; returns the instant of the next one due within
        ``ahead_ms``, or None."""
        now = self._clock.now_ms()
        rows = await self._store.delayed.due(now + self.ahead_ms)
        due = [r for r in rows if r.fire_at <= now]
        if due:
            await self._fire(due)
        later = [r.fire_at for r in rows if r.fire_at > now]
        return min(later) if later else None

    async def _fire(self, fires: Sequence[DelayedFire]) -> None:
        jobs = await self._store.jobs.get_many(f.job_id for f in fires)
        for fire in fires:
            job = jobs.get(fire.job_id)
            if job is None:
                log.warning("delayed fire %d dropped: job %d no longer exists", fire.id, fire.job_id)
                await self._store.delayed.remove([fire.id])
                continue
            request = FireRequest(job, TriggerType.DELAYED, planned_time=fire.planned_time,
                                  executor_param=fire.executor_param, address_override=fire.addresses)
            try:
                result = await self._trigger.fire(request)
            except TriggerRejected as exc:
                # Its addresses left the group since it was asked for: it cannot run as asked.
                log.warning("delayed fire %d of job %d not run: %s", fire.id, job.id, exc)
            else:
                if result.duplicate:
                    log.debug("delayed fire %d was recorded by another node", fire.id)
                else:
                    self.fired += 1
                    log.info("delayed fire %d of job %d sent (runs %s)", fire.id, job.id, result.log_ids)
            await self._store.delayed.remove([fire.id])

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="jobring-delayed-fires")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        failures = 0
        while True:
            self._wake.clear()
            following: int | None = None
            try:
                following = await self.tick()
                failures = 0
            except asyncio.CancelledError:
                raise
            except Exception:
                failures += 1
                log.exception("delayed fires: poll failed (%d in a row); retrying", failures)
            now = self._clock.now_ms()
            deadline = now + self.poll_ms * min(failures + 1, 10)
            if following is not None:
                deadline = min(deadline, following)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), max(0.0, (deadline - now) / 1000))
