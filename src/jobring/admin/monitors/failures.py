"""Failed runs: retries with back-off, failure alarms; deadline and recovery alarms.

**Retries.** A failed run (trigger or handle code not 200) whose ``executor_fail_retry_count``
is above 0 is retried once its back-off has passed: the job's
``executor_fail_retry_interval_s``, fixed or doubling per attempt up to
``retry_backoff_max_s``. Until then the run keeps alarm_status 0, so the pending retry is
in the database and survives an admin restart. No retry is fired for a scheduled job that
was stopped, nor for a run a user killed (a kill is a decision, not a failure to undo), nor
for a run that failed longer ago than ``retry_max_age`` (an adopted database full of old
failures must not fire them all at once). A broadcast shard is
retried alone, on the same address while it is still routable.

**Alarms.** ``alarm_on`` = ``failure_final`` (default) alarms when no retry follows;
``every_failure`` alarms each failed run. The run's alarm is claimed by compare-and-set
(alarm_status 0 -> -1) and queued on the :class:`AlarmService`; with several admin nodes
only the one whose update changed the row sends it. ``alarm_recovery`` alarms the first
success after a failure; ``deadline_minutes`` alarms a run still unfinished that long
after its planned instant. Those two are claimed by inserting a ``jobring_alarm_event``
row (unique per run and kind).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from jobring.admin.alarms.base import AlarmKind
from jobring.admin.alarms.service import AlarmService
from jobring.admin.monitors.base import Monitor
from jobring.admin.store.records import JobInfo, LogEntry
from jobring.admin.trigger.trigger import FireRequest, TriggerService
from jobring.core.clock import Clock
from jobring.core.enums import AlarmStatus, ScheduleType, TriggerStatus, TriggerType
from jobring.core.retry import AlarmOn, retry_delay_ms
from jobring.core.runstate import killed_by_user

if TYPE_CHECKING:
    from jobring.admin.store import Store

log = logging.getLogger(__name__)

MSG_RETRY_MARK = ">>>>>>>>>>> Fail retry trigger <<<<<<<<<<<"
DEADLINE_LOOKBACK_MS = 24 * 3600 * 1000  # unfinished runs older than deadline + this are not looked at


def _ms(value: datetime | None) -> int | None:
    return None if value is None else int(value.replace(tzinfo=UTC).timestamp() * 1000)


def _sharding(param: str | None) -> tuple[int, int] | None:
    """``"i/n"`` from a log row as (index, total), or None."""
    if not param:
        return None
    parts = param.split("/")
    if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
        return int(parts[0]), int(parts[1])
    return None


def failed_at_ms(entry: LogEntry) -> int:
    """When the run failed: its result time, else its trigger time."""
    return _ms(entry.handle_time) or _ms(entry.trigger_time) or 0


def retry_due_ms(entry: LogEntry, job: JobInfo) -> int:
    """When the retry of the failed run ``entry`` may be fired."""
    delay = retry_delay_ms(
        entry.attempt, job.executor_fail_retry_interval_s, job.retry_backoff, job.retry_backoff_max_s
    )
    return failed_at_ms(entry) + delay


def retry_refusal(entry: LogEntry, job: JobInfo | None, now_ms: int, max_age_ms: int) -> str | None:
    """Why the failed run must not be retried, or None when it may (its count allowing)."""
    if killed_by_user(entry.handle_msg):
        return "a user killed it"
    if job is None:
        return f"job {entry.job_id} is gone"
    if job.trigger_status == TriggerStatus.STOPPED and job.schedule_type != ScheduleType.NONE:
        return f"job {job.id} is stopped"
    if max_age_ms > 0 and now_ms - failed_at_ms(entry) > max_age_ms:
        return f"the run failed more than {max_age_ms // 1000} s ago"
    return None


class FailMonitor(Monitor):
    """Failed runs with alarm_status 0: retry when due, alarm by the job's rule."""

    name = "fail-monitor"

    def __init__(
        self,
        store: Store,
        trigger: TriggerService,
        alarms: AlarmService,
        clock: Clock,
        *,
        retry_max_age_s: int = 3600,
        interval_s: float = 10.0,
        legacy_log_id_max: int = 0,
    ) -> None:
        super().__init__(interval_s)
        # An adopted XXL-JOB database's history (ids up to this) is never retried or alarmed.
        self._legacy_log_id_max = legacy_log_id_max
        self._store = store
        self._trigger = trigger
        self._alarms = alarms
        self._clock = clock
        self._max_age_ms = retry_max_age_s * 1000
        self._next_due_ms: int | None = None

    def next_wait_s(self) -> float:
        if self._next_due_ms is None:
            return self.interval_s
        return min(self.interval_s, max(0.05, (self._next_due_ms - self._clock.now_ms()) / 1000))

    async def tick(self) -> None:
        now = self._clock.now_ms()
        self._next_due_ms = None
        await resend_stale(self._store, self._alarms, now)
        failed = await self._store.logs.failed_unalarmed(1000, after_id=self._legacy_log_id_max)
        if not failed:
            return
        jobs = await self._store.jobs.get_many({e.job_id for e in failed})
        retries: list[LogEntry] = []
        for entry in failed:
            job = jobs.get(entry.job_id)
            retry = False
            if entry.executor_fail_retry_count > 0:
                refusal = retry_refusal(entry, job, now, self._max_age_ms)
                if refusal is None and job is not None:
                    due = retry_due_ms(entry, job)
                    if due > now:  # not yet: the row stays as it is until then
                        self._next_due_ms = due if self._next_due_ms is None else min(self._next_due_ms, due)
                        continue
                    retry = True
                elif refusal is not None:
                    log.warning("run %s of job %s not retried: %s", entry.id, entry.job_id, refusal)
            # Another node may take the run between the query and this compare-and-set.
            if not await self._store.logs.set_alarm_status(entry.id, AlarmStatus.DEFAULT, AlarmStatus.LOCKED):
                continue
            if retry:
                retries.append(entry)
            wanted = job is not None and (job.alarm_on == AlarmOn.EVERY_FAILURE or not retry)
            if wanted and job is not None and self._alarms.alarmer.channels_for(job):
                # The event row lets another node finish the alarm should this one die sending it.
                await self._store.alarms.claim(entry.id, job.id, AlarmKind.FAILURE.value, now)
                self._alarms.submit(AlarmKind.FAILURE, entry, job)
            else:
                await self._store.logs.set_alarm_status(entry.id, AlarmStatus.LOCKED, AlarmStatus.NOT_NEEDED)
        if retries:
            await self._retry(retries, jobs)

    async def _retry(self, entries: Sequence[LogEntry], jobs: dict[int, JobInfo]) -> None:
        reqs: list[FireRequest] = []
        for entry in entries:
            job = jobs[entry.job_id]
            reqs.append(
                FireRequest(
                    job,
                    TriggerType.RETRY,
                    executor_param=entry.executor_param,
                    fail_retry_count=entry.executor_fail_retry_count - 1,
                    sharding=_sharding(entry.executor_sharding_param),
                    attempt=entry.attempt + 1,
                    retry_of=entry.id,
                    preferred_address=entry.executor_address if entry.executor_sharding_param else None,
                    # A child run's retry stays in its tree: its children use the same budget.
                    root_run_id=entry.root_run_id,
                    child_depth=entry.child_depth,
                    # A retry stands for the same instant (and stays in its backfill).
                    logical_time=_logical_of(entry),
                    data_interval_start=entry.data_interval_start,
                    backfill_id=entry.backfill_id,
                )
            )
        # Only the message is touched, in the statement: a dispatch confirmation that landed
        # after this run was read (its code and address) is kept.
        await self._store.logs.append_trigger_msg([e.id for e in entries], f"\n\n{MSG_RETRY_MARK}")
        results = await self._trigger.fire_batch(reqs)
        for req, result in zip(reqs, results, strict=True):
            log.info(
                "retry %d of job %s: runs %s code %s",
                req.attempt - 1,
                req.job.id,
                result.log_ids,
                result.trigger_code,
            )
            if result.trigger_code != 200:
                self.wake()  # a retry that failed to trigger is itself a failed run


