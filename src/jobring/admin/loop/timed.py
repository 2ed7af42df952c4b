"""A job's schedule under its timing rules (calendars, validity window, run limit, jitter), as
the scheduling loop, the job service and the previews use it.

The loop works in *fire-time space*: :meth:`TimedSchedule.next_fire_ms` gives when the next fire
starts (a calendar ``move`` and jitter included), and that start time is the fire's identity
(its ``planned_time``), so every node computes the same one. The logical instant it stands for
(the timeline instant) is kept in memory for the next plan. Jobs without timing rules keep
their plain schedule: nothing here is on their fire path.
"""

from __future__ import annotations

import logging
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import orjson

from jobring.admin.loop.ports import Schedule
from jobring.core.schedule import CronSchedule, FixRateSchedule
from jobring.core.timing import (
    Calendar,
    DstCron,
    DstRules,
    PlanEnd,
    SkipKind,
    SkippedFire,
    TimingError,
    TimingRules,
    parse_calendar,
    parse_timing_rules,
    plan_next,
)
from jobring.core.timing.timeline import FixedRateTimeline, GridTimeline, Timeline

log = logging.getLogger(__name__)

# The timing keys the admin applies (every key of core.timing.rules); a stored key outside them
# is refused.
WIRED_KEYS = ("start_at", "end_at", "max_runs", "jitter_seconds", "calendars", "calendar_action",
              "params_template", "overlap", "catch_up", "dst")
_DEFAULTS: dict[str, object] = {"overlap": "allow_all", "dst": {"gap": "skip", "repeat": "second"},
                                "jitter_seconds": 0, "calendar_action": "skip"}
_CATCH_UP_KINDS = (SkipKind.CATCH_UP_WINDOW, SkipKind.CATCH_UP_ONCE, SkipKind.CATCH_UP_LIMIT,
                   SkipKind.NOT_CAUGHT_UP)
_MEMO = 512  # events remembered per job (a plan lists at most 100 skipped instants)
_REPLANS = 8  # plans in a row that ended at core's search limit before giving up


def timing_spec(text: str | None) -> dict[str, object] | None:
    """The stored timing JSON as a dict (None: no timing rules)."""
    if not text:
        return None
    spec = orjson.loads(text)
    if not isinstance(spec, dict):
        raise TimingError("timing", "must be an object")
    return spec or None


def calendar_names(text: str | None) -> list[str]:
    """The calendars a stored timing JSON names (unparseable: none)."""
    try:
        spec = timing_spec(text)
    except (ValueError, TimingError):
        return []
    names = (spec or {}).get("calendars")
    return [n for n in names if isinstance(n, str)] if isinstance(names, list) else []


def check_wired(spec: Mapping[str, object]) -> None:
    """TimingError for a key the admin does not apply yet."""
    for key in spec:
        if key not in WIRED_KEYS:
            raise TimingError(key, f"not available (expected {', '.join(WIRED_KEYS)})")


def compile_calendars(specs: Mapping[str, str]) -> dict[str, Calendar]:
    """Calendars by name from their stored JSON; one that no longer parses is left out (logged:
    it was validated when written)."""
    compiled: dict[str, Calendar] = {}
    for name, text in specs.items():
        try:
            compiled[name] = parse_calendar(orjson.loads(text))
        except (ValueError, TimingError) as exc:
            log.error("calendar %r cannot be read (%s); jobs using it are not scheduled", name, exc)
    return compiled


def timing_rules(text: str | None, calendars: Mapping[str, Calendar]) -> TimingRules | None:
    """A job's stored timing as rules (None: it has none); TimingError naming the field."""
    spec = timing_spec(text)
    if spec is None:
        return None
    check_wired(spec)
    return parse_timing_rules(spec, calendars)


@dataclass(frozen=True, slots=True)
class _Event:
    """An instant on the loop's heap: a fire (``skip`` None) or an excluded instant to record.
    ``logical``: the timeline instant it stands for; ``following``: the next event when known."""

    logical: int
    following: int | None = None
    skip: SkippedFire | None = None


def timeline_of(base: Schedule, dst: DstRules | None = None) -> Timeline:
    """The instants of ``base`` both ways: a cron expression's own (under the job's daylight-saving
    rules ``dst``); a FIX_RATE schedule's grid of its interval from the epoch (every 30 s at :00
    and :30). A plain FIX_RATE job counts its
    interval from its previous fire, but under timing rules a fire may start later than the
    instant it stands for (a move, jitter) and a node adopting the job knows only that start:
    a fixed grid keeps every node and every adoption on the same instants."""
    if isinstance(base, FixRateSchedule):
        return FixedRateTimeline(base.interval_seconds * 1000, 0)
    if dst is not None and not dst.is_quartz and isinstance(base, CronSchedule):
        return GridTimeline(DstCron(base.expression, dst).next_fire_ms)
    return GridTimeline(base.next_fire_ms)


