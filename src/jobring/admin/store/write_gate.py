"""One writer at a time per SQLite database in this process, handed over in a fair order.

SQLite has one write lock per database. Writers that find it taken sleep in SQLite's busy
handler and poll (sleeps growing to 100 ms): nobody queues, so a writer that comes back often
(the sub-task writes of a large map) keeps taking the lock while another (the scheduler
recording a fire) sleeps through its turns, seconds at times (bench/RESULTS.md, issue 23).

The gate queues this process's writers before they begin (``BEGIN IMMEDIATE``), so the lock
is almost always free when a writer reaches SQLite, and hands the turn over explicitly: to the
oldest waiting ordinary write first, then to the oldest waiting bulk write (``bulk=True``:
sub-task writes, which come in floods and are not due at an instant). Ordinary writes thus
wait for at most the write in progress; bulk writes wait for each other in arrival order.
Writers of other processes on the same file still meet this process's one writer in
SQLite's busy handler, as before.

The wait is bounded (``TimeoutError``, transient for callers: ``errors.is_transient``) like
SQLite's own ``busy_timeout``. A gate is shared by every engine of the process opened on the
same database file; it is created on first use, outside any event loop binding.
"""

from __future__ import annotations

import asyncio
import weakref
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

__all__ = ["WriteGate", "gate_for"]


class WriteGate:
    """The turn to write, ordinary writes before bulk ones, each kind first come first served."""

    def __init__(self) -> None:
        self._held = False
        self._ordinary: deque[asyncio.Future[None]] = deque()
        self._bulk: deque[asyncio.Future[None]] = deque()

    @property
    def waiting(self) -> int:
        """Writers queued for the turn (for tests and metrics)."""
        return len(self._ordinary) + len(self._bulk)

    @asynccontextmanager
    async def turn(self, *, bulk: bool = False, timeout_s: float = 10.0) -> AsyncIterator[None]:
        """Hold the turn for the body; TimeoutError after waiting ``timeout_s``."""
        await self._acquire(bulk, timeout_s)
        try:
            yield
        finally:
            self._release()

    async def _acquire(self, bulk: bool, timeout_s: float) -> None:
        if not self._held and not self._ordinary and not self._bulk:
            self._held = True
            return
        queue = self._bulk if bulk else self._ordinary
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue.append(waiter)
        try:
            async with asyncio.timeout(timeout_s):
                await waiter
        except BaseException as exc:
            if waiter.done() and not waiter.cancelled():
                self._release()  # handed over as this writer gave up: to the next one
            else:
                waiter.cancel()
                queue.remove(waiter)
            if isinstance(exc, TimeoutError):
                raise TimeoutError(f"waited over {timeout_s:g} s for this process's turn to write "
                                   "to the SQLite database") from None
            raise

    def _release(self) -> None:
        for queue in (self._ordinary, self._bulk):
            while queue:
                waiter = queue.popleft()
                if not waiter.done():
                    waiter.set_result(None)  # the turn passes on: ``_held`` stays True
                    return
        self._held = False


_GATES: weakref.WeakValueDictionary[str, WriteGate] = weakref.WeakValueDictionary()


def gate_for(database: str) -> WriteGate:
    """The gate of ``database`` (a file path, or a name unique to one in-memory database)."""
    gate = _GATES.get(database)
    if gate is None:
        gate = WriteGate()
        _GATES[database] = gate
    return gate
