"""Brute-force references for the timing tests: written from the rules, not from the engine.

Everything here steps through time minute by minute with ``datetime`` and ``zoneinfo`` only
(no jobring code), so the tests compare the engine's jumps with a plain walk.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo

from hypothesis import strategies as st

# UTC; New York (02:00 transitions); London (01:00 UTC transitions); Lord Howe (30-minute DST);
# Santiago (transitions at local midnight, so some days have no 00:00).
ZONES = ["UTC", "America/New_York", "Europe/London", "Australia/Lord_Howe", "America/Santiago"]
YEARS = range(2024, 2028)
MINUTE = 60


def offset(zone: ZoneInfo, second: int) -> int:
    delta = datetime.fromtimestamp(second, zone).utcoffset()
    assert delta is not None
    return int(delta.total_seconds())


@lru_cache(maxsize=64)
def transitions(zone_name: str) -> tuple[int, ...]:
    """Instants (epoch s) where the zone's offset changes in YEARS, found hour by hour then minute
    by minute (every offset change of these zones falls on a whole minute)."""
    zone = ZoneInfo(zone_name)
    start = int(datetime(YEARS[0], 1, 1, tzinfo=UTC).timestamp())
    end = int(datetime(YEARS[-1] + 1, 1, 1, tzinfo=UTC).timestamp())
    found = []
    for hour in range(start, end, 3600):
        if offset(zone, hour) != offset(zone, hour + 3600):
            minute = next(
                m for m in range(hour + 60, hour + 3601, 60) if offset(zone, m) != offset(zone, hour)
            )
            found.append(minute)
    return tuple(found)


@lru_cache(maxsize=64)
def transition_set(zone_name: str) -> frozenset[int]:
    return frozenset(transitions(zone_name))


@st.composite
def instants_ms(draw: st.DrawFn, zone_name: str, spread_s: int = 6 * 3600) -> int:
    """An instant in YEARS, often within ``spread_s`` of one of the zone's transitions."""
    moments = transitions(zone_name)
    if moments and draw(st.integers(0, 2)) > 0:
        base = draw(st.sampled_from(moments))
        return (base + draw(st.integers(-spread_s, spread_s))) * 1000 + draw(st.integers(0, 999))
    low = int(datetime(YEARS[0], 1, 1, tzinfo=UTC).timestamp() * 1000)
    high = int(datetime(YEARS[-1], 12, 1, tzinfo=UTC).timestamp() * 1000)
    return draw(st.integers(low, high))


def wall(zone: ZoneInfo, second: int) -> datetime:
    """The naive local reading of an instant."""
    return datetime.fromtimestamp(second, zone).replace(tzinfo=None)


def minute_walls(zone: ZoneInfo, start: int, end: int) -> Iterator[tuple[int, datetime]]:
    """(instant, naive local reading) for each whole minute in [start, end) (epoch seconds).

    The offset is read once per UTC quarter hour: every transition of the zones in ZONES falls on
    a quarter hour, so that is exact and keeps the walk cheap."""
    second = start
    while second < end:
        block_end = min(end, (second // 900 + 1) * 900)
        shift = timedelta(seconds=offset(zone, second))
        base = datetime(1970, 1, 1) + shift
        while second < block_end:
            yield second, base + timedelta(seconds=second)
            second += 60


def occurrence(zone: ZoneInfo, second: int) -> tuple[bool, int]:
    """(is the wall time shown twice, 0 for its first showing / 1 for its second)."""
    local = datetime.fromtimestamp(second, zone)
    other = local.replace(fold=1 - local.fold)
    return other.utcoffset() != local.utcoffset(), local.fold


def gap_walls(zone: ZoneInfo, second: int) -> list[datetime]:
    """The wall minutes skipped by a spring-forward transition at exactly ``second`` (else [])."""
    before, after = offset(zone, second - 1), offset(zone, second)
    if after <= before:
        return []
    first = wall(zone, second) - timedelta(seconds=after - before)
    return [first + timedelta(minutes=i) for i in range((after - before) // 60)]


@dataclass(frozen=True)
class SimpleCron:
    """A cron expression with second 0 and a Python predicate for its wall minutes."""

    text: str
    minutes: frozenset[int]
    hours: frozenset[int]
    weekdays: frozenset[int] | None  # Quartz numbering, 1 = Sunday

    def matches(self, value: datetime) -> bool:
        if value.second != 0 or value.minute not in self.minutes or value.hour not in self.hours:
            return False
        return self.weekdays is None or value.isoweekday() % 7 + 1 in self.weekdays


def _field(draw: st.DrawFn, low: int, high: int, hot: list[int]) -> tuple[str, frozenset[int]]:
    kind = draw(st.sampled_from(["*", "step", "one", "list", "range"]))
    if kind == "*":
        return "*", frozenset(range(low, high + 1))
    if kind == "step":
        step = draw(st.integers(2, 30 if high == 59 else 6))
        return f"*/{step}", frozenset(range(low, high + 1, step))
    pick = st.one_of(st.sampled_from(hot), st.integers(low, high))
    if kind == "one":
        value = draw(pick)
        return str(value), frozenset({value})
    if kind == "list":
        values = sorted(set(draw(st.lists(pick, min_size=2, max_size=4))))
        return ",".join(map(str, values)), frozenset(values)
    a, b = sorted((draw(pick), draw(pick)))
    return f"{a}-{b}", frozenset(range(a, b + 1))


@st.composite
def simple_crons(draw: st.DrawFn) -> SimpleCron:
    """Crons that fire on whole minutes, biased to the hours where transitions happen."""
    minutes_text, minutes = _field(draw, 0, 59, [0, 15, 30, 45, 59])
    hours_text, hours = _field(draw, 0, 23, [0, 1, 2, 3, 23])
    if draw(st.integers(0, 3)) == 0:
        days = frozenset(draw(st.lists(st.integers(1, 7), min_size=1, max_size=3)))
        text = f"0 {minutes_text} {hours_text} ? * {','.join(map(str, sorted(days)))}"
        return SimpleCron(text, minutes, hours, days)
    return SimpleCron(f"0 {minutes_text} {hours_text} * * ?", minutes, hours, None)


def first_minute(predicate: Callable[[int], bool], after_ms: int, window_s: int) -> tuple[int | None, int]:
    """The first whole-minute instant (ms) strictly after ``after_ms`` within ``window_s`` that
    satisfies ``predicate`` (given epoch seconds), and the end of the window scanned (ms)."""
    second = (after_ms // 60_000 + 1) * 60
    end = second + window_s
    while second < end:
        if predicate(second):
            return second * 1000, end * 1000
        second += MINUTE
    return None, end * 1000


def local_date(zone: ZoneInfo, second: int) -> date:
    return datetime.fromtimestamp(second, zone).date()
