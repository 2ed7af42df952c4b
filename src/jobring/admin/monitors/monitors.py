"""Admin monitors: registry, lost runs, daily report; the fail and deadline monitors are in
:mod:`jobring.admin.monitors.failures`, log retention in :mod:`jobring.admin.monitors.retention`.

Each monitor has one ``tick()`` that does a full round of work (tests call it directly)
and runs as an asyncio task every ``interval_s``. Several admin nodes may run the same
monitors at once: every tick is safe under that (alarm_status is taken by compare-and-set,
results are recorded only where none exists, report rows and address lists are
idempotent upserts, deletes are by condition).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from jobring.admin.monitors.base import Monitor
from jobring.admin.monitors.failures import DeadlineMonitor, FailMonitor
from jobring.admin.monitors.retention import RetentionMonitor
from jobring.admin.services.coexist import ForeignRunWatch
from jobring.admin.store.groups import EXECUTOR
from jobring.admin.store.records import HandleResult, ResultOutcome
from jobring.admin.store.zones import zone_named
from jobring.core.clock import Clock
from jobring.core.enums import AddressType, HandleCode
from jobring.core.runstate import LOST_PREFIX
from jobring.protocol.models import RegistryParam

if TYPE_CHECKING:
    from jobring.admin.alarms.service import AlarmService
    from jobring.admin.services.settings import AdminSettings
    from jobring.admin.store import Store
    from jobring.admin.trigger.trigger import TriggerService

log = logging.getLogger(__name__)

BEAT_TIMEOUT_S = 30
DEAD_TIMEOUT_S = BEAT_TIMEOUT_S * 3
LOST_AFTER_S = 10 * 60
MSG_RESULT_LOST = "Job result lost, marked as failure"
MSG_DISPATCH_LOST = (
    "Trigger Fail: the fire was recorded but never dispatched (its admin node stopped before "
    "calling the executor); marked as failed by the lost-run monitor"
)
RESTART_GRACE_MS = 30_000  # a restarted executor's spooled results arrive first
CLOCK_SKEW_MS = 2_000  # between an executor's clock and the admin's
LOST_GRACE_S = 10  # a run dispatched this recently is not judged lost yet


def _utc(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def lost_message(address: str | None, dead_after_s: int) -> str:
    """The handle message of a run lost with its executor (starts with ``lost:``)."""
    return (f"{LOST_PREFIX} executor {address or '-'} gone (unregistered, or no heartbeat for "
            f"{dead_after_s} s); marked lost by the lost-run monitor")


async def refresh_group_addresses(
    store: Store, now: datetime, dead_after_s: int = DEAD_TIMEOUT_S
) -> dict[str, list[str]]:
    """Set every auto group's address list from the live heartbeats (without the addresses
    disabled by hand); returns the live addresses by appname."""
    live = await store.registry.live(now - timedelta(seconds=dead_after_s))
    await store.groups.refresh_addresses(live, now)
    return live


class RegistryService:
    """``api/registry`` and ``api/registryRemove``: heartbeats, applied at once.

    A new address of an auto group is put into the group's address list right away (the
    reference waits for the next registry monitor round, up to 30 s), and a leaving one
    is taken out right away.
    """

    def __init__(self, store: Store, clock: Clock, trigger: TriggerService | None = None,
                 dead_after_s: int = DEAD_TIMEOUT_S) -> None:
        self._store = store
        self._clock = clock
        self._trigger = trigger
        self._dead_after_s = dead_after_s
        # Per (appname, address), as every registry state: a beat with one group's token
        # tells nothing about another group's executor at the same address.
        self._started: dict[tuple[str, str], int] = {}  # start instant its executor reported
        self._restarts: dict[tuple[str, str], tuple[int, int]] = {}  # (started at, seen at), pending

    def restarts_due(self, now_ms: int, grace_ms: int = RESTART_GRACE_MS) -> list[tuple[str, str, int]]:
        """Executors seen (re)started at least ``grace_ms`` ago: (appname, address, started
        at). Each is handed out once. The grace lets a restarted executor deliver spooled
        results first."""
        # The executor's clock may run ahead: never later than when this node first saw it.
        due = [(k, min(s, seen)) for k, (s, seen) in self._restarts.items() if now_ms - seen >= grace_ms]
        for key, _ in due:
            del self._restarts[key]
        return [(app, address, started) for (app, address), started in due]

    async def _needs_refresh(self, app_name: str, address: str) -> bool:
        group = await self._store.groups.by_app_name(app_name)
        if group is None or group.address_type != AddressType.AUTO:
            return False
        return address not in group.addresses and address not in group.disabled

    async def register(self, param: RegistryParam, started_at_ms: int | None = None,
                       v35_app: str | None = None) -> None:
        """A heartbeat; ``v35_app``: the appname header of an executor speaking XXL-JOB 3.5."""
        now = _utc(self._clock.now_ms())
        key = (param.registry_key, param.registry_value)
        if started_at_ms is not None and self._started.get(key) != started_at_ms:
            self._started[key] = started_at_ms
            self._restarts[key] = (started_at_ms, self._clock.now_ms())
        # The declared handlers are replaced by each beat's (a restart with other handlers,
        # or an XXL-JOB executor at the same address now: None) and leave with the row.
        await self._store.registry.beat(param.registry_group, param.registry_key, param.registry_value, now,
                                        handlers=param.handlers)
        if param.registry_group != EXECUTOR:
            return
        if self._trigger is not None:
            self._trigger.address_back(param.registry_key, param.registry_value, v35=v35_app is not None)
        if await self._needs_refresh(param.registry_key, param.registry_value):
            await refresh_group_addresses(self._store, now, self._dead_after_s)

    async def remove(self, param: RegistryParam) -> None:
        now = _utc(self._clock.now_ms())
        removed = await self._store.registry.remove(
            param.registry_group, param.registry_key, param.registry_value
        )
        # Only an address that was registered under this appname leaves routing, and only
        # for this appname's groups: a token of one group must not take another group's
        # executors out.
        if removed and param.registry_group == EXECUTOR:
            if self._trigger is not None:
                # Before the group lists are refreshed: a fire prepared ahead must not go there.
                self._trigger.address_gone(param.registry_key, param.registry_value)
            await refresh_group_addresses(self._store, now, self._dead_after_s)


class RegistryMonitor(Monitor):
    """Every 30 s: drop heartbeats older than 90 s, refresh auto groups' address lists."""

    name = "registry-monitor"

    def __init__(self, store: Store, clock: Clock, interval_s: float = BEAT_TIMEOUT_S,
                 dead_after_s: int = DEAD_TIMEOUT_S) -> None:
        super().__init__(interval_s)
        self._store = store
        self._clock = clock
        self._dead_after_s = dead_after_s

    async def tick(self) -> None:
        now = _utc(self._clock.now_ms())
        await self._store.registry.delete_dead(now - timedelta(seconds=self._dead_after_s))
        await refresh_group_addresses(self._store, now, self._dead_after_s)


