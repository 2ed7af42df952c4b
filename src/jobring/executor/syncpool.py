"""The threads that run sync handlers, and the hand-back of their outcomes to the event loop.

``ThreadPoolExecutor`` plus ``loop.run_in_executor`` costs, per call, a concurrent Future (a
Condition and its lock, notified on completion), a wrapper object, a semaphore probe and one
loop wake-up (a self-pipe write and a loop iteration). Here a call is one ``SimpleQueue.put``
and its outcome one deque append; a pool thread wakes the loop only when no wake-up is pending,
so a burst of finished calls costs one wake-up.

Threads are started on demand up to ``max_threads`` and then kept. They are daemon threads: a
handler that never returns does not hold up the process's exit (its run was reported when it
was killed or timed out).
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["SyncPool"]

T = TypeVar("T")
_Work = tuple["asyncio.Future[Any]", Callable[..., Any], tuple[Any, ...]]


class SyncPool:
    """Runs functions on pool threads; their results come back as event-loop futures."""

    def __init__(self, max_threads: int, name_prefix: str) -> None:
        if max_threads < 1:
            raise ValueError("max_threads must be at least 1")
        self._max = max_threads
        self._prefix = name_prefix
        self._work: queue.SimpleQueue[_Work | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._idle = 0  # threads that will take the next call without a new thread (as TPE's semaphore)
        self._lock = threading.Lock()
        self._done: deque[tuple[asyncio.Future[Any], bool, Any]] = deque()
        self._wake_pending = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    @property
    def thread_count(self) -> int:
        return len(self._threads)

    @property
    def waiting(self) -> int:
        """Calls submitted that no pool thread has taken yet (a call just submitted to an idle
        thread counts until that thread takes it)."""
        return self._work.qsize()  # O(1), no lock: the queue keeps its own count

    def submit(self, loop: asyncio.AbstractEventLoop, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """Run ``fn(*args)`` on a pool thread; call from the event loop."""
        if self._closed:
            raise RuntimeError("the sync pool is shut down")
        self._loop = loop
        future: asyncio.Future[T] = loop.create_future()
        self._work.put((future, fn, args))
        with self._lock:
            if self._idle:
                self._idle -= 1
                return future
            start = len(self._threads) < self._max
            if start:
                thread = threading.Thread(target=self._run, name=f"{self._prefix}_{len(self._threads)}",
                                          daemon=True)
                self._threads.append(thread)
        if start:
            thread.start()
        return future

    def _run(self) -> None:
        work = self._work
        while True:
            item = work.get()
            if item is None:
                return
            future, fn, args = item
            try:
                outcome = (future, True, fn(*args))
            except BaseException as exc:  # handed to the loop: the run's supervisor reads it
                outcome = (future, False, exc)
            del item, fn, args  # drop references before waiting for the next call
            with self._lock:  # idle before the outcome wakes the loop, which may submit at once
                self._idle += 1
            self._finished(outcome)
            del outcome

    def _finished(self, outcome: tuple[asyncio.Future[Any], bool, Any]) -> None:
        # Append, then check the flag: the loop clears the flag before draining, so no
        # finished call is left behind.
        self._done.append(outcome)
        if not self._wake_pending:
            self._wake_pending = True
            loop = self._loop
            if loop is not None and not loop.is_closed():
                # The loop may close meanwhile (RuntimeError): nobody waits for the outcome then.
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(self._deliver)

    def _deliver(self) -> None:
        self._wake_pending = False
        done = self._done
        while done:
            future, ok, value = done.popleft()
            if future.done():
                continue  # the run was killed or timed out meanwhile
            if ok:
                future.set_result(value)
            elif isinstance(value, StopIteration):  # a future refuses it (it would end a generator)
                future.set_exception(RuntimeError(f"handler raised {value!r}"))
            else:
                future.set_exception(value)

    def shutdown(self) -> None:
        """Take no more calls; calls not started are dropped (their runs are reported by the
        caller), running ones finish on their own; idle threads end."""
        self._closed = True
        while True:
            try:
                item = self._work.get_nowait()
            except queue.Empty:
                break
            if item is not None and not item[0].done():
                item[0].cancel()
        for _ in self._threads:
            self._work.put(None)
