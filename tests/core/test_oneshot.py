"""One-shot (ONCE) schedules: the wall time read in the zone (or its own offset), fired once,
daylight-saving gaps refused and repeated hours taken at their first occurrence, bad text
refused naming the field."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from jobring.core.oneshot import ONCE, canonical_once, parse_once, workflow_schedule
from jobring.core.planning import decide_fire
from jobring.core.schedule import CronSchedule, ScheduleError


def _ms(*parts: int) -> int:
    return int(datetime(*parts, tzinfo=UTC).timestamp()) * 1000


def test_the_wall_time_is_read_in_the_zone_and_fires_once() -> None:
    once = parse_once("2026-12-01T02:00", "Asia/Shanghai")
    assert once.at_ms == _ms(2026, 11, 30, 18, 0)
    assert once.next_fire_ms(once.at_ms - 1) == once.at_ms
    assert once.next_fire_ms(once.at_ms) is None  # then spent
    assert parse_once("2026-12-01 02:00:30", "UTC").at_ms == _ms(2026, 12, 1, 2, 0, 30)


def test_an_offset_wins_over_the_zone() -> None:
    assert parse_once("2026-12-01T02:00:00+08:00", "America/New_York").at_ms == _ms(2026, 11, 30, 18, 0)
    assert parse_once("2026-12-01T02:00:00Z", "Asia/Shanghai").at_ms == _ms(2026, 12, 1, 2, 0)
    assert canonical_once("2026-12-01 02:00+0800") == "2026-12-01T02:00:00+08:00"
    assert canonical_once("2026-12-01T02:00:05z") == "2026-12-01T02:00:05Z"


def test_daylight_saving_gaps_are_refused_and_repeats_take_the_first() -> None:
    with pytest.raises(ScheduleError, match="schedule_conf: .* does not exist"):
        parse_once("2026-03-08T02:30", "America/New_York")  # clocks go 02:00 -> 03:00
    first = parse_once("2026-11-01T01:30", "America/New_York")  # 01:00-02:00 happens twice
    assert first.at_ms == _ms(2026, 11, 1, 5, 30)  # EDT (UTC-4), the first one


@pytest.mark.parametrize("conf", ["", "tomorrow", "2026-13-01T00:00", "2026-12-01", "2026-12-01T02:00:00.5",
                                  "2026-12-01T25:00", "2026-12-01T02:00+25:00"])
def test_bad_text_is_refused_naming_the_field(conf: str) -> None:
    with pytest.raises(ScheduleError, match="^schedule_conf: "):
        parse_once(conf, "UTC")


def test_an_unknown_zone_names_the_zone_field() -> None:
    with pytest.raises(ScheduleError, match="^time_zone: "):
        parse_once("2026-12-01T02:00", "Mars/Olympus")


def test_the_misfire_rules_apply_and_either_way_it_is_spent() -> None:
    once = workflow_schedule(ONCE, "2026-12-01T02:00", "UTC")
    late = once.next_fire_ms(0)
    assert late is not None
    now = late + 10 * 60_000  # the admin was down for ten minutes
    skipped = decide_fire(late, now, "DO_NOTHING", once.next_fire_ms)
    fired = decide_fire(late, now, "FIRE_ONCE_NOW", once.next_fire_ms)
    assert not skipped.fires and skipped.next_ms is None
    assert fired.fires and fired.next_ms is None
    on_time = decide_fire(late, late + 200, "DO_NOTHING", once.next_fire_ms)
    assert on_time.fires and on_time.next_ms is None


def test_other_types_are_the_jobs() -> None:
    assert isinstance(workflow_schedule("CRON", "0 0 2 * * ?", "UTC"), CronSchedule)
