"""Unix (5-field) cron accepted and stored as Quartz; errors for 6/7-field mistakes suggest the fix."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobring.core.cron import CronExpression, CronParseError, to_quartz

CONVERSIONS = [
    ("*/5 * * * *", "0 */5 * * * ?"),
    ("0 9 * * 1-5", "0 0 9 ? * MON-FRI"),
    ("30 2 * * 0,6", "0 30 2 ? * SAT,SUN"),
    ("0 0 * * 7", "0 0 0 ? * SUN"),
    ("0 0 * * 5-1", "0 0 0 ? * FRI-MON"),
    ("0 0 * * sun,wed", "0 0 0 ? * SUN,WED"),
    ("15 10 1 jul *", "0 15 10 1 jul ?"),
    ("0 12 1-7 * *", "0 0 12 1-7 * ?"),
    ("  0   0  *  *   *  ", "0 0 0 * * ?"),
    ("@daily", "0 0 0 * * ?"),
    ("@Weekly", "0 0 0 ? * SUN"),
    ("@hourly", "0 0 * * * ?"),
    ("0 15 10 ? * MON-FRI", "0 15 10 ? * MON-FRI"),
    ("0 15 10 ? * MON-FRI 2027", "0 15 10 ? * MON-FRI 2027"),
]


@pytest.mark.parametrize(("typed", "stored"), CONVERSIONS)
def test_conversions(typed: str, stored: str) -> None:
    assert to_quartz(typed) == stored


ERRORS = [
    ("0 0 1,15 * MON", ["either", "'0 0 0 1,15 * ?'", "'0 0 0 ? * MON'"]),
    ("0 0 */2 * 1", ["both", "AND", "'0 0 0 */2 * ?'", "'0 0 0 ? * MON'"]),
    ("0 0 12 * * MON", ["did you mean '0 0 12 ? * MON'?"]),
    ("0 */5 * * * *", ["did you mean '0 */5 * * * ?'?"]),
    ("0 0 12 ? * ?", ["did you mean '0 0 12 * * ?'?"]),
    ("0 0 12 ? * 0", ["1 = SUN", "Unix's 0 = Sunday"]),
    ("0 12 L * ?", ["Quartz syntax", "did you mean '0 0 12 L * ?'?"]),
    ("0 0 * * 8", ["out of range 0-7"]),
    ("60 * * * *", ["minutes: value 60", "read as Unix cron"]),
    ("* * *", ["expected 5 fields", "got 3"]),
    ("@reboot", ["not a schedule"]),
    ("0 0 0 1 1 ? 2027 x", ["expected 5 fields", "got 8"]),
]


@pytest.mark.parametrize(("typed", "fragments"), ERRORS)
def test_errors_suggest_the_right_form(typed: str, fragments: list[str]) -> None:
    with pytest.raises(CronParseError) as error:
        to_quartz(typed)
    for fragment in fragments:
        assert fragment in str(error.value), str(error.value)


def test_suggestions_parse() -> None:
    for typed in ("0 0 12 * * MON", "0 */5 * * * *", "0 0 12 ? * ?"):
        with pytest.raises(CronParseError) as error:
            to_quartz(typed)
        match = re.search(r"did you mean '(.*)'\?$", str(error.value))
        assert match is not None
        suggestion = match.group(1)
        assert to_quartz(suggestion) == suggestion


# -- property: converted expressions fire exactly where Vixie cron would ---------------------------


@st.composite
def unix_field(draw: st.DrawFn, low: int, high: int) -> tuple[str, set[int]]:
    kind = draw(st.sampled_from(["*", "step", "one", "list", "range", "range_step"]))
    a, b = sorted((draw(st.integers(low, high)), draw(st.integers(low, high))))
    step = draw(st.integers(1, max(1, high - low)))
    if kind == "*":
        return "*", set(range(low, high + 1))
    if kind == "step":
        return f"*/{step}", set(range(low, high + 1, step))
    if kind == "one":
        return str(a), {a}
    if kind == "list":
        return f"{a},{b}", {a, b}
    if kind == "range":
        return f"{a}-{b}", set(range(a, b + 1))
    return f"{a}-{b}/{step}", set(range(a, b + 1, step))


@st.composite
def unix_expressions(draw: st.DrawFn) -> tuple[str, Callable[[datetime], bool]]:
    minute_text, minutes = draw(unix_field(0, 59))
    hour_text, hours = draw(unix_field(0, 23))
    month_text, months = draw(unix_field(1, 12))
    which = draw(st.sampled_from(["none", "dom", "dow"]))
    dom_text, doms = draw(unix_field(1, 31)) if which == "dom" else ("*", set(range(1, 32)))
    dow_text, dows = draw(unix_field(0, 7)) if which == "dow" else ("*", set(range(0, 8)))
    if which == "dom" and dom_text.startswith("*"):
        dom_text, doms = "*", set(range(1, 32))
    if which == "dow" and dow_text.startswith("*"):
        dow_text, dows = "*", set(range(0, 8))
    sundays = {d % 7 for d in dows}

    def fires(t: datetime) -> bool:
        return (
            t.minute in minutes
            and t.hour in hours
            and t.month in months
            and t.day in doms
            and t.isoweekday() % 7 in sundays
        )

    return f"{minute_text} {hour_text} {dom_text} {month_text} {dow_text}", fires


@settings(max_examples=60, deadline=None)
@given(unix_expressions(), st.integers(0, 365 * 3))
def test_converted_expression_fires_where_unix_cron_would(
    generated: tuple[str, Callable[[datetime], bool]], day: int
) -> None:
    text, fires = generated
    expression = CronExpression(to_quartz(text), "UTC")
    start = datetime(2025, 1, 1, tzinfo=UTC) + timedelta(days=day)
    minutes = (start + timedelta(minutes=m) for m in range(1, 3 * 1440))
    expected = [t for t in minutes if fires(t)]
    got: list[datetime] = []
    current = start
    end = start + timedelta(minutes=3 * 1440)
    while True:
        following = expression.next_after(current)
        if following is None or following >= end:
            break
        got.append(following)
        current = following
    assert got == expected, text
