"""The wall-clock rules a calendar is made of: dates, date ranges, workdays, day windows, cron.

Each rule names a set of wall times (local epoch seconds, see :mod:`.zones`) and answers three
questions: does it name this wall time (and through which part), which is the first named wall
time at or after this one, and which is the first one at or after it that it does not name.
"""

from __future__ import annotations

import calendar as _calendar
from abc import ABC, abstractmethod
from bisect import bisect_right
from collections.abc import Sequence
from datetime import date

from jobring.core.cron import MAX_YEAR, CronExpression
from jobring.core.timing.zones import DAY

_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
_DAY_NAMES = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
# Stepping over wholly named days or months of a cron rule ends by 2100 (past the cron range).
_MAX_CRON_STEPS = 12 * (MAX_YEAR - 1970 + 2) + 400


def _day(wall: int) -> int:
    """The day ordinal (``date.toordinal``) of a wall time."""
    return wall // DAY + _EPOCH_ORDINAL


def _day_start(ordinal: int) -> int:
    return (ordinal - _EPOCH_ORDINAL) * DAY


def _iso_weekday(ordinal: int) -> int:
    return (ordinal - 1) % 7 + 1  # day 1 (0001-01-01) was a Monday


class WallRule(ABC):
    """A set of wall times."""

    @abstractmethod
    def match(self, wall: int) -> str | None:
        """The part naming ``wall`` (``dates[3] (2026-10-01)``), or None."""

    @abstractmethod
    def next_match(self, wall: int) -> int | None:
        """The first named wall time at or after ``wall``, or None."""

    @abstractmethod
    def match_end(self, wall: int) -> int | None:
        """The first wall time at or after ``wall`` that is not named; None if none is."""


class DaysRule(WallRule):
    """Whole days: inclusive ranges of day ordinals, each with its label."""

    def __init__(self, ranges: Sequence[tuple[int, int, str]]) -> None:
        self._labelled = sorted(ranges)
        merged: list[list[int]] = []
        for first, last, _ in self._labelled:
            if merged and first <= merged[-1][1] + 1:
                merged[-1][1] = max(merged[-1][1], last)
            else:
                merged.append([first, last])
        self._starts = [first for first, _ in merged]
        self._ends = [last for _, last in merged]

    def _index(self, ordinal: int) -> int | None:
        index = bisect_right(self._starts, ordinal) - 1
        return index if index >= 0 and ordinal <= self._ends[index] else None

    def match(self, wall: int) -> str | None:
        ordinal = _day(wall)
        if self._index(ordinal) is None:
            return None
        return next(label for first, last, label in self._labelled if first <= ordinal <= last)

    def next_match(self, wall: int) -> int | None:
        ordinal = _day(wall)
        if self._index(ordinal) is not None:
            return wall
        index = bisect_right(self._starts, ordinal)
        return _day_start(self._starts[index]) if index < len(self._starts) else None

    def match_end(self, wall: int) -> int | None:
        index = self._index(_day(wall))
        return wall if index is None else _day_start(self._ends[index] + 1)


class WorkdaysRule(WallRule):
    """Names every day whose ISO weekday (1 = Monday) is not a workday."""

    def __init__(self, workdays: frozenset[int]) -> None:
        if not workdays or not workdays <= set(range(1, 8)):
            raise ValueError("workdays must be a non-empty subset of 1-7")
        self._workdays = workdays

    def match(self, wall: int) -> str | None:
        weekday = _iso_weekday(_day(wall))
        return None if weekday in self._workdays else f"workdays ({_DAY_NAMES[weekday - 1]} is not a workday)"

    def next_match(self, wall: int) -> int | None:
        ordinal = _day(wall)
        for step in range(7):
            if _iso_weekday(ordinal + step) not in self._workdays:
                return wall if step == 0 else _day_start(ordinal + step)
        return None

    def match_end(self, wall: int) -> int | None:
        ordinal = _day(wall)
        for step in range(7):
            if _iso_weekday(ordinal + step) in self._workdays:
                return wall if step == 0 else _day_start(ordinal + step)
        raise AssertionError("unreachable: workdays is never empty")


