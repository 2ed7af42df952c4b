"""Jobs the code stopped declaring: deleted after a grace period.

When an executor's declarations no longer name a handler, its job managed by code is
stopped at once and stamped ``declared_retired_at`` (see
:mod:`jobring.admin.api.management.declared`). This monitor deletes such jobs, with their
runs, delayed runs, GLUE history and their place in other jobs' child lists, once
``JOBRING_DECLARED_JOBS_RETIRED_GRACE_DAYS`` have passed; each deletion is audited
(``job.declared_delete``). A job declared again, or taken back by an admin, in the meantime
is kept: the delete re-checks the retirement in its own statement, so several admin nodes
may run this monitor at once.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from jobring.admin.monitors.base import Monitor
from jobring.admin.services.audit import SYSTEM, AuditAction, AuditLog
from jobring.admin.store import Store
from jobring.admin.store.removal import remove_job_history
from jobring.core.clock import Clock

log = logging.getLogger(__name__)

DAY_MS = 24 * 3600 * 1000
BATCH = 100
MAX_BATCHES_PER_TICK = 10


class RetiredDeclaredJobsMonitor(Monitor):
    """Every ``interval_s``: delete the jobs retired longer ago than the grace period."""

    name = "declared-retirement"

    def __init__(self, store: Store, audit: AuditLog, clock: Clock, grace_days: int,
                 interval_s: float = 600.0) -> None:
        super().__init__(interval_s)
        self._store = store
        self._audit = audit
        self._clock = clock
        self._grace_days = grace_days

    async def tick(self) -> None:
        await self.delete_due()

    async def delete_due(self) -> int:
        """Delete the jobs due now; returns how many this node deleted."""
        now = self._clock.now_ms()
        cutoff = now - self._grace_days * DAY_MS
        deleted = 0
        for _ in range(MAX_BATCHES_PER_TICK):
            due = await self._store.jobs.retired_before(cutoff, BATCH)
            for job in due:
                if not await self._store.jobs.delete_retired(job.id, cutoff):
                    continue  # declared again, taken back, or deleted by another node
                await remove_job_history(self._store, job.id, datetime.fromtimestamp(now / 1000, UTC))
                await self._audit.job_event(SYSTEM, AuditAction.JOB_DECLARED_DELETE, job, snapshot=True,
                                            grace_days=self._grace_days)
                log.info("deleted job %d (handler %s of group %d): not declared by its executor for %d days",
                         job.id, job.executor_handler, job.job_group, self._grace_days)
                deleted += 1
            if len(due) < BATCH:
                break
        return deleted
