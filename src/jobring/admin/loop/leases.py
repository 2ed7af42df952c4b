"""The lease keeper, the loop's first stage: renew, claim, take over and release jobs.

Each claim cycle renews every lease this node holds, announces the node, claims due jobs
below its fair share and settles the jobs arriving from other nodes; the result is a
:class:`Claim`, plain data the held stage (:mod:`.adoption`) applies. This stage knows
no later one: the jobs it must compare against come in as arguments, and the later stages
hand jobs back through :class:`Releases`, the narrow interface it owns.
"""

from __future__ import annotations

import logging
from collections.abc import Container, Mapping
from dataclasses import dataclass

from jobring.admin.loop.context import LoopContext
from jobring.admin.store.records import HeldJobs, JobInfo

log = logging.getLogger(__name__)


def fair_share(nodes: int, due: int) -> int:
    """How many jobs one node may hold: all of them alone, else its share plus 10 %."""
    if nodes <= 1:
        return 1 << 62
    share = -(-due // nodes)
    return share + max(1, share // 10)


@dataclass(frozen=True, slots=True)
class Claim:
    """One claim cycle's outcome, for the held stage to apply."""

    rows: list[JobInfo]  # the new or changed rows among ``ids``
    ids: set[int]  # every job whose lease this node now holds
    maybe_sent: Mapping[int, int]  # per job taken over: the last instant perhaps sent before
    allowed: int  # this node's fair share
    window_end: int  # the end of the claim window (epoch ms)


class Releases:
    """Jobs given back: any stage hands jobs over here, the leases go in the background."""

    def __init__(self, ctx: LoopContext) -> None:
        self._ctx = ctx
        self._releasing: set[int] = set()

    def __contains__(self, job_id: object) -> bool:
        """True while the job's release is on the way (it must not be adopted again)."""
        return job_id in self._releasing

    def release(self, job_ids: list[int]) -> None:
        """Give up the jobs' leases (in the background; their withdrawn fires cancelled first)."""
        # Marked at once: until the release commits, a renewal may still report these jobs
        # as held, and they must not be adopted again from it.
        self._releasing.update(job_ids)
        self._ctx.background.spawn(self._release(job_ids), "release")

    async def _release(self, job_ids: list[int]) -> None:
        try:
            # Under the lock: a release never lands between a renewal and its application.
            async with self._ctx.db_lock:
                await self._ctx.withdrawals.cancel()
                await self._ctx.store.release(job_ids)
        finally:
            self._releasing.difference_update(job_ids)


class LeaseKeeper:
    """This node's leases on jobs: the database side of each claim cycle."""

    def __init__(self, ctx: LoopContext) -> None:
        self._ctx = ctx
        self.releases = Releases(ctx)
        self.renewed_at: int | None = None  # when the held leases were last renewed

    async def renew_locked(self, now: int, known: Mapping[int, JobInfo]) -> HeldJobs:
        """Renew every lease this node holds (the caller holds the database lock): the ids
        held and the rows not in ``known`` (the held jobs' rows) or changed since. Done
        first in a cycle: whatever else fails, the held leases stay valid."""
        held = await self._ctx.store.renew(now, self._ctx.config.lease_ms, known)
        self.renewed_at = now
        return held

    async def claim_locked(self, now: int, renewed: HeldJobs, holding: Container[int]) -> Claim:
        """After :meth:`renew_locked`, under the same lock: take the jobs of dead nodes
        (liveness), announce this node, claim due jobs below its fair share and settle every
        job about to be adopted (those not in ``holding``, the held jobs)."""
        ctx = self._ctx
        config, store, liveness = ctx.config, ctx.store, ctx.liveness
        window_end = now + config.pre_read_ms
        lease_ms = config.lease_ms
        rows = list(renewed.changed)
        ids = set(renewed.ids)
        if liveness is not None:
            # Jobs of nodes found dead, whatever their leases' end (before the heartbeat,
            # which no longer counts those nodes).
            taken = await liveness.claim_dead(now, window_end, lease_ms, config.claim_limit)
            rows += taken
            ids.update(j.id for j in taken)
        nodes, due = await store.heartbeat(now, now + lease_ms, window_end)
        allowed = fair_share(nodes, due)
        room = min(config.claim_limit, allowed - len(ids))
        if room > 0:
            # Over the fair share a node only keeps what it holds; the rest is the others'.
            claimed = await store.claim(now, window_end, lease_ms, room)
            if len(claimed) == config.claim_limit:
                log.warning("claim returned the limit (%d rows); raise claim_limit", len(claimed))
            rows += claimed
            ids.update(j.id for j in claimed)
        # Every job about to be adopted is settled first: jobs claimed now, and jobs this
        # node holds but does not know (e.g. claimed by a cycle that failed after its
        # claim committed). Settling again is harmless.
        arriving = [r for r in rows if r.id not in holding and r.id not in self.releases]
        maybe_sent = await store.settle_takeover(arriving) if arriving else {}
        if liveness is not None:
            await liveness.release_dead()  # their fences were read: now final
        return Claim(rows, ids, maybe_sent, allowed, window_end)
