"""Pull dispatch on one admin node: the mailboxes of the pull executors polling this node.

A pull executor (``pull://<name>/``) opens no port: it long-polls ``api/pull`` on the admin
with its group's executor token. Every call the admin would POST to a push executor (/run,
/kill, /log, /beat, /idleBeat, /received) is put in the executor's mailbox here instead; the
poll takes it, the executor answers it on its next ``api/pull`` request, and the answer
resolves the caller's wait. Results still come back through ``api/callback``.

Guarantees (docs/dispatch.md, "Pull mode"):

* A call is accepted only while the executor has a live poll on this node (one started at
  most ``wait_ms + grace_ms`` ago, or answered at most ``grace_ms`` ago); otherwise it fails
  at once as *unreachable*, and was certainly not delivered (routing fails over, the
  trigger is retried or failed as for a push executor that refuses connections).
* A call taken by a poll and not answered within the caller's timeout is *timed out*: it
  may have reached the executor, exactly as a push call whose answer never came (the
  lost/unsure rules apply; a jobring executor refuses a run id twice).
* A call still queued when its caller gives up is removed: never delivered late.
* A mailbox belongs to the appname whose token opened it: a call for another appname's
  group fails, and an answer counts only for a call of the mailbox that polls (a token of
  group A never receives nor answers group B's calls).
* Memory is bounded: at most ``max_queued`` calls wait per executor (more fail at once as
  unreachable, "backlog full"), a poll takes at most ``max_take`` calls, and mailboxes whose
  poll ended more than ``forget_ms`` ago are dropped.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from jobring.admin.scheduler.http1 import HttpError


class PullCallError(HttpError):
    """A pull call that got no answer (``timeout``: it may have been delivered)."""


@dataclass(slots=True)
class PullCall:
    id: int
    path: str
    body: bytes


@dataclass(slots=True)
class _Mailbox:
    app_name: str
    alive_until_ms: int
    queue: deque[PullCall] = field(default_factory=deque)
    waiter: asyncio.Future[None] | None = None
    polls: int = 0  # polls of this executor being answered now


@dataclass(frozen=True, slots=True)
class PulledExecutor:
    address: str
    app_name: str
    queued: int
    alive: bool


class PullHub:
    """The pull executors' mailboxes on this node (one per ``pull://`` address key)."""

    def __init__(
        self, now_ms: Callable[[], int], *, grace_ms: int = 5_000, max_queued: int = 10_000,
        max_take: int = 1_000, forget_ms: int = 600_000,
    ) -> None:
        self._now_ms = now_ms
        self._grace_ms = grace_ms
        self._max_queued = max_queued
        self._max_take = max_take
        self._forget_ms = forget_ms
        self._boxes: dict[str, _Mailbox] = {}
        # call id -> (address key, the caller's future for the answer's bytes)
        self._pending: dict[int, tuple[str, asyncio.Future[bytes]]] = {}
        self._ids = itertools.count(1)
        self._closing = False

    def release(self) -> None:
        """The node stops: waiting polls return now, later ones do not wait (the server's
        graceful stop would otherwise wait for every long poll)."""
        self._closing = True
        for box in self._boxes.values():
            if box.waiter is not None and not box.waiter.done():
                box.waiter.set_result(None)

    # -- the admin's side: calls ----------------------------------------------------------

    def alive(self, key: str) -> bool:
        box = self._boxes.get(key)
        return box is not None and (box.polls > 0 or box.alive_until_ms >= self._now_ms())

    def executors(self) -> list[PulledExecutor]:
        """The executors that polled this node (for status pages and tests)."""
        return [PulledExecutor(k, b.app_name, len(b.queue), self.alive(k)) for k, b in self._boxes.items()]

    def send(self, key: str, path: str, body: bytes, app_name: str | None, timeout_s: float
             ) -> Awaitable[bytes]:
        """Queue a call for the executor at address key ``key``; the awaitable gives its
        answer's bytes or raises :class:`PullCallError`. The check and the queueing happen
        now (a caller may rely on the order of its calls)."""
        box = self._boxes.get(key)
        if box is None or not self.alive(key):
            return _failed(PullCallError("PullNoPoll", "no live poll of this executor on this admin node",
                                         timeout=False))
        if app_name is not None and app_name != box.app_name:
            return _failed(PullCallError(
                "PullWrongGroup", f"this executor polls for appname {box.app_name!r}, not {app_name!r}",
                timeout=False))
        if len(box.queue) >= self._max_queued:
            return _failed(PullCallError("PullBacklogFull", f"{self._max_queued} calls already wait for "
                                         "this executor's poll", timeout=False))
        call = PullCall(next(self._ids), path, body)
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._pending[call.id] = (key, future)
        box.queue.append(call)
        if box.waiter is not None and not box.waiter.done():
            box.waiter.set_result(None)
        return self._answer(box, call, future, timeout_s)

    async def _answer(self, box: _Mailbox, call: PullCall, future: asyncio.Future[bytes], timeout_s: float
                      ) -> bytes:
        # A timer rather than wait_for: no task per call on the dispatch path.
        timer = asyncio.get_running_loop().call_later(timeout_s, self._expire, box, call, future, timeout_s)
        try:
            return await future
        except asyncio.CancelledError:
            if call in box.queue:
                box.queue.remove(call)  # the caller is gone: nobody would read the answer
            raise
        finally:
            timer.cancel()
            self._pending.pop(call.id, None)

    @staticmethod
    def _expire(box: _Mailbox, call: PullCall, future: asyncio.Future[bytes], timeout_s: float) -> None:
        if future.done():
            return
        if call in box.queue:
            box.queue.remove(call)  # never taken: certainly not delivered
            future.set_exception(PullCallError(
                "PullNotTaken", f"no poll took the call within {timeout_s:g} s", timeout=False))
        else:
            future.set_exception(PullCallError(
                "PullTimeout", f"no answer within {timeout_s:g} s", timeout=True))

    # -- the executor's side: polls ---------------------------------------------------------

    def owner(self, key: str) -> str | None:
        """The appname of a live mailbox at ``key`` (a poll for another appname is refused)."""
        box = self._boxes.get(key)
        return box.app_name if box is not None and self.alive(key) else None

    def answer(self, key: str, answers: Iterable[tuple[int, bytes]]) -> int:
        """Resolve the calls answered by the executor at ``key``; an id of another mailbox's
        call (another executor, another group) or of a call given up is ignored. Returns how
        many were taken."""
        taken = 0
        for call_id, raw in answers:
            entry = self._pending.get(call_id)
            if entry is None or entry[0] != key or entry[1].done():
                continue
            entry[1].set_result(raw)
            taken += 1
        return taken

    async def poll(self, key: str, app_name: str, wait_ms: int, gone: Awaitable[object] | None = None
                   ) -> list[PullCall]:
        """The calls for the executor at ``key`` (appname ``app_name``, already checked against
        the token and :meth:`owner`), waiting up to ``wait_ms`` for one; returns early, empty,
        when ``gone`` completes (the poll's connection closed) or a newer poll arrives."""
        now = self._now_ms()
        self._forget(now)
        box = self._boxes.get(key)
        if box is None or box.app_name != app_name:
            box = self._boxes[key] = _Mailbox(app_name, now + self._grace_ms)
        box.polls += 1
        closed = False
        try:
            if not box.queue and wait_ms > 0 and not self._closing:
                if box.waiter is not None and not box.waiter.done():
                    box.waiter.set_result(None)  # one waiting poll per executor: the newest
                waiter = box.waiter = asyncio.get_running_loop().create_future()
                closed = await self._wait(waiter, wait_ms, gone)
                gone = None
                if not closed:
                    await asyncio.sleep(0)  # woken by a call: those sent in the same step come along
                if box.waiter is waiter:
                    box.waiter = None
            count = 0 if closed else min(len(box.queue), self._max_take)
            taken = [box.queue.popleft() for _ in range(count)]
        finally:
            if inspect.iscoroutine(gone):
                gone.close()  # not watched: this poll did not wait
            box.polls -= 1
            box.alive_until_ms = self._now_ms() + (0 if closed else self._grace_ms)
        if closed and box.polls == 0:
            self._drop_queue(box)  # the executor left: what waits was never delivered
        return taken

    def _drop_queue(self, box: _Mailbox) -> None:
        box.alive_until_ms = self._now_ms() - 1
        while box.queue:
            entry = self._pending.pop(box.queue.popleft().id, None)
            if entry is not None and not entry[1].done():
                entry[1].set_exception(PullCallError(
                    "PullNoPoll", "the executor's poll closed before it took the call", timeout=False))

    @staticmethod
    async def _wait(waiter: asyncio.Future[None], wait_ms: int, gone: Awaitable[object] | None) -> bool:
        """Wait for a call; True when ``gone`` completed first (the poll's connection closed)."""
        watch: asyncio.Future[Any] | None = asyncio.ensure_future(gone) if gone is not None else None
        watched: list[asyncio.Future[Any]] = [waiter] if watch is None else [waiter, watch]
        try:
            await asyncio.wait(watched, timeout=wait_ms / 1000, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if watch is not None and not watch.done():
                watch.cancel()
        return watch is not None and watch.done() and not watch.cancelled() and not waiter.done()

    def _forget(self, now: int) -> None:
        if len(self._boxes) < 64:
            return
        old = [k for k, b in self._boxes.items()
               if b.polls == 0 and b.alive_until_ms + self._forget_ms < now and not b.queue]
        for k in old:
            del self._boxes[k]


def _failed(error: PullCallError) -> Awaitable[bytes]:
    async def fail() -> bytes:
        raise error
    return fail()
