"""Backfill planning, logical time and data intervals, and timelines going backwards."""

from __future__ import annotations

from bisect import bisect_left
from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobring.core.cron import CronExpression
from jobring.core.schedule import parse_schedule
from jobring.core.timing import (
    MAX_BACKFILL_RUNS,
    BackfillOrder,
    BackfillRequest,
    CalendarSet,
    DstCron,
    DstGap,
    DstRepeat,
    DstRules,
    SkipKind,
    TimingError,
    logical_time,
    manual_logical_time,
    parse_backfill_request,
    parse_calendar,
    plan_backfill,
    timeline_for,
)
from jobring.core.timing.timeline import EmptyTimeline, GridTimeline
from tests.core.timing_reference import ZONES, SimpleCron, cron_instants, instants_ms, simple_crons, utc

MINUTE, HOUR, DAY = 60_000, 3_600_000, 86_400_000
SHANGHAI = "Asia/Shanghai"


DAILY_9 = timeline_for(parse_schedule("CRON", "0 0 9 * * ?", SHANGHAI))


def test_range_oldest_and_newest_first_with_data_intervals() -> None:
    request = parse_backfill_request(
        {"start": "2026-03-01T00:00:00+08:00", "end": "2026-03-03T09:00:00+08:00"}
    )
    plan = plan_backfill(DAILY_9, request, SHANGHAI)
    nine = [utc(2026, 3, d, 1) for d in (1, 2, 3)]  # 09:00 CST is 01:00 UTC
    assert [(r.logical_ms, r.interval_start_ms, r.interval_end_ms) for r in plan.runs] == [
        (nine[0], utc(2026, 2, 28, 1), nine[0]),
        (nine[1], nine[0], nine[1]),
        (nine[2], nine[1], nine[2]),
    ]
    newest = plan_backfill(
        DAILY_9, parse_backfill_request({**request_spec(request), "order": "newest_first"}), SHANGHAI
    )
    assert [r.logical_ms for r in newest.runs] == nine[::-1]
    assert plan.next_to_start(started=0, running=0) == plan.runs[:1]


def request_spec(request: BackfillRequest) -> dict[str, object]:
    return {"start": request.start_ms, "end": request.end_ms}


def test_dates_are_local_days_of_the_job_zone() -> None:
    hourly = timeline_for(parse_schedule("CRON", "0 0 */6 * * ?", "America/Santiago"))
    # 2026-09-06 has no 00:00 in Santiago (the day starts at 01:00): its instants are 06, 12, 18.
    request = parse_backfill_request({"dates": ["2026-09-06", "2026-09-04"], "parallelism": 4})
    plan = plan_backfill(hourly, request, "America/Santiago")
    zone = ZoneInfo("America/Santiago")
    local = [datetime.fromtimestamp(r.logical_ms / 1000, zone).strftime("%m-%d %H") for r in plan.runs]
    assert local == ["09-04 00", "09-04 06", "09-04 12", "09-04 18", "09-06 06", "09-06 12", "09-06 18"]
    # 09-06's first run covers the period since 09-05 18:00 (-04), the instant before it: 11 real hours.
    assert plan.runs[4].interval_start_ms == plan.runs[4].logical_ms - 11 * HOUR
    assert plan.parallelism == 4
    assert plan.next_to_start(started=2, running=3) == plan.runs[2:3]


def test_calendars_are_ignored_unless_honoured() -> None:
    holiday = CalendarSet((parse_calendar({"name": "cn", "zone": SHANGHAI, "dates": ["2026-03-02"]}),))
    spec = {"start": "2026-03-01T00:00:00+08:00", "end": "2026-03-03T23:00:00+08:00"}
    assert len(plan_backfill(DAILY_9, parse_backfill_request(spec), SHANGHAI, holiday).runs) == 3
    honoured = plan_backfill(
        DAILY_9, parse_backfill_request({**spec, "honour_calendars": True}), SHANGHAI, holiday
    )
    assert [r.logical_ms for r in honoured.runs] == [utc(2026, 3, 1, 1), utc(2026, 3, 3, 1)]
    assert [(s.logical_ms, s.reason.kind, s.reason.calendar) for s in honoured.skipped] == [
        (utc(2026, 3, 2, 1), SkipKind.CALENDAR, "cn")
    ]
    # The data interval follows the schedule, not the calendar.
    assert honoured.runs[1].interval_start_ms == utc(2026, 3, 2, 1)


def test_count_cap_names_the_field() -> None:
    every_second = timeline_for(parse_schedule("CRON", "* * * * * ?", "UTC"))
    with pytest.raises(TimingError) as error:
        plan_backfill(every_second, parse_backfill_request({"start": 0, "end": 3 * HOUR}), "UTC")
    assert error.value.field == "end" and str(MAX_BACKFILL_RUNS) in str(error.value)
    fine = plan_backfill(every_second, parse_backfill_request({"start": 0, "end": 9_999_000}), "UTC")
    assert len(fine.runs) == MAX_BACKFILL_RUNS and fine.runs[0].interval_start_ms is None


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({}, "start"),
        ({"start": 0}, "end"),
        ({"start": 0, "end": 1, "dates": ["2026-01-01"]}, "start"),
        ({"start": 5, "end": 4}, "end"),
        ({"start": "2026-01-01T00:00", "end": 4}, "start"),
        ({"dates": []}, "dates"),
        ({"dates": ["2026-01-01", "01/02/2026"]}, "dates[1]"),
        ({"dates": ["2026-01-01"], "order": "random"}, "order"),
        ({"dates": ["2026-01-01"], "parallelism": 0}, "parallelism"),
        ({"dates": ["2026-01-01"], "parallelism": 65}, "parallelism"),
        ({"dates": ["2026-01-01"], "dry_run": "yes"}, "dry_run"),
        ({"dates": ["2026-01-01"], "speed": 1}, "speed"),
    ],
)
def test_request_errors_name_the_field(spec: dict[str, object], field: str) -> None:
    with pytest.raises(TimingError) as error:
        parse_backfill_request(spec)
    assert error.value.field == field


