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
from dataclasses import dataclass
from typing import Any

from jobring.admin.loop.ahead import Withdrawals
from jobring.admin.loop.config import LoopConfig, LoopStats
from jobring.admin.loop.ports import FirePreparer, LeaseStore, Liveness, ScheduleFactory, TimingPort
from jobring.admin.loop.timers import Timers
from jobring.background import Background
from jobring.core.clock import Clock


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
    background: Background  # fire batches, releases, skip records: a stop waits for them
    liveness: Liveness | None = None
    timing: TimingPort | None = None

    @property
    def clock(self) -> Clock:
        return self.timers.clock