class TimedSchedule:
    """``base`` under ``rules`` for job ``job_id``, in fire-time space.

    Its instants (what :meth:`next_fire_ms` gives) are *events*: fires (their start, after a
    move and jitter) and the instants a calendar excluded (the loop records those as
    ``skipped`` runs at their instant instead of sending them; see :meth:`skip_at`).
    ``counted_from``: the job's planned instant when it was adopted; ``runs_before``: its
    scheduled runs recorded before that instant; later fires are counted here (for
    ``max_runs``).
    """

    __slots__ = ("_job_id", "_rules", "_timeline", "_events", "_counted", "_counted_from", "_runs_before")

    def __init__(self, base: Schedule, rules: TimingRules, job_id: int, *, runs_before: int = 0,
                 counted_from: int = 0) -> None:
        self._timeline = timeline_of(base, rules.dst)
        self._rules = rules
        self._job_id = job_id
        self._events: dict[int, _Event] = {}
        self._counted: list[int] = []  # fire starts at or after counted_from planned here
        self._runs_before = runs_before
        self._counted_from = counted_from

    @property
    def rules(self) -> TimingRules:
        return self._rules

    @property
    def timeline(self) -> Timeline:
        return self._timeline

    @property
    def job_id(self) -> int:
        return self._job_id

    def runs_at(self, after_ms: int) -> int:
        """The job's scheduled runs counted for ``max_runs`` up to ``after_ms``."""
        return self._runs(after_ms)

    def count_fire(self, start_ms: int) -> None:
        """A fire planned outside :meth:`next_fire_ms` (a catch-up fire) counts for ``max_runs``."""
        self._count(start_ms)

    def next_fire_ms(self, after_ms: int) -> int | None:
        """The first event after ``after_ms`` (None: the schedule ended)."""
        known = self._events.get(after_ms)
        if known is not None:
            if known.following is not None:
                return known.following
            following = self._plan(known.logical, after_ms)
            if following is not None:
                self._events[after_ms] = _Event(known.logical, following, known.skip)
            return following
        # Any other time: plan from the timeline instant at or before it (a fire moved or
        # delayed past ``after_ms`` may stand for it), and take the first event after it.
        last = self._timeline.previous_before(after_ms + 1)
        cursor = after_ms if last is None else last - 1
        for _ in range(_REPLANS):
            instant = self._plan(cursor, after_ms)
            # Walk this plan's events to the first after ``after_ms``.
            while instant is not None and instant <= after_ms:
                event = self._events.get(instant)
                if event is None or event.following is None:
                    # The plan's fire (or a forgotten event): plan on from its logical instant.
                    cursor = instant if event is None else event.logical
                    break
                instant = event.following
            else:
                return instant
        return None

    def skip_at(self, instant_ms: int) -> SkippedFire | None:
        """The excluded instant this event stands for (None: a fire, or not an event of it)."""
        event = self._events.get(instant_ms)
        return None if event is None else event.skip

    def logical_of(self, instant_ms: int) -> int | None:
        """The logical instant of an event this schedule planned (None: not remembered)."""
        event = self._events.get(instant_ms)
        return None if event is None else event.logical

    def _runs(self, after_ms: int) -> int:
        return self._runs_before + bisect_right(self._counted, after_ms)

    def _plan(self, cursor: int, after_ms: int) -> int | None:
        """Plan from the logical ``cursor``; remember the events; return the first one."""
        rules = self._rules
        for _ in range(_REPLANS):
            plan = plan_next(self._timeline, rules, self._job_id, cursor, self._runs(after_ms))
            fire = plan.fire
            times = [s.logical_ms for s in plan.skipped]
            if fire is not None:
                times.append(fire.fire_at_ms)
            for i, skip in enumerate(plan.skipped):
                following = times[i + 1] if i + 1 < len(times) else None
                self._remember(skip.logical_ms, _Event(skip.logical_ms, following, skip))
            if fire is not None:
                self._remember(fire.fire_at_ms, _Event(fire.logical_ms))
                self._count(fire.fire_at_ms)
            if times:
                return times[0]
            if plan.end is not PlanEnd.SEARCH_LIMIT:
                return None
            cursor = plan.resume_after_ms
        return None

    def _remember(self, instant: int, event: _Event) -> None:
        events = self._events
        if instant in events:
            return
        if len(events) >= _MEMO:
            del events[next(iter(events))]
        events[instant] = event

    def _count(self, start: int) -> None:
        if self._rules.max_runs is None or start < self._counted_from:
            return
        counted = self._counted
        if not counted or start > counted[-1]:
            counted.append(start)
            if len(counted) > _MEMO:
                # Fires far behind are no longer asked about: fold them into the count.
                fold = len(counted) - _MEMO // 2
                self._runs_before += fold
                del counted[:fold]


def skip_message(skip: SkippedFire) -> str:
    """A skipped run's trigger message (core.runstate reads ``skipped by ...``)."""
    if skip.reason.kind in _CATCH_UP_KINDS:
        return f"skipped by catch-up: {skip.reason.text}"
    return f"skipped by {skip.reason.text}"


def wrap(base: Schedule, rules: TimingRules | None, job_id: int, *, runs_before: int = 0,
         counted_from: int = 0) -> Schedule:
    """``base`` itself without rules, else its :class:`TimedSchedule`."""
    if rules is None:
        return base
    return TimedSchedule(base, rules, job_id, runs_before=runs_before, counted_from=counted_from)


def planned_fires(schedule: Schedule, after_ms: int, count: int) -> Sequence[int]:
    """The next ``count`` fire starts of a (timed or plain) schedule."""
    starts: list[int] = []
    cursor = after_ms
    while len(starts) < count:
        nxt = schedule.next_fire_ms(cursor)
        if nxt is None:
            break
        starts.append(nxt)
        cursor = nxt
    return starts


def normalized_timing(rules: TimingRules) -> dict[str, object] | None:
    """The stored form of ``rules``: the wired keys that differ from their defaults (None:
    nothing left, the job has no timing rules)."""
    spec = rules.to_spec()
    kept: dict[str, object] = {}
    for key in WIRED_KEYS:
        value = spec.get(key)
        if value is None or value == [] or value is False or value == _DEFAULTS.get(key):
            continue
        if key == "calendar_action" and not spec.get("calendars"):
            continue
        kept[key] = value
    return kept or None
