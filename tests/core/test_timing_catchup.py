"""Catch-up after downtime: missed instants within the window fire (each, or once), older ones
are skipped and listed; against a brute-force walk."""

from __future__ import annotations

from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobring.core.cron import CronExpression
from jobring.core.schedule import parse_schedule
from jobring.core.timing import (
    CalendarAction,
    CalendarSet,
    CatchUpMode,
    CatchUpRules,
    DstCron,
    DstRules,
    SkipKind,
    TimingRules,
    catch_up,
    parse_calendar,
    plan_next,
    timeline_for,
)
from jobring.core.timing.timeline import FixedRateTimeline, GridTimeline
from tests.core.timing_reference import (
    ZONES,
    SimpleCron,
    cron_instants,
    instants_ms,
    local_date,
    references,
    simple_crons,
    utc,
)

MINUTE, HOUR = 60_000, 3_600_000
HOURLY = timeline_for(parse_schedule("CRON", "0 0 * * * ?", "UTC"))


def rules(
    window_ms: int, mode: CatchUpMode = CatchUpMode.EACH, limit: int = 100, **extra: object
) -> TimingRules:
    return TimingRules(catch_up=CatchUpRules(window_ms, mode, limit), **extra)  # type: ignore[arg-type]


def test_each_fires_missed_instants_in_the_window_and_skips_older_ones() -> None:
    # Down from 03:30 to 09:10; window 3 h: 06:00..09:00 fire, 04:00 and 05:00 are skipped.
    result = catch_up(
        HOURLY, rules(3 * HOUR + 10 * MINUTE), 1, utc(2026, 1, 1, 3, 30), utc(2026, 1, 1, 9, 10), 0
    )
    assert [f.logical_ms for f in result.fires] == [utc(2026, 1, 1, h) for h in (6, 7, 8, 9)]
    assert all(f.fire_at_ms == utc(2026, 1, 1, 9, 10) and f.jitter_ms == 0 for f in result.fires)
    assert [(s.logical_ms, s.reason.kind) for s in result.skipped] == [
        (utc(2026, 1, 1, 4), SkipKind.CATCH_UP_WINDOW),
        (utc(2026, 1, 1, 5), SkipKind.CATCH_UP_WINDOW),
    ]
    assert result.resume_after_ms == utc(2026, 1, 1, 9) and not result.more_skipped
    following = plan_next(HOURLY, TimingRules(), 1, result.resume_after_ms, 4)
    assert following.fire is not None and following.fire.logical_ms == utc(2026, 1, 1, 10)


def test_once_fires_only_the_latest_missed_instant() -> None:
    result = catch_up(
        HOURLY, rules(3 * HOUR, CatchUpMode.ONCE), 1, utc(2026, 1, 1, 3, 30), utc(2026, 1, 1, 9, 10), 0
    )
    assert [f.logical_ms for f in result.fires] == [utc(2026, 1, 1, 9)]
    kinds = [(s.logical_ms, s.reason.kind) for s in result.skipped]
    assert kinds == [
        (utc(2026, 1, 1, 4), SkipKind.CATCH_UP_WINDOW),
        (utc(2026, 1, 1, 5), SkipKind.CATCH_UP_WINDOW),
        (utc(2026, 1, 1, 6), SkipKind.CATCH_UP_WINDOW),
        (utc(2026, 1, 1, 7), SkipKind.CATCH_UP_ONCE),
        (utc(2026, 1, 1, 8), SkipKind.CATCH_UP_ONCE),
    ]
    assert result.resume_after_ms == utc(2026, 1, 1, 9)


def test_limit_and_long_outages_stay_bounded() -> None:
    every_minute = timeline_for(parse_schedule("CRON", "0 * * * * ?", "UTC"))
    # A year down, one-day window, limit 5: five fires, 100 listed skips, then jumps.
    last, now = utc(2025, 1, 1), utc(2026, 1, 1, 0, 0, 30)
    each = catch_up(every_minute, rules(24 * HOUR, limit=5), 1, last, now, 0)
    assert [f.logical_ms for f in each.fires] == [utc(2025, 12, 31, 0, m) for m in range(1, 6)]
    assert len(each.skipped) == 100 and each.more_skipped
    assert each.skipped[0].reason.kind is SkipKind.CATCH_UP_WINDOW
    assert each.resume_after_ms == utc(2026, 1, 1)
    once = catch_up(every_minute, rules(24 * HOUR, CatchUpMode.ONCE), 1, last, now, 0)
    assert [f.logical_ms for f in once.fires] == [utc(2026, 1, 1)]
    assert len(once.skipped) == 100 and once.more_skipped and once.resume_after_ms == utc(2026, 1, 1)


def test_max_runs_and_calendars_apply() -> None:
    night = parse_calendar({"name": "night", "day_windows": [{"start": "00:00", "end": "06:00"}]})
    limited = rules(24 * HOUR, max_runs=3, calendars=CalendarSet((night,)))
    result = catch_up(HOURLY, limited, 1, utc(2026, 1, 1, 3, 30), utc(2026, 1, 1, 12), 1)
    assert [f.logical_ms for f in result.fires] == [utc(2026, 1, 1, 6), utc(2026, 1, 1, 7)]
    assert [(s.logical_ms, s.reason.calendar) for s in result.skipped] == [
        (utc(2026, 1, 1, 4), "night"),
        (utc(2026, 1, 1, 5), "night"),
    ]