class DeadlineMonitor(Monitor):
    """Runs still unfinished ``deadline_minutes`` after their planned instant: one alarm each."""

    name = "deadline-monitor"

    def __init__(self, store: Store, alarms: AlarmService, clock: Clock, interval_s: float = 15.0) -> None:
        super().__init__(interval_s)
        self._store = store
        self._alarms = alarms
        self._clock = clock

    async def tick(self) -> None:
        now = self._clock.now_ms()
        for job in await self._store.jobs.with_deadline():
            assert job.deadline_minutes is not None
            deadline_ms = job.deadline_minutes * 60_000
            overdue = await self._store.logs.unfinished_between(
                job.id, now - deadline_ms - DEADLINE_LOOKBACK_MS, now - deadline_ms
            )
            overdue = [
                e for e in overdue if (e.planned_time or _ms(e.trigger_time) or now) + deadline_ms <= now
            ]
            done = await self._store.alarms.taken([e.id for e in overdue], AlarmKind.DEADLINE.value)
            for entry in overdue:
                if entry.id in done:
                    continue
                if await self._store.alarms.claim(entry.id, job.id, AlarmKind.DEADLINE.value, now):
                    note = f"Deadline: not finished {job.deadline_minutes} min after its planned time"
                    self._alarms.submit(AlarmKind.DEADLINE, entry, job, note)


