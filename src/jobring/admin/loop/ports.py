"""The scheduling loop's ports: what it needs from the job table and from the trigger side.

:mod:`jobring.admin.loop.adapters` implements them over the store and the trigger
service; tests use in-memory fakes. This module imports no adapter: a prepared fire is
opaque here (the type parameter of :class:`FirePreparer`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar, runtime_checkable

from jobring.admin.store.records import HeldJobs, JobInfo
from jobring.core.enums import TriggerType
from jobring.core.timing import SkippedFire


class Schedule(Protocol):
    def next_fire_ms(self, after_ms: int) -> int | None: ...


ScheduleFactory = Callable[[str, "str | None", str], Schedule]
"""(schedule_type, schedule_conf, time zone) -> Schedule; raises ValueError when unusable."""


class TimingPort(Protocol):
    """Timing rules for the loop (calendars, validity window, run limit, jitter; see
    :mod:`jobring.admin.loop.timed`). Optional: without it, jobs keep their plain schedule."""

    async def prepare(self, rows: Sequence[JobInfo]) -> None:
        """Load what :meth:`wrap` needs for ``rows`` (calendars, run counts); called before they
        are adopted."""
        ...

    def wrap(self, row: JobInfo, schedule: Schedule) -> Schedule:
        """``schedule`` under the row's timing rules (itself when it has none); ValueError when
        the rules cannot be applied."""
        ...

    async def record_skipped(self, job: JobInfo, skipped: Sequence[SkippedFire]) -> None:
        """Record the instants a calendar excluded as ``skipped`` runs (each once: the run
        log's unique key)."""
        ...


class LeaseStore(Protocol):
    """The loop's view of the job table, bound to this node's id."""

    async def claim(self, now_ms: int, window_end_ms: int, lease_ms: int, limit: int) -> Sequence[JobInfo]:
        """Lease up to ``limit`` running jobs due by ``window_end_ms`` whose leases are free or
        expired, and return their rows."""
        ...

    async def renew(self, now_ms: int, lease_ms: int, known: Mapping[int, JobInfo]) -> HeldJobs:
        """Renew every lease this node holds; return the ids held and the rows that are not
        in ``known`` or changed since."""
        ...

    async def advance(self, updates: Sequence[tuple[int, int, int]]) -> int:
        """Write ``(job_id, trigger_last_time, trigger_next_time)`` where this node holds the
        lease; return how many rows were written."""
        ...

    async def settle_takeover(self, jobs: Sequence[JobInfo]) -> Mapping[int, int]:
        """Settle the fires other nodes recorded for ``jobs`` (about to be adopted) at or after
        their stored next time: unconfirmed ones planned beyond their node's send fence were
        never sent and are withdrawn (the misfire rule then applies to those instants); the
        others were or may have been sent. Returns, per job with such fires, the latest
        instant that was or may have been sent: the job resumes after it."""
        ...

    async def raise_fence(self, fence_ms: int) -> None:
        """Commit that this node may send fires planned up to ``fence_ms``."""
        ...

    async def end_schedule(self, job_ids: Sequence[int]) -> None:
        """Stop jobs whose schedule has no further instant (trigger_status 0, next 0)."""
        ...

    async def release(self, job_ids: Sequence[int]) -> None:
        """Give up this node's leases on the jobs."""
        ...

    async def heartbeat(self, now_ms: int, until_ms: int, window_end_ms: int) -> tuple[int, int]:
        """Announce this node as scheduling until ``until_ms`` (0: leaving); return the number
        of scheduling nodes alive at ``now_ms`` (this one included) and of running jobs due
        by ``window_end_ms``."""
        ...


@dataclass(frozen=True, slots=True)
class PlannedFire:
    """One fire of a job: its identity is (job.id, planned_ms)."""

    job: JobInfo
    trigger_type: TriggerType
    planned_ms: int


FireBatch = Callable[[Sequence[PlannedFire]], Awaitable[None]]
"""Records the fires' log rows (duplicates dropped) and dispatches them. Returning means the
fires are recorded; raising means none of them were."""


Prepared = TypeVar("Prepared")
"""A fire recorded ahead, as the preparer knows it; the loop only hands it back."""


@runtime_checkable
class FirePreparer(Protocol[Prepared]):
    """A fire port that can also record fires ahead of their instants (the loop then does so)."""

    async def prepare(self, fires: Sequence[PlannedFire]) -> list[Prepared | None]:
        """Record the fires' log rows now; per fire its prepared batch, or None when the
        (job, instant) was already recorded (it must not be sent). Raising: none recorded."""
        ...

    async def dispatch(self, batches: Sequence[Prepared]) -> None:
        """Send prepared fires (their trigger results are recorded later, in batches)."""
        ...

    async def cancel(self, batches: Sequence[Prepared]) -> None:
        """Withdraw prepared fires that will not be sent (their rows are deleted)."""
        ...


class Liveness(Protocol):
    """Proof that this node is alive, and news of dead nodes (database session locks; see
    :mod:`jobring.admin.loop.liveness`). Optional: without it, leases alone decide."""

    def attach(self, lost: Callable[[], None], wake: Callable[[], None]) -> None:
        """Call ``lost`` when this node loses its liveness (stop sending at once) and
        ``wake`` when a dead node is found or its own lock is back (run a claim cycle now)."""
        ...

    def may_send(self) -> bool:
        """Whether this node may send fires (and renew or claim) now."""
        ...

    async def raise_fence(self, fence_ms: int) -> None:
        """Commit the send fence in a way that stops working once this node is found dead
        (it replaces :meth:`LeaseStore.raise_fence`)."""
        ...

    async def claim_dead(
        self, now_ms: int, window_end_ms: int, lease_ms: int, limit: int
    ) -> Sequence[JobInfo]:
        """Lease to this node the jobs still leased to nodes found dead; return them. The
        dead nodes stay locked out until :meth:`release_dead`."""
        ...

    async def release_dead(self) -> None:
        """Let the nodes taken over by :meth:`claim_dead` go (once their fires are settled)."""
        ...