async def fail_undispatched(
    store: Store, triggered_before: datetime, limit: int = 1000, *, after_id: int = 0
) -> int:
    """Mark log rows that were inserted but never dispatched (trigger_code still 0) as
    trigger failures, so the fail monitor retries and alarms them. Returns how many.

    Such rows are left by an admin node that died between recording a fire and calling the
    executor; another node sees the fire as recorded and does not fire it again. The update
    is conditional on trigger_code 0, so it is safe with several nodes and late recorders.
    """
    ids = await store.fires.undispatched_before(triggered_before, limit, after_id=after_id)
    return await store.fires.fail_unconfirmed(ids, MSG_DISPATCH_LOST) if ids else 0


class LostRunMonitor(Monitor):
    """Runs whose executor went away, and fires never dispatched.

    - A run "running" on an address of an automatic group that unregistered or has had no
      heartbeat for ``dead_after_s`` (90 s) is marked lost at once (handle 500, message
      starting with ``lost:``: state ``lost``); dead heartbeats are dropped and group lists
      refreshed first, so the retry goes to a live executor. The monitor runs every ``interval_s`` (15 s).
    - A run "running" over 10 min on any other address without a live heartbeat (manual
      groups) is failed as XXL-JOB does ("result lost").
    - Fires recorded but never dispatched for 10 min fail as triggers.
    Failures then go through the fail monitor (retry, alarm) like any other.
    """

    name = "lost-run-monitor"

    def __init__(self, store: Store, clock: Clock, interval_s: float = 15.0, *,
                 dead_after_s: int = DEAD_TIMEOUT_S, on_failed: Monitor | None = None,
                 registry: RegistryService | None = None, legacy_log_id_max: int = 0) -> None:
        super().__init__(interval_s)
        self._store = store
        self._clock = clock
        self._dead_after_s = dead_after_s
        # An adopted XXL-JOB database's history (ids up to this) stays as XXL-JOB left it.
        self._legacy_log_id_max = legacy_log_id_max
        self._foreign_runs = ForeignRunWatch(store)
        self._on_failed = on_failed
        self._registry = registry
        self._first_tick_ms: int | None = None

    async def _forgotten(self, now: datetime) -> dict[int, HandleResult]:
        """Runs dispatched to an executor before it (re)started: it cannot know them."""
        results: dict[int, HandleResult] = {}
        if self._registry is None:
            return results
        for app, address, started in self._registry.restarts_due(self._clock.now_ms()):
            since = datetime.fromtimestamp(started / 1000, tz=UTC).isoformat(timespec="seconds")
            msg = f"{LOST_PREFIX} executor {address} restarted at {since} and no longer knows this run"
            for entry in await self._store.logs.running_on(address, started - CLOCK_SKEW_MS, app_name=app):
                if entry.id > self._legacy_log_id_max:
                    results[entry.id] = HandleResult(entry.id, HandleCode.FAIL, msg, now)
        return results

    async def tick(self) -> None:
        await self._foreign_runs.check()
        now_ms = self._clock.now_ms()
        now = _utc(now_ms)
        await self._store.registry.delete_dead(now - timedelta(seconds=self._dead_after_s))
        live = await refresh_group_addresses(self._store, now, self._dead_after_s)
        addresses = {a for group in live.values() for a in group}
        legacy = self._legacy_log_id_max
        undispatched = await fail_undispatched(
            self._store, now - timedelta(seconds=LOST_AFTER_S), after_id=legacy
        )
        if undispatched:
            log.warning("marked %d recorded but undispatched fire(s) as failed", undispatched)
        if self._first_tick_ms is None:
            self._first_tick_ms = now_ms
        # Just after this node started (say after a long outage of the only admin), live
        # executors may not have beaten again yet: wait one dead period before judging them.
        settled = now_ms - self._first_tick_ms >= self._dead_after_s * 1000
        auto = [g.id for g in await self._store.groups.all() if g.address_type == AddressType.AUTO]
        gone = await self._store.logs.lost_runs(
            now - timedelta(seconds=LOST_GRACE_S), addresses, group_ids=auto, after_id=legacy
        ) if auto and settled else []
        lost = await self._store.logs.lost_runs(
            now - timedelta(seconds=LOST_AFTER_S), addresses, after_id=legacy
        )
        results = {e.id: HandleResult(e.id, HandleCode.FAIL, MSG_RESULT_LOST, now) for e in lost}
        results.update({e.id: HandleResult(e.id, HandleCode.FAIL, lost_message(e.executor_address,
                                                                                self._dead_after_s), now)
                        for e in gone})
        results.update(await self._forgotten(now))
        if not results:
            return
        # record_results only fills runs that have no result yet: safe against a late
        # callback and against another node doing the same.
        outcomes = await self._store.logs.record_results(list(results.values()))
        applied = sum(o is ResultOutcome.APPLIED for o in outcomes)
        log.warning("marked %d run(s) lost (%d with their executor gone)", applied, len(gone))
        if applied and self._on_failed is not None:
            self._on_failed.wake()


