"""Timers keyed in epoch milliseconds: the event loop's in production, a hand-driven one in tests."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable
from typing import Protocol

from jobring.core.clock import Clock, ManualClock


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Timers(Protocol):
    """Schedules callbacks at wall-clock instants (epoch ms) of one clock."""

    clock: Clock

    def call_at_ms(self, deadline_ms: int, callback: Callable[[], None]) -> TimerHandle: ...


class LoopTimers:
    """The running event loop's timers, converted from the wall clock to the loop's monotonic time.

    The conversion is done when the timer is set; the waits are short (seconds), so wall
    clock steps in between shift a deadline at most by the step.
    """

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def call_at_ms(self, deadline_ms: int, callback: Callable[[], None]) -> TimerHandle:
        loop = asyncio.get_running_loop()
        delay = max(0.0, (deadline_ms - self.clock.now_ms()) / 1000.0)
        return loop.call_at(loop.time() + delay, callback)


class _ManualHandle:
    __slots__ = ("callback", "cancelled")

    def __init__(self, callback: Callable[[], None]) -> None:
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualTimers:
    """Timers on a :class:`ManualClock`; :meth:`advance_to` moves time and runs what came due."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock: ManualClock = clock
        self._heap: list[tuple[int, int, _ManualHandle]] = []
        self._seq = itertools.count()

    def call_at_ms(self, deadline_ms: int, callback: Callable[[], None]) -> TimerHandle:
        handle = _ManualHandle(callback)
        heapq.heappush(self._heap, (deadline_ms, next(self._seq), handle))
        return handle

    def next_deadline(self) -> int | None:
        """The earliest pending (not cancelled) deadline."""
        while self._heap and self._heap[0][2].cancelled:
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None

    def advance_to(self, now_ms: int) -> int:
        """Set the clock to ``now_ms`` and run the callbacks due by then; returns how many ran."""
        if now_ms < self.clock.now_ms():
            raise ValueError("a manual clock only moves forward")
        self.clock.set(now_ms)
        ran = 0
        while self._heap and self._heap[0][0] <= now_ms:
            _, _, handle = heapq.heappop(self._heap)
            if not handle.cancelled:
                handle.callback()
                ran += 1
        return ran


async def sleep_until(timers: Timers, deadline_ms: int | None) -> None:
    """Sleep until ``deadline_ms`` by ``timers`` (forever when None, until cancelled)."""
    fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def _ring() -> None:
        if not fut.done():
            fut.set_result(None)

    handle: TimerHandle | None = None
    if deadline_ms is not None:
        handle = timers.call_at_ms(deadline_ms, _ring)
    try:
        await fut
    finally:
        if handle is not None:
            handle.cancel()
