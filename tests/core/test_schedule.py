"""Schedule types NONE / CRON / FIX_RATE: validation and next fire times in epoch ms."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from jobring.core.enums import ScheduleType
from jobring.core.schedule import (
    FIX_RATE_MAX_SECONDS,
    CronSchedule,
    FixRateSchedule,
    NoSchedule,
    ScheduleError,
    next_fire_times,
    parse_schedule,
)


def ms(*parts: int) -> int:
    return int(datetime(*parts, tzinfo=UTC).timestamp() * 1000)  # type: ignore[misc]


def test_none_never_fires_and_ignores_conf() -> None:
    schedule = parse_schedule("NONE", None, "UTC")
    assert isinstance(schedule, NoSchedule)
    assert schedule.schedule_type is ScheduleType.NONE
    assert schedule.next_fire_ms(0) is None
    assert parse_schedule("NONE", "leftover text", "UTC").next_fire_ms(ms(2021, 1, 1)) is None
    assert next_fire_times(schedule, 0, 5) == []


def test_cron_next_fire_in_zone() -> None:
    schedule = parse_schedule("CRON", "0 0 9 ? * MON-FRI", "Europe/Berlin")
    assert isinstance(schedule, CronSchedule)
    assert schedule.schedule_type is ScheduleType.CRON
    # Friday 2021-06-04 10:00 Berlin (08:00Z) -> Monday 09:00 CEST = 07:00Z.
    assert schedule.next_fire_ms(ms(2021, 6, 4, 8)) == ms(2021, 6, 7, 7)
    # Strictly after: exactly at a fire time gives the following one.
    assert schedule.next_fire_ms(ms(2021, 6, 7, 7)) == ms(2021, 6, 8, 7)
    assert next_fire_times(schedule, ms(2021, 6, 4, 8), 3) == [
        ms(2021, 6, 7, 7),
        ms(2021, 6, 8, 7),
        ms(2021, 6, 9, 7),
    ]


def test_cron_accepts_zoneinfo_and_lower_case_type() -> None:
    schedule = parse_schedule(" cron ", "0 0 12 * * ?", ZoneInfo("Asia/Tokyo"))
    assert schedule.next_fire_ms(ms(2021, 1, 1)) == ms(2021, 1, 1, 3)


def test_cron_with_an_ending_year_runs_out() -> None:
    schedule = parse_schedule("CRON", "0 0 0 1 1 ? 2021-2022", "UTC")
    assert next_fire_times(schedule, ms(2020, 6, 1), 5) == [ms(2021, 1, 1), ms(2022, 1, 1)]


def test_fix_rate_counts_from_the_given_instant() -> None:
    schedule = parse_schedule("FIX_RATE", "30", "UTC")
    assert isinstance(schedule, FixRateSchedule)
    assert schedule.schedule_type is ScheduleType.FIX_RATE
    assert schedule.next_fire_ms(1_234) == 31_234
    assert next_fire_times(schedule, 500, 3) == [30_500, 60_500, 90_500]
    assert parse_schedule("FIX_RATE", " 1 ", "UTC").next_fire_ms(0) == 1000
    top = parse_schedule("FIX_RATE", str(FIX_RATE_MAX_SECONDS), "UTC")
    assert top.next_fire_ms(0) == FIX_RATE_MAX_SECONDS * 1000


def test_fix_rate_ignores_time_zone() -> None:
    # The zone is irrelevant to a fixed rate, so even a bad one does not matter.
    assert parse_schedule("FIX_RATE", "5", "Not/AZone").next_fire_ms(0) == 5000


@pytest.mark.parametrize(
    ("schedule_type", "conf", "tz", "message"),
    [
        ("HOURLY", "1", "UTC", "schedule_type: must be one of NONE, CRON, FIX_RATE"),
        ("", "1", "UTC", "schedule_type:"),
        ("CRON", None, "UTC", "schedule_conf: required for schedule_type CRON"),
        ("CRON", "   ", "UTC", "schedule_conf: required"),
        ("CRON", "0 0 25 * * ?", "UTC", "schedule_conf: hours: value 25 out of range 0-23"),
        ("CRON", "0 0 12 * * *", "UTC", "schedule_conf: day-of-month/day-of-week"),
        ("CRON", "0 0 12 * * ?", "Mars/Base", "time_zone: unknown time zone 'Mars/Base'"),
        ("FIX_RATE", None, "UTC", "schedule_conf: required for schedule_type FIX_RATE"),
        ("FIX_RATE", "0", "UTC", "schedule_conf: FIX_RATE interval must be 1-31536000 seconds, got 0"),
        ("FIX_RATE", "31536001", "UTC", "got 31536001"),
        ("FIX_RATE", "-5", "UTC", "schedule_conf: FIX_RATE needs a whole number of seconds"),
        ("FIX_RATE", "1.5", "UTC", "whole number"),
        ("FIX_RATE", "0 0 12 * * ?", "UTC", "whole number"),
        ("FIX_RATE", "\u0661\u0662", "UTC", "whole number"),
    ],
)
def test_invalid_schedules_name_the_field(
    schedule_type: str, conf: str | None, tz: str, message: str
) -> None:
    with pytest.raises(ScheduleError) as info:
        parse_schedule(schedule_type, conf, tz)
    assert message in str(info.value)
    assert isinstance(info.value, ValueError)


def test_fix_rate_schedule_validates_when_built_directly() -> None:
    with pytest.raises(ScheduleError, match="schedule_conf"):
        FixRateSchedule(0)


def test_preview_count_bounds() -> None:
    schedule = parse_schedule("FIX_RATE", "1", "UTC")
    assert next_fire_times(schedule, 0, 0) == []
    with pytest.raises(ValueError, match="count"):
        next_fire_times(schedule, 0, -1)
    with pytest.raises(ValueError, match="count"):
        next_fire_times(schedule, 0, 1001)
