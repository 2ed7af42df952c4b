"""The loop's timing port over the store: calendars compiled once and reloaded when the table
changes, run counts for max_runs, skipped runs recorded once each."""

from __future__ import annotations

from datetime import datetime

import orjson
import pytest

from jobring.admin.loop.timed import TimedSchedule
from jobring.admin.loop.timing_book import StoreTiming
from jobring.admin.store import JobGroup, JobInfo, NewLog, Store
from jobring.core.clock import ManualClock
from jobring.core.runstate import RunState
from jobring.core.schedule import parse_schedule
from jobring.core.timing import SkipKind, SkippedFire, SkipReason

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
DAY = 86_400_000
NOW = datetime(2026, 1, 1)


def _spec(*dates: str) -> str:
    return orjson.dumps({"name": "h", "zone": "UTC", "invert": False, "dates": list(dates)}).decode()


async def test_calendars_load_once_and_again_after_a_change(sqlite_store: Store) -> None:
    group = await sqlite_store.groups.create(JobGroup(app_name="book", title="B"), NOW)
    cal = await sqlite_store.calendars.create("h", None, _spec("2026-01-02"), T0, "t")
    job = JobInfo(
        id=1,
        job_group=group,
        schedule_type="CRON",
        schedule_conf="0 0 3 * * ?",
        trigger_next_time=T0,
        timing='{"calendars": ["h"]}',
    )
    timing = StoreTiming(sqlite_store, ManualClock(T0))
    await timing.prepare([job])
    schedule = timing.wrap(job, parse_schedule("CRON", "0 0 3 * * ?", "UTC"))
    assert isinstance(schedule, TimedSchedule)
    first = schedule.next_fire_ms(T0 + 3 * 3_600_000)
    assert first == T0 + DAY + 3 * 3_600_000 and schedule.skip_at(first) is not None
    before = timing.book.calendars["h"]
    await timing.prepare([job])
    assert timing.book.calendars["h"] is before  # unchanged table: not reloaded
    await sqlite_store.calendars.update(cal, _spec("2026-01-03"), T0 + 1, "t")
    await timing.prepare([job])
    again = timing.wrap(job, parse_schedule("CRON", "0 0 3 * * ?", "UTC"))
    assert again.next_fire_ms(T0 + 3 * 3_600_000) == T0 + DAY + 3 * 3_600_000
    assert isinstance(again, TimedSchedule) and again.skip_at(T0 + DAY + 3 * 3_600_000) is None
    # A job without timing rules keeps its plain schedule.
    plain = parse_schedule("CRON", "0 0 3 * * ?", "UTC")
    assert timing.wrap(JobInfo(id=2, job_group=group), plain) is plain


async def test_a_job_is_never_planned_with_another_groups_calendar(sqlite_store: Store) -> None:
    # Security review 7: a job moved to another group keeping its old group's calendar by name.
    mine = await sqlite_store.groups.create(JobGroup(app_name="mine", title="M"), NOW)
    other = await sqlite_store.groups.create(JobGroup(app_name="other", title="O"), NOW)
    await sqlite_store.calendars.create("h", other, _spec("2026-01-02"), T0, "t")
    job = JobInfo(id=1, job_group=mine, schedule_type="CRON", schedule_conf="0 0 3 * * ?",
                  trigger_next_time=T0, timing='{"calendars": ["h"]}')
    timing = StoreTiming(sqlite_store, ManualClock(T0))
    await timing.prepare([job])
    with pytest.raises(ValueError, match="h"):
        timing.wrap(job, parse_schedule("CRON", "0 0 3 * * ?", "UTC"))
    moved_back = JobInfo(id=1, job_group=other, schedule_type="CRON", schedule_conf="0 0 3 * * ?",
                         trigger_next_time=T0, timing='{"calendars": ["h"]}')
    assert isinstance(timing.wrap(moved_back, parse_schedule("CRON", "0 0 3 * * ?", "UTC")), TimedSchedule)


async def test_max_runs_counts_the_scheduled_runs_and_skips_are_recorded_once(sqlite_store: Store) -> None:
    group = await sqlite_store.groups.create(JobGroup(app_name="runs", title="R"), NOW)
    job_id = await sqlite_store.jobs.create(JobInfo(job_group=group, job_desc="j", executor_handler="h"))
    await sqlite_store.logs.insert_fires(
        [NewLog(group, job_id, NOW, planned_time=T0 - k * DAY) for k in (1, 2)]
    )
    job = JobInfo(
        id=job_id,
        job_group=group,
        executor_handler="h",
        schedule_type="CRON",
        trigger_next_time=T0,
        timing='{"max_runs": 3}',
    )
    timing = StoreTiming(sqlite_store, ManualClock(T0), "node-a")
    skip = SkippedFire(
        T0 - 3 * DAY, SkipReason(SkipKind.CALENDAR, "calendar 'h': dates[0] (2025-12-29)", "h")
    )
    await timing.record_skipped(job, [skip])
    await timing.record_skipped(job, [skip])
    await timing.prepare([job])
    schedule = timing.wrap(job, parse_schedule("CRON", "0 0 0 * * ?", "UTC"))
    # Two runs before, the skip not counted: one more fires (T0), then the job ends.
    assert schedule.next_fire_ms(T0 - 1) == T0
    assert schedule.next_fire_ms(T0) is None
    page = await sqlite_store.logs.list(job_id=job_id, states=[RunState.SKIPPED], now_ms=T0)
    assert [(e.planned_time, e.trigger_msg, e.admin_node) for e in page.items] == [
        (T0 - 3 * DAY, "skipped by calendar 'h': dates[0] (2025-12-29)", "node-a")
    ]
