"""Fast and slow dispatch lanes: bounded concurrency with isolation of slow jobs.

Each lane bounds the coroutines in it on the one event loop (no thread per trigger). A slot
can be taken synchronously (``enter_now``): a fire due at its instant is then written to
its executor in the same step, without waiting for a task to be scheduled.
A job whose trigger took longer than ``slow_threshold_ms`` more than ``slow_after`` times
in the current minute is sent to the slow lane until that minute ends, so one slow
executor fills the slow lane rather than delaying every other job's dispatch.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TypeVar

from jobring.core.buckets import Buckets
from jobring.core.clock import Clock

T = TypeVar("T")

SLOW_THRESHOLD_MS = 500
SLOW_AFTER = 10
MINUTE_MS = 60_000


class Lane:
    """A counting semaphore whose slot can also be taken without awaiting."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._free = size
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def in_use(self) -> int:
        return self.size - self._free

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def enter_now(self) -> bool:
        """Take a slot if one is free and nobody waits for one."""
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return True
        return False

    async def enter(self) -> None:
        if self.enter_now():
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.leave()  # handed a slot just as it was cancelled: pass it on
            raise

    def leave(self) -> None:
        """Give the slot back, to the longest waiter if any."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._free += 1


class DispatchLanes:
    """Runs trigger coroutines in the fast or slow lane and measures how long each took."""

    def __init__(
        self,
        clock: Clock,
        *,
        fast_size: int = 1000,
        slow_size: int = 100,
        slow_threshold_ms: int = SLOW_THRESHOLD_MS,
        slow_after: int = SLOW_AFTER,
    ) -> None:
        if fast_size < 1 or slow_size < 1:
            raise ValueError("lane sizes must be at least 1")
        self._clock = clock
        self._fast = Lane(fast_size)
        self._slow = Lane(slow_size)
        self._threshold = slow_threshold_ms
        self._slow_after = slow_after
        self._minute = clock.now_ms() // MINUTE_MS
        self._slow_counts: dict[int, int] = {}
        # For metrics, read at scrape time: jobs moved to the slow lane, call durations.
        self.slow_moves = 0
        self.latency_ms = Buckets()

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
        self.latency_ms.observe(took_ms)
        if took_ms > self._threshold:
            count = self._slow_counts[job_id] = self._slow_counts.get(job_id, 0) + 1
            if count == self._slow_after + 1:
                self.slow_moves += 1

    @property
    def fast(self) -> Lane:
        return self._fast

    @property
    def slow(self) -> Lane:
        return self._slow

    def _lane(self, job_id: int) -> Lane:
        return self._slow if self.is_slow(job_id) else self._fast

    def enter_now(self, job_id: int) -> Lane | None:
        """Take a slot in the lane ``job_id`` belongs to if one is free now; the caller must
        ``leave`` it with the trigger's duration."""
        lane = self._lane(job_id)
        return lane if lane.enter_now() else None

    def leave(self, lane: Lane, job_id: int, took_ms: int) -> None:
        lane.leave()
        self.record(job_id, took_ms)

    async def run(self, job_id: int, work: Callable[[], Awaitable[T]]) -> T:
        """Run ``work()`` in the lane ``job_id`` belongs to; its duration is recorded."""
        lane = self._lane(job_id)
        await lane.enter()
        started = self._clock.now_ms()
        try:
            return await work()
        finally:
            self.leave(lane, job_id, self._clock.now_ms() - started)
