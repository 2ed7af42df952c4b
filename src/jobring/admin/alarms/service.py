"""AlarmService: alarms are queued and sent by worker tasks, off the scheduling path.

The monitors only claim a run's alarm (alarm_status 0 -> -1, or an alarm-event row) and
queue it; a worker builds the message, sends it through every channel (each with its own
timeout and retries) and writes the final status: sent (2), failed (3) or not needed (1).
A slow or broken channel thus delays only other alarms, never a fire.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from jobring.admin.alarms.base import AlarmContext, Alarmer, AlarmKind
from jobring.admin.store.records import JobInfo, LogEntry
from jobring.core.enums import AlarmStatus

if TYPE_CHECKING:
    from jobring.admin.store import Store

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Pending:
    kind: AlarmKind
    entry: LogEntry
    job: JobInfo
    note: str | None


class AlarmService:
    """A queue of claimed alarms and ``workers`` tasks sending them."""

    def __init__(self, store: Store, alarmer: Alarmer, *, workers: int = 2) -> None:
        self._store = store
        self.alarmer = alarmer
        self._workers_wanted = workers
        self._queue: asyncio.Queue[_Pending] = asyncio.Queue()
        self._workers: list[asyncio.Task[None]] = []
        self.sent: dict[AlarmStatus, int] = {}

    def submit(self, kind: AlarmKind, entry: LogEntry, job: JobInfo, note: str | None = None) -> None:
        """Queue an alarm already claimed by the caller; returns at once."""
        self._queue.put_nowait(_Pending(kind, entry, job, note))
        if not self._workers:
            self._workers = [
                asyncio.create_task(self._work(), name=f"jobring-alarm-{i}")
                for i in range(self._workers_wanted)
            ]

    async def _work(self) -> None:
        while True:
            item = await self._queue.get()
            try:
                await self._send(item)
            except Exception:
                log.exception("alarm %s for run %s could not be completed", item.kind, item.entry.id)
            finally:
                self._queue.task_done()

    async def _send(self, item: _Pending) -> None:
        group = await self._store.groups.get(item.job.job_group)
        ctx = AlarmContext(item.job, item.entry, group, item.kind, self.alarmer.public_url, item.note)
        status = await self.alarmer.alarm(ctx)
        self.sent[status] = self.sent.get(status, 0) + 1
        if item.kind is AlarmKind.FAILURE:
            await self._store.logs.set_alarm_status(item.entry.id, AlarmStatus.LOCKED, status)
        await self._store.alarms.set_status(item.entry.id, item.kind.value, int(status))
        log.info(
            "%s alarm for run %s of job %s: %s",
            item.kind.value,
            item.entry.id,
            item.job.id,
            status.name.lower(),
        )

    async def wait_idle(self) -> None:
        """Wait until every queued alarm is sent and its status written (tests, shutdown)."""
        await self._queue.join()

    async def close(self, limit_s: float = 5.0) -> None:
        """Give queued alarms ``limit_s`` to finish, then stop the workers (alarms still
        queued keep alarm_status -1 and are logged)."""
        try:
            await asyncio.wait_for(self._queue.join(), limit_s)
        except TimeoutError:
            log.warning("%d alarm(s) not sent before shutdown", self._queue.qsize())
        for task in self._workers:
            task.cancel()
        for task in self._workers:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._workers = []
