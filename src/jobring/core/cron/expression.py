"""Next-fire computation for parsed Quartz cron expressions.

The search works on wall-clock fields (year, month, day, hour, minute, second)
of the expression's zone and jumps field by field with carry, so one call costs
a handful of table lookups however far away the next fire time is. Wall-clock
candidates are then mapped to instants; see the package docstring for the
daylight-saving rules.
"""

from __future__ import annotations

import calendar
from bisect import bisect_left
from datetime import UTC, date, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from jobring.core.cron.parser import (
    MAX_YEAR,
    MIN_YEAR,
    CronFields,
    DayOfMonthRule,
    DayOfWeekRule,
    parse_fields,
)

_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
_DAY = 86_400
# Wall-clock seconds (local epoch) of 2100-01-01T00:00, the first instant past the year range.
_END_OF_RANGE = (date(MAX_YEAR + 1, 1, 1).toordinal() - _EPOCH_ORDINAL) * _DAY
_START_OF_RANGE = (date(MIN_YEAR, 1, 1).toordinal() - _EPOCH_ORDINAL) * _DAY

_UTC_ZONE_NAMES = frozenset(
    {"UTC", "Etc/UTC", "Etc/UCT", "UCT", "Etc/Universal", "Universal", "Etc/Zulu", "Zulu"}
)

_MAX_TRANSITION_ROUNDS = 2 * (MAX_YEAR - MIN_YEAR + 2) + 4

Wall = tuple[int, int, int, int, int, int]


def resolve_zone(tz: str | tzinfo) -> tzinfo:
    """A ``ZoneInfo`` for a zone name (or the given tzinfo); ValueError for unknown zones."""
    if isinstance(tz, tzinfo):
        return tz
    if not isinstance(tz, str) or not tz.strip():
        raise ValueError(f"time zone must be a non-empty IANA zone name, got {tz!r}")
    try:
        return ZoneInfo(tz.strip())
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"unknown time zone {tz!r}") from exc


def _next_table(values: frozenset[int], size: int, base: int = 0) -> tuple[int, ...]:
    """table[v - base] = smallest allowed value >= v, or -1; one slot past the range for carries."""
    table = [-1] * (size + 1)
    previous = 0
    for v in sorted(values):
        table[previous : v - base + 1] = [v] * (v - base + 1 - previous)
        previous = v - base + 1
    return tuple(table)


def _quartz_weekday(year: int, month: int, day: int) -> int:
    """1 = Sunday .. 7 = Saturday."""
    return (date(year, month, day).weekday() + 1) % 7 + 1


def _nearest_weekday(year: int, month: int, day: int, last: int) -> int:
    """Quartz's W rule: the weekday nearest to ``day`` without leaving the month."""
    weekday = _quartz_weekday(year, month, day)
    if weekday == 7:  # Saturday: Friday before, or Monday the 3rd when the 1st is a Saturday
        return 3 if day == 1 else day - 1
    if weekday == 1:  # Sunday: Monday after, or Friday before when it is the month's last day
        return day - 2 if day == last else day + 1
    return day


def _days_by_month_rule(rule: DayOfMonthRule, year: int, month: int, last: int) -> set[int]:
    days = {d for d in rule.days if d <= last}
    days.update(last - off for off in rule.last_day_offsets if last - off >= 1)
    days.update(_nearest_weekday(year, month, d, last) for d in rule.nearest_weekdays if d <= last)
    days.update(
        _nearest_weekday(year, month, last - off, last)
        for off in rule.nearest_weekday_last_offsets
        if last - off >= 1
    )
    return days


def _days_by_week_rule(rule: DayOfWeekRule, year: int, month: int, last: int) -> set[int]:
    first_weekday = _quartz_weekday(year, month, 1)
    if rule.nth_in_month is not None:
        weekday, nth = rule.nth_in_month
        day = 1 + (weekday - first_weekday) % 7 + 7 * (nth - 1)
        return {day} if day <= last else set()
    if rule.last_in_month is not None:
        last_weekday = (first_weekday + last - 2) % 7 + 1
        return {last - (last_weekday - rule.last_in_month) % 7}
    return {d for d in range(1, last + 1) if (first_weekday + d - 2) % 7 + 1 in rule.days}


