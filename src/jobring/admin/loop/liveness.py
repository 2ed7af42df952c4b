"""Fast takeover of a dead admin node's jobs, through database session locks.

Without it a dead node's jobs wait for its leases to run out (``LoopConfig.lease_ms``, 10 s)
and every fire in between is missed. With it (PostgreSQL, MariaDB/MySQL):

* **Own lock.** Each node holds a session lock named after its id on a dedicated
  connection (:class:`~jobring.admin.store.node_locks.NodeLockSession`), whose idle timeout
  is short (3 s), and pings it every 300 ms. The database releases the lock the moment the
  process dies (its socket closes) or, for a paused process, once the idle timeout passes.
* **Fence through the lock.** The node raises its send fence through that same session
  (:meth:`NodeLiveness.raise_fence`), so once its session is gone its fence never rises.
* **No stale sends.** The node sends a fire only while its last successful round trip on
  the session began less than 1 s ago (monotonic clock, well inside the idle timeout): a
  node woken from a pause sends nothing before a round trip proves its lock is still held.
  When one fails it stops sending at once, keeping its jobs, and does not claim or renew
  until it holds its lock again on a new session (then it wakes a claim cycle: its renewal
  says which jobs are still its own, and those carry on); for ``rejoin_grace_ms`` it tries
  no other node's lock (after a database restart or outage the others are reconnecting,
  not dead).
* **Dead nodes.** Every ping also reads the other nodes announced alive with a lock, and
  tries each one's lock without waiting. A lock obtained means that node's session is gone:
  the scheduling loop is woken for a claim cycle at once, which takes the jobs still leased
  to that node whatever their leases' end (:meth:`NodeLiveness.claim_dead`), marks the node
  gone (no longer a live node, nobody tries its lock again), releases its lock, and settles
  the takeover as usual (the dead node's committed fence says which recorded fires were
  never sent). Two survivors cannot both hold the lock; the claim's row locks and the run
  log's unique (job, instant) key hold as before.
* **Why it is safe.** A node sends only fires planned up to its committed fence; the
  takeover reads that fence after the node's session died, so it is final. A node that lost
  only its lock session (its pool still works) cannot raise its fence either, stops
  sending, and sends again only once it holds its lock on a new session (which no one can
  take while a survivor holds it for a takeover) and a renewal confirmed its leases. The
  leases and the lease guard stay as the safety net (e.g. on SQLite, which has no session
  locks, takeover waits for them).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from jobring.admin.store.node_locks import NodeRowLocked
from jobring.admin.store.records import JobInfo
from jobring.core.clock import Clock
from jobring.errors import JobringError

log = logging.getLogger(__name__)

T = TypeVar("T")
_CLAIM_ROUNDS = 50  # claims of claim_limit jobs each, for one takeover


class LockSession(Protocol):
    """A node's dedicated database session holding its liveness lock (see node_locks)."""

    async def acquire_own(self, now_ms: int) -> bool: ...
    async def others(self, now_ms: int) -> list[tuple[str, int]]: ...
    async def try_lock(self, key: int) -> bool: ...
    async def unlock(self, key: int) -> None: ...
    async def raise_fence(self, fence_ms: int) -> None: ...
    async def mark_gone(self, node_ids: Sequence[str]) -> None: ...
    async def close(self) -> None: ...


OpenSession = Callable[[], Awaitable[LockSession]]
ClaimOwned = Callable[[Sequence[str], int, int, int, int], Awaitable[Sequence[JobInfo]]]
"""(dead owners, now ms, window end ms, lease ms, limit) -> the jobs now leased to this node."""


class LivenessLost(JobringError):
    """This node does not hold its liveness lock (its session failed or is being reopened)."""


