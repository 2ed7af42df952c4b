"""Calendars: validation, exclusion reasons, next allowed time, combining; against a minute walk."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobring.core.timing.calendars import (
    CalendarSet,
    Exclusion,
    calendar_from_dates,
    parse_calendar,
)
from jobring.core.timing.errors import TimingError
from tests.core.timing_reference import ZONES, instants_ms, local_date, minute_walls, references, utc


def ms(zone: str, *parts: int) -> int:
    """Epoch ms of a wall time in a zone (first occurrence)."""
    return int(datetime(*parts, tzinfo=ZoneInfo(zone)).timestamp() * 1000)  # type: ignore[misc, arg-type]


SHANGHAI = "Asia/Shanghai"


def test_holidays_workdays_and_windows_with_reasons() -> None:
    calendar = parse_calendar(
        {
            "name": "cn-2026",
            "zone": SHANGHAI,
            "dates": ["2026-10-01", "2026-10-02"],
            "workdays": ["MON", "TUE", "WED", "THU", "FRI"],
            "day_windows": [{"start": "12:00", "end": "13:00"}, {"start": "22:00", "end": "06:00"}],
        }
    )
    assert calendar.is_excluded(ms(SHANGHAI, 2026, 9, 30, 11, 59)) is None
    assert calendar.is_excluded(ms(SHANGHAI, 2026, 9, 30, 12, 30)) == Exclusion(
        "cn-2026", "day_windows[0] (12:00-13:00)"
    )
    assert calendar.next_allowed(ms(SHANGHAI, 2026, 9, 30, 12, 30)) == ms(SHANGHAI, 2026, 9, 30, 13)
    reason = calendar.is_excluded(ms(SHANGHAI, 2026, 10, 2, 9))
    assert reason is not None and reason.text == "calendar 'cn-2026': dates[1] (2026-10-02)"
    saturday = calendar.is_excluded(ms(SHANGHAI, 2026, 10, 3, 9))
    assert saturday == Exclusion("cn-2026", "workdays (Saturday is not a workday)")
    # From the evening of Wed 09-30 (night window), past the holidays and the weekend, to Mon 06:00.
    assert calendar.next_allowed(ms(SHANGHAI, 2026, 9, 30, 22, 30)) == ms(SHANGHAI, 2026, 10, 5, 6)
    # A time that is allowed is its own next allowed time, to the millisecond.
    assert calendar.next_allowed(ms(SHANGHAI, 2026, 9, 30, 10) + 123) == ms(SHANGHAI, 2026, 9, 30, 10) + 123


def test_cron_of_excluded_seconds_and_inversion() -> None:
    nights = parse_calendar({"name": "nights", "cron": "* * 0-6 ? * *", "zone": "Europe/Berlin"})
    assert nights.is_excluded(ms("Europe/Berlin", 2026, 5, 4, 6, 59, 59)) == Exclusion(
        "nights", "cron (* * 0-6 ? * *)"
    )
    assert nights.next_allowed(ms("Europe/Berlin", 2026, 5, 4, 1)) == ms("Europe/Berlin", 2026, 5, 4, 7)
    # Excluding only second 0 of each minute: the next allowed time is one second later.
    second_zero = parse_calendar({"name": "s0", "cron": "0 * * * * ?"})
    assert second_zero.next_allowed(utc(2026, 1, 1, 10, 5)) == utc(2026, 1, 1, 10, 5, 1)
    # A Unix expression is accepted (stored as Quartz): minutes 0-9 of every hour.
    unix = parse_calendar({"name": "u", "cron": "0-9 * * * *"})
    assert unix.to_spec()["cron"] == "0 0-9 * * * ?"
    only = parse_calendar({"name": "only", "invert": True, "dates": ["2026-12-24"], "zone": "Europe/Berlin"})
    assert only.is_excluded(utc(2026, 1, 1)) == Exclusion("only", "invert (not a listed time)")
    assert only.next_allowed(utc(2026, 1, 1)) == ms("Europe/Berlin", 2026, 12, 24)
    assert only.next_allowed(ms("Europe/Berlin", 2026, 12, 25)) is None  # nothing listed afterwards


def test_day_at_a_midnight_transition() -> None:
    """In Santiago 2026-09-06 starts at 01:00 (00:00-00:59 does not exist)."""
    holiday = calendar_from_dates("cl", ["2026-09-06"], zone="America/Santiago")
    before = ms("America/Santiago", 2026, 9, 5, 23, 59)
    assert holiday.is_excluded(before) is None
    assert holiday.is_excluded(before + 60_000) is not None  # 01:00 -03, the day's first instant
    assert holiday.next_allowed(before + 60_000) == ms("America/Santiago", 2026, 9, 7)


def test_combined_calendars_name_the_excluding_one() -> None:
    weekend = parse_calendar({"name": "weekdays", "workdays": ["MON", "TUE", "WED", "THU", "FRI"]})
    lunch = parse_calendar({"name": "lunch", "day_windows": [{"start": "12:00", "end": "14:00"}]})
    both = CalendarSet((weekend, lunch))
    assert both.is_excluded(utc(2026, 5, 2, 13)) == Exclusion(
        "weekdays", "workdays (Saturday is not a workday)"
    )
    assert both.is_excluded(utc(2026, 5, 4, 13)) == Exclusion("lunch", "day_windows[0] (12:00-14:00)")
    assert both.next_allowed(utc(2026, 5, 2, 13)) == utc(2026, 5, 4)
    assert both.next_allowed(utc(2026, 5, 4, 12)) == utc(2026, 5, 4, 14)
    assert not CalendarSet() and CalendarSet().next_allowed(5) == 5


def test_spec_round_trip_and_normalisation() -> None:
    spec = {
        "name": "x",
        "zone": "Europe/London",
        "dates": ["2026-01-01"],
        "date_ranges": [{"start": "2026-08-01", "end": "2026-08-14"}],
        "workdays": ["monday", "Tue", "WED", "THU", "FRI"],
        "day_windows": [{"start": "22:30:15", "end": "24:00"}],
        "cron": "* * 3 ? * SUN",
        "periods": [{"start": "2026-03-01T09:00:00+01:00", "end": "2026-03-01T10:00"}],
    }
    calendar = parse_calendar(spec)
    normal = calendar.to_spec()
    assert normal["workdays"] == ["MON", "TUE", "WED", "THU", "FRI"]
    assert normal["day_windows"] == [{"start": "22:30:15", "end": "24:00"}]
    assert normal["periods"] == [{"start": "2026-03-01T08:00:00Z", "end": "2026-03-01T10:00:00Z"}]
    assert parse_calendar(normal).to_spec() == normal


BAD = [
    ({"name": ""}, "name"),
    ({"name": "x", "zone": "Mars/Olympus"}, "zone"),
    ({"name": "x", "colour": "red"}, "colour"),
    ({"name": "x", "dates": ["2026-01-01", "2026-02-30", "x"]}, "dates[1]"),
    ({"name": "x", "dates": ["2026-01-01", "2026-02-03", "2026-1-04"]}, "dates[2]"),
    ({"name": "x", "dates": "2026-01-01"}, "dates"),
    ({"name": "x", "dates": ["2150-01-01"]}, "dates[0]"),
    ({"name": "x", "date_ranges": [{"start": "2026-01-05", "end": "2026-01-04"}]}, "date_ranges[0].end"),
    ({"name": "x", "date_ranges": [{"start": "2026-01-05"}]}, "date_ranges[0].end"),
    ({"name": "x", "workdays": ["MON", "FUNDAY"]}, "workdays[1]"),
    ({"name": "x", "workdays": ["MON", "MONDAY"]}, "workdays[1]"),
    ({"name": "x", "workdays": []}, "workdays"),
    ({"name": "x", "day_windows": [{"start": "25:00", "end": "26:00"}]}, "day_windows[0].start"),
    ({"name": "x", "day_windows": [{"start": "10:00", "end": "10:00"}]}, "day_windows[0].end"),
    ({"name": "x", "day_windows": [{"start": "10:00", "end": "9"}]}, "day_windows[0].end"),
    ({"name": "x", "cron": "0 0 12 * * MON"}, "cron"),
    (
        {"name": "x", "periods": [{"start": "2026-01-01T10:00Z", "end": "2026-01-01T09:00Z"}]},
        "periods[0].end",
    ),
    ({"name": "x", "periods": [{"start": "yesterday", "end": "2026-01-01T09:00Z"}]}, "periods[0].start"),
    ({"name": "x", "invert": "yes", "dates": ["2026-01-01"]}, "invert"),
    ({"name": "x", "invert": True}, "invert"),
    ({"name": "x", "invert": True, "workdays": ["MON"]}, "workdays"),
]


@pytest.mark.parametrize(("spec", "field"), BAD)
def test_errors_name_the_offending_part(spec: dict[str, object], field: str) -> None:
    with pytest.raises(TimingError) as error:
        parse_calendar(spec)
    assert error.value.field == field
    assert str(error.value).startswith(f"{field}: ")


def test_cron_error_suggests_the_fix() -> None:
    with pytest.raises(TimingError, match=r"did you mean '0 0 12 \? \* MON'"):
        parse_calendar({"name": "x", "cron": "0 0 12 * * MON"})


# -- property: against a minute walk -----------------------------------------------------------------


@settings(max_examples=70, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), st.sampled_from(ZONES))
def test_calendars_match_a_minute_walk(data: st.DataObject, anchor_zone: str) -> None:
    t = data.draw(instants_ms(anchor_zone))
    around = local_date(ZoneInfo(anchor_zone), t // 1000)
    refs = [data.draw(references(around, f"c{i}")) for i in range(data.draw(st.integers(1, 2)))]
    calendars = CalendarSet(tuple(parse_calendar(ref.spec) for ref in refs))

    def excluding(second: int) -> str | None:
        return next((ref.name for ref in refs if ref.excluded(second)), None)

    reason = calendars.is_excluded(t)
    assert (None if reason is None else reason.calendar) == excluding(t // 1000)
    found = calendars.next_allowed(t)
    if excluding(t // 1000) is None:
        assert found == t
        return
    start = (t // 60_000 + 1) * 60
    end = start + 12 * 86_400
    walks = [minute_walls(ref.zone, start, end) for ref in refs]
    for steps in zip(*walks, strict=True):
        if not any(ref.excluded_at(*step) for ref, step in zip(refs, steps, strict=True)):
            assert found == steps[0][0] * 1000, (refs[0].spec, t)
            return
    assert found is None or found >= end * 1000
