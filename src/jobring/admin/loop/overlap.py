"""Overlap policies in the admin (issue 24 item 3): what a job's scheduled fire does while runs
of the job are still in progress, on any executor.

The decision is :mod:`jobring.core.timing.overlap`'s; this module gives it the job's runs in
progress (the run log: recorded or sent, no result yet, any trigger type) and its waiting fires
(``jobring_overlap_wait``), and carries it out:

- :class:`OverlapGate` sits in the loop's fire port: fires of jobs whose timing names a policy
  other than ``allow_all`` pass through it at their instant (they are not recorded ahead, see
  :mod:`.readahead`); it starts them, records them as ``skipped`` runs (``skipped by overlap:
  ...``), makes them wait, or stops the runs in progress first (``cancel_other``: the executor
  is asked to kill them and the new fire waits for their results; ``terminate_other``: they are
  killed and recorded as failed at once, and the new fire starts).
- :class:`OverlapRunner` (every admin node, each second, and at once when a result is recorded
  on this node) starts the oldest waiting fire of each job once none of its runs is in
  progress. A waiting fire is taken by deleting its row, so two nodes never start the same one.

Jobs without a policy pay one look at ``job.timing`` per fire.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import orjson

from jobring.admin.monitors.base import Monitor
from jobring.admin.store.overlap import RunInProgress
from jobring.admin.store.records import HandleResult, JobInfo, NewLog
from jobring.admin.trigger.trigger import FireRequest, TriggerRejected, TriggerService
from jobring.core.clock import Clock
from jobring.core.enums import AlarmStatus, HandleCode, TriggerType
from jobring.core.timing import OverlapAction, OverlapPolicy, OverlapState, decide_due
from jobring.core.timing.errors import TimingError, parse_choice
from jobring.protocol.models import FAIL_CODE

if TYPE_CHECKING:
    from jobring.admin.dispatch.client import ExecutorClient
    from jobring.admin.store import Store

log = logging.getLogger(__name__)

TERMINATED_MSG = "terminated by the job's overlap policy (terminate_other): a newer fire starts"
_REPLACED = "overlap: a newer fire replaces this waiting one (policy {policy})"
_POLICIES: dict[str, OverlapPolicy | None] = {}  # timing text -> policy (None: allow_all)
_POLICIES_KEPT = 4_096


def overlap_policy(job: JobInfo) -> OverlapPolicy | None:
    """The job's overlap policy, None for ``allow_all`` (or no timing rules)."""
    text = job.timing
    if not text or '"overlap"' not in text:
        return None
    known = _POLICIES.get(text, False)
    if known is not False:
        return known  # type: ignore[return-value]
    try:
        spec = orjson.loads(text)
        policy: OverlapPolicy | None = parse_choice(OverlapPolicy, spec.get("overlap", "allow_all"),
                                                    "overlap")
    except (ValueError, AttributeError, TimingError):
        policy = None  # validated when written; the loop refuses such a job when it adopts it
    if policy is OverlapPolicy.ALLOW_ALL:
        policy = None
    if len(_POLICIES) >= _POLICIES_KEPT:
        _POLICIES.clear()
    _POLICIES[text] = policy
    return policy


def _now_naive(clock: Clock) -> datetime:
    return datetime.fromtimestamp(clock.now_ms() / 1000, UTC).replace(tzinfo=None)


