"""In-memory stand-ins for the scheduling loop's ports: a leasing job table with its run log,
and the two kinds of fire port (recording at the instant, or ahead like the trigger service).

They keep the store's rules, checked against it by ``tests/admin/scheduler/test_lease_contract.py``:
claims of free or expired leases, writes only where the node holds the lease, the run log's
unique key on (job id, planned instant), withdrawals of unconfirmed rows of held jobs only,
and the send-fence rule when a node takes over another node's jobs.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

from jobring.admin.loop.ahead import Withdrawals
from jobring.admin.loop.config import LoopStats
from jobring.admin.loop.context import LoopContext
from jobring.admin.loop.loop import LoopConfig, ScheduleLoop
from jobring.admin.loop.ports import FireBatch, FirePreparer, Liveness, PlannedFire, TimingPort
from jobring.admin.loop.timers import ManualTimers, Timers
from jobring.admin.store.records import HeldJobs, JobInfo
from jobring.admin.trigger.trigger import PreparedBatch
from jobring.background import Background
from jobring.core.clock import ManualClock
from jobring.core.schedule import parse_schedule

# What the store compares to tell a changed row (the loop's own writes, start/stop, edits).
_SIGNATURE = ("update_time", "glue_updatetime", "trigger_status", "trigger_next_time", "trigger_last_time")
# The store forgets a node (and its send fence) this long after it was last alive or fencing.
_FORGET_NODE_AFTER_MS = 7 * 86_400_000
T0 = 1_700_000_000_000  # a whole second, UTC

AfterSend = Callable[[], Awaitable[None]]


def fix_rate_job(job_id: int, next_ms: int, seconds: int = 1, **changes: object) -> JobInfo:
    job = JobInfo(id=job_id, job_group=1, job_desc=f"job {job_id}", schedule_type="FIX_RATE",
                  schedule_conf=str(seconds), trigger_status=1, trigger_next_time=next_ms,
                  executor_handler="demo")
    return replace(job, **changes)  # type: ignore[arg-type]


def loop_context(config: LoopConfig | None = None, preparer: FirePreparer[Any] | None = None) -> LoopContext:
    """A loop context over an empty fake job table and a manual clock at T0, for one stage alone."""
    return LoopContext(
        store=FakeJobTable().node("n1"), timers=cast(Timers, ManualTimers(ManualClock(T0))),
        config=config or LoopConfig(), stats=LoopStats(), schedule_factory=parse_schedule,
        admin_timezone="UTC", db_lock=asyncio.Lock(), preparer=preparer, withdrawals=Withdrawals(preparer),
        background=Background(),
    )


@dataclass
class LogRow:
    """A scheduled fire's run-log row."""

    log_id: int
    job_id: int
    planned_ms: int
    node: str | None
    trigger_type: str
    sent: bool = False
    confirmed: bool = False  # its dispatch answer is recorded


@dataclass
class FakeJobTable:
    """The job table, the scheduler node rows and the scheduled fires of the run log."""

    jobs: dict[int, JobInfo] = field(default_factory=dict)
    advances: list[tuple[str, int, int, int]] = field(default_factory=list)
    released: list[tuple[str, int]] = field(default_factory=list)
    ended: list[int] = field(default_factory=list)
    nodes: dict[str, int] = field(default_factory=dict)  # node -> alive until
    fences: dict[str, int] = field(default_factory=dict)  # node -> send fence
    rows: dict[tuple[int, int], LogRow] = field(default_factory=dict)  # unique (job, planned)
    withdrawn: list[tuple[int, int]] = field(default_factory=list)
    _log_ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def put(self, job: JobInfo) -> None:
        self.jobs[job.id] = job

    def node(self, node_id: str) -> FakeLeases:
        return FakeLeases(self, node_id)

    def node_row(self, node_id: str) -> None:
        """Create the node's row as the store does: both columns start at 0."""
        self.nodes.setdefault(node_id, 0)
        self.fences.setdefault(node_id, 0)

    def record(self, node: str | None, job_id: int, planned_ms: int, trigger_type: str = "CRON",
               *, confirmed: bool = False) -> LogRow | None:
        """Insert a fire's row; None when its (job, instant) is already recorded."""
        key = (job_id, planned_ms)
        if key in self.rows:
            return None
        row = LogRow(next(self._log_ids), job_id, planned_ms, node, trigger_type, confirmed, confirmed)
        self.rows[key] = row
        return row

    def withdraw(self, log_ids: Sequence[int], holder: str) -> int:
        """Delete unconfirmed rows of jobs leased to ``holder`` (FireRepository.withdraw)."""
        wanted = set(log_ids)
        held = {j.id for j in self.jobs.values() if j.lease_owner == holder}
        gone = [key for key, row in self.rows.items()
                if row.log_id in wanted and not row.confirmed and row.job_id in held]
        for key in gone:
            del self.rows[key]
            self.withdrawn.append(key)
        return len(gone)

    def recorded_since(self, since: Mapping[int, int], other_than_node: str) -> list[LogRow]:
        """Rows of each job planned at or after its instant, recorded by other nodes."""
        found = [row for row in self.rows.values()
                 if row.job_id in since and row.planned_ms >= since[row.job_id]
                 and (row.node is None or row.node != other_than_node)]
        return sorted(found, key=lambda r: (r.job_id, r.planned_ms))


