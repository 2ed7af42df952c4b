"""The lease keeper: claim, renew, adopt (after settling a takeover), share and release jobs.

Each claim cycle renews every lease this node holds, announces the node, claims due jobs
below its fair share, settles the jobs arriving from other nodes and applies the result to
the held set; it also guards each fire against a lease about to run out (clock skew).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from jobring.admin.loop.advance import AdvanceWriter
from jobring.admin.loop.context import LoopContext
from jobring.admin.loop.held import HeldSet
from jobring.admin.loop.timed import TimedSchedule
from jobring.admin.store.records import JobInfo
from jobring.core.enums import ScheduleType
from jobring.core.timefmt import iso_ms

log = logging.getLogger(__name__)


def fair_share(nodes: int, due: int) -> int:
    """How many jobs one node may hold: all of them alone, else its share plus 10 %."""
    if nodes <= 1:
        return 1 << 62
    share = -(-due // nodes)
    return share + max(1, share // 10)


class LeaseKeeper:
    """This node's leases on jobs, kept in step with the held set."""

    def __init__(self, ctx: LoopContext, held: HeldSet, advance: AdvanceWriter) -> None:
        self._ctx = ctx
        self._store = ctx.store
        self._timing = ctx.timing
        self._liveness = ctx.liveness
        self._held = held
        self._config = ctx.config
        self._stats = ctx.stats
        self._schedule_factory = ctx.schedule_factory
        self._admin_tz = ctx.admin_timezone
        self._advance = advance
        self._lock = ctx.db_lock
        self._releasing: set[int] = set()
        self.renewed_at: int | None = None  # when the held leases were last renewed

    async def claim_cycle(self, now: int, *, resuming: bool = False) -> int:
        """Write pending advances, renew, announce, claim, settle and adopt; shed the excess.
        Returns the number of rows new or changed. ``resuming``: the first cycle after this
        node's liveness came back; the held jobs whose leases are no longer its own (taken
        over meanwhile) are dropped before anything else is claimed."""
        window_end = now + self._config.pre_read_ms
        lease_ms = self._config.lease_ms
        async with self._lock:
            await self._advance.flush_locked()
            # Rows of fires this node will not send go before anything is (re)adopted: a job
            # dropped and adopted again (its lock session lost and regained) must find its
            # unsent instants free, not recorded (a fire at them would be a duplicate, unsent).
            try:
                await self._ctx.withdrawals.cancel()
            except Exception:
                # Kept for the next try; renewal must not wait for it. A row left over only
                # counts as perhaps sent when its job is settled (an instant lost, none doubled).
                log.exception("withdrawing fires recorded ahead failed; renewing anyway")
            # Renewal first: whatever else fails this cycle, the held leases stay valid.
            held = await self._store.renew(now, lease_ms, self._held.rows())
            self.renewed_at = now
            rows = list(held.changed)
            ids = set(held.ids)
            if resuming:
                lost = [job_id for job_id in self._held if job_id not in ids]
                if lost:
                    log.warning("%d held jobs were taken over while this node's liveness was lost; "
                                "dropping them: %s", len(lost), lost[:20])
                for job_id in lost:
                    self._held.drop(job_id)
            if self._liveness is not None:
                # Jobs of nodes found dead, whatever their leases' end (before the heartbeat,
                # which no longer counts those nodes).
                taken = await self._liveness.claim_dead(now, window_end, lease_ms, self._config.claim_limit)
                rows += taken
                ids.update(j.id for j in taken)
            nodes, due = await self._store.heartbeat(now, now + lease_ms, window_end)
            allowed = fair_share(nodes, due)
            room = min(self._config.claim_limit, allowed - len(ids))
            if room > 0:
                # Over the fair share a node only keeps what it holds; the rest is the others'.
                claimed = await self._store.claim(now, window_end, lease_ms, room)
                if len(claimed) == self._config.claim_limit:
                    log.warning("claim returned the limit (%d rows); raise claim_limit", len(claimed))
                rows += claimed
                ids.update(j.id for j in claimed)
            # Every job about to be adopted is settled first: jobs claimed now, and jobs this
            # node holds but does not know (e.g. claimed by a cycle that failed after its
            # claim committed). Settling again is harmless.
            arriving = [r for r in rows if r.id not in self._held and r.id not in self._releasing]
            maybe_sent = await self._store.settle_takeover(arriving) if arriving else {}
            if self._liveness is not None:
                await self._liveness.release_dead()  # their fences were read: now final
        if self._liveness is not None and not self._liveness.may_send():
            return len(rows)  # liveness lost meanwhile: adopt nothing
        if self._timing is not None and rows:
            await self._timing.prepare(rows)
        self._apply_claim(rows, ids, now, window_end, maybe_sent)
        self._shed_excess(allowed)
        return len(rows)

    def _apply_claim(
        self, rows: Sequence[JobInfo], held_ids: set[int], now: int, window_end: int,
        maybe_sent: Mapping[int, int],
    ) -> None:
        """Apply a claim: ``rows`` are the new or changed rows among ``held_ids``, every job
        whose lease this node now holds; ``maybe_sent`` the instants a previous holder may
        have sent last (per job taken over)."""
        lease_until = now + self._config.lease_ms
        to_release: list[int] = []
        for row in rows:
            if row.id in self._releasing:
                continue  # dropped by this node; its release is on the way
            held = self._held.get(row.id)
            if row.trigger_status != 1:
                self._held.drop(row.id)
                to_release.append(row.id)
            elif held is not None and (held.leaving or not HeldSet.changed(held, row)):
                if not held.leaving:
                    held.job = row
            else:
                if held is not None:
                    log.info("job %s changed while held; re-planning from the database", row.id)
                    self._held.drop(row.id)
                if row.trigger_next_time > window_end:
                    to_release.append(row.id)  # (edited to be) due later: for a later claim
                else:
                    self._adopt(row, now, lease_until, maybe_sent.get(row.id))
        gone, far = self._held.renew(held_ids, lease_until, window_end)
        if gone:
            # The lease is no longer ours (the job was deleted, or taken over after this
            # node failed to renew in time).
            log.info("%d held jobs are no longer leased to this node; dropping them: %s",
                     len(gone), gone[:20])
        for job_id in gone + far:
            self._held.drop(job_id)
        to_release += far
        if to_release:
            self.release(to_release)
        self._stats.held = len(self._held)

    def _adopt(self, row: JobInfo, now: int, lease_until: int, resume_after: int | None) -> None:
        tz = row.schedule_timezone or self._admin_tz
        try:
            if row.schedule_type == ScheduleType.NONE:
                raise ValueError("schedule type NONE never fires by itself")
            schedule = self._schedule_factory(row.schedule_type, row.schedule_conf, tz)
            if self._timing is not None and row.timing:
                schedule = self._timing.wrap(row, schedule)
        except ValueError as exc:
            log.error("job %s cannot be scheduled (%s); stopping it", row.id, exc)
            self._advance.end(row.id)
            return
        planned = row.trigger_next_time
        last = resume_after
        if isinstance(schedule, TimedSchedule) and resume_after is None:
            # The stored instant was planned under the rules as they were (a calendar may have
            # changed since): plan it again; the instants passed over are recorded as skipped.
            again = schedule.next_fire_ms(planned - 1)
            if again is None:
                self._advance.end(row.id)
                return
            if again != planned:
                log.info("job %s re-planned under its timing rules: %s instead of %s", row.id,
                         iso_ms(again), iso_ms(planned), extra={"job_id": row.id})
                last, planned = row.trigger_last_time, again
        if resume_after is not None and resume_after >= planned:
            # The previous holder may have sent up to that instant: carry on after it.
            following = schedule.next_fire_ms(resume_after)
            log.info("job %s resumes after %s (perhaps sent by the node that held it)", row.id,
                     iso_ms(resume_after), extra={"job_id": row.id})
            if following is None:
                self._advance.end(row.id)
                return
            planned = following
        held = self._held.adopt(row, schedule, planned, lease_until, max(planned, now))
        if planned != row.trigger_next_time:
            # Store where the job resumes (nothing fires at the instants passed over).
            assert last is not None
            self._advance.resume(held, last, planned)

    def _shed_excess(self, allowed: int) -> None:
        # Give away the jobs whose next fire is furthest off. Each fires its planned instant
        # here first and is released once that fire is recorded and trigger_next_time names
        # the instant after it: the next holder then has a whole period to claim it. Released
        # before its fire (or while an earlier fire is still being recorded), a job picked up
        # more than a period late would be planned from now, skipping an instant.
        candidates = self._held.excess(allowed)
        if not candidates:
            return
        for held in candidates:
            held.leaving = True
        log.info("holding more than a fair share (%d); handing over %d jobs after their next fire",
                 allowed, len(candidates))

    def release(self, job_ids: list[int]) -> None:
        """Give up the jobs' leases (in the background; their withdrawn fires cancelled first)."""
        # Marked at once: until the release commits, a renewal may still report these jobs
        # as held, and they must not be adopted again from it.
        self._releasing.update(job_ids)
        self._ctx.background.spawn(self._release(job_ids), "release")

    async def _release(self, job_ids: list[int]) -> None:
        try:
            # Under the lock: a release never lands between a renewal and its application.
            async with self._lock:
                await self._ctx.withdrawals.cancel()
                await self._store.release(job_ids)
        finally:
            self._releasing.difference_update(job_ids)

