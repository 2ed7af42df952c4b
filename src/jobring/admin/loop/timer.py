"""The timer, the loop's third stage: one sleeper on the earliest held instant.

It wakes when the earliest instant comes due (or an earlier one is pushed: the held set's
``alarm`` hook) and hands the fires due to the sender through :class:`Sender`, the narrow
interface it owns. Under load it waits a little for fires due together
(``LoopConfig.max_coalesce_ms``), so that they go out in one batch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Protocol

from jobring.admin.loop.context import LoopContext
from jobring.admin.loop.held import HeldSet

# Fires due together that make a batch big enough: no coalescing wait for more.
_BURST = 64


class Sender(Protocol):
    """What the timer needs from the stage after it."""

    def blocked(self, due: int, now: int) -> Awaitable[None] | None:
        """None when the fires due at ``due`` may go out now; else what to wait for first
        (the send fence, a free batch slot)."""
        ...

    def fire_due(self, now: int) -> None:
        """Send the fires due by ``now``."""
        ...


class FireTimer:
    """The timer task."""

    def __init__(self, ctx: LoopContext, held: HeldSet, sender: Sender) -> None:
        self._ctx = ctx
        self._held = held
        self._sender = sender
        self._wake: asyncio.Future[None] | None = None
        self._coalesce_ms = 0
        self._rate_mark: tuple[int, int] | None = None  # (ms, fired) at the previous cycle

    def adapt_coalescing(self, now: int) -> None:
        """Once a cycle: wait up to 1 ms per 100 fires/s for fires due together."""
        fired = self._ctx.stats.fired
        if self._rate_mark is not None and now > self._rate_mark[0]:
            rate = (fired - self._rate_mark[1]) * 1000 // (now - self._rate_mark[0])
            self._coalesce_ms = min(self._ctx.config.max_coalesce_ms, rate // 100)
        self._rate_mark = (now, fired)

    def _wake_now(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    async def run(self) -> None:
        """The timer task."""
        loop = asyncio.get_running_loop()
        held_set = self._held
        sender = self._sender
        timers = self._ctx.timers
        clock = timers.clock
        while True:
            due = held_set.next_due()
            now = clock.now_ms()
            wait = self._coalesce_ms
            if wait and due is not None and held_set.due_at_least(max(due, now), _BURST):
                wait = 0  # enough fires due by then for a batch: waiting would only delay them
            if due is not None and due + wait <= now:
                blocked = sender.blocked(due, now)
                if blocked is not None:
                    await blocked
                    continue
                sender.fire_due(now)
                continue
            self._wake = loop.create_future()
            deadline = due + wait if due is not None else None
            held_set.alarm, held_set.alarm_at = self._wake_now, deadline
            handle = timers.call_at_ms(deadline, self._wake_now) if deadline is not None else None
            try:
                await self._wake
            finally:
                self._wake = None
                held_set.alarm = held_set.alarm_at = None
                if handle is not None:
                    handle.cancel()
