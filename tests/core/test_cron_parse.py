"""Parsing: accepted syntax and errors that name the field and the problem."""

from __future__ import annotations

import pytest

from jobring.core.cron import CronExpression, CronParseError, DayOfMonthRule, DayOfWeekRule, parse_fields


@pytest.mark.parametrize(
    ("expression", "field", "problem"),
    [
        # seconds
        ("60 * * * * ?", "seconds", "out of range 0-59"),
        ("a * * * * ?", "seconds", "not a number"),
        ("*/0 * * * * ?", "seconds", "step 0 out of range"),
        ("*/60 * * * * ?", "seconds", "step 60 out of range"),
        ("0/ * * * * ?", "seconds", "'/' must be followed"),
        ("*5 * * * * ?", "seconds", "cannot parse"),
        ("L * * * * ?", "seconds", "'L' is not allowed"),
        ("? * * * * *", "seconds", "'?' is only allowed"),
        ("1,,2 * * * * ?", "seconds", "empty list item"),
        # minutes
        ("0 61 * * * ?", "minutes", "out of range 0-59"),
        ("0 5-70 * * * ?", "minutes", "out of range"),
        ("0 1W * * * ?", "minutes", "'W' is not allowed"),
        # hours
        ("0 0 24 * * ?", "hours", "out of range 0-23"),
        ("0 0 */24 * * ?", "hours", "step 24 out of range"),
        ("0 0 1#2 * * ?", "hours", "'#' is not allowed"),
        # day-of-month
        ("0 0 0 0 * ?", "day-of-month", "out of range 1-31"),
        ("0 0 0 32 * ?", "day-of-month", "out of range 1-31"),
        ("0 0 0 L-31 * ?", "day-of-month", "offset from last day must be <= 30"),
        ("0 0 0 1-5W * ?", "day-of-month", "'W' must follow a single day"),
        ("0 0 0 0W * ?", "day-of-month", "out of range 1-31"),
        ("0 0 0 32W * ?", "day-of-month", "out of range 1-31"),
        ("0 0 0 2L * ?", "day-of-month", "'L' must be written"),
        ("0 0 0 1#2 * ?", "day-of-month", "'#' is only allowed in day-of-week"),
        ("0 0 0 ?,1 * *", "day-of-month", "'?' must stand alone"),
        ("0 0 0 */32 * ?", "day-of-month", "step 32 out of range"),
        # month
        ("0 0 0 1 13 ?", "month", "out of range 1-12"),
        ("0 0 0 1 0 ?", "month", "out of range 1-12"),
        ("0 0 0 1 JANUARY ?", "month", "unknown name 'JANUARY'"),
        ("0 0 0 1 FOO-DEC ?", "month", "unknown name 'FOO'"),
        ("0 0 0 ? ? MON", "month", "'?' is only allowed"),
        # day-of-week
        ("0 0 0 ? * 0", "day-of-week", "out of range 1-7"),
        ("0 0 0 ? * 8", "day-of-week", "out of range 1-7"),
        ("0 0 0 ? * MON-FOO", "day-of-week", "unknown name 'FOO'"),
        ("0 0 0 ? * 6#6", "day-of-week", "'#' must be followed by a number 1-5"),
        ("0 0 0 ? * 6#0", "day-of-week", "'#' must be followed by a number 1-5"),
        ("0 0 0 ? * 6#", "day-of-week", "'#' must be followed by a number 1-5"),
        ("0 0 0 ? * 8L", "day-of-week", "out of range 1-7"),
        ("0 0 0 ? * 6L,2", "day-of-week", "cannot be combined"),
        ("0 0 0 ? * 6#3,2#1", "day-of-week", "cannot be combined"),
        ("0 0 0 ? * L,2", "day-of-week", "cannot be combined"),
        ("0 0 0 ? * 2W", "day-of-week", "'W' is only allowed in day-of-month"),
        ("0 0 0 ? * */8", "day-of-week", "step 8 out of range"),
        # year
        ("0 0 0 1 1 ? 1969", "year", "out of range 1970-2099"),
        ("0 0 0 1 1 ? 2100", "year", "out of range 1970-2099"),
        ("0 0 0 1 1 ? 2010-2005", "year", "start must not be after its end"),
        ("0 0 0 1 1 ? ?", "year", "'?' is only allowed"),
        ("0 0 0 1 1 ? 20x0", "year", "cannot parse"),
    ],
)
def test_parse_errors_name_the_field(expression: str, field: str, problem: str) -> None:
    with pytest.raises(CronParseError) as info:
        CronExpression(expression)
    message = str(info.value)
    assert message.startswith(f"{field}: "), message
    assert problem in message, message


@pytest.mark.parametrize(
    ("expression", "problem"),
    [
        ("", "seconds: missing"),
        ("0 0 12 * *", "day-of-week: missing"),
        ("0 0 12 * * ? 2020 extra", "too many fields"),
        ("0 0 12 * * *", "exactly one of them must be '?' (neither is '?')"),
        ("0 0 12 ? * ?", "exactly one of them must be '?' (both are '?')"),
        ("0 0 12 15 * MON", "exactly one of them must be '?'"),
    ],
)
def test_structural_errors(expression: str, problem: str) -> None:
    with pytest.raises(CronParseError, match=None) as info:
        CronExpression(expression)
    assert problem in str(info.value)


def test_parse_error_is_a_value_error() -> None:
    assert issubclass(CronParseError, ValueError)


def test_fields_of_a_full_expression() -> None:
    fields = parse_fields("*/15 0-10/5 22-2 ? NOV-FEB FRI-MON 2020-2030/5")
    assert fields.seconds == {0, 15, 30, 45}
    assert fields.minutes == {0, 5, 10}
    assert fields.hours == {22, 23, 0, 1, 2}
    assert fields.day_of_month is None
    assert fields.months == {11, 12, 1, 2}
    assert fields.day_of_week == DayOfWeekRule(days=frozenset({6, 7, 1, 2}))
    assert fields.years == {2020, 2025, 2030}


def test_default_year_field_is_the_whole_range() -> None:
    fields = parse_fields("0 0 0 * * ?")
    assert min(fields.years) == 1970 and max(fields.years) == 2099 and len(fields.years) == 130
    assert fields.day_of_month == DayOfMonthRule(days=frozenset(range(1, 32)))


def test_special_day_fields() -> None:
    dom = parse_fields("0 0 0 1,15W,L,L-3,LW,L-2W * ?").day_of_month
    assert dom == DayOfMonthRule(
        days=frozenset({1}),
        last_day_offsets=frozenset({0, 3}),
        nearest_weekdays=frozenset({15}),
        nearest_weekday_last_offsets=frozenset({0, 2}),
    )
    assert parse_fields("0 0 0 ? * FRIL").day_of_week == DayOfWeekRule(days=frozenset({6}), last_in_month=6)
    assert parse_fields("0 0 0 ? * fri#2").day_of_week == DayOfWeekRule(
        days=frozenset({6}), nth_in_month=(6, 2)
    )
    # Quartz accepts a bare "/n" as "*/n" and tabs between fields.
    assert parse_fields("/20\t* * * * ?").seconds == {0, 20, 40}
    # A wrapping day-of-month range wraps at 31.
    dom_wrap = parse_fields("0 0 0 30-2 * ?").day_of_month
    assert dom_wrap is not None and dom_wrap.days == {30, 31, 1, 2}


def test_non_string_expression() -> None:
    with pytest.raises(CronParseError, match="must be a string"):
        parse_fields(None)  # type: ignore[arg-type]
