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


@lru_cache(maxsize=16)
def _zone(name: str) -> ZoneInfo:
    return ZoneInfo(name)


def utc(*parts: int) -> int:
    """Epoch ms of a UTC date-time."""
    return int(datetime(*parts, tzinfo=UTC).timestamp() * 1000)  # type: ignore[misc, arg-type]


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
        # Often right at a transition: a search from its last second is its own edge case.
        shift = draw(st.one_of(st.integers(-2, 1), st.integers(-spread_s, spread_s)))
        return (base + shift) * 1000 + draw(st.integers(0, 999))
    low = int(datetime(YEARS[0], 1, 1, tzinfo=UTC).timestamp() * 1000)
    high = int(datetime(YEARS[-1], 12, 1, tzinfo=UTC).timestamp() * 1000)
    return draw(st.integers(low, high))


_EPOCH = datetime(1970, 1, 1)


@lru_cache(maxsize=65_536)
def _quarter_offset(zone: ZoneInfo, quarter: int) -> int:
    return offset(zone, quarter * 900)


def wall(zone: ZoneInfo, second: int) -> datetime:
    """The naive local reading of an instant (the offset read once per UTC quarter hour: every
    transition of the zones in ZONES falls on one)."""
    return _EPOCH + timedelta(seconds=second + _quarter_offset(zone, second // 900))


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


def dst_fires(cron: SimpleCron, zone: ZoneInfo, gap: str, repeat: str, second: int) -> bool:
    """Whether a cron fires at instant ``second`` under the DST rules (gap "skip"/"next_valid",
    repeat "first"/"second"/"both"), straight from their definitions."""
    if cron.matches(wall(zone, second)):
        shown_twice, fold = occurrence(zone, second)
        if not shown_twice or repeat == "both" or (fold == 0) == (repeat == "first"):
            return True
    at_transition = second in transition_set(zone.key)
    return at_transition and gap == "next_valid" and any(cron.matches(w) for w in gap_walls(zone, second))


def cron_instants(
    cron: SimpleCron, zone: ZoneInfo, gap: str, repeat: str, after: int, end: int
) -> Iterator[int]:
    """The instants (epoch s) in (after, end) at which the cron fires, by a minute walk."""
    start = (after // 60 + 1) * 60
    return (s for s in range(start, end, 60) if dst_fires(cron, zone, gap, repeat, s))


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


# -- calendars ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reference:
    """A generated calendar spec and a predicate for the wall times it names."""

    spec: dict[str, object]
    names: Callable[[int, datetime], bool]

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    @property
    def zone(self) -> ZoneInfo:
        return _zone(str(self.spec["zone"]))

    def excluded_at(self, second: int, local: datetime) -> bool:
        return self.names(second, local) != bool(self.spec.get("invert"))

    def excluded(self, second: int) -> bool:
        return self.excluded_at(second, wall(self.zone, second))


def _clock(minute_of_day: int) -> str:
    return f"{minute_of_day // 60:02d}:{minute_of_day % 60:02d}"


@st.composite
def references(draw: st.DrawFn, around: date, name: str) -> Reference:
    zone = draw(st.sampled_from(ZONES))
    near = st.integers(-4, 6).map(lambda d: around + timedelta(days=d))
    dates = draw(st.lists(near, max_size=4))
    ranges = [sorted((draw(near), draw(near))) for _ in range(draw(st.integers(0, 2)))]
    use_workdays = draw(st.booleans())
    workdays = (
        sorted(set(draw(st.lists(st.integers(1, 7), min_size=1, max_size=6)))) if use_workdays else None
    )
    edges = st.one_of(st.sampled_from([0, 30, 60, 90, 120, 150, 180, 1380, 1440]), st.integers(0, 1440))
    windows: list[tuple[int, int]] = []
    for _ in range(draw(st.integers(0, 3))):
        start, end = draw(edges) % 1440, draw(edges)
        if start != end % 1440:
            windows.append((start, end))
    cron_hours = draw(st.one_of(st.none(), st.sets(st.integers(0, 23), min_size=1, max_size=3)))
    cron_minutes = draw(st.sets(st.sampled_from([0, 15, 29, 30, 45, 59]), min_size=1, max_size=3))
    periods: list[tuple[datetime, datetime]] = []
    midnight = datetime(around.year, around.month, around.day, tzinfo=UTC)
    for _ in range(draw(st.integers(0, 2))):
        begin = midnight + timedelta(minutes=draw(st.integers(-6000, 9000)))
        periods.append((begin, begin + timedelta(minutes=draw(st.integers(1, 3000)))))
    invert = not use_workdays and draw(st.booleans())
    spec: dict[str, object] = {
        "name": name,
        "zone": zone,
        "invert": invert,
        "dates": [d.isoformat() for d in dates],
        "date_ranges": [{"start": a.isoformat(), "end": b.isoformat()} for a, b in ranges],
        "day_windows": [{"start": _clock(a), "end": _clock(b)} for a, b in windows],
        "periods": [{"start": a.isoformat(), "end": b.isoformat()} for a, b in periods],
    }
    if workdays is not None:
        spec["workdays"] = [["MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN"][d - 1] for d in workdays]
    if cron_hours is not None:
        spec["cron"] = (
            f"* {','.join(map(str, sorted(cron_minutes)))} {','.join(map(str, sorted(cron_hours)))} * * ?"
        )
    listed = bool(dates or ranges or windows or periods or cron_hours is not None)
    if invert and not listed:
        spec["invert"] = invert = False

    period_seconds = [(int(a.timestamp()), int(b.timestamp())) for a, b in periods]

    def names(second: int, local: datetime) -> bool:
        day = local.date()
        minute = local.hour * 60 + local.minute
        return (
            day in dates
            or any(a <= day <= b for a, b in ranges)
            or (workdays is not None and day.isoweekday() not in workdays)
            or any((a <= minute < b) if a < b else (minute >= a or minute < b) for a, b in windows)
            or (cron_hours is not None and local.hour in cron_hours and local.minute in cron_minutes)
            or any(a <= second < b for a, b in period_seconds)
        )

    return Reference(spec, names)
