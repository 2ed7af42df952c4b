"""What every stage of the scheduling loop shares: one :class:`LoopContext` per loop.

The stages (leases -> held -> timer -> sender, see docs/design/scheduling-loop.md) take
this context instead of each its own list of collaborators: the job table port, the
timers (and their clock), the settings and counters, the database lock, the optional
liveness and timing ports, the fires withdrawn from the read-ahead and the background
tasks. The context holds no stage: a stage reaches another only through the loop that
composes them, or through a narrow interface the earlier stage owns.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

from jobring.admin.loop.ahead import Withdrawals
from jobring.admin.loop.config import LoopConfig, LoopStats
from jobring.admin.loop.ports import FirePreparer, LeaseStore, Liveness, ScheduleFactory, TimingPort
from jobring.admin.loop.timers import Timers
from jobring.core.clock import Clock

log = logging.getLogger(__name__)


class Background:
    """The loop's background work (fire batches, releases, skip records): a stop waits for it."""

    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[None]] = set()

    def spawn(self, work: Awaitable[None], what: str) -> None:
        """Run ``work`` in the background; a failure is logged (as ``what``), not raised."""
        async def runner() -> None:
            try:
                await work
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s failed", what)

        task = asyncio.get_running_loop().create_task(runner())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)


@dataclass(frozen=True, slots=True, kw_only=True)
class LoopContext:
    """The collaborators the loop's stages share (one per :class:`~.loop.ScheduleLoop`)."""

    store: LeaseStore  # the job table and node row, bound to this node's id
    timers: Timers
    config: LoopConfig
    stats: LoopStats
    schedule_factory: ScheduleFactory
    admin_timezone: str
    # Held by the claim cycle, the advance writer and the lease releases: a release never
    # lands between a renewal and its application, advances are written before a renewal.
    db_lock: asyncio.Lock
    preparer: FirePreparer[Any] | None  # the fire port, when it records fires ahead
    withdrawals: Withdrawals
    background: Background
    liveness: Liveness | None = None
    timing: TimingPort | None = None

    @property
    def clock(self) -> Clock:
        return self.timers.clock
