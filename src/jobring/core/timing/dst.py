"""Daylight-saving rules per job: what a cron wall time does in a gap or an overlap.

=================  ======================================================================
rule               meaning
=================  ======================================================================
gap ``skip``       a wall time that does not exist (spring forward) does not fire (default)
gap ``next_valid`` it fires at the first valid instant after the gap, the transition itself;
                   several missing wall times of one gap fire once there
repeat ``first``   a wall time shown twice (fall back) fires at its first occurrence only
repeat ``second``  ... at its second occurrence only (default)
repeat ``both``    ... at both occurrences
=================  ======================================================================

The default pair (``skip``, ``second``) is exactly the Quartz behaviour of
:mod:`jobring.core.cron` and is computed by it, bit for bit, including one Quartz quirk: a
search that starts inside the first pass of a repeated hour resumes on the wall clock and so
does not fire the second-pass occurrences of wall times it has already passed (from 01:40 EDT,
``0 */15 * * * ?`` next fires 01:45 EST, not 01:00 EST). Every other pair, and the default pair
with ``quartz_compatible=False``, follows the rules above exactly: the next fire is the first
instant, strictly after the given one, that the rules select.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from jobring.core.cron import MAX_YEAR, MIN_YEAR, CronExpression
from jobring.core.timing.errors import TimingError, parse_choice
from jobring.core.timing.zones import Segment, offset_at, segment_at, wall_offsets

# Every loop round either returns or moves past one transition (or one repeated range).
_MAX_ROUNDS = 4 * (MAX_YEAR - MIN_YEAR + 2) + 8


class DstGap(StrEnum):
    SKIP = "skip"
    NEXT_VALID = "next_valid"


class DstRepeat(StrEnum):
    FIRST = "first"
    SECOND = "second"
    BOTH = "both"


@dataclass(frozen=True, slots=True)
class DstRules:
    """A job's daylight-saving rules (defaults: Quartz's)."""

    gap: DstGap = DstGap.SKIP
    repeat: DstRepeat = DstRepeat.SECOND

    @property
    def is_quartz(self) -> bool:
        return self.gap is DstGap.SKIP and self.repeat is DstRepeat.SECOND

    def to_spec(self) -> dict[str, str]:
        return {"gap": self.gap.value, "repeat": self.repeat.value}


def parse_dst_rules(spec: Mapping[str, object] | None, field: str = "dst") -> DstRules:
    """``{"gap": "skip"|"next_valid", "repeat": "first"|"second"|"both"}``; missing keys default."""
    if spec is None:
        return DstRules()
    if not isinstance(spec, Mapping):
        raise TimingError(field, "must be an object with 'gap' and/or 'repeat'")
    unknown = sorted(set(spec) - {"gap", "repeat"})
    if unknown:
        raise TimingError(f"{field}.{unknown[0]}", "unknown key (expected 'gap' or 'repeat')")
    gap = parse_choice(DstGap, spec.get("gap", DstGap.SKIP.value), f"{field}.gap")
    repeat = parse_choice(DstRepeat, spec.get("repeat", DstRepeat.SECOND.value), f"{field}.repeat")
    return DstRules(gap, repeat)


class DstCron:
    """A cron expression in its zone with daylight-saving rules; ``next_fire_ms`` is a NextFire."""

    __slots__ = ("_quartz", "_walls", "expression", "rules")

    def __init__(
        self, expression: CronExpression, rules: DstRules, *, quartz_compatible: bool = True
    ) -> None:
        self.expression = expression
        self.rules = rules
        self._quartz = rules.is_quartz and quartz_compatible
        # The same fields evaluated in UTC enumerate wall times (local epoch seconds) directly.
        self._walls = CronExpression(expression.expression, "UTC")

    def __repr__(self) -> str:
        return f"DstCron({self.expression!r}, {self.rules!r})"

    def next_fire_ms(self, after_ms: int) -> int | None:
        """The first fire strictly after ``after_ms`` (epoch ms), or None."""
        if self._quartz:
            return self.expression.next_after_ms(after_ms)
        found = self._next_second(after_ms // 1000)
        return None if found is None else found * 1000

    def _match_from(self, wall: int) -> int | None:
        """The first wall time at or after ``wall`` that the expression selects."""
        found = self._walls.next_after_ms((wall - 1) * 1000)
        return None if found is None else found // 1000

    def _next_second(self, after: int) -> int | None:
        zone = self.expression.zone
        start = after + 1
        for _ in range(_MAX_ROUNDS):
            segment = segment_at(zone, start)
            if start == segment.start and self._gap_fires_at(segment.start, segment.offset):
                return start  # a search from just before a transition: the gap fires at it
            wall = self._match_from(start + segment.offset)
            if wall is None:
                return None
            candidate = wall - segment.offset
            if segment.end is None or candidate < segment.end:
                resume = self._repeat_resume(wall, segment)
                if resume is None:
                    return candidate
                start = resume
                continue
            # Nothing left in this segment; a gap at its end may fire at the transition.
            if self._gap_fires_at(segment.end, offset_at(zone, segment.end)):
                return segment.end
            start = segment.end
        raise RuntimeError(f"DST search for {self.expression!r} did not settle after {after}")

    def _gap_fires_at(self, transition: int, offset_after: int) -> bool:
        """Whether, under ``next_valid``, a wall time skipped by a gap ending at ``transition``
        fires there."""
        if self.rules.gap is not DstGap.NEXT_VALID:
            return False
        offset_before = offset_at(self.expression.zone, transition - 1)
        if offset_after <= offset_before:
            return False
        in_gap = self._match_from(transition + offset_before)
        return in_gap is not None and in_gap < transition + offset_after

    def _repeat_resume(self, wall: int, segment: Segment) -> int | None:
        """None when the wall time fires in this segment; else the instant to resume from."""
        first, second = wall_offsets(self.expression.zone, wall)
        if first <= second or self.rules.repeat is DstRepeat.BOTH:
            return None
        is_first = segment.offset == first
        if is_first == (self.rules.repeat is DstRepeat.FIRST):
            return None
        if is_first:
            # The rest of this first pass is repeated: continue with the second pass.
            assert segment.end is not None
            return segment.end
        # Second pass: skip the repeated range, to the first wall time shown once.
        assert segment.start is not None
        return segment.start + (first - second)
