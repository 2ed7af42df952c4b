"""Contract tests of ``store.calendars``, the job timing columns and calendar skip rows."""

from __future__ import annotations

from datetime import datetime

import pytest

from jobring.admin.store import Conflict, JobGroup, JobInfo, NewLog, Store
from jobring.core.enums import AlarmStatus
from jobring.core.runstate import CALENDAR_SKIP_PREFIX, RunState

NOW = datetime(2026, 3, 10, 12, 0, 0)
T0 = 1_773_144_000_000
SPEC = '{"name": "cn", "zone": "Asia/Shanghai", "invert": false, "dates": ["2026-10-01"]}'


async def test_calendars_create_get_list_update_delete(store: Store) -> None:
    group = await store.groups.create(JobGroup(app_name="cal-app", title="C"), NOW)
    other = await store.groups.create(JobGroup(app_name="cal-other", title="O"), NOW)
    glob = await store.calendars.create("cn", None, SPEC, T0, "admin")
    mine = await store.calendars.create("ops", group, '{"name": "ops"}', T0 + 1, "alice")
    await store.calendars.create("theirs", other, '{"name": "theirs"}', T0 + 2, None)
    with pytest.raises(Conflict):
        await store.calendars.create("cn", group, SPEC, T0, None)
    row = await store.calendars.get(glob)
    assert row is not None and (row.name, row.job_group, row.spec, row.update_time, row.updated_by) == (
        "cn", None, SPEC, T0, "admin")
    assert [c.name for c in await store.calendars.list([group])] == ["cn", "ops"]
    assert [c.name for c in await store.calendars.list()] == ["cn", "ops", "theirs"]
    assert [c.id for c in await store.calendars.by_names(["ops", "missing", "cn"])] == [glob, mine]
    before = await store.calendars.version()
    assert await store.calendars.update(mine, '{"name": "ops", "dates": []}', T0 + 10, "bob")
    edited = await store.calendars.get(mine)
    assert edited is not None
    assert (edited.update_time, edited.updated_by, edited.name) == (T0 + 10, "bob", "ops")
    after = await store.calendars.version()
    assert after != before and after == (3, T0 + 10)
    assert await store.calendars.delete(mine) and not await store.calendars.delete(mine)
    assert not await store.calendars.update(mine, "{}", T0, None)
    assert (await store.calendars.version())[0] == 2


async def test_jobs_using_a_calendar_and_touching_them(store: Store) -> None:
    group = await store.groups.create(JobGroup(app_name="cal-jobs", title="C"), NOW)
    using = await store.jobs.create(JobInfo(job_group=group, job_desc="a", executor_handler="h",
                                            timing='{"calendars": ["cn_2026"], "calendar_action": "skip"}',
                                            pause_note='{"by": "alice", "reason": "r", "at": 1}'))
    await store.jobs.create(JobInfo(job_group=group, job_desc="b", executor_handler="h",
                                    timing='{"calendars": ["cnx2026"]}'))
    await store.jobs.create(JobInfo(job_group=group, job_desc="c", executor_handler="h"))
    # "_" is a LIKE wildcard: the match is literal.
    assert await store.calendars.jobs_using("cn_2026") == [using]
    job = await store.jobs.get(using)
    assert job is not None and job.pause_note == '{"by": "alice", "reason": "r", "at": 1}'
    await store.calendars.touch_jobs([using], datetime(2026, 3, 11, 8, 0, 0))
    touched = await store.jobs.get(using)
    assert touched is not None and touched.update_time == datetime(2026, 3, 11, 8, 0, 0)


async def test_a_calendar_skip_row_is_skipped_and_never_alarmed(store: Store) -> None:
    group = await store.groups.create(JobGroup(app_name="cal-skip", title="C"), NOW)
    job = await store.jobs.create(JobInfo(job_group=group, job_desc="j", executor_handler="h"))
    msg = CALENDAR_SKIP_PREFIX + "'cn': dates[0] (2026-10-01)"
    [skip_id, again] = await store.logs.insert_fires([
        NewLog(group, job, NOW, executor_handler="h", trigger_type="CRON", planned_time=T0, trigger_code=500,
               trigger_msg=msg, alarm_status=int(AlarmStatus.NOT_NEEDED)),
        NewLog(group, job, NOW, executor_handler="h", trigger_type="CRON", planned_time=T0),
    ])
    assert skip_id is not None and again is None
    page = await store.logs.list(job_id=job, states=[RunState.SKIPPED], now_ms=T0)
    assert [e.id for e in page.items] == [skip_id]
    failed = await store.logs.list(job_id=job, states=[RunState.FAILED], now_ms=T0)
    assert failed.items == []
    entry = await store.logs.get(skip_id)
    assert entry is not None and entry.alarm_status == int(AlarmStatus.NOT_NEEDED)
