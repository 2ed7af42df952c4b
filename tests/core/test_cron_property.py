"""Property tests: random expressions against an independent brute-force matcher.

Each generated field carries its own predicate, written from the Quartz rules directly (not from the
engine's tables). A second "fires" at instant s when its wall time in the zone matches and s is that
wall time's last occurrence (Quartz reads a wall time repeated by a fall-back as standard time; a wall
time that does not exist never comes out of a UTC->local conversion). The engine's answer must fire,
lie strictly after t, and no second in between may fire.
"""

from __future__ import annotations

import calendar
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobring.core.cron import CronExpression

ZONES = ["UTC", "America/New_York", "Europe/Berlin", "Australia/Lord_Howe", "Asia/Kolkata"]
MONTH_NAMES = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
DAY_NAMES = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]

ValuePredicate = Callable[[int], bool]
DayPredicate = Callable[[int, int, int], bool]


@dataclass(frozen=True)
class Field:
    text: str
    matches: ValuePredicate


def quartz_weekday(year: int, month: int, day: int) -> int:
    """1 = Sunday .. 7 = Saturday."""
    return date(year, month, day).isoweekday() % 7 + 1


@lru_cache(maxsize=4096)
def last_day(year: int, month: int) -> int:
    return calendar.monthrange(year, month)[1]


@lru_cache(maxsize=65536)
def nearest_weekday(year: int, month: int, base: int) -> int | None:
    """The Monday-Friday of the month closest to ``base`` (ties cannot happen)."""
    last = last_day(year, month)
    if not 1 <= base <= last:
        return None
    weekdays = [d for d in range(1, last + 1) if 2 <= quartz_weekday(year, month, d) <= 6]
    return min(weekdays, key=lambda d: abs(d - base))


def _name(draw: st.DrawFn, value: int, names: list[str] | None, low: int) -> str:
    if names is not None and draw(st.booleans()):
        return names[value - low] if draw(st.booleans()) else names[value - low].lower()
    return str(value)


@st.composite
def plain_item(draw: st.DrawFn, low: int, high: int, max_step: int, names: list[str] | None = None) -> Field:
    size = high - low + 1
    kind = draw(st.sampled_from(["all", "all_step", "single", "range", "range_step", "start_step"]))
    a = draw(st.integers(low, high))
    b = draw(st.integers(low, high))
    n = draw(st.integers(1, max_step))
    an, bn = _name(draw, a, names, low), _name(draw, b, names, low)
    if kind == "all":
        return Field("*", lambda v: True)
    if kind == "all_step":
        return Field(f"*/{n}", lambda v: (v - low) % n == 0)
    if kind == "single":
        return Field(an, lambda v: v == a)
    if kind == "start_step":
        return Field(f"{an}/{n}", lambda v: v >= a and (v - a) % n == 0)
    step = 1 if kind == "range" else n
    text = f"{an}-{bn}" if kind == "range" else f"{an}-{bn}/{n}"

    # Ranges wrap past the field's end (Quartz); a step counts from the start across the wrap.
    def in_range(v: int) -> bool:
        distance = (v - a) % size
        return distance <= (b - a) % size and distance % step == 0

    return Field(text, in_range)


@st.composite
def plain_field(draw: st.DrawFn, low: int, high: int, max_step: int, names: list[str] | None = None) -> Field:
    items = draw(st.lists(plain_item(low, high, max_step, names), min_size=1, max_size=3))
    predicates = [item.matches for item in items]
    return Field(",".join(item.text for item in items), lambda v: any(p(v) for p in predicates))


@dataclass(frozen=True)
class DayRule:
    dom_text: str
    dow_text: str
    matches: DayPredicate