def test_request_defaults() -> None:
    request = parse_backfill_request({"dates": ["2026-01-02", "2026-01-01", "2026-01-02"], "dry_run": True})
    assert request.dates == (date(2026, 1, 1), date(2026, 1, 2))
    assert (request.order, request.parallelism, request.honour_calendars, request.dry_run) == (
        BackfillOrder.OLDEST_FIRST,
        1,
        False,
        True,
    )


def test_logical_time_values() -> None:
    value = logical_time(DAILY_9, utc(2026, 3, 2, 1), SHANGHAI)
    assert value.logical_date.isoformat() == "2026-03-02T09:00:00+08:00"
    assert value.template_values()["data_interval_start"] == datetime(
        2026, 3, 1, 9, tzinfo=ZoneInfo(SHANGHAI)
    )
    assert value.executor_params() == {
        "logical_date": "2026-03-02T09:00:00.000+08:00",
        "data_interval_start": "2026-03-01T09:00:00.000+08:00",
        "data_interval_end": "2026-03-02T09:00:00.000+08:00",
    }
    manual = manual_logical_time(DAILY_9, utc(2026, 3, 2, 5), SHANGHAI)
    assert (manual.logical_ms, manual.interval_start_ms) == (utc(2026, 3, 2, 5), utc(2026, 3, 2, 1))
    on_the_dot = manual_logical_time(DAILY_9, utc(2026, 3, 2, 1), SHANGHAI)
    assert on_the_dot.interval_start_ms == utc(2026, 3, 2, 1)
    nothing = logical_time(EmptyTimeline(), 5, "UTC")
    assert nothing.executor_params()["data_interval_start"] is None


def test_previous_before_finds_sparse_instants() -> None:
    leap = GridTimeline(timeline_for(parse_schedule("CRON", "0 0 0 29 2 ?", "UTC")).next_after)
    assert leap.previous_before(utc(2027, 1, 1)) == utc(2024, 2, 29)
    assert leap.previous_before(utc(2024, 2, 29)) == utc(2020, 2, 29)
    once = GridTimeline(timeline_for(parse_schedule("CRON", "0 0 0 1 1 ? 1999", "UTC")).next_after)
    assert once.previous_before(utc(2026, 1, 1)) is None  # more than nine years back


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.data(),
    simple_crons(),
    st.sampled_from(ZONES),
    st.sampled_from(list(DstGap)),
    st.sampled_from(list(DstRepeat)),
)
def test_backfill_and_intervals_match_a_minute_walk(
    data: st.DataObject, cron: SimpleCron, zone_name: str, gap: DstGap, repeat: DstRepeat
) -> None:
    zone = ZoneInfo(zone_name)
    start = data.draw(instants_ms(zone_name))
    end = start + data.draw(st.integers(0, 36 * 60)) * MINUTE
    rules = DstRules(gap, repeat)
    timeline = GridTimeline(
        DstCron(CronExpression(cron.text, zone), rules, quartz_compatible=False).next_fire_ms
    )
    plan = plan_backfill(timeline, BackfillRequest(start_ms=start, end_ms=end), zone_name)
    lookback = 2 * 86_400
    walk = list(cron_instants(cron, zone, gap.value, repeat.value, start // 1000 - lookback, end // 1000 + 1))
    expected = [s * 1000 for s in walk if start <= s * 1000 <= end]
    assert [r.logical_ms for r in plan.runs] == expected
    walk_ms = [s * 1000 for s in walk]
    for run in plan.runs:
        index = bisect_left(walk_ms, run.logical_ms)
        if index > 0:
            assert run.interval_start_ms == walk_ms[index - 1]
        elif run.interval_start_ms is not None:
            assert run.interval_start_ms < run.logical_ms - lookback * 1000
        assert run.interval_end_ms == run.logical_ms
    # Dates: every instant whose local date is listed.
    first = datetime.fromtimestamp(start / 1000, zone).date()
    days = sorted(
        {first + timedelta(days=d) for d in data.draw(st.lists(st.integers(0, 2), min_size=1, max_size=3))}
    )
    by_date = plan_backfill(timeline, BackfillRequest(dates=tuple(days)), zone_name)
    around = (start // 1000 - 2 * 86_400, start // 1000 + 4 * 86_400)
    span = list(cron_instants(cron, zone, gap.value, repeat.value, *around))
    local_days = set(days)
    assert [r.logical_ms for r in by_date.runs] == [
        s * 1000 for s in span if datetime.fromtimestamp(s, zone).date() in local_days
    ]
