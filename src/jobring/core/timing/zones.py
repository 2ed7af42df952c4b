"""Time-zone arithmetic on whole epoch seconds: offsets, transitions, wall clock and instants.

A *wall* time is the local clock reading as seconds since 1970-01-01T00:00 local (a "local
epoch"), so that ``wall = instant + offset``. Between two transitions of a zone the offset is
constant and walls map one to one onto instants (a *segment*); a spring-forward transition
leaves a range of walls that no instant has (the gap), a fall-back transition shows a range
of walls twice (the overlap).

Transitions are found by probing the offset once a day and bisecting where it changes: in
the tz database no zone changes its offset twice within six days between 1970 and 2100 (the
closest pair is ~6.9 days apart), so a daily probe sees every change. Results are cached
per (zone, year).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, tzinfo
from functools import lru_cache

# The cron engine's bisection: smallest instant in (low, high] with the offset at ``high``.
from jobring.core.cron.expression import transition_instant

DAY = 86_400
_EPOCH = datetime(1970, 1, 1)
_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
FIRST_YEAR = 1970
# Transitions are looked up through this year; later the offset is taken as constant.
LAST_YEAR = 2100

_UTC_NAMES = frozenset({"UTC", "Etc/UTC", "Etc/UCT", "UCT", "Etc/Universal", "Universal", "Etc/Zulu", "Zulu"})


@dataclass(frozen=True, slots=True)
class Transition:
    """The zone's offset changes at instant ``at`` (the first second with the new offset)."""

    at: int
    before: int
    after: int

    @property
    def is_gap(self) -> bool:
        return self.after > self.before


@dataclass(frozen=True, slots=True)
class Segment:
    """Instants ``[start, end)`` with one offset; None for an unknown or open end."""

    start: int | None
    end: int | None
    offset: int


def is_fixed(zone: tzinfo) -> bool:
    """True for zones that are always UTC (no lookups needed)."""
    return zone is UTC or getattr(zone, "key", None) in _UTC_NAMES


def offset_at(zone: tzinfo, instant: int) -> int:
    """The zone's UTC offset in seconds at an instant (epoch seconds)."""
    delta = datetime.fromtimestamp(instant, zone).utcoffset()
    return 0 if delta is None else delta.days * DAY + delta.seconds


def wall_of(zone: tzinfo, instant: int) -> int:
    """The wall time (local epoch seconds) of an instant."""
    return instant + offset_at(zone, instant)


def naive_of_wall(wall: int) -> datetime:
    return _EPOCH + timedelta(seconds=wall)


def wall_of_naive(value: datetime) -> int:
    """Local epoch seconds of a naive wall-clock datetime (sub-seconds dropped)."""
    return (value.toordinal() - _EPOCH_ORDINAL) * DAY + value.hour * 3600 + value.minute * 60 + value.second


def day_of_wall(wall: int) -> date:
    return date.fromordinal(wall // DAY + _EPOCH_ORDINAL)


def wall_of_day(day: date) -> int:
    """The wall time of midnight at the start of ``day``."""
    return (day.toordinal() - _EPOCH_ORDINAL) * DAY


def wall_offsets(zone: tzinfo, wall: int) -> tuple[int, int]:
    """The offsets of the first and second reading of a wall time (PEP 495 ``fold`` 0 and 1).

    Equal for an ordinary wall time; first > second in an overlap; first < second in a gap.
    """
    naive = naive_of_wall(wall)
    first = naive.replace(tzinfo=zone).utcoffset()
    second = naive.replace(tzinfo=zone, fold=1).utcoffset()
    return _seconds(first), _seconds(second)


def instants_of_wall(zone: tzinfo, wall: int) -> tuple[int, ...]:
    """The instants showing a wall time: none (gap), one, or two (overlap, in order)."""
    first, second = wall_offsets(zone, wall)
    if first == second:
        return (wall - first,)
    if first > second:
        return (wall - first, wall - second)
    return ()


def instant_of_wall(zone: tzinfo, wall: int) -> int:
    """The first instant whose wall time is at or after ``wall``.

    An ordinary wall time maps to its instant, a repeated one to its first occurrence, one in
    a gap to the transition that ends the gap (the first valid time after it).
    """
    found = instants_of_wall(zone, wall)
    if found:
        return found[0]
    first, second = wall_offsets(zone, wall)
    transition = transition_instant(zone, wall - second, wall - first)
    return transition


def _seconds(delta: timedelta | None) -> int:
    return 0 if delta is None else delta.days * DAY + delta.seconds


def _year_start(year: int) -> int:
    return (date(year, 1, 1).toordinal() - _EPOCH_ORDINAL) * DAY


@lru_cache(maxsize=8192)
def transitions_in_year(zone: tzinfo, year: int) -> tuple[Transition, ...]:
    """The zone's offset changes with ``at`` in the UTC calendar year, in order."""
    if is_fixed(zone):
        return ()
    start, end = _year_start(year), _year_start(year + 1)
    found: list[Transition] = []
    probe = start - 1
    offset = offset_at(zone, probe)
    while probe < end - 1:
        following = min(probe + DAY, end - 1)
        next_offset = offset_at(zone, following)
        if next_offset != offset:
            at = transition_instant(zone, probe, following)
            found.append(Transition(at, offset, next_offset))
        probe, offset = following, next_offset
    return tuple(found)


def _year_of(instant: int) -> int:
    return datetime.fromtimestamp(instant, UTC).year


def next_transition(zone: tzinfo, after: int) -> Transition | None:
    """The first transition with ``at > after``, looking up to the end of :data:`LAST_YEAR`."""
    year = max(_year_of(after), FIRST_YEAR)
    while year <= LAST_YEAR:
        for transition in transitions_in_year(zone, year):
            if transition.at > after:
                return transition
        year += 1
    return None


def previous_transition(zone: tzinfo, at_or_before: int) -> Transition | None:
    """The last transition with ``at <= at_or_before``, looking back to :data:`FIRST_YEAR`."""
    year = min(_year_of(at_or_before), LAST_YEAR)
    while year >= FIRST_YEAR:
        for transition in reversed(transitions_in_year(zone, year)):
            if transition.at <= at_or_before:
                return transition
        year -= 1
    return None


def segment_at(zone: tzinfo, instant: int) -> Segment:
    """The segment (constant offset) holding ``instant``."""
    offset = offset_at(zone, instant)
    if is_fixed(zone):
        return Segment(None, None, offset)
    before = previous_transition(zone, instant)
    after = next_transition(zone, instant)
    return Segment(None if before is None else before.at, None if after is None else after.at, offset)
