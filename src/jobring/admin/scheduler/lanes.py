"""Fast and slow dispatch lanes: bounded concurrency with isolation of slow jobs.

Each lane is a semaphore over coroutines on the one event loop (no thread per trigger).
A job whose trigger took longer than ``slow_threshold_ms`` more than ``slow_after`` times
in the current minute is sent to the slow lane until that minute ends, so one slow
executor fills the slow lane rather than delaying every other job's dispatch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from jobring.core.clock import Clock

T = TypeVar("T")

SLOW_THRESHOLD_MS = 500
SLOW_AFTER = 10
MINUTE_MS = 60_000


class DispatchLanes:
    """Runs trigger coroutines in the fast or slow lane and measures how long each took."""

    def __init__(
        self,
        clock: Clock,
        *,
        fast_size: int = 200,
        slow_size: int = 100,
        slow_threshold_ms: int = SLOW_THRESHOLD_MS,
        slow_after: int = SLOW_AFTER,
    ) -> None:
        if fast_size < 1 or slow_size < 1:
            raise ValueError("lane sizes must be at least 1")
        self._clock = clock
        self._fast = asyncio.Semaphore(fast_size)
        self._slow = asyncio.Semaphore(slow_size)
        self._threshold = slow_threshold_ms
        self._slow_after = slow_after
        self._minute = clock.now_ms() // MINUTE_MS
        self._slow_counts: dict[int, int] = {}

    def _roll_minute(self, now_ms: int) -> None:
        minute = now_ms // MINUTE_MS
        if minute != self._minute:
            self._minute = minute
            self._slow_counts.clear()

    def is_slow(self, job_id: int) -> bool:
        """True while ``job_id`` belongs in the slow lane (this minute)."""
        self._roll_minute(self._clock.now_ms())
        return self._slow_counts.get(job_id, 0) > self._slow_after

    def record(self, job_id: int, took_ms: int) -> None:
        """Count one trigger of ``job_id`` that took ``took_ms``."""
        self._roll_minute(self._clock.now_ms())
        if took_ms > self._threshold:
            self._slow_counts[job_id] = self._slow_counts.get(job_id, 0) + 1

    async def run(self, job_id: int, work: Callable[[], Awaitable[T]]) -> T:
        """Run ``work()`` in the lane ``job_id`` belongs to; its duration is recorded."""
        lane = self._slow if self.is_slow(job_id) else self._fast
        async with lane:
            started = self._clock.now_ms()
            try:
                return await work()
            finally:
                self.record(job_id, self._clock.now_ms() - started)
