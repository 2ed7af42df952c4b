"""Flow control in the admin: the admission step between recording a fire and sending it,
and the pump that starts queued runs when room frees up (docs/dispatch.md "Flow control").

A fire whose job or group has flow settings (``FirePlan.flow``) is not sent at once: its
recorded rows go through an admission pass of their group (``FlowRepository.admission``:
one transaction under the group's lock, deciding with :func:`jobring.core.flow.admit`), which
starts them, queues them, skips them or cancels them (and perhaps the oldest running runs).
Fires of jobs without settings never come here: the trigger checks ``plan.flow``, read with
the job and its group, and asks nothing more.

Queued runs start in later passes, run only when something may have changed: after a result
is recorded on this node (the callback pokes the pump), when a rate-limited run's token is due
(the admission's ``wake_ms``), after a queued run is cancelled or flow settings change on this
node (:meth:`FlowGate.changed`), and every ``poll_ms`` (30 s) on every node as a safety net. A
group whose last pass started nothing is passed again on a poke only if one of its running runs
has ended since (a cheap read outside the group's lock): a big queue that cannot move costs no
locked pass per result. The node whose pass starts a stored run dispatches it.

A job keeps at most ``max_queued_per_job`` runs waiting and a group ``max_queued_per_group``:
a new arrival past either is skipped (its trigger fails with a message saying the queue is
full), which bounds what every pass reads under the lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections import Counter
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

from jobring.admin.dispatch.client import ExecutorClient
from jobring.admin.store import Store
from jobring.admin.store.flow import FlowAdmitted, FlowArrival, FlowOutcome, FlowView
from jobring.admin.store.records import LogEntry, TriggerResult
from jobring.admin.trigger.dispatcher import FireDispatcher
from jobring.admin.trigger.fires import FirePlan, FireRequest, run_candidates, sent_time_ms
from jobring.admin.trigger.recorder import FireRecorder
from jobring.background import Background
from jobring.core.clock import Clock
from jobring.core.enums import RouteStrategy, TriggerType
from jobring.core.flow import (
    DEFAULT_AGING_MS,
    Admission,
    BucketState,
    FlowError,
    FlowSnapshot,
    QueuedRun,
    RunningRun,
    Scope,
    Waiting,
    admit,
    fair_key,
)
from jobring.core.flow.settings import FlowSettings, parse_flow, run_flow, scope_limits
from jobring.core.routing import parse_strategy
from jobring.core.runstate import FLOW_CANCEL_PREFIX, FLOW_SKIP_PREFIX, QUEUED_PREFIX
from jobring.protocol.models import FAIL_CODE, SUCCESS_CODE

log = logging.getLogger(__name__)

__all__ = ["FlowGate", "Gated"]

MAX_QUEUED_PER_JOB = 1_000  # runs of one job waiting at once (more arrivals are skipped)
MAX_QUEUED_PER_GROUP = 5_000  # of one group; also what one pass reads
SAFETY_POLL_MS = 30_000  # a pass of every waiting group even without a poke


@dataclass
class Gated:
    """The admission of recorded plans: ``send`` now (shards not started are left out);
    ``write`` trigger results to record (fires that failed before admission); ``held``
    results of runs not sent (queued, skipped, cancelled: already written by the pass)."""

    send: list[FirePlan] = field(default_factory=list)
    write: list[TriggerResult] = field(default_factory=list)
    held: list[TriggerResult] = field(default_factory=list)


@functools.lru_cache(maxsize=65_536)
def _scopes(texts: tuple[str, ...]) -> tuple[Scope, ...]:
    # Runs of one job share their scopes: parsed once, not once per run and pass.
    return tuple(Scope.parse(t) for t in texts)


def _why(wait: Waiting) -> str:
    """Why a run waits, for its run-log message (after ``queued: ``)."""
    if wait.full:
        return "limit reached: " + ", ".join(str(s) for s in wait.full)
    if wait.rate_limited:
        return "rate limit: " + ", ".join(str(s) for s in wait.rate_limited)
    if wait.behind is not None:
        return f"behind run {wait.behind} of the same key"
    return "waiting for its turn"


def _subplan(plan: FirePlan, keep: list[int]) -> FirePlan:
    """The plan with only the shards of ``keep`` (its log ids)."""
    if len(keep) == len(plan.log_ids):
        return plan
    part = FirePlan(plan.req, plan.strategy, plan.param, plan.retry_count, plan.trigger_time_ms)
    for name in ("addresses", "undeclared", "manual_addresses", "problem", "token", "app_name",
                 "logical_ms", "interval_start_ms", "refusal"):
        setattr(part, name, getattr(plan, name))
    wanted = set(keep)
    part.shards = [s for s, i in zip(plan.shards, plan.log_ids, strict=True) if i in wanted]
    part.log_ids = [i for i in plan.log_ids if i in wanted]
    return part


def _sharding(entry: LogEntry) -> tuple[int, int] | None:
    index, _, total = (entry.executor_sharding_param or "").partition("/")
    if index.isdigit() and total.isdigit() and int(index) < int(total):
        return int(index), int(total)
    return None


class FlowGate:
    """Admission of flow-controlled fires, and the pump of queued runs."""

    def __init__(self, store: Store, clock: Clock, dispatcher: FireDispatcher, recorder: FireRecorder,
                 client: ExecutorClient | None = None, *, aging_ms: int | None = DEFAULT_AGING_MS,
                 max_starts: int = 1_000, poll_ms: int = SAFETY_POLL_MS,
                 max_queued_per_job: int = MAX_QUEUED_PER_JOB,
                 max_queued_per_group: int = MAX_QUEUED_PER_GROUP) -> None:
        self._store = store
        self._clock = clock
        self._dispatcher = dispatcher
        self._recorder = recorder
        self._client = client
        self._aging_ms = aging_ms
        self._max_starts = max_starts
        self._poll_s = poll_ms / 1000
        self.max_queued_per_job = max_queued_per_job
        self.max_queued_per_group = max_queued_per_group
        self._poked = asyncio.Event()
        self._wake_ms: int | None = None
        # Groups whose last pass started nothing while runs waited -> when a token is due
        # (None: none): the pump passes them again only when something may have changed.
        self._stuck: dict[int, int | None] = {}
        self._busy = False  # runs were waiting at the last look: results poke the pump
        self._task: asyncio.Task[None] | None = None
        self._work = Background(log)
        # For metrics and tests: runs started, queued, skipped and cancelled by this node.
        self.counts = {"started": 0, "queued": 0, "skipped": 0, "cancelled": 0}

    # -- the admission step -----------------------------------------------------------------

    async def admit(self, plans: Sequence[FirePlan]) -> Gated:
        """Admit recorded plans that have flow settings (see the module docstring)."""
        gated = Gated()
        by_group: dict[int, list[FlowArrival]] = {}
        for plan in plans:
            if plan.duplicate or not plan.log_ids:
                continue
            if plan.refusal is not None:  # fails without being sent: it takes no slot
                gated.send.append(plan)
                continue
            job = plan.req.job
            try:
                job_text, group_text = plan.flow or (None, None)
                flow = run_flow(job.id, job.job_group, parse_flow(job_text), parse_flow(group_text),
                                plan.param)
            except FlowError as exc:
                gated.write.extend(TriggerResult(i, None, FAIL_CODE, f"Trigger Fail: {exc}")
                                   for i in plan.log_ids)
                continue
            texts = tuple(str(s) for s in flow.scopes)
            key = fair_key(flow.scopes)
            broadcast = plan.strategy is RouteStrategy.SHARDING_BROADCAST
            by_group.setdefault(job.job_group, []).extend(
                FlowArrival(i, job.id, texts, key, flow.priority,
                            f"{shard[0]}/{shard[1]}" if broadcast else None)
                for shard, i in zip(plan.shards, plan.log_ids, strict=True))
        started: set[int] = set()
        for group_id, arrivals in by_group.items():
            try:
                admitted = await self.pass_group(group_id, arrivals)
            except Exception as exc:
                log.exception("admission of %d runs of group %s failed", len(arrivals), group_id)
                gated.write.extend(TriggerResult(a.log_id, None, FAIL_CODE, f"Trigger Fail: flow admission "
                                                 f"failed: {type(exc).__name__}") for a in arrivals)
                continue
            started.update(admitted.started_arrivals)
            out = admitted.outcome
            gated.held.extend(TriggerResult(i, None, SUCCESS_CODE, QUEUED_PREFIX + why)
                              for i, why in out.queue.items())
            gated.held.extend(TriggerResult(i, None, FAIL_CODE, msg) for i, msg in out.skip.items())
            gated.held.extend(TriggerResult(i, None, FAIL_CODE, msg) for i, msg in out.cancel.items()
                              if i in {a.log_id for a in arrivals})
        for plan in plans:
            keep = [i for i in plan.log_ids if i in started]
            if keep:
                gated.send.append(_subplan(plan, keep))
        return gated

    async def pass_group(self, group_id: int, arrivals: Sequence[FlowArrival] = ()) -> FlowAdmitted:
        """One admission pass of a group; starts (in the background) the stored runs it
        admitted and the kills of the running runs it cancelled."""
        now = self._clock.now_ms()
        decision: list[Admission] = []

        def decide(view: FlowView, new: Sequence[FlowArrival]) -> FlowOutcome:
            admission = self._decide(view, new, now)
            decision.append(admission)
            return self._capped(view, new, self._outcome(admission, new))

        admitted = await self._store.flow.admission(group_id, arrivals, now, decide,
                                                    max_queued=self.max_queued_per_group)
        out = admitted.outcome
        waiting = bool(out.queue or decision and decision[0].waiting)
        if waiting and not out.start:
            self._stuck[group_id] = decision[0].wake_ms if decision else None
        else:
            self._stuck.pop(group_id, None)
        self.counts["started"] += len(out.start)
        self.counts["queued"] += len(out.queue)
        self.counts["skipped"] += len(out.skip)
        self.counts["cancelled"] += len(out.cancel)
        if waiting:
            self._busy = True
        if decision and decision[0].wake_ms is not None:
            self._wake_at(decision[0].wake_ms)
        if admitted.started_queued:
            self._spawn(self._dispatch_stored(admitted.started_queued), "dispatching admitted runs")
        if admitted.cancelled_running:
            self._spawn(self._kill(admitted.cancelled_running), "killing cancelled runs")
        return admitted

    def _decide(self, view: FlowView, arrivals: Sequence[FlowArrival], now: int) -> Admission:
        group = self._settings(view.group_flow, f"group {view.group_id}")
        jobs = {job_id: self._settings(text, f"job {job_id}") for job_id, text in view.job_flows.items()}
        queued = [QueuedRun(r.log_id, _scopes(r.scopes), r.enqueued_ms, r.priority) for r in view.queued]
        queued += [QueuedRun(a.log_id, _scopes(a.scopes), now, a.priority, new=True) for a in arrivals]
        running = [RunningRun(r.log_id, _scopes(r.scopes), r.started_ms or now) for r in view.active]
        limits, rates = scope_limits({s for q in queued for s in q.scopes}, jobs, group)
        buckets = {Scope.parse(k): BucketState(level, stamp) for k, (level, stamp) in view.buckets.items()}
        snapshot = FlowSnapshot(queued, running, limits, rates, buckets, view.turns)
        return admit(snapshot, now, aging_ms=self._aging_ms, max_starts=self._max_starts)

    def _capped(self, view: FlowView, arrivals: Sequence[FlowArrival], out: FlowOutcome) -> FlowOutcome:
        """Skip the arrivals that would queue past the job's or the group's queue cap."""
        per_job = Counter(view.queued_per_job)
        in_group = sum(per_job.values())
        jobs = {a.log_id: a.job_id for a in arrivals}
        for log_id in [i for i in out.queue if i in jobs]:
            job_id = jobs[log_id]
            job_cap, group_cap = self.max_queued_per_job, self.max_queued_per_group
            if per_job[job_id] >= job_cap:
                why = f"job {job_id} has {per_job[job_id]} runs queued (at most {job_cap})"
            elif in_group >= group_cap:
                why = f"group {view.group_id} has {in_group} runs queued (at most {group_cap})"
            else:
                per_job[job_id] += 1
                in_group += 1
                continue
            del out.queue[log_id]
            out.skip[log_id] = f"{FLOW_SKIP_PREFIX}queue full: {why}"
        return out

    @staticmethod
    def _settings(text: str | None, owner: str) -> FlowSettings | None:
        try:
            return parse_flow(text)
        except FlowError as exc:
            log.error("flow settings of %s ignored: %s", owner, exc)
            return None

    @staticmethod
    def _outcome(admission: Admission, arrivals: Sequence[FlowArrival]) -> FlowOutcome:
        new = {a.log_id for a in arrivals}
        waiting = {w.run_id: w for w in admission.waiting}
        return FlowOutcome(
            start=list(admission.start),
            queue={i: _why(waiting[i]) for i in admission.queue},
            skip={s.run_id: f"{FLOW_SKIP_PREFIX}{s.scope}: its limit is reached" for s in admission.skip},
            cancel={c.run_id: (f"{FLOW_CANCEL_PREFIX}: the limit of {c.scope} is reached; run {c.for_run} "
                               + ("arrived after it" if c.run_id in new else "replaced it"))
                    for c in admission.cancel},
            buckets={str(b.scope): (None if b.old is None else (b.old.level, b.old.stamp_ms),
                                    (b.new.level, b.new.stamp_ms)) for b in admission.buckets},
            turns=dict(admission.turns),
            forget=list(admission.forget),
        )

    # -- runs started or cancelled by a pass ----------------------------------------------------

    async def _dispatch_stored(self, entries: Sequence[LogEntry]) -> None:
        jobs = await self._store.jobs.get_many({e.job_id for e in entries})
        plans: list[FirePlan] = []
        failed: list[TriggerResult] = []
        for entry in entries:
            job = jobs.get(entry.job_id)
            if job is None:
                failed.append(TriggerResult(
                    entry.id, None, FAIL_CODE,
                    f"Trigger Fail: job {entry.job_id} was deleted while its run waited"))
                continue
            try:
                kind = TriggerType(entry.trigger_type or TriggerType.MANUAL)
            except ValueError:
                kind = TriggerType.MANUAL
            req = FireRequest(job, kind, planned_time=entry.planned_time, executor_param=entry.executor_param,
                              fail_retry_count=entry.executor_fail_retry_count, sharding=_sharding(entry),
                              attempt=entry.attempt, root_run_id=entry.root_run_id,
                              child_depth=entry.child_depth, retry_of=entry.retry_of,
                              workflow_node_run_id=entry.workflow_node_run_id)
            # Sent with the instant its row keeps (set when it was admitted): the identity the
            # admin asks executors about and kills by.
            plan = FirePlan(req, parse_strategy(job.executor_route_strategy), entry.executor_param or "",
                            entry.executor_fail_retry_count, sent_time_ms(entry))
            # What the run stands for was decided when it was recorded (params rendered then).
            plan.logical_ms, plan.interval_start_ms = entry.logical_time, entry.data_interval_start
            plan.log_ids.append(entry.id)
            plans.append(plan)
        answers: list[TriggerResult] = []
        if plans:
            try:
                await self._dispatcher.resolve(plans)
            except Exception as exc:
                log.exception("reading the executor groups of %d admitted runs failed", len(plans))
                for plan in plans:
                    plan.problem = f"could not read the executor group: {type(exc).__name__}"
            answers = await self._dispatcher.settle(self._dispatcher.start(plans))
        await self._recorder.write_results(answers + failed)

    async def _kill(self, entries: Sequence[LogEntry]) -> None:
        if self._client is None:
            return
        groups = {g: await self._store.groups.get(g) for g in {e.job_group for e in entries}}
        for entry in entries:
            group = groups.get(entry.job_group)
            if not entry.executor_address or group is None:
                continue
            answer = await self._client.kill(entry.executor_address, entry.job_id,
                                             group.access_token or None, group.app_name,
                                             runs=run_candidates(entry))
            if not answer.ok:
                log.warning("run %s was cancelled by flow control but its executor refused the kill: %s",
                            entry.id, answer.msg, extra={"run_id": entry.id, "job_id": entry.job_id})

    # -- the pump -------------------------------------------------------------------------------

    def poke(self) -> None:
        """A run may have ended: run a pass soon if runs were waiting."""
        if self._busy:
            self._poked.set()

    def changed(self, group_id: int) -> None:
        """The group's flow settings or queue changed (on this node): pass it again soon."""
        self._stuck.pop(group_id, None)
        self.poke()

    def _wake_at(self, at_ms: int) -> None:
        if self._wake_ms is None or at_ms < self._wake_ms:
            self._wake_ms = at_ms
            self._poked.set()  # the pump recomputes its sleep

    def start(self) -> None:
        """Start the pump (once)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._pump(), name="jobring-flow-pump")

    async def close(self, wait_s: float = 5.0) -> None:
        """Stop the pump; wait briefly (``wait_s``) for the dispatches it started, then cancel
        those still running: they must not outlive the trigger service and its store (a run
        left unanswered is settled as any other, by the lost-run monitor)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self._work.stop(wait_s, "flow control's dispatches")

    async def _pump(self) -> None:
        loop = asyncio.get_running_loop()
        backoff = self._poll_s
        next_full = loop.time() + self._poll_s
        while True:
            timeout = min(backoff, max(0.0, next_full - loop.time()))
            if self._wake_ms is not None:
                timeout = min(timeout, max(0.0, (self._wake_ms - self._clock.now_ms()) / 1000))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._poked.wait(), timeout)
            self._poked.clear()
            if self._wake_ms is not None and self._wake_ms <= self._clock.now_ms():
                self._wake_ms = None
            full = loop.time() >= next_full
            if full:
                next_full = loop.time() + self._poll_s
            try:
                await self.pump_once(full=full)
                backoff = self._poll_s
            except asyncio.CancelledError:
                raise
            except Exception:
                backoff = min(30.0, backoff * 2)
                log.exception("flow-control pass failed; next try in %.1f s", backoff)

    async def pump_once(self, *, full: bool = True) -> int:
        """One pass of every group with runs waiting; the runs started. Without ``full``, a
        group whose last pass started nothing is passed only when a token is due or one of
        its running runs ended since."""
        groups = await self._store.flow.waiting_groups()
        self._busy = bool(groups)
        self._stuck = {g: w for g, w in self._stuck.items() if g in groups}
        now = self._clock.now_ms()
        started = 0
        for group_id in groups:
            if not full and group_id in self._stuck:
                wake = self._stuck[group_id]
                if (wake is None or wake > now) and not await self._store.flow.ended_held(group_id):
                    continue
            started += len((await self.pass_group(group_id)).outcome.start)
        return started

    def _spawn(self, work: Coroutine[Any, Any, None], what: str) -> None:
        self._work.spawn(work, f"flow control: {what}")
