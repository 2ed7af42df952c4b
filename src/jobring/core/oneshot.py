"""One-shot schedules: fire once, at a given wall-clock time in a time zone, then never again.

``ONCE`` is a workflow schedule type (jobs keep XXL-JOB's NONE, CRON and FIX_RATE).
Its ``schedule_conf`` is an ISO 8601 date and time, ``2026-12-01T02:00`` or
``2026-12-01 02:00:00``, read in the schedule's time zone; with an offset
(``2026-12-01T02:00:00+08:00``, ``...Z``) the offset wins over the zone. Seconds at most (no
fractions). A wall time that the zone skips (a daylight-saving gap) is refused; one it
repeats (the hour after a clock goes back) is the first of the two.

:func:`workflow_schedule` builds the :class:`~jobring.core.schedule.Schedule` of any workflow
schedule type; a one-shot's ``next_fire_ms(t)`` is its instant while that is after ``t``, then
None, so the misfire rules of :func:`jobring.core.planning.decide_fire` apply unchanged: a
one-shot missed by more than the threshold (the admin was down) fires once now under
``FIRE_ONCE_NOW`` and is skipped under ``DO_NOTHING``; either way it is spent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone, tzinfo

from jobring.core.cron import resolve_zone
from jobring.core.schedule import Schedule, ScheduleError, parse_schedule

__all__ = ["ONCE", "OnceSchedule", "canonical_once", "parse_once", "workflow_schedule"]

ONCE = "ONCE"
_FORM = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2})(?::(\d{2}))?\s*(Z|[+-]\d{2}:?\d{2})?", re.IGNORECASE
)


@dataclass(frozen=True)
class OnceSchedule(Schedule):
    """Fires at ``at_ms`` (UTC epoch ms) and never again."""

    at_ms: int

    def next_fire_ms(self, after_ms: int) -> int | None:
        return self.at_ms if self.at_ms > after_ms else None


def _offset(text: str) -> tzinfo:
    if text.upper() == "Z":
        return UTC
    sign = -1 if text[0] == "-" else 1
    digits = text[1:].replace(":", "")
    hours, minutes = int(digits[:2]), int(digits[2:])
    if hours > 23 or minutes > 59:
        raise ScheduleError(f"schedule_conf: bad UTC offset {text!r}")
    return timezone(sign * timedelta(hours=hours, minutes=minutes))


def parse_once(conf: str, tz: str | tzinfo) -> OnceSchedule:
    """The one-shot of ``conf`` read in zone ``tz``; ScheduleError naming the field."""
    match = _FORM.fullmatch(conf.strip()) if isinstance(conf, str) else None
    if match is None:
        raise ScheduleError(f"schedule_conf: ONCE needs a date and time such as 2026-12-01T02:00:00, got "
                            f"{conf!r:.60}")
    year, month, day, hour, minute = (int(g) for g in match.groups()[:5])
    second = int(match.group(6) or 0)
    try:
        zone = _offset(match.group(7)) if match.group(7) else resolve_zone(tz)
    except ValueError as exc:
        if isinstance(exc, ScheduleError):
            raise
        raise ScheduleError(f"time_zone: {exc}") from None
    try:
        local = datetime(year, month, day, hour, minute, second, tzinfo=zone)
    except ValueError as exc:
        raise ScheduleError(f"schedule_conf: {exc}") from None
    back = local.astimezone(UTC).astimezone(zone)
    if back.replace(tzinfo=None) != local.replace(tzinfo=None):
        raise ScheduleError(f"schedule_conf: {local.replace(tzinfo=None).isoformat()} does not exist in "
                            f"{zone} (the clocks skip it)")
    return OnceSchedule(int(local.timestamp()) * 1000)


def canonical_once(conf: str) -> str:
    """``conf`` as stored: ``YYYY-MM-DDTHH:MM:SS`` and the offset as given (``+08:00``, ``Z``).
    Call it on a conf :func:`parse_once` accepted."""
    match = _FORM.fullmatch(conf.strip())
    assert match is not None
    y, mo, d, h, mi = match.groups()[:5]
    text = f"{y}-{mo}-{d}T{h}:{mi}:{match.group(6) or '00'}"
    offset = match.group(7)
    if offset:
        offset = "Z" if offset.upper() == "Z" else (offset if ":" in offset else f"{offset[:3]}:{offset[3:]}")
        text += offset
    return text


def workflow_schedule(schedule_type: str, conf: str | None, tz: str | tzinfo) -> Schedule:
    """The schedule of a workflow: ``ONCE`` here, the others as jobs' (ScheduleError)."""
    if schedule_type == ONCE:
        return parse_once(conf or "", tz)
    return parse_schedule(schedule_type, conf, tz)
