"""Next-fire times of Quartz expressions: the CronTrigger tutorial's examples and hand-derived cases.

Expected dates were worked out from the calendar (e.g. 2021-03-01 is a Monday), not from the code.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from jobring.core.cron import CronExpression, CronParseError


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[misc]


def fires(expression: str, after: datetime, count: int, tz: str = "UTC") -> list[datetime]:
    cron = CronExpression(expression, tz)
    out: list[datetime] = []
    current = after
    for _ in range(count):
        nxt = cron.next_after(current)
        if nxt is None:
            break
        out.append(nxt)
        current = nxt
    return out


TUTORIAL = [
    # Fire at 12pm (noon) every day; strictly after the given instant.
    ("0 0 12 * * ?", utc(2021, 3, 10, 12), [utc(2021, 3, 11, 12), utc(2021, 3, 12, 12)]),
    ("0 15 10 ? * *", utc(2021, 3, 10, 10, 15), [utc(2021, 3, 11, 10, 15), utc(2021, 3, 12, 10, 15)]),
    ("0 15 10 * * ?", utc(2021, 3, 10, 10, 14, 59), [utc(2021, 3, 10, 10, 15), utc(2021, 3, 11, 10, 15)]),
    ("0 15 10 * * ? *", utc(2021, 3, 10, 11), [utc(2021, 3, 11, 10, 15)]),
    # Only during 2005.
    ("0 15 10 * * ? 2005", utc(2004, 6, 1), [utc(2005, 1, 1, 10, 15), utc(2005, 1, 2, 10, 15)]),
    ("0 15 10 * * ? 2005", utc(2005, 12, 31, 10), [utc(2005, 12, 31, 10, 15)]),
    # Every minute from 14:00 to 14:59.
    ("0 * 14 * * ?", utc(2021, 3, 10, 13, 59, 59), [utc(2021, 3, 10, 14, 0), utc(2021, 3, 10, 14, 1)]),
    ("0 * 14 * * ?", utc(2021, 3, 10, 14, 59), [utc(2021, 3, 11, 14, 0)]),
    # Every 5 minutes from 14:00 to 14:55.
    ("0 0/5 14 * * ?", utc(2021, 3, 10, 14, 50), [utc(2021, 3, 10, 14, 55), utc(2021, 3, 11, 14, 0)]),
    ("0 0/5 14,18 * * ?", utc(2021, 3, 10, 14, 55), [utc(2021, 3, 10, 18, 0), utc(2021, 3, 10, 18, 5)]),
    ("0 0/5 14,18 * * ?", utc(2021, 3, 10, 18, 55), [utc(2021, 3, 11, 14, 0)]),
    ("0 0-5 14 * * ?", utc(2021, 3, 10, 14, 4), [utc(2021, 3, 10, 14, 5), utc(2021, 3, 11, 14, 0)]),
    # Wednesdays of March 2021: 3, 10, 17, 24, 31; March 2022 starts on a Tuesday.
    (
        "0 10,44 14 ? 3 WED",
        utc(2021, 3, 1),
        [utc(2021, 3, 3, 14, 10), utc(2021, 3, 3, 14, 44), utc(2021, 3, 10, 14, 10)],
    ),
    ("0 10,44 14 ? 3 WED", utc(2021, 3, 31, 14, 44), [utc(2022, 3, 2, 14, 10)]),
    # Friday 2021-03-12 -> Monday the 15th.
    ("0 15 10 ? * MON-FRI", utc(2021, 3, 12, 10, 15), [utc(2021, 3, 15, 10, 15), utc(2021, 3, 16, 10, 15)]),
    ("0 15 10 15 * ?", utc(2021, 3, 15, 10, 15), [utc(2021, 4, 15, 10, 15), utc(2021, 5, 15, 10, 15)]),
    (
        "0 15 10 L * ?",
        utc(2021, 1, 31, 10, 15),
        [utc(2021, 2, 28, 10, 15), utc(2021, 3, 31, 10, 15), utc(2021, 4, 30, 10, 15)],
    ),
    ("0 15 10 L * ?", utc(2024, 1, 31, 11), [utc(2024, 2, 29, 10, 15)]),
    (
        "0 15 10 L-2 * ?",
        utc(2021, 1, 1),
        [utc(2021, 1, 29, 10, 15), utc(2021, 2, 26, 10, 15), utc(2021, 3, 29, 10, 15)],
    ),
    # Last Friday: January 2021 Fridays are 1, 8, 15, 22, 29.
    (
        "0 15 10 ? * 6L",
        utc(2021, 1, 1),
        [utc(2021, 1, 29, 10, 15), utc(2021, 2, 26, 10, 15), utc(2021, 3, 26, 10, 15)],
    ),
    # 2002-01-01 is a Tuesday (last Friday the 25th); 2005-12-01 a Thursday (last Friday the 30th).
    ("0 15 10 ? * 6L 2002-2005", utc(2001, 1, 1), [utc(2002, 1, 25, 10, 15)]),
    ("0 15 10 ? * 6L 2002-2005", utc(2005, 12, 1), [utc(2005, 12, 30, 10, 15)]),
    # Third Friday: 2021-02-01 is a Monday, Fridays 5, 12, 19.
    (
        "0 15 10 ? * 6#3",
        utc(2021, 1, 1),
        [utc(2021, 1, 15, 10, 15), utc(2021, 2, 19, 10, 15), utc(2021, 3, 19, 10, 15)],
    ),
    # Every 5 days from the 1st: 1, 6, ..., 26, 31.
    (
        "0 0 12 1/5 * ?",
        utc(2021, 1, 26, 12),
        [utc(2021, 1, 31, 12), utc(2021, 2, 1, 12), utc(2021, 2, 6, 12)],
    ),
    ("0 11 11 11 11 ?", utc(2021, 1, 1), [utc(2021, 11, 11, 11, 11), utc(2022, 11, 11, 11, 11)]),
]


@pytest.mark.parametrize(("expression", "after", "expected"), TUTORIAL)
def test_tutorial_examples(expression: str, after: datetime, expected: list[datetime]) -> None:
    assert fires(expression, after, len(expected)) == expected


HAND_DERIVED = [
    # Feb 29 only in leap years.
    ("0 0 0 29 2 ?", utc(2021, 1, 1), [utc(2024, 2, 29), utc(2028, 2, 29)]),
    (
        "0 0 0 31 * ?",
        utc(2021, 1, 31),
        [utc(2021, 3, 31), utc(2021, 5, 31), utc(2021, 7, 31), utc(2021, 8, 31)],
    ),
    # 1W: 2021-05-01 Saturday -> Monday the 3rd (not April 30); 2021-08-01 Sunday -> Monday the 2nd.
    ("0 0 0 1W * ?", utc(2021, 4, 2), [utc(2021, 5, 3), utc(2021, 6, 1), utc(2021, 7, 1), utc(2021, 8, 2)]),
    ("0 0 0 1W * ?", utc(2021, 12, 2), [utc(2022, 1, 3)]),
    # 31W: 2021-01-31 Sunday -> Friday 29th (not Feb 1); skips months without a 31st; 2021-07-31 Sat -> 30th.
    (
        "0 0 0 31W * ?",
        utc(2021, 1, 1),
        [utc(2021, 1, 29), utc(2021, 3, 31), utc(2021, 5, 31), utc(2021, 7, 30)],
    ),
    # 15W: 2021-05-15 Saturday -> 14th; 2021-08-15 Sunday -> 16th.
    (
        "0 0 0 15W * ?",
        utc(2021, 5, 1),
        [utc(2021, 5, 14), utc(2021, 6, 15), utc(2021, 7, 15), utc(2021, 8, 16)],
    ),
    # LW: Jan 2021 ends Sunday -> 29th, Feb 2021 ends Sunday -> 26th, Mar 2021 ends Wednesday.
    ("0 0 0 LW * ?", utc(2021, 1, 1), [utc(2021, 1, 29), utc(2021, 2, 26), utc(2021, 3, 31)]),
    # L-3W: Feb 2021 -> 25th Thursday; Mar 2021 -> 28th Sunday -> Monday 29th.
    ("0 0 0 L-3W * ?", utc(2021, 2, 1), [utc(2021, 2, 25), utc(2021, 3, 29)]),
    ("0 0 0 L-3 * ?", utc(2024, 2, 1), [utc(2024, 2, 26), utc(2024, 3, 28)]),
    # L-30 only exists in 31-day months.
    ("0 0 0 L-30 * ?", utc(2021, 1, 2), [utc(2021, 3, 1), utc(2021, 5, 1), utc(2021, 7, 1), utc(2021, 8, 1)]),
    # Mixed list of days.
    ("0 0 0 1,15W,L * ?", utc(2021, 5, 1), [utc(2021, 5, 14), utc(2021, 5, 31), utc(2021, 6, 1)]),
    # Fifth Monday: only March (29th), May (31st), August (30th), November (29th) in 2021.
    (
        "0 0 12 ? * 2#5",
        utc(2021, 1, 1),
        [utc(2021, 3, 29, 12), utc(2021, 5, 31, 12), utc(2021, 8, 30, 12), utc(2021, 11, 29, 12)],
    ),
    # Fifth Sunday in February happens only when a leap-year February starts on a Sunday (2004, 2032).
    ("0 0 0 ? 2 1#5", utc(2005, 1, 1), [utc(2032, 2, 29)]),
    # Wrap-around ranges.
    (
        "0 0 22-2 * * ?",
        utc(2021, 3, 10, 12),
        [
            utc(2021, 3, 10, 22),
            utc(2021, 3, 10, 23),
            utc(2021, 3, 11, 0),
            utc(2021, 3, 11, 1),
            utc(2021, 3, 11, 2),
        ],
    ),
    # 2021-03-11 is a Thursday.
    (
        "0 0 12 ? * FRI-MON",
        utc(2021, 3, 11),
        [
            utc(2021, 3, 12, 12),
            utc(2021, 3, 13, 12),
            utc(2021, 3, 14, 12),
            utc(2021, 3, 15, 12),
            utc(2021, 3, 19, 12),
        ],
    ),
    (
        "0 0 0 1 NOV-FEB ?",
        utc(2021, 3, 1),
        [utc(2021, 11, 1), utc(2021, 12, 1), utc(2022, 1, 1), utc(2022, 2, 1)],
    ),
    # Stepped wrap continues across the wrap: 50, 5 (=65-60), 20, 35.
    ("50-35/15 * * * * ?", utc(2021, 1, 1), [utc(2021, 1, 1, 0, 0, 5), utc(2021, 1, 1, 0, 0, 20)]),
    ("10-40/15 * * * * ?", utc(2021, 1, 1), [utc(2021, 1, 1, 0, 0, 10), utc(2021, 1, 1, 0, 0, 25)]),
    ("*/20 * * * * ?", utc(2021, 1, 1, 0, 0, 40), [utc(2021, 1, 1, 0, 1, 0), utc(2021, 1, 1, 0, 1, 20)]),
    # Mon/Wed/Fri via a day-of-week step; 2021-03-10 is a Wednesday.
    ("0 0 9 ? * 2/2", utc(2021, 3, 10, 10), [utc(2021, 3, 12, 9), utc(2021, 3, 15, 9), utc(2021, 3, 17, 9)]),
    # Bare L in day-of-week is Saturday (7).
    ("0 0 9 ? * L", utc(2021, 3, 10), [utc(2021, 3, 13, 9), utc(2021, 3, 20, 9)]),
    # Year steps and carry over a year end.
    ("0 0 0 1 1 ? 2020/4", utc(2020, 1, 1), [utc(2024, 1, 1), utc(2028, 1, 1)]),
    ("59 59 23 31 12 ?", utc(2021, 12, 31, 23, 59, 59), [utc(2022, 12, 31, 23, 59, 59)]),
    # Names are case-insensitive.
    ("0 15 10 ? jan,Mar mon-fri", utc(2021, 1, 29, 11), [utc(2021, 3, 1, 10, 15)]),
]


@pytest.mark.parametrize(("expression", "after", "expected"), HAND_DERIVED)
def test_hand_derived(expression: str, after: datetime, expected: list[datetime]) -> None:
    assert fires(expression, after, len(expected)) == expected


@pytest.mark.parametrize(
    ("expression", "after"),
    [
        ("0 15 10 * * ? 2005", utc(2005, 12, 31, 10, 15)),
        ("0 15 10 ? * 6L 2002-2005", utc(2005, 12, 30, 10, 15)),
        ("0 0 0 1 1 ? 2020", utc(2020, 1, 1)),
        ("0 0 0 * * ?", utc(2099, 12, 31)),
        # 2100 is not a leap year, and past the year range anyway.
        ("0 0 0 29 2 ?", utc(2096, 2, 29)),
        ("0 0 0 * * ?", utc(2150, 1, 1)),
        # February never has a 30th.
        ("0 0 0 30 2 ?", utc(2021, 1, 1)),
    ],
)
def test_no_further_fire_time(expression: str, after: datetime) -> None:
    cron = CronExpression(expression)
    assert cron.next_after(after) is None
    assert cron.next_after_ms(int(after.timestamp() * 1000)) is None


def test_leap_years_in_last_day_of_february() -> None:
    cron = CronExpression("0 0 0 L 2 ?")
    assert cron.days_in_month(2000, 2) == (29,)
    assert cron.days_in_month(2100, 2) == (28,)
    assert cron.days_in_month(2024, 2) == (29,)
    assert cron.days_in_month(2023, 2) == (28,)


def test_strictly_after_and_sub_second_input() -> None:
    cron = CronExpression("* * * * * ?")
    assert cron.next_after(utc(2021, 1, 1, 12)) == utc(2021, 1, 1, 12, 0, 1)
    assert cron.next_after(utc(2021, 1, 1, 12) + timedelta(milliseconds=500)) == utc(2021, 1, 1, 12, 0, 1)
    assert cron.next_after(utc(2021, 1, 1, 12) - timedelta(microseconds=1)) == utc(2021, 1, 1, 12)


def test_next_after_ms_is_utc_epoch_ms() -> None:
    every_second = CronExpression("* * * * * ?")
    assert every_second.next_after_ms(0) == 1000
    assert every_second.next_after_ms(999) == 1000
    assert every_second.next_after_ms(1000) == 2000
    assert every_second.next_after_ms(-1) == 0
    noon_berlin = CronExpression("0 0 12 * * ?", "Europe/Berlin")
    # 2021-06-01T00:00Z -> 12:00 CEST = 10:00Z.
    start = int(utc(2021, 6, 1).timestamp() * 1000)
    assert noon_berlin.next_after_ms(start) == int(utc(2021, 6, 1, 10).timestamp() * 1000)


def test_result_is_in_the_expression_zone_whatever_the_input_zone() -> None:
    cron = CronExpression("0 0 9 * * ?", ZoneInfo("Asia/Tokyo"))
    after = datetime(2021, 6, 1, 12, tzinfo=timezone(timedelta(hours=-5)))  # 2021-06-02T02:00 Tokyo
    result = cron.next_after(after)
    assert result == datetime(2021, 6, 2, 9, tzinfo=ZoneInfo("Asia/Tokyo"))
    assert result is not None and result.utcoffset() == timedelta(hours=9)
    assert result.isoformat() == "2021-06-02T09:00:00+09:00"


def test_naive_datetime_is_rejected() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        CronExpression("* * * * * ?").next_after(datetime(2021, 1, 1))


@pytest.mark.parametrize("zone", ["Mars/Olympus", "", "not a zone", "../etc/passwd"])
def test_unknown_zone_is_a_clear_value_error(zone: str) -> None:
    with pytest.raises(ValueError, match="time zone") as info:
        CronExpression("* * * * * ?", zone)
    assert not isinstance(info.value, CronParseError)


def test_equal_expressions_compare_equal() -> None:
    assert CronExpression("0 15 10 ? * MON-FRI") == CronExpression("0  15 10 ? * 2-6")
    assert CronExpression("0 15 10 ? * MON-FRI") != CronExpression("0 15 10 ? * 2-6", "Europe/Berlin")
    assert "MON-FRI" in repr(CronExpression("0 15 10 ? * MON-FRI"))


def test_month_names_containing_l() -> None:
    # JUL contains an "L"; it must not be mistaken for the L special character.
    assert fires("0 0 0 1 jul,JUN ?", utc(2021, 1, 1), 2) == [utc(2021, 6, 1), utc(2021, 7, 1)]


def test_start_before_1970_fires_at_the_first_match_in_range() -> None:
    cron = CronExpression("0 0 12 * * ?", "Europe/Berlin")
    result = cron.next_after(datetime(1960, 5, 1, tzinfo=UTC))
    assert result is not None and result.isoformat() == "1970-01-01T12:00:00+01:00"
    assert CronExpression("0 0 12 * * ?").next_after_ms(-10**12) == 12 * 3600 * 1000
