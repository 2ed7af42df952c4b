"""Work a component starts in the background and waits for when it stops.

asyncio keeps only weak references to tasks: a task nobody holds may be collected before it
ends, and its failure surfaces late as "Task exception was never retrieved", if at all. A
:class:`Background` holds each task until it ends and logs its failure (as "<what>
failed"), so callers start work and forget it, and wait for all of it at their stop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable

__all__ = ["Background"]


class Background:
    """The background tasks of one component (see the module docstring)."""

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self._log = logger or logging.getLogger(__name__)
        self.tasks: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self.tasks)

    def spawn(self, work: Awaitable[None], what: str) -> None:
        """Run ``work`` in the background; a failure is logged ("``what`` failed"), not raised."""

        async def runner() -> None:
            try:
                await work
            except asyncio.CancelledError:
                raise
            except Exception:
                self._log.exception("%s failed", what)

        task = asyncio.get_running_loop().create_task(runner())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def wait(self, timeout_s: float | None = None) -> set[asyncio.Task[None]]:
        """Wait for the tasks, and for those they start meanwhile, at most ``timeout_s``;
        returns those still running then (none without a timeout). Cancelled itself (a stop
        that ran out of time), it cancels the tasks too: they must not outlive their stop."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        while self.tasks:
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                break
            try:
                await asyncio.wait(set(self.tasks), timeout=left)
            except asyncio.CancelledError:
                # asyncio.wait leaves the tasks running when it is cancelled (gather did not).
                for task in list(self.tasks):
                    task.cancel()
                raise
        return set(self.tasks)

    async def stop(self, timeout_s: float, what: str) -> None:
        """At a stop: wait at most ``timeout_s`` for the tasks, then cancel (and log) those
        still running: they must not outlive what they use."""
        late = await self.wait(timeout_s)
        if late:
            self._log.warning("%s still running at stop; cancelling %d", what, len(late))
        for task in late:
            task.cancel()
