"""The base of the admin's monitors: a periodic tick as an asyncio task (its own module, so
the monitors in other modules and the set in :mod:`jobring.admin.monitors.monitors` that
builds them all import it without importing each other)."""

from __future__ import annotations

import asyncio
import contextlib
import logging

log = logging.getLogger(__name__)


class Monitor:
    """A periodic tick run as an asyncio task; errors are logged and the loop goes on."""

    name = "monitor"

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._task: asyncio.Task[None] | None = None
        self._woken = asyncio.Event()

    async def tick(self) -> None:
        raise NotImplementedError

    def next_wait_s(self) -> float:
        """Seconds until the next tick (a monitor may want to run earlier than its interval)."""
        return self.interval_s

    def wake(self) -> None:
        """Run the next tick now rather than after the interval."""
        self._woken.set()

    async def _loop(self) -> None:
        while True:
            self._woken.clear()
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s tick failed; next try in %ss", self.name, self.interval_s)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._woken.wait(), self.next_wait_s())

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name=f"jobring-{self.name}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
