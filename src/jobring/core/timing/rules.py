"""A job's timing rules and their validation: validity window, run limit, jitter, calendars,
calendar action, DST rules, catch-up, overlap policy; and the note of a pause.

The JSON spec (every key optional)::

    {"start_at": "2026-01-01T00:00:00Z", "end_at": "2026-12-31T23:59:59Z", "max_runs": 10,
     "jitter_seconds": 30, "calendars": ["cn-holidays"], "calendar_action": "skip",
     "dst": {"gap": "skip", "repeat": "second"},
     "catch_up": {"window_seconds": 3600, "mode": "each", "limit": 100},
     "overlap": "allow_all", "params_template": true}

Instants are ISO 8601 with an offset (or ``Z``) or epoch milliseconds. Both ends of the
validity window are included.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum

from jobring.core.timing.calendars import Calendar, CalendarSet
from jobring.core.timing.dst import DstRules, parse_dst_rules
from jobring.core.timing.errors import TimingError, parse_choice
from jobring.core.timing.overlap import OverlapPolicy

MAX_JITTER_SECONDS = 86_400
MAX_RUNS_LIMIT = 1_000_000_000
MIN_CATCH_UP_WINDOW_SECONDS = 10
MAX_CATCH_UP_WINDOW_SECONDS = 366 * 86_400
MAX_CATCH_UP_LIMIT = 1_000
DEFAULT_CATCH_UP_LIMIT = 100
MAX_CALENDARS_PER_JOB = 16
MAX_PAUSE_REASON = 500
_KEYS = (
    "start_at",
    "end_at",
    "max_runs",
    "jitter_seconds",
    "calendars",
    "calendar_action",
    "dst",
    "catch_up",
    "overlap",
    "params_template",
)


class CalendarAction(StrEnum):
    """What happens to a fire at a time a calendar excludes."""

    SKIP = "skip"
    MOVE = "move"


class CatchUpMode(StrEnum):
    EACH = "each"
    ONCE = "once"


@dataclass(frozen=True, slots=True)
class CatchUpRules:
    """Missed instants within ``window_ms`` of now fire (each, or only the latest); older ones
    are skipped. ``limit`` caps the fires of one catch-up."""

    window_ms: int
    mode: CatchUpMode = CatchUpMode.EACH
    limit: int = DEFAULT_CATCH_UP_LIMIT


@dataclass(frozen=True)
class TimingRules:
    start_at_ms: int | None = None
    end_at_ms: int | None = None
    max_runs: int | None = None
    jitter_ms: int = 0
    calendars: CalendarSet = field(default_factory=CalendarSet)
    calendar_action: CalendarAction = CalendarAction.SKIP
    dst: DstRules = field(default_factory=DstRules)
    catch_up: CatchUpRules | None = None
    overlap: OverlapPolicy = OverlapPolicy.ALLOW_ALL
    # The job's executor params are a template over its logical time (``logical_date`` ...).
    params_template: bool = False

    def to_spec(self) -> dict[str, object]:
        spec: dict[str, object] = {
            "calendar_action": self.calendar_action.value,
            "dst": self.dst.to_spec(),
            "overlap": self.overlap.value,
            "jitter_seconds": self.jitter_ms // 1000,
            "calendars": [c.name for c in self.calendars.calendars],
            "params_template": self.params_template,
        }
        if self.start_at_ms is not None:
            spec["start_at"] = _iso(self.start_at_ms)
        if self.end_at_ms is not None:
            spec["end_at"] = _iso(self.end_at_ms)
        if self.max_runs is not None:
            spec["max_runs"] = self.max_runs
        if self.catch_up is not None:
            spec["catch_up"] = {
                "window_seconds": self.catch_up.window_ms // 1000,
                "mode": self.catch_up.mode.value,
                "limit": self.catch_up.limit,
            }
        return spec


def _iso(epoch_ms: int) -> str:
    return (
        datetime.fromtimestamp(epoch_ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    )


def parse_instant_ms(value: object, field_name: str) -> int:
    """Epoch ms from an int or ISO 8601 text with an offset."""
    if isinstance(value, bool):
        raise TimingError(field_name, "must be an ISO 8601 date-time with an offset, or epoch milliseconds")
    if isinstance(value, int):
        if not 0 <= value <= 4_102_444_800_000:  # 2100-01-01
            raise TimingError(field_name, "epoch milliseconds must be within 1970-2099")
        return value
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            parsed = None
        if parsed is not None and parsed.utcoffset() is not None:
            return int(parsed.timestamp() * 1000)
        if parsed is not None:
            raise TimingError(field_name, f"needs a UTC offset or Z: {value!r}")
    raise TimingError(
        field_name, f"must be an ISO 8601 date-time with an offset, or epoch milliseconds: {value!r}"
    )


def _whole(value: object, field_name: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise TimingError(field_name, f"must be a whole number {low}-{high}, got {value!r}")
    return value


def _parse_catch_up(value: object) -> CatchUpRules | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise TimingError("catch_up", "must be an object with window_seconds, mode, limit")
    unknown = sorted(set(value) - {"window_seconds", "mode", "limit"})
    if unknown:
        raise TimingError(f"catch_up.{unknown[0]}", "unknown key")
    if "window_seconds" not in value:
        raise TimingError("catch_up.window_seconds", "required")
    window = _whole(
        value["window_seconds"],
        "catch_up.window_seconds",
        MIN_CATCH_UP_WINDOW_SECONDS,
        MAX_CATCH_UP_WINDOW_SECONDS,
    )
    mode = parse_choice(CatchUpMode, value.get("mode", "each"), "catch_up.mode")
    limit = _whole(value.get("limit", DEFAULT_CATCH_UP_LIMIT), "catch_up.limit", 1, MAX_CATCH_UP_LIMIT)
    return CatchUpRules(window * 1000, mode, limit)


def _parse_calendars(value: object, known: Mapping[str, Calendar]) -> CalendarSet:
    if value is None:
        return CalendarSet()
    if not isinstance(value, list | tuple):
        raise TimingError("calendars", "must be a list of calendar names")
    if len(value) > MAX_CALENDARS_PER_JOB:
        raise TimingError("calendars", f"at most {MAX_CALENDARS_PER_JOB} calendars")
    chosen: list[Calendar] = []
    for i, name in enumerate(value):
        calendar = known.get(name) if isinstance(name, str) else None
        if calendar is None:
            raise TimingError(f"calendars[{i}]", f"unknown calendar {name!r}")
        if calendar in chosen:
            raise TimingError(f"calendars[{i}]", f"{name!r} is listed twice")
        chosen.append(calendar)
    return CalendarSet(tuple(chosen))


def parse_timing_rules(spec: Mapping[str, object] | None, calendars: Mapping[str, Calendar]) -> TimingRules:
    """Validate a job's timing spec; ``calendars`` maps the names a job may reference."""
    if spec is None:
        return TimingRules()
    if not isinstance(spec, Mapping):
        raise TimingError("timing", "must be an object")
    unknown = sorted(set(spec) - set(_KEYS))
    if unknown:
        raise TimingError(unknown[0], f"unknown key (expected {', '.join(_KEYS)})")
    start = None if spec.get("start_at") is None else parse_instant_ms(spec["start_at"], "start_at")
    end = None if spec.get("end_at") is None else parse_instant_ms(spec["end_at"], "end_at")
    if start is not None and end is not None and end < start:
        raise TimingError("end_at", "is before start_at")
    max_runs = (
        None if spec.get("max_runs") is None else _whole(spec["max_runs"], "max_runs", 1, MAX_RUNS_LIMIT)
    )
    jitter = _whole(spec.get("jitter_seconds", 0), "jitter_seconds", 0, MAX_JITTER_SECONDS)
    dst_spec = spec.get("dst")
    if dst_spec is not None and not isinstance(dst_spec, Mapping):
        raise TimingError("dst", "must be an object with 'gap' and/or 'repeat'")
    return TimingRules(
        start_at_ms=start,
        end_at_ms=end,
        max_runs=max_runs,
        jitter_ms=jitter * 1000,
        calendars=_parse_calendars(spec.get("calendars"), calendars),
        calendar_action=parse_choice(CalendarAction, spec.get("calendar_action", "skip"), "calendar_action"),
        dst=parse_dst_rules(dst_spec),
        catch_up=_parse_catch_up(spec.get("catch_up")),
        overlap=parse_choice(OverlapPolicy, spec.get("overlap", OverlapPolicy.ALLOW_ALL.value), "overlap"),
        params_template=_flag(spec.get("params_template", False), "params_template"),
    )


def _flag(value: object, field_name: str) -> bool:
    if not isinstance(value, bool):
        raise TimingError(field_name, "must be true or false")
    return value


@dataclass(frozen=True, slots=True)
class PauseNote:
    """Who paused a job, why, and when (shown in the console)."""

    by: str
    reason: str
    at_ms: int


def parse_pause_note(by: object, reason: object, at_ms: int) -> PauseNote:
    """Validate a pause note: ``by`` is the acting user, ``reason`` 0-500 characters, one line."""
    if not isinstance(by, str) or not by.strip():
        raise TimingError("by", "must name who pauses the job")
    if reason is None:
        reason = ""
    if not isinstance(reason, str):
        raise TimingError("reason", "must be text")
    text = " ".join(reason.split())
    if len(text) > MAX_PAUSE_REASON:
        raise TimingError("reason", f"at most {MAX_PAUSE_REASON} characters, got {len(text)}")
    if any(not ch.isprintable() for ch in text):
        raise TimingError("reason", "must not contain control characters")
    return PauseNote(by.strip(), text, at_ms)