class CronExpression:
    """A Quartz cron expression evaluated in one time zone.

    ``CronExpression("0 15 10 ? * MON-FRI", "Europe/Berlin").next_after(t)``.
    Raises ``CronParseError`` (a ValueError) for invalid expressions and
    ValueError for unknown zones.
    """

    __slots__ = (
        "_day_cache",
        "_days_of_month",
        "_days_of_week",
        "_hours",
        "_minutes",
        "_months",
        "_seconds",
        "_utc",
        "_years",
        "expression",
        "fields",
        "zone",
    )

    def __init__(self, expression: str, tz: str | tzinfo = "UTC") -> None:
        self.zone: tzinfo = resolve_zone(tz)
        self.fields: CronFields = parse_fields(expression)
        self.expression: str = " ".join(expression.split())
        # Zones that are always UTC skip the offset lookups entirely.
        self._utc = self.zone is UTC or getattr(self.zone, "key", None) in _UTC_ZONE_NAMES
        self._seconds = _next_table(self.fields.seconds, 60)
        self._minutes = _next_table(self.fields.minutes, 60)
        self._hours = _next_table(self.fields.hours, 24)
        self._months = _next_table(self.fields.months, 13)
        self._years = _next_table(self.fields.years, MAX_YEAR - MIN_YEAR + 1, MIN_YEAR)
        self._days_of_month = self.fields.day_of_month
        self._days_of_week = self.fields.day_of_week
        self._day_cache: dict[int, tuple[int, ...]] = {}

    def __repr__(self) -> str:
        return f"CronExpression({self.expression!r}, {str(self.zone)!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CronExpression):
            return NotImplemented
        return self.fields == other.fields and str(self.zone) == str(other.zone)

    def __hash__(self) -> int:
        return hash((self.fields, str(self.zone)))

    # -- public API -----------------------------------------------------------------------------

    def next_after(self, t: datetime) -> datetime | None:
        """First fire time strictly after ``t`` (aware), in the expression's zone; None if none."""
        if t.tzinfo is None or t.utcoffset() is None:
            raise ValueError("next_after needs a timezone-aware datetime")
        after = t.replace(microsecond=0).timestamp()
        fire = self._next_epoch_second(int(after))
        return None if fire is None else datetime.fromtimestamp(fire, self.zone)

    def next_after_ms(self, epoch_ms: int) -> int | None:
        """First fire time strictly after ``epoch_ms`` (UTC epoch milliseconds), as epoch ms; or None."""
        fire = self._next_epoch_second(epoch_ms // 1000)
        return None if fire is None else fire * 1000

    def days_in_month(self, year: int, month: int) -> tuple[int, ...]:
        """The days of ``month`` that the day-of-month / day-of-week fields select, ascending."""
        key = year * 16 + month
        days = self._day_cache.get(key)
        if days is None:
            last = calendar.monthrange(year, month)[1]
            if self._days_of_month is not None:
                chosen = _days_by_month_rule(self._days_of_month, year, month, last)
            else:
                assert self._days_of_week is not None
                chosen = _days_by_week_rule(self._days_of_week, year, month, last)
            days = tuple(sorted(chosen))
            self._day_cache[key] = days
        return days

    # -- search -----------------------------------------------------------------------------------

    def _first_month(self, year: int, month: int) -> tuple[int, int] | None:
        """First allowed (year, month) at or after the given one (month may be 13)."""
        while year <= MAX_YEAR:
            found = self._years[year - MIN_YEAR]
            if found < 0:
                return None
            if found != year:
                year, month = found, 1
            found = self._months[month]
            if found >= 0:
                return year, found
            year, month = year + 1, 1
        return None

    def _next_wall(self, year: int, month: int, day: int, hour: int, minute: int, second: int) -> Wall | None:
        """First matching wall-clock time at or after the given fields (which may overflow by one)."""
        if year < MIN_YEAR:
            year, month, day, hour, minute, second = MIN_YEAR, 1, 1, 0, 0, 0
        hours, minutes, seconds = self._hours, self._minutes, self._seconds
        while True:
            first = self._first_month(year, month)
            if first is None:
                return None
            if first != (year, month):
                (year, month), day, hour, minute, second = first, 1, 0, 0, 0
            days = self.days_in_month(year, month)
            index = bisect_left(days, day)
            if index == len(days):
                month, day, hour, minute, second = month + 1, 1, 0, 0, 0
                continue
            if days[index] != day:
                day, hour, minute, second = days[index], 0, 0, 0
            found = hours[hour]
            if found < 0:
                day, hour, minute, second = day + 1, 0, 0, 0
                continue
            if found != hour:
                hour, minute, second = found, 0, 0
            found = minutes[minute]
            if found < 0:
                hour, minute, second = hour + 1, 0, 0
                continue
            if found != minute:
                minute, second = found, 0
            found = seconds[second]
            if found < 0:
                minute, second = minute + 1, 0
                continue
            return year, month, day, hour, minute, found

    def _next_wall_from_local(self, local: int) -> Wall | None:
        if local >= _END_OF_RANGE:
            return None
        local = max(local, _START_OF_RANGE)
        days, rest = divmod(local, _DAY)
        d = date.fromordinal(days + _EPOCH_ORDINAL)
        hour, rest = divmod(rest, 3600)
        minute, second = divmod(rest, 60)
        return self._next_wall(d.year, d.month, d.day, hour, minute, second)

    def _next_epoch_second(self, after: int) -> int | None:
        start = after + 1
        if self._utc:
            wall = self._next_wall_from_local(start)
            return None if wall is None else _local_seconds(wall)
        zone = self.zone
        if start + 2 * _DAY >= _END_OF_RANGE or start - 2 * _DAY < _START_OF_RANGE:
            # Outside the year range; only the clamping/None logic applies, no zone lookups.
            wall = self._next_wall_from_local(start)
        else:
            now = datetime.fromtimestamp(start, zone)
            wall = self._next_wall(now.year, now.month, now.day, now.hour, now.minute, now.second)
        # Each round moves past one DST transition; at most two per year within the year range.
        for _ in range(_MAX_TRANSITION_ROUNDS):
            if wall is None:
                return None
            year, month, day, hour, minute, second = wall
            offset_first = _seconds(zone.utcoffset(datetime(year, month, day, hour, minute, second)))
            offset_second = _seconds(zone.utcoffset(datetime(year, month, day, hour, minute, second, fold=1)))
            local = _local_seconds(wall)
            if offset_second > offset_first:
                # Wall time in a spring-forward gap: it does not exist, so it never fires.
                # Resume at the first wall time after the gap.
                transition = transition_instant(zone, local - offset_second, local - offset_first)
                wall = self._next_wall_from_local(transition + offset_second)
                continue
            # A wall time repeated by a fall-back fires once, at its second (standard-time)
            # occurrence: Quartz resolves ambiguous local times through java.util.Calendar, which
            # reads them as standard time. Elsewhere both offsets are equal.
            # ``start`` is at or before this occurrence, so it is always after ``after``.
            return local - offset_second
        raise RuntimeError(f"cron search for {self.expression!r} did not settle after {after}")


_OFFSET_SECONDS: dict[timedelta, int] = {}


def _seconds(offset: timedelta | None) -> int:
    if offset is None:
        return 0
    seconds = _OFFSET_SECONDS.get(offset)
    if seconds is None:
        # Zones have few distinct offsets; memoising avoids timedelta arithmetic on the hot path.
        seconds = _OFFSET_SECONDS.setdefault(offset, offset.days * _DAY + offset.seconds)
    return seconds


def _offset_at(zone: tzinfo, instant: int) -> int:
    return _seconds(datetime.fromtimestamp(instant, zone).utcoffset())


def _local_seconds(wall: Wall) -> int:
    year, month, day, hour, minute, second = wall
    return (date(year, month, day).toordinal() - _EPOCH_ORDINAL) * _DAY + hour * 3600 + minute * 60 + second


def transition_instant(zone: tzinfo, before: int, after: int) -> int:
    """Smallest instant in (before, after] whose UTC offset equals the offset at ``after``."""
    target = _offset_at(zone, after)
    low, high = before, after
    while high - low > 1:
        middle = (low + high) // 2
        if _offset_at(zone, middle) == target:
            high = middle
        else:
            low = middle
    return high
