"""The scheduling loop applies a job's catch-up window (issue 24 item 4) on a manual clock: after
an outage the missed instants within the window fire once each (or only the latest), older ones
are recorded as skipped; jobs without a window keep the misfire rules."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.admin.loop_fakes import Harness
from tests.admin.scheduler.test_loop_timing import FIRST, MINUTE, FakeTiming, cron_job

# The admin comes back 10 min 20 s after the job's planned instant (every minute from FIRST).
BACK = FIRST + 10 * MINUTE + 20_000


@pytest.fixture(params=[False, True], ids=["at-instant", "ahead"])
async def h(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    harness = Harness(start_ms=BACK, prepare=bool(request.param))
    yield harness
    for loop in harness.loops.values():
        await loop.stop()


def sent(h: Harness, job_id: int) -> list[tuple[int, str]]:
    return [(r.planned_ms, r.trigger_type) for r in h.runlog.records
            if r.job_id == job_id and not r.duplicate]


async def test_each_fires_the_missed_instants_in_the_window_and_skips_the_older_ones(h: Harness) -> None:
    timing = FakeTiming(h.table)
    h.table.put(cron_job(1, {"catch_up": {"window_seconds": 300}}))
    loop = h.loop(timing=timing)
    await loop.start()
    await h.advance_to(BACK + 1_000, step_ms=250)
    # Window start: BACK - 5 min = FIRST + 5 min 20 s; FIRST+6m .. FIRST+10m are within it.
    assert sent(h, 1) == [(FIRST + k * MINUTE, "MISFIRE") for k in range(6, 11)]
    assert [t for _, t, _ in timing.skipped] == [FIRST + k * MINUTE for k in range(6)]
    assert all(m.startswith("skipped by catch-up: missed; older than the catch-up window")
               for _, _, m in timing.skipped)
    await h.advance_to(FIRST + 12 * MINUTE + 1_000, step_ms=250)
    assert sent(h, 1)[5:] == [(FIRST + 11 * MINUTE, "CRON"), (FIRST + 12 * MINUTE, "CRON")]
    assert h.table.jobs[1].trigger_next_time == FIRST + 13 * MINUTE


async def test_once_fires_only_the_latest_missed_instant(h: Harness) -> None:
    timing = FakeTiming(h.table)
    h.table.put(cron_job(1, {"catch_up": {"window_seconds": 300, "mode": "once"}}))
    loop = h.loop(timing=timing)
    await loop.start()
    await h.advance_to(FIRST + 11 * MINUTE + 1_000, step_ms=250)
    assert sent(h, 1) == [(FIRST + 10 * MINUTE, "MISFIRE"), (FIRST + 11 * MINUTE, "CRON")]
    assert [t for _, t, _ in timing.skipped] == [FIRST + k * MINUTE for k in range(10)]
    assert "fires instead" in timing.skipped[-1][2]


async def test_the_limit_caps_the_fires_of_one_catch_up(h: Harness) -> None:
    timing = FakeTiming(h.table)
    h.table.put(cron_job(1, {"catch_up": {"window_seconds": 300, "limit": 2}}))
    loop = h.loop(timing=timing)
    await loop.start()
    await h.advance_to(BACK + 1_000, step_ms=250)
    assert sent(h, 1) == [(FIRST + 6 * MINUTE, "MISFIRE"), (FIRST + 7 * MINUTE, "MISFIRE")]
    skipped = sorted(t for _, t, _ in timing.skipped)
    assert skipped == [FIRST + k * MINUTE for k in (0, 1, 2, 3, 4, 5, 8, 9, 10)]


async def test_without_a_window_the_misfire_rule_still_applies(h: Harness) -> None:
    timing = FakeTiming(h.table)
    h.table.put(cron_job(1, {"jitter_seconds": 0, "max_runs": 100}))  # timing rules, no catch-up
    loop = h.loop(timing=timing)
    await loop.start()
    await h.advance_to(FIRST + 11 * MINUTE + 1_000, step_ms=250)
    # DO_NOTHING: the missed instants are passed over; the job resumes at its next instant.
    assert sent(h, 1) == [(FIRST + 11 * MINUTE, "CRON")]
    assert timing.skipped == []


async def test_calendar_skips_within_the_window_stay_calendar_skips(h: Harness) -> None:
    pause = {"name": "pause", "zone": "UTC", "day_windows": [{"start": "22:21", "end": "22:23"}]}
    timing = FakeTiming(h.table, pause)
    h.table.put(cron_job(1, {"catch_up": {"window_seconds": 300}, "calendars": ["pause"]}))
    loop = h.loop(timing=timing)
    await loop.start()
    await h.advance_to(BACK + 1_000, step_ms=250)
    # FIRST is 22:14; 22:21 and 22:22 (FIRST+7m, +8m) are excluded by the calendar.
    assert sent(h, 1) == [(FIRST + k * MINUTE, "MISFIRE") for k in (6, 9, 10)]
    reasons = {t: m for _, t, m in timing.skipped}
    assert reasons[FIRST + 7 * MINUTE].startswith("skipped by calendar 'pause'")
    assert reasons[FIRST + 2 * MINUTE].startswith("skipped by catch-up")