class FakeLeases:
    """:class:`LeaseStore` over the fake table, for one node."""

    def __init__(self, table: FakeJobTable, node_id: str) -> None:
        self.table = table
        self.node_id = node_id
        self.fail_claims = False
        self.fail_fence = False
        self.fail_settle = 0
        self.cut_off = False  # the database is unreachable for this node: every call fails
        self.settled: list[list[int]] = []
        self._forgot_at = 0

    def _down(self) -> None:
        if self.cut_off:
            raise ConnectionError("database unreachable")

    def _check(self) -> None:
        self._down()
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
        self._down()
        applied = 0
        for job_id, last, nxt in updates:
            job = self.table.jobs.get(job_id)
            if job is not None and job.lease_owner == self.node_id:
                self.table.jobs[job_id] = replace(job, trigger_last_time=last, trigger_next_time=nxt)
                self.table.advances.append((self.node_id, job_id, last, nxt))
                applied += 1
        return applied

    async def settle_takeover(self, jobs: Sequence[JobInfo]) -> Mapping[int, int]:
        # The rule of StoreLeases.settle_takeover, over the fake run log and node rows.
        await asyncio.sleep(0)
        self._down()
        self.settled.append([j.id for j in jobs])
        if self.fail_settle:
            self.fail_settle -= 1
            raise ConnectionError("settling the takeover failed")
        recorded = self.table.recorded_since({j.id: j.trigger_next_time for j in jobs}, "")
        never_sent: list[int] = []
        sent_up_to: dict[int, int] = {}
        for row in recorded:
            fence = self.table.fences.get(row.node or "")
            if not row.confirmed and fence is not None and row.planned_ms > fence:
                never_sent.append(row.log_id)
            else:
                sent_up_to[row.job_id] = max(sent_up_to.get(row.job_id, 0), row.planned_ms)
        self.table.withdraw(never_sent, holder=self.node_id)
        return sent_up_to

    async def raise_fence(self, fence_ms: int) -> None:
        await asyncio.sleep(0)
        self._check()
        if self.fail_fence:
            raise ConnectionError("fence update timed out")
        self.table.node_row(self.node_id)
        self.table.fences[self.node_id] = max(fence_ms, self.table.fences[self.node_id])

    async def end_schedule(self, job_ids: Sequence[int]) -> None:
        await asyncio.sleep(0)
        self._down()
        for job_id in job_ids:
            job = self.table.jobs.get(job_id)
            if job is not None:  # (deleted meanwhile: nothing to stop)
                self.table.jobs[job_id] = replace(job, trigger_status=0, trigger_next_time=0)
                self.table.ended.append(job_id)

    async def heartbeat(self, now_ms: int, until_ms: int, window_end_ms: int) -> tuple[int, int]:
        await asyncio.sleep(0)
        self._down()
        self.table.node_row(self.node_id)
        self.table.nodes[self.node_id] = until_ms
        live = sum(1 for until in self.table.nodes.values() if until >= now_ms)
        if now_ms - self._forgot_at >= 3_600_000:
            self._forgot_at = now_ms
            gone_before = now_ms - _FORGET_NODE_AFTER_MS
            for node in [n for n, until in self.table.nodes.items()
                         if until < gone_before and self.table.fences[n] < gone_before]:
                del self.table.nodes[node], self.table.fences[node]
        due = sum(1 for j in self.table.jobs.values()
                  if j.trigger_status == 1 and j.trigger_next_time <= window_end_ms)
        return max(1, live), due

    async def release(self, job_ids: Sequence[int]) -> None:
        await asyncio.sleep(0)
        self._down()
        for job_id in job_ids:
            job = self.table.jobs.get(job_id)
            if job is not None and job.lease_owner == self.node_id:
                self.table.jobs[job_id] = replace(job, lease_owner=None, lease_until=0)
                self.table.released.append((self.node_id, job_id))