class DayWindowsRule(WallRule):
    """Times of day, every day: half-open ``[start, end)`` second-of-day windows (end <= 86400)."""

    def __init__(self, windows: Sequence[tuple[int, int, str]]) -> None:
        for start, end, label in windows:
            if not 0 <= start < end <= DAY:
                raise ValueError(f"bad window {label}: {start}-{end}")
        self._labelled = sorted(windows)
        merged: list[list[int]] = []
        for start, end, _ in self._labelled:
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        self._merged = [(start, end) for start, end in merged]
        self._whole_day = self._merged == [(0, DAY)]

    def _window(self, second: int) -> tuple[int, int] | None:
        for start, end in self._merged:
            if start <= second < end:
                return start, end
        return None

    def match(self, wall: int) -> str | None:
        second = wall % DAY
        return next((label for start, end, label in self._labelled if start <= second < end), None)

    def next_match(self, wall: int) -> int | None:
        if not self._merged:
            return None
        second, day_start = wall % DAY, wall - wall % DAY
        if self._window(second) is not None:
            return wall
        later = [start for start, _ in self._merged if start > second]
        return day_start + later[0] if later else day_start + DAY + self._merged[0][0]

    def match_end(self, wall: int) -> int | None:
        if self._whole_day:
            return None
        second, day_start = wall % DAY, wall - wall % DAY
        window = self._window(second)
        if window is None:
            return wall
        if window[1] < DAY:
            return day_start + window[1]
        # Runs to midnight: continue with a window that starts at 00:00 the next day, if any.
        first = self._merged[0]
        return day_start + DAY + (first[1] if first[0] == 0 else 0)


class CronRule(WallRule):
    """Names the wall seconds a Quartz cron expression selects (its zone is ignored: walls)."""

    def __init__(self, expression: CronExpression, label: str) -> None:
        self._walls = CronExpression(expression.expression, "UTC")
        self._label = label
        fields = self._walls.fields
        self._seconds, self._minutes, self._hours = fields.seconds, fields.minutes, fields.hours
        self._months, self._years = fields.months, fields.years

    def match(self, wall: int) -> str | None:
        return self._label if self.next_match(wall) == wall else None

    def next_match(self, wall: int) -> int | None:
        found = self._walls.next_after_ms((wall - 1) * 1000)
        return None if found is None else found // 1000

    def _whole_month(self, year: int, month: int) -> bool:
        days = self._walls.days_in_month(year, month)
        whole = len(days) == _calendar.monthrange(year, month)[1]
        return whole and year in self._years and month in self._months

    def match_end(self, wall: int) -> int | None:
        # Finest field first: the first value after the current one that the field lacks ends the
        # match within the enclosing unit; a field that lacks some value ends it in the next unit;
        # a full field passes the question to the coarser one.
        levels = ((self._seconds, 60, 1), (self._minutes, 60, 60), (self._hours, 24, 3600))
        for _ in range(_MAX_CRON_STEPS):
            if self.next_match(wall) != wall:
                return wall
            for values, size, unit in levels:
                block = wall - wall % (size * unit)
                free = _first_missing(values, (wall - block) // unit + 1, size)
                if free is not None:
                    return block + free * unit
                if len(values) < size:
                    wall = block + size * unit
                    break
            else:
                # Whole days are named: step a day, or a whole month when every day of it is.
                today = date.fromordinal(_day(wall))
                if self._whole_month(today.year, today.month):
                    following = date(today.year + today.month // 12, today.month % 12 + 1, 1)
                    wall = _day_start(following.toordinal())
                else:
                    wall = wall - wall % DAY + DAY
        raise RuntimeError(f"cron rule {self._label} did not end within the cron year range")


def _first_missing(values: frozenset[int], start: int, stop: int) -> int | None:
    return next((v for v in range(start, stop) if v not in values), None)
