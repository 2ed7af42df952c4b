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
* Mailboxes are keyed by (appname, address key): the same ``pull://`` name polled with two
  appnames is two mailboxes that never meet. A call names its group's appname (a call
  without one is refused) and goes only to that appname's mailbox; an answer counts only
  for a call taken by a poll of the same appname and address, and call ids are random
  64-bit numbers. So a token of group A never receives, answers nor blocks group B's
  calls, whether B's executor is polling or not, and nothing tells A that B's address exists.
* Memory is bounded: at most ``max_queued`` calls wait per executor (more fail at once as
  unreachable, "backlog full"), a poll takes at most ``max_take`` calls, an appname has at
  most ``max_boxes`` mailboxes and ``max_polls`` waiting polls (``max_polls_per_box`` per
  address; beyond these a poll is refused with :class:`PullLimit`; the global token's polls
  count under one shared budget), and mailboxes whose poll ended more than ``forget_ms`` ago
  are dropped (oldest first, in O(1) per mailbox, at most ``_FORGET_STEP`` per poll).
"""

from __future__ import annotations

import asyncio
import inspect
import secrets
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from jobring.errors import JobringError
from jobring.http1.client import HttpError

MAX_BOXES_PER_APP = 1_000
MAX_POLLS_PER_APP = 1_000
MAX_POLLS_PER_BOX = 2
_FORGET_STEP = 256
_IDS_AT_ONCE = 512


class PullCallError(HttpError):
    """A pull call that got no answer (``timeout``: it may have been delivered)."""


class PullLimit(JobringError):
    """A poll refused because its appname is at one of the hub's limits."""


@dataclass(slots=True)
class PullCall:
    id: int
    path: str
    body: bytes
    taken: bool = False  # by a poll of its mailbox: only then may an answer come


@dataclass(slots=True)
class _Pending:
    box: tuple[str, str]  # (appname, address key) of the mailbox the call was queued in
    call: PullCall
    future: asyncio.Future[bytes]


@dataclass(slots=True)
class _Mailbox:
    app_name: str
    quota: str  # whose limits it counts under: its appname, or "" for the global token's
    alive_until_ms: int
    queue: deque[PullCall] = field(default_factory=deque)
    waiter: asyncio.Future[None] | None = None
    polls: int = 0  # polls of this executor being answered now
    waiting: int = 0  # of them, those waiting (long polls)


@dataclass(frozen=True, slots=True)
class PulledExecutor:
    address: str
    app_name: str
    queued: int
    alive: bool


