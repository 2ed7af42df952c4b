"""Admin monitors: registry, fail (retry + alarm), lost runs, daily report, log and audit retention.

Each monitor has one ``tick()`` that does a full round of work (tests call it directly)
and runs as an asyncio task every ``interval_s``. Several admin nodes may run the same
monitors at once: every tick is safe under that (alarm_status is taken by compare-and-set,
results are recorded only where none exists, report rows and address lists are
idempotent upserts, deletes are by condition).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from jobring.admin.alarms.base import AlarmContext, Alarmer
from jobring.admin.scheduler.trigger import FireRequest, TriggerService
from jobring.admin.store.groups import EXECUTOR
from jobring.admin.store.records import HandleResult, JobInfo, LogEntry, ResultOutcome, TriggerResult
from jobring.core.clock import Clock
from jobring.core.enums import AddressType, AlarmStatus, HandleCode, TriggerType
from jobring.protocol.models import RegistryParam

if TYPE_CHECKING:
    from jobring.admin.store import Store

log = logging.getLogger(__name__)

BEAT_TIMEOUT_S = 30
DEAD_TIMEOUT_S = BEAT_TIMEOUT_S * 3
LOST_AFTER_S = 10 * 60
MSG_RESULT_LOST = "Job result lost, marked as failure"
MSG_DISPATCH_LOST = (
    "Trigger Fail: the fire was recorded but never dispatched (its admin node stopped before "
    "calling the executor); marked as failed by the lost-run monitor"
)
MSG_RETRY_MARK = ">>>>>>>>>>> Fail retry trigger <<<<<<<<<<<"
MIN_RETENTION_DAYS = 7
DEFAULT_AUDIT_RETENTION_DAYS = 180
DAY_MS = 24 * 3600 * 1000


def _utc(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def _sharding(param: str | None) -> tuple[int, int] | None:
    """``"i/n"`` from a log row as (index, total), or None."""
    if not param:
        return None
    parts = param.split("/")
    if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
        return int(parts[0]), int(parts[1])
    return None


class Monitor:
    """A periodic tick run as an asyncio task; errors are logged and the loop goes on."""

    name = "monitor"

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._task: asyncio.Task[None] | None = None

    async def tick(self) -> None:
        raise NotImplementedError

    async def _loop(self) -> None:
        while True:
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s tick failed; next try in %ss", self.name, self.interval_s)
            await asyncio.sleep(self.interval_s)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name=f"jobring-{self.name}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None


async def refresh_group_addresses(store: Store, now: datetime) -> dict[str, list[str]]:
    """Set every auto group's address list from the live heartbeats; returns them."""
    live = await store.registry.live(now - timedelta(seconds=DEAD_TIMEOUT_S))
    await store.groups.refresh_addresses(live, now)
    return live


class RegistryService:
    """``api/registry`` and ``api/registryRemove``: heartbeats, applied at once.

    A new address of an auto group is put into the group's address list right away (the
    reference waits for the next registry monitor round, up to 30 s), and a leaving one
    is taken out right away.
    """

    def __init__(self, store: Store, clock: Clock) -> None:
        self._store = store
        self._clock = clock

    async def _group_lists(self, app_name: str) -> list[list[str]] | None:
        group = await self._store.groups.by_app_name(app_name)
        if group is None or group.address_type != AddressType.AUTO:
            return None
        return [group.addresses]

    async def register(self, param: RegistryParam) -> None:
        now = _utc(self._clock.now_ms())
        await self._store.registry.beat(param.registry_group, param.registry_key, param.registry_value, now)
        if param.registry_group != EXECUTOR:
            return
        lists = await self._group_lists(param.registry_key)
        if lists is not None and any(param.registry_value not in addresses for addresses in lists):
            await refresh_group_addresses(self._store, now)

    async def remove(self, param: RegistryParam) -> None:
        now = _utc(self._clock.now_ms())
        removed = await self._store.registry.remove(
            param.registry_group, param.registry_key, param.registry_value
        )
        if removed and param.registry_group == EXECUTOR:
            await refresh_group_addresses(self._store, now)


