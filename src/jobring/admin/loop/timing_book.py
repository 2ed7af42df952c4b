"""The loop's :class:`~jobring.admin.loop.ports.TimingPort` over the store: calendars
compiled once and kept until one changes, run counts for ``max_runs``, skipped-run records."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import UTC, datetime

from jobring.admin.loop.ports import Schedule
from jobring.admin.loop.timed import (
    calendar_names,
    compile_calendars,
    skip_message,
    timing_rules,
    wrap,
)
from jobring.admin.store import Store
from jobring.admin.store.records import JobInfo, NewLog
from jobring.core.clock import Clock
from jobring.core.enums import AlarmStatus
from jobring.core.timing import Calendar, SkippedFire
from jobring.protocol.models import FAIL_CODE

log = logging.getLogger(__name__)


class CalendarBook:
    """Every calendar, compiled; reloaded when the table's version (count, latest edit) moves."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._version: tuple[int, int] | None = None
        self.calendars: dict[str, Calendar] = {}
        self.groups: dict[str, int | None] = {}  # a calendar's group (None: global)

    async def refresh(self) -> None:
        version = await self._store.calendars.version()
        if version == self._version:
            return
        rows = await self._store.calendars.list()
        self.calendars = compile_calendars({row.name: row.spec for row in rows})
        self.groups = {row.name: row.job_group for row in rows}
        self._version = version
        log.info("calendars loaded: %d", len(self.calendars))

    def usable_by(self, group_id: int, names: Sequence[str]) -> dict[str, Calendar]:
        """Of ``names``, the calendars a job of ``group_id`` may use: global ones and the group's.
        Another group's is left out, so the job's rules name it as unknown and the job is not
        planned (never planned with a calendar its group may not use)."""
        return {name: self.calendars[name] for name in names
                if name in self.calendars and self.groups.get(name) in (None, group_id)}


class StoreTiming:
    """Timing rules for the scheduling loop, over the admin store."""

    def __init__(self, store: Store, clock: Clock, node_id: str | None = None) -> None:
        self._store = store
        self._clock = clock
        # Written on skipped runs as on fires: a run without it reads as XXL-JOB's own admin's.
        self._node_id = node_id
        self.book = CalendarBook(store)
        self._runs: dict[int, int] = {}

    async def prepare(self, rows: Sequence[JobInfo]) -> None:
        timed = [row for row in rows if row.timing]
        if not timed:
            return
        if any(calendar_names(row.timing) for row in timed):
            # Only rows new or changed come here; an edited calendar touches its jobs' rows.
            await self.book.refresh()
        self._runs.clear()
        for row in timed:
            if '"max_runs"' in (row.timing or ""):
                self._runs[row.id] = await self._store.calendars.runs_before(row.id, row.trigger_next_time)

    def wrap(self, row: JobInfo, schedule: Schedule) -> Schedule:
        rules = timing_rules(row.timing, self.book.usable_by(row.job_group, calendar_names(row.timing)))
        return wrap(schedule, rules, row.id, runs_before=self._runs.get(row.id, 0),
                    counted_from=row.trigger_next_time)

    async def record_skipped(self, job: JobInfo, skipped: Sequence[SkippedFire]) -> None:
        now = datetime.fromtimestamp(self._clock.now_ms() / 1000, UTC).replace(tzinfo=None)
        rows = [
            NewLog(job.job_group, job.id, now, executor_handler=job.executor_handler,
                   executor_param=job.executor_param, trigger_code=FAIL_CODE, trigger_msg=skip_message(skip),
                   trigger_type=job.schedule_type, planned_time=skip.logical_ms,
                   alarm_status=int(AlarmStatus.NOT_NEEDED), admin_node=self._node_id)
            for skip in skipped
        ]
        await self._store.logs.insert_fires(rows)
