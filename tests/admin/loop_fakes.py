"""In-memory stand-ins for the scheduling loop's ports: a leasing job table and a fire sink.

The fake job table keeps the store's claim rules (free, expired or own leases; advance only
where the node holds the lease) and the run log's unique key on (job id, planned instant).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from jobring.admin.scheduler.loop import LoopConfig, ScheduleLoop
from jobring.admin.scheduler.ports import FireBatch, PlannedFire
from jobring.admin.scheduler.timers import ManualTimers
from jobring.admin.store.records import HeldJobs, JobInfo
from jobring.core.clock import ManualClock
from jobring.core.schedule import parse_schedule

# What the store compares to tell a changed row (the loop's own writes, start/stop, edits).
_SIGNATURE = ("update_time", "glue_updatetime", "trigger_status", "trigger_next_time", "trigger_last_time")
T0 = 1_700_000_000_000  # a whole second, UTC


def fix_rate_job(job_id: int, next_ms: int, seconds: int = 1, **changes: object) -> JobInfo:
    job = JobInfo(id=job_id, job_group=1, job_desc=f"job {job_id}", schedule_type="FIX_RATE",
                  schedule_conf=str(seconds), trigger_status=1, trigger_next_time=next_ms,
                  executor_handler="demo")
    return replace(job, **changes)  # type: ignore[arg-type]


@dataclass
class FakeJobTable:
    jobs: dict[int, JobInfo] = field(default_factory=dict)
    advances: list[tuple[str, int, int, int]] = field(default_factory=list)
    released: list[tuple[str, int]] = field(default_factory=list)
    ended: list[int] = field(default_factory=list)
    nodes: dict[str, int] = field(default_factory=dict)
    fences: dict[str, int] = field(default_factory=dict)

    def put(self, job: JobInfo) -> None:
        self.jobs[job.id] = job

    def node(self, node_id: str) -> FakeLeases:
        return FakeLeases(self, node_id)


class FakeLeases:
    def __init__(self, table: FakeJobTable, node_id: str) -> None:
        self.table = table
        self.node_id = node_id
        self.fail_claims = False
        self.fail_fence = False
        self.fail_settle = 0
        self.sent_before: dict[int, int] = {}  # job -> latest instant a previous holder sent
        self.settled: list[list[int]] = []

    def _check(self) -> None:
        if self.fail_claims:
            raise ConnectionError("database unreachable")

    async def claim(self, now_ms: int, window_end_ms: int, lease_ms: int, limit: int) -> Sequence[JobInfo]:
        await asyncio.sleep(0)
        self._check()
        out: list[JobInfo] = []
        for job in sorted(self.table.jobs.values(), key=lambda j: j.trigger_next_time):
            if len(out) >= limit:
                break
            if job.trigger_status != 1 or job.trigger_next_time > window_end_ms or job.lease_until >= now_ms:
                continue
            leased = replace(job, lease_owner=self.node_id, lease_until=now_ms + lease_ms)
            self.table.jobs[job.id] = leased
            out.append(leased)
        return out

    async def renew(self, now_ms: int, lease_ms: int, known: Mapping[int, JobInfo]) -> HeldJobs:
        await asyncio.sleep(0)
        self._check()
        ids: set[int] = set()
        changed: list[JobInfo] = []
        for job_id, job in list(self.table.jobs.items()):
            if job.lease_owner != self.node_id:
                continue
            job = replace(job, lease_until=now_ms + lease_ms)
            self.table.jobs[job_id] = job
            ids.add(job_id)
            mine = known.get(job_id)
            if mine is None or any(getattr(mine, n) != getattr(job, n) for n in _SIGNATURE):
                changed.append(job)
        return HeldJobs(frozenset(ids), changed)

    async def advance(self, updates: Sequence[tuple[int, int, int]]) -> int:
        await asyncio.sleep(0)
        applied = 0
        for job_id, last, nxt in updates:
            job = self.table.jobs.get(job_id)
            if job is not None and job.lease_owner == self.node_id:
                self.table.jobs[job_id] = replace(job, trigger_last_time=last, trigger_next_time=nxt)
                self.table.advances.append((self.node_id, job_id, last, nxt))
                applied += 1
        return applied

    async def settle_takeover(self, jobs: Sequence[JobInfo]) -> Mapping[int, int]:
        # The fake fire sinks record nothing ahead: what a previous holder sent is set by tests.
        await asyncio.sleep(0)
        self.settled.append([j.id for j in jobs])
        if self.fail_settle:
            self.fail_settle -= 1
            raise ConnectionError("settling the takeover failed")
        return {j.id: self.sent_before[j.id] for j in jobs if j.id in self.sent_before}

    async def raise_fence(self, fence_ms: int) -> None:
        await asyncio.sleep(0)
        self._check()
        if self.fail_fence:
            raise ConnectionError("fence update timed out")
        self.table.fences[self.node_id] = max(fence_ms, self.table.fences.get(self.node_id, 0))

    async def end_schedule(self, job_ids: Sequence[int]) -> None:
        for job_id in job_ids:
            self.table.jobs[job_id] = replace(self.table.jobs[job_id], trigger_status=0, trigger_next_time=0)
            self.table.ended.append(job_id)

    async def heartbeat(self, now_ms: int, until_ms: int, window_end_ms: int) -> tuple[int, int]:
        self.table.nodes[self.node_id] = until_ms
        live = sum(1 for until in self.table.nodes.values() if until >= now_ms)
        due = sum(1 for j in self.table.jobs.values()
                  if j.trigger_status == 1 and j.trigger_next_time <= window_end_ms)
        return max(1, live), due

    async def release(self, job_ids: Sequence[int]) -> None:
        for job_id in job_ids:
            job = self.table.jobs.get(job_id)
            if job is not None and job.lease_owner == self.node_id:
                self.table.jobs[job_id] = replace(job, lease_owner=None, lease_until=0)
                self.table.released.append((self.node_id, job_id))


@dataclass
class FireRecord:
    node: str
    job_id: int
    planned_ms: int
    trigger_type: str
    at_ms: int
    duplicate: bool


class FakeRunLog:
    """Records fires with the unique key on (job id, planned instant), like the run log."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.records: list[FireRecord] = []
        self.batches: list[list[PlannedFire]] = []
        self.keys: set[tuple[int, int]] = set()
        self.fail_next = 0

    def sink(self, node: str) -> FireBatch:
        async def fire_batch(fires: Sequence[PlannedFire]) -> None:
            await asyncio.sleep(0)
            if self.fail_next:
                self.fail_next -= 1
                raise ConnectionError("log insert failed")
            self.batches.append(list(fires))
            for f in fires:
                key = (f.job.id, f.planned_ms)
                dup = key in self.keys
                self.keys.add(key)
                self.records.append(FireRecord(node, f.job.id, f.planned_ms, f.trigger_type.value,
                                               self.clock.now_ms(), dup))

        return fire_batch

    def fired(self, job_id: int | None = None) -> list[tuple[int, int]]:
        """(job id, planned) of the fires actually dispatched (duplicates excluded)."""
        return [(r.job_id, r.planned_ms) for r in self.records
                if not r.duplicate and (job_id is None or r.job_id == job_id)]


