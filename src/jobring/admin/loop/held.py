"""The jobs this node holds and the timer heap of their next instants (synchronous code).

A dropped job's heap entries are not searched for: its generation is zeroed and the
stale entries are skipped when they come to the top (lazy invalidation). The held set is
the loop's second stage (leases -> held -> timer -> sender): the later stages learn of its
changes through the two hooks they set, ``alarm`` (an earlier instant pushed) and
``dropped`` (a job forgotten).
"""

from __future__ import annotations

import heapq
import itertools
import logging
from collections.abc import Callable, Iterator, Set, ValuesView
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from jobring.admin.loop.ports import Schedule
from jobring.admin.store.records import JobInfo

if TYPE_CHECKING:
    from jobring.admin.loop.ahead import Ahead, Withdrawals

log = logging.getLogger(__name__)

# A held job whose row differs from the loop's copy in one of these is re-planned.
SCHEDULE_FIELDS = ("schedule_type", "schedule_conf", "schedule_timezone", "misfire_strategy", "update_time",
                   "timing")


@dataclass(slots=True, eq=False)
class Held:
    """A job this node holds: its planned instant and what the database says."""

    job: JobInfo
    schedule: Schedule
    planned_ms: int
    db_next_ms: int
    lease_until_ms: int
    generation: int  # 0 once dropped: its heap entries are stale
    leaving: bool = False  # next instant is past the window (or shed): release after the advance
    # Instants whose log rows are (being) recorded ahead, and the last instant looked at.
    prepared: dict[int, Ahead] = field(default_factory=dict)
    prepared_to: int = 0


_Entry = tuple[int, int, Held, int]  # (fire at ms, seq, held, generation)


class HeldSet:
    """The held jobs by id, and a heap of (instant, job) with lazily dropped stale entries."""

    def __init__(self, withdrawals: Withdrawals | None = None) -> None:
        self._withdrawals = withdrawals  # where a dropped job's fires recorded ahead go
        self._jobs: dict[int, Held] = {}
        self._heap: list[_Entry] = []
        self._seq = itertools.count()
        self._generation = itertools.count(1)
        # The dict's own lookup (no Python frame on the per-fire path).
        self.get: Callable[[int], Held | None] = self._jobs.get
        # Set by the timer while it sleeps until ``alarm_at`` (None: no deadline): a push
        # of an earlier instant rings it.
        self.alarm: Callable[[], None] | None = None
        self.alarm_at: int | None = None
        # Set by the advance writer: a dropped job's queued advance is forgotten.
        self.dropped: Callable[[int], None] | None = None

    def __len__(self) -> int:
        return len(self._jobs)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._jobs

    def __iter__(self) -> Iterator[int]:
        return iter(self._jobs)

    def holds(self, held: Held) -> bool:
        """True while ``held`` is the current entry of its job (not dropped, not re-adopted)."""
        return self._jobs.get(held.job.id) is held

    def values(self) -> ValuesView[Held]:
        """A live view: copy it before dropping while iterating."""
        return self._jobs.values()

    def rows(self) -> dict[int, JobInfo]:
        return {i: h.job for i, h in self._jobs.items()}

    def adopt(self, job: JobInfo, schedule: Schedule, planned_ms: int, lease_until_ms: int,
              fire_at_ms: int) -> Held:
        """Hold ``job`` (replacing nothing: drop a previous entry first), due at ``fire_at_ms``."""
        held = Held(job, schedule, planned_ms, job.trigger_next_time, lease_until_ms, next(self._generation))
        self._jobs[job.id] = held
        self.push(held, fire_at_ms)
        return held

    def drop(self, job_id: int) -> Held | None:
        """Forget the job: its heap entries go stale, its fires recorded ahead are withdrawn,
        its queued advance forgotten (``dropped``). Returns what was held (or None)."""
        held = self._jobs.pop(job_id, None)
        if held is not None:
            held.generation = 0
            if self.dropped is not None:
                self.dropped(job_id)
            if held.prepared:
                if self._withdrawals is not None:
                    for slot in held.prepared.values():
                        self._withdrawals.withdraw(slot)
                held.prepared.clear()
        return held

    def lapsed(self, held: Held, now: int, guard_ms: int) -> bool:
        """Drop ``held`` when its lease ends within ``guard_ms`` (the clock-skew guard): a fire
        goes out only while the lease lasts."""
        if now < held.lease_until_ms - guard_ms:
            return False
        log.warning("lease on job %s ran out before its fire; dropping it", held.job.id)
        self.drop(held.job.id)
        return True

    def clear(self) -> None:
        for held in self._jobs.values():
            held.generation = 0
        self._jobs.clear()
        self._heap.clear()

    def push(self, held: Held, fire_at_ms: int) -> None:
        heapq.heappush(self._heap, (fire_at_ms, next(self._seq), held, held.generation))
        if self.alarm is not None and (self.alarm_at is None or fire_at_ms < self.alarm_at):
            self.alarm()

    def next_due(self) -> int | None:
        """The earliest instant of a held job (stale entries on top are discarded)."""
        heap = self._heap
        while heap and heap[0][2].generation != heap[0][3]:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def due_at_least(self, until_ms: int, count: int) -> bool:
        """True when at least ``count`` heap entries fall at or before ``until_ms`` (stale ones
        included: a hint). Walks only the heap's due part, at most ``count`` entries."""
        heap = self._heap
        if not heap or heap[0][0] > until_ms:
            return count <= 0
        size = len(heap)
        todo = [0]
        found = 0
        while todo:
            index = todo.pop()
            found += 1
            if found >= count:
                return True
            # A heap's children are never earlier than their parent: the due part is a subtree.
            child = 2 * index + 1
            if child < size and heap[child][0] <= until_ms:
                todo.append(child)
            child += 1
            if child < size and heap[child][0] <= until_ms:
                todo.append(child)
        return False

    def pop_due(self, until_ms: int) -> Held | None:
        """Take the next held job due at or before ``until_ms`` off the heap (None: none)."""
        heap = self._heap
        while heap and heap[0][0] <= until_ms:
            _, _, held, generation = heapq.heappop(heap)
            if held.generation == generation:
                return held
        return None

    def renew(self, leased: Set[int], lease_until_ms: int, window_end_ms: int) -> tuple[list[int], list[int]]:
        """Extend the held jobs' leases in memory; return the jobs not in ``leased`` (no longer
        this node's), and those whose next instant is beyond the window with the database
        naming it (e.g. resumed far ahead after a takeover): those are for a later claim."""
        gone: list[int] = []
        far: list[int] = []
        for job_id, held in self._jobs.items():
            if job_id not in leased:
                gone.append(job_id)
                continue
            held.lease_until_ms = lease_until_ms
            if held.planned_ms > window_end_ms and held.db_next_ms == held.planned_ms and not held.leaving:
                far.append(job_id)
        return gone, far

    def excess(self, allowed: int) -> list[Held]:
        """The staying jobs beyond ``allowed``, those whose next fire is furthest off first."""
        staying = [h for h in self._jobs.values() if not h.leaving]
        count = len(staying) - allowed
        if count <= 0:
            return []
        return sorted(staying, key=lambda h: h.planned_ms, reverse=True)[:count]

    @staticmethod
    def changed(held: Held, row: JobInfo) -> bool:
        """True when ``row`` moved its next time or schedule behind the loop's back."""
        if row.trigger_next_time != held.db_next_ms:
            return True
        return any(getattr(row, name) != getattr(held.job, name) for name in SCHEDULE_FIELDS)