class RegistryMonitor(Monitor):
    """Every 30 s: drop heartbeats older than 90 s, refresh auto groups' address lists."""

    name = "registry-monitor"

    def __init__(self, store: Store, clock: Clock, interval_s: float = BEAT_TIMEOUT_S) -> None:
        super().__init__(interval_s)
        self._store = store
        self._clock = clock

    async def tick(self) -> None:
        now = _utc(self._clock.now_ms())
        await self._store.registry.delete_dead(now - timedelta(seconds=DEAD_TIMEOUT_S))
        await refresh_group_addresses(self._store, now)


class FailMonitor(Monitor):
    """Failed runs with alarm_status 0: take them (0 -> -1), retry, alarm, set the status."""

    name = "fail-monitor"

    def __init__(
        self, store: Store, trigger: TriggerService, alarmer: Alarmer, interval_s: float = 10.0
    ) -> None:
        super().__init__(interval_s)
        self._store = store
        self._trigger = trigger
        self._alarmer = alarmer

    async def tick(self) -> None:
        failed = await self._store.logs.failed_unalarmed(1000)
        # Another node may take a log between the query and the compare-and-set.
        lock = self._store.logs.set_alarm_status
        taken = [e for e in failed if await lock(e.id, AlarmStatus.DEFAULT, AlarmStatus.LOCKED)]
        if not taken:
            return
        jobs = await self._store.jobs.get_many({e.job_id for e in taken})
        await self._retry([e for e in taken if e.executor_fail_retry_count > 0], jobs)
        statuses = await asyncio.gather(*(self._alarm(e, jobs.get(e.job_id)) for e in taken))
        for entry, status in zip(taken, statuses, strict=True):
            await self._store.logs.set_alarm_status(entry.id, AlarmStatus.LOCKED, status)

    async def _retry(self, entries: Sequence[LogEntry], jobs: dict[int, JobInfo]) -> None:
        reqs: list[FireRequest] = []
        marked: list[TriggerResult] = []
        for entry in entries:
            job = jobs.get(entry.job_id)
            if job is None:
                log.warning("log %s: job %s is gone, no retry", entry.id, entry.job_id)
                continue
            reqs.append(FireRequest(
                job,
                TriggerType.RETRY,
                executor_param=entry.executor_param,
                fail_retry_count=entry.executor_fail_retry_count - 1,
                sharding=_sharding(entry.executor_sharding_param),
            ))
            marked.append(TriggerResult(
                log_id=entry.id,
                executor_address=entry.executor_address,
                trigger_code=entry.trigger_code,
                trigger_msg=f"{entry.trigger_msg or ''}\n\n{MSG_RETRY_MARK}",
            ))
        if not reqs:
            return
        await self._store.logs.update_trigger_results(marked)
        results = await self._trigger.fire_batch(reqs)
        for req, result in zip(reqs, results, strict=True):
            log.info("retry of job %s: logs %s code %s", req.job.id, result.log_ids, result.trigger_code)

    async def _alarm(self, entry: LogEntry, job: JobInfo | None) -> AlarmStatus:
        if job is None:
            return AlarmStatus.NOT_NEEDED
        group = await self._store.groups.get(job.job_group)
        try:
            return await self._alarmer.alarm(AlarmContext(job, entry, group))
        except Exception:
            log.exception("alarm for log %s failed", entry.id)
            return AlarmStatus.FAILED


async def fail_undispatched(store: Store, triggered_before: datetime, limit: int = 1000) -> int:
    """Mark log rows that were inserted but never dispatched (trigger_code still 0) as
    trigger failures, so the fail monitor retries and alarms them. Returns how many.

    Such rows are left by an admin node that died between recording a fire and calling the
    executor; another node sees the fire as recorded and does not fire it again. The update
    is conditional on trigger_code 0, so it is safe with several nodes and late recorders.
    """
    ids = await store.fires.undispatched_before(triggered_before, limit)
    return await store.fires.fail_unconfirmed(ids, MSG_DISPATCH_LOST) if ids else 0


async def delete_old_audit(store: Store, now_ms: int, retention_days: int) -> int:
    """Delete audit records older than ``retention_days`` (at least 7), in batches."""
    days = max(retention_days, MIN_RETENTION_DAYS)
    deleted = await store.audit.delete_older_than(now_ms - days * DAY_MS)
    if deleted:
        log.info("deleted %d audit record(s) older than %d days", deleted, days)
    return deleted