async def settle(rounds: int = 50) -> None:
    """Let every ready task run; the fakes do no I/O, so this drains the loop's work."""
    for _ in range(rounds):
        await asyncio.sleep(0)


class Harness:
    """One or more loops on a manual clock over one fake job table and run log."""

    def __init__(self, start_ms: int = T0, config: LoopConfig | None = None, tz: str = "UTC") -> None:
        self.clock = ManualClock(start_ms)
        self.timers = ManualTimers(self.clock)
        self.table = FakeJobTable()
        self.runlog = FakeRunLog(self.clock)
        self.config = config or LoopConfig()
        self.tz = tz
        self.loops: dict[str, ScheduleLoop] = {}
        self.leases: dict[str, FakeLeases] = {}

    def loop(self, node: str = "n1") -> ScheduleLoop:
        leases = self.table.node(node)
        loop = ScheduleLoop(leases, self.runlog.sink(node), self.timers, parse_schedule,
                            admin_timezone=self.tz, config=self.config)
        self.loops[node] = loop
        self.leases[node] = leases
        return loop

    async def advance_to(self, now_ms: int, step_ms: int = 100) -> None:
        """Move the clock forward in steps, letting the loops work after each step."""
        await settle()
        t = self.clock.now_ms()
        while t < now_ms:
            t = min(now_ms, t + step_ms)
            nxt = self.timers.next_deadline()
            while nxt is not None and nxt < t:
                self.timers.advance_to(max(nxt, self.clock.now_ms()))
                await settle()
                nxt = self.timers.next_deadline()
            self.timers.advance_to(t)
            await settle()