@dataclass
class FireRecord:
    """A fire a loop sent (or tried to: ``duplicate`` when its instant was recorded already)."""

    node: str
    job_id: int
    planned_ms: int
    trigger_type: str
    at_ms: int
    duplicate: bool


class FakeRunLog:
    """The fire ports of the loops over the fake table's run log: each send is a record."""

    def __init__(self, clock: ManualClock, table: FakeJobTable) -> None:
        self.clock = clock
        self.table = table
        self.records: list[FireRecord] = []
        self.batches: list[list[PlannedFire]] = []
        self.fail_next = 0  # fire batches (recording at the instant) that fail
        self.fail_prepare = 0  # preparations (recording ahead) that fail
        self.fail_cancel = 0  # withdrawals of fires recorded ahead that fail
        self.cut_off: set[str] = set()  # nodes that cannot reach the database (executors they can)

    def _database(self, node: str) -> None:
        if node in self.cut_off:
            raise ConnectionError("database unreachable")

    def sink(self, node: str, after_send: AfterSend | None = None) -> FireBatch:
        """A fire port recording each fire at its instant, then sending it."""

        async def fire_batch(fires: Sequence[PlannedFire]) -> None:
            await asyncio.sleep(0)
            self._database(node)
            if self.fail_next:
                self.fail_next -= 1
                raise ConnectionError("log insert failed")
            self.batches.append(list(fires))
            for f in fires:
                row = self.table.record(node, f.job.id, f.planned_ms, f.trigger_type.value)
                if row is not None:
                    row.sent = row.confirmed = True
                self.records.append(FireRecord(node, f.job.id, f.planned_ms, f.trigger_type.value,
                                               self.clock.now_ms(), row is None))
            if after_send is not None:
                await after_send()

        return fire_batch

    def preparer(self, node: str, after_send: AfterSend | None = None) -> FakePreparer:
        """A fire port that records fires ahead (a :class:`FirePreparer`, like the trigger's)."""
        return FakePreparer(self, node, after_send)

    def fired(self, job_id: int | None = None) -> list[tuple[int, int]]:
        """(job id, planned) of the fires actually dispatched (duplicates excluded)."""
        return [(r.job_id, r.planned_ms) for r in self.records
                if not r.duplicate and (job_id is None or r.job_id == job_id)]

    def pending(self, job_id: int | None = None) -> list[tuple[int, int]]:
        """(job id, planned) of the rows recorded and not sent (recorded ahead), in order."""
        return sorted(key for key, row in self.table.rows.items()
                      if not row.sent and (job_id is None or key[0] == job_id))