class OverlapGate:
    """Decides the fires of jobs with an overlap policy (see the module docstring)."""

    def __init__(self, store: Store, clock: Clock, executors: ExecutorClient | None = None,
                 node_id: str | None = None) -> None:
        self._store = store
        self._clock = clock
        self._executors = executors
        self._node_id = node_id
        # For metrics and tests: fires skipped, made to wait, runs stopped.
        self.skipped = 0
        self.buffered = 0
        self.stopped = 0

    async def admit(self, requests: Sequence[FireRequest]) -> list[FireRequest]:
        """The fires to start now, in order; the others are recorded as skipped or wait."""
        if not any(r.job.timing for r in requests):
            return list(requests)
        gated: dict[int, list[tuple[FireRequest, OverlapPolicy]]] = {}
        for req in requests:
            policy = overlap_policy(req.job) if req.planned_time is not None else None
            if policy is not None:
                gated.setdefault(req.job.id, []).append((req, policy))
        if not gated:
            return list(requests)
        held_back = {id(req) for items in gated.values() for req, _ in items}
        for items in gated.values():
            held_back -= {id(req) for req in await self._decide(items)}
        return [req for req in requests if id(req) not in held_back]

    async def _decide(self, items: list[tuple[FireRequest, OverlapPolicy]]) -> list[FireRequest]:
        store = self._store
        job = items[-1][0].job
        running = {r.id: r for r in await store.overlap.in_progress(job.id)}
        waiting = await store.overlap.waiting(job.id)
        ids = frozenset(running)
        if not ids and waiting:
            # Nothing runs but fires wait: the runner starts the oldest one shortly; it counts
            # as running (a placeholder id, -1) so that the new fire queues behind it.
            ids = frozenset({-1})
        state = OverlapState(ids, tuple(w.planned_time for w in waiting))
        start: list[FireRequest] = []
        for req, policy in items:
            fire = req.planned_time
            assert fire is not None
            decision = decide_due(policy, state, fire)
            action = decision.action
            if decision.dropped:
                await store.overlap.remove_fires(job.id, decision.dropped)
                await self._record_skipped(req.job, decision.dropped, _REPLACED.format(policy=policy.value))
            if decision.stop:
                await self._stop([running[i] for i in decision.stop if i in running], req.job,
                                 terminate=action is OverlapAction.TERMINATE_THEN_START)
            if action is OverlapAction.SKIP:
                await self._record_skipped(req.job, (fire,), decision.reason or "overlap")
            elif action in (OverlapAction.BUFFER, OverlapAction.CANCEL_THEN_START):
                if await store.overlap.wait(job.id, job.job_group, fire, req.logical_time or fire,
                                            req.trigger_type.value, self._clock.now_ms()):
                    self.buffered += 1
                    log.info("job %s: fire %s waits for the runs in progress (overlap %s)", job.id, fire,
                             policy.value, extra={"job_id": job.id})
            else:
                start.append(req)
            state = decision.state
            if decision.start == fire:
                # A placeholder id for the run about to start (not in the run log yet).
                state = state.started(-2 - len(start))
        return start

    async def _stop(self, runs: Sequence[RunInProgress], job: JobInfo, *, terminate: bool) -> None:
        """Ask the runs' executors to kill them; ``terminate``: record them failed now (the new
        fire starts at once), else their results (the executor's callback, or the lost-run
        monitor) end them and the waiting fire starts then."""
        self.stopped += len(runs)
        if self._executors is not None:
            group = await self._store.groups.get(job.job_group)
            token = group.access_token if group else None
            app_name = group.app_name if group else None
            for address in sorted({r.executor_address for r in runs if r.executor_address}):
                answer = await self._executors.kill(address, job.id, token, app_name)
                if not answer.ok:
                    log.warning("job %s: executor %s did not kill its run (%s)", job.id, address, answer.msg,
                                extra={"job_id": job.id})
        if terminate:
            now = _now_naive(self._clock)
            await self._store.logs.record_results(
                [HandleResult(r.id, int(HandleCode.FAIL), TERMINATED_MSG, now) for r in runs])
        log.info("job %s: %s runs %s (overlap policy)", job.id, "terminated" if terminate else "cancelling",
                 [r.id for r in runs], extra={"job_id": job.id})

    async def _record_skipped(self, job: JobInfo, instants: Sequence[int], reason: str) -> None:
        if not instants:
            return
        self.skipped += len(instants)
        now = _now_naive(self._clock)
        await self._store.logs.insert_fires([
            NewLog(job.job_group, job.id, now, executor_handler=job.executor_handler,
                   executor_param=job.executor_param, trigger_code=FAIL_CODE,
                   trigger_msg=f"skipped by {reason}", trigger_type=job.schedule_type,
                   planned_time=instant, alarm_status=int(AlarmStatus.NOT_NEEDED), admin_node=self._node_id)
            for instant in instants
        ])


class OverlapRunner(Monitor):
    """Starts a job's oldest waiting fire once none of its runs is in progress."""

    name = "overlap-waits"

    def __init__(self, store: Store, trigger: TriggerService, *, interval_s: float = 1.0) -> None:
        super().__init__(interval_s)
        self._store = store
        self._trigger = trigger
        self._active = True  # fires were seen waiting (results wake the runner only then)
        self.started = 0

    def results(self, results: Sequence[tuple[int, int, str | None]]) -> None:
        """Runs ended (the callback service's results): a waiting fire may start."""
        if self._active and results:
            self.wake()

    async def tick(self) -> None:
        job_ids = await self._store.overlap.jobs_waiting()
        self._active = bool(job_ids)
        for job_id in job_ids:
            try:
                await self._start_next(job_id)
            except Exception:
                log.exception("job %d: starting its waiting fire failed; next try at the next tick", job_id)

    async def _start_next(self, job_id: int) -> None:
        store = self._store
        job = await store.jobs.get(job_id)
        if job is None:
            await store.overlap.remove_for_job(job_id)
            return
        if job.trigger_status != 1 or await store.overlap.in_progress(job_id, limit=1):
            return  # runs in progress (or the job is stopped: its fires wait until it starts)
        waiting = await store.overlap.waiting(job_id, limit=1)
        if not waiting or not await store.overlap.take(waiting[0].id):
            return  # another node took it
        fire = waiting[0]
        request = FireRequest(job, TriggerType(fire.trigger_type), planned_time=fire.planned_time,
                              logical_time=fire.logical_time)
        try:
            result = await self._trigger.fire(request)
        except TriggerRejected as exc:
            log.warning("job %d: waiting fire %d not run: %s", job_id, fire.planned_time, exc)
            return
        self.started += 1
        log.info("job %d: waiting fire %d started (runs %s)", job_id, fire.planned_time, result.log_ids,
                 extra={"job_id": job_id})