@st.composite
def day_rule(draw: st.DrawFn) -> DayRule:
    kind = draw(st.sampled_from(["dom", "dom", "dow", "dow", "L", "L-n", "nW", "LW", "nL", "n#k"]))
    if kind == "dom":
        f = draw(plain_field(1, 31, 31))
        return DayRule(f.text, "?", lambda y, m, d: f.matches(d))
    if kind == "dow":
        f = draw(plain_field(1, 7, 7, DAY_NAMES))
        return DayRule("?", f.text, lambda y, m, d: f.matches(quartz_weekday(y, m, d)))
    if kind == "L":
        return DayRule("L", "?", lambda y, m, d: d == last_day(y, m))
    if kind == "L-n":
        k = draw(st.integers(0, 30))
        return DayRule(f"L-{k}", "?", lambda y, m, d: d == last_day(y, m) - k)
    if kind == "nW":
        base = draw(st.integers(1, 31))
        return DayRule(f"{base}W", "?", lambda y, m, d: d == nearest_weekday(y, m, base))
    if kind == "LW":
        return DayRule("LW", "?", lambda y, m, d: d == nearest_weekday(y, m, last_day(y, m)))
    weekday = draw(st.integers(1, 7))
    if kind == "nL":
        return DayRule(
            "?",
            f"{weekday}L",
            lambda y, m, d: quartz_weekday(y, m, d) == weekday and d + 7 > last_day(y, m),
        )
    nth = draw(st.integers(1, 5))
    return DayRule(
        "?",
        f"{weekday}#{nth}",
        lambda y, m, d: quartz_weekday(y, m, d) == weekday and (d - 1) // 7 + 1 == nth,
    )


@dataclass(frozen=True)
class Generated:
    text: str
    seconds: Field
    minutes: Field
    hours: Field
    days: DayRule
    months: Field
    years: Field

    # Memo of the predicates' answers per value / per date (the brute force scans many seconds).
    _memo: dict[tuple[str, int, int, int], bool] = field(default_factory=dict, compare=False)

    def _field(self, name: str, f: Field, value: int) -> bool:
        key = (name, value, 0, 0)
        if key not in self._memo:
            self._memo[key] = f.matches(value)
        return self._memo[key]

    def _date(self, year: int, month: int, day: int) -> bool:
        key = ("date", year, month, day)
        if key not in self._memo:
            self._memo[key] = (
                self.months.matches(month)
                and self.years.matches(year)
                and self.days.matches(year, month, day)
            )
        return self._memo[key]

    def matches_wall(self, wall: datetime) -> bool:
        return (
            self._field("s", self.seconds, wall.second)
            and self._field("m", self.minutes, wall.minute)
            and self._field("h", self.hours, wall.hour)
            and self._date(wall.year, wall.month, wall.day)
        )


@st.composite
def year_field(draw: st.DrawFn) -> Field:
    kind = draw(st.sampled_from(["none", "none", "*", "range", "past"]))
    if kind == "none":
        return Field("", lambda v: 1970 <= v <= 2099)
    if kind == "*":
        return Field("*", lambda v: 1970 <= v <= 2099)
    if kind == "past":
        return Field("1999", lambda v: v == 1999)
    a = draw(st.integers(2000, 2045))
    b = draw(st.integers(a, 2050))
    return Field(f"{a}-{b}", lambda v: a <= v <= b)


@st.composite
def expressions(draw: st.DrawFn, time_of_day: tuple[Field, Field, Field] | None = None) -> Generated:
    if time_of_day is None:
        seconds = draw(plain_field(0, 59, 59))
        minutes = draw(plain_field(0, 59, 59))
        hours = draw(plain_field(0, 23, 23))
    else:
        seconds, minutes, hours = time_of_day
    days = draw(day_rule())
    months = draw(plain_field(1, 12, 12, MONTH_NAMES))
    years = draw(year_field())
    parts = [seconds.text, minutes.text, hours.text, days.dom_text, months.text, days.dow_text, years.text]
    return Generated(" ".join(p for p in parts if p), seconds, minutes, hours, days, months, years)


# Instants near DST transitions are where the engine is most likely to go wrong, so sample them often.
TRANSITIONS = [
    datetime(2021, 3, 14, 7, tzinfo=UTC),  # New York spring forward
    datetime(2021, 11, 7, 6, tzinfo=UTC),  # New York fall back
    datetime(2021, 3, 28, 1, tzinfo=UTC),  # Berlin spring forward
    datetime(2021, 10, 31, 1, tzinfo=UTC),  # Berlin fall back
    datetime(2021, 4, 3, 15, tzinfo=UTC),  # Lord Howe fall back (30 min)
    datetime(2021, 10, 2, 15, 30, tzinfo=UTC),  # Lord Howe spring forward (30 min)
]


