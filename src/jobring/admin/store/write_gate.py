"""Bulk writes to a SQLite database in this process: one at a time, and only between the others.

SQLite has one write lock per database. Writers that find it taken sleep in SQLite's busy
handler and poll (sleeps growing to 100 ms): nobody queues, so the writers that come back
often (the sub-task writes of a large map: map calls, claims, result batches) kept taking
the lock while others slept through their turns: the scheduler recording a fire waited
seconds, and a map call outlived its executor's timeout (bench/RESULTS.md, issue 23).

The gate orders the bulk writes (``bulk=True``), before they begin: they take turns first
come first served, one at a time, and a bulk write does not begin while an ordinary write
of this process is queued or in progress (it waits up to ``yield_s`` for them to end, so a
steady stream of ordinary writes cannot stop the bulk ones). Ordinary writes (the
scheduler's, a callback's, a workflow step's) take turns among themselves the same way, in
their own queue: the lock passes from one to the next as the first ends, where in SQLite's
busy handler the next slept 1, 2, 5, 10 ... ms between tries (a workflow node start met
another write of its admin in ~1 in 7 starts, and waited over 10 ms in ~1 in 60: its p99;
bench/RESULTS.md, issue 21, branch wfpath). They still meet at most one bulk write, short by
design (``Db.bulk_rows``), and other processes' writes in the busy handler.

The wait for the turn is bounded (``TimeoutError``, transient for callers:
``errors.is_transient``) like SQLite's own ``busy_timeout``. A gate is shared by every engine
of the process opened on the same database file; it is created on first use, bound to no
event loop until a writer waits.
"""

from __future__ import annotations

import asyncio
import weakref
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

__all__ = ["WriteGate", "gate_for"]


class _Turns:
    """One writer at a time, the others queued first come first served."""

    def __init__(self, what: str) -> None:
        self._what = what
        self._held = False
        self.queue: deque[asyncio.Future[None]] = deque()

    async def acquire(self, timeout_s: float) -> None:
        if not self._held and not self.queue:
            self._held = True
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.queue.append(waiter)
        try:
            async with asyncio.timeout(timeout_s):
                await waiter
        except BaseException as exc:
            if waiter.done() and not waiter.cancelled():
                self.release()  # handed over as this writer gave up: to the next one
            else:
                waiter.cancel()
                # A release may have passed over the cancelled waiter already (the waiter is
                # cancelled with its task, which runs only later): then it is gone.
                if waiter in self.queue:
                    self.queue.remove(waiter)
            if isinstance(exc, TimeoutError):
                raise TimeoutError(f"waited over {timeout_s:g} s for this process's turn to "
                                   f"{self._what} to the SQLite database") from None
            raise

    def release(self) -> None:
        while self.queue:
            waiter = self.queue.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the turn passes on: ``_held`` stays True
                return
        self._held = False


class WriteGate:
    """Queues the ordinary writes and, apart, the bulk ones (see the module docstring)."""

    def __init__(self, *, yield_s: float = 1.0) -> None:
        self.yield_s = yield_s
        self._ordinary = 0  # queued or in progress
        self._quiet: list[asyncio.Future[None]] = []  # bulk writers waiting for no ordinary write
        self._bulk = _Turns("write in bulk")
        self._plain = _Turns("write")

    @property
    def waiting(self) -> int:
        """Bulk writers queued for their turn (for tests and metrics)."""
        return len(self._bulk.queue)

    @property
    def waiting_ordinary(self) -> int:
        """Ordinary writers queued for their turn (for tests and metrics)."""
        return len(self._plain.queue)

    @asynccontextmanager
    async def turn(self, *, bulk: bool = False, timeout_s: float = 10.0) -> AsyncIterator[None]:
        """Hold the body as an ordinary write or a bulk one, each queued for its turn
        (TimeoutError after waiting ``timeout_s``)."""
        if not bulk:
            self._ordinary += 1
            try:
                await self._plain.acquire(timeout_s)
                try:
                    yield
                finally:
                    self._plain.release()
            finally:
                self._ordinary -= 1
                if not self._ordinary:
                    self._wake_quiet()
            return
        await self._bulk.acquire(timeout_s)
        try:
            await self._after_ordinary()
            yield
        finally:
            self._bulk.release()

    async def _after_ordinary(self) -> None:
        """Let the ordinary writes in progress end first (at most ``yield_s``)."""
        if not self._ordinary:
            return
        quiet: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._quiet.append(quiet)
        try:
            await asyncio.wait_for(asyncio.shield(quiet), self.yield_s)
        except TimeoutError:
            pass  # a steady stream of ordinary writes: the bulk write goes on meanwhile
        finally:
            if quiet in self._quiet:
                self._quiet.remove(quiet)

    def _wake_quiet(self) -> None:
        waiting, self._quiet = self._quiet, []
        for quiet in waiting:
            if not quiet.done():
                quiet.set_result(None)


_GATES: weakref.WeakValueDictionary[str, WriteGate] = weakref.WeakValueDictionary()


def gate_for(database: str) -> WriteGate:
    """The gate of ``database`` (a file path, or a name unique to one in-memory database)."""
    gate = _GATES.get(database)
    if gate is None:
        gate = WriteGate()
        _GATES[database] = gate
    return gate