class LostRunMonitor(Monitor):
    """Runs that stay "running" over 10 min on an executor without a live heartbeat fail;
    fires recorded but never dispatched for 10 min fail as triggers."""

    name = "lost-run-monitor"

    def __init__(self, store: Store, clock: Clock, interval_s: float = 60.0) -> None:
        super().__init__(interval_s)
        self._store = store
        self._clock = clock

    async def tick(self) -> None:
        now = _utc(self._clock.now_ms())
        live = await self._store.registry.live(now - timedelta(seconds=DEAD_TIMEOUT_S))
        addresses = {a for group in live.values() for a in group}
        undispatched = await fail_undispatched(self._store, now - timedelta(seconds=LOST_AFTER_S))
        if undispatched:
            log.warning("marked %d recorded but undispatched fire(s) as failed", undispatched)
        lost = await self._store.logs.lost_runs(now - timedelta(seconds=LOST_AFTER_S), addresses)
        if not lost:
            return
        # record_results only fills logs that have no result yet: safe against a late
        # callback and against another node doing the same.
        outcomes = await self._store.logs.record_results(
            [HandleResult(e.id, HandleCode.FAIL, MSG_RESULT_LOST, now) for e in lost]
        )
        log.warning("marked %d lost run(s) as failed", sum(o is ResultOutcome.APPLIED for o in outcomes))


class ReportMonitor(Monitor):
    """Every minute: daily run counts of the last 3 days; once a day: delete old logs and
    old audit records."""

    name = "report-monitor"

    def __init__(
        self,
        store: Store,
        clock: Clock,
        *,
        log_retention_days: int,
        audit_retention_days: int = DEFAULT_AUDIT_RETENTION_DAYS,
        interval_s: float = 60.0,
    ) -> None:
        super().__init__(interval_s)
        self._store = store
        self._clock = clock
        self._retention_days = log_retention_days
        self._audit_retention_days = audit_retention_days
        self._last_clean_ms: int | None = None
        self._last_audit_clean_ms: int | None = None

    async def tick(self) -> None:
        await self.refresh_report()
        await self.clean_logs()
        await self.clean_audit()

    async def refresh_report(self) -> None:
        now = _utc(self._clock.now_ms())
        today = now.replace(hour=0, minute=0, second=0, microsecond=0)
        for day in await self._store.logs.counts_by_day(today - timedelta(days=2), today):
            await self._store.reports.upsert_day(day.day, day.running, day.success, day.fail, now)

    async def clean_logs(self) -> int:
        """Delete logs older than the retention (once a day; never below 7 days)."""
        if self._retention_days < MIN_RETENTION_DAYS:
            return 0
        now_ms = self._clock.now_ms()
        if self._last_clean_ms is not None and now_ms - self._last_clean_ms < 24 * 3600 * 1000:
            return 0
        today = _utc(now_ms).replace(hour=0, minute=0, second=0, microsecond=0)
        deleted = await self._store.logs.delete_older_than(today - timedelta(days=self._retention_days))
        self._last_clean_ms = now_ms
        if deleted:
            log.info("deleted %d run log(s) older than %d days", deleted, self._retention_days)
        return deleted

    async def clean_audit(self) -> int:
        """Delete audit records older than their retention (once a day; at least 7 days kept)."""
        now_ms = self._clock.now_ms()
        if self._last_audit_clean_ms is not None and now_ms - self._last_audit_clean_ms < DAY_MS:
            return 0
        deleted = await delete_old_audit(self._store, now_ms, self._audit_retention_days)
        self._last_audit_clean_ms = now_ms
        return deleted


class Monitors:
    """All monitors of one admin node, started and stopped together."""

    def __init__(self, monitors: Sequence[Monitor]) -> None:
        self.monitors = list(monitors)

    @classmethod
    def create(
        cls,
        store: Store,
        trigger: TriggerService,
        alarmer: Alarmer,
        clock: Clock,
        *,
        log_retention_days: int,
        audit_retention_days: int = DEFAULT_AUDIT_RETENTION_DAYS,
    ) -> Monitors:
        return cls([
            RegistryMonitor(store, clock),
            FailMonitor(store, trigger, alarmer),
            LostRunMonitor(store, clock),
            ReportMonitor(store, clock, log_retention_days=log_retention_days,
                          audit_retention_days=audit_retention_days),
        ])

    def start(self) -> None:
        for monitor in self.monitors:
            monitor.start()

    async def stop(self) -> None:
        for monitor in self.monitors:
            await monitor.stop()