@dataclass(frozen=True, slots=True)
class LivenessConfig:
    # Server-side idle timeout of the lock session: a paused node loses its lock after it.
    idle_timeout_ms: int = 3_000
    ping_every_ms: int = 300
    # A node sends only while its last good round trip on the session began this recently.
    max_ping_age_ms: int = 1_000
    # One statement on the session taking longer than this counts as the session failing
    # (longer than the ping age: a slow round trip only holds fires back for a moment).
    op_timeout_ms: int = 2_000
    # After taking its lock again on a new session, a node leaves the other nodes' locks
    # alone this long: when the database restarted or was unreachable, every node lost its
    # session at once and the others are reconnecting too (alive, not dead: taking their
    # jobs over would count their unsent fires recorded ahead as perhaps sent, lost).
    rejoin_grace_ms: int = 3_000


class NodeLiveness:
    """Keeps this node's lock session and watches the other nodes' locks (the loop's
    :class:`~jobring.admin.loop.ports.Liveness` port)."""

    def __init__(
        self, open_session: OpenSession, claim_owned: ClaimOwned, clock: Clock, *,
        config: LivenessConfig | None = None, monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._open = open_session
        self._claim_owned = claim_owned
        self._clock = clock
        self._mono = monotonic
        self.config = config or LivenessConfig()
        self._session: LockSession | None = None
        self._last_ok = 0.0
        self._dead: dict[str, int] = {}  # other nodes whose locks this session holds
        self._settling: dict[str, int] = {}  # of those, the ones taken over, until settled
        self._lock = asyncio.Lock()  # one statement at a time on the session
        self._lost: Callable[[], None] = lambda: None
        self._wake: Callable[[], None] = lambda: None
        self._task: asyncio.Task[None] | None = None
        self._closing: set[asyncio.Task[None]] = set()
        self._waiting_logged = False
        self._lost_once = False
        self._quiet_until = 0.0  # monotonic: no other node's lock is tried before it
        self.takeovers = 0  # dead nodes taken over (metrics)

    def attach(self, lost: Callable[[], None], wake: Callable[[], None]) -> None:
        """``lost``: called when this node loses its lock; ``wake``: a dead node was found."""
        self._lost = lost
        self._wake = wake

    @property
    def holds(self) -> bool:
        return self._session is not None

    def may_send(self) -> bool:
        """True while this node holds its lock and its last good round trip is recent."""
        return (self._session is not None
                and (self._mono() - self._last_ok) * 1000 < self.config.max_ping_age_ms)

    async def start(self) -> None:
        """Take this node's lock (one try now; the keeper retries), then keep it."""
        await self.tick()
        self._task = asyncio.create_task(self._run(), name="jobring-liveness")

    async def stop(self) -> None:
        """Stop watching and end the session (the database releases this node's lock)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        session, self._session = self._session, None
        if session is not None:
            await self._close(session)
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.config.ping_every_ms / 1000)
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("liveness round failed")

    async def tick(self) -> None:
        """One round: (re)take this node's lock, or ping and try the other nodes' locks."""
        if self._session is None:
            await self._connect()
            return
        found: list[str] = []
        async with self._lock:
            session = self._session
            if session is None:
                return
            started = self._mono()
            try:
                others = await self._timed(session.others(self._clock.now_ms()))
                self._last_ok = max(self._last_ok, started)
                if started < self._quiet_until:
                    others = []
                for node_id, key in others:
                    if node_id not in self._dead and await self._timed(session.try_lock(key)):
                        self._dead[node_id] = key
                        found.append(node_id)
            except Exception as exc:
                self._lose(session, exc)
                return
        if found:
            log.warning("admin nodes %s are gone (their session locks are free): taking their jobs over",
                        found)
            self._wake()

    async def raise_fence(self, fence_ms: int) -> None:
        """Commit this node's send fence through its lock session (LivenessLost without one)."""
        async with self._lock:
            session = self._session
            if session is None:
                raise LivenessLost("no liveness lock: the send fence is not raised")
            started = self._mono()
            try:
                await self._timed(session.raise_fence(fence_ms))
            except Exception as exc:
                self._lose(session, exc)
                raise
            self._last_ok = max(self._last_ok, started)

    async def claim_dead(
        self, now_ms: int, window_end_ms: int, lease_ms: int, limit: int
    ) -> Sequence[JobInfo]:
        """Lease to this node every job of the nodes found dead and mark those nodes gone.
        Their locks stay held until :meth:`release_dead`, after the caller has settled the
        takeover: until then a node that was only paused cannot take its lock back and raise
        its fence under the taker's feet. Raises when that fails (tried again)."""
        if not self._dead:
            return []
        async with self._lock:
            session = self._session
            dead = dict(self._dead)
            if session is None or not dead:
                return []
            started = self._mono()
            try:
                await self._timed(session.mark_gone(list(dead)))
            except NodeRowLocked:
                # A node paused inside a write of its own row: the session answered (it is
                # fine); the takeover is tried again at the next cycle, this one goes on.
                self._last_ok = max(self._last_ok, started)
                log.warning("the rows of dead admin nodes %s are locked by another transaction (a "
                            "paused node's open write?); taking their jobs over at a later cycle",
                            sorted(dead))
                return []
            except Exception as exc:
                self._lose(session, exc)
                raise
        jobs: list[JobInfo] = []
        for _ in range(_CLAIM_ROUNDS):
            batch = await self._claim_owned(list(dead), now_ms, window_end_ms, lease_ms, limit)
            jobs += batch
            if len(batch) < limit:
                break
        else:
            log.warning("dead nodes %s still hold jobs after %d claims of %d; the rest wait for "
                        "their leases", sorted(dead), _CLAIM_ROUNDS, limit)
        self._settling.update(dead)
        log.warning("took over %d jobs of dead admin nodes %s", len(jobs), sorted(dead))
        return jobs

    async def release_dead(self) -> None:
        """Release the locks of the nodes taken over by :meth:`claim_dead` (call it once
        their fires are settled)."""
        if not self._settling:
            return
        async with self._lock:
            session = self._session
            settled, self._settling = self._settling, {}
            if session is None:
                return  # that session is gone: the server released its locks
            try:
                for node_id, key in settled.items():
                    await self._timed(session.unlock(key))
                    self._dead.pop(node_id, None)
            except Exception as exc:
                self._lose(session, exc)
        self.takeovers += len(settled)

    async def _connect(self) -> None:
        try:
            session = await self._timed(self._open())
        except Exception as exc:
            log.warning("cannot open the liveness lock session (%s); not scheduling until it opens", exc)
            return
        started = self._mono()
        try:
            got = await self._timed(session.acquire_own(self._clock.now_ms()))
        except Exception as exc:
            log.warning("taking the liveness lock failed (%s); retrying", exc)
            self._spawn_close(session)
            return
        if not got:
            if not self._waiting_logged:
                log.warning("this node's liveness lock is held by another session (a node taking its "
                            "jobs over, or a process with the same node id); not scheduling until it is free")
                self._waiting_logged = True
            self._spawn_close(session)
            return
        self._waiting_logged = False
        async with self._lock:
            self._session = session
            self._last_ok = started
            self._dead.clear()
            self._settling.clear()
            if self._lost_once:
                self._quiet_until = started + self.config.rejoin_grace_ms / 1000
        log.info("holding the liveness lock")
        if self._lost_once:
            self._wake()  # a claim cycle now: it confirms the held leases, then fires resume

    def _lose(self, session: LockSession, exc: BaseException) -> None:
        if self._session is not session:
            return
        log.warning("the liveness lock session failed (%s): not sending until it is back", exc)
        self._session = None
        self._lost_once = True
        self._dead.clear()  # the server released every lock of that session
        self._settling.clear()
        self._spawn_close(session)
        self._lost()

    def _spawn_close(self, session: LockSession) -> None:
        task = asyncio.get_running_loop().create_task(self._close(session))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def _close(self, session: LockSession) -> None:
        try:
            await self._timed(session.close())
        except Exception as exc:
            log.warning("closing a liveness lock session failed: %s", exc)

    async def _timed(self, work: Awaitable[T]) -> T:
        return await asyncio.wait_for(work, self.config.op_timeout_ms / 1000)
