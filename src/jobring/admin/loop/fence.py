"""The send fence: the latest planned instant this node may send, committed in its node row.

A node that takes over this node's jobs knows that fires planned after the fence were
never sent (``LeaseStore.settle_takeover``). Part of the sender stage; the loop tells it
when the leases were last renewed (:meth:`SendFence.renewed`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from jobring.admin.loop.context import LoopContext
from jobring.admin.loop.timers import sleep_until
from jobring.core.timefmt import iso_ms

log = logging.getLogger(__name__)


class SendFence:
    """Keeps the committed fence ``fence_ahead_ms`` ahead of now, within what the leases allow."""

    def __init__(self, ctx: LoopContext) -> None:
        self._store = ctx.store
        # With session-lock liveness the fence is raised through it (so a node found dead
        # can no longer raise it), and nothing is sent while liveness is not proven.
        self._liveness = ctx.liveness
        self._timers = ctx.timers
        self._config = ctx.config
        self._renewed_at: int | None = None  # when the leases were last renewed
        self.committed_ms = 0  # no fire planned after this is sent
        # Set while this node's liveness was lost and its leases are not yet confirmed again
        # (the loop clears it after the first renewal on the new session): nothing is sent.
        self.suspended = False
        self._raised: asyncio.Future[None] | None = None

    async def run(self) -> None:
        """The fence task: raise the fence every ``fence_every_ms``."""
        clock = self._timers.clock
        config = self._config
        while True:
            fence = clock.now_ms() + config.fence_ahead_ms
            renewed_at = self._renewed_at
            if renewed_at is not None:
                # Never beyond what the leases allow: a fire under the fence must be sendable.
                fence = min(fence, renewed_at + config.lease_ms - config.lease_guard_ms)
            try:
                if self._liveness is None:
                    await self._store.raise_fence(fence)
                elif self._liveness.may_send():
                    await self._liveness.raise_fence(fence)
                else:
                    fence = self.committed_ms  # no liveness lock: the fence cannot rise
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("raising the send fence failed; retrying")
            else:
                self.committed_ms = max(self.committed_ms, fence)
                if self._raised is not None and not self._raised.done():
                    self._raised.set_result(None)
            await sleep_until(self._timers, clock.now_ms() + config.fence_every_ms)

    def renewed(self, at_ms: int) -> None:
        """The held leases were renewed at ``at_ms``: the fence may rise up to what they allow."""
        self._renewed_at = at_ms

    def may_send(self) -> bool:
        """Whether this node's liveness is proven (always without a liveness port) and its
        leases are confirmed since it was last lost."""
        return not self.suspended and (self._liveness is None or self._liveness.may_send())

    async def wait(self, now: int, meanwhile: Callable[[int], None]) -> None:
        """A fire is due beyond the committed fence (or liveness is not proven): run
        ``meanwhile`` (the caller's lease checks), then wait until the fence is raised or for
        one ``fence_every_ms``."""
        if not self.may_send():
            log.warning("liveness not proven recently (or the leases not confirmed since); fires wait for it")
        elif self.committed_ms:  # (not the first fence, at start)
            log.warning("send fence %s not raised in time; fires wait for it", iso_ms(self.committed_ms))
        meanwhile(now)
        fut = self._raised = asyncio.get_running_loop().create_future()
        handle = self._timers.call_at_ms(now + self._config.fence_every_ms,
                                         lambda: None if fut.done() else fut.set_result(None))
        try:
            await fut
        finally:
            handle.cancel()