class PullHub:
    """The pull executors' mailboxes on this node (one per appname and ``pull://`` address key)."""

    def __init__(
        self, now_ms: Callable[[], int], *, grace_ms: int = 5_000, max_queued: int = 10_000,
        max_take: int = 1_000, forget_ms: int = 600_000, max_boxes: int = MAX_BOXES_PER_APP,
        max_polls: int = MAX_POLLS_PER_APP, max_polls_per_box: int = MAX_POLLS_PER_BOX,
    ) -> None:
        self._now_ms = now_ms
        self._grace_ms = grace_ms
        self._max_queued = max_queued
        self._max_take = max_take
        self._forget_ms = forget_ms
        self._max_boxes = max_boxes
        self._max_polls = max_polls
        self._max_polls_per_box = max_polls_per_box
        # Ordered by the end of their last poll (moved to the end then): the idle ones to
        # forget are at the front, so forgetting never scans the live ones.
        self._boxes: OrderedDict[tuple[str, str], _Mailbox] = OrderedDict()
        self._boxes_of: dict[str, int] = {}  # quota -> its mailboxes
        self._waiting_of: dict[str, int] = {}  # quota -> its waiting polls
        self._pending: dict[int, _Pending] = {}
        self._ids: list[int] = []  # random call ids not given out yet
        self._closing = False

    def release(self) -> None:
        """The node stops: waiting polls return now, later ones do not wait (the server's
        graceful stop would otherwise wait for every long poll)."""
        self._closing = True
        for box in self._boxes.values():
            if box.waiter is not None and not box.waiter.done():
                box.waiter.set_result(None)

    # -- the admin's side: calls ----------------------------------------------------------

    def alive(self, key: str, app_name: str) -> bool:
        return self._alive(self._boxes.get((app_name, key)))

    def _alive(self, box: _Mailbox | None) -> bool:
        return box is not None and (box.polls > 0 or box.alive_until_ms >= self._now_ms())

    def executors(self) -> list[PulledExecutor]:
        """The executors that polled this node (for status pages and tests)."""
        return [PulledExecutor(k, app, len(b.queue), self._alive(b)) for (app, k), b in self._boxes.items()]

    def live_keys(self, app_name: str, scheme: str) -> list[str]:
        """The address keys of ``app_name``'s executors at ``scheme://`` addresses with a live
        poll on this node (broker executors: any of them may have taken a run)."""
        return [k for (app, k), b in self._boxes.items()
                if app == app_name and k.startswith(scheme + "://") and self._alive(b)]

    def send(self, key: str, path: str, body: bytes, app_name: str | None, timeout_s: float
             ) -> Awaitable[bytes]:
        """Queue a call for the executor of ``app_name`` at address key ``key``; the awaitable
        gives its answer's bytes or raises :class:`PullCallError`. The check and the queueing
        happen now (a caller may rely on the order of its calls)."""
        if not app_name:
            # Which group the call is for decides which mailbox may take it: never guessed.
            return _failed(PullCallError("PullNoAppname", "a call to a pull executor must name its group's "
                                         "appname", timeout=False))
        box = self._boxes.get((app_name, key))
        if box is None or not self._alive(box):
            return _failed(PullCallError("PullNoPoll", "no live poll of this executor on this admin node",
                                         timeout=False))
        if len(box.queue) >= self._max_queued:
            return _failed(PullCallError("PullBacklogFull", f"{self._max_queued} calls already wait for "
                                         "this executor's poll", timeout=False))
        call = PullCall(self._new_id(), path, body)
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._pending[call.id] = _Pending((app_name, key), call, future)
        box.queue.append(call)
        if box.waiter is not None and not box.waiter.done():
            box.waiter.set_result(None)
        return self._answer(box, call, future, timeout_s)

    def _new_id(self) -> int:
        # Random, so an id seen or guessed says nothing about other calls; drawn from the
        # system's generator 512 at a time (not a system call per call).
        while True:
            if not self._ids:
                raw = secrets.token_bytes(8 * _IDS_AT_ONCE)
                self._ids = [int.from_bytes(raw[i:i + 8], "big") >> 1 for i in range(0, len(raw), 8)]
            call_id = self._ids.pop()
            if call_id and call_id not in self._pending:
                return call_id

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

    def answer(self, key: str, app_name: str, answers: Iterable[tuple[int, bytes]]) -> int:
        """Resolve the calls answered by the executor of ``app_name`` at ``key``; an id of a
        call not taken by a poll of that mailbox (another executor, another appname, unknown,
        given up) is ignored, silently. Returns how many were taken."""
        taken = 0
        for call_id, raw in answers:
            entry = self._pending.get(call_id)
            if (entry is None or entry.box != (app_name, key) or not entry.call.taken
                    or entry.future.done()):
                continue
            entry.future.set_result(raw)
            taken += 1
        return taken

    async def poll(self, key: str, app_name: str, wait_ms: int, gone: Awaitable[object] | None = None,
                   quota: str | None = None, *, leaving: bool = False) -> list[PullCall]:
        """The calls for the executor of ``app_name`` (already checked against the token) at
        ``key``, waiting up to ``wait_ms`` for one; returns early, empty, when ``gone``
        completes (the poll's connection closed) or a newer poll arrives. Raises
        :class:`PullLimit` (before anything changes) when the appname is at a limit. ``quota``
        names whose limits a new mailbox counts under (default: the appname; the global
        token's polls share one, ``""``, whatever appnames they use). ``leaving``: the
        executor's last request as it stops (no wait): it takes nothing, and unless another
        poll of it is in progress the mailbox is not alive from now on."""
        now = self._now_ms()
        self._forget(now)
        ident = (app_name, key)
        box = self._boxes.get(ident)
        waits = wait_ms > 0 and not self._closing
        quota = (app_name if quota is None else quota) if box is None else box.quota
        refused = self._over_limit(quota, app_name, box, waits)
        if refused is not None:
            if inspect.iscoroutine(gone):
                gone.close()
            raise PullLimit(refused)
        if box is None:
            box = self._boxes[ident] = _Mailbox(app_name, quota, now + self._grace_ms)
            self._boxes_of[quota] = self._boxes_of.get(quota, 0) + 1
        box.polls += 1
        closed = False
        try:
            if not box.queue and waits:
                closed = await self._wait_for_call(box, wait_ms, gone)
                gone = None
            count = 0 if closed or leaving else min(len(box.queue), self._max_take)
            taken = [box.queue.popleft() for _ in range(count)]
            for call in taken:
                call.taken = True
        finally:
            if inspect.iscoroutine(gone):
                gone.close()  # not watched: this poll did not wait
            box.polls -= 1
            box.alive_until_ms = self._now_ms() + (0 if closed or leaving else self._grace_ms)
            if self._boxes.get(ident) is box:
                self._boxes.move_to_end(ident)
        if (closed or leaving) and box.polls == 0:
            self._drop_queue(box)  # the executor left: what waits was never delivered
        return taken

    def _over_limit(self, quota: str, app_name: str, box: _Mailbox | None, waits: bool) -> str | None:
        """Why a poll of ``app_name`` (at mailbox ``box``, None for a new one) is refused."""
        if box is None and self._boxes_of.get(quota, 0) >= self._max_boxes:
            return f"appname {app_name!r} already has {self._max_boxes} pull executor addresses polling " \
                   "this admin node"
        if waits and box is not None and box.waiting >= self._max_polls_per_box:
            return f"{self._max_polls_per_box} polls of this address already wait"
        if waits and self._waiting_of.get(quota, 0) >= self._max_polls:
            return f"appname {app_name!r} already has {self._max_polls} polls waiting on this admin node"
        return None

    async def _wait_for_call(self, box: _Mailbox, wait_ms: int, gone: Awaitable[object] | None) -> bool:
        """A long poll's wait; True when its connection closed."""
        if box.waiter is not None and not box.waiter.done():
            box.waiter.set_result(None)  # one waiting poll per executor: the newest
        waiter = box.waiter = asyncio.get_running_loop().create_future()
        box.waiting += 1
        self._waiting_of[box.quota] = self._waiting_of.get(box.quota, 0) + 1
        try:
            closed = await self._wait(waiter, wait_ms, gone)
        finally:
            box.waiting -= 1
            self._waiting_of[box.quota] -= 1
            if not self._waiting_of[box.quota]:
                del self._waiting_of[box.quota]
        if not closed:
            await asyncio.sleep(0)  # woken by a call: those sent in the same step come along
        if box.waiter is waiter:
            box.waiter = None
        return closed

    def _drop_queue(self, box: _Mailbox) -> None:
        box.alive_until_ms = self._now_ms() - 1
        while box.queue:
            entry = self._pending.pop(box.queue.popleft().id, None)
            if entry is not None and not entry.future.done():
                entry.future.set_exception(PullCallError(
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
        """Drop the mailboxes idle for ``forget_ms``, from the front of the order (those
        whose poll ended longest ago); stops at the first one still within its time, and after
        ``_FORGET_STEP`` (the rest go on later polls: no poll pays for a mass expiry)."""
        for _ in range(_FORGET_STEP):
            if not self._boxes:
                return
            ident, box = next(iter(self._boxes.items()))
            if box.alive_until_ms + self._forget_ms >= now:
                return
            if box.polls or box.queue:
                self._boxes.move_to_end(ident)  # in use after all: its poll's end moves it again
                return
            del self._boxes[ident]
            left = self._boxes_of[box.quota] - 1
            if left:
                self._boxes_of[box.quota] = left
            else:
                del self._boxes_of[box.quota]


def _failed(error: PullCallError) -> Awaitable[bytes]:
    async def fail() -> bytes:
        raise error
    return fail()
