"""Planning the next fire: validity window, run limit, calendars (skip / move), jitter, previews."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import date, datetime
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobring.core.cron import CronExpression
from jobring.core.schedule import parse_schedule
from jobring.core.timing import (
    CalendarAction,
    CalendarSet,
    DstCron,
    DstGap,
    DstRepeat,
    DstRules,
    PlanEnd,
    SkipKind,
    TimingError,
    TimingRules,
    jitter_delay,
    parse_calendar,
    parse_pause_note,
    parse_timing_rules,
    plan_next,
    preview,
    timeline_for,
)
from jobring.core.timing.timeline import FixedRateTimeline, GridTimeline
from tests.core.timing_reference import (
    ZONES,
    Reference,
    SimpleCron,
    cron_instants,
    instants_ms,
    local_date,
    references,
    simple_crons,
    utc,
)

HOURLY = timeline_for(parse_schedule("CRON", "0 0 * * * ?", "UTC"))
MINUTE = 60_000
HOUR = 60 * MINUTE


def test_validity_window_bounds_fires_both_ends_included() -> None:
    rules = TimingRules(start_at_ms=utc(2026, 1, 1, 10), end_at_ms=utc(2026, 1, 1, 12))
    first = plan_next(HOURLY, rules, 1, utc(2025, 12, 1), 0)
    assert first.fire is not None and first.fire.logical_ms == utc(2026, 1, 1, 10)
    last = plan_next(HOURLY, rules, 1, utc(2026, 1, 1, 11), 0)
    assert last.fire is not None and last.fire.logical_ms == utc(2026, 1, 1, 12)
    over = plan_next(HOURLY, rules, 1, utc(2026, 1, 1, 12), 0)
    assert over.fire is None and over.end is PlanEnd.END_AT


def test_max_runs_counts_runs_not_skips() -> None:
    calendar = parse_calendar({"name": "odd", "day_windows": [{"start": "11:00", "end": "12:00"}]})
    rules = TimingRules(max_runs=2, calendars=CalendarSet((calendar,)))
    fires = preview(HOURLY, rules, 1, utc(2026, 1, 1, 9, 30), 0, 5)
    assert [f.logical_ms for f in fires.fires] == [utc(2026, 1, 1, 10), utc(2026, 1, 1, 12)]
    assert [s.logical_ms for s in fires.skipped] == [utc(2026, 1, 1, 11)]
    assert fires.end is PlanEnd.MAX_RUNS
    assert plan_next(HOURLY, rules, 1, utc(2026, 1, 1), 2).end is PlanEnd.MAX_RUNS


def test_skip_records_each_instant_with_the_calendar_name() -> None:
    lunch = parse_calendar({"name": "lunch", "day_windows": [{"start": "12:00", "end": "14:00"}]})
    plan = plan_next(HOURLY, TimingRules(calendars=CalendarSet((lunch,))), 1, utc(2026, 1, 1, 11), 0)
    assert plan.fire is not None and plan.fire.logical_ms == utc(2026, 1, 1, 14)
    assert [(s.logical_ms, s.reason.calendar, s.reason.kind) for s in plan.skipped] == [
        (utc(2026, 1, 1, 12), "lunch", SkipKind.CALENDAR),
        (utc(2026, 1, 1, 13), "lunch", SkipKind.CALENDAR),
    ]
    assert plan.skipped[0].reason.text == "calendar 'lunch': day_windows[0] (12:00-14:00)"


def test_move_fires_the_last_excluded_instant_at_the_next_allowed_time() -> None:
    lunch = parse_calendar({"name": "lunch", "day_windows": [{"start": "12:00", "end": "13:30"}]})
    rules = TimingRules(calendars=CalendarSet((lunch,)), calendar_action=CalendarAction.MOVE)
    plan = plan_next(HOURLY, rules, 1, utc(2026, 1, 1, 11), 0)
    assert plan.fire is not None
    assert (plan.fire.logical_ms, plan.fire.fire_at_ms) == (utc(2026, 1, 1, 13), utc(2026, 1, 1, 13, 30))
    assert plan.fire.moved_by is not None and plan.fire.moved_by.calendar == "lunch"
    assert [(s.logical_ms, s.reason.kind) for s in plan.skipped] == [
        (utc(2026, 1, 1, 12), SkipKind.CALENDAR_MERGED)
    ]
    assert plan.resume_after_ms == utc(2026, 1, 1, 13)
    following = plan_next(HOURLY, rules, 1, plan.resume_after_ms, 1)
    assert following.fire is not None and following.fire.logical_ms == utc(2026, 1, 1, 14)


def test_move_past_end_at_is_a_skip() -> None:
    night = parse_calendar({"name": "night", "day_windows": [{"start": "22:00", "end": "06:00"}]})
    rules = TimingRules(
        calendars=CalendarSet((night,)), calendar_action=CalendarAction.MOVE, end_at_ms=utc(2026, 1, 2, 3)
    )
    plan = plan_next(HOURLY, rules, 1, utc(2026, 1, 1, 21, 30), 0)
    assert plan.fire is None and plan.end is PlanEnd.END_AT
    assert len(plan.skipped) == 6 and plan.skipped[-1].reason.text.endswith("no allowed time to move to")


def test_long_excluded_spans_are_listed_up_to_the_cap_then_jumped() -> None:
    every_minute = timeline_for(parse_schedule("CRON", "0 * * * * ?", "UTC"))
    holiday = parse_calendar({"name": "h", "dates": ["2026-01-01", "2026-01-02"]})
    rules = TimingRules(calendars=CalendarSet((holiday,)))
    plan = plan_next(every_minute, rules, 1, utc(2025, 12, 31, 23, 59), 0)
    assert plan.fire is not None and plan.fire.logical_ms == utc(2026, 1, 3)
    assert len(plan.skipped) == 100 and plan.more_skipped
    assert plan.skipped[0].logical_ms == utc(2026, 1, 1)
    moving = TimingRules(calendars=rules.calendars, calendar_action=CalendarAction.MOVE)
    moved = plan_next(every_minute, moving, 1, utc(2025, 12, 31, 23, 59), 0)
    assert moved.fire is not None
    assert (moved.fire.logical_ms, moved.fire.fire_at_ms) == (utc(2026, 1, 2, 23, 59), utc(2026, 1, 3))
    assert len(moved.skipped) == 100 and moved.more_skipped


def test_no_allowed_time_within_the_horizon() -> None:
    forever = parse_calendar({"name": "all", "cron": "* * * * * ?"})
    plan = plan_next(HOURLY, TimingRules(calendars=CalendarSet((forever,))), 1, utc(2026, 1, 1), 0)
    assert plan.fire is None and plan.end is PlanEnd.NO_ALLOWED_TIME
    # Listed up to the cap; planning later resumes after the last one listed.
    assert len(plan.skipped) == 100 and plan.resume_after_ms == plan.skipped[-1].logical_ms


def test_preview_honours_calendars_and_dst_rules() -> None:
    schedule = parse_schedule("CRON", "0 30 2 * * ?", "America/New_York")
    timeline = timeline_for(schedule, DstRules(DstGap.NEXT_VALID, DstRepeat.SECOND))
    weekends = parse_calendar(
        {"name": "wk", "zone": "America/New_York", "workdays": ["MON", "TUE", "WED", "THU", "FRI"]}
    )
    shown = preview(timeline, TimingRules(calendars=CalendarSet((weekends,))), 1, utc(2026, 3, 5), 0, 3)
    zone = ZoneInfo("America/New_York")
    local = [datetime.fromtimestamp(f.fire_at_ms / 1000, zone).strftime("%a %d %H:%M") for f in shown.fires]
    # Sun 03-08 02:30 does not exist (next valid: 03:00) but Sunday is not a workday anyway.
    assert local == ["Thu 05 02:30", "Fri 06 02:30", "Mon 09 02:30"]
    assert [s.reason.calendar for s in shown.skipped] == ["wk", "wk"]
    with pytest.raises(ValueError):
        preview(timeline, TimingRules(), 1, 0, 0, 1001)


# -- jitter -----------------------------------------------------------------------------------------------


def test_jitter_is_deterministic_bounded_and_spread() -> None:
    rules = TimingRules(jitter_ms=10 * MINUTE)
    delays = []
    for hour in range(500):
        after = utc(2026, 1, 1) + hour * HOUR - 1
        plan = plan_next(HOURLY, rules, 42, after, 0)
        assert plan.fire is not None
        again = plan_next(HOURLY, rules, 42, after, 0)
        assert again.fire == plan.fire
        delays.append(plan.fire.jitter_ms)
        assert 0 <= plan.fire.fire_at_ms - plan.fire.logical_ms == plan.fire.jitter_ms <= 10 * MINUTE
    buckets = Counter(d * 10 // (10 * MINUTE + 1) for d in delays)
    assert len(buckets) == 10 and min(buckets.values()) >= 25  # ~50 per tenth of the range
    other = plan_next(HOURLY, rules, 43, utc(2026, 1, 1) - 1, 0)
    first = plan_next(HOURLY, rules, 42, utc(2026, 1, 1) - 1, 0)
    assert other.fire is not None and first.fire is not None and other.fire.jitter_ms != first.fire.jitter_ms


def test_jitter_never_reaches_the_next_instant_nor_passes_end_at() -> None:
    every_minute = timeline_for(parse_schedule("CRON", "0 * * * * ?", "UTC"))
    rules = TimingRules(jitter_ms=HOUR)
    for minute in range(200):
        plan = plan_next(every_minute, rules, 7, utc(2026, 1, 1) + minute * MINUTE - 1, 0)
        assert plan.fire is not None and plan.fire.jitter_ms < MINUTE
    ending = TimingRules(jitter_ms=HOUR, end_at_ms=utc(2026, 1, 1, 10, 0, 5))
    for job in range(50):
        plan = plan_next(HOURLY, ending, job, utc(2026, 1, 1, 9, 30), 0)
        assert plan.fire is not None and plan.fire.fire_at_ms <= utc(2026, 1, 1, 10, 0, 5)
    assert jitter_delay(1, 2, 0) == 0 and 0 <= jitter_delay(1, 2, 5) <= 5


# -- rules and pause notes ------------------------------------------------------------------------------


def test_parse_timing_rules_round_trip() -> None:
    cal = parse_calendar({"name": "cn"})
    spec: dict[str, object] = {
        "start_at": "2026-01-01T00:00:00+08:00",
        "end_at": 1_800_000_000_000,
        "max_runs": 3,
        "jitter_seconds": 30,
        "calendars": ["cn"],
        "calendar_action": "MOVE",
        "dst": {"gap": "next_valid"},
        "catch_up": {"window_seconds": 3600, "mode": "once"},
        "overlap": "buffer_one",
    }
    rules = parse_timing_rules(spec, {"cn": cal})
    assert rules.start_at_ms == utc(2025, 12, 31, 16) and rules.jitter_ms == 30_000
    assert parse_timing_rules(rules.to_spec(), {"cn": cal}) == rules
    assert parse_timing_rules(None, {}) == TimingRules()


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"start_at": "2026-01-01T00:00:00"}, "start_at"),
        ({"start_at": 5, "end_at": 4}, "end_at"),
        ({"max_runs": 0}, "max_runs"),
        ({"jitter_seconds": 86_401}, "jitter_seconds"),
        ({"jitter_seconds": True}, "jitter_seconds"),
        ({"calendars": ["cn", "nope"]}, "calendars[1]"),
        ({"calendars": ["cn", "cn"]}, "calendars[1]"),
        ({"calendar_action": "shift"}, "calendar_action"),
        ({"dst": {"repeat": "third"}}, "dst.repeat"),
        ({"catch_up": {"window_seconds": 5}}, "catch_up.window_seconds"),
        ({"catch_up": {"window_seconds": 60, "mode": "all"}}, "catch_up.mode"),
        ({"catch_up": {"mode": "each"}}, "catch_up.window_seconds"),
        ({"overlap": "queue"}, "overlap"),
        ({"colour": 1}, "colour"),
    ],
)
def test_parse_timing_rules_errors(spec: dict[str, object], field: str) -> None:
    with pytest.raises(TimingError) as error:
        parse_timing_rules(spec, {"cn": parse_calendar({"name": "cn"})})
    assert error.value.field == field


def test_pause_note() -> None:
    note = parse_pause_note("alice", "  data centre\\nmove  ", 1000)
    assert (note.by, note.reason, note.at_ms) == ("alice", "data centre\\nmove", 1000)
    assert parse_pause_note("bob", None, 1).reason == ""
    for by, reason, field in (("", "x", "by"), ("a", "x" * 501, "reason"), ("a", "bell\x07", "reason")):
        with pytest.raises(TimingError) as error:
            parse_pause_note(by, reason, 0)
        assert error.value.field == field


# -- property: against brute force ----------------------------------------------------------------------


def brute_plan(
    bases: Iterator[int], refs: list[Reference], rules: TimingRules, runs: int, window_end: int
) -> tuple[tuple[int, int] | None, list[tuple[int, str]]] | None:
    """(logical, due) of the next fire (seconds) and the skipped (instant, calendar); None when the
    minute walk is too short to decide."""
    if rules.max_runs is not None and runs >= rules.max_runs:
        return None, []

    def excluding(second: int) -> str | None:
        return next((ref.name for ref in refs if ref.excluded(second)), None)

    skipped: list[tuple[int, str]] = []
    base = next(bases, None)
    while base is not None:
        following = next(bases, None)
        if rules.start_at_ms is not None and base * 1000 < rules.start_at_ms:
            base = following
            continue
        if rules.end_at_ms is not None and base * 1000 > rules.end_at_ms:
            return None, skipped
        name = excluding(base)
        if name is None:
            return (base, base), skipped
        if rules.calendar_action is CalendarAction.MOVE:
            allowed = next((s for s in range(base, window_end, 60) if excluding(s) is None), None)
            if allowed is None or following is None:
                return None
            movable = rules.end_at_ms is None or allowed * 1000 <= rules.end_at_ms
            if movable and following >= allowed:
                return (base, allowed), skipped
        skipped.append((base, name))
        base = following
    return None


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), simple_crons(), st.sampled_from(ZONES))
def test_plan_matches_brute_force(data: st.DataObject, cron: SimpleCron, zone_name: str) -> None:
    after = data.draw(instants_ms(zone_name))
    zone = ZoneInfo(zone_name)
    dst = DstRules(data.draw(st.sampled_from(list(DstGap))), data.draw(st.sampled_from(list(DstRepeat))))
    timeline = GridTimeline(
        DstCron(CronExpression(cron.text, zone), dst, quartz_compatible=False).next_fire_ms
    )
    around = local_date(zone, after // 1000)
    refs = [data.draw(references(around, f"c{i}")) for i in range(data.draw(st.integers(0, 2)))]
    bound = st.one_of(st.none(), st.integers(after - 3 * HOUR, after + 30 * HOUR))
    start_at, end_at = data.draw(bound), data.draw(bound)
    if start_at is not None and end_at is not None and end_at < start_at:
        start_at, end_at = end_at, start_at
    rules = TimingRules(
        start_at_ms=start_at,
        end_at_ms=end_at,
        max_runs=data.draw(st.one_of(st.none(), st.integers(1, 3))),
        jitter_ms=data.draw(st.sampled_from([0, 1000, 10 * MINUTE, 6 * HOUR])),
        calendars=CalendarSet(tuple(parse_calendar(ref.spec) for ref in refs)),
        calendar_action=data.draw(st.sampled_from(list(CalendarAction))),
    )
    runs = data.draw(st.integers(0, 3))
    window_end = after // 1000 + 2 * 86_400
    bases = cron_instants(cron, zone, dst.gap.value, dst.repeat.value, after // 1000, window_end)
    expected = brute_plan(bases, refs, rules, runs, window_end)
    plan = plan_next(timeline, rules, 9, after, runs, max_listed=10_000)
    if expected is None:
        return
    fire, skipped = expected
    assert [(s.logical_ms // 1000, s.reason.calendar) for s in plan.skipped] == skipped
    if fire is None:
        assert plan.fire is None
        return
    assert plan.fire is not None, (cron.text, refs and refs[0].spec, rules)
    assert (plan.fire.logical_ms // 1000, plan.fire.due_ms // 1000) == fire
    following = next(
        cron_instants(
            cron, zone, dst.gap.value, dst.repeat.value, plan.fire.due_ms // 1000, window_end + 86_400
        ),
        None,
    )
    assert plan.fire.jitter_ms <= rules.jitter_ms
    if following is not None:
        assert plan.fire.fire_at_ms < following * 1000
    if rules.end_at_ms is not None:
        assert plan.fire.fire_at_ms <= rules.end_at_ms


def test_fixed_rate_timeline_keeps_its_grid() -> None:
    grid = FixedRateTimeline(interval_ms=90_000, anchor_ms=1_000)
    assert grid.next_after(1_000) == 91_000 and grid.next_after(90_999) == 91_000
    assert grid.previous_before(91_000) == 1_000 and grid.previous_before(91_001) == 91_000
    holiday = parse_calendar({"name": "h", "dates": [date(1970, 1, 1).isoformat()]})
    plan = plan_next(grid, TimingRules(calendars=CalendarSet((holiday,))), 1, 0, 0)
    # 960 instants of 1970-01-01 are skipped (100 listed), the first on the 2nd keeps the grid.
    assert plan.fire is not None and plan.fire.logical_ms == 1_000 + 960 * 90_000
    assert len(plan.skipped) == 100 and plan.more_skipped
