"""Run-log and audit retention. Runs: by age (``log_retention_days``) and optionally by count per job
(``log_retention_max_runs_per_job``), in small batches that never hold the run table long.

The first cleaning on a database never deletes silently: when history beyond the retention
exists and no earlier cleaning was recorded, it logs how many runs it would delete and
starts a day later (the ``log_retention_from`` setting row keeps that instant for every
node), unless ``log_retention_confirm`` is set. Audit records older than
``audit_retention_days`` (at least 7) are deleted once a day as well.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from jobring.admin.monitors.base import Monitor
from jobring.core.clock import Clock

if TYPE_CHECKING:
    from jobring.admin.services.settings import AdminSettings
    from jobring.admin.store import Store

log = logging.getLogger(__name__)

MIN_RETENTION_DAYS = 7
DAY_MS = 24 * 3600 * 1000
ARMED_SETTING = "log_retention_from"  # epoch ms from which deleting is allowed
BATCH_PAUSE_S = 0.02


async def delete_old_audit(store: Store, now_ms: int, retention_days: int) -> int:
    """Delete audit records older than ``retention_days`` (at least 7), in batches."""
    days = max(retention_days, MIN_RETENTION_DAYS)
    deleted = await store.audit.delete_older_than(now_ms - days * DAY_MS)
    if deleted:
        log.info("deleted %d audit record(s) older than %d days", deleted, days)
    return deleted


class RetentionMonitor(Monitor):
    """Once a day per node: delete runs and audit records beyond their retention (see module
    docstring)."""

    name = "retention-monitor"

    def __init__(
        self,
        store: Store,
        clock: Clock,
        settings: AdminSettings,
        interval_s: float = 300.0,
        pause_s: float = BATCH_PAUSE_S,
        *,
        hold: bool = False,
    ) -> None:
        super().__init__(interval_s)
        self._store = store
        self._clock = clock
        self._days = settings.log_retention_days
        self._max_runs = settings.log_retention_max_runs_per_job
        self._batch = max(100, settings.log_retention_batch)
        self._confirm = settings.log_retention_confirm
        # An adopted XXL-JOB database: nothing is deleted until the operator confirms.
        self._hold = hold and not settings.log_retention_confirm
        self._pause_s = pause_s
        self._audit_days = settings.audit_retention_days
        self._last_clean_ms: int | None = None
        self._last_audit_clean_ms: int | None = None

    async def tick(self) -> None:
        await self.clean_logs()
        await self.clean_audit()

    async def clean_audit(self) -> int:
        """Delete audit records older than their retention (once a day; at least 7 days kept)."""
        now_ms = self._clock.now_ms()
        if self._last_audit_clean_ms is not None and now_ms - self._last_audit_clean_ms < DAY_MS:
            return 0
        deleted = await delete_old_audit(self._store, now_ms, self._audit_days)
        self._last_audit_clean_ms = now_ms
        return deleted

    def _cutoff(self, now_ms: int) -> datetime:
        today = datetime.fromtimestamp(now_ms / 1000, tz=UTC).replace(
            hour=0, minute=0, second=0, microsecond=0
        )
        return today - timedelta(days=self._days)

    async def _allowed(self, now_ms: int) -> bool:
        """Whether deleting may start now (first-start guard)."""
        if self._hold:
            by_age = await self._store.logs.count_older_than(self._cutoff(now_ms)) if self._by_age else 0
            log.warning(
                "log retention held on this adopted XXL-JOB database: %d run(s) older than %d days are "
                "kept; set JOBRING_LOG_RETENTION_CONFIRM=true to delete them", by_age, self._days,
            )
            self._last_clean_ms = now_ms  # said once a day
            return False
        armed = await self._store.settings.get(ARMED_SETTING)
        if armed is not None:
            return now_ms >= int(armed)
        by_age = await self._store.logs.count_older_than(self._cutoff(now_ms)) if self._by_age else 0
        over = await self._store.logs.job_ids_over(self._max_runs) if self._max_runs > 0 else []
        if (by_age == 0 and not over) or self._confirm:
            await self._store.settings.set(ARMED_SETTING, str(now_ms))
            return True
        start = now_ms + DAY_MS
        await self._store.settings.set(ARMED_SETTING, str(start))
        log.warning(
            "log retention: %d run(s) older than %d days%s would be deleted; this is the first cleaning "
            "on this database, so nothing is deleted before %s (set JOBRING_LOG_RETENTION_CONFIRM=true "
            "to start now, or raise JOBRING_LOG_RETENTION_DAYS to keep them)",
            by_age,
            self._days,
            f", and older runs of {len(over)} job(s) over {self._max_runs} runs" if over else "",
            datetime.fromtimestamp(start / 1000, tz=UTC).isoformat(timespec="seconds"),
        )
        return False

    @property
    def _by_age(self) -> bool:
        return self._days >= MIN_RETENTION_DAYS

    async def clean_logs(self) -> int:
        """Delete runs beyond the retention (at most once a day); returns how many."""
        if not self._by_age and self._max_runs <= 0:
            return 0
        now_ms = self._clock.now_ms()
        if self._last_clean_ms is not None and now_ms - self._last_clean_ms < DAY_MS:
            return 0
        if not await self._allowed(now_ms):
            return 0
        deleted = 0
        if self._by_age:
            cutoff = self._cutoff(now_ms)
            deleted += await self._store.logs.delete_older_than(cutoff, self._batch, self._pause_s)
            await self._store.alarms.delete_before(int(cutoff.timestamp() * 1000))
        if self._max_runs > 0:
            for job_id in await self._store.logs.job_ids_over(self._max_runs):
                deleted += await self._store.logs.delete_beyond_newest(
                    job_id, self._max_runs, self._batch, self._pause_s
                )
        self._last_clean_ms = now_ms
        if deleted:
            log.info(
                "log retention: deleted %d run(s) (older than %d days%s)",
                deleted,
                self._days,
                f", beyond {self._max_runs} per job" if self._max_runs > 0 else "",
            )
        return deleted
