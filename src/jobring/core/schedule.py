"""Schedule types of a job: when it fires by itself.

- ``NONE``: never by itself (only by hand, by API, as a child job or a retry);
  ``schedule_conf`` is ignored, as the reference does.
- ``CRON``: ``schedule_conf`` is a Quartz cron expression, evaluated in the
  given time zone (see ``jobring.core.cron``).
- ``FIX_RATE``: ``schedule_conf`` is a whole number of seconds N,
  1 <= N <= 31,536,000 (365 days); the next fire is N seconds after the given
  instant, as the reference computes it (from the previous planned fire time
  when the scheduler keeps up).

All instants are UTC epoch milliseconds; ``next_fire_ms(after_ms)`` is strictly
after ``after_ms`` or None when the schedule never fires again.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from datetime import tzinfo
from functools import lru_cache

from jobring.core.cron import CronExpression, CronParseError, resolve_zone
from jobring.core.enums import ScheduleType
from jobring.errors import JobringError

FIX_RATE_MIN_SECONDS = 1
FIX_RATE_MAX_SECONDS = 31_536_000
MAX_PREVIEW_COUNT = 1000


class ScheduleError(JobringError, ValueError):
    """An invalid schedule; the message starts with the offending field name."""


class Schedule(ABC):
    """When a job fires by itself."""

    schedule_type: ScheduleType

    @abstractmethod
    def next_fire_ms(self, after_ms: int) -> int | None:
        """The first fire time strictly after ``after_ms`` (UTC epoch ms), or None."""


@dataclass(frozen=True)
class NoSchedule(Schedule):
    schedule_type = ScheduleType.NONE

    def next_fire_ms(self, after_ms: int) -> int | None:
        return None


@dataclass(frozen=True)
class CronSchedule(Schedule):
    expression: CronExpression
    schedule_type = ScheduleType.CRON

    def next_fire_ms(self, after_ms: int) -> int | None:
        return self.expression.next_after_ms(after_ms)


@dataclass(frozen=True)
class FixRateSchedule(Schedule):
    interval_seconds: int
    schedule_type = ScheduleType.FIX_RATE

    def __post_init__(self) -> None:
        if not FIX_RATE_MIN_SECONDS <= self.interval_seconds <= FIX_RATE_MAX_SECONDS:
            raise ScheduleError(
                f"schedule_conf: FIX_RATE interval must be {FIX_RATE_MIN_SECONDS}-{FIX_RATE_MAX_SECONDS} "
                f"seconds, got {self.interval_seconds}"
            )

    def next_fire_ms(self, after_ms: int) -> int | None:
        return after_ms + self.interval_seconds * 1000


def _schedule_type(schedule_type: str) -> ScheduleType:
    if isinstance(schedule_type, ScheduleType):
        return schedule_type
    text = schedule_type.strip().upper() if isinstance(schedule_type, str) else ""
    try:
        return ScheduleType(text)
    except ValueError:
        allowed = ", ".join(t.value for t in ScheduleType)
        raise ScheduleError(f"schedule_type: must be one of {allowed}, got {schedule_type!r}") from None


def _fix_rate_seconds(conf: str) -> int:
    if not conf.isascii() or not conf.isdigit():
        raise ScheduleError(f"schedule_conf: FIX_RATE needs a whole number of seconds, got {conf!r}")
    return int(conf)


def parse_schedule(schedule_type: str, schedule_conf: str | None, tz: str | tzinfo) -> Schedule:
    """Validate and build a schedule; raises ScheduleError (a ValueError) naming the bad field."""
    kind = _schedule_type(schedule_type)
    if kind is ScheduleType.NONE:
        return NoSchedule()
    conf = (schedule_conf or "").strip()
    if not conf:
        raise ScheduleError(f"schedule_conf: required for schedule_type {kind.value}")
    if kind is ScheduleType.FIX_RATE:
        return FixRateSchedule(_fix_rate_seconds(conf))
    try:
        zone = resolve_zone(tz)
    except ValueError as exc:
        raise ScheduleError(f"time_zone: {exc}") from None
    try:
        return CronSchedule(_cron_expression(conf, zone))
    except CronParseError as exc:
        raise ScheduleError(f"schedule_conf: {exc}") from None


@lru_cache(maxsize=4096)
def _cron_expression(conf: str, zone: tzinfo) -> CronExpression:
    # The scheduler rebuilds schedules from stored rows on every pass; parsing once per
    # (expression, zone) keeps that cheap. CronExpression is immutable apart from its day memo.
    return CronExpression(conf, zone)


def next_fire_times(schedule: Schedule, after_ms: int, count: int) -> list[int]:
    """Up to ``count`` successive fire times after ``after_ms`` (fewer when the schedule ends)."""
    if not 0 <= count <= MAX_PREVIEW_COUNT:
        raise ValueError(f"count must be 0-{MAX_PREVIEW_COUNT}, got {count}")
    times: list[int] = []
    current = after_ms
    for _ in range(count):
        following = schedule.next_fire_ms(current)
        if following is None:
            break
        times.append(following)
        current = following
    return times