class ReportMonitor(Monitor):
    """Every minute: daily run counts of the last 3 days."""

    name = "report-monitor"

    def __init__(
        self, store: Store, clock: Clock, interval_s: float = 60.0, *, report_zone: str = "UTC"
    ) -> None:
        super().__init__(interval_s)
        self._store = store
        self._clock = clock
        # Days of the report are calendar days of the scheduling zone, as XXL-JOB counts them.
        self._report_zone = zone_named(report_zone)

    async def tick(self) -> None:
        await self.refresh_report()

    async def refresh_report(self) -> None:
        now = _utc(self._clock.now_ms())
        today = now.replace(tzinfo=UTC).astimezone(self._report_zone).replace(tzinfo=None)
        today = today.replace(hour=0, minute=0, second=0, microsecond=0)
        days = await self._store.logs.counts_by_day(today - timedelta(days=2), today, zone=self._report_zone)
        for day in days:
            await self._store.reports.upsert_day(day.day, day.running, day.success, day.fail, now)


class Monitors:
    """All monitors of one admin node (and its alarm queue), started and stopped together."""

    @classmethod
    def create(
        cls,
        store: Store,
        trigger: TriggerService,
        alarms: AlarmService,
        clock: Clock,
        settings: AdminSettings,
        registry: RegistryService | None = None,
        *,
        legacy_log_id_max: int = 0,
        hold_retention: bool = False,
    ) -> Monitors:
        """``legacy_log_id_max``: the last run of an adopted XXL-JOB history (never marked lost,
        retried or alarmed); ``hold_retention``: delete no run until JOBRING_LOG_RETENTION_CONFIRM."""
        fail = FailMonitor(store, trigger, alarms, clock, retry_max_age_s=settings.retry_max_age,
                           legacy_log_id_max=legacy_log_id_max)
        dead = settings.executor_dead_after_s
        return cls([
            RegistryMonitor(store, clock, dead_after_s=dead),
            fail,
            LostRunMonitor(store, clock, settings.lost_run_check_s, dead_after_s=dead, on_failed=fail,
                           registry=registry, legacy_log_id_max=legacy_log_id_max),
            DeadlineMonitor(store, alarms, clock),
            ReportMonitor(store, clock, report_zone=settings.timezone or "UTC"),
            RetentionMonitor(store, clock, settings, hold=hold_retention),
        ], alarms)

    def __init__(self, monitors: Sequence[Monitor], alarms: AlarmService | None = None) -> None:
        self.monitors = list(monitors)
        self.alarms = alarms

    def add(self, monitor: Monitor) -> None:
        """One more monitor, started and stopped with the others (one built outside this package)."""
        self.monitors.append(monitor)

    def find(self, name: str) -> Monitor | None:
        return next((m for m in self.monitors if m.name == name), None)

    def start(self) -> None:
        for monitor in self.monitors:
            monitor.start()

    async def stop(self) -> None:
        for monitor in self.monitors:
            await monitor.stop()
        if self.alarms is not None:
            await self.alarms.close()