@st.composite
def start_instants(draw: st.DrawFn) -> datetime:
    if draw(st.booleans()):
        base = draw(st.sampled_from(TRANSITIONS))
        return base + timedelta(seconds=draw(st.integers(-3 * 3600, 3 * 3600)))
    seconds = draw(st.integers(int(datetime(1995, 1, 1, tzinfo=UTC).timestamp()), 2_300_000_000))
    return datetime.fromtimestamp(seconds, UTC) + timedelta(microseconds=draw(st.integers(0, 999_999)))


def fires_at(generated: Generated, zone: ZoneInfo, instant: int) -> bool:
    wall = datetime.fromtimestamp(instant, zone)
    last_occurrence = wall.fold == 1 or wall.replace(fold=1).utcoffset() == wall.utcoffset()
    return last_occurrence and generated.matches_wall(wall.replace(tzinfo=None))


WINDOW_SECONDS = 1800


@pytest.mark.timeout(240)  # generous: the shared 2-core machine can be heavily loaded
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expressions(), st.sampled_from(ZONES), start_instants())
def test_next_fire_matches_and_skips_nothing(generated: Generated, zone_name: str, t: datetime) -> None:
    zone = ZoneInfo(zone_name)
    cron = CronExpression(generated.text, zone)
    result = cron.next_after(t)
    floor_t = int(t.replace(microsecond=0).timestamp())
    if result is not None:
        assert result > t
        assert result.microsecond == 0
        assert fires_at(generated, zone, int(result.timestamp())), (generated.text, result)
        assert cron.next_after_ms(int(t.timestamp() * 1000)) == int(result.timestamp()) * 1000
    end = (
        floor_t + WINDOW_SECONDS if result is None else min(int(result.timestamp()), floor_t + WINDOW_SECONDS)
    )
    # Started inside the first pass of a repeated hour, Quartz walks the wall clock on from t's
    # wall time: the second pass's earlier wall times are behind it and never fire.
    start_wall = datetime.fromtimestamp(floor_t, zone)
    in_first_pass = start_wall.fold == 0 and start_wall.replace(fold=1).utcoffset() != start_wall.utcoffset()
    behind = start_wall.replace(tzinfo=None) if in_first_pass else None
    skipped = [
        s for s in range(floor_t + 1, end)
        if fires_at(generated, zone, s)
        and (behind is None or datetime.fromtimestamp(s, zone).replace(tzinfo=None) > behind)
    ]
    assert not skipped, (generated.text, zone_name, t, result, datetime.fromtimestamp(skipped[0], zone))


FIXED_TIME = st.tuples(
    st.integers(0, 59).map(lambda v: Field(str(v), lambda x: x == v)),
    st.integers(0, 59).map(lambda v: Field(str(v), lambda x: x == v)),
    st.integers(0, 23).map(lambda v: Field(str(v), lambda x: x == v)),
)


def first_fire_by_days(generated: Generated, zone: ZoneInfo, t: datetime, days: int) -> datetime | None:
    """Walk the local calendar day by day, for expressions with one fixed time of day."""
    hour, minute, second = (
        next(v for v in range(24) if generated.hours.matches(v)),
        next(v for v in range(60) if generated.minutes.matches(v)),
        next(v for v in range(60) if generated.seconds.matches(v)),
    )
    day = t.astimezone(zone).date() - timedelta(days=1)
    for _ in range(days):
        naive = datetime(day.year, day.month, day.day, hour, minute, second)
        local = naive.replace(tzinfo=zone, fold=1)  # a repeated wall time fires at its second showing
        exists = local.astimezone(UTC).astimezone(zone).replace(tzinfo=None) == naive
        if exists and local > t and generated.matches_wall(naive):
            return local
        day += timedelta(days=1)
    return None


@pytest.mark.timeout(240)
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), st.sampled_from(ZONES), start_instants())
def test_day_level_rules_against_a_calendar_walk(data: st.DataObject, zone_name: str, t: datetime) -> None:
    generated = data.draw(FIXED_TIME.flatmap(lambda tod: expressions(time_of_day=tod)))
    zone = ZoneInfo(zone_name)
    horizon_days = 500
    expected = first_fire_by_days(generated, zone, t, horizon_days)
    result = CronExpression(generated.text, zone).next_after(t)
    if expected is not None:
        assert result is not None and result.timestamp() == expected.timestamp(), (generated.text, t)
    else:
        horizon = t + timedelta(days=horizon_days - 2)
        assert result is None or result > horizon, (generated.text, t, result)
