"""Applying a claim to the held set (the held stage): adopt, re-plan, drop, shed.

The lease keeper's :class:`~.leases.Claim` comes in as data; what the advance writer must
store (schedules ended, jobs resuming after a takeover) goes out as an :class:`Adopted`,
which the loop hands on. Jobs to give back go to the lease keeper's
:class:`~.leases.Releases`.
"""

from __future__ import annotations

import logging
from collections.abc import Set
from dataclasses import dataclass, field

from jobring.admin.loop.context import LoopContext
from jobring.admin.loop.held import Held, HeldSet
from jobring.admin.loop.leases import Claim, Releases
from jobring.admin.loop.timed import TimedSchedule
from jobring.admin.store.records import JobInfo
from jobring.core.enums import ScheduleType
from jobring.core.timefmt import iso_ms

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Adopted:
    """What a claim leaves for the advance writer."""

    ended: list[int] = field(default_factory=list)  # schedules with no (further) instant
    # (held, trigger_last_time, trigger_next_time): where a job taken over resumes.
    resumed: list[tuple[Held, int, int]] = field(default_factory=list)


class Adopter:
    """Keeps the held set in step with the leases each claim cycle reports."""

    def __init__(self, ctx: LoopContext, held: HeldSet, releases: Releases) -> None:
        self._ctx = ctx
        self._held = held
        self._releases = releases

    def drop_taken_over(self, leased: Set[int]) -> None:
        """The first renewal after this node's liveness came back: the held jobs no longer
        leased to it were taken over meanwhile; drop them before anything is claimed."""
        lost = [job_id for job_id in self._held if job_id not in leased]
        if lost:
            log.warning("%d held jobs were taken over while this node's liveness was lost; "
                        "dropping them: %s", len(lost), lost[:20])
        for job_id in lost:
            self._held.drop(job_id)

    def apply(self, claim: Claim, now: int) -> Adopted:
        """Apply a claim: its rows are the new or changed rows among its ids, every job whose
        lease this node now holds; its ``maybe_sent`` the instants a previous holder may have
        sent last (per job taken over). Then shed what is over the fair share."""
        out = Adopted()
        held_set, releases = self._held, self._releases
        lease_until = now + self._ctx.config.lease_ms
        to_release: list[int] = []
        for row in claim.rows:
            if row.id in releases:
                continue  # dropped by this node; its release is on the way
            held = held_set.get(row.id)
            if row.trigger_status != 1:
                held_set.drop(row.id)
                to_release.append(row.id)
            elif held is not None and (held.leaving or not HeldSet.changed(held, row)):
                if not held.leaving:
                    held.job = row
            else:
                if held is not None:
                    log.info("job %s changed while held; re-planning from the database", row.id)
                    held_set.drop(row.id)
                if row.trigger_next_time > claim.window_end:
                    to_release.append(row.id)  # (edited to be) due later: for a later claim
                else:
                    self._adopt(row, now, lease_until, claim.maybe_sent.get(row.id), out)
        gone, far = held_set.renew(claim.ids, lease_until, claim.window_end)
        if gone:
            # The lease is no longer ours (the job was deleted, or taken over after this
            # node failed to renew in time).
            log.info("%d held jobs are no longer leased to this node; dropping them: %s",
                     len(gone), gone[:20])
        for job_id in gone + far:
            held_set.drop(job_id)
        to_release += far
        if to_release:
            releases.release(to_release)
        self._ctx.stats.held = len(held_set)
        # (A job resumed and then dropped above keeps no advance: as if it had been forgotten.)
        out.resumed = [r for r in out.resumed if held_set.holds(r[0])]
        self._shed_excess(claim.allowed)
        return out

    def _adopt(self, row: JobInfo, now: int, lease_until: int, resume_after: int | None,
               out: Adopted) -> None:
        ctx = self._ctx
        tz = row.schedule_timezone or ctx.admin_timezone
        try:
            if row.schedule_type == ScheduleType.NONE:
                raise ValueError("schedule type NONE never fires by itself")
            schedule = ctx.schedule_factory(row.schedule_type, row.schedule_conf, tz)
            if ctx.timing is not None and row.timing:
                schedule = ctx.timing.wrap(row, schedule)
        except ValueError as exc:
            log.error("job %s cannot be scheduled (%s); stopping it", row.id, exc)
            out.ended.append(row.id)
            return
        planned = row.trigger_next_time
        last = resume_after
        if isinstance(schedule, TimedSchedule) and resume_after is None:
            # The stored instant was planned under the rules as they were (a calendar may have
            # changed since): plan it again; the instants passed over are recorded as skipped.
            again = schedule.next_fire_ms(planned - 1)
            if again is None:
                out.ended.append(row.id)
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
                out.ended.append(row.id)
                return
            planned = following
        held = self._held.adopt(row, schedule, planned, lease_until, max(planned, now))
        if planned != row.trigger_next_time:
            # Store where the job resumes (nothing fires at the instants passed over).
            assert last is not None
            out.resumed.append((held, last, planned))

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