class FakePreparer:
    """The trigger service's fire port (``TriggerFirePort``) in memory. ``prepare`` records
    the rows (None for an instant already recorded), ``dispatch`` sends them (once; the
    answer is recorded unless the node is cut off from the database), ``cancel`` withdraws
    those still prepared (only rows of jobs the node holds, as ``FireRepository.withdraw``)."""

    def __init__(self, runlog: FakeRunLog, node: str, after_send: AfterSend | None) -> None:
        self.runlog = runlog
        self.node = node
        self._after_send = after_send
        self._fires: dict[PreparedBatch, tuple[PlannedFire, LogRow]] = {}

    async def __call__(self, fires: Sequence[PlannedFire]) -> None:
        await self.runlog.sink(self.node, self._after_send)(fires)

    async def prepare(self, fires: Sequence[PlannedFire]) -> list[PreparedBatch | None]:
        runlog = self.runlog
        await asyncio.sleep(0)
        runlog._database(self.node)
        if runlog.fail_prepare:
            runlog.fail_prepare -= 1
            raise ConnectionError("log insert failed")
        out: list[PreparedBatch | None] = []
        for f in fires:
            row = runlog.table.record(self.node, f.job.id, f.planned_ms, f.trigger_type.value)
            if row is None:
                runlog.records.append(FireRecord(self.node, f.job.id, f.planned_ms, f.trigger_type.value,
                                                 runlog.clock.now_ms(), True))
                out.append(None)
                continue
            batch = PreparedBatch([])
            self._fires[batch] = (f, row)
            out.append(batch)
        return out

    async def dispatch(self, batches: Sequence[PreparedBatch]) -> None:
        runlog = self.runlog
        for batch in batches:
            if batch.state != "prepared":
                raise RuntimeError(f"prepared batch already {batch.state}")
        sent: list[PlannedFire] = []
        for batch in batches:
            batch.state = "dispatched"
            fire, row = self._fires.pop(batch)
            if runlog.table.rows.get((row.job_id, row.planned_ms)) is row:
                row.sent = True
                row.confirmed = self.node not in runlog.cut_off
            # Sent even when its row was withdrawn meanwhile: a second send of the instant
            # then shows in FakeRunLog.fired().
            runlog.records.append(FireRecord(self.node, fire.job.id, fire.planned_ms, fire.trigger_type.value,
                                             runlog.clock.now_ms(), False))
            sent.append(fire)
        runlog.batches.append(sent)
        await asyncio.sleep(0)
        if self._after_send is not None:
            await self._after_send()

    async def cancel(self, batches: Sequence[PreparedBatch]) -> None:
        live = [b for b in batches if b.state == "prepared"]
        if not live:
            return
        await asyncio.sleep(0)
        self.runlog._database(self.node)
        if self.runlog.fail_cancel:
            self.runlog.fail_cancel -= 1
            raise ConnectionError("withdrawing the rows failed")
        rows = []
        for batch in live:
            batch.state = "cancelled"
            rows.append(self._fires.pop(batch)[1])
        self.runlog.table.withdraw([r.log_id for r in rows], holder=self.node)


async def settle(rounds: int = 50) -> None:
    """Let every ready task run; the fakes do no I/O, so this drains the loop's work."""
    for _ in range(rounds):
        await asyncio.sleep(0)


class Harness:
    """One or more loops on a manual clock over one fake job table and run log; with
    ``prepare`` the loops' fire ports record fires ahead, as in production."""

    def __init__(self, start_ms: int = T0, config: LoopConfig | None = None, tz: str = "UTC",
                 *, prepare: bool = False) -> None:
        self.clock = ManualClock(start_ms)
        self.timers = ManualTimers(self.clock)
        self.table = FakeJobTable()
        self.runlog = FakeRunLog(self.clock, self.table)
        self.config = config or LoopConfig()
        self.tz = tz
        self.prepare = prepare
        self.loops: dict[str, ScheduleLoop] = {}
        self.leases: dict[str, FakeLeases] = {}

    @property
    def loop_timers(self) -> Timers:
        # (The Timers protocol declares a writable ``clock: Clock``, which ManualTimers'
        # ManualClock attribute does not match for mypy; the loop only reads it.)
        return cast(Timers, self.timers)

    def port(self, node: str, after_send: AfterSend | None = None) -> FireBatch:
        """The node's fire port: recording ahead (``prepare``) or at the instant."""
        if self.prepare:
            return self.runlog.preparer(node, after_send)
        return self.runlog.sink(node, after_send)

    def loop(self, node: str = "n1", liveness: Liveness | None = None,
             timing: TimingPort | None = None) -> ScheduleLoop:
        leases = self.table.node(node)
        loop = ScheduleLoop(leases, self.port(node), self.loop_timers, parse_schedule,
                            admin_timezone=self.tz, config=self.config, liveness=liveness, timing=timing)
        self.loops[node] = loop
        self.leases[node] = leases
        return loop

    def cut_off(self, node: str, cut: bool = True) -> None:
        """The node loses (or regains) the database; it still reaches the executors."""
        self.leases[node].cut_off = cut
        if cut:
            self.runlog.cut_off.add(node)
        else:
            self.runlog.cut_off.discard(node)

    def stray_rows(self) -> list[LogRow]:
        """Rows recorded and not sent by a node that does not hold the job: a node giving a
        job up must withdraw them first (the next holder could not record those instants)."""
        return [row for row in self.table.rows.values()
                if not row.sent and (job := self.table.jobs.get(row.job_id)) is not None
                and job.lease_owner != row.node]

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