STALE_ALARM_MS = 10 * 60 * 1000  # far beyond one alarm's timeouts and retries


async def resend_stale(store: Store, alarms: AlarmService, now_ms: int) -> int:
    """Send again the alarms taken over 10 min ago and never finished (the node sending them
    died): each is retaken by compare-and-set, so one node resends it. Returns how many."""
    resent = 0
    for log_id, job_id, kind, taken_at in await store.alarms.stale(now_ms - STALE_ALARM_MS):
        if not await store.alarms.retake(log_id, kind, taken_at, now_ms):
            continue
        entry, job = await store.logs.get(log_id), await store.jobs.get(job_id)
        if entry is None or job is None:
            await store.alarms.set_status(log_id, kind, int(AlarmStatus.NOT_NEEDED))
            continue
        log.warning("%s alarm for run %s was never finished; sending it again", kind, log_id)
        alarms.submit(AlarmKind(kind), entry, job)
        resent += 1
    return resent


async def alarm_recoveries(store: Store, alarms: AlarmService, log_ids: Sequence[int], now_ms: int) -> int:
    """Recovery alarms for the successful runs ``log_ids`` whose job asks for them and whose
    previous finished run failed. Returns how many were queued."""
    if not log_ids:
        return 0
    entries = [e for e in await asyncio.gather(*(store.logs.get(i) for i in log_ids)) if e is not None]
    jobs = await store.jobs.get_many({e.job_id for e in entries})
    queued = 0
    for entry in entries:
        job = jobs.get(entry.job_id)
        if job is None or not job.alarm_recovery:
            continue
        previous = await store.logs.previous_finished(entry.job_id, entry.id)
        if previous is None or previous.handle_code == 200:
            continue
        if await store.alarms.claim(entry.id, job.id, AlarmKind.RECOVERY.value, now_ms):
            alarms.submit(AlarmKind.RECOVERY, entry, job, f"Recovered after failed run {previous.id}")
            queued += 1
    return queued


def _logical_of(entry: LogEntry) -> int | None:
    if entry.logical_time is not None:
        return entry.logical_time
    planned = entry.planned_time
    return planned if planned is not None and planned >= 0 else None