def test_a_fire_moved_past_now_is_left_to_planning() -> None:
    night = parse_calendar({"name": "night", "day_windows": [{"start": "22:00", "end": "06:00"}]})
    moving = rules(24 * HOUR, calendars=CalendarSet((night,)), calendar_action=CalendarAction.MOVE)
    result = catch_up(HOURLY, moving, 1, utc(2026, 1, 1, 20, 30), utc(2026, 1, 2, 2, 30), 0)
    assert [f.logical_ms for f in result.fires] == [utc(2026, 1, 1, 21)]
    plan = plan_next(HOURLY, moving, 1, result.resume_after_ms, 1)
    assert plan.fire is not None and (plan.fire.logical_ms, plan.fire.fire_at_ms) == (
        utc(2026, 1, 2, 5),
        utc(2026, 1, 2, 6),
    )


def test_fixed_rate_grid_and_errors() -> None:
    grid = FixedRateTimeline(10 * MINUTE, utc(2026, 1, 1))
    result = catch_up(grid, rules(30 * MINUTE), 1, utc(2026, 1, 1), utc(2026, 1, 1, 1, 5), 0)
    assert [f.logical_ms for f in result.fires] == [utc(2026, 1, 1, 0, m) for m in (40, 50)] + [
        utc(2026, 1, 1, 1)
    ]
    assert len(result.skipped) == 3
    with pytest.raises(ValueError):
        catch_up(grid, TimingRules(), 1, 0, 1, 0)


# -- property ---------------------------------------------------------------------------------------------


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), simple_crons(), st.sampled_from(ZONES), st.sampled_from(list(CatchUpMode)))
def test_catch_up_matches_brute_force(
    data: st.DataObject, cron: SimpleCron, zone_name: str, mode: CatchUpMode
) -> None:
    zone = ZoneInfo(zone_name)
    now = data.draw(instants_ms(zone_name))
    last = now - data.draw(st.integers(1, 30 * 60)) * MINUTE
    window = data.draw(st.integers(10, 20 * 60)) * MINUTE
    limit = data.draw(st.integers(1, 6))
    refs = [
        data.draw(references(local_date(zone, now // 1000), "c")) for _ in range(data.draw(st.integers(0, 1)))
    ]
    timing = TimingRules(
        calendars=CalendarSet(tuple(parse_calendar(r.spec) for r in refs)),
        catch_up=CatchUpRules(window, mode, limit),
    )
    timeline = GridTimeline(
        DstCron(CronExpression(cron.text, zone), DstRules(), quartz_compatible=False).next_fire_ms
    )
    result = catch_up(timeline, timing, 3, last, now, 0)

    # Brute force: every instant in (last, now], classified from the rules.
    window_start = now - window
    missed = list(cron_instants(cron, zone, "skip", "second", last // 1000, now // 1000 + 1))
    events: list[tuple[int, str]] = []  # (instant ms, "calendar"/"old"/"in")
    for second in missed:
        ms = second * 1000
        if ms <= last or ms > now:
            continue
        excluded = any(r.excluded(second) for r in refs)
        events.append((ms, "calendar" if excluded else ("old" if ms < window_start else "in")))
    inside = [ms for ms, kind in events if kind == "in"]
    if mode is CatchUpMode.EACH:
        fires = inside[:limit]
        expected = [(ms, k) for ms, k in events if k != "in" or ms not in fires]
        resume = events[-1][0] if events else last
    else:
        # Once: what lies before the kept fire is listed (without a fire: what is older than the
        # window); calendar skips after it are left to ordinary planning.
        fires = inside[-1:]
        before = fires[0] if fires else window_start
        expected = [(ms, k) for ms, k in events if ms < before]
        resume = fires[0] if fires else max([last, *(ms for ms, _ in expected)])
    assert [f.logical_ms for f in result.fires] == fires
    kinds = {"calendar": {SkipKind.CALENDAR}, "old": {SkipKind.CATCH_UP_WINDOW}}
    kinds["in"] = {SkipKind.CATCH_UP_LIMIT, SkipKind.CATCH_UP_ONCE}
    listed = [(s.logical_ms, s.reason.kind) for s in result.skipped]
    assert [ms for ms, _ in listed] == [ms for ms, _ in expected][:100]
    assert all(kind in kinds[k] for (_, kind), (_, k) in zip(listed, expected, strict=False))
    resume_at = result.resume_after_ms
    if len(expected) <= 100:
        assert resume_at == resume
    # Skips not listed are either given up (then more_skipped) or found again by ordinary planning.
    unlisted = expected[len(listed) :]
    assert result.more_skipped == any(ms <= resume_at for ms, _ in unlisted)
    after = plan_next(timeline, timing, 3, resume_at, len(fires), max_listed=10_000)
    listed_ms = {ms for ms, _ in listed}
    left = [(ms, k) for ms, k in events if ms > resume_at and ms not in listed_ms and ms not in fires]
    assert all(k == "calendar" for _, k in left)
    assert [s.logical_ms for s in after.skipped if s.logical_ms <= now] == [ms for ms, _ in left]
    # Nothing missed is left for ordinary planning to fire late.
    assert after.fire is None or after.fire.logical_ms > now
