"""The scheduling loop applies a job's timing rules (calendars skip or move, validity window,
max_runs, jitter) on a manual clock with in-memory ports: excluded instants are recorded as
skipped runs at their instant, never sent."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

import orjson
import pytest

from jobring.admin.loop.ports import Schedule
from jobring.admin.loop.timed import TimedSchedule, compile_calendars, skip_message, timing_rules, wrap
from jobring.admin.store.records import JobInfo
from jobring.core.schedule import parse_schedule
from jobring.core.timing import SkippedFire, jitter_delay
from tests.admin.loop_fakes import T0, FakeJobTable, Harness

MINUTE = 60_000
# T0 is 2023-11-14T22:13:20Z; the job fires every minute from 22:14.
FIRST = T0 + 40_000
LUNCH = {"name": "pause", "zone": "UTC", "day_windows": [{"start": "22:15", "end": "22:17:30"}]}


class FakeTiming:
    """The loop's timing port over calendars in memory and the fake run log (its run counts,
    as the store's: a job is released and adopted again between fires further apart than the
    claim window); skipped runs are collected."""

    def __init__(self, table: FakeJobTable, *specs: dict[str, object]) -> None:
        self.table = table
        self.calendars = compile_calendars({str(s["name"]): orjson.dumps(s).decode() for s in specs})
        self.skipped: list[tuple[int, int, str]] = []
        self.runs: dict[int, int] = {}

    async def prepare(self, rows: Sequence[JobInfo]) -> None:
        self.runs = {row.id: sum(1 for job, planned in self.table.rows
                                 if job == row.id and planned < row.trigger_next_time) for row in rows}

    def wrap(self, row: JobInfo, schedule: Schedule) -> Schedule:
        return wrap(schedule, timing_rules(row.timing, self.calendars), row.id,
                    runs_before=self.runs.get(row.id, 0), counted_from=row.trigger_next_time)

    async def record_skipped(self, job: JobInfo, skipped: Sequence[SkippedFire]) -> None:
        self.skipped.extend((job.id, s.logical_ms, skip_message(s)) for s in skipped)


def cron_job(job_id: int, timing: dict[str, object], next_ms: int = FIRST) -> JobInfo:
    return JobInfo(id=job_id, job_group=1, job_desc=f"job {job_id}", schedule_type="CRON",
                   schedule_conf="0 * * * * ?", schedule_timezone="UTC", trigger_status=1,
                   trigger_next_time=next_ms, executor_handler="demo", timing=orjson.dumps(timing).decode())


@pytest.fixture(params=[False, True], ids=["at-instant", "ahead"])
async def h(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    harness = Harness(prepare=bool(request.param))
    yield harness
    for loop in harness.loops.values():
        await loop.stop()


async def test_skip_records_each_excluded_instant_at_its_time_and_sends_the_next(h: Harness) -> None:
    timing = FakeTiming(h.table, LUNCH)
    h.table.put(cron_job(1, {"calendars": ["pause"]}))
    loop = h.loop(timing=timing)
    await loop.start()
    await h.advance_to(FIRST + 2 * MINUTE + 1_000, step_ms=500)
    assert h.runlog.fired(1) == [(1, FIRST)]
    assert [(j, t) for j, t, _ in timing.skipped] == [(1, FIRST + MINUTE), (1, FIRST + 2 * MINUTE)]
    assert timing.skipped[0][2] == "skipped by calendar 'pause': day_windows[0] (22:15-22:17:30)"
    await h.advance_to(FIRST + 5 * MINUTE + 1_000, step_ms=500)
    assert h.runlog.fired(1) == [(1, FIRST), (1, FIRST + 4 * MINUTE), (1, FIRST + 5 * MINUTE)]
    assert [t for _, t, _ in timing.skipped] == [FIRST + k * MINUTE for k in (1, 2, 3)]
    assert loop.stats.calendar_skipped == 3
    # Nothing excluded was recorded ahead (or withdrawn) as a fire.
    assert all(p not in {FIRST + k * MINUTE for k in (1, 2, 3)} for _, p in h.table.rows)
    assert h.table.jobs[1].trigger_next_time == FIRST + 6 * MINUTE


async def test_move_fires_the_last_instant_of_the_span_at_the_allowed_time(h: Harness) -> None:
    timing = FakeTiming(h.table, LUNCH)
    h.table.put(cron_job(1, {"calendars": ["pause"], "calendar_action": "move"}))
    loop = h.loop(timing=timing)
    await loop.start()
    await h.advance_to(FIRST + 4 * MINUTE + 1_000, step_ms=500)
    allowed = FIRST + 3 * MINUTE + 30_000  # 22:17:30
    assert h.runlog.fired(1) == [(1, FIRST), (1, allowed), (1, FIRST + 4 * MINUTE)]
    assert [t for _, t, _ in timing.skipped] == [FIRST + MINUTE, FIRST + 2 * MINUTE]
    assert "a later instant moves to" in timing.skipped[0][2]


async def test_a_stored_excluded_instant_is_replanned_on_adoption(h: Harness) -> None:
    timing = FakeTiming(h.table, LUNCH)
    # Stored before the calendar existed: the next time names an excluded instant.
    h.table.put(cron_job(1, {"calendars": ["pause"]}, next_ms=FIRST + MINUTE))
    loop = h.loop(timing=timing)
    await loop.start()
    await h.advance_to(FIRST + 4 * MINUTE + 1_000, step_ms=500)
    assert h.runlog.fired(1) == [(1, FIRST + 4 * MINUTE)]
    assert [t for _, t, _ in timing.skipped] == [FIRST + MINUTE, FIRST + 2 * MINUTE, FIRST + 3 * MINUTE]


async def test_max_runs_and_end_at_stop_the_job(h: Harness) -> None:
    timing = FakeTiming(h.table)
    h.table.put(cron_job(1, {"max_runs": 2}))
    h.table.put(cron_job(2, {"end_at": FIRST + MINUTE}))
    loop = h.loop(timing=timing)
    await loop.start()
    await h.advance_to(FIRST + 4 * MINUTE, step_ms=500)
    assert h.runlog.fired(1) == [(1, FIRST), (1, FIRST + MINUTE)]
    assert h.runlog.fired(2) == [(2, FIRST), (2, FIRST + MINUTE)]
    assert sorted(h.table.ended) == [1, 2]


async def test_jitter_delays_each_fire_by_the_seeded_amount_below_the_next_instant(h: Harness) -> None:
    timing = FakeTiming(h.table)
    h.table.put(cron_job(7, {"jitter_seconds": 50}))
    loop = h.loop(timing=timing)
    await loop.start()
    await h.advance_to(FIRST + 3 * MINUTE, step_ms=250)
    expected = [FIRST + k * MINUTE + jitter_delay(7, FIRST + k * MINUTE, 50_000) for k in range(3)]
    assert all(0 < e - (FIRST + k * MINUTE) <= 50_000 for k, e in enumerate(expected))
    assert h.runlog.fired(7) == [(7, e) for e in expected]
    # Sent at the jittered start, not before.
    assert [r.at_ms for r in h.runlog.records if r.job_id == 7] == expected


async def test_a_fix_rate_job_with_jitter_stays_on_its_grid_across_adoptions(h: Harness) -> None:
    timing = FakeTiming(h.table)
    # Every 10 s, jittered up to 9 s: released and adopted again between fires (10 s is beyond the
    # claim window), each time knowing only the jittered start; the instants stay on the grid.
    h.table.put(JobInfo(id=5, job_group=1, job_desc="j", schedule_type="FIX_RATE", schedule_conf="10",
                        trigger_status=1, trigger_next_time=T0 + 10_000, executor_handler="demo",
                        timing='{"jitter_seconds": 9}'))
    loop = h.loop(timing=timing)
    await loop.start()
    await h.advance_to(T0 + 61_000, step_ms=250)
    expected = [T0 + k * 10_000 + jitter_delay(5, T0 + k * 10_000, 9_000) for k in range(1, 6)]
    assert h.runlog.fired(5) == [(5, e) for e in expected]


def test_events_from_any_time_match_the_events_walked_one_by_one() -> None:
    calendars = compile_calendars({"pause": orjson.dumps(LUNCH).decode()})
    spec = {"calendars": ["pause"], "calendar_action": "move", "jitter_seconds": 5}
    rules = timing_rules(orjson.dumps(spec).decode(), calendars)
    walked = TimedSchedule(parse_schedule("CRON", "0 * * * * ?", "UTC"), rules, 3) if rules else None
    assert walked is not None
    events, cursor = [], T0
    for _ in range(8):
        nxt = walked.next_fire_ms(cursor)
        assert nxt is not None
        events.append(nxt)
        cursor = nxt
    for i, event in enumerate(events[1:], start=1):
        fresh = TimedSchedule(parse_schedule("CRON", "0 * * * * ?", "UTC"), rules, 3)
        assert fresh.next_fire_ms(events[i - 1]) == event
        assert fresh.next_fire_ms(event - 1) == event
    assert [walked.skip_at(e) is not None for e in events[:4]] == [False, True, True, False]
